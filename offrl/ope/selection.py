"""Offline policy selection: rank trained policies by off-policy estimates.

:func:`select_policies` evaluates every policy with every chosen estimator
on the same logged data (the behaviour probabilities are resolved, or the
behaviour model fitted, once and shared), ranks the policies per estimator
(rank 1 = highest estimate; an undefined estimate ranks last; ties share
the better rank) and, when the policies' true values are known (e.g. from
online rollouts), reports how well each estimator's ranking agrees with the
truth: Spearman's and Kendall's rank correlations, and the regret of its top
pick, ``max_p V(p) - V(top)`` (0 when it picks the best policy).

With true values each estimator also gets ``metrics[estimator]``, the
selection metrics of SCOPE-RL (Kiyohara, Kishimoto, Kawakami, Kobayashi,
Nakata and Saito, 2023, "Towards Assessing and Benchmarking Risk-Return
Tradeoff of Off-Policy Evaluation", arXiv:2311.18207). For ``P`` policies
with true values ``V_p``, estimates ``V^_p``, the top-``k`` set ``S_k`` (the
``k`` highest estimates; an undefined estimate counts as lowest, ties go to
the policy given first), a threshold ``c`` and the behaviour policy's value
``V_b``:

* ``mse``: ``1/P sum_p (V^_p - V_p)^2``;
* ``relative_error``: ``1/P sum_p |V^_p - V_p| / |V_p|`` (inf when some
  ``V_p = 0``);
* ``spearman``, ``kendall``: rank correlations of estimates with true values
  (as the ``spearman`` / ``kendall`` attributes);
* ``regret_at_k``: ``max_p V_p - max_{p in S_k} V_p`` (``k = 1``: the
  ``regret`` attribute);
* ``type_i_error``: of the policies whose true value is below ``c``, the
  fraction estimated at or above it (deemed safe, wrongly):
  ``#{V_p < c, V^_p >= c} / #{V_p < c}`` (NaN when no policy is below ``c``);
* ``type_ii_error``: of the policies at or above ``c``, the fraction estimated
  below it (wrongly rejected): ``#{V_p >= c, V^_p < c} / #{V_p >= c}``;
* ``sharpe_ratio_at_k``: ``(max_{p in S_k} V_p - V_b) / std_{p in S_k} V_p``,
  the return of deploying the best of the top ``k`` over the behaviour
  policy per unit of spread of the true values among them (population
  standard deviation; NaN when it is 0, e.g. ``k = 1``).

The type I / II rates need ``threshold`` and SharpeRatio@k needs
``behaviour_value``: without them those metrics are left out of
``metrics``, and asking for them by name (``metrics=[...]``) without them is
a ``ValueError`` naming the missing argument.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ..algos.base import QLearningAlgoBase
from ..metrics.sequence import SequencePolicy, as_sequence_policy
from ._logged import logged_data
from ._policies import DEFAULT_BANDWIDTH, DEFAULT_EPSILON, check_built
from .bounds import parse_value_range
from .importance import ESTIMATORS, estimate_prepared, prepare, resolve_behaviour
from .options import check_ci, check_options
from .marginal import MARGINAL_ESTIMATORS, estimate_marginal_value

__all__ = ["PolicySelection", "select_policies", "selection_metrics", "SELECTION_METRICS"]

#: the metrics :func:`selection_metrics` computes (module docstring)
SELECTION_METRICS = (
    "mse", "relative_error", "spearman", "kendall", "regret_at_k", "type_i_error", "type_ii_error",
    "sharpe_ratio_at_k",
)

EstimatorSpec = Union[Sequence[str], Mapping[str, Union[str, Callable[[Any, Any], Any]]]]


@dataclasses.dataclass(frozen=True)
class PolicySelection:
    """Estimates, ranks and (with true values) agreement with the truth.

    Attributes:
        policies: policy names, in the order given.
        estimators: estimator labels, in the order given.
        results: ``results[estimator][policy]``: an :class:`~offrl.ope.OPEResult`
            (or whatever a custom estimator returned: it has ``value``, and
            ``lower``/``upper`` when it has an interval).
        ranks: ``ranks[estimator][policy]``, 1 = best.
        true_values: the true values given, or None.
        spearman, kendall: ``[estimator]`` rank correlation of estimates
            with true values (NaN with fewer than two policies, constant or
            undefined values); empty without true values.
        regret: ``[estimator]`` true value of the best policy minus that of
            the estimator's top pick; empty without true values.
        metrics: ``[estimator][metric]`` the selection metrics of the module
            docstring; empty without true values.
        k, threshold, behaviour_value: the settings of the metrics.
        ci, value_range: the interval method the named estimators used
            and its range (None for ``"bootstrap"`` / ``"ttest"``).
    """

    policies: Tuple[str, ...]
    estimators: Tuple[str, ...]
    results: Dict[str, Dict[str, Any]]
    ranks: Dict[str, Dict[str, int]]
    true_values: Optional[Dict[str, float]] = None
    spearman: Dict[str, float] = dataclasses.field(default_factory=dict)
    kendall: Dict[str, float] = dataclasses.field(default_factory=dict)
    regret: Dict[str, float] = dataclasses.field(default_factory=dict)
    metrics: Dict[str, Dict[str, float]] = dataclasses.field(default_factory=dict)
    k: Optional[int] = None
    threshold: Optional[float] = None
    behaviour_value: Optional[float] = None
    ci: str = "bootstrap"
    value_range: Optional[Tuple[float, float]] = None

    def top(self, estimator: Optional[str] = None) -> str:
        """The policy ranked first by ``estimator`` (default: the first one)."""
        estimator = self.estimators[0] if estimator is None else estimator
        if estimator not in self.ranks:
            raise ValueError(f"estimator must be one of {list(self.estimators)}, got {estimator!r}")
        ranks = self.ranks[estimator]
        return min(self.policies, key=lambda name: ranks[name])

    def to_rows(self) -> List[Dict[str, Any]]:
        """One dict per (estimator, policy), in rank order within each estimator."""
        rows = []
        for estimator in self.estimators:
            for policy in sorted(self.policies, key=lambda p: (self.ranks[estimator][p], self.policies.index(p))):
                result = self.results[estimator][policy]
                reliable = getattr(result, "reliable", None)
                rows.append({
                    "estimator": estimator,
                    "policy": policy,
                    "rank": self.ranks[estimator][policy],
                    "value": float(result.value),
                    "lower": float(getattr(result, "lower", math.nan)),
                    "upper": float(getattr(result, "upper", math.nan)),
                    "reliable": reliable,
                    "true_value": None if self.true_values is None else self.true_values[policy],
                })
        return rows

    def table(self) -> str:
        """A plain-text table of the rows, then one summary line per
        estimator and, with true values, one line of its selection metrics
        (those computed, in :data:`SELECTION_METRICS` order)."""
        header = ["estimator", "rank", "policy", "value", f"interval ({self.ci})", "reliable"]
        if self.true_values is not None:
            header.append("true value")
        lines = [header]
        for row in self.to_rows():
            reliable = {True: "yes", False: "NO", None: "-"}[row["reliable"]]
            line = [
                row["estimator"], str(row["rank"]), row["policy"], f"{row['value']:.4g}",
                f"[{row['lower']:.4g}, {row['upper']:.4g}]", reliable,
            ]
            if self.true_values is not None:
                line.append(f"{row['true_value']:.4g}")
            lines.append(line)
        widths = [max(len(line[k]) for line in lines) for k in range(len(header))]
        text = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in lines]
        for estimator in self.estimators:
            summary = f"{estimator}: top pick {self.top(estimator)!r}"
            if self.true_values is not None:
                summary += (
                    f", regret {self.regret[estimator]:.4g}, Spearman {self.spearman[estimator]:.3f}, "
                    f"Kendall {self.kendall[estimator]:.3f}"
                )
            text.append(summary)
            computed = self.metrics.get(estimator, {})
            shown = [f"{name} {computed[name]:.4g}" for name in SELECTION_METRICS if name in computed]
            if shown:
                text.append(f"  {estimator} metrics (k={self.k}): " + ", ".join(shown))
        return "\n".join(text)

    def __str__(self) -> str:
        return self.table()


def _rank(values: np.ndarray) -> np.ndarray:
    """1 = highest; NaN last; ties share the better rank."""
    from scipy.stats import rankdata

    keyed = np.where(np.isfinite(values), -values, np.inf)
    return rankdata(keyed, method="min").astype(int)


def _correlations(values: np.ndarray, truth: np.ndarray) -> Tuple[float, float]:
    from scipy.stats import kendalltau, spearmanr

    ok = np.isfinite(values)
    if ok.sum() < 2 or np.ptp(values[ok]) == 0 or np.ptp(truth[ok]) == 0:
        return math.nan, math.nan
    return float(spearmanr(values[ok], truth[ok])[0]), float(kendalltau(values[ok], truth[ok])[0])


def _top_k(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` highest values (NaN lowest; ties: the earlier index)."""
    keyed = np.where(np.isfinite(values), -values, np.inf)
    return np.argsort(keyed, kind="stable")[:k]


