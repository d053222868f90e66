"""d3rlpy's torch implementation layer (``d3rlpy.models.torch``), on which
d3rlpy users write their own algorithms: encoders, policies returning
:class:`ActionOutput`, Q-functions returning :class:`QFunctionOutput` with
their "forwarders" and ensemble forwarders, action distributions, the
conditional VAE and imitation losses, value functions, learnable
parameters and Decision Transformer modules, with d3rlpy 2.8.1's module
paths, class names, constructor arguments and outputs.
:mod:`offrl.models.builders` builds them as d3rlpy's builders do.

The encoders are offrl's own (its factories return them; see
:mod:`offrl.models.torch.encoders`), and so are the Decision Transformer
networks under d3rlpy's signatures. The policies, Q-functions, VAE and
value function here are d3rlpy-shaped modules for code written against
d3rlpy; offrl's built-in algorithms keep their own networks (batched
critic ensembles, :mod:`offrl.models.policies`), which are faster and
whose model files do not change.
"""

from .distributions import Distribution, GaussianDistribution, SquashedGaussianDistribution
from .encoders import (
    Encoder,
    EncoderWithAction,
    PixelEncoder,
    PixelEncoderWithAction,
    SimBaEncoder,
    SimBaEncoderWithAction,
    VectorEncoder,
    VectorEncoderWithAction,
    compute_output_size,
)
from .imitators import (
    DiscreteImitationLoss,
    ImitationLoss,
    VAEDecoder,
    VAEEncoder,
    compute_deterministic_imitation_loss,
    compute_discrete_imitation_loss,
    compute_stochastic_imitation_loss,
    compute_vae_error,
    forward_vae_sample,
    forward_vae_sample_n,
)
from .parameters import Parameter, get_parameter
from .policies import (
    ActionOutput,
    CategoricalPolicy,
    DeterministicPolicy,
    DeterministicResidualPolicy,
    NormalPolicy,
    Policy,
    build_gaussian_distribution,
    build_squashed_gaussian_distribution,
)
from .q_functions import (
    ContinuousEnsembleQFunctionForwarder,
    ContinuousIQNQFunction,
    ContinuousIQNQFunctionForwarder,
    ContinuousMeanQFunction,
    ContinuousMeanQFunctionForwarder,
    ContinuousQFunction,
    ContinuousQFunctionForwarder,
    ContinuousQRQFunction,
    ContinuousQRQFunctionForwarder,
    DiscreteEnsembleQFunctionForwarder,
    DiscreteIQNQFunction,
    DiscreteIQNQFunctionForwarder,
    DiscreteMeanQFunction,
    DiscreteMeanQFunctionForwarder,
    DiscreteQFunction,
    DiscreteQFunctionForwarder,
    DiscreteQRQFunction,
    DiscreteQRQFunctionForwarder,
    QFunctionOutput,
    compute_ensemble_q_function_error,
    compute_ensemble_q_function_target,
    compute_huber_loss,
    compute_max_with_n_actions,
    compute_max_with_n_actions_and_indices,
    compute_quantile_huber_loss,
    compute_quantile_loss,
    compute_reduce,
    pick_quantile_value_by_action,
    pick_value_by_action,
)
from .transformers import (
    ContinuousDecisionTransformer,
    DiscreteDecisionTransformer,
    GlobalPositionEncoding,
    PositionEncoding,
    SimplePositionEncoding,
)
from .v_functions import ValueFunction, compute_v_function_error

__all__ = [
    "Distribution", "GaussianDistribution", "SquashedGaussianDistribution",
    "Encoder", "EncoderWithAction", "PixelEncoder", "PixelEncoderWithAction", "VectorEncoder",
    "VectorEncoderWithAction", "SimBaEncoder", "SimBaEncoderWithAction", "compute_output_size",
    "VAEEncoder", "VAEDecoder", "forward_vae_sample", "forward_vae_sample_n", "compute_vae_error",
    "compute_discrete_imitation_loss", "compute_deterministic_imitation_loss", "compute_stochastic_imitation_loss",
    "ImitationLoss", "DiscreteImitationLoss",
    "Parameter", "get_parameter",
    "ActionOutput", "Policy", "DeterministicPolicy", "DeterministicResidualPolicy", "NormalPolicy",
    "CategoricalPolicy", "build_gaussian_distribution", "build_squashed_gaussian_distribution",
    "QFunctionOutput", "ContinuousQFunction", "DiscreteQFunction", "ContinuousQFunctionForwarder",
    "DiscreteQFunctionForwarder", "DiscreteEnsembleQFunctionForwarder", "ContinuousEnsembleQFunctionForwarder",
    "compute_ensemble_q_function_error", "compute_ensemble_q_function_target", "compute_max_with_n_actions",
    "compute_max_with_n_actions_and_indices", "DiscreteMeanQFunction", "ContinuousMeanQFunction",
    "DiscreteMeanQFunctionForwarder", "ContinuousMeanQFunctionForwarder", "DiscreteQRQFunction",
    "ContinuousQRQFunction", "DiscreteQRQFunctionForwarder", "ContinuousQRQFunctionForwarder",
    "DiscreteIQNQFunction", "ContinuousIQNQFunction", "DiscreteIQNQFunctionForwarder",
    "ContinuousIQNQFunctionForwarder", "pick_value_by_action", "pick_quantile_value_by_action",
    "compute_huber_loss", "compute_quantile_huber_loss", "compute_quantile_loss", "compute_reduce",
    "ContinuousDecisionTransformer", "DiscreteDecisionTransformer", "PositionEncoding", "SimplePositionEncoding",
    "GlobalPositionEncoding",
    "ValueFunction", "compute_v_function_error",
]
