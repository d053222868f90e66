"""Offline model selection: choose a config, a seed and a checkpoint from
logged data, scored by off-policy evaluation on held-out episodes
(:class:`OfflineSearch`; needs ``pip install 'offrl[search]'``)."""

from .scorers import SCORERS, Score
from .search import OfflineSearch
from .space import SearchSpace, space_from_json

__all__ = ["OfflineSearch", "SCORERS", "Score", "SearchSpace", "space_from_json"]
