"""The disk store's batch reads split over a reader thread (io_uring)."""

from __future__ import annotations

import ctypes
import os
import threading
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from offrl.dataset import _split_reads

FILE_BYTES = 1 << 16


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("split") / "data.bin"
    contents = np.random.default_rng(0).integers(0, 256, FILE_BYTES, dtype=np.uint8).tobytes()
    path.write_bytes(contents)
    fd = os.open(path, os.O_RDONLY)
    yield fd, contents
    os.close(fd)


def _expected(contents: bytes, offsets, size: int) -> bytes:
    """The naive loop: each read in turn, stopping at the first short one."""
    out = b""
    for offset in offsets:
        piece = contents[offset : offset + size]
        out += piece
        if len(piece) < size:
            break
    return out


requires_reader = pytest.mark.skipif(
    not _split_reads.reader_available(),
    reason="no reader thread here: neither io_uring nor Linux AIO is usable by this process (not Linux, "
           "an architecture without their system call numbers here, both filtered) or it has one CPU",
)


@pytest.fixture(scope="module", params=["uring", "aio"])
def backend(request):
    """The process's reader made with each kernel interface in turn (the
    one in use before is put back afterwards)."""
    if not _split_reads.reader_available():
        pytest.skip("no reader thread in this process (see requires_reader)")
    try:
        reader = _split_reads._Reader(request.param)
    except OSError as e:
        pytest.skip(f"{request.param} is not usable by this process here: {e}")
    saved = _split_reads._reader, _split_reads._state
    _split_reads._reader, _split_reads._state = reader, True
    yield request.param
    _split_reads._reader, _split_reads._state = saved
    reader.close()


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 600), size=st.integers(1, 300), split=st.booleans(), seed=st.integers(0, 2**16))
def test_read_rows_equals_a_loop_of_positional_reads(backend, data_file, n, size, split, seed):
    fd, contents = data_file
    offsets = np.random.default_rng(seed).integers(0, FILE_BYTES - size + 1, n).astype(np.int64)
    got = _split_reads.read_rows(fd, offsets, size, split)
    assert got.dtype == np.uint8 and got.shape == (n * size,)
    assert got.tobytes() == _expected(contents, offsets.tolist(), size)


@requires_reader
def test_a_large_batch_is_read_partly_by_the_reader_thread(backend, data_file, monkeypatch):
    fd, contents = data_file
    calls = []
    real = os.pread
    monkeypatch.setattr(os, "pread", lambda *a: (calls.append(threading.get_ident()), real(*a))[1])
    offsets = np.random.default_rng(1).integers(0, FILE_BYTES - 64, 256).astype(np.int64)
    got = _split_reads.read_rows(fd, offsets, 64)
    assert got.tobytes() == _expected(contents, offsets.tolist(), 64)
    # the calling thread made its share of the reads; the kernel read the rest for the reader thread
    assert calls == [threading.get_ident()] * int(256 * _split_reads.CALLER_SHARE)
    calls.clear()
    assert _split_reads.read_rows(fd, offsets, 64, split=False).tobytes() == got.tobytes()
    assert len(calls) == 256
    calls.clear()
    _split_reads.read_rows(fd, offsets[: _split_reads.MIN_SPLIT_ROWS - 1], 64)  # small: no hand-over
    assert len(calls) == _split_reads.MIN_SPLIT_ROWS - 1


@pytest.mark.parametrize("where", ["caller", "reader"])
def test_a_read_past_the_end_comes_back_short(backend, data_file, where):
    fd, contents = data_file
    offsets = np.random.default_rng(2).integers(0, FILE_BYTES - 100, 200).astype(np.int64)
    bad = 10 if where == "caller" else 190  # in the calling thread's share, or the reader's
    offsets[bad] = FILE_BYTES - 30
    got = _split_reads.read_rows(fd, offsets, 100)
    assert len(got) < 200 * 100  # the store's size check then reports a truncated file
    whole = bad * 100  # the rows before the short read are the file's
    assert got[:whole].tobytes() == _expected(contents, offsets.tolist(), 100)[:whole]


@requires_reader
def test_failed_ring_reads_are_read_again_by_the_caller(backend, data_file, monkeypatch):
    fd, contents = data_file
    reader = _split_reads._get_reader()
    real = reader._queue.results

    def failing(size: int) -> np.ndarray:
        res = np.full(reader._queue._pending, size)
        assert real(size) is None  # the completions consumed: every read was whole
        res[::3] = -5  # now say EIO for every third read of the reader's share
        res[1] = 7  # and one short read
        return res

    monkeypatch.setattr(reader._queue, "results", failing)
    monkeypatch.setattr(_split_reads, "_state", _split_reads._state)  # restored after the test
    offsets = np.random.default_rng(3).integers(0, FILE_BYTES - 50, 300).astype(np.int64)
    assert _split_reads.read_rows(fd, offsets, 50).tobytes() == _expected(contents, offsets.tolist(), 50)
    # reads the ring failed and os.pread did not: the process reads in the calling thread from now on
    assert not _split_reads.reader_available()
    assert _split_reads.read_rows(fd, offsets, 50).tobytes() == _expected(contents, offsets.tolist(), 50)


