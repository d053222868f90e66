"""Disk datasets fed hostile directories: a manifest with any field
replaced or removed, random bytes over the data and episode-table files,
members that are links (symbolic, hard, dangling, to folders or devices),
files truncated before opening and under an open store. The contract:
opening and reading every row (in place, in memory, episodes, samples)
either works with values offrl accepts, or raises ValueError / TypeError
naming the dataset's directory (DiskDatasetChangedError for a file
changed under an open store); never another exception, never a crash
(truncations under an open store run in a forked child, so a SIGBUS fails
the test instead of ending the run)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import uuid

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzz_budget import budget
from offrl.dataset import DiskDatasetChangedError, DiskDatasetWriter, Episode, ReplayBuffer

pytestmark = pytest.mark.fuzz

LAYOUTS = ("rows", "columns")


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """A valid small dataset of each layout and action space: 3 episodes,
    one truncated with a final observation, behaviour probabilities."""
    root = tmp_path_factory.mktemp("fuzz-disk")
    rng = np.random.default_rng(0)
    out = {}
    for layout in LAYOUTS:
        for discrete in (False, True):
            path = root / f"{layout}-{'discrete' if discrete else 'continuous'}"
            with DiskDatasetWriter(path, layout=layout, action_size=3 if discrete else None) as writer:
                for i in range(3):
                    n = 4 + i
                    actions = rng.integers(0, 3, (n, 1)) if discrete else rng.uniform(-1, 1, (n, 2)).astype(np.float32)
                    writer.add_episode(Episode(
                        rng.normal(size=(n, 3)).astype(np.float32), actions, rng.normal(size=(n, 1)).astype(np.float32),
                        terminated=i == 0, final_observation=rng.normal(size=3).astype(np.float32) if i == 1 else None,
                        behaviour_probabilities=rng.uniform(0.2, 1.0, n),
                    ))
            out[(layout, discrete)] = path
    return out


def _copy(source, tmp_path):
    path = tmp_path / uuid.uuid4().hex[:10] / "data"
    shutil.copytree(source, path)
    return path


def _read_everything(path) -> None:
    """Open ``path`` both ways and read every row every way offrl does."""
    loaded = ReplayBuffer.load(path)
    for episode in loaded.episodes:
        assert np.isfinite(episode.rewards).all() and np.isfinite(episode.observations).all()
    dataset = ReplayBuffer.load(path, in_memory=False)
    store = dataset.buffer
    store.verify()
    for episode in dataset.episodes:
        assert np.isfinite(episode.rewards).all()
    for mode in ("pread", "mmap"):
        store.read_mode = mode
        batch = dataset.sample_transition_batch(16)
        assert np.isfinite(batch.rewards).all() and np.isfinite(batch.observations).all()
        if dataset.dataset_info.action_space.name == "DISCRETE":
            assert ((batch.actions >= 0) & (batch.actions < dataset.action_size)).all()


def _refused_naming(path, error: BaseException) -> None:
    assert isinstance(error, (ValueError, TypeError, DiskDatasetChangedError)), repr(error)
    assert str(path) in str(error), str(error)


def _attempt(path, read=_read_everything) -> None:
    try:
        read(path)
    except (ValueError, TypeError, DiskDatasetChangedError) as e:
        _refused_naming(path, e)


JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False, allow_infinity=False),
              st.text(max_size=6), st.sampled_from([0, -1, 1, 2**24, 2**31, 2**63, [], {}, "|O", "<f4", "rows"])),
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(st.text(max_size=4), children, max_size=3)),
    max_leaves=8,
)


def _paths(value, prefix=()):
    """Every path to a value inside a JSON structure."""
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, prefix + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _paths(item, prefix + (i,))


@budget(12)
@given(layout=st.sampled_from(LAYOUTS), discrete=st.booleans(), pick=st.integers(0, 10**6), remove=st.booleans(),
       value=JSON_VALUES)
def test_a_manifest_with_any_field_replaced_or_removed_is_read_or_refused(sources, tmp_path, layout, discrete, pick,
                                                                         remove, value):
    path = _copy(sources[(layout, discrete)], tmp_path)
    manifest = json.loads((path / "manifest.json").read_text())
    paths = list(_paths(manifest))[1:]
    where = paths[pick % len(paths)]
    parent = manifest
    for key in where[:-1]:
        parent = parent[key]
    if remove and isinstance(parent, dict):
        del parent[where[-1]]
    else:
        parent[where[-1]] = value
    (path / "manifest.json").write_text(json.dumps(manifest))
    _attempt(path)


@budget(12)
@given(layout=st.sampled_from(LAYOUTS), discrete=st.booleans(), member=st.integers(0, 100), offset=st.integers(0, 10**6),
       data=st.binary(min_size=1, max_size=24))
def test_random_bytes_over_any_file_are_read_or_refused(sources, tmp_path, layout, discrete, member, offset, data):
    path = _copy(sources[(layout, discrete)], tmp_path)
    files = sorted(p.name for p in path.iterdir() if p.name != "manifest.json")
    file = path / files[member % len(files)]
    raw = bytearray(file.read_bytes())
    start = offset % len(raw)
    raw[start : start + len(data)] = data[: len(raw) - start]
    file.write_bytes(bytes(raw))
    _attempt(path)


@budget(12)
@given(layout=st.sampled_from(LAYOUTS), member=st.integers(0, 100),
       kind=st.sampled_from(["symlink-same-bytes", "symlink-dangling", "symlink-folder", "symlink-device", "hardlink"]))
def test_a_member_that_is_any_link_is_refused_naming_it(sources, tmp_path, layout, member, kind):
    path = _copy(sources[(layout, False)], tmp_path)
    files = sorted(p.name for p in path.iterdir())
    name = files[member % len(files)]
    outside = path.parent / "outside"
    os.replace(path / name, outside)
    if kind == "hardlink":
        os.link(outside, path / name)
    else:
        target = {"symlink-same-bytes": outside, "symlink-dangling": path.parent / "nothing",
                  "symlink-folder": path.parent, "symlink-device": "/dev/zero"}[kind]
        os.symlink(target, path / name)
    for in_memory in (False, True):
        with pytest.raises(ValueError) as info:
            ReplayBuffer.load(path, in_memory=in_memory)
        message = str(info.value)
        assert f"{path / name}" in message or (name == "manifest.json" and str(path) in message), message


def _fork(run) -> str:
    """``run()`` in a forked child: what it printed back, or the test
    fails with the signal that ended it."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            try:
                run()
                out = "ok"
            except DiskDatasetChangedError as e:
                out = f"changed {e}"
            except (ValueError, TypeError) as e:
                out = f"refused {e}"
            except BaseException as e:  # noqa: BLE001 - reported to the parent
                out = f"error {e!r}"
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
        pytest.fail(f"the reads killed the process with {signal.Signals(os.WTERMSIG(status)).name}")
    return b"".join(chunks).decode()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="truncations under an open store run in a forked child")
