"""Network building blocks: encoders, Q-function ensembles, policies; the optimizer factories of
:mod:`offrl.optimizers` are re-exported here."""

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
]
