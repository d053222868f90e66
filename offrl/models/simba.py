"""SimBa encoder: residual MLP blocks with layer norm.

SimBa (Lee et al., 2024, "SimBa: Simplicity Bias for Scaling Up Parameters
in Deep Reinforcement Learning", arXiv:2410.09754) maps a flat input
``x`` (the observation, or the observation and the action) to features by

    h_0 = W_in x + b_in                                   (feature_size)
    h_k = h_{k-1} + W_2 relu(W_1 LayerNorm(h_{k-1}) + b_1) + b_2,   k = 1..n_blocks
    out = LayerNorm(h_n)

with ``W_1`` widening to ``hidden_size`` and ``W_2`` back to
``feature_size``: the residual stream keeps an identity path, so deeper
stacks stay easy to optimise. Like d3rlpy 2.8.1's encoder it leaves out
the paper's running-statistics input normalisation (use an observation
scaler for that) and takes 1-D observations only.

An ensemble (``create_ensemble``, e.g. the critics of an algorithm) is one
module whose layers have batched weights, so all members run in one
matmul per layer.
"""

from __future__ import annotations

from .encoders import SimBaEncoderFactory
from .torch.encoders import SimBaEncoder, SimBaEncoderWithAction

__all__ = ["SimBaEncoderFactory", "SimBaEncoder", "SimBaEncoderWithAction"]
