"""Scattered positional reads of one batch on two CPUs at once.

A disk dataset's random mini-batch is one positional read per transition,
and on Linux a small read from the page cache costs about 0.8 us of kernel
time whoever asks for it (``os.pread`` in a loop, io_uring or Linux AIO:
measured the same), so a batch of 256 costs ~200 us on one CPU.
:func:`read_rows` splits the reads of one batch: a reader thread hands its
share to the kernel in *one* system call (a ctypes call, so the thread
holds no GIL while the kernel reads), and the calling thread meanwhile
reads the rest with ``os.pread``. The two shares run on two CPUs; nothing
polls or spins between batches (the reader thread sleeps on a lock).

The one call is ``io_uring_enter`` (Linux 5.6 or later:
``IORING_OP_READ``), or where io_uring is refused (``kernel.io_uring_disabled``,
or a seccomp filter such as Docker's default profile since 2023) Linux AIO's
``io_submit``, which on a file opened without ``O_DIRECT`` reads inside the
call, in the calling thread (x86-64 and arm64). Both through raw system
calls: no library to install. The reader runs where one of them works
and the process has two CPUs of its own (its CPU affinity against
``torchrun``'s ``LOCAL_WORLD_SIZE``: ranks that already fill the machine's
CPUs read in their own thread). Anywhere else, and for small batches, the
calling thread reads everything itself (:func:`read_rows` gives the same
bytes either way). Any read the kernel did not complete in full is read
again with ``os.pread`` by the caller, whose checks then report it (a
truncated file, an I/O error) as they always do; an interface that fails
reads ``os.pread`` does is given up for the process.
``OFFRL_SPLIT_READS`` in the environment: ``0``, ``false``, ``no`` or
``off`` (any case) turns the reader off, ``aio`` uses Linux AIO only,
``1``, ``true``, ``yes``, ``on`` or empty is the default; any other value
is warned about once and read as the default.

Safety: the kernel writes only into the output array of the call in flight,
which the reader keeps referenced until its reads completed (a caller
interrupted while waiting leaves it to the next call, which waits first).
The ring (or AIO context) is private to the process: a forked child makes
its own.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import platform
import signal
import sys
import threading
import warnings
from itertools import repeat
from typing import Optional

import numpy as np

__all__ = ["read_rows", "reader_available"]

#: batches with fewer rows are read by the caller alone (the hand-over costs more than it saves)
MIN_SPLIT_ROWS = 32
#: the share of a batch's rows the calling thread reads itself: the reader
#: thread starts later (it is woken), so it takes a smaller share (measured
#: on 2 CPUs: 53 % in the caller gave the shortest batch)
CALLER_SHARE = 0.53
#: the ring's submission entries: the most rows the reader thread takes per batch
RING_ENTRIES = 1024

_SYS_IO_URING_SETUP = 425  # the unified system call numbers (Linux 5.1+) ...
_SYS_IO_URING_ENTER = 426
#: ... of these architectures (alpha, ia64 and mips number them otherwise: no reader there)
_SYSCALL_MACHINES = {"x86_64", "amd64", "i386", "i686", "aarch64", "arm64", "armv7l", "armv8l", "ppc64", "ppc64le",
                     "s390x", "riscv64", "loongarch64"}
_IORING_OP_READ = 22
_IORING_ENTER_GETEVENTS = 1
_IORING_FEAT_SINGLE_MMAP = 1
_IORING_OFF_SQ_RING = 0
_IORING_OFF_SQES = 0x10000000

_SQE = np.dtype({
    "names": ["opcode", "flags", "fd", "off", "addr", "len", "user_data"],
    "formats": [np.uint8, np.uint8, np.int32, np.uint64, np.uint64, np.uint32, np.uint64],
    "offsets": [0, 1, 4, 8, 16, 24, 32],
    "itemsize": 64,
})
# system call arguments as C longs (syscall(2) is variadic: no int promotion to rely on)
_ENTER, _GETEVENTS = ctypes.c_long(_SYS_IO_URING_ENTER), ctypes.c_long(_IORING_ENTER_GETEVENTS)
_NULL, _ZERO = ctypes.c_void_p(None), ctypes.c_long(0)
_CQE = np.dtype({"names": ["user_data", "res"], "formats": [np.uint64, np.int32], "offsets": [0, 8], "itemsize": 16})


#: ``OFFRL_SPLIT_READS`` values (lower case, stripped) that turn the reader off / leave the default
_OFF_VALUES = ("0", "false", "no", "off")
_ON_VALUES = ("", "1", "true", "yes", "on")
_warned_setting: Optional[str] = None


def split_setting() -> str:
    """``OFFRL_SPLIT_READS`` read as ``"off"``, ``"aio"`` or ``"default"``;
    a value that is none of the accepted spellings is warned about (once
    per process) and read as ``"default"``."""
    global _warned_setting
    raw = os.environ.get("OFFRL_SPLIT_READS")
    if raw is None:
        return "default"
    value = raw.strip().lower()
    if value in _OFF_VALUES:
        return "off"
    if value == "aio":
        return "aio"
    if value not in _ON_VALUES and _warned_setting is None:
        _warned_setting = raw
        warnings.warn(
            f"OFFRL_SPLIT_READS={raw!r} is not understood: use 0/false/no/off to turn the disk reader thread off, "
            "aio for Linux AIO only, or 1/true/yes/on for the default; using the default",
            RuntimeWarning, stacklevel=3,
        )
    return "default"


class _Params(ctypes.Structure):
    """``struct io_uring_params`` (120 bytes)."""

    _fields_ = (
        [(n, ctypes.c_uint32) for n in ("sq_entries", "cq_entries", "flags", "sq_thread_cpu", "sq_thread_idle",
                                        "features", "wq_fd", "resv0", "resv1", "resv2")]
        + [("sq_" + n, ctypes.c_uint32) for n in ("head", "tail", "ring_mask", "ring_entries", "flags", "dropped",
                                                  "array", "resv1")]
        + [("sq_user_addr", ctypes.c_uint64)]
        + [("cq_" + n, ctypes.c_uint32) for n in ("head", "tail", "ring_mask", "ring_entries", "overflow", "cqes",
                                                  "flags", "resv1")]
        + [("cq_user_addr", ctypes.c_uint64)]
    )


class _Uring:
    """One io_uring (submission and completion rings mapped into the process)."""

    def __init__(self, syscall: "ctypes._CFuncPtr", entries: int) -> None:
        params = _Params()
        fd = syscall(ctypes.c_long(_SYS_IO_URING_SETUP), ctypes.c_long(entries), ctypes.byref(params))
        if fd < 0:
            raise OSError(ctypes.get_errno(), "io_uring_setup failed")
        self.fd = fd
        self._fd_arg = ctypes.c_long(fd)
        try:
            if not params.features & _IORING_FEAT_SINGLE_MMAP:
                raise OSError("io_uring without IORING_FEAT_SINGLE_MMAP (Linux < 5.4)")
            size = max(params.sq_array + params.sq_entries * 4, params.cq_cqes + params.cq_entries * _CQE.itemsize)
            prot, flags = mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
            self._ring_map = mmap.mmap(fd, size, flags, prot, offset=_IORING_OFF_SQ_RING)
            self._sqe_map = mmap.mmap(fd, params.sq_entries * _SQE.itemsize, flags, prot, offset=_IORING_OFF_SQES)
        except BaseException:
            os.close(fd)
            raise
        words = np.frombuffer(self._ring_map, np.uint32)
        self._words = words
        self._sq_tail, self._cq_head, self._cq_tail = params.sq_tail // 4, params.cq_head // 4, params.cq_tail // 4
        self._sq_mask, self._cq_mask = int(words[params.sq_ring_mask // 4]), int(words[params.cq_ring_mask // 4])
        self.entries = int(params.sq_entries)
        self._sq_array = words[params.sq_array // 4 : params.sq_array // 4 + params.sq_entries]
        self._sqes = np.frombuffer(self._sqe_map, _SQE)
        self._sqes["opcode"] = _IORING_OP_READ
        self._sqes["user_data"] = np.arange(self.entries, dtype=np.uint64)
        self._indices = np.arange(self.entries, dtype=np.uint32)
        self._steps = np.arange(self.entries, dtype=np.uint64)
        #: (fd, size, count) the first ``count`` entries were last prepared with
        self._prepared = (-1, -1, 0)
        self._cqes = np.frombuffer(self._ring_map, _CQE, count=params.cq_entries, offset=params.cq_cqes)
        self._pending = 0

    def _ring_slice(self, array: np.ndarray, first: int, k: int, mask: int, values: Optional[np.ndarray] = None):
        """``array`` at ring positions ``first, first + 1, ...`` (``k`` of
        them, wrapping at ``mask + 1``): set to ``values``, or returned."""
        start = first & mask
        stop = start + k
        if stop <= mask + 1:
            if values is None:
                return array[start:stop]
            array[start:stop] = values
            return None
        head = mask + 1 - start
        if values is None:
            return np.concatenate((array[start:], array[: k - head]))
        array[start:] = values[:head]
        array[: k - head] = values[head:]
        return None

    def prepare(self, fd: int, offsets: np.ndarray, size: int, address: int) -> None:
        """Queue reads of ``size`` bytes at ``offsets`` into consecutive
        ``size``-byte slots from ``address`` (not yet submitted). Entry
        ``i`` of the submission array reads row ``i`` (its ``user_data``)."""
        k = offsets.shape[0]
        sqes = self._sqes[:k]
        held_fd, held_size, held = self._prepared
        if held_fd != fd or held_size != size or held < k:
            sqes["fd"] = fd
            sqes["len"] = size
            self._prepared = (fd, size, k)
        sqes["off"] = offsets
        sqes["addr"] = self._steps[:k] * np.uint64(size) + np.uint64(address)
        tail = int(self._words[self._sq_tail])
        self._ring_slice(self._sq_array, tail, k, self._sq_mask, self._indices[:k])
        self._words[self._sq_tail] = (tail + k) & 0xFFFFFFFF
        self._pending = k
        self._count_arg = ctypes.c_long(k)

    def submit_and_wait(self, syscall: "ctypes._CFuncPtr") -> None:
        """Submit the queued reads and wait until all completed (the GIL is
        released during the system call: ctypes releases it)."""
        k = self._pending
        # the usual case first, with no Python work before the call: all submitted and completed in one
        got = syscall(_ENTER, self._fd_arg, self._count_arg, self._count_arg, _GETEVENTS, _NULL, _ZERO)
        submitted = max(got, 0)
        while True:
            done = (int(self._words[self._cq_tail]) - int(self._words[self._cq_head])) & 0xFFFFFFFF
            if submitted == k and done >= k:
                return
            got = syscall(_ENTER, ctypes.c_long(self.fd), ctypes.c_long(k - submitted), ctypes.c_long(k - done),
                          _GETEVENTS, _NULL, _ZERO)
            if got < 0:
                error = ctypes.get_errno()
                if error in (4, 11, 16):  # EINTR, EAGAIN, EBUSY: try again
                    continue
                if submitted == 0:
                    # nothing reached the kernel: drop the queued entries, the caller reads these rows itself
                    self._words[self._sq_tail] = (int(self._words[self._sq_tail]) - k) & 0xFFFFFFFF
                    self._pending = 0
                    raise OSError(error, "io_uring_enter failed")
                continue  # some reads are in flight: keep waiting for them
            submitted += got

    def results(self, size: int) -> Optional[np.ndarray]:
        """Consume the completions of the queued reads: None when every one
        read ``size`` bytes, else the bytes each read (in queue order;
        negative: an errno)."""
        k = self._pending
        head = int(self._words[self._cq_head])
        res = self._ring_slice(self._cqes["res"], head, k, self._cq_mask)
        self._pending = 0
        if (res == size).all():
            self._words[self._cq_head] = (head + k) & 0xFFFFFFFF
            return None
        order = self._ring_slice(self._cqes["user_data"], head, k, self._cq_mask).astype(np.int64)
        self._words[self._cq_head] = (head + k) & 0xFFFFFFFF
        out = np.empty(k, np.int64)
        out[order] = res
        return out

    def close(self) -> None:
        self._sqes = self._cqes = self._words = self._sq_array = None
        for m in (self._sqe_map, self._ring_map):
            try:
                m.close()
            except BufferError:  # a view still exported: the map goes with the process
                pass
        os.close(self.fd)


#: Linux AIO system call numbers (io_setup, io_destroy, io_submit, io_getevents)
#: of the little-endian architectures whose ``struct iocb`` layout is below
_AIO_SYSCALLS = {"x86_64": (206, 207, 209, 208), "amd64": (206, 207, 209, 208),
                 "aarch64": (0, 1, 2, 4), "arm64": (0, 1, 2, 4)}
_IOCB = np.dtype({"names": ["data", "opcode", "fd", "buf", "nbytes", "offset"],
                  "formats": [np.uint64, np.uint16, np.uint32, np.uint64, np.uint64, np.int64],
                  "offsets": [0, 16, 20, 24, 32, 40], "itemsize": 64})
_IO_EVENT = np.dtype({"names": ["data", "res"], "formats": [np.uint64, np.int64], "offsets": [0, 16], "itemsize": 32})


class _Aio:
    """Linux AIO (``io_submit``), where io_uring is refused (Docker's default
    seccomp profile allows AIO, not io_uring). On a file opened without
    ``O_DIRECT`` the kernel reads inside ``io_submit``, in the calling
    thread: one call reads all of the reader's share with the GIL released,
    as the io_uring call does."""

    def __init__(self, syscall: "ctypes._CFuncPtr", entries: int) -> None:
        numbers = _AIO_SYSCALLS.get(platform.machine().lower())
        if numbers is None:
            raise OSError(f"no Linux AIO system call numbers for {platform.machine()}")
        self._setup, self._destroy, self._submit, self._getevents = (ctypes.c_long(n) for n in numbers)
        context = ctypes.c_ulong(0)
        if syscall(self._setup, ctypes.c_long(entries), ctypes.byref(context)) < 0:
            raise OSError(ctypes.get_errno(), "io_setup failed")
        self._context = context
        self.fd = -1  # no descriptor of its own
        self.entries = entries
        self._iocbs = np.zeros(entries, _IOCB)  # opcode 0: IOCB_CMD_PREAD
        self._iocbs["data"] = np.arange(entries, dtype=np.uint64)
        self._pointers = np.uint64(self._iocbs.ctypes.data) + np.arange(entries, dtype=np.uint64) * np.uint64(64)
        self._events = np.zeros(entries, _IO_EVENT)
        self._prepared = (-1, -1, 0)
        self._pending = 0
        self._refused: tuple[int, int] = (0, 0)  # (first entry the kernel refused, its errno)
        self._syscall = syscall

    def prepare(self, fd: int, offsets: np.ndarray, size: int, address: int) -> None:
        k = offsets.shape[0]
        iocbs = self._iocbs[:k]
        held_fd, held_size, held = self._prepared
        if held_fd != fd or held_size != size or held < k:
            iocbs["fd"] = fd
            iocbs["nbytes"] = size
            self._prepared = (fd, size, k)
        iocbs["offset"] = offsets
        iocbs["buf"] = np.arange(k, dtype=np.uint64) * np.uint64(size) + np.uint64(address)
        self._pending = k

    def submit_and_wait(self, syscall: "ctypes._CFuncPtr") -> None:
        k, submitted = self._pending, 0
        pointers, events = self._pointers.ctypes.data, self._events.ctypes.data
        self._refused = (k, 0)
        while submitted < k:
            got = syscall(self._submit, self._context, ctypes.c_long(k - submitted),
                          ctypes.c_void_p(pointers + 8 * submitted))
            if got < 0:
                error = ctypes.get_errno()
                if error in (4, 11):  # EINTR, EAGAIN: try again
                    continue
                self._refused = (submitted, error)  # this entry (a bad descriptor, say) and those after it
                break
            submitted += got
        done = 0
        while done < submitted:
            got = syscall(self._getevents, self._context, ctypes.c_long(submitted - done),
                          ctypes.c_long(submitted - done), ctypes.c_void_p(events + 32 * done), _NULL)
            if got < 0:
                if ctypes.get_errno() == 4:
                    continue
                raise OSError(ctypes.get_errno(), "io_getevents failed")  # the submitted reads are lost: give up AIO
            done += got

    def results(self, size: int) -> Optional[np.ndarray]:
        k, (refused, error) = self._pending, self._refused
        self._pending = 0
        got = self._events[: min(refused, k)]
        if refused == k and (got["res"] == size).all():
            return None
        out = np.full(k, -error if error else -5, np.int64)
        out[got["data"].astype(np.int64)] = got["res"]
        return out

    def close(self) -> None:
        self._syscall(self._destroy, self._context)


def _make_queue(syscall: "ctypes._CFuncPtr", entries: int, backend: Optional[str] = None) -> "_Uring | _Aio":
    """``backend`` (``"uring"`` or ``"aio"``), or by default io_uring, else
    Linux AIO (``OFFRL_SPLIT_READS=aio``: AIO only)."""
    backend = backend or ("aio" if split_setting() == "aio" else None)
    if backend == "uring":
        return _Uring(syscall, entries)
    if backend is None:
        try:
            return _Uring(syscall, entries)
        except OSError:
            pass
    return _Aio(syscall, entries)


class _Reader:
    """The reader thread and its ring: one per process, made on first use."""

    def __init__(self, backend: Optional[str] = None) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        syscall = libc.syscall
        syscall.restype = ctypes.c_long
        self._syscall = syscall
        self._queue = _make_queue(syscall, RING_ENTRIES, backend)
        self._go = threading.Lock()
        self._go.acquire()
        self._done = threading.Lock()
        self._done.acquire()
        #: one batch at a time (another thread finding it busy reads alone)
        self.busy = threading.Lock()
        #: the output of the reads in flight (kept referenced until they completed)
        self._target: Optional[np.ndarray] = None
        self._in_flight = False
        self._error: Optional[BaseException] = None
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="offrl-disk-reader", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        if hasattr(signal, "pthread_sigmask"):
            # signals go to the other threads: this one's system calls are not interrupted
            signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        while True:
            self._go.acquire()
            if self._closed:
                return
            try:
                self._queue.submit_and_wait(self._syscall)
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                self._error = e
            finally:
                self._done.release()

    def _settle(self) -> None:
        """Wait for the reads of an interrupted call, if any."""
        if self._in_flight:
            self._done.acquire()
            self._in_flight = False
            if self._queue._pending:
                self._queue.results(-1)
            self._target, self._error = None, None

    def read(self, fd: int, offsets: np.ndarray, size: int) -> np.ndarray:
        n = offsets.shape[0]
        caller = max(n - self._queue.entries, int(n * CALLER_SHARE))
        out = np.empty(n * size, np.uint8)
        theirs = offsets[caller:]
        self._settle()
        self._queue.prepare(fd, theirs, size, out.ctypes.data + caller * size)
        self._target, self._in_flight = out, True
        self._go.release()
        try:
            mine = b"".join(map(os.pread, repeat(fd, caller), repeat(size, caller), offsets[:caller].tolist()))
        finally:
            # whatever happened here, the reader's reads end before ``out`` may go
            self._done.acquire()
            self._in_flight = False
            error, self._error, self._target = self._error, None, None
            consumed = self._queue._pending > 0
            res = self._queue.results(size) if consumed else None
        if len(mine) != caller * size:
            return np.frombuffer(mine, np.uint8)  # the file ended early: the caller's size check reports it
        out[: caller * size] = np.frombuffer(mine, np.uint8)
        if error is not None or not consumed:
            _disable()  # the ring failed: this process reads in the calling thread from now on
            failed = np.arange(n - caller)
        elif res is None:
            return out
        else:
            failed = np.flatnonzero(res != size)
        for i in failed.tolist():
            # a failed or short read: read again here, where an error or a short file is reported as usual
            again = os.pread(fd, size, int(theirs[i]))
            if len(again) != size:
                return out[: (caller + i) * size]  # shorter than asked: the caller's size check reports it
            out[(caller + i) * size : (caller + i + 1) * size] = np.frombuffer(again, np.uint8)
        if res is not None and (res < 0).any():
            _disable()  # the ring failed reads that os.pread does (an old kernel without IORING_OP_READ)
        return out

    def close(self) -> None:
        self._settle()
        self._closed = True
        self._go.release()
        self._thread.join(timeout=1.0)
        self._queue.close()


_reader: Optional[_Reader] = None
#: None: not tried yet; False: not available in this process
_state: Optional[bool] = None
_state_lock = threading.Lock()


def _disable() -> None:
    global _state
    _state = False


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _spare_cpu() -> bool:
    """Whether this process may count on a CPU of its own for the reader:
    at least two per process on this machine (``torchrun`` says how many
    processes it started here in ``LOCAL_WORLD_SIZE``)."""
    try:
        local = max(int(os.environ.get("LOCAL_WORLD_SIZE", "1")), 1)
    except ValueError:
        local = 1
    return _usable_cpus() >= 2 * local


def _get_reader() -> Optional[_Reader]:
    global _reader, _state
    if _state is False:
        return None
    if _reader is not None:
        return _reader
    with _state_lock:
        if _state is None:
            _state = False
            if (
                sys.platform.startswith("linux") and platform.machine().lower() in _SYSCALL_MACHINES
                and hasattr(os, "pread") and _spare_cpu()
                and split_setting() != "off"
            ):
                try:
                    _reader = _Reader()
                    _state = True
                except (OSError, AttributeError, ValueError, TypeError):
                    _reader = None
    return _reader


def reader_available() -> bool:
    """Whether :func:`read_rows` splits large batches over a reader thread here."""
    return _get_reader() is not None


def read_rows(fd: int, offsets: np.ndarray, size: int, split: bool = True) -> np.ndarray:
    """The ``size`` bytes at each of ``offsets`` (1-D int64, >= 0) of the
    open file ``fd``, concatenated in that order: ``(len(offsets) * size,)``
    uint8, shorter only where the file ended early (the caller checks).
    ``split=False``: all read in the calling thread."""
    n = offsets.shape[0]
    reader = _get_reader() if split and n >= MIN_SPLIT_ROWS else None
    if reader is not None and reader.busy.acquire(blocking=False):
        try:
            return reader.read(fd, offsets, size)
        finally:
            reader.busy.release()
    return np.frombuffer(b"".join(map(os.pread, repeat(fd, n), repeat(size, n), offsets.tolist())), np.uint8)


def _after_fork_in_child() -> None:
    # the parent's ring and thread are not this process's: make a new one on first use
    global _reader, _state
    if _reader is not None and _reader._queue.fd >= 0:
        try:
            os.close(_reader._queue.fd)
        except OSError:
            pass
    _reader, _state = None, None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
