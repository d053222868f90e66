"""Disk-backed datasets (offrl.dataset.disk): the same data sampled in memory
and from memory-mapped files gives exactly the same results; writers are
atomic; faults (files changed under a reader, a full disk, corrupt
manifests or columns) raise clear errors."""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from collections import namedtuple

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import offrl
from offrl.algos import DiscreteBCConfig, DQNConfig
from offrl.dataset import (
    BasicTrajectorySlicer,
    BasicTransitionPicker,
    DiskDatasetChangedError,
    DiskDatasetWriter,
    DiskStore,
    Episode,
    FIFOBuffer,
    FrameStackTransitionPicker,
    InfiniteBuffer,
    MultiStepTransitionPicker,
    ReplayBuffer,
    dump_disk_dataset,
    train_test_split,
)
from offrl.dataset import _disk_files
from offrl.dataset import disk as disk_module
from offrl.logging import NoopAdapterFactory
from offrl.metrics import (
    AverageValueEstimationEvaluator,
    DiscountedSumOfAdvantageEvaluator,
    DiscreteActionMatchEvaluator,
    InitialStateValueEstimationEvaluator,
    TDErrorEvaluator,
)
from offrl.ope import DiscreteFQE, DiscreteFQEConfig, estimate_policy_value


def _episodes(discrete: bool = True, seed: int = 0, n_episodes: int = 6) -> list[Episode]:
    """Terminated, truncated-with-final-observation and truncated episodes,
    behaviour probabilities on every step (discrete) or none (continuous)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n_episodes):
        n = int(rng.integers(3, 9))
        obs = rng.normal(size=(n, 3)).astype(np.float32)
        if discrete:
            actions = rng.integers(0, 3, size=(n, 1))
            behaviour = rng.uniform(0.2, 1.0, size=n)
        else:
            actions = rng.uniform(-1, 1, size=(n, 2)).astype(np.float32)
            behaviour = None
        kind = i % 3
        out.append(Episode(
            observations=obs, actions=actions, rewards=rng.normal(size=(n, 1)).astype(np.float32),
            terminated=kind == 0,
            final_observation=rng.normal(size=3).astype(np.float32) if kind == 1 else None,
            behaviour_probabilities=behaviour,
        ))
    return out


Pair = namedtuple("Pair", "memory disk path")


LAYOUTS = ["rows", "columns"]
#: the file holding each field's bytes in each layout
DATA_FILE = {"rows": {"rewards": "records.bin", "actions": "records.bin", "observations_0": "records.bin"},
             "columns": {"rewards": "rewards.bin", "actions": "actions.bin", "observations_0": "observations_0.bin"}}


def _pair(tmp_path, discrete: bool = True, layout: str = "columns", **components) -> Pair:
    episodes = _episodes(discrete)
    space = offrl.ActionSpace.DISCRETE if discrete else offrl.ActionSpace.CONTINUOUS
    size = 3 if discrete else None
    memory = ReplayBuffer(InfiniteBuffer(), episodes=episodes, action_space=space, action_size=size, **components)
    path = tmp_path / "data"
    with DiskDatasetWriter(path, action_size=size, layout=layout) as writer:
        writer.add_episodes(episodes)
    disk = ReplayBuffer.load(path, in_memory=False, **components)
    return Pair(memory, disk, path)


def _assert_batches_equal(a, b) -> None:
    for field in ("observations", "actions", "rewards", "next_observations", "next_actions", "terminals", "intervals"):
        if hasattr(a, field):
            x, y = getattr(a, field), getattr(b, field)
            if isinstance(x, dict):  # dict observations: one array per key
                assert list(x) == list(y), field
                x, y = list(x.values()), list(y.values())
            if isinstance(x, (list, tuple)):  # tuple observations: one array per column
                assert len(x) == len(y), field
                for k, (u, v) in enumerate(zip(x, y)):
                    np.testing.assert_array_equal(u, v, err_msg=f"{field}[{k}]")
            else:
                np.testing.assert_array_equal(x, y, err_msg=field)


# ------------------------------------------------------------------ layout
@pytest.mark.parametrize("layout", LAYOUTS)
def test_disk_store_holds_the_same_columns_and_table_as_memory(tmp_path, layout):
    pair = _pair(tmp_path, layout=layout)
    m, d = pair.memory.buffer, pair.disk.buffer
    assert isinstance(d, DiskStore) and not d.actions.flags.owndata  # a view of the mapped file
    assert d.nbytes == sum(os.path.getsize(pair.path / n) for n in os.listdir(pair.path)
                           if n.endswith(".bin") and not n.startswith("episode_"))
    assert d.transition_count == m.transition_count and d.episode_count == m.episode_count
    for a, b in zip(m.episode_table(), d.episode_table()):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(m.observations[0][m.head:m.tail], d.observations[0])
    np.testing.assert_array_equal(m.actions[m.head:m.tail], d.actions)
    np.testing.assert_array_equal(m.behaviour_probabilities[m.head:m.tail], d.behaviour_probabilities)
    assert pair.disk.dataset_info == pair.memory.dataset_info
    np.testing.assert_array_equal(pair.memory.compute_returns(), pair.disk.compute_returns())
    for key, value in pair.memory.to_arrays().items():
        np.testing.assert_array_equal(value, pair.disk.to_arrays()[key], err_msg=key)
    manifest = json.loads((pair.path / "manifest.json").read_text())
    assert manifest["rows"] == m.tail - m.head and manifest["columns"]["actions"]["dtype"] == "<i8"
    assert manifest["layout"] == layout and manifest["schema_version"] == {"rows": 2, "columns": 1}[layout]
    assert sorted(n for n in os.listdir(pair.path) if not n.startswith("episode_")) == sorted(
        {"manifest.json", *DATA_FILE[layout].values(), *(["behaviour_probabilities.bin"] if layout == "columns" else [])})


@pytest.mark.parametrize("picker", [BasicTransitionPicker(), MultiStepTransitionPicker(3, 0.9),
                                    FrameStackTransitionPicker(2)], ids=["basic", "multistep", "framestack"])
@pytest.mark.parametrize("read_mode", ["pread", "mmap"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_transition_batches_from_disk_equal_memory(tmp_path, picker, read_mode, layout):
    pair = _pair(tmp_path, layout=layout, transition_picker=picker)
    pair.disk.buffer.read_mode = read_mode
    for seed in (0, 1):
        offrl.seed(seed)
        a = pair.memory.sample_transition_batch(64)
        offrl.seed(seed)
        b = pair.disk.sample_transition_batch(64)
        _assert_batches_equal(a, b)
    # the in-memory buffer now samples through its per-transition table; the disk store never keeps one
    assert [pair.disk.buffer.transition_table() for _ in range(3)] == [None] * 3
    if isinstance(picker, BasicTransitionPicker):
        assert pair.memory.buffer.transition_table() is not None
    offrl.seed(3)
    t = pair.memory.sample_transition()
    offrl.seed(3)
    u = pair.disk.sample_transition()
    np.testing.assert_array_equal(t.observation, u.observation)


@pytest.mark.parametrize("discrete", [True, False])
@pytest.mark.parametrize("read_mode", ["pread", "mmap"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_trajectory_batches_from_disk_equal_memory(tmp_path, discrete, read_mode, layout):
    pair = _pair(tmp_path, discrete=discrete, layout=layout, trajectory_slicer=BasicTrajectorySlicer())
    pair.disk.buffer.read_mode = read_mode
    offrl.seed(5)
    a = pair.memory.sample_trajectory_batch(16, 4)
    offrl.seed(5)
    b = pair.disk.sample_trajectory_batch(16, 4)
    for field in ("observations", "actions", "rewards", "returns_to_go", "terminals", "timesteps", "masks"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)


def test_user_picker_sees_the_same_episodes_from_disk(tmp_path):
    class Picker:  # a d3rlpy-style picker: called per (episode, index)
        def __call__(self, episode, index):
            return BasicTransitionPicker()(episode, index)

    pair = _pair(tmp_path, transition_picker=Picker())
    offrl.seed(2)
    a = pair.memory.sample_transition_batch(16)
    offrl.seed(2)
    b = pair.disk.sample_transition_batch(16)
    _assert_batches_equal(a, b)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_splits_of_a_disk_dataset_equal_the_memory_splits(tmp_path, layout):
    pair = _pair(tmp_path, layout=layout)
    train_m, test_m = train_test_split(pair.memory, test_size=0.5, random_state=3)
    train_d, test_d = train_test_split(pair.disk, test_size=0.5, random_state=3)
    for k, (a, b) in enumerate(((train_m, train_d), (test_m, test_d))):
        assert isinstance(b.buffer, DiskStore) and b.buffer.is_view  # a view: nothing loaded
        assert b.buffer.actions.base is pair.disk.buffer.actions.base
        assert a.size() == b.size() and a.transition_count == b.transition_count
        for x, y in zip(a.episodes, b.episodes, strict=True):
            np.testing.assert_array_equal(x.observations, y.observations)
            np.testing.assert_array_equal(x.rewards, y.rewards)
        offrl.seed(k)
        u = a.sample_transition_batch(32)
        offrl.seed(k)
        _assert_batches_equal(u, b.sample_transition_batch(32))
        np.testing.assert_array_equal(a.compute_returns(), b.compute_returns())
        for key, value in a.to_arrays().items():
            np.testing.assert_array_equal(value, b.to_arrays()[key], err_msg=key)
        # dumped (disk and HDF5), the view is a dataset of its own episodes only
        back = ReplayBuffer.load(dump_disk_dataset(b, tmp_path / f"split{k}"), in_memory=False)
        b.dump(tmp_path / f"split{k}.h5")
        for other in (back, ReplayBuffer.load(tmp_path / f"split{k}.h5")):
            for key, value in a.to_arrays().items():
                np.testing.assert_array_equal(value, other.to_arrays()[key], err_msg=key)


def _policy(dataset):
    policy = DiscreteBCConfig(batch_size=8).create()
    offrl.seed(1)
    policy.build_with_dataset(dataset)
    return policy


@pytest.mark.parametrize("layout", LAYOUTS)
def test_evaluators_and_importance_sampling_on_disk_equal_memory(tmp_path, layout):
    pair = _pair(tmp_path, layout=layout)
    policy = _policy(pair.memory)
    q_algo = DQNConfig(batch_size=8).create()
    offrl.seed(1)
    q_algo.build_with_dataset(pair.memory)
    for evaluator in (TDErrorEvaluator(), DiscountedSumOfAdvantageEvaluator(),
                      AverageValueEstimationEvaluator(), InitialStateValueEstimationEvaluator(),
                      DiscreteActionMatchEvaluator()):
        assert evaluator(q_algo, pair.memory) == evaluator(q_algo, pair.disk)
    for estimator in ("is", "wis", "pdis", "wpdis"):
        a = estimate_policy_value(policy, pair.memory, estimator, n_bootstrap=30)
        b = estimate_policy_value(policy, pair.disk, estimator, n_bootstrap=30)
        assert a.value == b.value and a.lower == b.lower and a.upper == b.upper


@pytest.mark.parametrize("layout", LAYOUTS)
def test_fqe_trained_on_disk_equals_fqe_trained_in_memory(tmp_path, layout):
    pair = _pair(tmp_path, layout=layout)
    values = []
    for dataset in (pair.memory, pair.disk):
        policy = _policy(pair.memory)
        fqe = DiscreteFQE(algo=policy, config=DiscreteFQEConfig(batch_size=8))
        offrl.seed(2)
        fqe.fit(dataset, n_steps=4, n_steps_per_epoch=2, logger_adapter=NoopAdapterFactory(), show_progress=False)
        x = pair.memory.to_arrays()["observations"]
        values.append(fqe.predict_value(x, policy.predict(x)))
    np.testing.assert_array_equal(values[0], values[1])


# ------------------------------------------------------------ round trips
@pytest.mark.parametrize("layout", LAYOUTS)
def test_dump_disk_dataset_round_trips_a_fifo_buffer_and_loads_in_memory(tmp_path, layout):
    episodes = _episodes(discrete=False, n_episodes=8)
    fifo = ReplayBuffer(FIFOBuffer(20), episodes=episodes)  # its head has moved
    assert fifo.buffer.head > 0
    path = dump_disk_dataset(fifo, tmp_path / "fifo", layout=layout)
    back = ReplayBuffer.load(path, in_memory=False)
    loaded = ReplayBuffer.load(path)  # in_memory=True copies the columns
    assert type(loaded.buffer) is InfiniteBuffer and loaded.buffer.actions.base is None
    for other in (back, loaded):
        assert other.transition_count == fifo.transition_count == 20
        for x, y in zip(fifo.episodes, other.episodes):
            np.testing.assert_array_equal(x.observations, y.observations)
            np.testing.assert_array_equal(x.actions, y.actions)
            assert x.terminated == y.terminated
    # a disk source dumps again in chunks, byte for byte
    again = dump_disk_dataset(back, tmp_path / "again", layout=layout)
    for name in os.listdir(path):
        if name.endswith(".bin"):
            assert (tmp_path / "again" / name).read_bytes() == (tmp_path / "fifo" / name).read_bytes()
    assert os.path.isdir(again)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_streaming_writer_backfills_behaviour_and_infers_discrete_action_size(tmp_path, layout):
    eps = _episodes(discrete=True, n_episodes=4)
    first = Episode(observations=eps[0].observations, actions=eps[0].actions, rewards=eps[0].rewards,
                    terminated=True)  # no behaviour probabilities
    with DiskDatasetWriter(tmp_path / "d", layout=layout) as writer:
        writer.add_episode(first)
        writer.add_episodes(eps[1:])
    disk = ReplayBuffer.load(tmp_path / "d", in_memory=False)
    memory = ReplayBuffer(InfiniteBuffer(), episodes=[first, *eps[1:]], action_space=offrl.ActionSpace.DISCRETE)
    np.testing.assert_array_equal(disk.behaviour_probabilities, memory.behaviour_probabilities)
    assert np.isnan(disk.behaviour_probabilities[: first.size()]).all()
    largest = max(int(e.actions.max()) for e in eps)
    assert disk.dataset_info.action_size == largest + 1
    for key, value in memory.to_arrays().items():  # rows: the records were rewritten wider, nothing else moved
        np.testing.assert_array_equal(value, disk.to_arrays()[key], err_msg=key)


def test_writer_is_atomic_and_refuses_bad_episodes_naming_them(tmp_path):
    target = tmp_path / "d"
    with pytest.raises(RuntimeError, match="boom"):
        with DiskDatasetWriter(target) as writer:
            writer.add_episode(_episodes()[0])
            raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []  # no partial directory, no target
    writer = DiskDatasetWriter(target)
    writer.add_episode(_episodes()[0])
    bad = Episode(observations=np.zeros((3, 4), np.float32), actions=np.zeros((3, 1), np.int64),
                  rewards=np.zeros((3, 1), np.float32), terminated=True)
    with pytest.raises(ValueError, match="episode 1"):
        writer.add_episode(bad)
    assert not target.exists()  # nothing visible before close
    writer.close()
    assert ReplayBuffer.load(target, in_memory=False).size() == 1
    with pytest.raises(ValueError, match="already exists"):
        DiskDatasetWriter(target)
    with pytest.raises(ValueError, match="no episodes"):
        DiskDatasetWriter(tmp_path / "empty").close()
    assert not (tmp_path / "empty").exists()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_disk_store_is_read_only(tmp_path, layout):
    pair = _pair(tmp_path, layout=layout)
    with pytest.raises(TypeError, match="read-only on disk"):
        pair.disk.append_episode(_episodes()[0])
    with pytest.raises(TypeError, match="read-only on disk"):
        pair.disk.append(np.zeros(3, np.float32), 0, 0.0)
    with pytest.raises(ValueError, match="FIFO"):
        ReplayBuffer.load(pair.path, FIFOBuffer(10), in_memory=False)


# ----------------------------------------------------------------- faults
@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_file_modified_after_opening_is_detected_before_the_next_epoch(tmp_path, layout):
    pair = _pair(tmp_path, layout=layout)
    pair.disk.buffer.check()  # unchanged: no error
    name = DATA_FILE[layout]["rewards"]
    column = pair.path / name
    data = bytearray(column.read_bytes())
    data[:4] = np.float32(123.0).tobytes()
    st = os.stat(column)
    column.write_bytes(bytes(data))
    os.utime(column, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    with pytest.raises(DiskDatasetChangedError, match=f"{name} changed"):
        pair.disk.buffer.check()
    policy = _policy(pair.memory)
    fqe = DiscreteFQE(algo=policy, config=DiscreteFQEConfig(batch_size=8))
    with pytest.raises(DiskDatasetChangedError, match="another process"):
        fqe.fit(pair.disk, n_steps=2, n_steps_per_epoch=1, logger_adapter=NoopAdapterFactory(), show_progress=False)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_replaced_or_removed_file_is_detected(tmp_path, layout):
    pair = _pair(tmp_path, layout=layout)
    (pair.path / "manifest.json").rename(pair.path / "m")
    (pair.path / "m").rename(pair.path / "manifest.json")  # same bytes, same inode: unchanged
    pair.disk.buffer.check()
    name = DATA_FILE[layout]["actions"]
    shutil.copy(pair.path / name, tmp_path / "copy")
    os.replace(tmp_path / "copy", pair.path / name)  # same size, new inode
    with pytest.raises(DiskDatasetChangedError, match=name):
        pair.disk.buffer.check()
    os.remove(pair.path / name)
    with pytest.raises(DiskDatasetChangedError, match="gone"):
        pair.disk.buffer.check()


def test_disk_full_is_refused_before_writing_naming_bytes(tmp_path, monkeypatch):
    pair = _pair(tmp_path)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(disk_module.shutil, "disk_usage", lambda p: usage(10**6, 10**6 - 1000, 1000))
    with pytest.raises(OSError, match=r"needs \d+ bytes .* 1000 bytes .* free") as info:
        dump_disk_dataset(pair.memory, tmp_path / "full")
    assert info.value.errno == errno.ENOSPC
    assert not (tmp_path / "full").exists() and [p.name for p in tmp_path.iterdir()] == ["data"]
    with pytest.raises(OSError, match="needs 5000000000 bytes"):
        DiskDatasetWriter(tmp_path / "declared", expected_bytes=5 * 10**9)
    with pytest.raises(OSError, match="the next episode"):  # undeclared size: checked as it grows
        with DiskDatasetWriter(tmp_path / "streamed") as writer:
            writer.add_episode(_episodes()[0])
    assert [p.name for p in tmp_path.iterdir()] == ["data"]


def _corrupt_manifest(path, edit):
    manifest = json.loads((path / "manifest.json").read_text())
    edit(manifest)
    (path / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("edit, message", [
    (lambda m: m.update(format="other"), "'format' is 'other'"),
    (lambda m: m.update(schema_version=9), "schema version 9"),
    (lambda m: m.update(rows=10**12), "declares .* rows"),
    (lambda m: m["columns"]["actions"].update(dtype="|O"), "dtype '|O'"),
    (lambda m: m["columns"]["actions"].update(shape=[-1, 1]), "non-negative ints"),
    (lambda m: m["columns"]["rewards"].update(bytes=4), "declares 4 bytes"),
    (lambda m: m["columns"].pop("observations_0"), "no entry for column 'observations_0'"),
    (lambda m: m.update(action_space="both"), "'action_space' is 'both'"),
    (lambda m: m.update(observation_keys=["a", "a"]), "distinct strings"),
], ids=["format", "version", "rows", "object-dtype", "shape", "bytes", "missing", "space", "keys"])
def test_corrupt_manifest_is_refused_naming_the_field(tmp_path, edit, message):
    pair = _pair(tmp_path)
    _corrupt_manifest(pair.path, edit)
    with pytest.raises(ValueError, match=message):
        ReplayBuffer.load(pair.path, in_memory=False)


def test_truncated_manifest_or_column_or_table_is_refused(tmp_path):
    pair = _pair(tmp_path)
    text = (pair.path / "manifest.json").read_bytes()
    (pair.path / "manifest.json").write_bytes(text[: len(text) // 2])
    with pytest.raises(ValueError, match="not valid JSON.*truncated"):
        ReplayBuffer.load(pair.path, in_memory=False)
    (pair.path / "manifest.json").write_bytes(text)
    data = (pair.path / "observations_0.bin").read_bytes()
    (pair.path / "observations_0.bin").write_bytes(data[:-4])
    with pytest.raises(ValueError, match=rf"observations_0.bin holds {len(data) - 4} bytes.*{len(data)}.*truncated"):
        ReplayBuffer.load(pair.path, in_memory=False)
    (pair.path / "observations_0.bin").write_bytes(data)
    ends = np.fromfile(pair.path / "episode_ends.bin", dtype="<i8")
    ends[0] += 1
    ends.tofile(pair.path / "episode_ends.bin")
    with pytest.raises(ValueError, match="episode table does not match"):
        ReplayBuffer.load(pair.path, in_memory=False)
    with pytest.raises(ValueError, match="not a disk dataset directory"):
        ReplayBuffer.load(tmp_path / "nowhere", in_memory=False)


# ------------------------------------------------------------- importers
def _d4rl_file(path, discrete: bool, n: int = 50):
    import h5py

    rng = np.random.default_rng(7)
    arrays = {
        "observations": rng.standard_normal((n, 3)).astype(np.float32),
        "actions": rng.integers(0, 4, n) if discrete else rng.uniform(-1, 1, (n, 2)).astype(np.float32),
        "rewards": rng.standard_normal(n).astype(np.float32),
        "terminals": np.zeros(n, bool), "timeouts": np.zeros(n, bool),
    }
    arrays["terminals"][[4, 20]] = True
    arrays["timeouts"][[9, 33]] = True  # and the file ends mid-episode
    arrays["next_observations"] = arrays["observations"] + 1
    with h5py.File(path, "w") as f:
        for key, value in arrays.items():
            f.create_dataset(key, data=value)
        f.create_dataset("infos/action_log_probs", data=np.log(rng.uniform(0.1, 1, n)))
    return arrays


@pytest.mark.parametrize("discrete", [True, False])
@pytest.mark.parametrize("chunk_rows", [1, 7, 1000])
def test_d4rl_import_streamed_to_disk_equals_the_in_memory_import(tmp_path, discrete, chunk_rows):
    from offrl.datasets import load_d4rl_hdf5

    _d4rl_file(tmp_path / "f.hdf5", discrete)
    memory = load_d4rl_hdf5(tmp_path / "f.hdf5")
    disk, extras = load_d4rl_hdf5(tmp_path / "f.hdf5", to=tmp_path / "out", chunk_rows=chunk_rows,
                                  return_extras=True)
    assert isinstance(disk.buffer, DiskStore) and type(disk) is type(memory)
    assert disk.dataset_info == memory.dataset_info and "action_log_probs" in extras["infos"]
    expected, found = memory.to_arrays(), disk.to_arrays()
    for key in expected:
        np.testing.assert_array_equal(expected[key], found[key], err_msg=key)
    assert [e.final_observation is None for e in disk.episodes] == [e.final_observation is None
                                                                    for e in memory.episodes]
    offrl.seed(0)
    a = memory.sample_transition_batch(32)
    offrl.seed(0)
    _assert_batches_equal(a, disk.sample_transition_batch(32))


def test_d4rl_streamed_import_refuses_bad_values_naming_steps_and_leaves_nothing(tmp_path):
    import h5py

    from offrl.datasets import load_d4rl_hdf5

    _d4rl_file(tmp_path / "f.hdf5", False)
    with h5py.File(tmp_path / "f.hdf5", "r+") as f:
        f["rewards"][25] = np.nan
    with pytest.raises(ValueError, match=r"f.hdf5: steps 21\.\.33: .*rewards"):
        load_d4rl_hdf5(tmp_path / "f.hdf5", to=tmp_path / "out", chunk_rows=5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.hdf5"]


def test_hdf5_dump_refuses_a_full_disk_before_writing(tmp_path, monkeypatch):
    memory = _pair(tmp_path).memory
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(disk_module.shutil, "disk_usage", lambda p: usage(10**6, 10**6 - 1000, 1000))
    with pytest.raises(OSError, match=r"needs \d+ bytes .* 1000 bytes .* free"):
        memory.dump(tmp_path / "x.h5")
    assert not (tmp_path / "x.h5").exists() and not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())
    monkeypatch.undo()
    memory.dump(tmp_path / "x.h5")
    assert ReplayBuffer.load(tmp_path / "x.h5").transition_count == memory.transition_count


def test_resident_limit_releases_mapped_pages_and_sampling_is_unchanged(tmp_path, monkeypatch):
    pair = _pair(tmp_path)
    store = pair.disk.buffer
    store.resident_limit = 1  # read_mode "pread" (the default) maps nothing: the limit has nothing to count
    pair.disk.sample_transition_batch(64)
    assert getattr(store, "_touched_bytes", 0) == 0
    store.resident_limit = None
    store.read_mode = "mmap"
    released = []
    real = store.release_pages
    monkeypatch.setattr(store, "release_pages", lambda: (released.append(1), real()))
    offrl.seed(4)
    pair.disk.sample_transition_batch(64)
    assert released == []  # no limit by default
    store.resident_limit = 64 * 5 * disk_module.TOUCH_BYTES  # 4 mapped columns + 1: one batch of 64 rows reaches it
    offrl.seed(4)
    a = pair.disk.sample_transition_batch(64)
    assert released == [] and store._touched_bytes == 64 * 5 * disk_module.TOUCH_BYTES
    b = pair.disk.sample_transition_batch(64)
    assert released == [1] and store._touched_bytes == 0
    offrl.seed(4)
    _assert_batches_equal(a, pair.memory.sample_transition_batch(64))
    _assert_batches_equal(b, pair.memory.sample_transition_batch(64))
    pair.disk.sample_trajectory_batch(4, 3)  # counted too
    assert store._touched_bytes == 4 * 5 * disk_module.TOUCH_BYTES


# ------------------------------------------------------- positional reads
def _column_pair(tmp_path):
    """A disk column read by positional reads and the same rows in memory."""
    pair = _pair(tmp_path, discrete=False)
    m, d = pair.memory.buffer, pair.disk.buffer
    return pair, m.observations[0][m.head:m.tail], d.observations[0], m.rewards[m.head:m.tail], d.rewards


def test_positional_gathers_equal_numpy_indexing_for_every_key_shape(tmp_path):
    pair, obs, disk_obs, rewards, disk_rewards = _column_pair(tmp_path)
    assert pair.disk.buffer.read_mode == "pread"
    n = obs.shape[0]
    rng = np.random.default_rng(0)
    keys = [
        rng.integers(0, n, 50),                                   # random rows, repeats
        np.arange(3, 17),                                         # one run of consecutive rows
        np.array([4, 5, 6, 1, 2, 9, 10, 10, 11]),                 # runs, a repeat, going back
        np.array([-1, -n, 0, n - 1]),                             # negative indices as numpy reads them
        rng.integers(0, n - 4, 6)[:, None] + np.arange(4),        # 2-D windows (trajectory slices)
        np.array([7], dtype=np.int32), np.array(5, dtype=np.uint64),  # other integer dtypes, a 0-d index
    ]
    for key in keys:
        got = disk_obs[key]
        assert type(got) is np.ndarray and got.dtype == obs.dtype and got.flags.writeable
        np.testing.assert_array_equal(got, obs[key], err_msg=str(key))
    window = keys[4]
    np.testing.assert_array_equal(disk_rewards[window, 0], rewards[window, 0])  # tuple keys: rows, then a column
    np.testing.assert_array_equal(disk_obs[keys[0], 1:], obs[keys[0], 1:])
    np.testing.assert_array_equal(disk_obs[np.array([], dtype=np.int64)], obs[:0])
    # every other key (slices, masks, lists), ufuncs and reductions: checked copies read by position
    np.testing.assert_array_equal(disk_obs[2:5], obs[2:5])
    np.testing.assert_array_equal(disk_obs[obs[:, 0] > 0], obs[obs[:, 0] > 0])
    np.testing.assert_array_equal(disk_obs[[1, 2]], obs[[1, 2]])
    for key in (5, -1, np.int32(3), (5, 1), (-2, slice(0, 2)), slice(None, None, 3), slice(10, 2, -2), slice(3, 3),
                slice(-4, None), (Ellipsis, 0), (slice(1, 6), [0, 2]), None, (slice(2, 4), None), slice(n + 5, n + 9)):
        got, expected = disk_obs[key], obs[key]
        assert type(got) is type(expected) or np.ndim(expected) == 0, key
        np.testing.assert_array_equal(got, expected, err_msg=str(key))
    np.testing.assert_array_equal(disk_rewards[2:7, 0], rewards[2:7, 0])
    with pytest.raises(IndexError, match=f"index {n} is out of bounds for axis 0 with size {n}"):
        disk_obs[n]
    assert type(disk_obs * 2) is np.ndarray and type(disk_obs[2:5]) is np.ndarray
    np.testing.assert_array_equal(np.concatenate([disk_obs, disk_obs[:2]]), np.concatenate([obs, obs[:2]]))
    np.testing.assert_array_equal(disk_obs.copy(), obs)
    np.testing.assert_array_equal(disk_obs.astype(np.float64), obs.astype(np.float64))
    assert disk_obs.tolist() == obs.tolist() and disk_obs.tobytes() == obs.tobytes()
    assert np.shape(disk_obs) == obs.shape and [r.tolist() for r in disk_obs] == obs.tolist()
    assert float(disk_rewards.sum()) == pytest.approx(float(rewards.sum()), rel=1e-5)
    for bad in (np.array([n]), np.array([0, -n - 1])):
        with pytest.raises(IndexError, match=f"out of bounds for axis 0 with size {n}"):
            disk_obs[bad]


def test_a_gather_of_the_next_rows_reads_only_the_rows_it_lacks(tmp_path, monkeypatch):
    pair, obs, disk_obs, _, _ = _column_pair(tmp_path)
    n = obs.shape[0]
    calls = []
    real = os.pread
    monkeypatch.setattr(disk_module.os, "pread", lambda fd, size, offset: (calls.append(size), real(fd, size, offset))[1])
    rows = np.array([1, 9, 3, 20, 14, 6])  # scattered, neither the first nor the last row
    np.testing.assert_array_equal(disk_obs[rows], obs[rows])
    assert len(calls) == 6 and set(calls) == {3 * disk_obs.itemsize * 3}  # each row read with its neighbours
    calls.clear()
    following = np.where(np.arange(6) % 3 == 0, rows, rows + 1)  # terminal rows repeat their row
    following[1] -= 2  # the row before
    following[4] = n - 1  # and one row that no read holds
    got = disk_obs[following]
    np.testing.assert_array_equal(got, obs[following])
    assert got.flags.writeable and len(calls) == 1
    calls.clear()
    again = np.array([1, 2, 3])  # consecutive rows: one read of the run
    np.testing.assert_array_equal(disk_obs[again], obs[again])
    assert len(calls) == 1
    rng = np.random.default_rng(1)
    for _ in range(20):  # random sequences against numpy
        rows = rng.integers(0, n, 6)
        np.testing.assert_array_equal(disk_obs[rows], obs[rows])
        following = np.clip(rows + rng.integers(-2, 3, 6), 0, n - 1)
        np.testing.assert_array_equal(disk_obs[following], obs[following])


def test_read_mode_is_validated_and_shared_with_split_views(tmp_path):
    pair = _pair(tmp_path)
    store = pair.disk.buffer
    with pytest.raises(ValueError, match=r"read_mode must be one of \('pread', 'mmap'\), got 'aio'"):
        store.read_mode = "aio"
    train, _ = train_test_split(pair.disk, test_size=0.5, random_state=0)
    store.read_mode = "mmap"
    assert train.buffer.read_mode == "mmap"
    store.read_mode = "pread"
    assert train.buffer.read_mode == "pread"
    with pytest.raises(TypeError, match="split_reads must be a bool, got str"):
        store.split_reads = "no"
    assert store.split_reads and train.buffer.split_reads
    store.split_reads = False
    assert not train.buffer.split_reads


def _mapped_kb(file) -> int:
    """Resident kB of this process's mappings of ``file`` (Linux smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            if line[0] in "0123456789abcdef" and "-" in line.split()[0]:
                inside = line.rstrip().endswith(os.fspath(file))
            elif inside and line.startswith("Rss:"):
                total += int(line.split()[1])
    return total


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux /proc/self/smaps")
@pytest.mark.parametrize("layout", LAYOUTS)
def test_positional_reads_map_no_pages_and_mmap_reads_do(tmp_path, layout):
    pair = _pair(tmp_path, layout=layout)
    store = pair.disk.buffer
    file = pair.path / DATA_FILE[layout]["observations_0"]
    store.release_pages()
    assert _mapped_kb(file) == 0
    for _ in range(5):
        pair.disk.sample_transition_batch(64)
    assert _mapped_kb(file) == 0  # positional reads: page cache only, nothing mapped into the process
    store.read_mode = "mmap"
    pair.disk.sample_transition_batch(64)
    assert _mapped_kb(file) > 0
    store.release_pages()
    assert _mapped_kb(file) == 0


