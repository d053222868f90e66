"""D4RL-format HDF5 files written here with h5py: episode boundaries at
terminals and timeouts, a file ending mid-episode, next_observations, infos
and metadata, and errors naming the file and the key."""

from __future__ import annotations

import re

import h5py
import numpy as np
import pytest

from disk_rows import assert_layout, assert_same_rows
from offrl import ActionSpace
from offrl.datasets import load_d4rl_hdf5

N = 14
# terminal at step 4, timeout at step 9, steps 10..13 end the file mid-episode
TERMINAL_AT, TIMEOUT_AT = 4, 9


def _arrays(**changes):
    rng = np.random.default_rng(0)
    arrays = {
        "observations": rng.standard_normal((N, 3)).astype(np.float32),
        "actions": rng.uniform(-1, 1, (N, 2)).astype(np.float32),
        "rewards": np.arange(N, dtype=np.float32),
        "terminals": np.zeros(N, dtype=bool),
        "timeouts": np.zeros(N, dtype=bool),
    }
    arrays["terminals"][TERMINAL_AT] = True
    arrays["timeouts"][TIMEOUT_AT] = True
    arrays.update(changes)
    return {k: v for k, v in arrays.items() if v is not None}


def _write(path, arrays, infos=None, metadata=None):
    with h5py.File(path, "w") as f:
        for key, value in arrays.items():
            f.create_dataset(key, data=value)
        for key, value in (infos or {}).items():
            f.create_dataset(f"infos/{key}", data=value)
        for key, value in (metadata or {}).items():
            f.create_dataset(f"metadata/{key}", data=value)
    return path


def test_episode_boundaries(tmp_path):
    arrays = _arrays()
    ds = load_d4rl_hdf5(_write(tmp_path / "d.hdf5", arrays))
    assert ds.action_space == ActionSpace.CONTINUOUS and ds.action_size == 2
    assert [e.size() for e in ds.episodes] == [5, 5, 4]
    assert [e.terminated for e in ds.episodes] == [True, False, False]
    assert all(e.final_observation is None for e in ds.episodes)
    # without next_observations a truncated episode's last step is no transition
    assert ds.transition_count == 5 + 4 + 3
    np.testing.assert_array_equal(ds.episodes[1].observations, arrays["observations"][5:10])
    np.testing.assert_array_equal(ds.episodes[2].actions, arrays["actions"][10:])
    np.testing.assert_array_equal(ds.compute_returns(), [0 + 1 + 2 + 3 + 4, 5 + 6 + 7 + 8 + 9, 10 + 11 + 12 + 13])
    arr = ds.to_arrays()
    np.testing.assert_array_equal(arr["terminals"], arrays["terminals"])
    # the unflagged end of the file becomes a truncated episode
    np.testing.assert_array_equal(np.flatnonzero(arr["timeouts"]), [TIMEOUT_AT, N - 1])


def test_next_observations_keep_the_final_observation_of_truncated_episodes(tmp_path):
    arrays = _arrays()
    arrays["next_observations"] = arrays["observations"] + 50
    ds = load_d4rl_hdf5(_write(tmp_path / "d.hdf5", arrays))
    assert ds.transition_count == N
    np.testing.assert_array_equal(ds.episodes[1].final_observation, arrays["next_observations"][TIMEOUT_AT])
    np.testing.assert_array_equal(ds.episodes[2].final_observation, arrays["next_observations"][N - 1])
    assert ds.episodes[0].final_observation is None


def test_a_step_flagged_terminal_and_timeout_is_terminal(tmp_path):
    timeouts = np.zeros(N, dtype=bool)
    timeouts[[TERMINAL_AT, TIMEOUT_AT]] = True
    ds = load_d4rl_hdf5(_write(tmp_path / "d.hdf5", _arrays(timeouts=timeouts)))
    assert [e.terminated for e in ds.episodes] == [True, False, False]


def test_discrete_actions_and_integer_flags(tmp_path):
    arrays = _arrays(actions=np.arange(N) % 3, terminals=_arrays()["terminals"].astype(np.float32))
    ds = load_d4rl_hdf5(_write(tmp_path / "d.hdf5", arrays), action_size=4)
    assert ds.action_space == ActionSpace.DISCRETE and ds.action_size == 4
    np.testing.assert_array_equal(ds.episodes[0].actions[:, 0], [0, 1, 2, 0, 1])


