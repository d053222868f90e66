"""Off-policy evaluation: the value of a trained policy from logged data."""

from .fqe import DiscreteFQE, DiscreteFQEConfig, FQE, FQEConfig, PolicyValueEstimate, initial_observations
from .behaviour import (
    AlgoBehaviourPolicy,
    BehaviourModel,
    ClassifierBehaviourPolicy,
    GaussianBehaviourPolicy,
    estimate_behaviour_policy,
)
from .importance import (
    ESTIMATORS,
    OPEResult,
    doubly_robust,
    estimate_policy_value,
    importance_sampling,
    per_decision_importance_sampling,
    weighted_doubly_robust,
    weighted_importance_sampling,
    weighted_per_decision_importance_sampling,
)
from .marginal import DensityRatioConfig, DensityRatioModel, estimate_marginal_value, fit_density_ratio
from .selection import PolicySelection, select_policies, selection_metrics
from .distributional import ReturnDistribution, estimate_return_distribution
from ..metrics.sequence import SequencePolicy

__all__ = [
    "DiscreteFQE",
    "DiscreteFQEConfig",
    "FQE",
    "FQEConfig",
    "PolicyValueEstimate",
    "initial_observations",
    "AlgoBehaviourPolicy",
    "BehaviourModel",
    "ClassifierBehaviourPolicy",
    "GaussianBehaviourPolicy",
    "estimate_behaviour_policy",
    "ESTIMATORS",
    "OPEResult",
    "doubly_robust",
    "estimate_policy_value",
    "importance_sampling",
    "per_decision_importance_sampling",
    "weighted_doubly_robust",
    "weighted_importance_sampling",
    "weighted_per_decision_importance_sampling",
    "DensityRatioConfig",
    "DensityRatioModel",
    "estimate_marginal_value",
    "fit_density_ratio",
    "PolicySelection",
    "select_policies",
    "selection_metrics",
    "ReturnDistribution",
    "estimate_return_distribution",
    "SequencePolicy",
]
