"""Minari format: offrl -> Minari -> offrl round trips on both backends, files
written here with h5py / pyarrow following Minari's published layout, env
recovery, and errors that name the file, the episode and the key."""

from __future__ import annotations

import json
import re

import gymnasium
import h5py
import numpy as np
import pytest

from offrl.dataset import MDPDataset
from offrl.datasets import get_minari, to_minari

pa = pytest.importorskip("pyarrow")  # the `minari` extra; in the test extra too
import pyarrow.ipc  # noqa: E402

FORMATS = ["hdf5", "arrow"]


# ------------------------------------------------------------ round trips


def _flags(n, terminal_at=(), timeout_at=()):
    terminals, timeouts = np.zeros(n), np.zeros(n)
    terminals[list(terminal_at)] = 1
    timeouts[list(timeout_at)] = 1
    return terminals, timeouts


def _discrete_with_finals():
    n = 12
    obs = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    terminals, timeouts = _flags(n, [3], [7])
    probs = np.linspace(0.1, 1.0, n)
    return MDPDataset(obs, np.arange(n) % 3, np.arange(n) * 0.5, terminals, timeouts,
                      next_observations=obs + 1000, behaviour_probabilities=probs, action_size=4)


def _continuous_without_finals():
    n = 9
    rng = np.random.default_rng(1)
    terminals, timeouts = _flags(n, [], [4])  # two truncated episodes, no final observations
    return MDPDataset(rng.standard_normal((n, 2)), rng.uniform(-1, 1, (n, 3)), rng.standard_normal(n),
                      terminals, timeouts)


