"""``AdamWFactory``'s earlier module path: the class is defined in
:mod:`offrl.optimizers.optimizers`, as in d3rlpy."""

from __future__ import annotations

from .optimizers import AdamWFactory

__all__ = ["AdamWFactory"]
