"""Fitted Q Evaluation, as d3rlpy places it (``offrl.ope.FQE``).

FQE is an algorithm (one config, networks and an update step), so it lives
with the algorithms in :mod:`offrl.algos.fqe`; this module keeps the
``offrl.ope.fqe`` import path.
"""

from ..algos.fqe import (
    ConvergenceDiagnostic,
    DiscreteFQE,
    DiscreteFQEConfig,
    FQE,
    FQEConfig,
    PolicyValueEstimate,
    heldout_split,
    initial_observations,
)

__all__ = ["FQEConfig", "DiscreteFQEConfig", "FQE", "DiscreteFQE", "PolicyValueEstimate", "ConvergenceDiagnostic",
           "heldout_split", "initial_observations"]
