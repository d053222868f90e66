"""State-action marginal importance sampling and doubly robust estimates,
with the density ratio learned from data by DualDICE.

Instead of products of per-step ratios (whose variance grows with the
horizon, see :mod:`offrl.ope.importance`), the marginal estimators reweight
each logged step by one ratio of state-action distributions

    w(s, a) = d_pi(s, a) / d_D(s, a)

where ``d_pi(s, a) = (1 - gamma) sum_t gamma^t P_pi(s_t = s, a_t = a)`` is
the target policy's discounted occupancy from the dataset's initial states
and ``d_D`` the distribution of the logged steps (every step of every
episode equally likely: what a uniform mini-batch draws). With ``N`` logged
steps in ``E`` episodes, ``V(s) = E_{a ~ pi} Q(s, a)`` and ``V(s') = 0``
after an episode's last step:

    MIS   1 / ((1 - gamma) N) sum_i w_i r_i
    WMIS  (sum_i w_i r_i / sum_i w_i) * (1 / E) sum_n sum_{t < T_n} gamma^t
    MDR   1/E sum_n V(s_0^n) + 1 / ((1 - gamma) N) sum_i w_i (r_i + gamma V(s'_i) - Q(s_i, a_i))

MIS is consistent given the exact ratio (``E_D[w r] = E_{d_pi}[r]``; exact
on the tabular MDP of the tests when ``d_D`` is the data's own step
distribution and rewards are noise-free). WMIS
normalises the weights to mean 1 and rescales by the data's mean
discounted episode length, i.e. it assumes the target's discounted
occupancy has the logged one's total mass, which holds exactly when the
length of an episode does not depend on the policy (a fixed horizon, or a
termination probability that does not depend on the actions); it trades
that bias for less variance. MDR (the state-action marginal doubly robust
estimator of Kallus and Uehara, 2020, "Double Reinforcement Learning for
Efficient Off-Policy Evaluation in Markov Decision Processes") is
consistent when either the ratio or the model ``Q`` is exact.

As in :mod:`offrl.ope.importance`, an episode's last step leads to an
absorbing state with value 0: exact for terminal steps; an episode cut
short (timeout) is evaluated as if it ended there.

**The ratio** is learned by DualDICE in :mod:`offrl.ope.density_ratio`
(:func:`fit_density_ratio`, :class:`DensityRatioConfig`, importable from
here too).

**Intervals** come from :func:`offrl.ope.bounds.confidence_interval` on
per-episode terms whose mean is the estimate (MIS:
``E / ((1 - gamma) N) sum_t w_t r_t``; MDR: ``V(s_0)`` plus the episode's
share of the correction; the steps-per-episode factor ``E / N`` is held at
the data's). WMIS's bootstrap recomputes the ratio exactly on each resample;
its Student's t interval uses the delta-method terms of the ratio, and its
Hoeffding / Bernstein bounds are MIS's (the unnormalised counterpart, as in
:mod:`offrl.ope.importance`). The ratio model is held fixed across
resamples, so no interval includes its own estimation error: with a poorly
trained ratio the interval is too narrow.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional, Tuple

import numpy as np

from ..training.device import DeviceArg, parse_device
from . import importance, options
from ._logged import logged_data
from ._policies import (
    DEFAULT_BANDWIDTH,
    DEFAULT_EPSILON,
    check_built,
    policy_probabilities,
)
from .bounds import CI_METHODS, confidence_interval
from .importance import OPEResult

from .density_ratio import (DensityRatioConfig, DensityRatioModel, array_observations, dualdice_loss, fit_density_ratio,
                            fit_ratio_model, ratio_values, target_policy_actions)

__all__ = [
    "MARGINAL_ESTIMATORS",
    "DensityRatioConfig",
    "DensityRatioModel",
    "dualdice_loss",
    "fit_density_ratio",
    "estimate_marginal_value",
]

#: estimator name -> label
MARGINAL_ESTIMATORS = {"mis": "MIS", "wmis": "WMIS", "mdr": "MDR"}

# ------------------------------------------------------------------ estimates
def _episode_sums(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Per-episode sums of a per-step array, ``(E,)``."""
    return np.add.reduceat(values, np.cumsum(lengths) - lengths)


