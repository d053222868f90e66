"""Batched ensemble layers: ``E`` independent members computed in one op."""

from __future__ import annotations

import math

import torch
from torch import nn
import torch.nn.functional as F

__all__ = ["EnsembleLinear", "EnsembleLayerNorm", "EnsembleBatchNorm", "get_activation", "ACTIVATIONS"]

ACTIVATIONS = {
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "swish": nn.SiLU,
    "silu": nn.SiLU,
    "gelu": nn.GELU,
    "elu": nn.ELU,
    "leaky_relu": nn.LeakyReLU,
    "sigmoid": nn.Sigmoid,
    "mish": nn.Mish,
}


def get_activation(name: str) -> nn.Module:
    """A new activation module. ReLU works in place: it always follows a
    layer whose output nothing else reads, and its backward needs only its
    result, so this saves a copy of every hidden activation."""
    if name == "relu":
        return nn.ReLU(inplace=True)
    try:
        return ACTIVATIONS[name]()
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; expected one of {sorted(ACTIVATIONS)}") from None


class EnsembleLinear(nn.Module):
    """``E`` linear layers with weights ``(E, in, out)``.

    Input ``(B, in)`` (shared by all members) or ``(E, B, in)``; output
    ``(E, B, out)``. Each member is initialised like ``nn.Linear``.
    """

    def __init__(self, ensemble_size: int, in_features: int, out_features: int) -> None:
        super().__init__()
        self.ensemble_size = ensemble_size
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(torch.empty(ensemble_size, in_features, out_features))
        self.bias = nn.Parameter(torch.empty(ensemble_size, 1, out_features))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.in_features) if self.in_features > 0 else 0.0
        # kaiming_uniform(a=sqrt(5)) on an (out, in) matrix gives this bound too
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.ensemble_size == 1:  # one member: a plain fused addmm (views, whose backward is free)
            flat = x if x.dim() == 2 else x.view(x.shape[1], x.shape[2])
            weight = self.weight.view(self.in_features, self.out_features)
            return torch.addmm(self.bias.view(self.out_features), flat, weight).unsqueeze(0)
        if x.dim() == 2:  # shared input: a broadcast view, then one fused batched matmul + bias
            x = x.unsqueeze(0).expand(self.ensemble_size, x.shape[0], x.shape[1])
        return torch.baddbmm(self.bias, x, self.weight)

    def extra_repr(self) -> str:
        return f"ensemble_size={self.ensemble_size}, in_features={self.in_features}, out_features={self.out_features}"


class EnsembleLayerNorm(nn.Module):
    """Layer norm over the last axis with per-member affine parameters."""

    def __init__(self, ensemble_size: int, features: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.features = features
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(ensemble_size, 1, features))
        self.bias = nn.Parameter(torch.zeros(ensemble_size, 1, features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (self.features,), eps=self.eps) * self.weight + self.bias


class EnsembleBatchNorm(nn.Module):
    """Batch norm per member: ``(E, B, F)`` normalised over ``B``."""

    def __init__(self, ensemble_size: int, features: int) -> None:
        super().__init__()
        self.ensemble_size = ensemble_size
        self.features = features
        self.norm = nn.BatchNorm1d(ensemble_size * features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e, b, f = x.shape
        y = self.norm(x.transpose(0, 1).reshape(b, e * f))
        return y.reshape(b, e, f).transpose(0, 1)
