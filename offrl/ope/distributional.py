"""Distributional off-policy evaluation: the distribution of the discounted
return ``G = sum_t gamma^t r_t`` of a target policy, from episodes logged by
another policy.

Each logged episode ``n`` contributes its return ``G_n`` with its
trajectory importance weight ``w_n = prod_t pi(a_t | s_t) / mu(a_t | s_t)``
(clipped at ``clip`` if given). The cumulative distribution function is a
weighted empirical CDF (Chandak et al., 2021, "Universal Off-Policy
Evaluation"):

``"is"``
    ``F(x) = 1/N sum_n w_n 1{G_n <= x}``: unbiased for every ``x`` (exact
    ``mu``, unclipped weights), but not a distribution function: its total
    mass ``mean(w)`` is not 1 and it can exceed 1. It is made one by
    cutting it at 1 (``min(F, 1)``; it is already non-decreasing, the
    weights being >= 0) and putting any missing mass (when ``mean(w) < 1``)
    on the largest logged return, so ``F(max G_n) = 1``. Both steps move
    mass up the return axis only where the raw estimate is impossible, but
    they make the statistics below biased (the mean is *not* the IS value
    estimate ``1/N sum w_n G_n``).
``"wis"``
    ``F(x) = sum_n w_n 1{G_n <= x} / sum_n w_n``: a proper distribution
    (the weighted empirical distribution of the returns), biased but
    consistent, usually far less variable.

Mean, variance, quantiles, lower quartile and CVaR (the mean of the lowest
``alpha`` fraction of returns, ``1/alpha int_0^alpha F^{-1}(u) du``) are
those of the resulting discrete distribution. Intervals are percentile
bootstrap intervals over episodes (resampled with
:func:`offrl.ope.bounds.bootstrap_counts`, every statistic recomputed on
each resample from the sorted returns with a few array operations per chunk
of resamples); they assume independent episodes and, like every
trajectory-wise importance-sampling interval, under-cover when the weights
are heavy-tailed (a few large weights carry the estimate). The tail
statistics (CVaR at small ``alpha``, low quantiles) rest on the few episodes
in the tail and are the least reliable.

Measured coverage of the intervals (1,000 datasets of 400 episodes from the
noise-free tabular MDP of ``tests/ope/tabular_mdp.py``, exact behaviour
probabilities, CVaR at 0.2, against the exact return distribution
enumerated path by path; nominal 90 % / 95 %, standard error about 1 %)::

    estimator  mean           variance       CVaR@0.2       lower quartile
    IS         82.8 / 88.0 %  83.0 / 88.9 %  85.7 / 91.2 %  84.5 / 90.9 %
    WIS        87.4 / 92.2 %  86.9 / 91.7 %  88.9 / 93.1 %  88.0 / 92.8 %

None reaches nominal coverage: the IS intervals fall 5-7 points short (the
repaired CDF's bias and the weights' skew), the WIS ones 1-3 points short.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Optional, Tuple

import numpy as np

from ._logged import logged_data
from ._policies import DEFAULT_BANDWIDTH, DEFAULT_EPSILON, check_built
from .bounds import bootstrap_counts
from .importance import build_padded, kish_effective_sample_size, prepare, resolve_behaviour
from .options import check_options, resolve_gamma

__all__ = ["ReturnDistribution", "estimate_return_distribution"]

_ESTIMATORS = ("is", "wis")
_STATISTICS = ("mean", "variance", "cvar", "lower_quartile")
_CHUNK_ENTRIES = 2_000_000
_TIE = 1e-12  # F_k >= q up to rounding of the cumulative sums


def _check_alpha(alpha: Any, name: str = "alpha") -> float:
    try:
        value = float(alpha)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number in (0, 1), got {alpha!r}") from None
    if not 0.0 < value < 1.0:
        raise ValueError(f"{name} must be in (0, 1) (the lower-tail fraction of CVaR), got {alpha!r}")
    return value


def _cdf_rows(counts: np.ndarray, weights: np.ndarray, estimator: str) -> np.ndarray:
    """``(B, E)`` CDF at each sorted return for ``(B, E)`` episode counts
    (returns sorted ascending, ``weights`` in that order), made a proper
    distribution function as the module docstring says."""
    mass = np.cumsum(counts * weights, axis=1)
    n = counts.sum(axis=1, keepdims=True)
    if estimator == "wis":
        total = mass[:, -1:]
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(total > 0, mass / np.where(total > 0, total, 1.0), np.nan)
    cdf = np.minimum(mass / n, 1.0)
    # missing mass on the largest return in the resample (the last column with a count)
    e = counts.shape[1]
    last = e - 1 - np.argmax(counts[:, ::-1] > 0, axis=1)
    cdf[np.arange(e)[None, :] >= last[:, None]] = 1.0
    return cdf


def _row_statistics(cdf: np.ndarray, returns: np.ndarray, alpha: float) -> Dict[str, np.ndarray]:
    """Mean, variance, CVaR at ``alpha`` and lower quartile of the discrete
    distributions with ``(B, E)`` CDF values at the sorted ``returns``."""
    previous = np.concatenate([np.zeros((cdf.shape[0], 1)), cdf[:, :-1]], axis=1)
    p = cdf - previous
    mean = p @ returns
    variance = np.maximum(p @ returns**2 - mean**2, 0.0)
    tail = np.minimum(cdf, alpha) - np.minimum(previous, alpha)
    cvar = (tail @ returns) / alpha
    quartile = returns[np.argmax(cdf >= 0.25 - _TIE, axis=1)]
    undefined = np.isnan(cdf[:, -1])
    for values in (mean, variance, cvar):
        values[undefined] = np.nan
    quartile = np.where(undefined, np.nan, quartile)
    return {"mean": mean, "variance": variance, "cvar": cvar, "lower_quartile": quartile}


@dataclasses.dataclass(frozen=True)
class ReturnDistribution:
    """The estimated distribution of the target policy's discounted return.

    A discrete distribution with atoms at the logged episodes' returns
    (``support``, ascending, with repeats) and ``probabilities`` summing to 1.

    Attributes:
        estimator: ``"IS"`` or ``"WIS"``.
        support: ``(E,)`` sorted logged returns.
        probabilities: ``(E,)`` mass of each (NaN if every weight is 0).
        alpha: the CVaR level of :attr:`cvar_alpha` and its interval.
        confidence, n_bootstrap: the bootstrap intervals.
        intervals: ``{"mean", "variance", "cvar", "lower_quartile"}`` ->
            ``(lower, upper)`` percentile-bootstrap interval.
        n_episodes, gamma: the data and the discount.
        effective_sample_size: Kish's ``(sum w)^2 / sum w^2``.
        total_weight: ``mean(w)``, the raw IS CDF's total mass (1 in
            expectation for exact behaviour probabilities and no clipping;
            far from 1 means the IS CDF was heavily repaired).
        behaviour, target: where ``mu`` came from and what was evaluated.
    """

    estimator: str
    support: np.ndarray = dataclasses.field(repr=False, compare=False)
    probabilities: np.ndarray = dataclasses.field(repr=False, compare=False)
    alpha: float
    confidence: float
    n_bootstrap: int
    intervals: Dict[str, Tuple[float, float]]
    n_episodes: int
    gamma: float
    effective_sample_size: float
    total_weight: float
    behaviour: str
    target: str

    @property
    def _cumulative(self) -> np.ndarray:
        """The CDF at each atom (exactly 1 at the last, not 1 - rounding)."""
        cumulative = np.cumsum(self.probabilities)
        if np.isfinite(cumulative[-1]):
            cumulative[-1] = 1.0
        return cumulative

    def cdf(self, x: Any) -> Any:
        """``P(G <= x)`` for a number or an array of numbers (same shape)."""
        x = np.asarray(x, dtype=np.float64)
        index = np.searchsorted(self.support, x, side="right")
        cumulative = np.concatenate([[0.0], np.minimum(self._cumulative, 1.0)])
        out = cumulative[index]
        return float(out) if out.ndim == 0 else out

    def quantile(self, q: Any) -> Any:
        """The smallest logged return ``g`` with ``P(G <= g) >= q``, for
        ``q`` in ``[0, 1]`` (a number or an array)."""
        q = np.asarray(q, dtype=np.float64)
        if not ((q >= 0.0) & (q <= 1.0)).all():
            raise ValueError(f"q must be in [0, 1], got {q.tolist()!r}")
        cumulative = self._cumulative
        index = np.minimum(np.searchsorted(cumulative, q - _TIE, side="left"), cumulative.shape[0] - 1)
        out = self.support[index]
        return float(out) if out.ndim == 0 else out

    def _statistics(self, alpha: float) -> Dict[str, float]:
        cdf = np.minimum(self._cumulative, 1.0)[None, :]
        return {k: float(v[0]) for k, v in _row_statistics(cdf, self.support, alpha).items()}

    @property
    def mean(self) -> float:
        """The distribution's mean (for IS not the IS value estimate: see the module docstring)."""
        return float(self.probabilities @ self.support)

    @property
    def variance(self) -> float:
        return self._statistics(0.5)["variance"]

    @property
    def std(self) -> float:
        return float(np.sqrt(self.variance))

    @property
    def lower_quartile(self) -> float:
        """The 25 % quantile."""
        return self._statistics(0.5)["lower_quartile"]

    def cvar(self, alpha: Optional[float] = None) -> float:
        """Conditional value at risk: the mean of the lowest ``alpha``
        fraction of returns (default: :attr:`alpha`)."""
        level = self.alpha if alpha is None else _check_alpha(alpha)
        return self._statistics(level)["cvar"]

    @property
    def cvar_alpha(self) -> float:
        """CVaR at :attr:`alpha`."""
        return self.cvar()

    def __repr__(self) -> str:
        pct = f"{self.confidence:.0%}"
        parts = []
        for name, value in (("mean", self.mean), ("variance", self.variance), ("cvar", self.cvar()),
                            ("lower_quartile", self.lower_quartile)):
            low, high = self.intervals[name]
            label = f"cvar@{self.alpha:g}" if name == "cvar" else name
            parts.append(f"{label} {value:.4g} [{low:.4g}, {high:.4g}]")
        return (f"ReturnDistribution({self.estimator}, {self.n_episodes} episodes, ESS {self.effective_sample_size:.1f}, "
                f"{pct} intervals: " + ", ".join(parts) + ")")