@dataclasses.dataclass(frozen=True)
class MarginalTerms:
    """Per-episode terms of one marginal estimate.

    ``terms``: ``(E,)`` whose mean is the estimate (MIS, MDR; WMIS: its
    delta-method terms); ``ratio_terms``: ``(E, 3)`` WMIS's sums
    ``(sum_t w r, sum_t w, sum_t gamma^t)`` (None for the others);
    ``bound_terms``: the terms Hoeffding / Bernstein bound (WMIS: MIS's)."""

    value: float
    terms: np.ndarray
    ratio_terms: Optional[np.ndarray]
    bound_terms: np.ndarray


def marginal_terms(kind: str, ratios: np.ndarray, rewards: np.ndarray, lengths: np.ndarray, gamma: float, *,
                   q: Optional[np.ndarray] = None, v: Optional[np.ndarray] = None) -> MarginalTerms:
    """The estimate and its per-episode terms from flat, episode-ordered
    ``(N,)`` ratios (already clipped at 0), rewards, and for MDR the model's
    ``Q(s_t, a_t)`` and ``V(s_t)`` (module docstring)."""
    n, e = rewards.shape[0], lengths.shape[0]
    scale = e / ((1.0 - gamma) * n)
    mis_terms = scale * _episode_sums(ratios * rewards, lengths)
    if kind == "mis":
        return MarginalTerms(float(mis_terms.mean()), mis_terms, None, mis_terms)
    if kind == "mdr":
        if q is None or v is None:
            raise ValueError("MDR needs q_model: an FQE, an object with predict_value(x, action), or a callable")
        starts = np.cumsum(lengths) - lengths
        v_next = np.zeros(n)
        v_next[:-1] = v[1:]
        v_next[np.cumsum(lengths) - 1] = 0.0
        terms = v[starts] + scale * _episode_sums(ratios * (rewards + gamma * v_next - q), lengths)
        return MarginalTerms(float(terms.mean()), terms, None, terms)
    if kind != "wmis":
        raise ValueError(f"estimator must be one of {list(MARGINAL_ESTIMATORS)}, got {kind!r}")
    steps = np.arange(n) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    sums = np.stack([
        _episode_sums(ratios * rewards, lengths), _episode_sums(ratios, lengths),
        _episode_sums(gamma ** steps.astype(np.float64), lengths),
    ], axis=1)
    a, b, c = sums.mean(axis=0)
    if b == 0:
        value = math.nan
        terms = np.full(e, math.nan)
    else:
        m = a / b
        value = m * c
        terms = value + (c / b) * (sums[:, 0] - m * sums[:, 1]) + m * (sums[:, 2] - c)
    return MarginalTerms(float(value), terms, sums, mis_terms)


