"""HDF5 dump / load: round trips, corrupt or foreign files, atomic writes."""

from __future__ import annotations

import os
import re

import h5py
import numpy as np
import pytest

import offrl
from offrl import ActionSpace
from offrl.dataset import (
    Episode,
    FIFOBuffer,
    InfiniteBuffer,
    MDPDataset,
    ReplayBuffer,
    create_infinite_replay_buffer,
)

# ------------------------------------------------------------------ data


def _continuous(next_observations=True):
    n = 30
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((n, 3)).astype(np.float32)
    terminals = np.zeros(n)
    timeouts = np.zeros(n)
    terminals[[6, 19]] = 1
    timeouts[12] = 1
    kw = dict(next_observations=obs + 100.0) if next_observations else {}
    return MDPDataset(obs, rng.standard_normal((n, 2)), rng.standard_normal(n), terminals, timeouts, **kw)


def _discrete():
    n = 25
    obs = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
    terminals = np.zeros(n)
    terminals[[4, 15]] = 1
    return MDPDataset(obs, np.arange(n) % 3, np.ones(n), terminals, action_size=5,
                      next_observations=obs + 0.5)


def _tuple():
    n = 16
    img = (np.arange(n * 2 * 3 * 3) % 256).astype(np.uint8).reshape(n, 2, 3, 3)
    vec = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    terminals = np.zeros(n)
    terminals[7] = 1
    return MDPDataset([img, vec], np.arange(n) % 2, np.arange(n, dtype=np.float32), terminals,
                      next_observations=[img + 1, vec + 1])


DATASETS = {"continuous": _continuous, "discrete": _discrete, "tuple": _tuple}


def _columns(obs):
    return list(obs) if isinstance(obs, (list, tuple)) else [obs]


def assert_same_buffer(a, b):
    assert a.size() == b.size()
    assert a.transition_count == b.transition_count
    assert a.action_space == b.action_space
    assert a.action_size == b.action_size
    assert a.dataset_info.observation_signature == b.dataset_info.observation_signature
    assert a.dataset_info.action_signature == b.dataset_info.action_signature
    for x, y in zip(a.episodes, b.episodes):
        for cx, cy in zip(_columns(x.observations), _columns(y.observations)):
            assert cx.dtype == cy.dtype
            np.testing.assert_array_equal(cx, cy)
        assert x.actions.dtype == y.actions.dtype
        np.testing.assert_array_equal(x.actions, y.actions)
        np.testing.assert_array_equal(x.rewards, y.rewards)
        assert x.terminated == y.terminated
        assert (x.final_observation is None) == (y.final_observation is None)
        if x.final_observation is not None:
            for fx, fy in zip(_columns(x.final_observation), _columns(y.final_observation)):
                np.testing.assert_array_equal(fx, fy)
    ax, ay = a.to_arrays(), b.to_arrays()
    for key in ("actions", "rewards", "terminals", "timeouts", "episode_starts", "episode_ends"):
        np.testing.assert_array_equal(ax[key], ay[key])
    for cx, cy in zip(_columns(ax["observations"]), _columns(ay["observations"])):
        np.testing.assert_array_equal(cx, cy)
    # the same transitions come out, next observations included
    for i in range(a.transition_count):
        tx, ty = a.transition_picker(*a.buffer[i]), b.transition_picker(*b.buffer[i])
        for cx, cy in zip(_columns(tx.next_observation), _columns(ty.next_observation)):
            np.testing.assert_array_equal(cx, cy)
        assert tx.terminal == ty.terminal


# ------------------------------------------------------------ round trips


@pytest.mark.parametrize("kind", list(DATASETS))
def test_round_trip_path(tmp_path, kind):
    ds = DATASETS[kind]()
    path = tmp_path / "data.h5"
    ds.dump(path)
    loaded = ReplayBuffer.load(path)
    assert isinstance(loaded.buffer, InfiniteBuffer)
    assert_same_buffer(ds, loaded)
    # str paths too
    ds.dump(str(tmp_path / "again.h5"))
    assert_same_buffer(ds, ReplayBuffer.load(str(tmp_path / "again.h5")))