def selection_metrics(
    estimates: Sequence[float],
    true_values: Sequence[float],
    *,
    k: int = 1,
    threshold: Optional[float] = None,
    behaviour_value: Optional[float] = None,
    metrics: Optional[Sequence[str]] = None,
) -> Dict[str, float]:
    """The selection metrics of the module docstring for one estimator.

    Args:
        estimates, true_values: ``(P,)`` per policy, in the same order.
        k: the size of the top-``k`` set, ``1 <= k <= P``.
        threshold: the safety threshold ``c`` of the type I / II rates.
        behaviour_value: ``V_b`` of SharpeRatio@k.
        metrics: names to compute (default: every one the arguments allow).

    Raises:
        ValueError: mismatched lengths, non-finite true values, ``k`` out of
            range, an unknown metric, or a metric asked for without the
            ``threshold`` / ``behaviour_value`` it needs.
    """
    v_hat = np.asarray(estimates, dtype=np.float64).reshape(-1)
    v = np.asarray(true_values, dtype=np.float64).reshape(-1)
    if v_hat.shape != v.shape or v.size == 0:
        raise ValueError(f"estimates has {v_hat.size} values, true_values {v.size}: give one of each per policy (at least one)")
    if not np.isfinite(v).all():
        i = int(np.argmax(~np.isfinite(v)))
        raise ValueError(f"true_values[{i}] is {v[i]}, expected a finite number")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= v.size:
        raise ValueError(f"k must be an int in [1, {v.size}] (the number of policies), got {k!r}")
    for name, value in (("threshold", threshold), ("behaviour_value", behaviour_value)):
        if value is not None and not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number or None, got {value!r}")
    if metrics is None:
        names = [m for m in SELECTION_METRICS if not (
            (m in ("type_i_error", "type_ii_error") and threshold is None)
            or (m == "sharpe_ratio_at_k" and behaviour_value is None)
        )]
    else:
        names = list(metrics)
        unknown = [m for m in names if m not in SELECTION_METRICS]
        if unknown:
            raise ValueError(f"unknown metrics {unknown}: expected names from {list(SELECTION_METRICS)}")
        if threshold is None and {"type_i_error", "type_ii_error"} & set(names):
            raise ValueError("type_i_error / type_ii_error need threshold=: the value that separates safe policies")
        if behaviour_value is None and "sharpe_ratio_at_k" in names:
            raise ValueError("sharpe_ratio_at_k needs behaviour_value=: the behaviour policy's true value")
    top = v[_top_k(v_hat, k)]
    out: Dict[str, float] = {}
    with np.errstate(divide="ignore", invalid="ignore"):
        for name in names:
            if name == "mse":
                out[name] = float(np.mean((v_hat - v) ** 2))
            elif name == "relative_error":
                out[name] = float(np.mean(np.abs(v_hat - v) / np.abs(v)))
            elif name in ("spearman", "kendall"):
                out["spearman"], out["kendall"] = _correlations(v_hat, v)
            elif name == "regret_at_k":
                out[name] = float(v.max() - top.max())
            elif name in ("type_i_error", "type_ii_error"):
                below = v < threshold
                safe = v_hat >= threshold  # NaN estimates are never deemed safe
                wrong = (below & safe) if name == "type_i_error" else (~below & ~safe)
                group = below if name == "type_i_error" else ~below
                out[name] = float(wrong.sum() / group.sum()) if group.any() else math.nan
            else:
                spread = float(top.std())
                out[name] = float((top.max() - behaviour_value) / spread) if spread > 0 else math.nan
    return {m: out[m] for m in names}