def _tuple_observations():
    n = 8
    image = (np.arange(n * 2 * 2 * 3) % 256).astype(np.uint8).reshape(n, 2, 2, 3)
    vector = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    terminals, _ = _flags(n, [2])
    return MDPDataset([image, vector], np.arange(n) % 2, np.ones(n), terminals,
                      next_observations=[image // 2, vector - 7])


KINDS = {"discrete": _discrete_with_finals, "continuous": _continuous_without_finals, "tuple": _tuple_observations}


def _columns(obs):
    return list(obs) if isinstance(obs, (list, tuple)) else [obs]


def assert_same(a, b):
    assert a.size() == b.size()
    assert a.transition_count == b.transition_count
    assert a.action_space == b.action_space and a.action_size == b.action_size
    for x, y in zip(a.episodes, b.episodes):
        for cx, cy in zip(_columns(x.observations), _columns(y.observations)):
            assert cx.dtype == cy.dtype
            np.testing.assert_array_equal(cx, cy)
        np.testing.assert_array_equal(x.actions, y.actions)
        np.testing.assert_array_equal(x.rewards, y.rewards)
        assert x.terminated == y.terminated
        assert (x.final_observation is None) == (y.final_observation is None)
        if x.final_observation is not None:
            for fx, fy in zip(_columns(x.final_observation), _columns(y.final_observation)):
                np.testing.assert_array_equal(fx, fy)
    if a.behaviour_probabilities is None:
        assert b.behaviour_probabilities is None
    else:
        np.testing.assert_array_equal(a.behaviour_probabilities, b.behaviour_probabilities)


@pytest.mark.parametrize("data_format", FORMATS)
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_round_trip(tmp_path, data_format, kind):
    original = KINDS[kind]()
    folder = original.to_minari(tmp_path / "ds-v0", data_format=data_format)
    assert folder == tmp_path / "ds-v0"
    loaded, env = get_minari(folder)
    assert env is None  # no env spec stored
    assert isinstance(loaded, MDPDataset)
    assert_same(original, loaded)


def test_written_hdf5_follows_the_layout(tmp_path):
    ds = _discrete_with_finals()
    to_minari(ds, tmp_path / "x", dataset_id="ns/x-v0", metadata={"author": "me"})
    meta = json.loads((tmp_path / "x" / "data" / "metadata.json").read_text())
    assert meta["dataset_id"] == "ns/x-v0" and meta["author"] == "me"
    assert (meta["total_episodes"], meta["total_steps"], meta["data_format"]) == (3, 12, "hdf5")
    assert json.loads(meta["action_space"]) == {"type": "Discrete", "dtype": "int64", "start": 0, "n": 4}
    assert json.loads(meta["observation_space"])["shape"] == [3]
    with h5py.File(tmp_path / "x" / "data" / "main_data.hdf5", "r") as f:
        assert sorted(f.keys()) == ["episode_0", "episode_1", "episode_2"]
        ep = f["episode_1"]  # steps 4..7, cut by a timeout
        assert ep.attrs["total_steps"] == 4
        np.testing.assert_array_equal(ep["observations"][()][:4], np.arange(12, 24).reshape(4, 3))
        np.testing.assert_array_equal(ep["observations"][()][4], np.arange(21, 24) + 1000)
        np.testing.assert_array_equal(ep["truncations"][()], [False, False, False, True])
        np.testing.assert_array_equal(ep["terminations"][()], [False] * 4)
        np.testing.assert_array_equal(ep["actions"][()], [1, 2, 0, 1])
        terminal = f["episode_0"]
        np.testing.assert_array_equal(terminal["terminations"][()], [False, False, False, True])
        np.testing.assert_array_equal(terminal["observations"][()][4], [0, 0, 0])


def test_env_is_stored_and_rebuilt(tmp_path):
    env = gymnasium.make("CartPole-v1")
    obs = np.zeros((5, 4), np.float32)
    ds = MDPDataset(obs, np.array([0, 1, 0, 1, 0]), np.ones(5), np.array([0, 0, 0, 0, 1]))
    ds.to_minari(tmp_path / "cp", env=env)
    meta = json.loads((tmp_path / "cp" / "data" / "metadata.json").read_text())
    assert json.loads(meta["observation_space"])["type"] == "Box"
    loaded, rebuilt = get_minari(tmp_path / "cp")
    assert rebuilt.spec.id == "CartPole-v1"
    assert rebuilt.action_space == env.action_space


def test_overwrite_is_explicit(tmp_path):
    ds = _continuous_without_finals()
    ds.to_minari(tmp_path / "d")
    with pytest.raises(ValueError, match="already exists: pass overwrite=True"):
        ds.to_minari(tmp_path / "d")
    ds.to_minari(tmp_path / "d", overwrite=True, data_format="arrow")
    assert_same(ds, get_minari(tmp_path / "d")[0])


# ------------------------------------ files written here by Minari's layout

DICT_OBS_SPACE = {
    "type": "Dict",
    "subspaces": {
        "achieved_goal": {"type": "Box", "dtype": "float64", "shape": [2], "low": [-1, -1], "high": [1, 1]},
        "observation": {"type": "Box", "dtype": "float32", "shape": [3], "low": [-5] * 3, "high": [5] * 3},
    },
}
SHIFTED_DISCRETE = {"type": "Discrete", "dtype": "int64", "start": 1, "n": 3}


def _episode_arrays(n, seed, end):
    rng = np.random.default_rng(seed)
    return {
        "goal": rng.standard_normal((n + 1, 2)),
        "obs": rng.standard_normal((n + 1, 3)).astype(np.float32),
        "actions": rng.integers(1, 4, n),  # Discrete(3, start=1): values 1..3
        "rewards": rng.standard_normal(n),
        "terminations": np.array([False] * (n - 1) + [end == "terminated"]),
        "truncations": np.array([False] * (n - 1) + [end == "truncated"]),
    }


EPISODES = [_episode_arrays(4, 0, "terminated"), _episode_arrays(3, 1, "truncated"), _episode_arrays(5, 2, "terminated")]


def _write_metadata(data, data_format, total_steps, **extra):
    record = {
        "dataset_id": "test/dict-v0", "total_episodes": 3, "total_steps": total_steps, "data_format": data_format,
        "observation_space": json.dumps(DICT_OBS_SPACE), "action_space": json.dumps(SHIFTED_DISCRETE),
        "minari_version": "0.5.1",
    }
    record.update(extra)
    (data / "metadata.json").write_text(json.dumps(record))


def _write_minari_hdf5(root, episodes=EPISODES, **extra):
    data = root / "data"
    data.mkdir(parents=True)
    with h5py.File(data / "main_data.hdf5", "w") as f:
        for i, ep in enumerate(episodes):
            g = f.create_group(f"episode_{i}")
            g.attrs["id"] = i
            g.attrs["total_steps"] = len(ep["actions"])
            obs = g.create_group("observations")
            obs["achieved_goal"] = ep["goal"]
            obs["observation"] = ep["obs"]
            for key in ("actions", "rewards", "terminations", "truncations"):
                g[key] = ep[key]
            infos = g.create_group("infos")
            infos["success"] = np.zeros(len(ep["actions"]) + 1, dtype=bool)
    extra.setdefault("total_steps", sum(len(e["actions"]) for e in episodes))
    _write_metadata(data, data_format="hdf5", **extra)
    return root


def _write_minari_arrow(root, episodes=EPISODES):
    data = root / "data"
    data.mkdir(parents=True)
    for i, ep in enumerate(episodes):
        n = len(ep["actions"])

        def fixed(values):
            values = np.asarray(values)
            return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), values.shape[1])

        batch = pa.RecordBatch.from_pydict({
            "observations": pa.StructArray.from_arrays(
                [fixed(ep["goal"]), fixed(ep["obs"])], names=["achieved_goal", "observation"]
            ),
            "actions": pa.array(np.append(ep["actions"], 0).astype(np.int32)),
            "rewards": pa.array(np.append(ep["rewards"], 0.0)),
            "terminations": pa.array(np.append(ep["terminations"], False)),
            "truncations": pa.array(np.append(ep["truncations"], False)),
        })
        (data / str(i)).mkdir()
        with pa.OSFile(str(data / str(i) / "part-0.arrow"), "wb") as sink:
            with pa.ipc.new_file(sink, batch.schema) as writer:
                writer.write_batch(batch)
        (data / str(i) / "metadata.json").write_text(json.dumps({"id": i, "total_steps": n}))
    _write_metadata(data, data_format="arrow", total_steps=sum(len(e["actions"]) for e in episodes))
    return root


