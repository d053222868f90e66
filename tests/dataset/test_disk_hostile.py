"""Disk datasets against hostile files and other processes: files that are
links out of the directory, files truncated under an open store (never a
SIGBUS: each read path runs in a subprocess, so a crash fails the test
instead of killing pytest), values no writer of offrl would write, corrupt
manifests, a writer dumping over a dataset being opened, and writes that
fail part way."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import traceback

import numpy as np
import pytest

import offrl
from offrl._atomic import FileWriteError
from offrl.algos import BCConfig
from offrl.dataset import (
    DiskDatasetChangedError,
    DiskDatasetWriter,
    Episode,
    InfiniteBuffer,
    ReplayBuffer,
    dump_disk_dataset,
)
from offrl.dataset import _disk_files
from offrl.dataset import disk as disk_module
from offrl.dataset import disk_format
from offrl.dataset import disk_writer as writer_module
from offrl.logging import NoopAdapterFactory
from offrl.preprocessing import StandardObservationScaler

LAYOUTS = ["rows", "columns"]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _episodes(discrete: bool, n_episodes: int = 4, length: int = 10, seed: int = 0) -> list[Episode]:
    """Terminated episodes of ``length`` steps (the first one's rows are
    0..length-1), behaviour probabilities on every step."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_episodes):
        actions = rng.integers(0, 3, (length, 1)) if discrete else rng.uniform(-1, 1, (length, 2)).astype(np.float32)
        out.append(Episode(
            observations=rng.normal(size=(length, 3)).astype(np.float32), actions=actions,
            rewards=rng.normal(size=(length, 1)).astype(np.float32), terminated=True,
            behaviour_probabilities=rng.uniform(0.2, 1.0, length),
        ))
    return out


def _write(path, layout: str, discrete: bool = True, **kwargs) -> list[Episode]:
    episodes = _episodes(discrete, **kwargs)
    with DiskDatasetWriter(path, action_size=3 if discrete else None, layout=layout) as writer:
        writer.add_episodes(episodes)
    return episodes


def _manifest(path) -> dict:
    return json.loads((path / "manifest.json").read_text())


def _data_file(path, field: str = "rewards") -> str:
    return "records.bin" if _manifest(path).get("layout") == "rows" else f"{field}.bin"


def _poke(path, field: str, row: int, value) -> None:
    """Write ``value`` over ``field`` at ``row`` in the dataset's file (in place)."""
    manifest = _manifest(path)
    spec = manifest["columns"][field]
    dtype = np.dtype(spec["dtype"])
    if manifest.get("layout") == "rows":
        file, offset = path / "records.bin", row * manifest["record_bytes"] + spec["offset"]
    else:
        file, offset = path / f"{field}.bin", row * int(np.prod(spec["shape"][1:])) * dtype.itemsize
    data = bytearray(file.read_bytes())
    raw = np.array(value).astype(dtype).tobytes()
    data[offset : offset + len(raw)] = raw
    file.write_bytes(bytes(data))