def test_infos_metadata_and_logged_probabilities(tmp_path):
    log_probs = np.log(np.linspace(0.2, 3.0, N))
    qpos = np.arange(N * 2, dtype=np.float64).reshape(N, 2)
    path = _write(tmp_path / "d.hdf5", _arrays(), infos={"action_log_probs": log_probs, "qpos": qpos},
                  metadata={"algorithm": "SAC", "policy/fc0/weight": np.ones((2, 2))})
    ds, extras = load_d4rl_hdf5(path, return_extras=True)
    np.testing.assert_allclose(ds.behaviour_probabilities, np.linspace(0.2, 3.0, N))
    np.testing.assert_array_equal(extras["infos"]["qpos"], qpos)
    assert extras["metadata"]["algorithm"] == "SAC"
    np.testing.assert_array_equal(extras["metadata"]["policy/fc0/weight"], np.ones((2, 2)))
    assert load_d4rl_hdf5(path).behaviour_probabilities is not None


def test_underflowing_log_probabilities_are_dropped_with_a_warning(tmp_path):
    log_probs = np.zeros(N)
    log_probs[3] = -1e4
    path = _write(tmp_path / "d.hdf5", _arrays(), infos={"action_log_probs": log_probs})
    with pytest.warns(UserWarning, match="behaviour probabilities are not kept"):
        ds = load_d4rl_hdf5(path)
    assert ds.behaviour_probabilities is None


# ------------------------------------------------------------------ errors


def test_missing_key(tmp_path):
    path = _write(tmp_path / "d.hdf5", _arrays(timeouts=None))
    with pytest.raises(ValueError, match=re.escape(f"{path} is not a D4RL-format file: it has no 'timeouts' dataset")):
        load_d4rl_hdf5(path)


def test_mismatched_lengths(tmp_path):
    path = _write(tmp_path / "d.hdf5", _arrays(rewards=np.zeros(N - 1, np.float32)))
    with pytest.raises(ValueError, match=re.escape(f"{path}: rewards has {N - 1} rows, observations has {N}")):
        load_d4rl_hdf5(path)


def test_nan_reward(tmp_path):
    rewards = np.zeros(N, np.float32)
    rewards[7] = np.nan
    path = _write(tmp_path / "d.hdf5", _arrays(rewards=rewards))
    with pytest.raises(ValueError, match=re.escape(f"{path}: rewards[7] is nan")):
        load_d4rl_hdf5(path)


def test_bad_flag_value(tmp_path):
    terminals = np.zeros(N)
    terminals[2] = 2
    path = _write(tmp_path / "d.hdf5", _arrays(terminals=terminals))
    with pytest.raises(ValueError, match=re.escape(f"{path}: terminals[2] is 2.0, expected 0 or 1")):
        load_d4rl_hdf5(path)


def test_not_hdf5(tmp_path):
    path = tmp_path / "d.hdf5"
    path.write_text("not hdf5")
    with pytest.raises(ValueError, match=re.escape(f"{path} is not a readable HDF5 file")):
        load_d4rl_hdf5(path)


def test_next_observations_shape(tmp_path):
    arrays = _arrays()
    arrays["next_observations"] = arrays["observations"][:, :2]
    path = _write(tmp_path / "d.hdf5", arrays)
    with pytest.raises(ValueError, match=re.escape(f"{path}: next_observations has shape ({N}, 2)")):
        load_d4rl_hdf5(path)


# ------------------------------------------------- hostile files (issue 15)


def _fails(path, error, *fragments):
    pattern = ".*".join(re.escape(str(f)) for f in fragments)
    with pytest.raises(error, match=pattern):
        load_d4rl_hdf5(path)


def test_two_column_terminals_get_a_clear_message(tmp_path):
    path = _write(tmp_path / "d.hdf5", _arrays(terminals=np.zeros((N, 2), dtype=bool)))
    _fails(path, ValueError, path, "terminals has shape (14, 2), expected (14,): one 0/1 flag per step")


