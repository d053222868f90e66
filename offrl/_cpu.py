"""What the CPU says about itself: the first processor's entry of
``/proc/cpuinfo`` (Linux). The one place offrl reads it: the bf16 check
(:mod:`offrl.training.precision`) and the choice of float32 product
kernels (:mod:`offrl.models.layers`) ask here, once each, and keep the
answer."""

from __future__ import annotations

import os
import platform
from typing import Dict

__all__ = ["cpuinfo", "cpu_vendor", "cpu_flags"]

CPUINFO = "/proc/cpuinfo"


def cpuinfo(path: str = CPUINFO) -> Dict[str, str]:
    """The first processor's fields, keys lower-cased (``vendor_id``,
    ``flags`` on x86; ``features``, ``cpu implementer`` on ARM); empty
    where the file is not readable (not Linux)."""
    fields: Dict[str, str] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    if fields:  # the end of the first processor's entry
                        break
                    continue
                key, sep, value = line.partition(":")
                if sep:
                    fields.setdefault(key.strip().lower(), value.strip())
    except OSError:
        return {}
    return fields


def cpu_vendor(path: str = CPUINFO) -> str:
    """``GenuineIntel``, ``AuthenticAMD``, ...; ``""`` where not reported.
    Without ``/proc/cpuinfo`` (Windows), the vendor that ends
    ``platform.processor()`` (``Intel64 Family 6 Model 85 Stepping 7,
    GenuineIntel``)."""
    vendor = cpuinfo(path).get("vendor_id", "")
    if not vendor and path == CPUINFO and not os.path.exists(path):
        last = platform.processor().rsplit(",", 1)[-1].strip()
        vendor = last if last in ("GenuineIntel", "AuthenticAMD") else ""
    return vendor


def cpu_flags(path: str = CPUINFO) -> frozenset:
    """The feature flags (x86 ``flags``, ARM ``features``)."""
    info = cpuinfo(path)
    return frozenset((info.get("flags") or info.get("features") or "").split())