@pytest.mark.parametrize("kind", list(DATASETS))
def test_round_trip_file_objects(tmp_path, kind):
    ds = DATASETS[kind]()
    path = tmp_path / "data.h5"
    with open(path, "w+b") as f:
        ds.dump(f)
    with open(path, "rb") as f:
        loaded = ReplayBuffer.load(f)
    assert_same_buffer(ds, loaded)
    # path and file-object dumps read back the same
    ds.dump(tmp_path / "by_path.h5")
    assert_same_buffer(loaded, ReplayBuffer.load(tmp_path / "by_path.h5"))


def test_round_trip_stored_details(tmp_path):
    ds = _discrete()
    path = tmp_path / "d.h5"
    ds.dump(path)
    loaded = ReplayBuffer.load(path)
    assert loaded.action_space == ActionSpace.DISCRETE
    assert loaded.action_size == 5  # given, larger than max action + 1
    eps = loaded.episodes
    assert [e.terminated for e in eps] == [True, True, False]
    assert eps[0].final_observation is None
    np.testing.assert_array_equal(eps[2].final_observation, np.arange(96, 100, dtype=np.float32) + 0.5)
    with h5py.File(path, "r") as h5:
        assert h5.attrs["format"] == "offrl.dataset"
        assert int(h5.attrs["schema_version"]) == 1
        np.testing.assert_array_equal(h5["episode_starts"][()], [0, 5, 16])
        np.testing.assert_array_equal(h5["episode_ends"][()], [5, 16, 25])
        np.testing.assert_array_equal(h5["episode_has_final"][()], [False, False, True])
        assert h5["actions"].shape == (26, 1)  # 25 steps + one final-observation row


def test_compression_round_trip(tmp_path):
    ds = _tuple()
    ds.dump(tmp_path / "c.h5", compression="gzip")
    assert_same_buffer(ds, ReplayBuffer.load(tmp_path / "c.h5"))


def test_load_into_fifo_buffer(tmp_path):
    ds = _continuous()
    ds.dump(tmp_path / "d.h5")
    big = ReplayBuffer.load(tmp_path / "d.h5", buffer=FIFOBuffer(1000))
    assert isinstance(big.buffer, FIFOBuffer)
    assert_same_buffer(ds, big)
    # a smaller limit keeps the newest transitions
    limit = 12
    small = ReplayBuffer.load(tmp_path / "d.h5", buffer=FIFOBuffer(limit))
    assert small.transition_count == limit
    everything = [ds.transition_picker(*ds.buffer[i]) for i in range(ds.transition_count)]
    kept = [small.transition_picker(*small.buffer[i]) for i in range(limit)]
    for x, y in zip(everything[-limit:], kept):
        np.testing.assert_array_equal(x.observation, y.observation)
        np.testing.assert_array_equal(x.next_observation, y.next_observation)
        np.testing.assert_array_equal(x.action, y.action)
        assert x.terminal == y.terminal
    # writing continues in the loaded FIFO buffer
    small.append(np.zeros(3, np.float32), np.zeros(2, np.float32), 0.0)
    small.append(np.ones(3, np.float32), np.zeros(2, np.float32), 0.0)
    assert small.transition_count == limit


def test_dump_of_fifo_buffer_holds_only_live_rows(tmp_path):
    ds = _continuous()
    ds.dump(tmp_path / "d.h5")
    small = ReplayBuffer.load(tmp_path / "d.h5", buffer=FIFOBuffer(12))
    small.dump(tmp_path / "small.h5")
    again = ReplayBuffer.load(tmp_path / "small.h5")
    assert_same_buffer(small, again)


def test_load_into_non_empty_buffer_refused(tmp_path):
    ds = _continuous()
    ds.dump(tmp_path / "d.h5")
    loaded = ReplayBuffer.load(tmp_path / "d.h5")
    with pytest.raises(ValueError, match="empty buffer"):
        ReplayBuffer.load(tmp_path / "d.h5", buffer=loaded.buffer)


def test_online_buffer_round_trip(tmp_path):
    rb = create_infinite_replay_buffer()
    for t in range(5):
        rb.append(np.array([t, -t], np.float32), np.array([t / 10], np.float32), float(t))
    rb.clip_episode(False, np.array([99.0, 99.0], np.float32))
    for t in range(3):
        rb.append(np.array([t, t], np.float32), np.array([0.5], np.float32), 1.0)
    rb.clip_episode(True)
    rb.dump(tmp_path / "online.h5")
    loaded = ReplayBuffer.load(tmp_path / "online.h5")
    assert_same_buffer(rb, loaded)
    np.testing.assert_array_equal(loaded.episodes[0].final_observation, [99.0, 99.0])


