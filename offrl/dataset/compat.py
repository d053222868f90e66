"""d3rlpy's ``d3rlpy.dataset.compat`` import path, as an alias: the same
objects as :mod:`offrl.dataset` (offrl keeps them in other modules), so
``from offrl.dataset.compat import ...`` works as in d3rlpy 2.8.1."""

from .replay_buffer import MDPDataset

__all__ = ["MDPDataset"]
