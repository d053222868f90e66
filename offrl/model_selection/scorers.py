"""How an offline search scores a checkpoint on the held-out episodes.

A scorer is a name or a callable. The names:

| name | score | interval | reliable when |
|---|---|---|---|
| ``"fqe"`` | FQE's ``V(s0)`` (an FQE trained on the held-out episodes, early stopping) | bootstrap over initial states | the FQE run settled (``converged``) |
| ``"is"``, ``"wis"``, ``"pdis"``, ``"wpdis"`` | importance sampling (:func:`offrl.ope.estimate_policy_value`) | ``ci=`` of ``ope_options`` | ``OPEResult.reliable`` (effective sample size, clipping) |
| ``"dr"``, ``"wdr"`` | doubly robust, with the candidate's FQE as its model | as above | as above |
| ``"mis"``, ``"wmis"``, ``"mdr"`` | marginal importance sampling (a DualDICE ratio per candidate) | as above | as above |
| ``"init_value"``, ``"average_value"``, ``"action_match"`` | the metric evaluators of :mod:`offrl.metrics` | none | always |
| ``"neg_td_error"``, ``"neg_action_diff"`` | minus the TD error / action difference (higher is better) | none | always |

The importance-sampling family needs the behaviour policy's probabilities:
the held-out data's logged ``behaviour_probabilities`` when it has them,
else a behaviour model fitted once on the held-out episodes and shared by
every candidate (:func:`offrl.ope.estimate_behaviour_policy`).

A callable is called as ``scorer(algo, test_dataset)`` and returns a
number, or an object with ``value`` and optionally ``lower``, ``upper``,
``reliable`` (an ``OPEResult``, a ``PolicyValueEstimate`` (whose
``converged`` counts as ``reliable``), anything alike). Every score is
"higher is better". An evaluator object (``SoftOPCEvaluator(180.0)``) is
such a callable.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ..constants import ActionSpace

__all__ = ["SCORERS", "Score", "Scorers", "resolve_scorers"]

_IS_FAMILY = ("is", "wis", "pdis", "wpdis", "dr", "wdr")
_MARGINAL = ("mis", "wmis", "mdr")
_NEEDS_Q = ("dr", "wdr", "mdr")
#: metric evaluators by name: (class name in offrl.metrics, sign)
_EVALUATORS = {
    "init_value": ("InitialStateValueEstimationEvaluator", 1.0),
    "average_value": ("AverageValueEstimationEvaluator", 1.0),
    "action_match": ("DiscreteActionMatchEvaluator", 1.0),
    "neg_td_error": ("TDErrorEvaluator", -1.0),
    "neg_action_diff": ("ContinuousActionDiffEvaluator", -1.0),
}
#: every scorer name
SCORERS: Tuple[str, ...] = ("fqe",) + _IS_FAMILY + _MARGINAL + tuple(_EVALUATORS)
#: scorers whose result has a confidence interval
_WITH_INTERVAL = ("fqe",) + _IS_FAMILY + _MARGINAL

ScorerSpec = Union[str, Callable[[Any, Any], Any]]


@dataclasses.dataclass
class Score:
    """One scorer's judgement of one checkpoint (``lower``/``upper`` NaN
    without an interval)."""

    value: float
    lower: float = math.nan
    upper: float = math.nan
    reliable: bool = True
    details: Dict[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, result: Any, label: str) -> "Score":
        """From whatever a callable scorer returned."""
        if isinstance(result, (int, float, np.integer, np.floating)) and not isinstance(result, bool):
            return cls(float(result))
        if not hasattr(result, "value"):
            raise TypeError(f"scorer {label!r} returned a {type(result).__name__}: expected a number or an object "
                            "with a value attribute (and optionally lower, upper, reliable)")
        reliable = getattr(result, "reliable", None)
        details: Dict[str, Any] = {}
        if reliable is None and hasattr(result, "converged"):
            reliable = bool(result.converged)
            details["converged"] = reliable
        return cls(float(result.value), float(getattr(result, "lower", math.nan)),
                   float(getattr(result, "upper", math.nan)), True if reliable is None else bool(reliable), details)


def _label_of(spec: Any) -> str:
    return getattr(spec, "__name__", None) or type(spec).__name__


def resolve_scorers(scorer: Any) -> List[Tuple[str, ScorerSpec]]:
    """``[(label, name or callable), ...]`` of a scorer argument: a name, a
    callable, a sequence of them, or a mapping label -> name or callable."""
    if isinstance(scorer, str) or callable(scorer):
        items: List[Tuple[Optional[str], Any]] = [(None, scorer)]
    elif isinstance(scorer, Mapping):
        items = list(scorer.items())
    elif isinstance(scorer, Sequence):
        items = [(None, s) for s in scorer]
    else:
        raise TypeError(f"scorer must be a name, a callable (algo, dataset) -> score, or a list or dict of them; "
                        f"got {type(scorer).__name__}")
    if not items:
        raise ValueError(f"scorer is empty: give at least one of {list(SCORERS)} or a callable")
    out: List[Tuple[str, ScorerSpec]] = []
    for label, spec in items:
        if isinstance(spec, str):
            if spec not in SCORERS:
                raise ValueError(f"scorer {spec!r} is not one of {list(SCORERS)} (or give a callable)")
        elif not callable(spec):
            raise TypeError(f"scorer {label or spec!r} must be a name from {list(SCORERS)} or a callable, "
                            f"got {type(spec).__name__}")
        if label is not None and (not isinstance(label, str) or not label.isidentifier()):
            raise ValueError(f"scorer labels must be identifiers (they name result columns), got {label!r}")
        out.append((label or (spec if isinstance(spec, str) else _label_of(spec)), spec))
    labels = [label for label, _ in out]
    if len(set(labels)) != len(labels):
        raise ValueError(f"scorer labels must be distinct, got {labels}: give a dict label -> scorer")
    return out


def has_interval(spec: ScorerSpec) -> Optional[bool]:
    """Whether a scorer gives an interval (None: a callable, not known before it runs)."""
    if isinstance(spec, str):
        return spec in _WITH_INTERVAL
    return None


DEFAULT_FQE_MEMBERS = 3


def default_fqe_config(discrete: bool, n_steps: int) -> Any:
    """FQE's ``recommended()`` config with :data:`DEFAULT_FQE_MEMBERS`
    independent members (``n_critics=3, independent_critics=True``: the
    estimate is their mean, the interval includes their spread), its weight
    average's lag (about ``1 / (1 - ema_decay)`` updates) held to a tenth of
    ``n_steps``.

    Why members: two FQE runs of one policy can differ by more than two
    candidates do, and one run then orders close leaders by chance; the
    members average that spread out and widen the interval where they
    disagree, which is what ``choose_by="lower"`` (the search's default with
    this scorer) uses. Measured in ``benchmarks/model_selection.py``; three
    members cost about three times one FQE."""
    from ..ope import DiscreteFQEConfig, FQEConfig

    decay = min(0.9995, 1.0 - 10.0 / max(n_steps, 20))
    return (DiscreteFQEConfig if discrete else FQEConfig).recommended(
        ema_decay=decay, n_critics=DEFAULT_FQE_MEMBERS, independent_critics=True)


class Scorers:
    """Scores checkpoints on the held-out ``test`` episodes (the FQE of
    ``"fqe"`` / ``"dr"`` / ``"wdr"`` / ``"mdr"`` is trained once per
    checkpoint and shared; the behaviour model once per search process)."""

    def __init__(self, specs: Sequence[Tuple[str, ScorerSpec]], test: Any, *, fqe_config: Any = None,
                 fqe_steps: int = 10000, fqe_steps_per_epoch: int = 1000, ratio_config: Any = None,
                 ope_options: Optional[Mapping[str, Any]] = None, device: Any = False) -> None:
        self.specs = list(specs)
        self.test = test
        self.discrete = test.dataset_info.action_space == ActionSpace.DISCRETE
        self.fqe_steps = int(fqe_steps)
        self.fqe_steps_per_epoch = int(min(fqe_steps_per_epoch, fqe_steps))
        self.fqe_config = fqe_config if fqe_config is not None else default_fqe_config(self.discrete, self.fqe_steps)
        self.ratio_config = ratio_config
        self.ope_options = dict(ope_options or {})
        self.device = device
        self._behaviour: Any = None
        self._evaluators: Dict[str, Any] = {}
        self.names = {spec for _, spec in self.specs if isinstance(spec, str)}
        self.needs_fqe = bool(self.names & ({"fqe"} | set(_NEEDS_Q)))

    def setup(self) -> Dict[str, Any]:
        """What decides the scores besides the candidates (the FQE, the ratio
        model, the estimators' options), recorded with a study so that a
        continued search never mixes candidates scored in different ways."""
        out: Dict[str, Any] = {"ope_options": dict(self.ope_options)}
        if self.needs_fqe:
            out["fqe"] = {"config": self.fqe_config.to_dict(), "steps": self.fqe_steps,
                          "steps_per_epoch": self.fqe_steps_per_epoch}
        if self.names & set(_MARGINAL):
            out["ratio_config"] = repr(self.ratio_config)  # a dataclass: its repr lists every field
        return out

    def _behaviour_policy(self) -> Any:
        if self._behaviour is None:
            from ..ope import estimate_behaviour_policy

            if getattr(self.test, "behaviour_probabilities", None) is not None:
                self._behaviour = False  # the logged probabilities are used
            else:
                self._behaviour = estimate_behaviour_policy(self.test, seed=0)
        return self._behaviour or None

    def _fqe(self, algo: Any) -> Any:
        from ..logging import NoopAdapterFactory
        from ..ope import DiscreteFQE, FQE

        cls = DiscreteFQE if self.discrete else FQE
        fqe = cls(algo=algo, config=self.fqe_config, device=self.device)
        fqe.fit(self.test, n_steps=self.fqe_steps, n_steps_per_epoch=self.fqe_steps_per_epoch,
                logger_adapter=NoopAdapterFactory(), show_progress=False, early_stopping=True)
        return fqe

    def _evaluator(self, name: str) -> Any:
        if name not in self._evaluators:
            from .. import metrics

            self._evaluators[name] = getattr(metrics, _EVALUATORS[name][0])(episodes=self.test.episodes)
        return self._evaluators[name]

    def score(self, algo: Any) -> Dict[str, Score]:
        """Every scorer's :class:`Score` of ``algo``, by label."""
        from ..ope import estimate_policy_value

        fqe = self._fqe(algo) if self.needs_fqe else None
        options = {"n_bootstrap": 1000, "seed": 0, **self.ope_options}
        out: Dict[str, Score] = {}
        for label, spec in self.specs:
            if not isinstance(spec, str):
                out[label] = Score.of(spec(algo, self.test), label)
            elif spec == "fqe":
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    estimate = fqe.estimate_policy_value(self.test, n_bootstrap=int(options["n_bootstrap"]),
                                                         seed=int(options["seed"]))
                out[label] = Score(estimate.value, estimate.lower, estimate.upper, bool(estimate.converged), {
                    "converged": bool(estimate.converged), "value_change": float(estimate.value_change),
                    "off_support": float(estimate.off_support),
                    "fqe_steps": int(fqe.grad_step),
                    "warnings": "; ".join(str(w.message).split(":")[0] for w in caught),
                })
            elif spec in _EVALUATORS:
                sign = _EVALUATORS[spec][1]
                out[label] = Score(sign * float(self._evaluator(spec)(algo, self.test)))
            else:
                kwargs = dict(options)
                if spec in _MARGINAL:
                    kwargs["ratio_model"] = self.ratio_config
                else:
                    kwargs["behaviour_policy"] = self._behaviour_policy()
                result = estimate_policy_value(algo, self.test, spec, q_model=fqe if spec in _NEEDS_Q else None,
                                               **kwargs)
                out[label] = Score(result.value, result.lower, result.upper, bool(result.reliable), {
                    "effective_sample_size": float(result.effective_sample_size),
                    "warnings": "; ".join(result.warnings),
                })
        return out