class ListBuffer:
    def __init__(self):
        self.items, self._episodes = [], []

    def append(self, episode, index):
        self.items.append((episode, index))
        if not self._episodes or self._episodes[-1] is not episode:
            self._episodes.append(episode)

    @property
    def episodes(self):
        return self._episodes

    @property
    def transition_count(self):
        return len(self.items)

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def test_user_buffer_round_trip(tmp_path):
    user = ReplayBuffer(ListBuffer())
    obs = np.arange(12, dtype=np.float32).reshape(6, 2)
    user.append_episode(Episode(obs, np.array([[0], [1], [2], [0], [1], [2]]), np.ones((6, 1), np.float32), True))
    user.append_episode(Episode(obs + 20, np.array([[1], [1], [0], [0], [2], [2]]), np.ones((6, 1), np.float32), False,
                                final_observation=np.array([7.0, 7.0], np.float32)))
    user.dump(tmp_path / "u.h5")
    into_store = ReplayBuffer.load(tmp_path / "u.h5")
    assert into_store.action_space == ActionSpace.DISCRETE and into_store.action_size == 3
    assert into_store.transition_count == 12
    np.testing.assert_array_equal(into_store.episodes[1].final_observation, [7.0, 7.0])
    into_user = ReplayBuffer.load(tmp_path / "u.h5", buffer=ListBuffer())
    assert isinstance(into_user.buffer, ListBuffer)
    assert into_user.transition_count == 12
    for x, y in zip(user.episodes, into_user.episodes):
        np.testing.assert_array_equal(x.observations, y.observations)
        np.testing.assert_array_equal(x.actions, y.actions)


# ------------------------------------------------------------------ errors


def _loads_with_error(target, match):
    with pytest.raises(ValueError, match=match):
        ReplayBuffer.load(target)


def test_non_hdf5_file(tmp_path):
    path = tmp_path / "notes.h5"
    path.write_bytes(b"this is not an HDF5 file\n" * 100)
    _loads_with_error(path, re.escape(str(path)) + ".*not an offrl dataset file")
    with open(path, "rb") as f:
        _loads_with_error(f, re.escape(str(path)))


def test_empty_file(tmp_path):
    path = tmp_path / "empty.h5"
    path.write_bytes(b"")
    _loads_with_error(path, re.escape(str(path)))


