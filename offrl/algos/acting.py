"""The acting half of :class:`~offrl.algos.base.QLearningAlgoBase`:
checked inputs, greedy and sampled actions, values, the stochastic policy's
probabilities for OPE, and export. A mixin of the base class (it reads the
base's state), kept in its own file so that each file reads as one concern."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from ..constants import ActionSpace
from ..dataset.signature import observation_from_dict
from ..export import save_policy as export_policy
from .impl import ImplPolicy
from .inputs_check import as_array, check_real_values, float_observation

__all__ = ["ActingMixin"]


class ActingMixin:
    """Inference and export methods of an algorithm (see the base's docstring)."""

    # ---------------------------------------------------------- inference
    def observation_tensor(self, x: Any, name: str = "x") -> Any:
        """``x`` checked and moved to the device as raw (unscaled) tensors: a
        tensor, or a list for tuple observations.

        Raises ``TypeError`` for values that are not real numbers (strings,
        objects, complex) and ``ValueError`` for a wrong shape, an empty batch
        or a value that is NaN, infinite or beyond float32's range, naming
        ``name``, the first bad row and what was expected. A dict of batched
        arrays (dict observations) is taken in sorted key order, the order
        the data stores them in."""
        shape = self._observation_shape
        if isinstance(x, dict):
            x = observation_from_dict(x, self._observation_keys, name)
            if not isinstance(shape, list) and len(x) == 1:
                x = x[0]
        if isinstance(shape, list):
            if not isinstance(x, (list, tuple)) or len(x) != len(shape):
                raise ValueError(f"{name} must be a list of {len(shape)} arrays (tuple observations of shapes {shape})")
            arrays = [as_array(v, f"{name}[{k}]") for k, v in enumerate(x)]
            batch = arrays[0].shape[0] if arrays[0].ndim else None
            for k, (array, expected) in enumerate(zip(arrays, shape)):
                if tuple(array.shape[1:]) != tuple(expected) or array.ndim != len(expected) + 1:
                    raise ValueError(f"{name}[{k}] must have shape (batch, {', '.join(map(str, expected))}), got {tuple(array.shape)}")
                if array.shape[0] != batch:
                    raise ValueError(f"{name}[{k}] has {array.shape[0]} rows, {name}[0] has {batch}")
            return [self._as_input(a, f"{name}[{k}]") for k, a in enumerate(arrays)]
        array = as_array(x, name)
        expected = tuple(shape)  # type: ignore[arg-type]
        if tuple(array.shape[1:]) != expected or array.ndim != len(expected) + 1:
            hint = " (add the batch dimension: x[None])" if tuple(array.shape) == expected else ""
            raise ValueError(f"{name} must have shape (batch, {', '.join(map(str, expected))}), got {tuple(array.shape)}{hint}")
        return self._as_input(array, name)

    def scale_observations(self, observations: Any) -> Any:
        """Raw observation tensors (from :meth:`observation_tensor`) as the
        networks see them: scaled, or converted to float32."""
        if self._observation_scaler is not None:
            return self._observation_scaler.transform(observations)
        return float_observation(observations)

    def _observation_tensor(self, x: Any, name: str = "x") -> Any:
        return self.scale_observations(self.observation_tensor(x, name))

    def _as_input(self, array: Any, name: str) -> torch.Tensor:
        """A checked (see :func:`check_real_values`) numpy array or tensor
        as a tensor on the device; float64 becomes float32."""
        check_real_values(array, name)
        if isinstance(array, torch.Tensor):
            if array.dtype == torch.float64:
                array = array.to(torch.float32)
            return array.to(self._device)
        if array.dtype == np.float64:
            array = array.astype(np.float32)
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
        return torch.from_numpy(array).to(self._device)

    def _action_tensor(self, action: Any, batch: int) -> torch.Tensor:
        a = as_array(action, "action")
        if self._action_type_of_data() == ActionSpace.DISCRETE:
            if a.shape not in ((batch,), (batch, 1)):
                raise ValueError(f"action must have shape ({batch},) holding action indices, got {a.shape}")
            check_real_values(a, "action")
            if a.dtype.kind not in "biu":
                whole = a == np.round(a)
                if not whole.all():
                    row = int(np.argmin(whole.reshape(batch, -1).all(axis=1)))
                    raise ValueError(f"action[{row}] is {a.reshape(batch, -1)[row, 0].item()!r}; expected an integer action index")
            if a.size and (a.min() < 0 or a.max() >= self._action_size):
                flat = a.reshape(-1)
                row = int(np.argmax((flat < 0) | (flat >= self._action_size)))
                raise ValueError(f"action[{row}] is {flat[row].item()!r}; expected an action index in [0, {self._action_size})")
            return torch.as_tensor(a.reshape(batch, 1).astype(np.int64), device=self._device)
        if a.shape != (batch, self._action_size):
            raise ValueError(f"action must have shape ({batch}, {self._action_size}), got {a.shape}")
        check_real_values(a, "action")
        t = torch.as_tensor(a, dtype=torch.float32, device=self._device)
        if self._action_scaler is not None:
            t = self._action_scaler.transform(t)
        return t

    def _action_type_of_data(self) -> ActionSpace:
        return self._action_type

    def _eval_mode(self) -> None:
        if self._toggles_mode:
            self._nets.eval()

    def _train_mode(self) -> None:
        if self._toggles_mode:
            self._nets.train()

    def _in_eval_mode(self, fn: Callable[[Any], torch.Tensor], observations: Any) -> torch.Tensor:
        with torch.no_grad():
            self._eval_mode()
            try:
                return fn(observations)
            finally:
                self._train_mode()

    def _postprocess_action(self, action: torch.Tensor) -> np.ndarray:
        return self._unscale_action(action).cpu().numpy()

    def _unscale_action(self, action: torch.Tensor) -> torch.Tensor:
        if action.is_floating_point() and self._action_scaler is not None:
            action = self._action_scaler.reverse_transform(action)
        return action

    def policy_actions(self, observations: Any, sample: bool = False) -> torch.Tensor:
        """Actions for raw observation tensors on this algorithm's device, in
        the environment's units, as a tensor: ``(B, action_size)`` floats or
        ``(B,)`` int64 indices; greedy, or drawn from the policy with
        ``sample``. No numpy round trip (FQE calls it in its hot loop)."""
        self.require_built()
        scaled = self.scale_observations(observations)
        action = self._in_eval_mode(self._sample if sample else self._predict, scaled)
        return self._unscale_action(action)

    def predict(self, x: Any) -> np.ndarray:
        """Greedy actions for a batch of observations: ``(B, action_size)``
        for continuous control, ``(B,)`` indices for discrete control."""
        self.require_built()
        return self.policy_actions(self.observation_tensor(x)).cpu().numpy()

    def sample_action(self, x: Any) -> np.ndarray:
        """Actions sampled from the policy (``predict`` for deterministic ones)."""
        self.require_built()
        return self.policy_actions(self.observation_tensor(x), sample=True).cpu().numpy()

    def predict_value(self, x: Any, action: Any) -> np.ndarray:
        """Estimated action-values ``Q(x, action)``, shape ``(B,)``."""
        self.require_built()
        obs = self._observation_tensor(x)
        batch = obs[0].shape[0] if isinstance(obs, list) else obs.shape[0]
        a = self._action_tensor(action, batch)
        value = self._in_eval_mode(lambda o: self._predict_value(o, a), obs)
        return value.reshape(-1).cpu().numpy()

    def _predict(self, x: Any) -> torch.Tensor:
        if self._impl is None:
            raise NotImplementedError
        return self._impl.inner_predict_best_action(x)

    def _sample(self, x: Any) -> torch.Tensor:
        if self._impl is None:
            return self._predict(x)
        return self._impl.inner_sample_action(x)

    def _predict_value(self, x: Any, action: torch.Tensor) -> torch.Tensor:
        if self._impl is None:
            raise NotImplementedError(f"{type(self).__name__} has no value function")
        return self._impl.inner_predict_value(x, action)

    # ------------------------------------------- stochastic-policy hooks
    def action_probabilities(self, x: Any) -> np.ndarray:
        """The discrete policy's probabilities of every action, ``(B,
        action_size)`` float64 (for importance sampling)."""
        self.require_built()
        if self._action_type != ActionSpace.DISCRETE or not self.has_stochastic_policy:
            raise ValueError(f"{type(self).__name__} has no discrete action distribution")
        obs = self._observation_tensor(x)
        return self._in_eval_mode(self._action_probabilities, obs).double().cpu().numpy()  # type: ignore[attr-defined]

    def action_log_densities(self, x: Any, actions: Any) -> np.ndarray:
        """Log-densities of ``actions`` (in the environment's units) under the
        continuous policy at ``x``, ``(B,)`` float64: the policy's density on
        scaled actions plus ``log |det d scaled / d raw|`` of the action scaler."""
        self.require_built()
        if self._action_type == ActionSpace.DISCRETE or not self.has_stochastic_policy:
            raise ValueError(f"{type(self).__name__} has no continuous action density")
        obs = self._observation_tensor(x)
        raw = torch.as_tensor(np.asarray(actions), dtype=torch.float32, device=self._device)
        if self._action_scaler is None:
            scaled, log_jacobian = raw, torch.zeros(raw.shape[0], device=raw.device)
        else:
            with torch.enable_grad():
                raw = raw.clone().requires_grad_(True)
                scaled = self._action_scaler.transform(raw)
                (grad,) = torch.autograd.grad(scaled.sum(), raw)
            scaled, log_jacobian = scaled.detach(), torch.log(grad.abs()).sum(dim=-1)
        log_prob = self._in_eval_mode(lambda o: self._action_log_prob(o, scaled), obs)  # type: ignore[attr-defined]
        return (log_prob + log_jacobian).double().cpu().numpy()

    # ---------------------------------------------------------- exporting
    def policy_module(self) -> nn.Module:
        """The greedy policy on scaled observations, as a module (for export)."""
        if self._impl is None:
            raise NotImplementedError(f"{type(self).__name__} has no exportable policy")
        return ImplPolicy(self._impl)

    def save_policy(self, fname: str) -> None:
        """Export the greedy policy with its scalers: ``.pt`` TorchScript,
        ``.onnx`` ONNX; verified against :meth:`predict` after writing."""
        export_policy(self, fname)
