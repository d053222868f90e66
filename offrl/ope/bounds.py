"""Confidence intervals for off-policy estimates from per-episode terms.

Every estimator of :mod:`offrl.ope` reduces the data to one term (or a few
sums) per logged episode; episodes are assumed independent and identically
distributed (logged by the same behaviour policy, each started afresh). From
those terms :func:`confidence_interval` forms a two-sided interval at
``confidence`` by one of four methods:

``"bootstrap"``
    Percentile bootstrap over episodes: ``n_bootstrap`` resamples of ``N``
    episodes with replacement, the estimator recomputed on each (as
    per-episode counts times the terms: a matrix product per chunk of
    resamples), and the ``(1 - confidence) / 2`` and ``(1 + confidence) / 2``
    quantiles of the finite replicates. Assumes independent episodes and
    enough of them for the resampling distribution to mimic the sampling
    distribution; no bound on the terms is needed. Under-covers when the
    terms are heavily skewed (trajectory-wise importance weights: a few
    large weights carry the estimate and are often missing from the data
    altogether) and with few episodes. For self-normalised estimators the
    ratio is recomputed on each resample, so their bias is resampled too,
    but a percentile interval does not correct it.

``"hoeffding"``
    ``mean +- (high - low) sqrt(log(2 / delta) / (2 N))`` with
    ``delta = 1 - confidence``: Hoeffding's inequality (1963) for the mean of
    ``N`` independent terms in ``value_range = (low, high)``, intersected
    with the range. Holds for any ``N`` if the terms are independent and the
    range is a true a-priori bound (not read off the data); conservative
    (over-covers), very much so when the range is wide compared with the
    terms' spread (unclipped importance weights: pass ``clip`` to the
    estimator and widen the range by it).

``"bernstein"``
    Empirical Bernstein (Maurer and Pontil, 2009, theorem 4), one bound per
    side at ``delta / 2``: ``mean +- (sqrt(2 S^2 log(4 / delta) / N) +
    7 (high - low) log(4 / delta) / (3 (N - 1)))`` with ``S^2`` the
    unbiased sample variance, intersected with ``value_range``. Same
    assumptions as Hoeffding (independent terms within a known range,
    ``N >= 2``); tighter than Hoeffding once ``N`` is large and the terms'
    variance is small compared with their range, looser for small ``N``.

``"ttest"``
    Student's t: ``mean +- t_{(1 + confidence) / 2, N - 1} S / sqrt(N)``.
    Exact for normal terms, otherwise valid only as ``N`` grows (central
    limit theorem); no range needed. Under-covers for skewed terms and few
    episodes, like the bootstrap (it cannot see the skew at all). For a
    self-normalised estimator it is given linearised (delta-method) terms,
    which leave out the ratio's bias and the noise of the normaliser's
    plug-in: with few episodes or a low effective sample size it
    under-covers more than for the unnormalised estimators.

Measured coverage (``tests/ope/test_bounds.py``, slow run: 1,000 datasets
of 200 episodes from the tabular MDP of ``tests/ope/tabular_mdp.py`` with
noise-free rewards in [0, 1], exact behaviour probabilities, true value
1.3621, ranges for Hoeffding / Bernstein derived a priori from the largest
ratio and reward; coverage at nominal 90 % / 95 %, mean width at 95 % in
brackets; the standard error of each rate is about 1 %)::

    estimator  bootstrap              hoeffding         bernstein         ttest
    IS         83.4 / 88.3 % (0.85)   100 / 100 (25.2)  100 / 100 (14.8)  84.0 / 88.2 % (0.88)
    WIS        88.5 / 93.8 % (0.25)   100 / 100 (25.2)  100 / 100 (14.8)  87.4 / 93.7 % (0.25)
    PDIS       87.6 / 92.1 % (0.45)   100 / 100 (9.23)  100 / 100 (5.92)  88.2 / 93.0 % (0.46)
    WPDIS      89.6 / 93.9 % (0.21)   100 / 100 (9.23)  100 / 100 (5.92)  89.8 / 94.0 % (0.22)
    DR         88.5 / 93.5 % (0.18)   100 / 100 (40.9)  100 / 100 (22.2)  89.9 / 94.8 % (0.19)
    WDR        88.0 / 93.7 % (0.18)   100 / 100 (40.9)  100 / 100 (22.2)  88.5 / 93.8 % (0.18)

So: the bootstrap and t intervals do not reach nominal coverage for
trajectory-wise IS (83-84 % at 90 %, 88 % at 95 %: its terms are heavily
skewed) and fall 1-3 points short for the others at this data size (they
approach nominal as the number of episodes grows; at 100 episodes, the fast
test, IS is at 81-82 % and PDIS at 85-87 % for a nominal 90 %). Hoeffding
and Bernstein always cover, but are 20-200 times wider: their a-priori
range is set by the largest possible importance weight (``3^4`` here), which
almost no episode comes near; they are the choice only when a guarantee is
needed, with clipped weights to keep the range small.

The concentration bounds (Hoeffding, Bernstein) and the t interval are
intervals for the mean of scalar terms. Self-normalised estimators (WIS,
WPDIS, WDR) are ratios, not means; :mod:`offrl.ope.importance` says which
terms it hands over for them (the linearised terms for the t interval, the
unnormalised estimator's terms for the concentration bounds).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable, Optional, Tuple

import numpy as np

__all__ = [
    "CI_METHODS", "ConfidenceInterval", "confidence_interval", "bootstrap_counts", "bootstrap_replicates",
    "parse_value_range",
]

#: the interval methods of :func:`confidence_interval`
CI_METHODS: Tuple[str, ...] = ("bootstrap", "hoeffding", "bernstein", "ttest")
_NEEDS_RANGE = ("hoeffding", "bernstein")
_CHUNK_ENTRIES = 4_000_000

#: ``statistic(sums, n)``: the estimate from ``(B, K)`` sums of the terms over
#: ``n`` (``(B,)``) episodes, ``(B,)``
Statistic = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclasses.dataclass(frozen=True)
class ConfidenceInterval:
    """A two-sided interval; unpacks as ``lower, upper``.

    Attributes:
        lower, upper: the bounds (NaN when undefined).
        method: one of :data:`CI_METHODS`.
        confidence: nominal coverage.
        n_invalid: bootstrap resamples whose statistic was not finite (they
            are left out of the quantiles); 0 for the other methods.
    """

    lower: float
    upper: float
    method: str
    confidence: float
    n_invalid: int = 0

    def __iter__(self):
        return iter((self.lower, self.upper))


def bootstrap_counts(rng: np.random.Generator, n_episodes: int, n_resamples: int) -> np.ndarray:
    """``(n_resamples, n_episodes)`` float64 counts of each episode in
    resamples of ``n_episodes`` episodes drawn with replacement (an index
    matrix ``rng.integers(0, n_episodes, (n_resamples, n_episodes))``, counted
    row by row), so that a resample's sums are ``counts @ terms``."""
    index = rng.integers(0, n_episodes, size=(n_resamples, n_episodes))
    offsets = (np.arange(n_resamples) * n_episodes)[:, None]
    counts = np.bincount((index + offsets).ravel(), minlength=n_resamples * n_episodes)
    return counts.reshape(n_resamples, n_episodes).astype(np.float64)


