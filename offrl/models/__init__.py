"""Network building blocks: encoders, Q-function ensembles, policies; d3rlpy's builders of its torch
layer (``create_*``, :mod:`offrl.models.builders`, building :mod:`offrl.models.torch`'s modules); the
optimizer factories of :mod:`offrl.optimizers` are re-exported here."""

from .encoders import (
    ByShapeEncoderFactory,
    DefaultEncoderFactory,
    DictEncoderFactory,
    EncoderFactory,
    PixelEncoderFactory,
    VectorEncoderFactory,
    compute_output_size,
    register_encoder_factory,
)
from .mmd import mmd, mmd_squared
from .perturbation import PerturbationActor, create_perturbation_actor
from .vae import ConditionalVAE, VAEDecoder, VAEEncoder, create_conditional_vae
from ..optimizers import AdamFactory, GPTAdamWFactory, OptimizerFactory, RMSpropFactory, SGDFactory
from .simba import SimBaEncoderFactory
from .q_functions import IQNQFunctionFactory, MeanQFunctionFactory, QFunction, QFunctionFactory, QRQFunctionFactory
from .builders import (
    create_categorical_policy,
    create_continuous_decision_transformer,
    create_continuous_q_function,
    create_deterministic_policy,
    create_deterministic_residual_policy,
    create_discrete_decision_transformer,
    create_discrete_q_function,
    create_normal_policy,
    create_parameter,
    create_vae_decoder,
    create_vae_encoder,
    create_value_function,
)

__all__ = [
    "EncoderFactory",
    "VectorEncoderFactory",
    "PixelEncoderFactory",
    "DefaultEncoderFactory",
    "ByShapeEncoderFactory",
    "DictEncoderFactory",
    "SimBaEncoderFactory",
    "register_encoder_factory",
    "compute_output_size",
    "QFunctionFactory",
    "MeanQFunctionFactory",
    "QRQFunctionFactory",
    "IQNQFunctionFactory",
    "QFunction",
    "OptimizerFactory",
    "SGDFactory",
    "AdamFactory",
    "RMSpropFactory",
    "GPTAdamWFactory",
    "ConditionalVAE",
    "VAEEncoder",
    "VAEDecoder",
    "create_conditional_vae",
    "PerturbationActor",
    "create_perturbation_actor",
    "mmd",
    "mmd_squared",
    # d3rlpy's builders of its torch layer (offrl.models.torch)
    "create_discrete_q_function",
    "create_continuous_q_function",
    "create_deterministic_policy",
    "create_deterministic_residual_policy",
    "create_categorical_policy",
    "create_normal_policy",
    "create_vae_encoder",
    "create_vae_decoder",
    "create_value_function",
    "create_parameter",
    "create_continuous_decision_transformer",
    "create_discrete_decision_transformer",
]
