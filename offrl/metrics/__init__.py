"""Metric evaluators for ``fit(evaluators={...})`` and on their own, and
rolling a policy out in an environment (d3rlpy 2.x API)."""

from .evaluators import (
    AverageValueEstimationEvaluator,
    CompareContinuousActionDiffEvaluator,
    CompareDiscreteActionMatchEvaluator,
    ContinuousActionDiffEvaluator,
    DiscountedSumOfAdvantageEvaluator,
    DiscreteActionMatchEvaluator,
    EnvironmentEvaluator,
    EvaluatorProtocol,
    InitialStateValueEstimationEvaluator,
    SoftOPCEvaluator,
    TDErrorEvaluator,
    make_batches,
)
from .utility import evaluate_qlearning_with_environment, evaluate_transformer_with_environment, rollout_returns

__all__ = [
    "EvaluatorProtocol",
    "TDErrorEvaluator",
    "DiscountedSumOfAdvantageEvaluator",
    "AverageValueEstimationEvaluator",
    "InitialStateValueEstimationEvaluator",
    "SoftOPCEvaluator",
    "ContinuousActionDiffEvaluator",
    "DiscreteActionMatchEvaluator",
    "CompareContinuousActionDiffEvaluator",
    "CompareDiscreteActionMatchEvaluator",
    "EnvironmentEvaluator",
    "make_batches",
    "evaluate_qlearning_with_environment",
    "evaluate_transformer_with_environment",
    "rollout_returns",
]