def _wmis_statistic(sums: np.ndarray, n: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(sums[:, 1] != 0, sums[:, 0] / np.where(sums[:, 1] != 0, sums[:, 1], 1.0), np.nan) * sums[:, 2] / n


def _interval(kind: str, parts: MarginalTerms, *, ci: str, confidence: float, value_range: Any, n_bootstrap: int,
              seed: Any) -> Any:
    if ci == "bootstrap" and kind == "wmis":
        return confidence_interval(parts.ratio_terms, "bootstrap", confidence, n_bootstrap=n_bootstrap, seed=seed,
                                   statistic=_wmis_statistic)
    terms = parts.bound_terms if ci in ("hoeffding", "bernstein") else parts.terms
    return confidence_interval(terms, ci, confidence, value_range=value_range, n_bootstrap=n_bootstrap, seed=seed)


def estimate_marginal_value(
    target: Any,
    dataset: Any,
    estimator: str = "mis",
    q_model: Any = None,
    *,
    ratio_model: Any = None,
    gamma: Optional[float] = None,
    clip: Optional[float] = None,
    behaviour_probabilities: Any = None,
    behaviour_policy: Any = None,
    confidence: float = 0.95,
    n_bootstrap: int = 1000,
    seed: Any = 0,
    ci: str = "bootstrap",
    value_range: Optional[Tuple[float, float]] = None,
    min_effective_sample_size: float = 10.0,
    greedy: bool = False,
    epsilon: float = DEFAULT_EPSILON,
    bandwidth: float = DEFAULT_BANDWIDTH,
    n_action_samples: int = 10,
    batch_size: int = 4096,
    device: DeviceArg = None,
) -> OPEResult:
    """Value of ``target`` on ``dataset`` by ``"mis"``, ``"wmis"`` or ``"mdr"``
    (module docstring); what :func:`~offrl.ope.estimate_policy_value` calls
    for those names.

    Args:
        ratio_model: where ``w(s, a)`` comes from: None (a DualDICE model
            trained here with :class:`DensityRatioConfig`'s defaults), a
            :class:`DensityRatioConfig` (trained here with it), a fitted
            :class:`DensityRatioModel` (of this target and data), or a
            callable ``(observations, actions) -> (N,)`` ratios.
        q_model: MDR's model (as for DR in :mod:`offrl.ope.importance`).
        clip: upper bound of the ratios (None: unclipped); clipping biases
            the estimate and is counted in ``n_clipped``.
        behaviour_probabilities, behaviour_policy: must be None: DualDICE
            learns the ratio without them (a ValueError says so).
        ci, value_range: the interval method of
            :func:`offrl.ope.bounds.confidence_interval` and, for
            ``"hoeffding"`` / ``"bernstein"``, the range of the per-episode terms.
        device: where a ratio model trained here lives.
        The others as for :func:`~offrl.ope.estimate_policy_value`; no
        behaviour probabilities are needed.

    Returns:
        An :class:`~offrl.ope.OPEResult`: ``behaviour`` says the ratio's
        source, ``n_clipped`` counts negative ratios set to 0 and ratios clipped at ``clip``,
        ``effective_sample_size`` is Kish's over the episodes' summed
        ratios, ``episode_weights`` the per-episode mean ratio.
    """
    if estimator not in MARGINAL_ESTIMATORS:
        raise ValueError(f"estimator must be one of {list(MARGINAL_ESTIMATORS)}, got {estimator!r}")
    label = MARGINAL_ESTIMATORS[estimator]
    check_built(target, "target policy")
    gamma = options.resolve_gamma(gamma, target)
    if not 0.0 <= gamma < 1.0:
        raise ValueError(f"gamma must be in [0, 1) for the marginal estimators (they divide by 1 - gamma), got {gamma!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if ci not in CI_METHODS:
        raise ValueError(f"ci must be one of {list(CI_METHODS)}, got {ci!r}")
    options.check_positive_ints(n_bootstrap=n_bootstrap, batch_size=batch_size, n_action_samples=n_action_samples)
    if behaviour_probabilities is not None or behaviour_policy is not None:
        raise ValueError(
            f"{label} does not use behaviour_probabilities / behaviour_policy (the density ratio is learned from "
            "the data by DualDICE): leave them unset"
        )
    if clip is not None and not (math.isfinite(clip) and clip > 0):
        raise ValueError(f"clip must be a finite number > 0 or None, got {clip!r}")
    if estimator == "mdr" and q_model is None:
        raise ValueError("MDR needs q_model: an FQE, an object with predict_value(x, action), or a callable")
    data = logged_data(dataset)
    array_observations(data)
    probabilities = None
    if data.discrete or estimator == "mdr":
        probabilities = policy_probabilities(target, data, greedy=greedy, epsilon=epsilon, bandwidth=bandwidth,
                                             batch_size=batch_size)
    source = "given ratio callable"
    trained_steps = 0
    if ratio_model is None or isinstance(ratio_model, DensityRatioConfig):
        config = DensityRatioConfig() if ratio_model is None else ratio_model
        if data.discrete:
            actions = probabilities.all_actions
        else:
            actions = target_policy_actions(target, data, discrete=False, greedy=greedy, epsilon=epsilon,
                                            bandwidth=bandwidth, n_samples=config.n_action_samples, seed=seed,
                                            batch_size=batch_size)
        ratio_model = fit_ratio_model(target, data, gamma, config, seed, parse_device(device), greedy, epsilon,
                                      bandwidth, batch_size, target_actions=actions)
        trained_steps = config.n_steps
    if isinstance(ratio_model, DensityRatioModel):
        source = f"DualDICE ratio model ({ratio_model.config.n_steps} updates)"
        trained_steps = ratio_model.config.n_steps
        if not math.isclose(ratio_model.gamma, gamma):
            raise ValueError(f"ratio_model was trained with gamma={ratio_model.gamma:g}, the estimate uses gamma={gamma:g}")
    raw = ratio_values(ratio_model, data, trained_steps)
    negative = raw < 0
    ratios = np.where(negative, 0.0, raw)
    clipped = ratios > clip if clip is not None else np.zeros(data.n_steps, dtype=bool)
    if clip is not None:
        ratios = np.minimum(ratios, clip)
    q = v = None
    if estimator == "mdr":
        q, v = importance.model_terms(
            q_model, target, data, probabilities, greedy=greedy, bandwidth=bandwidth,
            n_action_samples=n_action_samples, seed=seed, batch_size=batch_size,
        )
    parts = marginal_terms(estimator, ratios, data.rewards, data.lengths, gamma, q=q, v=v)
    interval = _interval(estimator, parts, ci=ci, confidence=confidence, value_range=value_range,
                         n_bootstrap=n_bootstrap, seed=seed)
    episode_sums = _episode_sums(ratios, data.lengths)
    ess = float(importance.kish_effective_sample_size(episode_sums))
    warnings = []
    if not math.isfinite(parts.value):
        warnings.append("the estimate is undefined: every ratio is 0")
    if ess < min_effective_sample_size:
        warnings.append(
            f"effective sample size {ess:.1f} is below {min_effective_sample_size:g} (of {data.n_episodes} episodes): "
            "a few episodes carry the estimate"
        )
    if clipped.mean() > 0.1:
        warnings.append(
            f"{int(clipped.sum())} of {data.n_steps} ratios ({clipped.mean():.0%}) were clipped at {clip:g}: "
            "the estimate is biased"
        )
    if negative.mean() > 0.1:
        warnings.append(
            f"{int(negative.sum())} of {data.n_steps} ratios ({negative.mean():.0%}) were negative and set to 0: "
            "the ratio model has not converged (train longer or lower the learning rates)"
        )
    extra = {}
    if "ci" in OPEResult.__dataclass_fields__:
        extra["ci"] = ci
        extra["value_range"] = None if ci not in ("hoeffding", "bernstein") else tuple(float(x) for x in value_range)
    return OPEResult(
        label, parts.value, float(interval.lower), float(interval.upper), float(confidence),
        int(n_bootstrap) if ci == "bootstrap" else 0, data.n_episodes, ess, int((negative | clipped).sum()),
        data.n_steps, None if clip is None else float(clip),
        float(ratios.max()), gamma, f"not used: {source}",
        probabilities.description if probabilities is not None else f"actions drawn from {type(target).__name__}",
        tuple(warnings), episode_sums / data.lengths, **extra,
    )


for _name in MARGINAL_ESTIMATORS:
    importance.EXTERNAL_ESTIMATORS[_name] = estimate_marginal_value