def _estimator_specs(estimators: EstimatorSpec) -> List[Tuple[str, Union[str, Callable[[Any, Any], Any]]]]:
    if isinstance(estimators, str):
        estimators = [estimators]
    items = list(estimators.items()) if isinstance(estimators, Mapping) else [(None, e) for e in estimators]
    if not items:
        raise ValueError("estimators is empty: name at least one of " + ", ".join(ESTIMATORS))
    specs = []
    for label, spec in items:
        if isinstance(spec, str):
            if spec not in ESTIMATORS:
                raise ValueError(f"unknown estimator {spec!r}: expected one of {list(ESTIMATORS)} or a callable")
            specs.append((label or ESTIMATORS[spec][0], spec))
        elif callable(spec) and label is not None:
            specs.append((label, spec))
        else:
            raise TypeError(
                f"an estimator must be one of {list(ESTIMATORS)}, or a callable (policy, dataset) -> result "
                f"given in a mapping under its label; got {spec!r}"
            )
    labels = [label for label, _ in specs]
    if len(set(labels)) != len(labels):
        raise ValueError(f"estimator labels must be distinct, got {labels}")
    return specs


def _shared_gamma(policies: Mapping[str, Any]) -> float:
    gammas = {name: float(p.gamma) for name, p in policies.items()
              if isinstance(p, (QLearningAlgoBase, SequencePolicy))}
    if len(set(gammas.values())) > 1:
        raise ValueError(f"the policies have different gammas {gammas}: pass gamma= to compare them on one")
    return next(iter(gammas.values())) if gammas else 0.99