# ------------------------------------------------------------------ links
def _members(path, layout: str) -> list[str]:
    data = ["records.bin"] if layout == "rows" else ["observations_0.bin", "actions.bin", "rewards.bin"]
    return ["manifest.json", *data, "episode_ends.bin", "episode_terminated.bin"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_member_that_is_a_symbolic_link_is_refused_at_open_in_both_modes(tmp_path, layout):
    path = tmp_path / "data"
    _write(path, layout)
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in _members(path, layout):
        target = outside / name
        os.replace(path / name, target)  # the same bytes, sized as the manifest says, outside the directory
        os.symlink(target, path / name)
        for in_memory in (False, True):
            with pytest.raises(ValueError, match=rf"data/{name} is a symbolic link; a disk dataset's files must be "
                                                 "regular files inside its directory"):
                ReplayBuffer.load(path, in_memory=in_memory)
        os.remove(path / name)
        os.replace(target, path / name)
    ReplayBuffer.load(path, in_memory=False)  # every file back: opens


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_member_with_a_hard_link_a_pipe_or_a_folder_is_refused(tmp_path, layout):
    path = tmp_path / "data"
    _write(path, layout)
    name = _members(path, layout)[1]
    os.link(path / name, tmp_path / "other-name")
    with pytest.raises(ValueError, match=rf"data/{name} has 2 hard links; a disk dataset's files must have no other"):
        ReplayBuffer.load(path, in_memory=False)
    os.remove(tmp_path / "other-name")
    os.replace(path / name, tmp_path / "kept")
    os.mkfifo(path / name)  # opening must not wait for a writer
    with pytest.raises(ValueError, match=rf"data/{name} is a named pipe"):
        ReplayBuffer.load(path, in_memory=False)
    os.remove(path / name)
    os.mkdir(path / name)
    with pytest.raises(ValueError, match=rf"data/{name} is a folder"):
        ReplayBuffer.load(path)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_link_made_after_opening_is_never_read_and_dumps_refuse(tmp_path, layout):
    path = tmp_path / "data"
    _write(path, layout)
    dataset = ReplayBuffer.load(path, in_memory=False)
    before = dataset.buffer.read_fields(0, dataset.buffer.tail)
    name = _data_file(path)
    secret = tmp_path / "secret"
    secret.write_bytes(b"S" * os.path.getsize(path / name))
    os.remove(path / name)
    os.symlink(secret, path / name)
    after = dataset.buffer.read_fields(0, dataset.buffer.tail)  # the file opened, not the link's target
    for field, values in before.items():
        np.testing.assert_array_equal(after[field], values, err_msg=field)
    with pytest.raises(DiskDatasetChangedError, match=rf"data/{name} is now a symbolic link"):
        dataset.buffer.check()
    with pytest.raises(DiskDatasetChangedError, match="is now a symbolic link"):
        dump_disk_dataset(dataset, tmp_path / "copy")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "secret"]
    dataset.dump(tmp_path / "copy.h5")  # an HDF5 dump reads the opened files: nothing of the link's target
    assert b"SSSSSSSS" not in (tmp_path / "copy.h5").read_bytes()
    np.testing.assert_array_equal(ReplayBuffer.load(tmp_path / "copy.h5").buffer.rewards, before["rewards"])


