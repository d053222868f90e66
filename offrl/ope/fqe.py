"""Fitted Q Evaluation, as d3rlpy places it (``offrl.ope.FQE``).

FQE is an algorithm (one config, networks and an update step), so it lives
with the algorithms in :mod:`offrl.algos.fqe`; this module keeps the
``offrl.ope.fqe`` import path.
"""

from ..algos.fqe import (
    DiscreteFQE,
    DiscreteFQEConfig,
    FQE,
    FQEConfig,
    PolicyValueEstimate,
    initial_observations,
)

__all__ = ["FQEConfig", "DiscreteFQEConfig", "FQE", "DiscreteFQE", "PolicyValueEstimate", "initial_observations"]
