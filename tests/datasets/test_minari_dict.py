"""Minari datasets with Dict observation spaces stay dict observations:
offrl -> Minari -> offrl keeps the keys and values on both backends, a
stored Dict space (in any key order, nested too) is read by key, and a
given Dict space must have the dataset's keys."""

from __future__ import annotations

import json

import gymnasium
import h5py
import numpy as np
import pytest

from offrl.dataset import MDPDataset
from offrl.datasets import get_minari, to_minari

pytest.importorskip("pyarrow")

FORMATS = ["hdf5", "arrow"]


def _dict_dataset(keys=("state", "camera")) -> MDPDataset:
    rng = np.random.default_rng(0)
    n = 14
    shapes = {"state": (3,), "camera": (1, 4, 4), "arm/joints": (2,), "arm/speed": (1,)}
    obs = {}
    for key in keys:
        if key == "camera":
            obs[key] = rng.integers(0, 256, size=(n,) + shapes[key], dtype=np.uint8)
        else:
            obs[key] = rng.normal(size=(n,) + shapes[key]).astype(np.float32)
    terminals, timeouts = np.zeros(n), np.zeros(n)
    terminals[4], timeouts[9] = 1, 1
    next_obs = {k: np.roll(v, -1, axis=0) for k, v in obs.items()}
    return MDPDataset(obs, rng.integers(0, 3, n), rng.normal(size=n), terminals, timeouts, action_size=3,
                      next_observations=next_obs)


def _assert_same_by_key(x, y) -> None:
    if not isinstance(x, dict):  # array observations
        np.testing.assert_array_equal(x, y)
        return
    assert isinstance(y, dict) and list(x) == list(y)
    for key in x:
        np.testing.assert_array_equal(x[key], y[key], err_msg=key)


def _assert_same(a: MDPDataset, b: MDPDataset) -> None:
    assert a.dataset_info.observation_signature == b.dataset_info.observation_signature
    assert [e.size() for e in a.episodes] == [e.size() for e in b.episodes]
    for x, y in zip(a.episodes, b.episodes):
        _assert_same_by_key(x.observations, y.observations)
        if x.final_observation is None:
            assert y.final_observation is None or not x.terminated
        else:
            _assert_same_by_key(x.final_observation, y.final_observation)
        np.testing.assert_array_equal(x.actions, y.actions)


@pytest.mark.parametrize("data_format", FORMATS)
@pytest.mark.parametrize("keys", [("state", "camera"), ("state", "arm/joints", "arm/speed")])
def test_round_trip_keeps_keys(tmp_path, data_format, keys):
    original = _dict_dataset(keys)
    folder = to_minari(original, tmp_path / "dict-v0", data_format=data_format)
    space = json.loads((folder / "data" / "metadata.json").read_text())["observation_space"]
    space = json.loads(space) if isinstance(space, str) else space
    assert space["type"] == "Dict"
    if "arm/joints" in keys:
        assert space["subspaces"]["arm"]["type"] == "Dict"
        assert set(space["subspaces"]["arm"]["subspaces"]) == {"joints", "speed"}
    loaded, _ = get_minari(folder)
    assert loaded.dataset_info.observation_signature.keys == tuple(sorted(keys))
    _assert_same(original, loaded)


def test_a_stored_dict_space_in_any_key_order_is_read_by_key(tmp_path):
    original = _dict_dataset(("state", "camera"))
    space = gymnasium.spaces.Dict(
        {"state": gymnasium.spaces.Box(-np.inf, np.inf, (3,), np.float32),
         "camera": gymnasium.spaces.Box(0, 255, (1, 4, 4), np.uint8)}
    )
    folder = to_minari(original, tmp_path / "d-v0", observation_space=space, action_space=gymnasium.spaces.Discrete(3))
    metadata_path = folder / "data" / "metadata.json"
    metadata = json.loads(metadata_path.read_text())
    stored = json.loads(metadata["observation_space"]) if isinstance(metadata["observation_space"], str) else metadata["observation_space"]
    # put the keys in reverse order in the stored description
    stored["subspaces"] = dict(reversed(list(stored["subspaces"].items())))
    metadata["observation_space"] = json.dumps(stored)
    metadata_path.write_text(json.dumps(metadata))
    loaded, _ = get_minari(folder)
    assert loaded.dataset_info.observation_signature.keys == ("camera", "state")
    _assert_same(original, loaded)
    with h5py.File(folder / "data" / "main_data.hdf5", "r") as h5:
        np.testing.assert_array_equal(h5["episode_0/observations/state"][:5], original.episodes[0].observations["state"])


def test_a_given_dict_space_must_have_the_keys(tmp_path):
    original = _dict_dataset(("state", "camera"))
    space = gymnasium.spaces.Dict(
        {"state": gymnasium.spaces.Box(-1, 1, (3,)), "image": gymnasium.spaces.Box(0, 255, (1, 4, 4), np.uint8)}
    )
    with pytest.raises(ValueError, match="observation_space has no key 'camera'"):
        to_minari(original, tmp_path / "bad-v0", observation_space=space)


