"""The optimizer factories under their :mod:`offrl.models` path: the classes
of :mod:`offrl.optimizers`, defined in :mod:`offrl.optimizers.optimizers`."""

from ..optimizers import AdamFactory, GPTAdamWFactory, OptimizerFactory, OptimizerWrapper, RMSpropFactory, SGDFactory

__all__ = ["OptimizerFactory", "SGDFactory", "AdamFactory", "RMSpropFactory", "GPTAdamWFactory", "OptimizerWrapper"]
