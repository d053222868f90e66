"""offrl: offline-first reinforcement learning.

Fit a policy on logged decisions with a scikit-learn-like API, judge it
without touching the real system, and export it to run anywhere.
"""

from . import dataset
from ._random import seed
from ._version import __version__
from .constants import ActionSpace

__all__ = ["__version__", "seed", "ActionSpace", "dataset"]