class _GoalEnv(gymnasium.Env):
    """A goal-conditioned env: Dict(observation, desired_goal, achieved_goal)."""

    def __init__(self) -> None:
        box = lambda n: gymnasium.spaces.Box(-np.inf, np.inf, (n,), np.float32)  # noqa: E731
        self.observation_space = gymnasium.spaces.Dict(
            {"observation": box(3), "desired_goal": box(2), "achieved_goal": box(2)})
        self.action_space = gymnasium.spaces.Discrete(3)

    def reset(self, seed=None, options=None):
        return {"observation": np.ones(3, np.float32), "desired_goal": np.full(2, 2.0, np.float32),
                "achieved_goal": np.zeros(2, np.float32)}, {}


def _goal_dataset(nested: bool) -> MDPDataset:
    rng = np.random.default_rng(1)
    n = 14
    obs = {"observation": rng.normal(size=(n, 3)).astype(np.float32),
           "achieved_goal": rng.normal(size=(n, 2)).astype(np.float32)}
    if nested:
        obs["desired_goal/b"] = rng.normal(size=(n, 1)).astype(np.float32)
        obs["desired_goal/a"] = rng.normal(size=(n, 2)).astype(np.float32)
    else:
        obs["desired_goal"] = rng.normal(size=(n, 2)).astype(np.float32)
    terminals, timeouts = np.zeros(n), np.zeros(n)
    terminals[4], timeouts[9] = 1, 1
    return MDPDataset(obs, rng.integers(0, 3, n), rng.normal(size=n), terminals, timeouts, action_size=3,
                      next_observations={k: np.roll(v, -1, axis=0) for k, v in obs.items()})


@pytest.mark.parametrize("data_format", FORMATS)
@pytest.mark.parametrize("nested", [False, True])
@pytest.mark.parametrize("stream", [False, True])
def test_tuple_observation_gives_d3rlpys_goal_conditioned_forms(tmp_path, data_format, nested, stream):
    original = _goal_dataset(nested)
    folder = to_minari(original, tmp_path / "goal-v0", data_format=data_format)
    as_dict, _ = get_minari(folder, load_env=False)
    keys = as_dict.dataset_info.observation_signature.keys
    goal_keys = ["desired_goal/a", "desired_goal/b"] if nested else ["desired_goal"]
    for i, (form, want_shapes) in enumerate(((False, [(5 if not nested else 6,)]),
                                             (True, [(3,), (2 if not nested else 3,)]))):
        target = tmp_path / f"disk{i}" if stream else None
        dataset, env = get_minari(folder, None, None, None, form, load_env=False, to=target)
        assert env is None
        assert dataset.dataset_info.observation_signature.keys is None
        assert [tuple(s) for s in dataset.dataset_info.observation_signature.shape] == want_shapes
        for e_dict, e in zip(as_dict.episodes, dataset.episodes):
            parts = e_dict.observations
            assert list(parts) == list(keys)
            goal = np.concatenate([parts[k] for k in goal_keys], axis=1)  # a dict goal in sorted key order
            if form:
                np.testing.assert_array_equal(e.observations[0], parts["observation"])
                np.testing.assert_array_equal(e.observations[1], goal)
            else:
                np.testing.assert_array_equal(e.observations, np.concatenate([parts["observation"], goal], axis=1))
            np.testing.assert_array_equal(e.actions, e_dict.actions)


def test_tuple_observation_wraps_the_env_and_refuses_other_spaces(tmp_path, monkeypatch):
    import offrl.datasets.minari as minari_module

    folder = to_minari(_goal_dataset(False), tmp_path / "goal-v0")
    monkeypatch.setattr(minari_module, "_recover_env", lambda *args: _GoalEnv())
    _, env = get_minari(folder, tuple_observation=False)
    observation, _ = env.reset()
    np.testing.assert_array_equal(observation, [1, 1, 1, 2, 2])
    _, env = get_minari(folder, tuple_observation=True)
    observation, _ = env.reset()
    np.testing.assert_array_equal(observation[1], [2, 2])
    _, env = get_minari(folder)  # offrl's default: the Dict space as it is
    assert isinstance(env.observation_space, gymnasium.spaces.Dict)
    other = to_minari(_dict_dataset(("state", "camera")), tmp_path / "dict-v0")
    with pytest.raises(ValueError, match=r"tuple_observation=True reads a goal-conditioned Dict .* members \['camera', 'state'\]"):
        get_minari(other, tuple_observation=True, load_env=False)
    with pytest.raises(TypeError, match="tuple_observation must be None or a bool"):
        get_minari(other, tuple_observation="yes", load_env=False)


def test_tuple_observation_is_ignored_for_a_box_space(tmp_path):
    rng = np.random.default_rng(2)
    plain = MDPDataset(rng.normal(size=(6, 3)).astype(np.float32), rng.integers(0, 2, 6), np.ones(6),
                       np.array([0, 0, 1, 0, 0, 1]), action_size=2)
    folder = to_minari(plain, tmp_path / "box-v0")
    a, _ = get_minari(folder, load_env=False)
    b, _ = get_minari(folder, tuple_observation=True, load_env=False)
    _assert_same(a, b)