@pytest.mark.parametrize("writer", [_write_minari_hdf5, _write_minari_arrow])
def test_reads_a_dict_space_dataset_written_by_the_layout(tmp_path, writer):
    dataset, env = get_minari(writer(tmp_path / "dict-v0"))
    assert env is None
    assert dataset.size() == 3
    assert dataset.action_space.name == "DISCRETE" and dataset.action_size == 3
    # terminated (4 steps), truncated with its final observation (3), terminated (5)
    assert [e.size() for e in dataset.episodes] == [4, 3, 5]
    assert [e.terminated for e in dataset.episodes] == [True, False, True]
    assert dataset.transition_count == 12
    for ep, source in zip(dataset.episodes, EPISODES):
        n = len(source["actions"])
        goal, obs = ep.observations  # Dict members in the space's order
        assert goal.dtype == np.float32 and obs.dtype == np.float32
        np.testing.assert_array_equal(goal, source["goal"][:n].astype(np.float32))
        np.testing.assert_array_equal(obs, source["obs"][:n])
        np.testing.assert_array_equal(ep.actions[:, 0], source["actions"] - 1)
        np.testing.assert_allclose(ep.rewards[:, 0], source["rewards"].astype(np.float32))
    final_goal, final_obs = dataset.episodes[1].final_observation
    np.testing.assert_array_equal(final_obs, EPISODES[1]["obs"][3])
    np.testing.assert_array_equal(final_goal, EPISODES[1]["goal"][3].astype(np.float32))
    assert dataset.episodes[0].final_observation is None


def test_reads_by_id_under_the_minari_root(tmp_path, monkeypatch):
    _write_minari_hdf5(tmp_path / "root" / "test" / "dict-v0")
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "root"))
    dataset, _ = get_minari("test/dict-v0")
    assert dataset.size() == 3
    # the data/ folder and main_data.hdf5 are accepted too
    assert get_minari(tmp_path / "root" / "test" / "dict-v0" / "data")[0].size() == 3
    assert get_minari(tmp_path / "root" / "test" / "dict-v0" / "data" / "main_data.hdf5")[0].size() == 3


def test_old_layout_with_metadata_in_hdf5_attributes_and_env_spec_only(tmp_path):
    data = tmp_path / "old" / "data"
    data.mkdir(parents=True)
    rng = np.random.default_rng(0)
    with h5py.File(data / "main_data.hdf5", "w") as f:
        f.attrs["total_episodes"] = 1
        f.attrs["total_steps"] = 3
        f.attrs["env_spec"] = gymnasium.spec("CartPole-v1").to_json()
        g = f.create_group("episode_0")
        g["observations"] = rng.standard_normal((4, 4)).astype(np.float32)
        g["actions"] = np.array([0, 1, 1])
        g["rewards"] = np.ones(3)
        g["terminations"] = np.array([False, False, True])
        g["truncations"] = np.zeros(3, dtype=bool)
    dataset, env = get_minari(tmp_path / "old")
    assert env.spec.id == "CartPole-v1"
    assert dataset.action_size == 2 and dataset.transition_count == 3


