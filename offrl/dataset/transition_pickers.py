"""d3rlpy's ``d3rlpy.dataset.transition_pickers`` import path, as an alias: the same
objects as :mod:`offrl.dataset` (offrl keeps them in other modules), so
``from offrl.dataset.transition_pickers import ...`` works as in d3rlpy 2.8.1."""

from .pickers import BasicTransitionPicker, FrameStackTransitionPicker, MultiStepTransitionPicker, SparseRewardTransitionPicker, TransitionPickerProtocol

__all__ = ["TransitionPickerProtocol", "BasicTransitionPicker", "SparseRewardTransitionPicker", "FrameStackTransitionPicker", "MultiStepTransitionPicker"]
