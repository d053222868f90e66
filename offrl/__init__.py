"""offrl: offline-first reinforcement learning.

Fit a policy on logged decisions with a scikit-learn-like API, judge it
without touching the real system, and export it to run anywhere.
"""

from . import algos, dataset, logging, metrics, models, ope, preprocessing
from . import datasets
from ._random import seed
from ._version import __version__
from .constants import ActionSpace
from .serialization import load_learnable

__all__ = [
    "__version__",
    "seed",
    "ActionSpace",
    "load_learnable",
    "algos",
    "dataset",
    "datasets",
    "logging",
    "metrics",
    "models",
    "ope",
    "preprocessing",
]
