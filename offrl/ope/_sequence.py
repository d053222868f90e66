"""Sequence policies judged on logged data: :class:`SequencePolicy` and the
batched replay of each logged episode's history.

The implementation lives in :mod:`offrl.metrics._sequence`, the lowest layer
that uses it: the metric evaluators (below ``offrl.algos``, which imports
``offrl.metrics``) need it too, and importing anything from ``offrl.ope``
runs ``offrl.ope``'s package import, which imports the algorithms. The OPE
estimators import it from here.
"""

from ..metrics._sequence import (  # noqa: F401 (re-exported)
    SequencePolicy,
    as_sequence_policy,
    check_target_return,
    is_sequence_model,
    replay_outputs,
)

__all__ = ["SequencePolicy", "as_sequence_policy", "is_sequence_model", "replay_outputs", "check_target_return"]