def test_a_column_truncated_under_positional_reads_raises(tmp_path):
    pair = _pair(tmp_path)
    column = pair.disk.buffer.actions
    n = column.shape[0]
    os.truncate(pair.path / "actions.bin", (n - 2) * column.dtype.itemsize)
    with pytest.raises(DiskDatasetChangedError, match=r"actions\.bin: read .* bytes for 2 rows .* truncated"):
        column[np.array([0, n - 1])]


# ------------------------------------------------------------ rows layout
_OBSERVATION_DTYPES = [np.float32, np.uint8, np.int16, np.int64]


@st.composite
def _random_episodes(draw):
    """Episodes of any observation layout (one array, a tuple, a dict) with
    columns of mixed dtypes and shapes, discrete or continuous actions, with
    or without behaviour probabilities, every kind of episode end."""
    n_columns = draw(st.integers(1, 3))
    form = draw(st.sampled_from(["array", "tuple", "dict"]) if n_columns == 1 else st.sampled_from(["tuple", "dict"]))
    dtypes = [draw(st.sampled_from(_OBSERVATION_DTYPES)) for _ in range(n_columns)]
    shapes = [tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=2))) for _ in range(n_columns)]
    discrete = draw(st.booleans())
    behaviour = draw(st.booleans())
    action_size = draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2**16))
    lengths = draw(st.lists(st.integers(1, 6), min_size=1, max_size=4))
    rng = np.random.default_rng(seed)

    def observation(n):
        columns = [(rng.integers(0, 100, (n, *shape)) if np.dtype(dtype).kind in "iu"
                    else rng.normal(size=(n, *shape))).astype(dtype) for dtype, shape in zip(dtypes, shapes)]
        if form == "array":
            return columns[0]
        return {f"k{k}": c for k, c in enumerate(columns)} if form == "dict" else columns

    episodes = []
    for i, n in enumerate(lengths):
        kind = (i + seed) % 3
        final = None
        if kind == 1:
            one = observation(1)
            final = {k: v[0] for k, v in one.items()} if form == "dict" else (
                [v[0] for v in one] if form == "tuple" else one[0])
        episodes.append(Episode(
            observations=observation(n),
            actions=rng.integers(0, 4, (n, 1)) if discrete else rng.uniform(-1, 1, (n, action_size)).astype(np.float32),
            rewards=rng.normal(size=(n, 1)).astype(np.float32),
            terminated=kind == 0, final_observation=final,
            behaviour_probabilities=rng.uniform(0.1, 1, n) if behaviour else None,
        ))
    return episodes, discrete