def test_truncated_file(tmp_path):
    ds = _tuple()
    full = tmp_path / "full.h5"
    ds.dump(full)
    data = full.read_bytes()
    half = tmp_path / "half.h5"
    half.write_bytes(data[: len(data) // 2])
    _loads_with_error(half, re.escape(str(half)) + ".*truncated")
    with open(half, "rb") as f:
        _loads_with_error(f, re.escape(str(half)))


def test_foreign_hdf5_file(tmp_path):
    path = tmp_path / "someone_else.h5"
    with h5py.File(path, "w") as h5:
        h5.create_dataset("observations", data=np.zeros((10, 3)))
        h5.create_dataset("actions", data=np.zeros((10, 1)))
        h5.attrs["creator"] = "another library"
    _loads_with_error(path, re.escape(str(path)) + ".*not an offrl dataset file")


def test_unknown_schema_version(tmp_path):
    path = tmp_path / "future.h5"
    _continuous().dump(path)
    with h5py.File(path, "r+") as h5:
        h5.attrs["schema_version"] = 99
    _loads_with_error(path, re.escape(str(path)) + ".*schema version 99")


def test_missing_dataset_in_file(tmp_path):
    path = tmp_path / "missing.h5"
    _continuous().dump(path)
    with h5py.File(path, "r+") as h5:
        del h5["rewards"]
    _loads_with_error(path, re.escape(str(path)) + ".*missing.*rewards")


@pytest.mark.parametrize(
    "column,edit",
    [
        ("episode_ends", lambda a: a + np.array([0, 1, 0, 0], dtype=a.dtype)),  # overlapping episodes
        ("episode_starts", lambda a: a + 1),  # first episode not at row 0
        ("episode_ends", lambda a: a[:-1]),  # table columns of different lengths
        ("episode_has_final", lambda a: np.ones_like(a)),  # final row after a terminated episode
        ("episode_ends", lambda a: a - np.array([0, 0, 0, 1], dtype=a.dtype)),  # rows left over
    ],
)
def test_inconsistent_episode_table(tmp_path, column, edit):
    ds = _continuous()
    assert ds.size() == 4
    path = tmp_path / "bad_table.h5"
    ds.dump(path)
    with h5py.File(path, "r+") as h5:
        value = edit(h5[column][()])
        del h5[column]
        h5.create_dataset(column, data=value)
    _loads_with_error(path, re.escape(str(path)) + ".*corrupt")


def test_discrete_action_out_of_range_in_file(tmp_path):
    path = tmp_path / "bad_actions.h5"
    _discrete().dump(path)
    with h5py.File(path, "r+") as h5:
        h5["actions"][3, 0] = 7
    _loads_with_error(path, re.escape(str(path)) + r".*actions\[3\] is 7")


def test_nan_in_file(tmp_path):
    path = tmp_path / "nan.h5"
    _continuous().dump(path)
    with h5py.File(path, "r+") as h5:
        h5["rewards"][4, 0] = np.nan
    _loads_with_error(path, re.escape(str(path)) + r".*rewards\[4\] is nan")


# ---------------------------------------------------------------- atomicity


def _failing_after_first_call(monkeypatch):
    original = h5py.File.create_dataset
    calls = {"n": 0}

    def create_dataset(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] > 1:
            raise RuntimeError("disk on fire")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(h5py.File, "create_dataset", create_dataset)
    return calls


def test_failed_dump_leaves_existing_file_untouched(tmp_path, monkeypatch):
    path = tmp_path / "data.h5"
    old = _discrete()
    old.dump(path)
    before = path.read_bytes()
    calls = _failing_after_first_call(monkeypatch)
    with pytest.raises(RuntimeError, match="disk on fire"):
        _continuous().dump(path)
    assert calls["n"] == 2
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["data.h5"]  # no temporary file left
    assert_same_buffer(old, ReplayBuffer.load(path))


def test_failed_dump_to_new_path_leaves_nothing(tmp_path, monkeypatch):
    _failing_after_first_call(monkeypatch)
    with pytest.raises(RuntimeError):
        _continuous().dump(tmp_path / "new.h5")
    assert os.listdir(tmp_path) == []


def test_failed_dump_to_file_object_writes_nothing(tmp_path, monkeypatch):
    path = tmp_path / "obj.h5"
    _failing_after_first_call(monkeypatch)
    with open(path, "w+b") as f:
        with pytest.raises(RuntimeError):
            _continuous().dump(f)
    assert path.read_bytes() == b""


def test_dump_overwrites_existing_file(tmp_path):
    path = tmp_path / "data.h5"
    _discrete().dump(path)
    new = _continuous()
    new.dump(path)
    assert_same_buffer(new, ReplayBuffer.load(path))
    assert sorted(os.listdir(tmp_path)) == ["data.h5"]


def test_seeded_sampling_identical_after_round_trip(tmp_path):
    ds = _continuous()
    ds.dump(tmp_path / "d.h5")
    loaded = ReplayBuffer.load(tmp_path / "d.h5")
    offrl.seed(5)
    a = ds.sample_transition_batch(64)
    offrl.seed(5)
    b = loaded.sample_transition_batch(64)
    np.testing.assert_array_equal(a.observations, b.observations)
    np.testing.assert_array_equal(a.next_observations, b.next_observations)
    np.testing.assert_array_equal(a.terminals, b.terminals)


# ------------------------------------------------- hostile files (issue 15)


def _replace(path, key, value, **kwargs):
    with h5py.File(path, "r+") as h5:
        del h5[key]
        h5.create_dataset(key, data=value, **kwargs)


def _with_error(error, target, *fragments):
    pattern = ".*".join(re.escape(str(f)) for f in fragments)
    with pytest.raises(error, match=pattern):
        ReplayBuffer.load(target)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX only")
def test_named_pipe_is_refused_without_opening_it(tmp_path):
    path = tmp_path / "x.h5"
    os.mkfifo(path)  # opening it for reading would block until a writer comes
    _with_error(ValueError, path, path, "is a named pipe, expected a regular")


def test_folder_is_refused(tmp_path):
    _with_error(ValueError, tmp_path, tmp_path, "is a folder")


@pytest.mark.parametrize(
    "key,value,message",
    [
        ("schema_version", "one", "the attribute 'schema_version' is 'one', expected an integer"),
        ("schema_version", np.array([1, 1]), "the attribute 'schema_version' is an array of shape (2,)"),
        ("n_observation_columns", 0, "the attribute 'n_observation_columns' is 0, expected an integer in [1, 1024]"),
        ("action_size", 2**62, "the attribute 'action_size' is 4611686018427387904, expected an integer in [1, 16777216]"),
        ("action_size", 2.5, "the attribute 'action_size' is 2.5, expected an integer"),
        ("action_space", "sideways", "the attribute 'action_space' is 'sideways'"),
        ("format", np.array([1, 2, 3]), "the attribute 'format' is an array"),
    ],
)
def test_bad_attribute_names_file_and_attribute(tmp_path, key, value, message):
    path = tmp_path / "attr.h5"
    _discrete().dump(path)
    with h5py.File(path, "r+") as h5:
        h5.attrs[key] = value
    _with_error(ValueError, path, path, message)


@pytest.mark.parametrize(
    "key,make,message",
    [
        ("rewards", lambda r: r.astype("S8"), "rewards holds bytes"),
        ("rewards", lambda r: r.astype(np.complex64), "rewards holds complex numbers"),
        ("rewards", lambda r: np.zeros(r.shape, dtype=[("a", "f4"), ("b", "i4")]), "rewards holds compound"),
        ("observations_0", lambda o: np.array([b"x" * (i % 3) for i in range(o.shape[0])], dtype=object),
         "observations_0 holds variable-length"),
    ],
)
def test_garbage_column_dtypes_are_refused(tmp_path, key, make, message):
    path = tmp_path / "dtype.h5"
    _continuous().dump(path)
    with h5py.File(path, "r") as h5:
        value = make(h5[key][()])
    kwargs = {"dtype": h5py.vlen_dtype(bytes)} if value.dtype == object else {}
    _replace(path, key, value, **kwargs)
    _with_error(TypeError, path, path, message)


def test_scalar_observations_dataset_is_refused(tmp_path):
    path = tmp_path / "scalar.h5"
    _continuous().dump(path)
    _replace(path, "observations_0", np.float32(3.0))
    _with_error(ValueError, path, path, "observations_0 has shape (), expected at least 1 dimension")


def test_discrete_behaviour_probability_above_one_is_refused(tmp_path):
    path = tmp_path / "prob.h5"
    MDPDataset(
        np.zeros((6, 2)), np.array([0, 1, 0, 1, 0, 1]), np.ones(6), np.array([0, 0, 1, 0, 0, 1]),
        behaviour_probabilities=np.full(6, 0.5),
    ).dump(path)
    with h5py.File(path, "r+") as h5:
        h5["behaviour_probabilities"][2] = 5.4
    _with_error(ValueError, path, path, "behaviour_probabilities[2] is 5.4, expected a probability in (0, 1]")


def test_float64_rewards_beyond_float32_are_refused(tmp_path):
    path = tmp_path / "big.h5"
    _continuous().dump(path)
    with h5py.File(path, "r") as h5:
        rewards = h5["rewards"][()].astype(np.float64)
    rewards[5, 0] = 1e300
    _replace(path, "rewards", rewards)
    _with_error(ValueError, path, path, "rewards[5] is 1e+300, outside float32's range")


def test_float64_observations_load_as_float32(tmp_path):
    path = tmp_path / "f64.h5"
    ds = _continuous()
    ds.dump(path)
    with h5py.File(path, "r") as h5:
        obs = h5["observations_0"][()]
    _replace(path, "observations_0", obs.astype(np.float64))
    loaded = ReplayBuffer.load(path)
    assert loaded.dataset_info.observation_signature.dtype[0] == np.float32
    np.testing.assert_array_equal(loaded.episodes[0].observations, ds.episodes[0].observations)


def test_size_bomb_is_refused_before_allocating(tmp_path):
    path = tmp_path / "bomb.h5"
    _continuous().dump(path)
    rows = 10**12
    with h5py.File(path, "r+") as h5:
        del h5["observations_0"]
        # chunked and compressed: a few bytes on disk, 68 TB declared
        h5.create_dataset("observations_0", shape=(rows, 17), dtype=np.float32, chunks=(1, 17), compression="gzip")
    size = os.path.getsize(path)
    assert size < 100_000
    _with_error(ValueError, path, path, "observations_0 declares 10^12 rows × 17 float32 = 68 TB; this machine has")


def test_uncompressed_column_declaring_more_than_stored_is_refused(tmp_path):
    path = tmp_path / "forged.h5"
    _continuous().dump(path)
    with h5py.File(path, "r+") as h5:
        del h5["rewards"]
        h5.create_dataset("rewards", shape=(30, 1), dtype=np.float32, chunks=(1, 1))  # nothing written
    _with_error(ValueError, path, path, "rewards declares shape (30, 1) float32", "truncated or forged")


def test_external_link_to_another_file_is_not_followed(tmp_path):
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as h5:
        h5.create_dataset("rewards", data=np.ones((30, 1), dtype=np.float32))
    path = tmp_path / "linked.h5"
    _continuous().dump(path)
    with h5py.File(path, "r+") as h5:
        del h5["rewards"]
        h5["rewards"] = h5py.ExternalLink(str(other), "rewards")
    _with_error(ValueError, path, path, "rewards is a link to another file")


def test_external_raw_storage_is_refused(tmp_path):
    raw = tmp_path / "raw.bin"
    raw.write_bytes(np.ones(30, dtype=np.float32).tobytes())
    path = tmp_path / "external.h5"
    _continuous().dump(path)
    with h5py.File(path, "r+") as h5:
        del h5["rewards"]
        h5.create_dataset("rewards", shape=(30, 1), dtype=np.float32, external=[(str(raw), 0, 120)])
    _with_error(ValueError, path, path, "rewards keeps its values in an external file")


# ------------------------------------------------- issue 28: action caps, expansion, metadata


def _d3rlpy_file(path, actions, observations=None):
    """One episode in d3rlpy 2.1+'s ``dump`` layout (no d3rlpy needed)."""
    actions = np.asarray(actions).reshape(-1, 1)
    n = actions.shape[0]
    with h5py.File(path, "w") as h5:
        h5.create_dataset("version", data="2.1")
        h5.create_dataset("columns", data=["observations", "actions", "rewards", "terminated"])
        h5.create_dataset("num_episodes", data=1)
        h5.create_dataset("observations_0", data=np.zeros((n, 2), np.float32) if observations is None else observations)
        h5.create_dataset("actions_0", data=actions)
        h5.create_dataset("rewards_0", data=np.ones((n, 1), np.float32))
        h5.create_dataset("terminated_0", data=True)
    return path


def test_a_d3rlpy_file_with_a_huge_discrete_action_is_refused_by_offrls_one_rule(tmp_path):
    from offrl.dataset.io import MAX_DISCRETE_ACTION_SIZE

    path = _d3rlpy_file(tmp_path / "d3.h5", [0, 1, 2**40, 3])  # loaded as action_size 2**40 + 1 before
    _with_error(ValueError, path, path, f"actions[2] is {2**40}, beyond the {MAX_DISCRETE_ACTION_SIZE} discrete actions")
    # the bound itself is accepted, as in offrl's own files
    top = ReplayBuffer.load(_d3rlpy_file(tmp_path / "top.h5", [0, MAX_DISCRETE_ACTION_SIZE - 1]))
    assert top.dataset_info.action_size == MAX_DISCRETE_ACTION_SIZE
    own = tmp_path / "own.h5"
    _discrete().dump(own)
    with h5py.File(own, "r+") as h5:
        h5.attrs["action_size"] = MAX_DISCRETE_ACTION_SIZE + 1
    _with_error(ValueError, own, own, f"the attribute 'action_size' is {MAX_DISCRETE_ACTION_SIZE + 1}, expected")


def _unwritten_gzip_file(path, rows=4096, width=64):
    """A file whose gzip-compressed observations were never written: it
    stores no bytes for them and a reader would expand the fill value."""
    _continuous().dump(path)
    with h5py.File(path, "r+") as h5:
        del h5["observations_0"], h5["actions"], h5["rewards"]
        h5.create_dataset("observations_0", shape=(rows, width), dtype=np.float32, compression="gzip", chunks=(256, width))
        h5.create_dataset("actions", data=np.zeros((rows, 2), np.float32), compression="gzip")
        h5.create_dataset("rewards", data=np.zeros((rows, 1), np.float32), compression="gzip")
        for key, value in (("episode_starts", [0]), ("episode_ends", [rows]), ("episode_terminated", [True]),
                           ("episode_has_final", [False])):
            del h5[key]
            h5.create_dataset(key, data=np.asarray(value, dtype=np.int64 if "episode_e" in key or "starts" in key else bool))
    return path


def test_a_compressed_column_expanding_beyond_the_bound_is_refused_stating_its_size(tmp_path, monkeypatch):
    from offrl import _safety

    monkeypatch.setattr(_safety, "EXPANSION_FLOOR", 0)  # a small file stands for a 9 kB one declaring gigabytes
    path = _unwritten_gzip_file(tmp_path / "bomb.h5")
    _with_error(ValueError, path, path, "its arrays expand to 1.1 MB but the file stores", "most of it is observations_0",
                "(shape (4096, 64) float32: 1.05 MB from 0 B on disk)", "at most 1000x unless asked",
                "max_expansion")
    with pytest.raises(ValueError, match="at most 2x"):
        ReplayBuffer.load(path, max_expansion=2)
    loaded = ReplayBuffer.load(path, max_expansion=None)  # the caller raises the bound: the file is honest
    assert loaded.episodes[0].observations.shape == (4096, 64) and not loaded.episodes[0].observations.any()
    for bad, error in ((0.5, ValueError), (float("nan"), ValueError), ("10", TypeError), (True, TypeError)):
        with pytest.raises(error, match="max_expansion must be"):
            ReplayBuffer.load(path, max_expansion=bad)


def test_small_or_honestly_compressed_files_load_under_the_default_bound(tmp_path):
    dataset = _continuous()
    dataset.dump(tmp_path / "gzip.h5", compression="gzip")
    assert_same_buffer(ReplayBuffer.load(tmp_path / "gzip.h5"), dataset)
    # all zeros compress ~1000x, but a file under the floor is read whatever its ratio
    path = _unwritten_gzip_file(tmp_path / "small.h5")
    assert ReplayBuffer.load(path).transition_count == 4096


def test_describe_reads_metadata_only(tmp_path):
    from offrl.dataset.io import describe_dataset_file

    dataset = _discrete()
    dataset.dump(tmp_path / "d.h5")
    described = describe_dataset_file(tmp_path / "d.h5")
    summary = dataset.summary()
    for key in ("episodes", "terminated_episodes", "transitions", "steps"):
        assert described[key] == summary[key], key
    assert described["observation_signature"] == "float32(4,)" and described["action_size"] == 5
    assert described["action_space"] == "discrete"
    # a file declaring far more than any memory (10**12 rows): loading refuses it, describing reads nothing of it
    path = tmp_path / "huge.h5"
    _continuous().dump(path)
    with h5py.File(path, "r+") as h5:
        del h5["observations_0"]
        h5.create_dataset("observations_0", shape=(10**12, 3), dtype=np.float32, compression="gzip", chunks=(4096, 3))
        h5["episode_ends"][-1] = 10**12  # the table agrees with the declared rows
    described = describe_dataset_file(path)
    assert described["observation_signature"] == "float32(3,)"
    assert described["size"].startswith("12 TB in memory,")
    with pytest.raises(ValueError, match="observations_0 declares 10\\^12 rows"):
        ReplayBuffer.load(path)


def test_describe_a_d3rlpy_file(tmp_path):
    from offrl.dataset.io import describe_dataset_file

    path = _d3rlpy_file(tmp_path / "d3.h5", [0, 1, 1, 0])
    described = describe_dataset_file(path)
    loaded = ReplayBuffer.load(path)
    assert (described["episodes"], described["transitions"], described["steps"]) == (1, loaded.transition_count, 4)
    assert described["format"] == "d3rlpy dataset, version 2.1" and described["action_space"] == "discrete"
