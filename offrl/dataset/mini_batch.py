"""d3rlpy's ``d3rlpy.dataset.mini_batch`` import path, as an alias: the same
objects as :mod:`offrl.dataset` (offrl keeps them in other modules), so
``from offrl.dataset.mini_batch import ...`` works as in d3rlpy 2.8.1."""

from .batch import TrajectoryMiniBatch, TransitionMiniBatch

__all__ = ["TransitionMiniBatch", "TrajectoryMiniBatch"]