# -------------------------------------------------------------- truncation
def _in_child(run) -> tuple[str, str]:
    """``run()`` in a forked child process: ``("raised", message)`` for a
    DiskDatasetChangedError, ``("returned", "")`` or ``("error",
    traceback)``; a child killed by a signal (SIGBUS) fails the test."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        try:
            os.close(read_end)
            try:
                run()
                out = "returned\n"
            except DiskDatasetChangedError as e:
                out = f"raised\n{e}"
            except BaseException:  # noqa: BLE001 - reported to the parent
                out = "error\n" + traceback.format_exc()
            os.write(write_end, out.encode()[:60000])
        finally:
            os._exit(0)
    os.close(write_end)
    chunks = []
    while True:
        data = os.read(read_end, 1 << 16)
        if not data:
            break
        chunks.append(data)
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        pytest.fail(f"the read killed the process with {signal.Signals(os.WTERMSIG(status)).name}")
    kind, _, message = b"".join(chunks).decode().partition("\n")
    return kind, message


def _fit(dataset, read_mode: str, scaler: bool, callback=None) -> None:
    dataset.buffer.read_mode = read_mode
    config = BCConfig(batch_size=64, observation_scaler=StandardObservationScaler() if scaler else None)
    config.create().fit(dataset, n_steps=6, n_steps_per_epoch=6, logger_adapter=NoopAdapterFactory(),
                        show_progress=False, callback=callback)


_TRUNCATED_READS = {
    "episode": lambda dataset, file: dataset.episodes[7],  # rows past the new end
    "mmap sample": lambda dataset, file: (setattr(dataset.buffer, "read_mode", "mmap"),
                                          dataset.sample_transition_batch(256)),
    "pread sample": lambda dataset, file: dataset.sample_transition_batch(256),
    # fitted through the columns before training's first check of the files
    "scaler fitting": lambda dataset, file: _fit(dataset, "mmap", scaler=True),
}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="runs each read in a forked child")
@pytest.mark.parametrize("scenario", [*_TRUNCATED_READS, "fit"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_file_truncated_under_an_open_store_raises_on_every_read_path(tmp_path, layout, scenario):
    rng = np.random.default_rng(0)
    path = tmp_path / "data"
    with DiskDatasetWriter(path, layout=layout) as writer:
        for _ in range(8):
            writer.add_episode(Episode(rng.normal(size=(64, 5)).astype(np.float32),
                                       rng.uniform(-1, 1, (64, 2)).astype(np.float32),
                                       rng.normal(size=(64, 1)).astype(np.float32), terminated=False))
    dataset = ReplayBuffer.load(path, in_memory=False)
    file = path / ("records.bin" if layout == "rows" else "observations_0.bin")
    if scenario == "fit":  # truncated under training, sampling through the map
        def run():
            _fit(dataset, "mmap", scaler=False,
                 callback=lambda algo, epoch, step: os.truncate(file, 1000) if step == 2 else None)
    else:
        def run():
            os.truncate(file, os.path.getsize(file) // 2)
            _TRUNCATED_READS[scenario](dataset, file)
    kind, message = _in_child(run)
    assert kind == "raised", message
    assert "data/" + file.name in message and ("shorter" in message or "truncated" in message), message


@pytest.mark.parametrize("layout", LAYOUTS)
def test_reads_check_the_size_before_the_map_and_read_the_rest_by_position(tmp_path, layout):
    path = tmp_path / "data"
    _write(path, layout, discrete=False)
    dataset = ReplayBuffer.load(path, in_memory=False)
    store = dataset.buffer
    store.read_mode = "mmap"
    column = store.observations[0]
    rows = np.array([3, 17, 25])
    expected = column[rows]
    file = path / _data_file(path, "observations_0")
    os.truncate(file, os.path.getsize(file) - 1)  # one byte short
    # through the map: refused before reading, even rows still in the file; positional reads: the last row is short
    for read in (lambda: column[rows], lambda: column.reshape(-1)[:3], lambda: column[:], lambda: column.sum(),
                 lambda: np.concatenate([column]), lambda: column.copy(), lambda: dataset.episodes[3],
                 lambda: store.read_fields(0, store.tail), lambda: store.verify()):
        with pytest.raises(DiskDatasetChangedError, match=r"shorter|truncated"):
            read()
    store.read_mode = "pread"
    np.testing.assert_array_equal(column[np.array([25, 17, 3])][::-1], expected)  # rows still there: read
    np.testing.assert_array_equal(column[17:18], expected[1:2])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_copy_larger_than_the_memory_available_is_refused_naming_it(tmp_path, layout, monkeypatch):
    path = tmp_path / "data"
    _write(path, layout, discrete=False)
    store = ReplayBuffer.load(path, in_memory=False).buffer
    monkeypatch.setattr(_disk_files, "_CHECKED_ALLOCATION_BYTES", 100)
    monkeypatch.setattr(_disk_files._safety, "available_memory", lambda: 400)
    assert store.observations[0][:8].shape == (8, 3)  # 96 bytes: not checked
    assert store.observations[0][:30].shape == (30, 3)  # 360 bytes: checked, fits
    with pytest.raises(ValueError, match=rf"data/{_data_file(path, 'observations_0')}: observations\[0:40\] "
                                         r"declares 40 rows × 3 float32 = 480 B; this machine has 400 B available"):
        store.observations[0][:]


# ------------------------------------------------------------------ values
_BAD_VALUES = [
    ("rewards", np.nan, True, r"rewards\[1\] is nan, expected a finite number"),
    ("rewards", -np.inf, False, r"rewards\[1\] is -inf, expected a finite number"),
    ("observations_0", np.nan, False, r"observations\[1\] is nan, expected a finite number"),
    ("observations_0", np.inf, True, r"observations\[1\] is inf"),
    ("actions", -1, True, r"actions\[1\] is -1, expected an action index in \[0, 3\)"),
    ("actions", 3, True, r"actions\[1\] is 3, expected an action index in \[0, 3\)"),
    ("actions", np.nan, False, r"actions\[1\] is nan, expected a finite number"),
    ("behaviour_probabilities", 0.0, True, r"behaviour_probabilities\[1\] is 0.0, expected a probability in \(0, 1\]"),
    ("behaviour_probabilities", 1.5, True, r"behaviour_probabilities\[1\] is 1.5, expected a probability"),
    ("behaviour_probabilities", -2.0, False, r"behaviour_probabilities\[1\] is -2.0, expected a density > 0"),
]


@pytest.mark.parametrize("field, value, discrete, message", _BAD_VALUES,
                         ids=[f"{f}-{v}" for f, v, _, _ in _BAD_VALUES])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_bad_value_in_a_file_is_refused_on_every_read_naming_file_field_and_row(
        tmp_path, layout, field, value, discrete, message):
    path = tmp_path / "data"
    _write(path, layout, discrete=discrete)
    _poke(path, field, 1, value)
    if field == "rewards":  # a file from an offrl that recorded no check is checked the same
        manifest = _manifest(path)
        del manifest["values_checked"]
        (path / "manifest.json").write_text(json.dumps(manifest))
    where = rf"data/{_data_file(path, field)}: {message}.* \(offrl refuses it"
    with pytest.raises(ValueError, match=where):
        ReplayBuffer.load(path)  # in_memory=True reads every row
    dataset = ReplayBuffer.load(path, in_memory=False)  # in place: rows are checked as they are read
    store = dataset.buffer
    column = getattr(store, field) if field != "observations_0" else store.observations[0]
    np.testing.assert_array_equal(column[np.array([0, 2, 12])].shape[0], 3)  # other rows read fine
    for read_mode in ("pread", "mmap"):
        store.read_mode = read_mode
        with pytest.raises(ValueError, match=where):
            column[np.array([5, 1, 30])]
        with pytest.raises(ValueError, match=where):
            dataset.episodes[0]
        with pytest.raises(ValueError, match=where):
            column[0:4]
    store.read_mode = "pread"
    if field != "behaviour_probabilities":
        offrl.seed(0)
        with pytest.raises(ValueError, match=where):  # 40 transitions, 1024 draws: row 1 is among them
            dataset.sample_transition_batch(1024)
    with pytest.raises(ValueError, match=where):
        store.verify()
    with pytest.raises(ValueError, match=where):
        dump_disk_dataset(dataset, tmp_path / "copy")
    assert not (tmp_path / "copy").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["data"]


def test_values_checked_is_recorded_and_a_clean_file_verifies(tmp_path):
    path = tmp_path / "data"
    episodes = _write(path, "rows")
    assert _manifest(path)["values_checked"] is True
    dataset = ReplayBuffer.load(path, in_memory=False)
    assert dataset.buffer.values_checked
    dataset.buffer.verify()
    np.testing.assert_array_equal(dataset.episodes[2].rewards, episodes[2].rewards)
    manifest = _manifest(path)
    manifest["values_checked"] = "yes"
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="'values_checked' is 'yes', expected true or false"):
        ReplayBuffer.load(path, in_memory=False)


@pytest.mark.parametrize("field, value, message", [
    ("rewards", np.nan, r"the buffer being dumped: rewards\[4\] is nan, expected a finite number \(nothing was "
                        r"written to .*/out\)"),
    ("observations", np.inf, r"the buffer being dumped: observations\[4\] is inf"),
    ("actions", 7, r"the buffer being dumped: actions\[4\] is 7, expected an action index in \[0, 3\)"),
])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_dump_refuses_bad_values_of_a_buffer_naming_field_and_row(tmp_path, layout, field, value, message):
    rng = np.random.default_rng(0)
    n = 8
    columns = {"observations": rng.normal(size=(n, 3)).astype(np.float32), "actions": rng.integers(0, 3, (n, 1)),
               "rewards": rng.normal(size=(n, 1)).astype(np.float32)}
    columns[field][4] = value
    store = InfiniteBuffer()  # filled as a loader fills it: no per-episode checks
    store.set_columns([columns["observations"]], columns["actions"], columns["rewards"], np.array([0]),
                      np.array([n]), np.array([True]), np.array([False]))
    buffer = ReplayBuffer(store, action_space=offrl.ActionSpace.DISCRETE, action_size=3)
    with pytest.raises(ValueError, match=message):
        dump_disk_dataset(buffer, tmp_path / "out", layout=layout)
    assert list(tmp_path.iterdir()) == []


def test_the_streaming_writer_refuses_bad_values_naming_episode_and_row(tmp_path):
    episodes = _episodes(discrete=False)
    bad = episodes[2]
    rewards = bad.rewards.copy()
    rewards[6] = np.nan
    with pytest.raises(ValueError, match=r"episode 2: episode.rewards\[6\] is nan"):
        with DiskDatasetWriter(tmp_path / "out") as writer:
            writer.add_episodes([*episodes[:2], Episode(bad.observations, bad.actions, rewards, True)])
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------- manifests
def _edit(path, edit) -> None:
    manifest = _manifest(path)
    edit(manifest)
    (path / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", [[0], [3, 0], [0, 2]], ids=["empty", "trailing-zero", "leading-zero"])
def test_a_zero_width_observation_shape_is_refused(tmp_path, layout, shape):
    path = tmp_path / "data"
    _write(path, layout)
    _edit(path, lambda m: m["columns"]["observations_0"].update(shape=[40, *shape], bytes=0))
    with pytest.raises(ValueError, match=rf"field 'observations_0' has shape \[40, {', '.join(map(str, shape))}\]: "
                                         "a row of zero width|column 'observations_0' has shape .* zero width"):
        ReplayBuffer.load(path, in_memory=False)


@pytest.mark.parametrize("name", ["episode_terminated", "episode_has_final"])
@pytest.mark.parametrize("byte", [2, 255])
def test_bool_bytes_other_than_0_and_1_are_refused(tmp_path, name, byte):
    path = tmp_path / "data"
    _write(path, "rows")
    data = bytearray((path / f"{name}.bin").read_bytes())
    data[3] = byte
    (path / f"{name}.bin").write_bytes(bytes(data))
    for in_memory in (False, True):
        with pytest.raises(ValueError, match=rf"{name}.bin byte 3 is {byte}, expected 0 or 1 \(a bool\)"):
            ReplayBuffer.load(path, in_memory=in_memory)


def test_a_deeply_nested_manifest_is_refused_without_recursion_error(tmp_path):
    path = tmp_path / "data"
    _write(path, "rows")
    text = (path / "manifest.json").read_text()
    (path / "manifest.json").write_text(text[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ValueError, match=r"manifest.json: JSON nested 100001 levels deep; at most 64"):
        ReplayBuffer.load(path, in_memory=False)


# -------------------------------------------------- a writer dumping over it
_OVERWRITER = textwrap.dedent('''
    import sys
    import numpy as np
    from offrl.dataset import DiskDatasetWriter, Episode

    path, rounds = sys.argv[1], int(sys.argv[2])
    for i in range(rounds):
        n = 5 + i % 2  # two datasets: 5 episodes of reward 0.0, or 6 episodes of reward 1.0
        with DiskDatasetWriter(path, overwrite=True, layout="rows" if i % 4 < 2 else "columns") as writer:
            for _ in range(n):
                writer.add_episode(Episode(np.zeros((4, 2), np.float32), np.zeros((4, 1), np.float32),
                                           np.full((4, 1), float(i % 2), np.float32), True))
        print(i, flush=True)
''')


def test_a_dataset_opened_while_a_writer_dumps_over_it_is_the_old_or_the_new_one(tmp_path):
    path = tmp_path / "data"
    with DiskDatasetWriter(path) as writer:
        writer.add_episode(Episode(np.zeros((4, 2), np.float32), np.zeros((4, 1), np.float32),
                                   np.zeros((4, 1), np.float32), True))
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    child = subprocess.Popen([sys.executable, "-c", _OVERWRITER, str(path), "40"], stdout=subprocess.PIPE,
                             text=True, env=env)
    started = threading.Event()
    lines = []

    def follow():
        for line in child.stdout:
            lines.append(line)
            started.set()

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    started.wait(timeout=120)
    opened = refused = 0
    try:
        for _ in range(3000):
            if child.poll() is not None:
                break
            try:
                dataset = ReplayBuffer.load(path, in_memory=False)
                rewards = dataset.buffer.read_fields(0, dataset.buffer.tail)["rewards"]
            except (DiskDatasetChangedError, ValueError) as e:
                # a clear refusal: the path missing between the writer's renames, or replaced too often
                assert "replaced" in str(e) or "not a disk dataset directory" in str(e) or "not a directory" in str(e), e
                refused += 1
                continue
            episodes = dataset.buffer.episode_count
            assert (episodes, float(rewards[0, 0])) in ((5, 0.0), (6, 1.0), (1, 0.0)), (episodes, rewards[0])
            assert (rewards == rewards[0, 0]).all() and rewards.shape[0] == 4 * episodes
            opened += 1
    finally:
        child.wait(timeout=300)
        reader.join(timeout=10)
    assert child.returncode == 0 and opened > 0
    leftovers = sorted(p.name for p in tmp_path.iterdir())
    assert leftovers == ["data"], leftovers


def test_a_directory_replaced_while_being_opened_is_opened_again_whole(tmp_path, monkeypatch):
    path = tmp_path / "data"
    _write(path, "rows", n_episodes=2)
    _write(tmp_path / "new", "columns", n_episodes=3)
    real = disk_format.open_member  # the opener of a dataset's files (DatasetMembers) looks it up there
    swaps = []

    def replacing(directory_fd, directory, name):
        if name == "records.bin" and not swaps:  # the writer's swap, between the manifest and the data
            os.rename(path, tmp_path / "old")
            os.rename(tmp_path / "new", path)
            disk_module.shutil.rmtree(tmp_path / "old")
            swaps.append(name)
        return real(directory_fd, directory, name)

    monkeypatch.setattr(disk_format, "open_member", replacing)
    dataset = ReplayBuffer.load(path, in_memory=False)
    assert swaps and dataset.buffer.episode_count == 3 and "observations_0.bin" in dataset.buffer._stats

    def always(directory_fd, directory, name):
        if name == "manifest.json":  # replaced again before every attempt reads its manifest
            disk_module.shutil.copytree(path, tmp_path / "copy")
            os.rename(path, tmp_path / "old")
            os.rename(tmp_path / "copy", path)
            disk_module.shutil.rmtree(tmp_path / "old")
        return real(directory_fd, directory, name)

    monkeypatch.setattr(disk_format, "open_member", always)
    with pytest.raises(DiskDatasetChangedError, match=r"was replaced by another process 8 times while it was being "
                                                      "opened"):
        ReplayBuffer.load(path, in_memory=False)


# ----------------------------------------------------------- failed writes
_FILE_SIZE_LIMIT = textwrap.dedent('''
    import os, resource, signal, sys
    import numpy as np
    from offrl.dataset import DiskDatasetWriter, Episode, ReplayBuffer, InfiniteBuffer, dump_disk_dataset

    root = sys.argv[1]
    rng = np.random.default_rng(0)
    episodes = [Episode(rng.normal(size=(500, 16)).astype(np.float32), rng.normal(size=(500, 2)).astype(np.float32),
                        rng.normal(size=(500, 1)).astype(np.float32), True) for _ in range(4)]
    buffer = ReplayBuffer(InfiniteBuffer(), episodes=episodes)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (50_000, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    for layout in ("rows", "columns"):
        try:
            dump_disk_dataset(buffer, os.path.join(root, "dumped-" + layout), layout=layout)
        except OSError as e:
            print(e.errno, e, flush=True)
        try:
            with DiskDatasetWriter(os.path.join(root, "streamed-" + layout), layout=layout) as writer:
                writer.add_episodes(episodes)
        except OSError as e:
            print(e.errno, e, flush=True)
''')


def test_a_file_size_limit_fails_cleanly_naming_the_target(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", _FILE_SIZE_LIMIT, str(tmp_path)], capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().split("\n")
    assert len(lines) == 4, done.stdout
    for line, target in zip(lines, ["dumped-rows", "streamed-rows", "dumped-columns", "streamed-columns"]):
        assert line == (f"{errno.EFBIG} [Errno {errno.EFBIG}] writing the disk dataset {tmp_path / target} failed: "
                        f"{os.strerror(errno.EFBIG)} (nothing was left there)"), line
    assert list(tmp_path.iterdir()) == []  # no hidden .writing-* directory left


def test_a_full_disk_at_close_keeps_the_old_dataset_and_leaves_nothing(tmp_path, monkeypatch):
    path = tmp_path / "data"
    old = _write(path, "rows")
    buffer = ReplayBuffer(InfiniteBuffer(), episodes=_episodes(True, seed=1))

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(writer_module.os, "fsync", full)
    with pytest.raises(OSError, match=rf"writing the disk dataset {path} failed: No space left on device \(the "
                                      "dataset already there is unchanged\\)") as info:
        dump_disk_dataset(buffer, path, overwrite=True)
    assert info.value.errno == errno.ENOSPC and ".writing" not in str(info.value)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]
    np.testing.assert_array_equal(ReplayBuffer.load(path).episodes[1].rewards, old[1].rewards)


def test_a_parent_that_is_a_file_or_a_long_name_is_handled_before_writing(tmp_path):
    (tmp_path / "file").write_text("x")
    buffer = ReplayBuffer(InfiniteBuffer(), episodes=_episodes(True))
    with pytest.raises(ValueError, match=rf"path {tmp_path}/file/sub/data: {tmp_path}/file is not a directory"):
        dump_disk_dataset(buffer, tmp_path / "file" / "sub" / "data")
    with pytest.raises(ValueError, match=rf"path {tmp_path}/file/data: {tmp_path}/file is not a directory"):
        dump_disk_dataset(buffer, tmp_path / "file" / "data")
    long = tmp_path / ("d" * 250)  # a valid name whose hidden temporary sibling would not be
    dump_disk_dataset(buffer, long)
    assert ReplayBuffer.load(long, in_memory=False).transition_count == buffer.transition_count
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["file", long.name])
    with pytest.raises(OSError, match=rf"writing the disk dataset {tmp_path}/{'e' * 256} failed: File name too long"):
        dump_disk_dataset(buffer, tmp_path / ("e" * 256))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["file", long.name])


def test_disk_space_errors_name_the_target_not_the_temporary(tmp_path, monkeypatch):
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(disk_module.shutil, "disk_usage", lambda p: usage(10**6, 10**6 - 1000, 1000))
    with pytest.raises(FileWriteError, match=rf"^cannot write {tmp_path}/streamed: No space left on device \(writing the next "
                       r"episode needs 320 bytes .* 1000 bytes \(1 kB\) are free there\); nothing was written$") as caught:
        with DiskDatasetWriter(tmp_path / "streamed") as writer:
            writer.add_episode(_episodes(True)[0])
    assert caught.value.filename == str(tmp_path / "streamed") and caught.value.errno == errno.ENOSPC
    assert list(tmp_path.iterdir()) == []
