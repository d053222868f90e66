"""d3rlpy's ``d3rlpy.dataset.components`` import path, as an alias: the same
objects as :mod:`offrl.dataset` (offrl keeps them in other modules), so
``from offrl.dataset.components import ...`` works as in d3rlpy 2.8.1."""

from .episode import Episode, EpisodeBase, PartialTrajectory, Transition
from .replay_buffer import DatasetInfo
from .signature import Signature

__all__ = ["Signature", "Transition", "PartialTrajectory", "EpisodeBase", "Episode", "DatasetInfo"]
