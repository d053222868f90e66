"""Optional dependencies, imported where first needed."""

from __future__ import annotations

import contextlib
from typing import Iterator

__all__ = ["optional_dependency"]


@contextlib.contextmanager
def optional_dependency(missing: str) -> Iterator[None]:
    """Around the import of an optional package: when it is not installed,
    an ``ImportError`` whose message is ``missing`` (what needs it and the
    ``pip install`` that provides it) instead of the bare one."""
    try:
        yield
    except ImportError:
        raise ImportError(missing) from None
