"""Minari format: offrl -> Minari -> offrl round trips on both backends, files
written here with h5py / pyarrow following Minari's published layout, env
recovery, and errors that name the file, the episode and the key."""

from __future__ import annotations

import collections
import json
import pathlib
import re

import gymnasium
import h5py
import numpy as np
import pytest

import offrl
from disk_rows import assert_layout, assert_same_rows
from offrl.dataset import MDPDataset
from offrl.datasets import get_minari, to_minari

pa = pytest.importorskip("pyarrow")  # the `minari` extra; in the test extra too
import pyarrow.ipc  # noqa: E402,F401 (loads pa.ipc)

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
    folder = offrl.datasets.to_minari(original, tmp_path / "ds-v0", data_format=data_format)
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
    offrl.datasets.to_minari(ds, tmp_path / "cp", env=env)
    meta = json.loads((tmp_path / "cp" / "data" / "metadata.json").read_text())
    assert json.loads(meta["observation_space"])["type"] == "Box"
    loaded, rebuilt = get_minari(tmp_path / "cp")
    assert rebuilt.spec.id == "CartPole-v1"
    assert rebuilt.action_space == env.action_space


def test_overwrite_is_explicit(tmp_path):
    ds = _continuous_without_finals()
    offrl.datasets.to_minari(ds, tmp_path / "d")
    with pytest.raises(ValueError, match="already exists: pass overwrite=True"):
        offrl.datasets.to_minari(ds, tmp_path / "d")
    offrl.datasets.to_minari(ds, tmp_path / "d", overwrite=True, data_format="arrow")
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
        assert list(ep.observations) == ["achieved_goal", "observation"]  # the Dict's members, stored (sorted) order
        goal, obs = ep.observations["achieved_goal"], ep.observations["observation"]
        assert goal.dtype == np.float32 and obs.dtype == np.float32
        np.testing.assert_array_equal(goal, source["goal"][:n].astype(np.float32))
        np.testing.assert_array_equal(obs, source["obs"][:n])
        np.testing.assert_array_equal(ep.actions[:, 0], source["actions"] - 1)
        np.testing.assert_allclose(ep.rewards[:, 0], source["rewards"].astype(np.float32))
    final_goal, final_obs = dataset.episodes[1].final_observation.values()
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
    with pytest.warns(UserWarning, match="is not registered with gymnasium here"):
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
        offrl.datasets.to_minari(ds, tmp_path / "d", action_space=gymnasium.spaces.Discrete(3))


# ------------------------------------------------- hostile folders (issue 15)


def _hostile_spec(tmp_path, entry_point, env_id="Hostile-v0"):
    marker = tmp_path / "marker"
    spec = json.loads(gymnasium.spec("CartPole-v1").to_json())
    spec["id"] = env_id
    spec["entry_point"] = entry_point
    spec["kwargs"] = {"command": f"touch {marker}"}
    spec["additional_wrappers"] = [{"name": "X", "entry_point": entry_point, "kwargs": {}}]
    return spec, marker


@pytest.mark.parametrize("layout", ["hdf5", "arrow", "old"])
@pytest.mark.parametrize("entry_point", ["os:system", "subprocess:getoutput"])
def test_env_spec_entry_point_is_never_imported_or_called(tmp_path, layout, entry_point):
    spec, marker = _hostile_spec(tmp_path, entry_point)
    if layout == "hdf5":
        root = _write_minari_hdf5(tmp_path / "d", env_spec=json.dumps(spec))
    elif layout == "arrow":
        root = _write_minari_arrow(tmp_path / "d")
        meta = json.loads((root / "data" / "metadata.json").read_text())
        meta["env_spec"] = json.dumps(spec)
        (root / "data" / "metadata.json").write_text(json.dumps(meta))
    else:
        root = _write_minari_hdf5(tmp_path / "d")
        (root / "data" / "metadata.json").unlink()
        with h5py.File(root / "data" / "main_data.hdf5", "a") as f:
            f.attrs["env_spec"] = json.dumps(spec)
            f.attrs["observation_space"] = json.dumps(DICT_OBS_SPACE)
            f.attrs["action_space"] = json.dumps(SHIFTED_DISCRETE)
    with pytest.warns(UserWarning, match="'Hostile-v0' is not registered with gymnasium here; env is None"):
        dataset, env = get_minari(root)
    assert env is None and dataset.transition_count == 12
    assert not marker.exists()