def _record_of(manifest) -> np.dtype:
    names = list(manifest["columns"])
    names = [n for n in names if not n.startswith("episode_")]
    return np.dtype({
        "names": names,
        "formats": [(np.dtype(manifest["columns"][n]["dtype"]), tuple(manifest["columns"][n]["shape"][1:])) for n in names],
        "offsets": [manifest["columns"][n]["offset"] for n in names], "itemsize": manifest["record_bytes"],
    })


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_random_episodes(), rows_seed=st.integers(0, 2**16))
def test_records_hold_exactly_the_columns_and_read_back_like_them(case, rows_seed):
    episodes, discrete = case
    space = offrl.ActionSpace.DISCRETE if discrete else offrl.ActionSpace.CONTINUOUS
    size = 4 if discrete else None
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for layout in LAYOUTS:
            paths[layout] = os.path.join(tmp, layout)
            with DiskDatasetWriter(paths[layout], action_space=space, action_size=size, layout=layout) as writer:
                writer.add_episodes(episodes)
        # the record file holds, field by field, exactly the bytes of the column files
        manifest = json.loads(open(os.path.join(paths["rows"], "manifest.json")).read())
        record = _record_of(manifest)
        assert record.itemsize % max(record.fields[n][0].base.itemsize for n in record.names) == 0
        for name in record.names:
            dtype = record.fields[name][0]
            assert record.fields[name][1] % dtype.base.itemsize == 0  # aligned
        records = np.fromfile(os.path.join(paths["rows"], "records.bin"), dtype=record)
        for name in record.names:
            column = np.fromfile(os.path.join(paths["columns"], f"{name}.bin"), dtype=record.fields[name][0].base)
            assert records[name].tobytes() == column.tobytes(), name
        memory = ReplayBuffer(InfiniteBuffer(), episodes=episodes, action_space=space, action_size=size)
        stores = {layout: ReplayBuffer.load(paths[layout], in_memory=False) for layout in LAYOUTS}
        for layout, disk in stores.items():
            assert disk.dataset_info == memory.dataset_info, layout
            expected, found = memory.to_arrays(), disk.to_arrays()
            for key in expected:
                np.testing.assert_equal(found[key], expected[key], err_msg=f"{layout} {key}")
        # positional gathers of the records equal numpy's gathers of the mapped records, any index arrays
        rows_store = stores["rows"].buffer
        columns = [*rows_store.observations, rows_store.actions, rows_store.rewards]
        if rows_store.behaviour_probabilities is not None:
            columns.append(rows_store.behaviour_probabilities)
        n = rows_store.actions.shape[0]
        rng = np.random.default_rng(rows_seed)
        for _ in range(6):
            rows = rng.integers(0, n, int(rng.integers(1, 9)))
            keys = [rows, np.clip(rows + 1, 0, n - 1), np.clip(rows + rng.integers(-2, 3, rows.shape[0]), 0, n - 1),
                    np.arange(int(rng.integers(0, n)), n), rng.integers(0, n, (2, 3))]
            for key in keys:
                for column in columns:
                    rows_store.read_mode = "pread"
                    got = column[key]
                    rows_store.read_mode = "mmap"
                    np.testing.assert_array_equal(got, column[key])
                    assert got.dtype == column.dtype and got.flags.c_contiguous and got.flags.writeable
        rows_store.read_mode = "pread"
        for seed in (0, 1) if memory.transition_count else ():  # (one truncated 1-step episode has none)
            for split in (True, False):  # 48 rows: the reads split over the reader thread where it runs
                rows_store.split_reads = split
                offrl.seed(seed)
                a = memory.sample_transition_batch(48)
                offrl.seed(seed)
                _assert_batches_equal(a, stores["rows"].sample_transition_batch(48))