def _bootstrap(
    returns: np.ndarray, weights: np.ndarray, estimator: str, alpha: float, confidence: float, n_bootstrap: int,
    seed: Any,
) -> Dict[str, Tuple[float, float]]:
    """Percentile intervals of the statistics over episode resamples
    (``returns`` sorted, ``weights`` in that order)."""
    e = returns.shape[0]
    rng = np.random.default_rng(seed)
    replicates = {k: np.empty(n_bootstrap) for k in _STATISTICS}
    chunk = max(1, _CHUNK_ENTRIES // e)
    for start in range(0, n_bootstrap, chunk):
        stop = min(start + chunk, n_bootstrap)
        with np.errstate(invalid="ignore", divide="ignore"):
            stats = _row_statistics(_cdf_rows(bootstrap_counts(rng, e, stop - start), weights, estimator), returns, alpha)
        for k in _STATISTICS:
            replicates[k][start:stop] = stats[k]
    tail = (1.0 - confidence) / 2.0
    out = {}
    for k, values in replicates.items():
        finite = values[np.isfinite(values)]
        out[k] = (float(np.quantile(finite, tail)), float(np.quantile(finite, 1.0 - tail))) if finite.size else (
            float("nan"), float("nan"))
    return out


def estimate_return_distribution(
    target: Any,
    dataset: Any,
    estimator: str = "wis",
    *,
    gamma: Optional[float] = None,
    behaviour_probabilities: Any = None,
    behaviour_policy: Any = None,
    clip: Optional[float] = None,
    alpha: float = 0.05,
    confidence: float = 0.95,
    n_bootstrap: int = 1000,
    seed: Any = 0,
    greedy: bool = False,
    epsilon: float = DEFAULT_EPSILON,
    bandwidth: float = DEFAULT_BANDWIDTH,
    batch_size: int = 4096,
) -> ReturnDistribution:
    """The distribution of ``target``'s discounted return from ``dataset``.

    Args:
        target, dataset, gamma, behaviour_probabilities, behaviour_policy,
        greedy, epsilon, bandwidth, batch_size: as for
            :func:`offrl.ope.estimate_policy_value`.
        estimator: ``"is"`` (unbiased CDF, repaired to a distribution) or
            ``"wis"`` (self-normalised); see the module docstring.
        clip: upper bound of the trajectory weights (None: unclipped).
        alpha: CVaR level in (0, 1): the lower-tail fraction whose mean
            :meth:`ReturnDistribution.cvar` gives and whose interval is
            bootstrapped.
        confidence, n_bootstrap, seed: the percentile-bootstrap intervals.

    Raises:
        ValueError: ``alpha`` or ``confidence`` outside (0, 1), an unknown
            estimator, and the input errors of ``estimate_policy_value``.
    """
    if estimator not in _ESTIMATORS:
        raise ValueError(f"estimator must be one of {list(_ESTIMATORS)}, got {estimator!r}")
    alpha = _check_alpha(alpha)
    check_built(target, "target policy")
    gamma = resolve_gamma(gamma, target)
    check_options(gamma, clip, confidence, n_bootstrap, 0.0, epsilon, bandwidth, batch_size, 1)
    data = logged_data(dataset)
    mu, behaviour = resolve_behaviour(data, behaviour_probabilities, behaviour_policy, seed)
    prepared = prepare(
        target, data, mu, behaviour, q_model=None, gamma=gamma, greedy=greedy, epsilon=epsilon,
        bandwidth=bandwidth, n_action_samples=1, seed=seed, batch_size=batch_size,
    )
    padded, _, _ = build_padded("is", prepared.ratios, data.rewards, data.lengths, gamma, clip=clip)
    weights = padded.weights[:, -1]
    if not np.isfinite(weights).all():
        raise ValueError("some trajectory importance weights overflowed to infinity: pass clip= to bound them")
    returns = padded.rewards @ padded.discounts
    order = np.argsort(returns, kind="stable")
    returns, weights = returns[order], weights[order]
    cdf = _cdf_rows(np.ones((1, returns.shape[0])), weights, estimator)[0]
    probabilities = np.diff(np.concatenate([[0.0], cdf]))
    intervals = _bootstrap(returns, weights, estimator, alpha, confidence, int(n_bootstrap), seed)
    return ReturnDistribution(
        estimator.upper(), returns, probabilities, alpha, float(confidence), int(n_bootstrap), intervals,
        data.n_episodes, gamma, float(kish_effective_sample_size(weights)), float(weights.mean()), prepared.behaviour,
        prepared.target,
    )
