"""Checks of the options every off-policy estimator takes (the discount,
clipping, the interval and its confidence, bootstrap and batch sizes),
made before any work is done, and the discount a target implies."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..algos.base import QLearningAlgoBase
from ..metrics.sequence import SequencePolicy
from .bounds import CI_METHODS

__all__ = ["check_positive_ints", "check_options", "check_ci", "resolve_gamma"]


def check_positive_ints(**values: Any) -> None:
    """``ValueError`` naming the first of ``values`` (name=value) that is not an int > 0 (bools refused)."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


def check_options(gamma: float, clip: Optional[float], confidence: float, n_bootstrap: int,
                  min_effective_sample_size: float, epsilon: float, bandwidth: float, batch_size: int,
                  n_action_samples: int) -> None:
    """``ValueError`` naming the first estimator option out of its range (before any work is done)."""
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma!r}")
    if clip is not None and not (np.isfinite(clip) and clip > 0):
        raise ValueError(f"clip must be a finite number > 0 or None, got {clip!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    check_positive_ints(n_bootstrap=n_bootstrap, batch_size=batch_size, n_action_samples=n_action_samples)
    if not min_effective_sample_size >= 0:
        raise ValueError(f"min_effective_sample_size must be >= 0, got {min_effective_sample_size!r}")
    if not 0.0 <= epsilon <= 1.0:
        raise ValueError(f"epsilon must be in [0, 1], got {epsilon!r}")
    if not (np.isfinite(bandwidth) and bandwidth > 0):
        raise ValueError(f"bandwidth must be a finite number > 0, got {bandwidth!r}")


def check_ci(ci: str, value_range: Any) -> None:
    """Fail before any work on an unknown ``ci`` or a missing bound."""
    if ci not in CI_METHODS:
        raise ValueError(f"ci must be one of {list(CI_METHODS)}, got {ci!r}")
    if ci in ("hoeffding", "bernstein") and value_range is None:
        raise ValueError(
            f"ci={ci!r} needs value_range=(low, high): a bound, known in advance, on each episode's term "
            "(w_T G for IS/WIS: with clip=c and discounted returns in [G_min, G_max], "
            "(c * min(0, G_min), c * max(0, G_max))); for unbounded rewards use ci='bootstrap' or 'ttest'"
        )


def resolve_gamma(gamma: Optional[float], target: Any) -> float:
    """The discount: ``gamma`` if given, else the target algorithm's (or sequence policy's), else 0.99."""
    if gamma is not None:
        return float(gamma)
    if isinstance(target, (QLearningAlgoBase, SequencePolicy)):
        return float(target.gamma)
    return 0.99
