"""Network building blocks: encoders, Q-function ensembles, policies; d3rlpy's builders of its torch
layer (``create_*``, :mod:`offrl.models.builders`, building :mod:`offrl.models.torch`'s modules); the
optimizer factories of :mod:`offrl.optimizers` are re-exported here."""

from . import builders, encoders, q_functions
from .builders import *  # noqa: F403 - d3rlpy's create_* builders of its torch layer (offrl.models.torch), listed in __all__
from .encoders import *  # noqa: F403
from .q_functions import *  # noqa: F403
from .mmd import mmd, mmd_squared
from .perturbation import PerturbationActor, create_perturbation_actor
from .vae import ConditionalVAE, VAEDecoder, VAEEncoder, create_conditional_vae
from ..optimizers import AdamFactory, GPTAdamWFactory, OptimizerFactory, RMSpropFactory, SGDFactory

__all__ = [*encoders.__all__, *q_functions.__all__]
__all__ += [
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
__all__ += builders.__all__
