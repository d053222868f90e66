"""The precision half of :class:`~offrl.algos.base.QLearningAlgoBase`: which
precision an update step runs in (``precision="bf16-mixed"``'s measured
rules: no bf16 units, a written-out float32 step faster at small batches on
the CPU, products too small on a GPU) and the custom-encoder probe before
the first bf16 step. A mixin of the base class (it reads the base's state),
kept in its own file so that each file reads as one concern; the rules
themselves are :mod:`offrl.training.precision`'s."""

from __future__ import annotations

from typing import Any, Optional, Tuple

import torch

from ..constants import ActionSpace
from ..training import precision as mixed_precision

__all__ = ["PrecisionMixin"]


class PrecisionMixin:
    """The precision in effect and the bf16 step's preparation (see the base's docstring)."""

    @property
    def precision(self) -> str:
        """The precision the update step runs in: the config's ``precision``,
        or ``"float32"`` where the device has no bf16 units, where this
        algorithm's written-out float32 step is the faster one (small batches
        on the CPU) or where the products are too small for bf16 to pay on a
        GPU (see :mod:`offrl.training.precision`). ``predict`` is always
        float32."""
        precision = mixed_precision.effective_precision(self._config.precision, self._device)
        if precision != "float32" and self._written_out_step_available() and mixed_precision.written_out_step_is_faster(
                precision, type(self).__name__, self.batch_size, self._device, self._written_out_faster_below):
            return "float32"
        if precision != "float32" and self._device.type == "cuda" and mixed_precision.products_too_small(
                precision, type(self).__name__, self._largest_product(), self._device):
            return "float32"
        return precision

    def _largest_product(self) -> Optional[int]:
        """The largest layer product of a step on the built networks, in
        multiply-adds (:func:`offrl.training.precision.largest_product`;
        ``None`` before the build), computed once per networks."""
        if getattr(self, "_sized_for", None) is not self._nets:
            rows = int(self.batch_size) * (int(self.context_size) if self.predicts_from_sequences else 1)
            self._sized_for, self._product = self._nets, mixed_precision.largest_product(self._nets, rows)
        return self._product

    #: batch sizes below which this algorithm's written-out float32 step beats a bf16-mixed step on the CPU
    _written_out_faster_below = mixed_precision.WRITTEN_OUT_FASTER_BELOW

    def _written_out_step_available(self) -> bool:
        """Whether this algorithm's float32 step on its built networks has
        its backward written out (:mod:`offrl.models.plain_mlp`); then a
        bf16-mixed precision at small batches runs it instead (see
        :func:`offrl.training.precision.written_out_step_is_faster`)."""
        return False

    def _mixed_step_ready(self) -> bool:
        """bf16-mixed can run here (else float32, one warning); at the first
        such step on these networks, custom modules that cannot run in bf16
        are switched to float32 (one warning naming them)."""
        if self.precision == "float32":
            return False
        if getattr(self, "_probed_for", None) is not self._nets:
            self._probed_for = self._nets
            mixed_precision.fall_back_custom_modules(self._nets, self._device, self._probe_inputs, type(self).__name__)
        return True

    def _probe_inputs(self, n_inputs: int) -> Optional[Tuple[Any, ...]]:
        """A small random batch for probing a custom encoder: ``(x,)`` or
        ``(x, action)``; ``None`` for other signatures."""
        shape = self._observation_shape
        if n_inputs not in (1, 2) or shape is None or self._observation_keys is not None:
            return None
        gen = torch.Generator().manual_seed(0)
        tuple_obs = len(shape) > 0 and isinstance(shape[0], (tuple, list))
        parts = [torch.randn((4, *s), generator=gen).to(self._device) for s in (shape if tuple_obs else [shape])]
        x = parts if tuple_obs else parts[0]
        if n_inputs == 1:
            return (x,)
        if self.get_action_type() == ActionSpace.DISCRETE:
            action = torch.zeros(4, 1, dtype=torch.long, device=self._device)
        else:
            action = (torch.rand((4, int(self._action_size or 1)), generator=gen) * 2 - 1).to(self._device)
        return (x, action)