@pytest.mark.parametrize("key", ["observations", "actions", "rewards"])
def test_complex_columns_are_refused(tmp_path, key):
    value = _arrays()[key].astype(np.complex64) + 1j
    path = _write(tmp_path / "d.hdf5", _arrays(**{key: value}))
    _fails(path, TypeError, path, f"{key} holds complex numbers")


@pytest.mark.parametrize("key", ["observations", "actions", "rewards"])
def test_float64_beyond_float32_is_refused_naming_the_row(tmp_path, key):
    value = _arrays()[key].astype(np.float64)
    value[6] = 1e300
    path = _write(tmp_path / "d.hdf5", _arrays(**{key: value}))
    _fails(path, ValueError, path, f"{key}[6] is 1e+300, outside float32's range")


def test_string_rewards_are_refused(tmp_path):
    path = _write(tmp_path / "d.hdf5", _arrays(rewards=np.array([b"1.0"] * N)))
    _fails(path, TypeError, path, "rewards holds bytes")


def test_scalar_observations_are_refused(tmp_path):
    path = _write(tmp_path / "d.hdf5", _arrays(observations=np.float32(1.0)))
    _fails(path, ValueError, path, "observations has shape (), expected at least 1 dimension")


def test_size_bomb_is_refused_before_allocating(tmp_path, monkeypatch):
    import offrl._safety

    monkeypatch.setattr(offrl._safety, "available_memory", lambda: 23 * 10**9)
    path = tmp_path / "bomb.hdf5"
    with h5py.File(path, "w") as f:
        for key in ("actions", "rewards", "terminals", "timeouts"):
            f.create_dataset(key, data=_arrays()[key])
        f.create_dataset("observations", shape=(10**12, 17), dtype=np.float32, chunks=(1, 17), compression="gzip")
    assert path.stat().st_size < 100_000
    _fails(path, ValueError, path, "observations declares 10^12 rows × 17 float32 = 68 TB; this machine has 23 GB available")


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="named pipes are POSIX only")
def test_named_pipe_is_refused_without_opening_it(tmp_path):
    import os

    path = tmp_path / "pipe.hdf5"
    os.mkfifo(path)
    _fails(path, ValueError, path, "is a named pipe")


# ------------------------------------------ streaming to disk (to=, layout=)


def _streamable(path, discrete):
    rng = np.random.default_rng(3)
    arrays = _arrays(actions=rng.integers(0, 4, N) if discrete else None)
    if not discrete:
        arrays["actions"] = rng.uniform(-1, 1, (N, 2)).astype(np.float32)
    arrays["next_observations"] = arrays["observations"] + 1
    return _write(path, arrays, infos={"action_log_probs": np.log(rng.uniform(0.1, 1, N))})


