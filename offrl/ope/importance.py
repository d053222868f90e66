"""The importance-sampling family of off-policy estimators.

Each estimator gives the value of a target policy ``pi`` (its expected
discounted return from the dataset's initial states,
``E[sum_t gamma^t r_t]``) from episodes logged by a behaviour policy ``mu``,
reweighting what was logged by the cumulative importance weights

    rho_t = pi(a_t | s_t) / mu(a_t | s_t),      w_t = prod_{k <= t} rho_k

For ``N`` episodes (``n`` indexes them), with ``G = sum_t gamma^t r_t``, ``T``
the last step and ``w_{-1} = 1``:

    IS     (trajectory-wise):     1/N sum_n w_T G
    WIS    (weighted):            sum_n w_T G / sum_n w_T
    PDIS   (per-decision):        1/N sum_n sum_t gamma^t w_t r_t
    WPDIS  (weighted per-decision): sum_t gamma^t sum_n w_t r_t / sum_n w_t
    DR     (doubly robust, Jiang and Li, 2016):
           1/N sum_n sum_t gamma^t [ w_t r_t - w_t Q(s_t, a_t) + w_{t-1} V(s_t) ]
    WDR    (weighted doubly robust, Thomas and Brunskill, 2016): DR with
           ``w_t / N`` replaced by ``w_t / sum_n w_t`` and ``w_{t-1} / N``
           by ``w_{t-1} / sum_n w_{t-1}`` (per step)

IS, PDIS and DR are unbiased (given exact ``mu``, unclipped weights); the
weighted ones are biased but consistent and usually far less variable. DR
and WDR use a model ``Q(s, a)`` of the target policy's action values and
``V(s) = E_{a ~ pi} Q(s, a)``: for discrete actions the exact sum over
actions; for continuous actions the mean of ``Q(s, a_k)`` over
``n_action_samples`` actions drawn from ``pi`` (its own sampler for
stochastic policies, the smoothing kernel for deterministic ones). A good
model removes most of the variance; a wrong one leaves DR unbiased
(Precup, Sutton and Singh, 2000; Jiang and Li, 2016, "Doubly Robust
Off-policy Value Evaluation for Reinforcement Learning").

Episodes of different lengths are padded to the longest: after its last
step an episode stays in an absorbing state with reward 0, ``rho = 1`` (its
weight carries forward) and ``Q = V = 0``. For episodes that terminated
this is exact; an episode cut short (timeout) is evaluated as if it ended
there.

Where the probabilities come from:

* target: an offrl algorithm (stochastic policies give their own
  probabilities; deterministic ones are smoothed, epsilon-greedy with
  ``epsilon = 0.05`` for discrete actions, a Gaussian kernel of
  ``bandwidth = 0.1`` dataset action standard deviations for continuous
  ones, and then the estimate is of the smoothed policy), or a callable
  (see :mod:`offrl.ope._policies`);
* behaviour: ``behaviour_probabilities`` if given (aligned with the
  dataset's steps in episode order, ``np.concatenate([ep.actions for ep in
  dataset.episodes])``); else ``behaviour_policy`` (a model from
  :mod:`offrl.ope.behaviour`, or a stochastic offrl algorithm); else the
  dataset's logged ``behaviour_probabilities`` column; else a model fitted
  here (:func:`~offrl.ope.behaviour.estimate_behaviour_policy`), which the
  result says.

Diagnostics: weights can be clipped at ``clip`` (each cumulative weight
``w_t``; for IS/WIS the trajectory weight ``w_T``), trading bias for
variance, and the number clipped is reported. The effective sample size is
Kish's ``(sum w)^2 / sum w^2`` of the trajectory weights for IS/WIS, and
its minimum over steps of the per-step weights for the per-decision ones.
An estimate whose effective sample size is below
``min_effective_sample_size`` (10), with more than 10 % of its weights
clipped, with infinite weights or undefined (every weight zero) is marked
``reliable=False`` with the reasons in ``warnings``.

The interval (``ci``; :func:`offrl.ope.bounds.confidence_interval`, whose
docstring states each method's assumptions) treats the episodes as
independent draws:

* ``"bootstrap"`` (default): percentile bootstrap over episodes,
  ``n_bootstrap`` resamples of ``N`` episodes with replacement (an index
  matrix drawn from ``np.random.default_rng(seed)``, turned into
  per-episode counts, so every estimator, self-normalised ones included, is
  recomputed exactly on each resample with a few matrix products per chunk
  of resamples). Percentile intervals of trajectory-wise IS, whose
  per-episode terms are the most skewed, undercover somewhat (about 84 %
  for a nominal 90 % in ``benchmarks/ope_is.py``; 87-90 % for the other
  estimators).
* ``"ttest"``: Student's t on per-episode terms whose mean is the estimate:
  for IS, PDIS and DR the episode's own term (``w_T G``,
  ``sum_t gamma^t w_t r_t``, the DR sum); for the self-normalised WIS,
  WPDIS and WDR the linearised (delta-method) terms, e.g. for WIS
  ``V + w_n (G_n - V) / mean(w)`` and for WPDIS
  ``V + sum_t gamma^t w_nt (r_nt - m_t) / mean_n(w_nt)`` with ``m_t`` the
  weighted mean reward of step ``t`` (WDR likewise for its two ratios).
  Their mean is the estimate, so the interval is centred on it; it is the
  usual sandwich interval of a ratio estimator, valid only as ``N`` grows
  (it ignores the normalisers' own noise and the ratio's bias).
* ``"hoeffding"``, ``"bernstein"``: concentration bounds on the mean of
  terms known to lie in ``value_range = (low, high)`` (required). For IS,
  PDIS and DR the terms are the ones above; the self-normalised estimators
  have no bounded per-episode terms with a finite-sample guarantee, so for
  WIS, WPDIS and WDR the bound is that of their unnormalised counterpart
  (IS, PDIS, DR: the same ``value_range`` applies), an interval for the
  same policy value with the guarantee, but centred on the unnormalised
  estimate (it may not contain the self-normalised one). The guarantee
  needs exact behaviour probabilities. Unclipped weights have no useful
  a-priori bound (up to ``prod_t max pi / mu``), so in practice pass
  ``clip``: then ``[clip * min(0, G_min), clip * max(0, G_max)]`` bounds
  ``w_T G`` for returns in ``[G_min, G_max]``, but clipping lowers the
  terms' mean, so with returns >= 0 only the lower end keeps its guarantee
  (the high-confidence lower bound of Thomas et al., 2015); the upper end
  then bounds the clipped estimator's mean, not the policy's value.

A fitted behaviour model is held fixed (the bootstrap does not refit it),
so with an estimated behaviour policy no interval includes the model's own
uncertainty.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Optional, Tuple

import numpy as np

from ..algos.base import QLearningAlgoBase
from ._logged import LoggedData, locate, logged_data, take_rows
from ._policies import (
    DEFAULT_BANDWIDTH,
    DEFAULT_EPSILON,
    PolicyProbabilities,
    check_built,
    int_seed,
    policy_probabilities,
    sample_policy_actions,
)
from .behaviour import AlgoBehaviourPolicy, BehaviourModel, fit_behaviour_model
from .bounds import confidence_interval
from .options import check_ci, check_options, resolve_gamma

__all__ = [
    "OPEResult",
    "ESTIMATORS",
    "importance_sampling",
    "weighted_importance_sampling",
    "per_decision_importance_sampling",
    "weighted_per_decision_importance_sampling",
    "doubly_robust",
    "weighted_doubly_robust",
    "estimate_policy_value",
]
# also public, for the other estimators of offrl.ope (selection, distributional, marginal), not in __all__:
# check_options, check_positive_ints, check_ci, resolve_gamma, resolve_behaviour, prepare / Prepared,
# estimate_prepared, model_terms, build_padded / Padded, kish_effective_sample_size

#: estimator name -> (label, needs a Q model)
ESTIMATORS: Dict[str, Tuple[str, bool]] = {
    "is": ("IS", False),
    "wis": ("WIS", False),
    "pdis": ("PDIS", False),
    "wpdis": ("WPDIS", False),
    "dr": ("DR", True),
    "wdr": ("WDR", True),
    "mis": ("MIS", False),  # the state-action marginal estimators of offrl.ope.marginal
    "wmis": ("WMIS", False),
    "mdr": ("MDR", True),
}
#: estimators computed in another module, name -> function; offrl.ope.marginal registers "mis", "wmis"
#: and "mdr" when imported (it imports this module, so this one does not import it)
EXTERNAL_ESTIMATORS: Dict[str, Any] = {}
_TRAJECTORY = ("is", "wis")
_HEAVY_CLIPPING = 0.1


@dataclasses.dataclass(frozen=True)
class OPEResult:
    """An importance-sampling estimate of a policy's value.

    Attributes:
        estimator: ``"IS"``, ``"WIS"``, ``"PDIS"``, ``"WPDIS"``, ``"DR"`` or ``"WDR"``.
        value: the estimate (discounted return from the initial states, in
            the dataset's reward units); NaN when undefined.
        lower, upper: the interval at ``confidence`` (method: :attr:`ci`).
        confidence: the interval's nominal coverage.
        n_bootstrap: bootstrap resamples (0 when ``ci`` is not the bootstrap).
        n_episodes: episodes in the data.
        effective_sample_size: Kish's effective number of episodes (see the
            module docstring).
        n_clipped, n_weights: weights clipped at ``clip`` out of those used.
        clip: the clipping threshold (None: no clipping).
        max_weight: largest weight used (after clipping).
        gamma: the discount.
        behaviour: where ``mu`` came from: ``"given"``, ``"logged"``,
            ``"model: ..."`` or ``"estimated: ..."``.
        target: what was evaluated (probabilities, or the smoothing of a
            deterministic policy).
        warnings: why the estimate should not be trusted (empty if none).
        episode_weights: ``(n_episodes,)`` trajectory weights ``w_T`` after
            clipping, for inspection.
        ci: the interval's method: ``"bootstrap"``, ``"hoeffding"``,
            ``"bernstein"`` or ``"ttest"`` (see the module docstring).
        value_range: the bound on the per-episode terms the interval used
            (Hoeffding / Bernstein), else None.
    """

    estimator: str
    value: float
    lower: float
    upper: float
    confidence: float
    n_bootstrap: int
    n_episodes: int
    effective_sample_size: float
    n_clipped: int
    n_weights: int
    clip: Optional[float]
    max_weight: float
    gamma: float
    behaviour: str
    target: str
    warnings: Tuple[str, ...] = ()
    episode_weights: np.ndarray = dataclasses.field(default=None, repr=False, compare=False)  # type: ignore[assignment]
    ci: str = "bootstrap"
    value_range: Optional[Tuple[float, float]] = None

    @property
    def estimate(self) -> float:
        """Same as :attr:`value`."""
        return self.value

    @property
    def reliable(self) -> bool:
        """False when :attr:`warnings` gives a reason not to trust the estimate."""
        return not self.warnings

    @property
    def clipped_fraction(self) -> float:
        return self.n_clipped / self.n_weights if self.n_weights else 0.0

    @property
    def behaviour_estimated(self) -> bool:
        return self.behaviour.startswith("estimated")

    def __float__(self) -> float:
        return float(self.value)

    def __repr__(self) -> str:
        pct = f"{self.confidence:.0%}".rstrip("%")
        head = (
            f"OPEResult({self.estimator} = {self.value:.4g}, {pct}% {self.ci} CI [{self.lower:.4g}, {self.upper:.4g}], "
            f"ESS {self.effective_sample_size:.1f} of {self.n_episodes} episodes, "
            f"clipped {self.n_clipped}/{self.n_weights}, behaviour {self.behaviour}"
        )
        if self.reliable:
            return head + ", reliable)"
        return head + ", UNRELIABLE: " + "; ".join(self.warnings) + ")"


# ------------------------------------------------------------ the maths
@dataclasses.dataclass(frozen=True)
class Padded:
    """``(E, H)`` arrays of the estimators (see the module docstring); :func:`build_padded` makes them."""

    rewards: np.ndarray
    weights: np.ndarray  # clipped cumulative weights w_t (trajectory estimators: only the last column is used)
    previous: np.ndarray  # w_{t-1}, with w_{-1} = 1
    discounts: np.ndarray  # (H,)
    q: Optional[np.ndarray]
    v: Optional[np.ndarray]


def _pad(values: np.ndarray, mask: np.ndarray, fill: float) -> np.ndarray:
    out = np.full(mask.shape, fill, dtype=np.float64)
    out[mask] = values
    return out


def kish_effective_sample_size(weights: np.ndarray) -> np.ndarray:
    """Kish's effective sample size ``(sum w)^2 / sum w^2`` along axis 0 (0 where every weight is 0)."""
    total = weights.sum(axis=0)
    squares = (weights**2).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(squares > 0, total**2 / np.where(squares > 0, squares, 1.0), 0.0)


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """``numerator / denominator``, NaN where the denominator is 0."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denominator != 0, numerator / np.where(denominator != 0, denominator, 1.0), np.nan)


def _episode_terms(kind: str, p: Padded) -> np.ndarray:
    """``(E, K)`` per-episode terms whose sums over (resampled) episodes
    determine the estimate (see :func:`_combine`)."""
    d = p.discounts
    if kind in _TRAJECTORY:
        w = p.weights[:, -1]
        return np.stack([w * (p.rewards @ d), w], axis=1)
    wr = p.weights * p.rewards
    if kind == "pdis":
        return (wr @ d)[:, None]
    if kind == "dr":
        return ((wr - p.weights * p.q + p.previous * p.v) @ d)[:, None]
    if kind == "wpdis":
        return np.concatenate([wr, p.weights], axis=1)
    return np.concatenate([wr, p.weights * p.q, p.previous * p.v, p.weights, p.previous], axis=1)


def _combine(kind: str, sums: np.ndarray, n: np.ndarray, discounts: np.ndarray) -> np.ndarray:
    """The estimate from ``(B, K)`` sums of :func:`_episode_terms` over ``n``
    episodes (``(B,)``): ``(B,)``."""
    if kind in ("is", "pdis", "dr"):
        return sums[:, 0] / n
    if kind == "wis":
        return _ratio(sums[:, 0], sums[:, 1])
    h = discounts.shape[0]
    if kind == "wpdis":
        wr, w = sums[:, :h], sums[:, h:]
        return _ratio(wr, w) @ discounts
    wr, wq, pv, w, previous = (sums[:, k * h: (k + 1) * h] for k in range(5))
    return (_ratio(wr - wq, w) + _ratio(pv, previous)) @ discounts


def _statistic(kind: str, p: Padded, counts: np.ndarray) -> np.ndarray:
    """The estimator on resamples given by per-episode ``counts`` ``(B, E)``
    (a row of ones is the data itself): ``(B,)``."""
    return _combine(kind, counts @ _episode_terms(kind, p), counts.sum(axis=1), p.discounts)



def _linearised_terms(kind: str, p: Padded, value: float) -> np.ndarray:
    """``(E,)`` delta-method terms of a self-normalised estimator: their mean
    is the estimate ``value`` (the module docstring gives the formulas)."""
    d = p.discounts
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        if kind == "wis":
            w = p.weights[:, -1]
            return value + _ratio(w, np.full_like(w, w.mean())) * (p.rewards @ d - value)
        w = p.weights
        w_scaled = _ratio(w, np.broadcast_to(w.mean(axis=0), w.shape))
        if kind == "wpdis":
            centred = p.rewards - _ratio((w * p.rewards).sum(axis=0), w.sum(axis=0))
            return value + (w_scaled * centred) @ d
        advantage = p.rewards - p.q
        previous = p.previous
        p_scaled = _ratio(previous, np.broadcast_to(previous.mean(axis=0), previous.shape))
        first = w_scaled * (advantage - _ratio((w * advantage).sum(axis=0), w.sum(axis=0)))
        second = p_scaled * (p.v - _ratio((previous * p.v).sum(axis=0), previous.sum(axis=0)))
        return value + (first + second) @ d


_UNNORMALISED = {"wis": "is", "wpdis": "pdis", "wdr": "dr"}


def _interval(kind: str, p: Padded, terms: np.ndarray, value: float, *, ci: str, confidence: float,
              value_range: Optional[Tuple[float, float]], n_bootstrap: int, seed: Any) -> Any:
    """The interval of :func:`offrl.ope.bounds.confidence_interval` with the
    terms the module docstring names for ``ci``."""
    if ci == "bootstrap":
        d = p.discounts
        return confidence_interval(
            terms, "bootstrap", confidence, n_bootstrap=n_bootstrap, seed=seed,
            statistic=lambda sums, n: _combine(kind, sums, n, d),
        )
    if kind in _UNNORMALISED:
        if ci == "ttest":
            scalar = _linearised_terms(kind, p, value)
        else:
            scalar = _episode_terms(_UNNORMALISED[kind], p)[:, 0]
    else:
        scalar = terms[:, 0]
    return confidence_interval(scalar, ci, confidence, value_range=value_range)


def build_padded(
    kind: str, ratios: np.ndarray, rewards: np.ndarray, lengths: np.ndarray, gamma: float, *,
    q: Optional[np.ndarray] = None, v: Optional[np.ndarray] = None, clip: Optional[float] = None,
) -> Tuple[Padded, np.ndarray, np.ndarray]:
    """Padded arrays, the ``(E, H)`` mask of real steps, and which weights
    were clipped (``(E,)`` trajectory weights for IS/WIS, ``(E, H)`` otherwise)."""
    e, h = lengths.shape[0], int(lengths.max())
    mask = np.arange(h)[None, :] < lengths[:, None]
    raw = np.cumprod(_pad(ratios, mask, 1.0), axis=1)
    if kind in _TRAJECTORY:
        clipped = raw[:, -1] > clip if clip is not None else np.zeros(e, dtype=bool)
    else:
        clipped = (raw > clip) & mask if clip is not None else np.zeros_like(mask)
    weights = np.minimum(raw, clip) if clip is not None else raw
    previous = np.concatenate([np.ones((e, 1)), weights[:, :-1]], axis=1)
    padded = Padded(
        _pad(rewards, mask, 0.0), weights, previous, gamma ** np.arange(h, dtype=np.float64),
        None if q is None else _pad(q, mask, 0.0), None if v is None else _pad(v, mask, 0.0),
    )
    return padded, mask, clipped


@dataclasses.dataclass(frozen=True)
class _Core:
    value: float
    lower: float
    upper: float
    ess: float
    n_clipped: int
    n_weights: int
    max_weight: float
    episode_weights: np.ndarray
    nan_resamples: int
    infinite: bool


def _core(
    kind: str,
    ratios: np.ndarray,
    rewards: np.ndarray,
    lengths: np.ndarray,
    gamma: float,
    *,
    q: Optional[np.ndarray] = None,
    v: Optional[np.ndarray] = None,
    clip: Optional[float] = None,
    confidence: float = 0.95,
    n_bootstrap: int = 1000,
    seed: Any = 0,
    ci: str = "bootstrap",
    value_range: Optional[Tuple[float, float]] = None,
) -> _Core:
    """The estimate from flat, episode-ordered ``(N,)`` arrays."""
    padded, mask, clipped = build_padded(kind, ratios, rewards, lengths, gamma, q=q, v=v, clip=clip)
    e, h = mask.shape
    trajectory = kind in _TRAJECTORY
    n_weights = e if trajectory else int(mask.sum())
    weights = padded.weights
    infinite = not np.isfinite(weights).all()
    d = padded.discounts
    with np.errstate(invalid="ignore", over="ignore"):
        terms = _episode_terms(kind, padded)
        total = terms.sum(axis=0, keepdims=True)
        value = float(_combine(kind, total, np.array([float(e)]), d)[0])
        ess = float(kish_effective_sample_size(weights[:, -1] if trajectory else weights).min())
    interval = _interval(kind, padded, terms, value, ci=ci, confidence=confidence, value_range=value_range,
                         n_bootstrap=n_bootstrap, seed=seed)
    used = weights[:, -1] if trajectory else weights[mask]
    return _Core(
        value, interval.lower, interval.upper, ess, int(clipped.sum()), n_weights, float(used.max()),
        weights[:, -1].copy(), interval.n_invalid, infinite,
    )


def _warnings(core: _Core, n_episodes: int, clip: Optional[float], min_ess: float) -> Tuple[str, ...]:
    out = []
    if core.infinite:
        out.append("some importance weights overflowed to infinity: pass clip= to bound them")
    if not np.isfinite(core.value):
        out.append("the estimate is undefined: every episode has weight 0 (the target never takes the logged actions)")
    if core.ess < min_ess:
        out.append(
            f"effective sample size {core.ess:.1f} is below {min_ess:g} (of {n_episodes} episodes): "
            "a few episodes carry the estimate"
        )
    if core.n_weights and core.n_clipped / core.n_weights > _HEAVY_CLIPPING:
        out.append(
            f"{core.n_clipped} of {core.n_weights} weights ({core.n_clipped / core.n_weights:.0%}) were clipped "
            f"at {clip:g}: the estimate is biased"
        )
    if core.nan_resamples and np.isfinite(core.value):
        out.append(f"{core.nan_resamples} bootstrap resamples had no weight; the interval ignores them")
    return tuple(out)


# ------------------------------------------------------------ the inputs
def _check_behaviour_values(mu: np.ndarray, data: LoggedData, source: str) -> np.ndarray:
    mu = np.asarray(mu, dtype=np.float64)
    if mu.ndim == 2 and mu.shape[1] == 1:
        mu = mu[:, 0]
    if mu.shape != (data.n_steps,):
        raise ValueError(
            f"{source} has shape {mu.shape}, expected ({data.n_steps},): one value per step, in the order of "
            "np.concatenate([ep.actions for ep in dataset.episodes])"
        )
    upper = 1.0 if data.discrete else np.inf
    bad = ~np.isfinite(mu) | (mu < 0) | (mu > upper)
    if bad.any():
        i = int(np.argmax(bad))
        episode, step = locate(data.lengths, i)
        expected = "a probability in [0, 1]" if data.discrete else "a finite density >= 0"
        missing = " (the dataset has no logged probability for that step)" if np.isnan(mu[i]) else ""
        raise ValueError(f"{source}[{i}] (episode {episode}, step {step}) is {mu[i]}{missing}, expected {expected}")
    return mu


def resolve_behaviour(
    data: LoggedData,
    behaviour_probabilities: Any,
    behaviour_policy: Any,
    seed: Any,
) -> Tuple[np.ndarray, str]:
    """``mu`` of each logged step and where it came from."""
    if behaviour_probabilities is not None and behaviour_policy is not None:
        raise ValueError("pass behaviour_probabilities or behaviour_policy, not both")
    if behaviour_probabilities is not None:
        return _check_behaviour_values(behaviour_probabilities, data, "behaviour_probabilities"), "given"
    if behaviour_policy is not None:
        model = AlgoBehaviourPolicy(behaviour_policy) if isinstance(behaviour_policy, QLearningAlgoBase) else behaviour_policy
        if isinstance(model, BehaviourModel):
            mu = model.logged_probabilities(data)
        elif callable(getattr(model, "probabilities", None)):
            mu = model.probabilities(data.observations, data.actions)
        else:
            raise TypeError(
                "behaviour_policy must be an offrl algorithm or a model with probabilities(observations, actions), "
                f"got {type(behaviour_policy).__name__}"
            )
        description = getattr(model, "description", type(model).__name__)
        return _check_behaviour_values(mu, data, "behaviour_policy's probabilities"), f"model: {description}"
    if data.behaviour_probabilities is not None:
        return _check_behaviour_values(data.behaviour_probabilities, data, "dataset.behaviour_probabilities"), "logged"
    model = fit_behaviour_model(data, seed=int_seed(seed))
    return model.logged_probabilities(data), f"estimated: {model.description}"


def _importance_ratios(pi: np.ndarray, mu: np.ndarray, data: LoggedData, behaviour: str) -> np.ndarray:
    """``pi / mu`` (0 where ``pi`` is 0); ``ValueError`` where ``mu`` is 0 but ``pi`` is not."""
    impossible = (mu == 0) & (pi > 0)
    if impossible.any():
        i = int(np.argmax(impossible))
        episode, step = locate(data.lengths, i)
        raise ValueError(
            f"the behaviour probability of the logged action at step {i} (episode {episode}, step {step}; "
            f"behaviour {behaviour}) is 0, but the target policy takes it with probability {pi[i]:.4g}: "
            "the importance weight would be infinite (a logged action must have a non-zero behaviour probability)"
        )
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(pi > 0, pi / np.where(mu > 0, mu, 1.0), 0.0)


def _call_q(q_model: Any, observations: Any, actions: np.ndarray, rows: int) -> np.ndarray:
    if isinstance(q_model, QLearningAlgoBase) or (not callable(q_model) and hasattr(q_model, "predict_value")):
        values = q_model.predict_value(observations, actions)
    elif callable(q_model):
        values = q_model(observations, actions)
    else:
        raise TypeError(
            f"q_model must have predict_value(x, action) (e.g. FQE) or be a callable (x, action) -> (B,), "
            f"got {type(q_model).__name__}"
        )
    values = np.asarray(values, dtype=np.float64)
    if values.shape not in ((rows,), (rows, 1)):
        raise ValueError(f"q_model returned values of shape {values.shape}, expected ({rows},)")
    values = values.reshape(-1)
    if not np.isfinite(values).all():
        raise ValueError(f"q_model returned a non-finite value at row {int(np.argmax(~np.isfinite(values)))}")
    return values


def model_terms(
    q_model: Any, target: Any, data: LoggedData, probabilities: PolicyProbabilities, *,
    greedy: bool, bandwidth: float, n_action_samples: int, seed: Any, batch_size: int,
) -> Tuple[np.ndarray, np.ndarray]:
    """``Q(s_t, a_t)`` and ``V(s_t) = E_{a ~ pi} Q(s_t, a)`` at every logged step, ``(N,)`` each."""
    check_built(q_model, "q_model")
    n = data.n_steps
    q_logged, v = np.empty(n), np.empty(n)
    if data.discrete:
        size = data.action_size
        for start in range(0, n, batch_size):
            rows = slice(start, min(start + batch_size, n))
            m = rows.stop - rows.start
            x = take_rows(data.observations, rows)
            if callable(getattr(q_model, "predict_action_values", None)):
                q_all = np.asarray(q_model.predict_action_values(x), dtype=np.float64).reshape(m, size)
            else:
                q_all = np.stack([_call_q(q_model, x, np.full(m, a, dtype=np.int64), m) for a in range(size)], axis=1)
            q_logged[rows] = q_all[np.arange(m), data.actions[rows]]
            v[rows] = (probabilities.all_actions[rows] * q_all).sum(axis=1)
        return q_logged, v
    samples = sample_policy_actions(
        target, data, n_action_samples, greedy=greedy, bandwidth=bandwidth, seed=seed, batch_size=batch_size
    )
    k = n_action_samples
    for start in range(0, n, max(1, batch_size // k)):
        rows = slice(start, min(start + max(1, batch_size // k), n))
        m = rows.stop - rows.start
        x = take_rows(data.observations, rows)
        q_logged[rows] = _call_q(q_model, x, data.actions[rows].astype(np.float32), m)
        repeated = [np.repeat(o, k, axis=0) for o in x] if isinstance(x, list) else np.repeat(x, k, axis=0)
        sampled = samples[rows].reshape(m * k, -1).astype(np.float32)
        v[rows] = _call_q(q_model, repeated, sampled, m * k).reshape(m, k).mean(axis=1)
    return q_logged, v


@dataclasses.dataclass(frozen=True)
class Prepared:
    """Everything but the estimator's formula: shared by several estimators
    (and, in policy selection, the behaviour part by several targets)."""

    data: LoggedData
    ratios: np.ndarray
    q: Optional[np.ndarray]
    v: Optional[np.ndarray]
    behaviour: str
    target: str
    gamma: float


def prepare(
    target: Any,
    data: LoggedData,
    mu: np.ndarray,
    behaviour: str,
    *,
    q_model: Any,
    gamma: float,
    greedy: bool,
    epsilon: float,
    bandwidth: float,
    n_action_samples: int,
    seed: Any,
    batch_size: int,
) -> Prepared:
    """The importance ratios of ``target`` against ``mu`` (and, with ``q_model``, its Q and V) at every logged step."""
    check_built(target, "target policy")
    probabilities = policy_probabilities(
        target, data, greedy=greedy, epsilon=epsilon, bandwidth=bandwidth, batch_size=batch_size
    )
    ratios = _importance_ratios(probabilities.logged, mu, data, behaviour)
    q = v = None
    if q_model is not None:
        q, v = model_terms(
            q_model, target, data, probabilities, greedy=greedy, bandwidth=bandwidth,
            n_action_samples=n_action_samples, seed=seed, batch_size=batch_size,
        )
    return Prepared(data, ratios, q, v, behaviour, probabilities.description, gamma)


def estimate_prepared(
    kind: str, prepared: Prepared, *, clip: Optional[float], confidence: float, n_bootstrap: int, seed: Any,
    min_effective_sample_size: float, ci: str = "bootstrap", value_range: Optional[Tuple[float, float]] = None,
) -> OPEResult:
    """The estimator ``kind``'s result, interval and warnings on :func:`prepare`'s inputs."""
    label, needs_model = ESTIMATORS[kind]
    if needs_model and prepared.q is None:
        raise ValueError(f"{label} needs q_model: an FQE, an object with predict_value(x, action), or a callable")
    data = prepared.data
    core = _core(
        kind, prepared.ratios, data.rewards, data.lengths, prepared.gamma, q=prepared.q, v=prepared.v,
        clip=clip, confidence=confidence, n_bootstrap=n_bootstrap, seed=seed, ci=ci, value_range=value_range,
    )
    bootstrap = ci == "bootstrap"
    return OPEResult(
        label, core.value, core.lower, core.upper, float(confidence), int(n_bootstrap) if bootstrap else 0,
        data.n_episodes, core.ess, core.n_clipped, core.n_weights, None if clip is None else float(clip),
        core.max_weight, prepared.gamma, prepared.behaviour, prepared.target,
        _warnings(core, data.n_episodes, clip, min_effective_sample_size), core.episode_weights,
        ci, None if bootstrap or ci == "ttest" else tuple(float(x) for x in value_range),  # type: ignore[union-attr]
    )


def estimate_policy_value(
    target: Any,
    dataset: Any,
    estimator: str = "wpdis",
    q_model: Any = None,
    *,
    gamma: Optional[float] = None,
    behaviour_probabilities: Any = None,
    behaviour_policy: Any = None,
    clip: Optional[float] = None,
    confidence: float = 0.95,
    n_bootstrap: int = 1000,
    seed: Any = 0,
    min_effective_sample_size: float = 10.0,
    greedy: bool = False,
    epsilon: float = DEFAULT_EPSILON,
    bandwidth: float = DEFAULT_BANDWIDTH,
    n_action_samples: int = 10,
    batch_size: int = 4096,
    ci: str = "bootstrap",
    value_range: Optional[Tuple[float, float]] = None,
    ratio_model: Any = None,
) -> OPEResult:
    """Value of ``target`` on ``dataset`` by one estimator of the family.

    Args:
        target: a built offrl algorithm, or a callable: discrete actions
            ``(observations) -> (B, action_size)`` probabilities; continuous
            ``(observations, actions) -> (B,)`` densities; or a sequence
            model as ``SequencePolicy(algo, target_return=...)`` (replayed
            on each episode's logged history, see :mod:`offrl.metrics.sequence`).
        dataset: a ReplayBuffer / MDPDataset, or a list of episodes.
        estimator: ``"is"``, ``"wis"``, ``"pdis"``, ``"wpdis"``, ``"dr"`` or ``"wdr"``.
        q_model: for DR/WDR: an FQE / DiscreteFQE, any object with
            ``predict_value(x, action) -> (B,)``, or such a callable; it must
            estimate the target policy's discounted action values (same
            ``gamma``) in the dataset's reward units.
        gamma: discount (default: the target algorithm's, else 0.99).
        behaviour_probabilities: ``(N,)`` ``mu(a_t | s_t)`` per logged step,
            in episode order.
        behaviour_policy: a behaviour model (:mod:`offrl.ope.behaviour`) or a
            stochastic offrl algorithm.
        clip: upper bound of the cumulative weights (None: unclipped).
        confidence: the interval's nominal coverage.
        n_bootstrap: resamples of the bootstrap interval.
        ci: the interval: ``"bootstrap"`` (percentile, over episodes),
            ``"hoeffding"``, ``"bernstein"`` (empirical Bernstein) or
            ``"ttest"`` (Student's t); the module docstring says which
            per-episode terms each uses, also for the self-normalised
            estimators, and :mod:`offrl.ope.bounds` their assumptions.
        value_range: ``(low, high)``, known in advance, bounding each
            episode's term (``w_T G`` for IS/WIS, ``sum_t gamma^t w_t r_t``
            for PDIS/WPDIS, the DR sum for DR/WDR); needed by
            ``"hoeffding"`` and ``"bernstein"``.
        seed: any ``np.random.default_rng`` seed, for the bootstrap and for
            the behaviour model's folds and the target's action samples.
        min_effective_sample_size: below it the result is marked unreliable.
        greedy: evaluate an algorithm's greedy action (smoothed) even when
            it has a stochastic policy.
        epsilon: epsilon-greedy smoothing of deterministic discrete policies.
        bandwidth: Gaussian smoothing of deterministic continuous policies,
            in dataset action standard deviations.
        n_action_samples: actions drawn per state for ``V`` (continuous DR).
        batch_size: rows per forward pass of the policies and the Q model.
        ratio_model: ``"mis"``, ``"wmis"``, ``"mdr"`` (state-action marginal,
            :func:`offrl.ope.marginal.estimate_marginal_value`): the density
            ratio's source (default: DualDICE trained here).

    Raises:
        ValueError: an unbuilt target, an empty dataset or episode,
            behaviour probabilities outside [0, 1] (densities < 0), NaN, or
            zero where the target takes the logged action; an unknown
            ``ci``; ``ci="hoeffding"`` / ``"bernstein"`` without a
            ``value_range`` or with one that some episode's term lies outside.
    """
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {list(ESTIMATORS)}, got {estimator!r}")
    if estimator in EXTERNAL_ESTIMATORS:
        return EXTERNAL_ESTIMATORS[estimator](
            target, dataset, estimator, q_model, ratio_model=ratio_model, gamma=gamma, clip=clip,
            behaviour_probabilities=behaviour_probabilities, behaviour_policy=behaviour_policy, confidence=confidence,
            n_bootstrap=n_bootstrap, seed=seed, min_effective_sample_size=min_effective_sample_size, greedy=greedy,
            epsilon=epsilon, bandwidth=bandwidth, n_action_samples=n_action_samples, batch_size=batch_size,
            ci=ci, value_range=value_range,
        )
    check_ci(ci, value_range)
    check_built(target, "target policy")
    gamma = resolve_gamma(gamma, target)
    check_options(gamma, clip, confidence, n_bootstrap, min_effective_sample_size, epsilon, bandwidth, batch_size,
                   n_action_samples)
    if ESTIMATORS[estimator][1] and q_model is None:
        raise ValueError(
            f"{ESTIMATORS[estimator][0]} needs q_model: an FQE, an object with predict_value(x, action), or a callable"
        )
    data = logged_data(dataset)
    mu, behaviour = resolve_behaviour(data, behaviour_probabilities, behaviour_policy, seed)
    prepared = prepare(
        target, data, mu, behaviour, q_model=q_model if ESTIMATORS[estimator][1] else None, gamma=gamma,
        greedy=greedy, epsilon=epsilon, bandwidth=bandwidth, n_action_samples=n_action_samples, seed=seed,
        batch_size=batch_size,
    )
    return estimate_prepared(
        estimator, prepared, clip=clip, confidence=confidence, n_bootstrap=n_bootstrap, seed=seed,
        min_effective_sample_size=min_effective_sample_size, ci=ci, value_range=value_range,
    )


def importance_sampling(target: Any, dataset: Any, **kwargs: Any) -> OPEResult:
    """Trajectory-wise importance sampling, ``1/N sum_n w_T G_n`` (unbiased).
    Keyword arguments as for :func:`estimate_policy_value`."""
    return estimate_policy_value(target, dataset, "is", **kwargs)


def weighted_importance_sampling(target: Any, dataset: Any, **kwargs: Any) -> OPEResult:
    """Weighted importance sampling, ``sum_n w_T G_n / sum_n w_T``.
    Keyword arguments as for :func:`estimate_policy_value`."""
    return estimate_policy_value(target, dataset, "wis", **kwargs)


def per_decision_importance_sampling(target: Any, dataset: Any, **kwargs: Any) -> OPEResult:
    """Per-decision importance sampling, ``1/N sum_n sum_t gamma^t w_t r_t``
    (unbiased). Keyword arguments as for :func:`estimate_policy_value`."""
    return estimate_policy_value(target, dataset, "pdis", **kwargs)


def weighted_per_decision_importance_sampling(target: Any, dataset: Any, **kwargs: Any) -> OPEResult:
    """Weighted per-decision importance sampling,
    ``sum_t gamma^t sum_n w_t r_t / sum_n w_t``. Keyword arguments as for
    :func:`estimate_policy_value`."""
    return estimate_policy_value(target, dataset, "wpdis", **kwargs)


def doubly_robust(target: Any, dataset: Any, q_model: Any, **kwargs: Any) -> OPEResult:
    """Per-decision doubly robust estimate (Jiang and Li, 2016) with
    ``q_model`` (an FQE, an object with ``predict_value(x, action)``, or a
    callable) as its model. Keyword arguments as for :func:`estimate_policy_value`."""
    return estimate_policy_value(target, dataset, "dr", q_model, **kwargs)


def weighted_doubly_robust(target: Any, dataset: Any, q_model: Any, **kwargs: Any) -> OPEResult:
    """Weighted doubly robust estimate (Thomas and Brunskill, 2016) with
    ``q_model`` as its model. Keyword arguments as for :func:`estimate_policy_value`."""
    return estimate_policy_value(target, dataset, "wdr", q_model, **kwargs)