@budget(12)
@given(layout=st.sampled_from(LAYOUTS), discrete=st.booleans(), member=st.integers(0, 100),
       keep=st.floats(0, 1), opened=st.booleans(), mode=st.sampled_from(["pread", "mmap"]))
def test_a_file_truncated_before_or_under_an_open_store_is_refused_never_a_crash(
        sources, tmp_path, layout, discrete, member, keep, opened, mode):
    path = _copy(sources[(layout, discrete)], tmp_path)
    files = sorted(p.name for p in path.iterdir())
    file = path / files[member % len(files)]
    size = int(os.path.getsize(file) * keep)
    if not opened:
        os.truncate(file, min(size, os.path.getsize(file) - 1))
        _attempt(path)
        return
    dataset = ReplayBuffer.load(path, in_memory=False)

    def reads():
        os.truncate(file, size)
        dataset.buffer.read_mode = mode
        dataset.sample_transition_batch(64)
        for episode in dataset.episodes:
            episode.observations.sum()
        dataset.buffer.verify()
        dataset.buffer.check()

    truncated = size < os.path.getsize(file)
    out = _fork(reads)
    if truncated:  # a read, or else the check of the files, says so
        assert out.startswith(("changed", "refused")) and str(path) in out, out
    else:  # the same size: read fine, and the check notices the new modification time (or not, within its tick)
        assert out == "ok" or (out.startswith("changed") and "changed since the dataset was opened" in out), out