@pytest.mark.parametrize("layout", ["rows", "columns"])
@pytest.mark.parametrize("discrete", [True, False])
@pytest.mark.parametrize("chunk_rows", [1, 6, 1000])
def test_to_disk_in_either_layout_equals_the_in_memory_read(tmp_path, layout, discrete, chunk_rows):
    import offrl

    path = _streamable(tmp_path / "d.hdf5", discrete)
    memory = load_d4rl_hdf5(path)
    disk = load_d4rl_hdf5(path, to=tmp_path / "out", chunk_rows=chunk_rows, layout=layout)
    assert_layout(tmp_path / "out", layout)
    assert_same_rows(memory, disk)
    # the terminal episode has no final observation; the timed-out and the cut-off ones keep next_observations' row
    assert [e.final_observation is None for e in disk.episodes] == [True, False, False]
    for a_episode, b_episode in zip(memory.episodes, disk.episodes):
        if a_episode.final_observation is not None:
            np.testing.assert_array_equal(a_episode.final_observation, b_episode.final_observation)
    offrl.seed(0)
    a = memory.sample_transition_batch(32)
    offrl.seed(0)
    b = disk.sample_transition_batch(32)
    for name in ("observations", "actions", "rewards", "next_observations", "terminals"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def test_to_disk_writes_the_rows_layout_by_default(tmp_path):
    load_d4rl_hdf5(_streamable(tmp_path / "d.hdf5", False), to=tmp_path / "out")
    assert_layout(tmp_path / "out", "rows")


@pytest.mark.parametrize("layout", ["Columns", "record", "", 1, ["rows"]])
def test_to_disk_refuses_an_unknown_layout_before_writing(tmp_path, layout):
    path = _streamable(tmp_path / "d.hdf5", False)
    with pytest.raises(ValueError, match=re.escape(f"layout must be one of ('columns', 'rows'), got {layout!r}")):
        load_d4rl_hdf5(path, to=tmp_path / "out", layout=layout)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.hdf5"]


@pytest.mark.parametrize("layout", ["rows", "columns"])
def test_a_layout_without_to_is_refused(tmp_path, layout):
    path = _streamable(tmp_path / "d.hdf5", False)
    with pytest.raises(ValueError, match=rf"layout='{layout}' is the layout of the disk dataset written at to="):
        load_d4rl_hdf5(path, layout=layout)


@pytest.mark.parametrize("layout", ["rows", "columns"])
def test_to_disk_error_in_a_late_chunk_leaves_nothing_in_either_layout(tmp_path, layout):
    rewards = np.arange(N, dtype=np.float32)
    rewards[12] = np.nan  # in the last episode, read in the last chunk
    path = _write(tmp_path / "d.hdf5", _arrays(rewards=rewards))
    with pytest.raises(ValueError, match=r"d\.hdf5: steps 10\.\.13: .*reward"):
        load_d4rl_hdf5(path, to=tmp_path / "out", chunk_rows=4, layout=layout)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.hdf5"]


# ------------------------------------------------- issue 28: action cap, expansion, metadata


def test_a_huge_discrete_action_is_refused_by_offrls_one_rule(tmp_path):
    actions = np.zeros(N, dtype=np.int64)
    actions[7] = 2**40  # inferred as action_size 2**40 + 1 before
    path = _write(tmp_path / "d.hdf5", _arrays(actions=actions))
    _fails(path, ValueError, path, f"actions[7] is {2**40}, beyond the {2**24} discrete actions")
    with pytest.raises(ValueError, match=re.escape(f"actions[7] is {2**40}, beyond")):
        load_d4rl_hdf5(path, to=tmp_path / "disk")
    assert not (tmp_path / "disk").exists()


def test_a_compressed_bomb_is_refused_before_reading_unless_the_caller_raises_the_bound(tmp_path, monkeypatch):
    from offrl import _safety

    monkeypatch.setattr(_safety, "EXPANSION_FLOOR", 0)
    path = tmp_path / "bomb.hdf5"
    arrays = _arrays()
    with h5py.File(path, "w") as f:
        for key, value in arrays.items():
            if key != "observations":
                f.create_dataset(key, data=value)
        f.create_dataset("observations", shape=(N, 30000), dtype=np.float32, compression="gzip", chunks=(1, 30000))
    _fails(path, ValueError, path, "its arrays expand to", "most of it is observations (shape (14, 30000) float32",
           "at most 1000x unless asked")
    with pytest.raises(ValueError, match="at most 1000x"):
        load_d4rl_hdf5(path, to=tmp_path / "disk")
    dataset = load_d4rl_hdf5(path, max_expansion=None)
    assert dataset.episodes[0].observations.shape == (5, 30000)


def test_describe_reads_no_array(tmp_path):
    from offrl.datasets.d4rl import describe_d4rl_hdf5

    path = tmp_path / "huge.hdf5"
    with h5py.File(path, "w") as f:  # 10**12 steps declared: any read would be refused or run out of memory
        for key, shape, dtype in (("observations", (10**12, 17), np.float32), ("actions", (10**12, 6), np.float32),
                                  ("rewards", (10**12,), np.float32), ("terminals", (10**12,), bool),
                                  ("timeouts", (10**12,), bool)):
            f.create_dataset(key, shape=shape, dtype=dtype, compression="gzip", chunks=(1024,) + shape[1:])
        f.create_dataset("infos/qpos", data=np.zeros((3, 2)))
    described = describe_d4rl_hdf5(path)
    assert described["steps"] == 10**12 and described["observation_signature"] == "float32(17,)"
    assert described["action_space"] == "continuous" and described["action_size"] == 6
    assert described["extras"] == "infos/qpos" and described["size"] == "98 TB in memory, 0 B on disk (no bytes stored)"
    _fails(path, ValueError, path, "declares 10^12 rows")