def test_env_that_cannot_be_built_gives_none(tmp_path):
    spec = json.loads(gymnasium.spec("CartPole-v1").to_json())
    spec["id"] = "NoSuchEnvAnywhere-v0"
    spec["entry_point"] = "no_such_module:NoEnv"
    _write_minari_hdf5(tmp_path / "d", env_spec=json.dumps(spec))
    with pytest.warns(UserWarning, match="cannot be rebuilt here"):
        dataset, env = get_minari(tmp_path / "d")
    assert env is None and dataset.size() == 3


# ------------------------------------------------------------------- errors


def test_unknown_id(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    with pytest.raises(ValueError, match=r"unknown Minari dataset 'door/nothing-v0'.*offrl does not download"):
        get_minari("door/nothing-v0")


def test_path_without_a_dataset(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'empty'} holds no Minari dataset")):
        get_minari(tmp_path / "empty")


def _with(index, **changes):
    episodes = [dict(e) for e in EPISODES]
    episodes[index].update(changes)
    return episodes


def test_flags_contradicting_the_length(tmp_path):
    bad = _with(2, terminations=np.array([False, True, False, False, True]))
    _write_minari_hdf5(tmp_path / "d", bad)
    with pytest.raises(ValueError, match=r"main_data.hdf5: episode_2: terminations\[1\] is True but the episode goes on to 5 steps"):
        get_minari(tmp_path / "d")


def test_flags_contradicting_the_length_arrow(tmp_path):
    bad = _with(1, truncations=np.array([True, False, True]))
    _write_minari_arrow(tmp_path / "d", bad)
    with pytest.raises(ValueError, match=r"data/1: truncations\[0\] is True but the episode goes on to 3 steps"):
        get_minari(tmp_path / "d")


def test_observation_count_must_be_steps_plus_one(tmp_path):
    bad = _with(0, obs=EPISODES[0]["obs"][:4])
    _write_minari_hdf5(tmp_path / "d", bad)
    with pytest.raises(ValueError, match=r"episode_0: observations\[1\] has 4 rows, expected 5 \(one more than its 4 steps\)"):
        get_minari(tmp_path / "d")


def test_mismatched_flag_length(tmp_path):
    bad = _with(1, rewards=np.ones(5))
    _write_minari_hdf5(tmp_path / "d", bad)
    with pytest.raises(ValueError, match=r"episode_1: rewards has 5 rows, actions has 3"):
        get_minari(tmp_path / "d")


def test_total_steps_in_metadata_checked(tmp_path):
    _write_minari_hdf5(tmp_path / "d", total_steps=99)
    with pytest.raises(ValueError, match=r"metadata.json says total_steps=99 but the data holds 12"):
        get_minari(tmp_path / "d")


def test_missing_key_in_episode(tmp_path):
    _write_minari_hdf5(tmp_path / "d")
    with h5py.File(tmp_path / "d" / "data" / "main_data.hdf5", "a") as f:
        del f["episode_1/rewards"]
    with pytest.raises(ValueError, match=r"episode_1 has no 'rewards'"):
        get_minari(tmp_path / "d")


def test_nan_reward_names_episode_and_step(tmp_path):
    rewards = EPISODES[2]["rewards"].copy()
    rewards[3] = np.nan
    _write_minari_hdf5(tmp_path / "d", _with(2, rewards=rewards))
    with pytest.raises(ValueError, match=r"episode_2: step 3: reward is nan"):
        get_minari(tmp_path / "d")


def test_unsupported_space(tmp_path):
    _write_minari_hdf5(tmp_path / "d", action_space=json.dumps({"type": "Text", "max_length": 3}))
    with pytest.raises(ValueError, match=r"action_space: 'Text' spaces are not supported"):
        get_minari(tmp_path / "d")


def test_action_space_must_match_on_export(tmp_path):
    ds = _continuous_without_finals()
    with pytest.raises(ValueError, match="does not match the dataset's CONTINUOUS actions"):
        ds.to_minari(tmp_path / "d", action_space=gymnasium.spaces.Discrete(3))