def _rows_dataset(path, rng, n_episodes: int, length: int, terminated: bool) -> list:
    """``n_episodes`` random episodes (3-dim observations, 2-dim actions) written at ``path`` in the rows layout."""
    episodes = [Episode(observations=rng.normal(size=(length, 3)).astype(np.float32),
                        actions=rng.uniform(-1, 1, (length, 2)).astype(np.float32),
                        rewards=rng.normal(size=(length, 1)).astype(np.float32), terminated=terminated)
                for _ in range(n_episodes)]
    with DiskDatasetWriter(path, layout="rows") as writer:
        writer.add_episodes(episodes)
    return episodes


def test_a_scattered_transition_batch_is_one_read_per_transition(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    episodes = _rows_dataset(tmp_path / "d", rng, n_episodes=20, length=50, terminated=True)
    disk = ReplayBuffer.load(tmp_path / "d", in_memory=False)
    memory = ReplayBuffer(InfiniteBuffer(), episodes=episodes)
    record_bytes = json.loads((tmp_path / "d" / "manifest.json").read_text())["record_bytes"]
    assert record_bytes == 3 * 4 + 2 * 4 + 4
    calls = []
    real = os.pread
    monkeypatch.setattr(disk_module.os, "pread", lambda fd, size, offset: (calls.append(size), real(fd, size, offset))[1])
    steps = np.arange(20) * 50 + rng.integers(1, 48, 20)  # scattered, inside episodes
    ids, rows = disk.buffer.locate_transitions(steps)  # terminated episodes: transition t is row t
    np.testing.assert_array_equal(rows, steps)
    batch = BasicTransitionPicker().pick_batch(disk.buffer, ids, rows)
    # observations, next observations, actions, next actions, rewards: one read of the step's record and the next
    assert calls == [2 * record_bytes] * 20
    _assert_batches_equal(batch, BasicTransitionPicker().pick_batch(memory.buffer, ids, rows))
    calls.clear()
    steps = np.arange(20) * 50 + rng.integers(1, 48, 20)  # another batch
    steps[[3, 7]] = [199, 399]  # terminal steps: zero next observations and actions, no extra read
    ids, rows = disk.buffer.locate_transitions(steps)
    batch = BasicTransitionPicker().pick_batch(disk.buffer, ids, rows)
    assert calls == [2 * record_bytes] * 20
    _assert_batches_equal(batch, BasicTransitionPicker().pick_batch(memory.buffer, ids, rows))


def test_gathers_at_rows_gathered_before_read_nothing_and_return_new_arrays(tmp_path, monkeypatch):
    """The fields of a batch gathered one after another at the same rows
    (by content, not by array identity) cost one read; every result is a
    fresh writable array, and rows changed in place are gathered anew."""
    rng = np.random.default_rng(5)
    _rows_dataset(tmp_path / "d", rng, n_episodes=10, length=40, terminated=False)
    store = ReplayBuffer.load(tmp_path / "d", in_memory=False).buffer
    obs, actions, rewards = store.observations[0], store.actions, store.rewards
    mapped = store._maps[0]
    calls = []
    real = os.pread
    monkeypatch.setattr(disk_module.os, "pread", lambda fd, size, offset: (calls.append(size), real(fd, size, offset))[1])
    rows = np.array([5, 90, 33, 207, 150, 371, 12])  # scattered
    first = obs[rows]
    assert len(calls) == 7
    first[:] = -1.0  # the caller owns its result
    for column, name in ((obs, "observations_0"), (actions, "actions"), (rewards, "rewards")):
        for key in (rows, rows.copy(), rows.astype(np.int32), list(rows)):
            got = column[np.asarray(key)]
            assert got.flags.writeable and got.flags.c_contiguous
            np.testing.assert_array_equal(got, mapped[name][rows])
    assert len(calls) == 7  # observations, actions, rewards at the same rows: no further read
    got = actions[rows + 1]  # the rows after: inside the windows already read
    np.testing.assert_array_equal(got, mapped["actions"][rows + 1])
    assert len(calls) == 7
    rows[2] = 301  # changed in place: its content is new, so it is gathered anew
    np.testing.assert_array_equal(obs[rows], mapped["observations_0"][rows])
    np.testing.assert_array_equal(rewards[rows], mapped["rewards"][rows])
    assert len(calls) == 8  # one read for the row no window holds
    for bad in (np.array([5, 400]), np.array([-401])):  # bounds still checked for rows not gathered before
        with pytest.raises(IndexError, match="out of bounds for axis 0 with size 400"):
            obs[bad]
    np.testing.assert_array_equal(obs[np.array([-1, -400])], mapped["observations_0"][[399, 0]])
    # gathers too large to be remembered (5 records of 24 bytes > 64): served from the windows, else read again
    monkeypatch.setattr(_disk_files, "_RECENT_BYTES", 64)
    calls.clear()
    big, other = np.array([20, 220, 120, 320, 60]), np.array([80, 180, 280, 380, 40])
    for key in (big, big, other, big):
        for column, name in ((obs, "observations_0"), (actions, "actions")):
            np.testing.assert_array_equal(column[key], mapped[name][key])
    assert len(calls) == 3 * 5  # big, other, big again: one read per row each time


def test_record_gathers_in_any_sequence_equal_the_mapped_gathers(tmp_path):
    """Sequences of gathers that hit, partly hit and miss the windows kept
    from the gather before, on every field, against numpy's gathers of the
    mapped records."""
    rng = np.random.default_rng(3)
    episodes = [Episode(observations=[rng.normal(size=(n, 2, 2)).astype(np.float32), rng.integers(0, 9, (n, 3)).astype(np.uint8)],
                        actions=rng.integers(0, 5, (n, 1)), rewards=rng.normal(size=(n, 1)).astype(np.float32),
                        terminated=n % 2 == 0, behaviour_probabilities=rng.uniform(0.1, 1, n))
                for n in rng.integers(5, 40, 12)]
    path = dump_disk_dataset(ReplayBuffer(InfiniteBuffer(), episodes=episodes), tmp_path / "d", layout="rows")
    store = ReplayBuffer.load(path, in_memory=False).buffer
    columns = [*store.observations, store.actions, store.rewards, store.behaviour_probabilities]
    n = store.actions.shape[0]
    for _ in range(300):
        size = int(rng.integers(1, 12))
        rows = rng.integers(0, n, size)
        following = [rows, rows + 1, rows - 1, rows + rng.integers(-3, 4, size),
                     np.where(rng.random(size) < 0.2, 0, rows + 1), rng.integers(0, n, size)]
        for key in following:
            key = np.clip(key, 0, n - 1)
            column = columns[int(rng.integers(0, len(columns)))]
            store.read_mode = "pread"
            got = column[key]
            store.read_mode = "mmap"
            np.testing.assert_array_equal(got, column[key])
            store.read_mode = "pread"


def test_a_column_dataset_without_a_layout_field_opens_as_before(tmp_path):
    pair = _pair(tmp_path, layout="columns")
    _corrupt_manifest(pair.path, lambda m: m.pop("layout"))  # what offrl wrote before the rows layout
    old = ReplayBuffer.load(pair.path, in_memory=False)
    for key, value in pair.memory.to_arrays().items():
        np.testing.assert_array_equal(value, old.to_arrays()[key], err_msg=key)


@pytest.mark.parametrize("edit, message", [
    (lambda m: m.update(layout="tiles"), "'layout' is 'tiles'"),
    (lambda m: m.update(layout="columns"), "'layout' is 'columns' with schema version 2"),
    (lambda m: m.update(record_bytes=0), "'record_bytes' is 0"),
    (lambda m: m.update(record_bytes=m["record_bytes"] + 4), "'record_bytes' is .* multiple of 8"),
    (lambda m: m["columns"]["rewards"].update(offset=2), "'rewards' has offset 2: expected a multiple of 4"),
    (lambda m: m["columns"]["rewards"].update(offset=m["record_bytes"]), "'rewards' has offset .* inside"),
    (lambda m: m["columns"]["rewards"].update(offset=m["columns"]["observations_0"]["offset"]), "overlap"),
    (lambda m: m["columns"].pop("actions"), "no entry for field 'actions'"),
    (lambda m: m["columns"]["actions"].update(dtype="|O"), "dtype '|O'"),
], ids=["layout", "layout-version", "record-bytes", "record-align", "misaligned", "outside", "overlap", "missing",
        "object-dtype"])
def test_corrupt_record_manifest_is_refused_naming_the_field(tmp_path, edit, message):
    pair = _pair(tmp_path, layout="rows")
    _corrupt_manifest(pair.path, edit)
    with pytest.raises(ValueError, match=message):
        ReplayBuffer.load(pair.path, in_memory=False)


def test_truncated_or_missing_record_file_is_refused(tmp_path):
    pair = _pair(tmp_path, layout="rows")
    file = pair.path / "records.bin"
    data = file.read_bytes()
    record_bytes = json.loads((pair.path / "manifest.json").read_text())["record_bytes"]
    rows = len(data) // record_bytes
    file.write_bytes(data[:-1])
    with pytest.raises(ValueError, match=rf"records.bin holds {len(data) - 1} bytes, the manifest declares {rows} "
                                         rf"records of {record_bytes} bytes = {len(data)} \(truncated\)"):
        ReplayBuffer.load(pair.path, in_memory=False)
    file.write_bytes(data + b"\0")
    with pytest.raises(ValueError, match=r"extra data"):
        ReplayBuffer.load(pair.path, in_memory=False)
    file.unlink()
    with pytest.raises(ValueError, match="the record file records.bin is missing"):
        ReplayBuffer.load(pair.path, in_memory=False)
    file.write_bytes(data)
    store = ReplayBuffer.load(pair.path, in_memory=False).buffer
    os.truncate(file, (rows - 2) * record_bytes)  # under an open reader
    with pytest.raises(DiskDatasetChangedError, match=r"records\.bin: read .* bytes .* truncated"):
        store.actions[np.array([0, rows - 1])]
    with pytest.raises(DiskDatasetChangedError, match=r"records\.bin changed since .* \(size \d+ -> \d+ bytes"):
        store.check()


def test_writer_refuses_an_unknown_layout(tmp_path):
    with pytest.raises(ValueError, match=r"layout must be one of \('columns', 'rows'\), got 'tiles'"):
        DiskDatasetWriter(tmp_path / "d", layout="tiles")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------ disk FIFO
def _fill(buffer, seed: int) -> None:
    """Steps with append/clip_episode and whole episodes, in one random order."""
    rng = np.random.default_rng(seed)
    for i in range(25):
        n = int(rng.integers(1, 9))
        obs = rng.normal(size=(n, 3)).astype(np.float32)
        actions = rng.uniform(-1, 1, (n, 2)).astype(np.float32)
        rewards = rng.normal(size=(n, 1)).astype(np.float32)
        if i % 2:
            buffer.append_episode(Episode(observations=obs, actions=actions, rewards=rewards, terminated=i % 3 == 0,
                                          final_observation=None if i % 3 == 0 else obs[-1] + 1))
        else:
            for t in range(n):
                buffer.append(obs[t], actions[t], rewards[t, 0])
            buffer.clip_episode(terminated=bool(i % 4 == 0))


def test_disk_fifo_keeps_exactly_what_the_memory_fifo_keeps(tmp_path):
    from offrl.dataset import DiskFIFOBuffer

    memory = ReplayBuffer(FIFOBuffer(30))
    fifo = DiskFIFOBuffer(30, tmp_path, capacity=45)  # small: the ring is compacted many times
    disk = ReplayBuffer(fifo)
    _fill(memory, 0)
    _fill(disk, 0)
    (scratch,) = list(tmp_path.iterdir())
    sizes = {p.name: p.stat().st_size for p in scratch.iterdir()}
    assert sizes["actions.bin"] == 45 * 2 * 4  # fixed-size files
    assert isinstance(fifo.actions.base, np.memmap)
    assert disk.transition_count == memory.transition_count == 30
    for a, b in zip(memory.episodes, disk.episodes, strict=True):
        np.testing.assert_array_equal(a.observations, b.observations)
        np.testing.assert_array_equal(a.actions, b.actions)
        np.testing.assert_array_equal(a.rewards, b.rewards)
        assert a.terminated == b.terminated
        assert (a.final_observation is None) == (b.final_observation is None)
    offrl.seed(9)
    x = memory.sample_transition_batch(32)
    offrl.seed(9)
    _assert_batches_equal(x, disk.sample_transition_batch(32))
    saved = dump_disk_dataset(disk, tmp_path / "saved")
    assert ReplayBuffer.load(saved, in_memory=False).transition_count == 30
    fifo.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["saved"]


def test_disk_fifo_errors(tmp_path, monkeypatch):
    from offrl.dataset import DiskFIFOBuffer

    with pytest.raises(ValueError, match="capacity must be an int > limit=10"):
        DiskFIFOBuffer(10, tmp_path, capacity=10)
    with pytest.raises(ValueError, match="does not exist"):
        DiskFIFOBuffer(10, tmp_path / "nowhere")
    buffer = ReplayBuffer(DiskFIFOBuffer(4, tmp_path, capacity=6))
    long = Episode(observations=np.zeros((7, 3), np.float32), actions=np.zeros((7, 2), np.float32),
                   rewards=np.zeros((7, 1), np.float32), terminated=True)
    with pytest.raises(ValueError, match="needs 7 rows .* capacity=6"):
        buffer.append_episode(long)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(disk_module.shutil, "disk_usage", lambda p: usage(10**6, 10**6 - 1000, 1000))
    with pytest.raises(OSError, match=r"^cannot write .*: No space left on device \(writing a disk FIFO buffer of 2000 rows needs 48000 bytes .*; nothing was written$"):
        ReplayBuffer(DiskFIFOBuffer(10, tmp_path, capacity=2000)).append_episode(long)


class _Walk:
    """A gymnasium environment: 3-dim observations, 2 actions, episodes of
    5 steps (terminated) or cut at 4 by a time limit, alternately."""

    def __new__(cls):
        gymnasium = pytest.importorskip("gymnasium", reason="fit_online needs gymnasium")
        from gymnasium import spaces

        class Walk(gymnasium.Env):
            observation_space = spaces.Box(-10, 10, (3,), np.float32)
            action_space = spaces.Discrete(2)

            def reset(self, *, seed=None, options=None):
                super().reset(seed=seed)
                self._t, self._n = 0, getattr(self, "_n", -1) + 1
                return np.full(3, self._n % 7, np.float32), {}

            def step(self, action):
                self._t += 1
                obs = np.full(3, self._t + int(action), np.float32)
                terminated = self._n % 2 == 0 and self._t == 5
                truncated = self._n % 2 == 1 and self._t == 4
                return obs, float(action), terminated, truncated, {}

        return Walk()


def test_fit_online_appends_to_a_disk_fifo_exactly_as_to_the_memory_fifo(tmp_path):
    from offrl.dataset import DiskFIFOBuffer
    from offrl.models import VectorEncoderFactory

    buffers = []
    for buffer in (FIFOBuffer(20), DiskFIFOBuffer(20, tmp_path, capacity=30)):
        replay = ReplayBuffer(buffer, env=_Walk())
        offrl.seed(3)
        algo = DQNConfig(batch_size=8, encoder_factory=VectorEncoderFactory(hidden_units=[8])).create()
        algo.fit_online(_Walk(), replay, n_steps=60, n_steps_per_epoch=60, update_start_step=10, random_steps=60,
                        logger_adapter=NoopAdapterFactory(), show_progress=False)
        buffers.append(replay)
    memory, disk = buffers
    assert disk.transition_count == memory.transition_count == 20
    for a, b in zip(memory.episodes, disk.episodes, strict=True):
        np.testing.assert_array_equal(a.observations, b.observations)
        np.testing.assert_array_equal(a.actions, b.actions)
        np.testing.assert_array_equal(a.rewards, b.rewards)
        assert a.terminated == b.terminated
