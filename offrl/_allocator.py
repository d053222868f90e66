"""Keep large freed CPU blocks in the process instead of returning them to
the operating system (glibc only).

glibc's ``malloc`` serves a large block (by default from about 128 KiB,
raised on the fly up to 32 MiB) with a fresh ``mmap`` and gives it back on
``free``; it also trims the top of its heap once more than twice that
threshold is free. An update that allocates and frees the same big
activations every step (CQL pushes ``3 n_action_samples`` actions per
state through the critics: two ``(2, 7680, 256)`` float32 hidden layers of
16 MB, their gradients, ...) then pays a page fault for every 4 KiB of
them, every step: measured on a 1-thread AMD EPYC, CQL's default update
spent ~30 ms of system time (17,000 page faults) beside ~58 ms of user
time. Raising both thresholds once lets those blocks be reused from the
heap; the numbers computed are the same, the peak resident memory too
(the blocks are the step's own working set), but memory freed after
training stays with the process until it exits (``malloc_trim(0)``
returns it).

CQL and CalQL, BEAR and BCQ call it when built for the CPU (their updates
pass many sampled actions per state through the networks; docs/COMPATIBILITY.md).
:func:`retain_freed_memory` does this once per process, on Linux with
glibc, unless the user chose the thresholds through glibc's own
``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` variables or opted
out with ``OFFRL_RETAIN_FREED_MEMORY=0``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform

__all__ = ["retain_freed_memory"]

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: blocks below this come from the heap (glibc refuses more than half its
#: heap size, 32 MiB on 64-bit builds, in some versions: then 32 MiB)
_MMAP_THRESHOLD = 256 << 20
_MMAP_THRESHOLD_FALLBACK = 32 << 20
#: free memory at the top of the heap kept before trimming
_TRIM_THRESHOLD = 512 << 20

_STATE: dict = {"done": False, "applied": False}


def retain_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds once (see the module
    docstring); whether they are raised (now or by an earlier call)."""
    if _STATE["done"]:
        return _STATE["applied"]
    _STATE["done"] = True
    if os.environ.get("OFFRL_RETAIN_FREED_MEMORY", "1") == "0":
        return False
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return False  # the user's choice stands
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    if not mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD) and not mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_FALLBACK):
        return False
    _STATE["applied"] = bool(mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))
    return _STATE["applied"]