def test_module_colon_id_is_not_imported(tmp_path, monkeypatch):
    # gymnasium.make("module:Env-v0") imports `module`; offrl looks ids up as plain keys
    package = tmp_path / "pkg"
    package.mkdir()
    marker = tmp_path / "imported"
    (package / "offrl_hostile_probe.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(package))
    spec, _ = _hostile_spec(tmp_path, "offrl_hostile_probe:Env", env_id="offrl_hostile_probe:CartPole-v1")
    root = _write_minari_hdf5(tmp_path / "d", env_spec=json.dumps(spec))
    with pytest.warns(UserWarning, match="is not registered with gymnasium here"):
        _, env = get_minari(root)
    assert env is None and not marker.exists()


def test_registered_id_is_made_with_the_registered_entry_point(tmp_path):
    spec, marker = _hostile_spec(tmp_path, "os:system", env_id="CartPole-v1")
    spec["kwargs"] = {}
    root = _write_minari_hdf5(tmp_path / "d", env_spec=json.dumps(spec))
    _, env = get_minari(root)
    assert env.spec.id == "CartPole-v1"
    assert env.spec.entry_point == gymnasium.envs.registry["CartPole-v1"].entry_point
    assert not marker.exists()


def test_load_env_false_makes_no_environment(tmp_path, monkeypatch):
    spec = gymnasium.spec("CartPole-v1").to_json()
    root = _write_minari_hdf5(tmp_path / "d", env_spec=spec)
    monkeypatch.setattr(gymnasium, "make", lambda *a, **k: pytest.fail("gymnasium.make was called"))
    dataset, env = get_minari(root, load_env=False)
    assert env is None and dataset.transition_count == 12


def test_discrete_action_of_one_half_is_refused(tmp_path):
    actions = EPISODES[1]["actions"].astype(np.float64)
    actions[2] = 1.5
    _write_minari_hdf5(tmp_path / "d", _with(1, actions=actions))
    with pytest.raises(ValueError, match=r"episode_1: actions\[2\] is 1\.5, expected an integer in \[1, 4\)"):
        get_minari(tmp_path / "d")


def test_integral_float_discrete_actions_still_load(tmp_path):
    episodes = [dict(e, actions=e["actions"].astype(np.float32)) for e in EPISODES]
    dataset, _ = get_minari(_write_minari_hdf5(tmp_path / "d", episodes))
    assert dataset.episodes[0].actions[:, 0].tolist() == (EPISODES[0]["actions"] - 1).tolist()


@pytest.mark.parametrize("writer", [_write_minari_hdf5, _write_minari_arrow])
def test_box_shape_disagreeing_with_data_is_refused(tmp_path, writer):
    space = json.loads(json.dumps(DICT_OBS_SPACE))
    space["subspaces"]["observation"]["shape"] = [4]
    root = writer(tmp_path / "d")
    meta = json.loads((root / "data" / "metadata.json").read_text())
    meta["observation_space"] = json.dumps(space)
    (root / "data" / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"(episode_0|data/0): observations.*declares.*\(4,\)"):
        get_minari(root)


def test_huge_discrete_n_is_refused(tmp_path):
    root = _write_minari_hdf5(tmp_path / "d", action_space=json.dumps({"type": "Discrete", "n": 2**62, "start": 1}))
    with pytest.raises(ValueError, match=r"metadata.json: action_space Discrete\(n\) is 4611686018427387904, expected an integer in \[1, 16777216\]"):
        get_minari(root)


def test_string_rewards_are_refused_naming_the_episode(tmp_path):
    root = _write_minari_hdf5(tmp_path / "d")
    with h5py.File(root / "data" / "main_data.hdf5", "a") as f:
        del f["episode_0/rewards"]
        f["episode_0/rewards"] = np.array([b"a", b"b", b"c", b"d"])
    with pytest.raises(TypeError, match=r"episode_0: rewards has dtype \|S1, expected numbers"):
        get_minari(root)


def test_size_bomb_in_an_episode_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(offrl._safety, "available_memory", lambda: 23 * 10**9)
    root = _write_minari_hdf5(tmp_path / "d")
    rows = 10**12
    with h5py.File(root / "data" / "main_data.hdf5", "a") as f:
        g = f["episode_2"]
        for key in ("observations/achieved_goal", "observations/observation"):
            width = g[key].shape[1]
            del g[key]
            g.create_dataset(key, shape=(rows + 1, width), dtype=np.float32, chunks=(1, width), compression="gzip")
        for key in ("actions", "rewards", "terminations", "truncations"):
            dtype = g[key].dtype
            del g[key]
            g.create_dataset(key, shape=(rows,), dtype=dtype, chunks=(1,), compression="gzip")
        g.attrs["total_steps"] = rows
    assert (root / "data" / "main_data.hdf5").stat().st_size < 100_000
    with pytest.raises(ValueError, match=r"main_data.hdf5: episode_2: terminations declares 10\^12 bool = 1 TB; this machine has 23 GB available"):
        get_minari(root)
    # streamed to disk: refused by the free space first, and an episode must still fit the memory
    with pytest.raises(OSError, match=r"needs 3\d{13} bytes \(3\d TB\)"):
        get_minari(root, to=tmp_path / "out")
    from offrl.dataset import disk as disk_module

    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(disk_module.shutil, "disk_usage", lambda p: usage(10**16, 0, 10**16))
    with pytest.raises(ValueError, match=r"main_data.hdf5: episode_2: terminations declares 10\^12 bool = 1 TB; this machine has 23 GB available"):
        get_minari(root, to=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_columns_over_available_memory_are_refused_before_allocating(tmp_path, monkeypatch):
    monkeypatch.setattr(offrl._safety, "available_memory", lambda: 200)
    root = _write_minari_hdf5(tmp_path / "d")
    expected = (
        r"main_data.hdf5: observations\[1\] \(all episodes\) declares 13 rows × 3 float32 = 156 B "
        r"\(on top of 104 B for the other fields\); this machine has 200 B available"
    )
    with pytest.raises(ValueError, match=expected):
        get_minari(root)


def test_half_written_folder_gives_a_clear_error(tmp_path):
    root = tmp_path / "d"
    (root / "data").mkdir(parents=True)
    (root / "data" / "metadata.json").write_text(json.dumps({"data_format": "hdf5"}))
    with pytest.raises(ValueError, match=r"metadata.json has no observation_space"):
        get_minari(root)
    with h5py.File(root / "data" / "main_data.hdf5", "w"):
        pass
    (root / "data" / "metadata.json").write_text(json.dumps({
        "data_format": "hdf5", "observation_space": json.dumps(DICT_OBS_SPACE),
        "action_space": json.dumps(SHIFTED_DISCRETE),
    }))
    with pytest.raises(ValueError, match=r"main_data.hdf5 holds no episodes"):
        get_minari(root)


def test_overwrite_killed_mid_write_keeps_the_previous_dataset(tmp_path, monkeypatch):
    import offrl.datasets.minari as minari_module

    first = _continuous_without_finals()
    offrl.datasets.to_minari(first, tmp_path / "d")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # stands for a kill while the new files are being written

    monkeypatch.setattr(minari_module, "_write_arrow_episode", killed)
    with pytest.raises(KeyboardInterrupt):
        offrl.datasets.to_minari(_discrete_with_finals(), tmp_path / "d", overwrite=True, data_format="arrow")
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    assert_same(first, get_minari(tmp_path / "d")[0])


def test_overwrite_replaces_by_rename_and_leaves_no_temporary_folders(tmp_path, monkeypatch):
    import offrl.datasets.minari as minari_module

    offrl.datasets.to_minari(_continuous_without_finals(), tmp_path / "d")
    (tmp_path / "d" / "README").write_text("kept")
    renames = []
    real_rename = minari_module.os.rename

    def spy(src, dst):
        renames.append((pathlib.Path(src).name, pathlib.Path(dst).name))
        real_rename(src, dst)

    monkeypatch.setattr(minari_module.os, "rename", spy)
    second = _discrete_with_finals()
    offrl.datasets.to_minari(second, tmp_path / "d", overwrite=True)
    assert [r[1] for r in renames][1] == "data" and renames[0][0] == "data"
    assert renames[0][1].startswith(".data.old-") and renames[1][0].startswith(".data.partial-")
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["README", "data"]
    assert_same(second, get_minari(tmp_path / "d")[0])


# ------------------------------------------------------- streaming to disk (to=)


def _leftovers(parent):
    return sorted(p.name for p in parent.iterdir())


@pytest.mark.parametrize("data_format", FORMATS)
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_to_disk_equals_the_in_memory_read(tmp_path, data_format, kind):
    folder = to_minari(KINDS[kind](), tmp_path / "ds-v0", data_format=data_format)
    memory, _ = get_minari(folder)
    disk, env = get_minari(folder, to=tmp_path / "out")
    assert env is None
    assert_same_rows(memory, disk)
    assert_same(memory, disk)
    offrl.seed(0)
    a = memory.sample_transition_batch(16)
    offrl.seed(0)
    b = disk.sample_transition_batch(16)
    np.testing.assert_array_equal(a.rewards, b.rewards)
    np.testing.assert_array_equal(a.actions, b.actions)


@pytest.mark.parametrize("writer", [_write_minari_hdf5, _write_minari_arrow])
def test_to_disk_keeps_dict_keys_and_shifted_discrete_actions(tmp_path, writer):
    root = writer(tmp_path / "d")
    memory, _ = get_minari(root)
    disk, _ = get_minari(root, to=tmp_path / "out")
    assert disk.dataset_info.observation_signature.keys == ("achieved_goal", "observation")
    assert_same_rows(memory, disk)
    assert [e.size() for e in disk.episodes] == [4, 3, 5]
    np.testing.assert_array_equal(disk.episodes[2].actions[:, 0], EPISODES[2]["actions"] - 1)


@pytest.mark.parametrize("data_format", FORMATS)
def test_to_disk_with_behaviour_logged_for_some_episodes(tmp_path, data_format):
    dataset = _discrete_with_finals()
    probs = dataset.buffer.behaviour_probabilities
    probs[dataset.buffer.episode_table()[0][-1]:] = np.nan  # the last episode logged none
    folder = to_minari(dataset, tmp_path / "ds-v0", data_format=data_format)
    memory, _ = get_minari(folder)
    assert np.isnan(memory.episodes[-1].behaviour_probabilities).all()
    assert_same_rows(memory, get_minari(folder, to=tmp_path / "out")[0])


@pytest.mark.parametrize("data_format", FORMATS)
def test_to_disk_with_behaviour_logged_from_a_later_episode_on(tmp_path, data_format):
    dataset = _discrete_with_finals()
    starts = dataset.buffer.episode_table()[0]
    dataset.buffer.behaviour_probabilities[: starts[2]] = np.nan  # episodes 0 and 1 logged none
    folder = to_minari(dataset, tmp_path / "ds-v0", data_format=data_format)
    memory, disk = get_minari(folder)[0], get_minari(folder, to=tmp_path / "out")[0]
    for a, b in zip(memory.episodes, disk.episodes):  # every step's probability (NaN: not logged)
        np.testing.assert_array_equal(a.behaviour_probabilities, b.behaviour_probabilities)
    assert np.isnan(disk.episodes[1].behaviour_probabilities).all()
    # the placeholder on episode 1's final-observation row (not a step) is NaN on disk, 1.0 in memory:
    # the disk writer fills the rows before the first logged episode as ReplayBuffer.append_episode does
    rows = memory.buffer.step_rows()
    np.testing.assert_array_equal(memory.buffer.behaviour_probabilities[rows], disk.buffer.behaviour_probabilities[rows])


def test_to_disk_reads_float_discrete_actions_like_the_in_memory_read(tmp_path):
    episodes = _with(0, actions=EPISODES[0]["actions"].astype(np.float32))  # episode 0 only: float
    root = _write_minari_hdf5(tmp_path / "d", episodes)
    assert_same_rows(get_minari(root)[0], get_minari(root, to=tmp_path / "out")[0])
    actions = EPISODES[2]["actions"].astype(np.float64)
    actions[1] = 2.5
    root = _write_minari_hdf5(tmp_path / "bad", _with(2, actions=actions))
    message = r"episode_2: actions\[1\] is 2\.5, expected an integer in \[1, 4\)"
    for to in (None, tmp_path / "out2"):
        with pytest.raises(ValueError, match=message):
            get_minari(root, to=to)
    assert not (tmp_path / "out2").exists()


@pytest.mark.parametrize("writer", [_write_minari_hdf5, _write_minari_arrow])
def test_to_disk_error_in_a_late_episode_leaves_nothing(tmp_path, writer):
    rewards = EPISODES[2]["rewards"].copy()
    rewards[3] = np.nan
    root = writer(tmp_path / "d", _with(2, rewards=rewards))
    (tmp_path / "parent").mkdir()
    for to in (None, tmp_path / "parent" / "out"):  # the same error, in memory and streamed
        with pytest.raises(ValueError, match=r"(episode_2|data/2): step 3: reward is nan"):
            get_minari(root, to=to)
    assert _leftovers(tmp_path / "parent") == []  # no output, no temporary directory


def test_to_disk_totals_are_checked_and_leave_nothing(tmp_path):
    root = _write_minari_hdf5(tmp_path / "d", total_steps=99)
    (tmp_path / "parent").mkdir()
    with pytest.raises(ValueError, match=r"metadata.json says total_steps=99 but the data holds 12"):
        get_minari(root, to=tmp_path / "parent" / "out")
    assert _leftovers(tmp_path / "parent") == []


@pytest.mark.parametrize("data_format", FORMATS)
def test_to_disk_refuses_a_full_disk_before_writing(tmp_path, monkeypatch, data_format):
    from offrl.dataset import disk as disk_module

    folder = to_minari(_discrete_with_finals(), tmp_path / "ds-v0", data_format=data_format)
    # 12 steps + at most a final row for each of the 3 episodes; a row: 3 float32 observations,
    # an int64 action, a float32 reward, a float64 probability
    needed = (12 + 3) * (12 + 8 + 4 + 8)
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(disk_module.shutil, "disk_usage", lambda p: usage(10**9, 10**9 - 1000, 1000))
    (tmp_path / "parent").mkdir()
    with pytest.raises(OSError, match=rf"needs {needed} bytes .* 1000 bytes .* free"):
        get_minari(folder, to=tmp_path / "parent" / "out")
    assert _leftovers(tmp_path / "parent") == []


def test_to_disk_refuses_an_existing_directory(tmp_path):
    folder = to_minari(_discrete_with_finals(), tmp_path / "ds-v0")
    (tmp_path / "out").mkdir()
    with pytest.raises(ValueError, match=r"already exists"):
        get_minari(folder, to=tmp_path / "out")
    assert _leftovers(tmp_path / "out") == []


@pytest.mark.parametrize("layout", ["rows", "columns"])
@pytest.mark.parametrize("data_format", FORMATS)
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_to_disk_in_either_layout_equals_the_in_memory_read(tmp_path, layout, data_format, kind):
    folder = to_minari(KINDS[kind](), tmp_path / "ds-v0", data_format=data_format)
    memory, _ = get_minari(folder)
    disk, _ = get_minari(folder, to=tmp_path / "out", layout=layout)
    assert_layout(tmp_path / "out", layout)
    assert_same_rows(memory, disk)
    offrl.seed(0)
    a = memory.sample_transition_batch(16)
    offrl.seed(0)
    b = disk.sample_transition_batch(16)
    np.testing.assert_array_equal(a.rewards, b.rewards)
    for x, y in zip(_columns(a.next_observations), _columns(b.next_observations), strict=True):
        np.testing.assert_array_equal(x, y)


def test_to_disk_writes_the_rows_layout_by_default(tmp_path):
    folder = to_minari(_discrete_with_finals(), tmp_path / "ds-v0")
    get_minari(folder, to=tmp_path / "out")
    assert_layout(tmp_path / "out", "rows")


@pytest.mark.parametrize("layout", ["Rows", "row", "", 2, ("rows",)])
def test_to_disk_refuses_an_unknown_layout_before_writing(tmp_path, layout):
    folder = to_minari(_discrete_with_finals(), tmp_path / "ds-v0")
    (tmp_path / "parent").mkdir()
    with pytest.raises(ValueError, match=re.escape(f"layout must be one of ('columns', 'rows'), got {layout!r}")):
        get_minari(folder, to=tmp_path / "parent" / "out", layout=layout)
    assert _leftovers(tmp_path / "parent") == []


@pytest.mark.parametrize("layout", ["rows", "columns"])
def test_a_layout_without_to_is_refused(tmp_path, layout):
    folder = to_minari(_discrete_with_finals(), tmp_path / "ds-v0")
    with pytest.raises(ValueError, match=rf"layout='{layout}' is the layout of the disk dataset written at to="):
        get_minari(folder, layout=layout)


@pytest.mark.parametrize("writer", [_write_minari_hdf5, _write_minari_arrow])
def test_to_disk_in_columns_layout_error_in_a_late_episode_leaves_nothing(tmp_path, writer):
    rewards = EPISODES[2]["rewards"].copy()
    rewards[3] = np.nan
    root = writer(tmp_path / "d", _with(2, rewards=rewards))
    (tmp_path / "parent").mkdir()
    with pytest.raises(ValueError, match=r"(episode_2|data/2): step 3: reward is nan"):
        get_minari(root, to=tmp_path / "parent" / "out", layout="columns")
    assert _leftovers(tmp_path / "parent") == []


_MEMBER_VALUES = [
    np.zeros(0), np.float32(1.0), np.full((4, 1), 5.4), np.full((4, 3), 1e300), np.array([b"a"] * 4),
    np.array([-1, 5, 9, 20]), np.ones(4, dtype=bool), np.zeros(4, dtype=np.int8), np.full(4, np.nan),
    np.full(4, 0.5), np.ones((5, 2, 2)), np.arange(4, dtype=np.uint64) + 2**63,
]

_OBSERVATION_VALUES = [
    np.ones((5, 3)), np.arange(15, dtype=np.int32).reshape(5, 3), np.full((5, 3), np.inf), np.ones((4, 3)),
    np.ones((5, 2)), np.ones((5, 3), dtype=bool),
]


@pytest.mark.parametrize("data_format", FORMATS)
@pytest.mark.parametrize("member", ["observations", "actions", "rewards", "terminations", "behaviour_probabilities"])
def test_to_disk_fails_or_succeeds_as_the_in_memory_read(tmp_path, data_format, member):
    """A member of episode 1 replaced by each of a set of bad values: the
    streamed read raises the in-memory read's error, or gives its data."""
    outcomes = []
    values = _OBSERVATION_VALUES if member == "observations" else _MEMBER_VALUES
    for k, value in enumerate(values):
        root = to_minari(_discrete_with_finals(), tmp_path / f"d{k}", data_format=data_format)
        if data_format == "hdf5":
            with h5py.File(root / "data" / "main_data.hdf5", "r+") as f:
                del f["episode_1"][member]
                f["episode_1"].create_dataset(member, data=value)
        else:
            path = root / "data" / "1" / "part-0.arrow"
            table = pa.ipc.open_file(path).read_all()
            if member == "observations":
                array = pa.FixedSizeListArray.from_arrays(pa.array(value.reshape(-1)), value.shape[1])
            elif value.ndim != 1 or len(value) != 4:
                continue
            else:
                array = pa.array(np.append(value, value[-1:]))  # Arrow pads step columns with one row
            if len(array) != table.num_rows:
                continue
            table = table.set_column(table.column_names.index(member), member, array)
            with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
                writer.write_table(table)
        try:
            memory, _ = get_minari(root)
        except (ValueError, TypeError) as e:
            with pytest.raises(type(e)) as streamed:
                get_minari(root, to=tmp_path / f"out{k}")
            assert str(streamed.value) == str(e), value
            assert not (tmp_path / f"out{k}").exists()
            outcomes.append("error")
            continue
        assert_same_rows(memory, get_minari(root, to=tmp_path / f"out{k}")[0])
        outcomes.append("read")
    assert "read" in outcomes and "error" in outcomes  # both sides exercised


# ------------------------------------------------- issue 28: keys, JSON, expansion, metadata


@pytest.mark.parametrize("key", ["..", ".hidden", "a\x00b", ""])
def test_a_dict_space_key_that_is_not_a_name_is_refused_before_reading(tmp_path, key):
    space = {"type": "Dict", "subspaces": {key: DICT_OBS_SPACE["subspaces"]["observation"]}}
    root = _write_minari_hdf5(tmp_path / "d", observation_space=json.dumps(space))
    with pytest.raises(ValueError, match=r"metadata.json: observation_space has (key|an empty key)"):
        get_minari(root)


def test_deeply_nested_metadata_is_a_value_error_naming_the_file(tmp_path):
    root = _write_minari_hdf5(tmp_path / "d")
    (root / "data" / "metadata.json").write_text("[" * 50_000 + "]" * 50_000)
    with pytest.raises(ValueError, match=r"metadata.json: JSON nested 50000 levels deep"):
        get_minari(root)
    root = _write_minari_hdf5(tmp_path / "e", observation_space="[" * 50_000 + "]" * 50_000)
    with pytest.raises(ValueError, match=r"observation_space: JSON nested 50000 levels deep"):
        get_minari(root)


def test_compressed_bomb_in_an_episode_is_refused(tmp_path, monkeypatch):
    from offrl import _safety

    monkeypatch.setattr(_safety, "EXPANSION_FLOOR", 0)
    root = _write_minari_hdf5(tmp_path / "d")
    with h5py.File(root / "data" / "main_data.hdf5", "r+") as f:
        del f["episode_1/observations/observation"]
        f.create_dataset("episode_1/observations/observation", shape=(4, 3), dtype=np.float32, compression="gzip")
    # one unwritten array among a dozen stored ones: a small expansion overall, refused under a tight bound
    with pytest.raises(ValueError, match=r"main_data.hdf5: its arrays expand to .* most of it is .*episode_1/observations"):
        get_minari(root, max_expansion=1.05)
    with pytest.raises(ValueError, match=r"episode_1: its arrays expand to"):
        get_minari(root, to=tmp_path / "disk", max_expansion=1.05)
    assert not (tmp_path / "disk").exists()
    dataset, _ = get_minari(root, max_expansion=None)
    assert not dataset.episodes[1].observations["observation"].any()  # the fill value, read because the caller asked


def test_describe_minari_reads_the_metadata_only(tmp_path):
    from offrl.datasets.minari import describe_minari

    root = _write_minari_hdf5(tmp_path / "d")
    (root / "data" / "main_data.hdf5").write_bytes(b"not even HDF5")  # never opened
    described = describe_minari(root)
    assert (described["dataset_id"], described["episodes"], described["steps"]) == ("test/dict-v0", 3, 12)
    assert described["action_space"] == "Discrete(n=3)"
    assert described["observation_space"] == "Dict {achieved_goal: Box float64(2,), observation: Box float32(3,)}"