def _mean_statistic(sums: np.ndarray, n: np.ndarray) -> np.ndarray:
    return sums[:, 0] / n


def bootstrap_replicates(
    terms: np.ndarray, n_bootstrap: int, seed: Any = 0, statistic: Optional[Statistic] = None
) -> np.ndarray:
    """``(n_bootstrap,)`` values of ``statistic`` on episode resamples of
    ``terms`` (``(E,)`` or ``(E, K)``), in chunks of resamples so that the
    count matrix stays near 32 MB; the default statistic is the mean of the
    (first column of the) terms."""
    terms = _as_matrix(terms)
    e, k = terms.shape
    statistic = _mean_statistic if statistic is None else statistic
    rng = np.random.default_rng(seed)
    out = np.empty(n_bootstrap)
    chunk = max(1, _CHUNK_ENTRIES // max(e, k))
    for start in range(0, n_bootstrap, chunk):
        stop = min(start + chunk, n_bootstrap)
        sums = bootstrap_counts(rng, e, stop - start) @ terms
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            out[start:stop] = statistic(sums, np.full(stop - start, float(e)))
    return out


def _as_matrix(terms: Any) -> np.ndarray:
    terms = np.asarray(terms, dtype=np.float64)
    if terms.ndim == 1:
        terms = terms[:, None]
    if terms.ndim != 2 or terms.shape[0] == 0:
        raise ValueError(f"terms must be a non-empty (n_episodes,) or (n_episodes, k) array, got shape {terms.shape}")
    return terms


def parse_value_range(value_range: Any) -> Tuple[float, float]:
    """``value_range`` as finite floats ``(low, high)`` with ``low < high`` (else a ``TypeError`` / ``ValueError``)."""
    try:
        low, high = (float(v) for v in value_range)
    except (TypeError, ValueError):
        raise TypeError(f"value_range must be a pair of numbers (low, high), got {value_range!r}") from None
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError(f"value_range must be finite numbers with low < high, got {value_range!r}")
    return low, high


def _check_range(terms: np.ndarray, method: str, value_range: Any) -> Tuple[float, float]:
    if value_range is None:
        raise ValueError(
            f"ci={method!r} needs value_range=(low, high): a bound, known before seeing the data, on each "
            "episode's term (for importance sampling: the clip times the range of the discounted return, so pass "
            "clip= too); unbounded terms have no such interval -- use ci='bootstrap' or 'ttest' instead"
        )
    low, high = parse_value_range(value_range)
    outside = (terms < low) | (terms > high) | ~np.isfinite(terms)
    if outside.any():
        i = int(np.argmax(outside))
        raise ValueError(
            f"value_range=({low:g}, {high:g}) does not bound the terms: episode {i}'s term is {terms[i]:.6g}. "
            f"ci={method!r} holds only for terms within a range known in advance: pass a value_range that bounds "
            "every episode's term (for importance weights: clip= times the return's range)"
        )
    return low, high


@functools.lru_cache(maxsize=256)
def _student_quantile(probability: float, dof: int) -> float:
    """Student's t quantile (scipy's, cached: its ppf costs ~0.3 ms a call)."""
    from scipy.stats import t as student_t

    return float(student_t.ppf(probability, dof))


def confidence_interval(
    terms: Any,
    method: str = "bootstrap",
    confidence: float = 0.95,
    value_range: Optional[Tuple[float, float]] = None,
    n_bootstrap: int = 1000,
    seed: Any = 0,
    statistic: Optional[Statistic] = None,
) -> ConfidenceInterval:
    """A two-sided interval for an estimate from independent per-episode terms.

    Args:
        terms: ``(E,)`` per-episode terms whose mean is the estimate, or, for
            the bootstrap with ``statistic``, ``(E, K)`` terms whose sums over
            episodes give the estimate.
        method: ``"bootstrap"``, ``"hoeffding"``, ``"bernstein"`` or
            ``"ttest"`` (assumptions and failure modes in the module
            docstring).
        confidence: nominal coverage in (0, 1).
        value_range: ``(low, high)`` bounding every term, known in advance;
            required by Hoeffding and Bernstein, ignored by the others.
        n_bootstrap, seed: resamples and their ``np.random.default_rng`` seed.
        statistic: bootstrap only: the estimate from ``(B, K)`` sums over
            ``(B,)`` episode counts (default: the mean of the terms).

    Raises:
        ValueError: an unknown method, confidence outside (0, 1), a missing
            or violated ``value_range`` for Hoeffding / Bernstein, fewer than
            2 episodes for Bernstein / t, or a ``statistic`` with a method
            other than the bootstrap.
    """
    if method not in CI_METHODS:
        raise ValueError(f"ci must be one of {list(CI_METHODS)}, got {method!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if method == "bootstrap":
        if isinstance(n_bootstrap, bool) or not isinstance(n_bootstrap, (int, np.integer)) or n_bootstrap <= 0:
            raise ValueError(f"n_bootstrap must be a positive int, got {n_bootstrap!r}")
        replicates = bootstrap_replicates(terms, int(n_bootstrap), seed, statistic)
        finite = replicates[np.isfinite(replicates)]
        lower = upper = float("nan")
        if finite.size:
            tail = (1.0 - confidence) / 2.0
            lower, upper = (float(x) for x in np.quantile(finite, [tail, 1.0 - tail]))
        return ConfidenceInterval(lower, upper, method, float(confidence), int(replicates.size - finite.size))
    if statistic is not None:
        raise ValueError(f"statistic is for ci='bootstrap' only; ci={method!r} takes (n_episodes,) terms whose mean is the estimate")
    matrix = _as_matrix(terms)
    if matrix.shape[1] != 1:
        raise ValueError(
            f"ci={method!r} takes (n_episodes,) terms whose mean is the estimate, got shape {matrix.shape}"
        )
    x = matrix[:, 0]
    n = x.shape[0]
    delta = 1.0 - confidence
    if method in _NEEDS_RANGE:
        low, high = _check_range(x, method, value_range)
    elif not np.isfinite(x).all():
        nan = float("nan")
        return ConfidenceInterval(nan, nan, method, float(confidence))
    if method != "hoeffding" and n < 2:
        raise ValueError(f"ci={method!r} needs at least 2 episodes (a sample variance), got {n}")
    mean = float(x.mean())
    if method == "hoeffding":
        half = (high - low) * math.sqrt(math.log(2.0 / delta) / (2.0 * n))
    elif method == "bernstein":
        variance = float(x.var(ddof=1))
        log_term = math.log(4.0 / delta)
        half = math.sqrt(2.0 * variance * log_term / n) + 7.0 * (high - low) * log_term / (3.0 * (n - 1))
    else:
        half = _student_quantile(0.5 + confidence / 2.0, n - 1) * float(x.std(ddof=1)) / math.sqrt(n)
    lower, upper = mean - half, mean + half
    if method in _NEEDS_RANGE:  # the mean lies in the range: intersecting keeps the guarantee
        lower, upper = max(lower, low), min(upper, high)
    return ConfidenceInterval(lower, upper, method, float(confidence))
