"""Small pure helpers shared by the algorithm files (the target-network
updates and ``freeze`` are :mod:`offrl.models.modules`'s, re-exported)."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, List, Optional, Tuple

import torch
from torch import nn

from ..models.modules import freeze, hard_update, module_tensors, soft_update
from ..models.plain_mlp import (PlainNetwork, gradient_hooked, hook_free, plain_backward, plain_backward_enabled, plain_forward, side_head,
                                side_head_backward)
from ..optimizers.optimizers import DirectStep

__all__ = [
    "soft_update", "hard_update", "expectile_loss", "td_target", "freeze", "no_param_grads", "optimizer_step",
    "critic_step", "plain_critic", "plain_critic_step", "plain_normal_policy", "normal_policy_forward",
    "normal_policy_grads", "plain_encoder_head", "shared_direct_step",
]


def mixes_rows(module: nn.Module) -> bool:
    """Whether a forward pass of ``module`` in training mode makes one row's
    output depend on the other rows of its batch (batch normalisation,
    offrl's ensemble one included): calls on different inputs may then not
    be merged into one call over their stacked rows."""
    from ..models.layers import EnsembleBatchNorm

    return any(isinstance(m, (nn.modules.batchnorm._BatchNorm, EnsembleBatchNorm)) for m in module.modules())


def stack_observations(x: Any, y: Any) -> Any:
    """Rows of ``x`` then rows of ``y`` (tuple observations element-wise)."""
    if isinstance(x, (list, tuple)):
        return [torch.cat([u, v]) for u, v in zip(x, y)]
    return torch.cat([x, y])


def td_target(rewards: torch.Tensor, next_values: torch.Tensor, terminals: torch.Tensor, gamma: float, intervals: torch.Tensor) -> torch.Tensor:
    """``r + gamma**interval * (1 - terminal) * next_values``; ``next_values``
    is ``(B, N)`` (``N`` quantiles, 1 for a scalar value)."""
    # torch.pow(float, tensor) directly: ``gamma ** intervals`` goes through Tensor.__rpow__'s Python wrapper
    return torch.addcmul(rewards, torch.pow(gamma, intervals) * (1.0 - terminals), next_values)


def expectile_loss(diff: torch.Tensor, expectile: float) -> torch.Tensor:
    """Asymmetric squared loss ``|expectile - 1(diff < 0)| * diff**2``, mean."""
    weight = torch.where(diff > 0, expectile, 1.0 - expectile)
    return (weight * diff**2).mean()


def optimizer_step(optim: Any, loss: torch.Tensor) -> None:
    """One step of ``optim`` (an optimizer wrapper) on ``loss``: zero the
    gradients, backpropagate, step."""
    optim.zero_grad()
    loss.backward()
    optim.step()


@torch.compiler.disable
def temperature_step(log_temp: Any, temp_optim: Any, gap: torch.Tensor) -> torch.Tensor:
    """One step of a temperature's loss ``-(alpha * gap).mean()`` with
    ``alpha = log_temp()`` (d3rlpy's maths: the exponent, not its log) and
    ``gap`` a constant (the log-probability plus the target entropy);
    returns the loss, detached.

    Eager under ``compile_graph=True``: traced beside the actor's forward
    pass, its backward would run (and free) the compiled backward that the
    actor's loss needs next."""
    step = _direct_temperature_step(log_temp, temp_optim)
    if step is None or gap.requires_grad:
        temp_loss = -(log_temp() * gap).mean()
        optimizer_step(temp_optim, temp_loss)
        return temp_loss.detach()
    with torch.no_grad():  # written out: with alpha = exp(log_value) the loss is its own gradient in log_value
        temp_loss = -(log_temp.log_value.exp() * gap).mean()
        step([temp_loss.clone()])
    return temp_loss


def _direct_temperature_step(log_temp: Any, temp_optim: Any) -> Optional[DirectStep]:
    """The optimizer step taking a written-out gradient for a plain
    :class:`~offrl.models.parameters.ScalarParameter` (no hooks, float32,
    written-out steps switched on, not traced by ``torch.compile``; any
    device, and under autocast too: the loss has no product), cached on the
    optimizer; else None (autograd's step)."""
    from ..models.parameters import ScalarParameter

    if type(log_temp) is not ScalarParameter or not plain_backward_enabled() or torch.compiler.is_compiling():
        return None
    param = log_temp.log_value
    if param.dtype != torch.float32 or not hook_free([log_temp]) or gradient_hooked([param]):  # autocast: no product here
        return None
    held = temp_optim.__dict__.get("_offrl_direct")
    if held is None or held.params[0] is not param:
        if not param.requires_grad:
            return None
        held = temp_optim._offrl_direct = DirectStep(temp_optim, [param])
    return held


def critic_step(q: Any, optim: Any, batch: Any, target: torch.Tensor) -> torch.Tensor:
    """One TD step of the critic ensemble ``q`` (a
    :class:`~offrl.models.q_functions.QFunction`) towards ``target`` ``(B, N)``
    at the batch's logged actions, by ``optim``; returns the loss."""
    pred, taus = q.at_action(batch.observations, batch.actions)
    loss = q.loss(pred, target, taus)
    optimizer_step(optim, loss)
    return loss


def plain_critic(q: Any, optim: Any) -> Tuple[PlainNetwork, Optional[nn.Module]]:
    """The critics ``q`` as plain ReLU MLPs for :func:`plain_critic_step`
    (``layers`` None where they are not: see :mod:`offrl.models.plain_mlp`)
    and their action encoder (None then); a caller caches it per
    ``(q, optim)`` (:meth:`PlainNetwork.matches`)."""
    from ..models.q_functions import MeanQFunction

    if type(q) is MeanQFunction and int(q.n_critics) == 1:  # the autograd step calls encoders and heads as modules
        encoder = q.encoder.encoder
        return PlainNetwork.create(q, encoder, q.head, optim, called=(q.encoder, q.head)), encoder
    if type(q) is MeanQFunction:
        return PlainNetwork.create(q, q.encoder, q.head, optim, called=(q.head,), ensemble=True), q.encoder
    return PlainNetwork(q, optim, None, [], None), None


def plain_critic_step(q: Any, critic: PlainNetwork, encoder: nn.Module, batch: Any, target: torch.Tensor) -> torch.Tensor:
    """:func:`critic_step` written out (``critic``, ``encoder``: from
    :func:`plain_critic`, usable on the batch): each critic's mean squared
    error has the gradient ``2 (Q_i(s, a) - y) / B``; returns the loss."""
    with torch.no_grad():
        inputs, values = plain_forward(critic.layers, encoder.flat_with_action(batch.observations, batch.actions))
        pred = values if values.dim() == 3 else values.unsqueeze(0)  # (E, B, 1)
        loss = q.loss(pred, target)
        grad = (pred - target).mul_(2.0 / pred.shape[1])
        critic.step(plain_backward(critic.layers, inputs, grad if values.dim() == 3 else grad[0]))
    return loss


@contextlib.contextmanager
def no_param_grads(module: nn.Module) -> Iterator[None]:
    """Temporarily stop gradients into ``module``'s parameters; gradients
    still flow through it to its inputs (e.g. a critic in an actor step)."""
    params = [p for p in module_tensors(module)[0] if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in params:
            p.requires_grad_(True)


def plain_normal_policy(policy: nn.Module, optim: Any, held: Optional[PlainNetwork] = None) -> PlainNetwork:
    """A :class:`~offrl.models.policies.NormalPolicy` as a plain ReLU MLP
    with its mean head and its log-std (a side head, or a free parameter)
    for :func:`normal_policy_forward` / :func:`normal_policy_grads`
    (``layers`` None where it is not: see :mod:`offrl.models.plain_mlp`);
    ``held``: the caller's cached one, returned while it still matches."""
    from ..models.policies import NormalPolicy

    free = bool(getattr(policy, "use_std_parameter", False))
    sides = (policy.logstd,) if type(policy) is NormalPolicy and not free else ()
    if held is not None and held.matches(policy, optim, sides):
        return held
    if type(policy) is not NormalPolicy:
        return PlainNetwork(policy, optim, None, [], None)
    return PlainNetwork.create(policy, policy.encoder, policy.mu, optim, called=(policy, policy.mu) + sides,
                               side_heads=sides, extra=(policy.logstd,) if free else ())


def normal_policy_forward(policy: nn.Module, plain: PlainNetwork, observations: torch.Tensor
                          ) -> Tuple[List[torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor]:
    """``policy(observations)`` by its plain layers (call without grad):
    each layer's input, ``mean``, ``logstd`` and what
    :func:`normal_policy_grads` needs of the log-std (the side head's raw
    output before the clamp, or the free parameter's sigmoid)."""
    low, high = policy.min_logstd, policy.max_logstd
    inputs, mean = plain_forward(plain.layers, observations)
    if policy.use_std_parameter:
        squashed = torch.sigmoid(policy.logstd)
        return inputs, mean, (low + squashed * (high - low)).expand_as(mean), squashed
    raw = side_head(inputs[-1], policy.logstd.weight, policy.logstd.bias)
    return inputs, mean, raw.clamp(low, high), raw


def normal_policy_grads(policy: nn.Module, plain: PlainNetwork, inputs: List[torch.Tensor], aux: torch.Tensor,
                        grad_mean: torch.Tensor, grad_logstd: torch.Tensor) -> List[torch.Tensor]:
    """The policy's parameter gradients (in ``plain.step``'s order) from the
    loss's gradients with respect to :func:`normal_policy_forward`'s
    ``mean`` and ``logstd`` (``(B, A)`` each; ``grad_logstd`` is consumed):
    through the clamp's mask (as autograd's ``clamp``: no gradient outside
    the range) into the side head and the features, or through the free
    parameter's sigmoid, summed over the batch."""
    low, high = policy.min_logstd, policy.max_logstd
    if policy.use_std_parameter:
        grad_free = grad_logstd.sum(dim=0, keepdim=True).mul_(high - low).mul_(aux * (1.0 - aux))
        return plain_backward(plain.layers, inputs, grad_mean) + [grad_free]
    grad_raw = grad_logstd.mul_(((aux >= low) & (aux <= high)).to(aux.dtype))
    grad_features, grad_w, grad_b = side_head_backward(grad_raw, inputs[-1], policy.logstd.weight)
    return plain_backward(plain.layers, inputs, grad_mean, feature_grad=grad_features) + [grad_w, grad_b]


def plain_encoder_head(module: nn.Module, optim: Any, kind: type) -> PlainNetwork:
    """``module`` (of type ``kind``: an ``encoder`` then a linear ``fc``
    head, as a value function or a perturbation actor) as a plain ReLU MLP
    trained by ``optim`` (``layers`` None where it is not one)."""
    if type(module) is not kind:
        return PlainNetwork(module, optim, None, [], None)
    return PlainNetwork.create(module, module.encoder, module.fc, optim, called=(module, module.fc))


def shared_direct_step(optim: Any, *networks: PlainNetwork) -> Optional[DirectStep]:
    """One optimizer step taking the gradients of ``networks`` in order (the
    parameters of one optimizer built over them, as IQL's critics and value
    function), or None where one of them is not plain."""
    if any(n.step is None for n in networks):
        return None
    return DirectStep(optim, [p for n in networks for p in n.step.params])
