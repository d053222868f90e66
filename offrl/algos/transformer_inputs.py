"""d3rlpy's ``TorchTransformerInput``: one :class:`TransformerInput` context
as the batch of one a transformer's forward pass takes (the last
``context_size`` steps, left-padded with zeros when shorter, a mask of the
real steps, scalers applied). offrl's own transformers prepare their input
in :meth:`TransformerAlgoBase.predict`; this is for code written against
d3rlpy's ``d3rlpy.algos.transformer.inputs``."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import numpy as np
import torch

from ..dataset.utils import batch_pad_array, batch_pad_observations, slice_observations
from .transformer_base import TransformerInput

__all__ = ["TorchTransformerInput"]


def _tensor(array: Any, device: Any) -> torch.Tensor:
    return torch.as_tensor(np.asarray(array), device=device).float()


@dataclasses.dataclass(frozen=True)
class TorchTransformerInput:
    """observations ``(1, L, *obs_shape)`` (a list for tuple observations),
    actions ``(1, L, action_size)``, rewards and returns_to_go ``(1, L, 1)``,
    timesteps ``(1, L)`` int64, masks ``(1, L)`` (1 for a real step), with
    ``L = length = context_size``."""

    observations: Any
    actions: torch.Tensor
    rewards: torch.Tensor
    returns_to_go: torch.Tensor
    timesteps: torch.Tensor
    masks: torch.Tensor
    length: int

    @classmethod
    def from_numpy(cls, inpt: TransformerInput, context_size: int, device: Any,
                   observation_scaler: Optional[Any] = None, action_scaler: Optional[Any] = None,
                   reward_scaler: Optional[Any] = None) -> "TorchTransformerInput":
        context_size = int(context_size)
        if context_size < 1:
            raise ValueError(f"context_size must be at least 1, got {context_size}")
        length = inpt.length
        if context_size < length:
            observations = slice_observations(inpt.observations, length - context_size, length)
            cut = slice(length - context_size, length)
            actions, rewards = inpt.actions[cut], inpt.rewards[cut]
            returns_to_go, timesteps = inpt.returns_to_go[cut], inpt.timesteps[cut]
            masks = np.ones(context_size, dtype=np.float32)
        else:
            pad = context_size - length
            observations = batch_pad_observations(inpt.observations, pad)
            actions, rewards = batch_pad_array(inpt.actions, pad), batch_pad_array(inpt.rewards, pad)
            returns_to_go = batch_pad_array(inpt.returns_to_go, pad)
            timesteps = batch_pad_array(np.asarray(inpt.timesteps), pad)
            masks = batch_pad_array(np.ones(length, dtype=np.float32), pad)
        if isinstance(observations, (list, tuple)):
            obs: Any = [_tensor(o, device) for o in observations]
        else:
            obs = _tensor(observations, device)
        actions_t, rewards_t = _tensor(actions, device), _tensor(rewards, device)
        rtg_t = _tensor(returns_to_go, device)
        if observation_scaler is not None:
            obs = observation_scaler.transform(obs)
        if action_scaler is not None:
            actions_t = action_scaler.transform(actions_t)
        if reward_scaler is not None:
            rewards_t = reward_scaler.transform(rewards_t)
            rtg_t = reward_scaler.transform(rtg_t)
        obs = [o.unsqueeze(0) for o in obs] if isinstance(obs, (list, tuple)) else obs.unsqueeze(0)
        return cls(observations=obs, actions=actions_t.unsqueeze(0), rewards=rewards_t.unsqueeze(0),
                   returns_to_go=rtg_t.unsqueeze(0),
                   timesteps=torch.as_tensor(np.asarray(timesteps), device=device).long().unsqueeze(0),
                   masks=_tensor(masks, device).unsqueeze(0), length=context_size)