def select_policies(
    policies: Mapping[str, Any],
    dataset: Any,
    estimators: EstimatorSpec = ("wis", "wpdis"),
    *,
    q_models: Optional[Mapping[str, Any]] = None,
    true_values: Optional[Mapping[str, float]] = None,
    k: Optional[int] = None,
    threshold: Optional[float] = None,
    behaviour_value: Optional[float] = None,
    metrics: Optional[Sequence[str]] = None,
    ratio_model: Any = None,
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
) -> PolicySelection:
    """Rank ``policies`` on ``dataset`` with each estimator.

    Args:
        policies: name -> target policy (a built offrl algorithm, a
            ``SequencePolicy(algo, target_return=...)`` or a callable, as for
            :func:`~offrl.ope.estimate_policy_value`).
        dataset: the logged data (ReplayBuffer / MDPDataset or episodes).
        estimators: names from ``"is"``, ``"wis"``, ``"pdis"``, ``"wpdis"``,
            ``"dr"``, ``"wdr"``, ``"mis"``, ``"wmis"``, ``"mdr"`` (the marginal
            ones train a default DualDICE ratio model per policy); or a mapping label -> name or callable
            ``(policy, dataset) -> result`` (anything with ``value`` and
            optionally ``lower``/``upper``, e.g. an FQE's
            ``estimate_policy_value``).
        q_models: name -> Q model of that policy, needed by ``"dr"``/``"wdr"``/``"mdr"``.
        true_values: name -> true value, for rank correlation, regret and
            :attr:`PolicySelection.metrics`.
        k: the top-``k`` set of regret@k and SharpeRatio@k (default:
            ``min(3, number of policies)``).
        threshold: the safety threshold of the type I / II error rates.
        behaviour_value: the behaviour policy's true value (SharpeRatio@k).
        metrics: the selection metrics to compute (default: every one the
            arguments allow; see the module docstring).
        ratio_model: the marginal estimators' density ratios: None (a
            default DualDICE model per policy), a
            :class:`~offrl.ope.marginal.DensityRatioConfig` (one model per
            policy with it), or a mapping name -> fitted model or callable
            (as ``ratio_model`` of :func:`~offrl.ope.estimate_policy_value`).
        gamma: discount (default: the algorithms' shared ``gamma``, else 0.99).
        ci: the interval of every named estimator: ``"bootstrap"``,
            ``"hoeffding"``, ``"bernstein"`` or ``"ttest"`` (see
            :mod:`offrl.ope.bounds` for their assumptions).
        value_range: ``(low, high)`` for ``"hoeffding"`` / ``"bernstein"``:
            one a-priori bound used for every named estimator, so it must
            bound each estimator's per-episode terms (see ``value_range`` of
            :func:`~offrl.ope.estimate_policy_value`); an episode outside it
            is a ``ValueError``.
        Callable estimators are called as ``spec(policy, dataset)`` and keep
        their own interval: ``ci`` and ``value_range`` do not reach them. An
        FQE's :meth:`~offrl.algos.FQE.estimate_policy_value` offers only a
        percentile bootstrap over the initial states (its ``confidence``
        and ``n_bootstrap``), so an FQE column is bootstrapped whatever
        ``ci`` says.
        The other arguments are those of :func:`~offrl.ope.estimate_policy_value`.
    """
    if not isinstance(policies, Mapping) or not policies:
        raise ValueError("policies must be a non-empty mapping of name -> policy")
    if not all(isinstance(name, str) for name in policies):
        raise TypeError(f"policy names must be strings, got {[type(n).__name__ for n in policies]}")
    names = tuple(policies)
    specs = _estimator_specs(estimators)
    for name, policy in policies.items():
        check_built(policy, f"policy {name!r}")
        as_sequence_policy(policy, role=f"policy {name!r}")  # a bare sequence model needs its target_return
    needs_model = any(isinstance(spec, str) and ESTIMATORS[spec][1] for _, spec in specs)
    if needs_model:
        missing = [name for name in policies if q_models is None or name not in q_models]
        if missing:
            raise ValueError(f"DR/WDR need q_models for every policy; missing for {missing}")
    truth = None
    if true_values is not None:
        missing = [name for name in policies if name not in true_values]
        if missing:
            raise ValueError(f"true_values has no value for {missing}")
        truth = {name: float(true_values[name]) for name in policies}
    elif threshold is not None or behaviour_value is not None or metrics is not None:
        raise ValueError("threshold, behaviour_value and metrics need true_values: the selection metrics compare with them")
    k = min(3, len(names)) if k is None else k
    if truth is not None:  # check the metric arguments before any estimate is computed
        selection_metrics(np.zeros(len(names)), np.array(list(truth.values())), k=k, threshold=threshold,
                          behaviour_value=behaviour_value, metrics=metrics)
    gamma = _shared_gamma(policies) if gamma is None else float(gamma)
    check_options(gamma, clip, confidence, n_bootstrap, min_effective_sample_size, epsilon, bandwidth, batch_size,
                  n_action_samples)
    check_ci(ci, value_range)
    if value_range is not None:
        value_range = parse_value_range(value_range)

    results: Dict[str, Dict[str, Any]] = {label: {} for label, _ in specs}
    if isinstance(ratio_model, Mapping):
        missing = [name for name in policies if name not in ratio_model]
        if missing and any(isinstance(spec, str) and spec in MARGINAL_ESTIMATORS for _, spec in specs):
            raise ValueError(f"ratio_model has no ratio model for {missing}")
    for label, spec in specs:
        if isinstance(spec, str) and spec in MARGINAL_ESTIMATORS:  # learned density ratios, no behaviour policy
            for name, policy in policies.items():
                results[label][name] = estimate_marginal_value(
                    policy, dataset, spec, q_models[name] if ESTIMATORS[spec][1] else None, gamma=gamma, clip=clip,
                    ratio_model=ratio_model[name] if isinstance(ratio_model, Mapping) else ratio_model,
                    confidence=confidence, n_bootstrap=n_bootstrap, seed=seed,
                    min_effective_sample_size=min_effective_sample_size, greedy=greedy, epsilon=epsilon,
                    bandwidth=bandwidth, n_action_samples=n_action_samples, batch_size=batch_size,
                    ci=ci, value_range=value_range,
                )
    if any(isinstance(spec, str) and spec not in MARGINAL_ESTIMATORS for _, spec in specs):
        data = logged_data(dataset)
        mu, behaviour = resolve_behaviour(data, behaviour_probabilities, behaviour_policy, seed)
        for name, policy in policies.items():
            prepared = prepare(
                policy, data, mu, behaviour, q_model=q_models[name] if needs_model else None, gamma=gamma,
                greedy=greedy, epsilon=epsilon, bandwidth=bandwidth, n_action_samples=n_action_samples,
                seed=seed, batch_size=batch_size,
            )
            for label, spec in specs:
                if isinstance(spec, str) and spec not in MARGINAL_ESTIMATORS:
                    results[label][name] = estimate_prepared(
                        spec, prepared, clip=clip, confidence=confidence, n_bootstrap=n_bootstrap, seed=seed,
                        min_effective_sample_size=min_effective_sample_size, ci=ci, value_range=value_range,
                    )
    for label, spec in specs:
        if not isinstance(spec, str):
            for name, policy in policies.items():
                result = spec(policy, dataset)
                if not hasattr(result, "value"):
                    raise TypeError(f"estimator {label!r} returned a {type(result).__name__} without a value attribute")
                results[label][name] = result

    labels = tuple(label for label, _ in specs)
    ranks: Dict[str, Dict[str, int]] = {}
    spearman: Dict[str, float] = {}
    kendall: Dict[str, float] = {}
    regret: Dict[str, float] = {}
    selection: Dict[str, Dict[str, float]] = {}
    for label in labels:
        values = np.array([float(results[label][name].value) for name in names])
        ranks[label] = dict(zip(names, (int(r) for r in _rank(values))))
        if truth is not None:
            truth_array = np.array([truth[name] for name in names])
            spearman[label], kendall[label] = _correlations(values, truth_array)
            top = min(names, key=lambda name: ranks[label][name])
            regret[label] = float(truth_array.max() - truth[top])
            selection[label] = selection_metrics(values, truth_array, k=k, threshold=threshold,
                                                 behaviour_value=behaviour_value, metrics=metrics)
    return PolicySelection(names, labels, results, ranks, truth, spearman, kendall, regret, selection,
                           k if truth is not None else None, threshold, behaviour_value, ci,
                           None if ci in ("bootstrap", "ttest") else value_range)
