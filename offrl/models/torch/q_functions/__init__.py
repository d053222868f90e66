"""d3rlpy's Q-function modules and forwarders (``d3rlpy.models.torch.q_functions``)."""

from .base import (
    ContinuousQFunction,
    ContinuousQFunctionForwarder,
    DiscreteQFunction,
    DiscreteQFunctionForwarder,
    QFunctionOutput,
)
from .ensemble_q_function import (
    ContinuousEnsembleQFunctionForwarder,
    DiscreteEnsembleQFunctionForwarder,
    compute_ensemble_q_function_error,
    compute_ensemble_q_function_target,
    compute_max_with_n_actions,
    compute_max_with_n_actions_and_indices,
)
from .iqn_q_function import (
    ContinuousIQNQFunction,
    ContinuousIQNQFunctionForwarder,
    DiscreteIQNQFunction,
    DiscreteIQNQFunctionForwarder,
)
from .mean_q_function import (
    ContinuousMeanQFunction,
    ContinuousMeanQFunctionForwarder,
    DiscreteMeanQFunction,
    DiscreteMeanQFunctionForwarder,
)
from .qr_q_function import (
    ContinuousQRQFunction,
    ContinuousQRQFunctionForwarder,
    DiscreteQRQFunction,
    DiscreteQRQFunctionForwarder,
)
from .utility import (
    compute_huber_loss,
    compute_quantile_huber_loss,
    compute_quantile_loss,
    compute_reduce,
    pick_quantile_value_by_action,
    pick_value_by_action,
)

__all__ = [
    "QFunctionOutput",
    "ContinuousQFunction",
    "DiscreteQFunction",
    "ContinuousQFunctionForwarder",
    "DiscreteQFunctionForwarder",
    "DiscreteEnsembleQFunctionForwarder",
    "ContinuousEnsembleQFunctionForwarder",
    "compute_ensemble_q_function_error",
    "compute_ensemble_q_function_target",
    "compute_max_with_n_actions",
    "compute_max_with_n_actions_and_indices",
    "DiscreteMeanQFunction",
    "ContinuousMeanQFunction",
    "DiscreteMeanQFunctionForwarder",
    "ContinuousMeanQFunctionForwarder",
    "DiscreteQRQFunction",
    "ContinuousQRQFunction",
    "DiscreteQRQFunctionForwarder",
    "ContinuousQRQFunctionForwarder",
    "DiscreteIQNQFunction",
    "ContinuousIQNQFunction",
    "DiscreteIQNQFunctionForwarder",
    "ContinuousIQNQFunctionForwarder",
    "pick_value_by_action",
    "pick_quantile_value_by_action",
    "compute_huber_loss",
    "compute_quantile_huber_loss",
    "compute_quantile_loss",
    "compute_reduce",
]