def test_an_error_in_the_calling_thread_leaves_the_reader_usable(backend, data_file):
    fd, contents = data_file
    offsets = np.random.default_rng(4).integers(0, FILE_BYTES - 16, 100).astype(np.int64)
    before = _split_reads.reader_available()
    spare = os.dup(fd)
    os.close(spare)  # a closed descriptor: the reads fail in both threads
    with pytest.raises(OSError):
        _split_reads.read_rows(spare, offsets, 16)
    assert _split_reads.reader_available() == before  # the file's error, not the ring's: the reader stays
    # the next batches come back whole and right (no completion of the failed batch left in the ring)
    for seed in range(3):
        offsets = np.random.default_rng(seed).integers(0, FILE_BYTES - 16, 100).astype(np.int64)
        assert _split_reads.read_rows(fd, offsets, 16).tobytes() == _expected(contents, offsets.tolist(), 16)


def test_threads_reading_at_once_each_get_their_own_rows(backend, data_file):
    fd, contents = data_file
    errors = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(30):
            size = int(rng.integers(1, 200))
            offsets = rng.integers(0, FILE_BYTES - size, int(rng.integers(32, 300))).astype(np.int64)
            if _split_reads.read_rows(fd, offsets, size).tobytes() != _expected(contents, offsets.tolist(), size):
                errors.append(seed)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is not available on this platform")
def test_a_forked_child_reads_with_its_own_reader(data_file):
    fd, contents = data_file
    offsets = np.random.default_rng(5).integers(0, FILE_BYTES - 40, 256).astype(np.int64)
    expected = _expected(contents, offsets.tolist(), 40)
    assert _split_reads.read_rows(fd, offsets, 40).tobytes() == expected  # the parent's reader exists
    parent = _split_reads._reader
    pid = os.fork()
    if pid == 0:  # the child: not the parent's ring or thread, and its reads are right
        ok = _split_reads._reader is None and _split_reads.read_rows(fd, offsets, 40).tobytes() == expected
        ok = ok and (parent is None or _split_reads._reader is not parent)
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert _split_reads._reader is parent and _split_reads.read_rows(fd, offsets, 40).tobytes() == expected


@pytest.mark.parametrize("env", [{"OFFRL_SPLIT_READS": "0"}, {"LOCAL_WORLD_SIZE": "100000"}],
                         ids=["turned-off", "ranks-fill-the-cpus"])
def test_the_environment_can_turn_the_reader_off(data_file, monkeypatch, env):
    fd, contents = data_file
    monkeypatch.setattr(_split_reads, "_reader", None)
    monkeypatch.setattr(_split_reads, "_state", None)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert not _split_reads.reader_available()
    offsets = np.random.default_rng(6).integers(0, FILE_BYTES - 8, 64).astype(np.int64)
    assert _split_reads.read_rows(fd, offsets, 8).tobytes() == _expected(contents, offsets.tolist(), 8)


def test_a_refused_io_uring_falls_back_to_linux_aio(monkeypatch):
    def refused(self, syscall, entries):
        raise PermissionError(1, "io_uring_setup failed")  # as under Docker's default seccomp profile

    monkeypatch.setattr(_split_reads._Uring, "__init__", refused)
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        queue = _split_reads._make_queue(libc.syscall, 64)
    except OSError as e:
        pytest.skip(f"Linux AIO is not usable here either: {e}")
    assert type(queue) is _split_reads._Aio
    queue.close()
    with pytest.raises(PermissionError):
        _split_reads._make_queue(libc.syscall, 64, "uring")  # asked for by name: not replaced


@pytest.mark.parametrize("value, setting", [
    ("0", "off"), ("false", "off"), ("No", "off"), (" OFF ", "off"), ("aio", "aio"), ("AIO", "aio"),
    ("1", "default"), ("true", "default"), ("Yes", "default"), ("on", "default"), ("", "default"),
])
def test_split_reads_setting_accepts_the_usual_spellings_silently(monkeypatch, value, setting):
    monkeypatch.setattr(_split_reads, "_warned_setting", None)
    monkeypatch.setenv("OFFRL_SPLIT_READS", value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _split_reads.split_setting() == setting
    if setting == "off":  # a false spelling turns the reader off, as "0" did
        monkeypatch.setattr(_split_reads, "_reader", None)
        monkeypatch.setattr(_split_reads, "_state", None)
        assert not _split_reads.reader_available()


def test_an_unknown_split_reads_setting_warns_once_and_keeps_the_default(monkeypatch):
    monkeypatch.setattr(_split_reads, "_warned_setting", None)
    monkeypatch.delenv("OFFRL_SPLIT_READS", raising=False)
    assert _split_reads.split_setting() == "default"
    monkeypatch.setenv("OFFRL_SPLIT_READS", "disable")
    with pytest.warns(RuntimeWarning, match=r"OFFRL_SPLIT_READS='disable' is not understood: use 0/false/no/off"):
        assert _split_reads.split_setting() == "default"
    monkeypatch.setenv("OFFRL_SPLIT_READS", "nein")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per process: no second warning
        assert _split_reads.split_setting() == "default"
