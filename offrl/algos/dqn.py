"""DQN and Double DQN.

DQN (Mnih et al., 2015, "Human-level control through deep reinforcement
learning") regresses Q on a bootstrapped target from a periodically
synchronised target network:

    L(theta) = E_{(s, a, r, s') ~ D} [ l( r + gamma^k (1 - d) Q_target(s', a*) - Q_theta(s, a) ) ]
    a* = argmax_a Q_target(s', a)                 (DQN)
    a* = argmax_a Q_theta(s', a)                  (Double DQN, van Hasselt et al., 2016)

with ``l`` the Huber loss for the mean Q-function (the quantile Huber loss
for QR / IQN Q-functions), ``k`` the transition's interval (1, or n for
multi-step pickers) and ``d`` its terminal flag. With ``n_critics > 1`` the
greedy action uses the ensemble mean and the target the ensemble minimum.
The target network is copied from the online one after the updates of
steps ``0, interval, 2 interval, ...`` (``interval`` =
``target_update_interval``; d3rlpy 2.8.1's schedule, which copies after the
first update too).

With prioritized replay (:class:`~offrl.dataset.PrioritizedReplayBuffer`,
Schaul et al., 2016) the loss is ``mean_i w_i l(delta_i)`` with the batch's
importance weights ``w_i``, and ``|delta_i|`` (expectations of target and
prediction for quantile Q-functions, averaged over the ensemble) becomes
sample ``i``'s new priority.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..constants import ActionSpace
from ..models.encoders import DefaultEncoderFactory, EncoderFactory
from ..models.modules import Modules
from ..models.optimizers import AdamFactory, OptimizerFactory, OptimizerWrapper
from ..models.plain_mlp import (PlainLayers, PlainNetwork, plain_backward, plain_backward_enabled, plain_forward, plain_layers,
                                plain_output)
from ..models.q_functions import MeanQFunction, MeanQFunctionFactory, QFunction, QFunctionFactory
from ..serialization import register
from ._common import freeze, hard_update, optimizer_step, td_target
from .base import QLearningAlgoBase, TrainStepResult
from .config import POSITIVE, POSITIVE_INT, SharedFieldsConfig, instance_of, param

__all__ = ["QNetworkConfig", "DQNConfig", "DQN", "DQNModules", "DoubleDQNConfig", "DoubleDQN", "DiscreteGreedyPolicy", "abs_td_errors",
           "PlainQ", "plain_q", "plain_regression", "written_out_q_available"]


@dataclasses.dataclass
class QNetworkConfig(SharedFieldsConfig):
    """The fields of the algorithms that fit one Q-function ensemble with one
    optimizer: DQN (and those built on it), NFQ, discrete BCQ and FQE (not
    an algorithm, not registered).

    Args:
        learning_rate: optimizer learning rate.
        optim_factory: optimizer (Adam by default).
        encoder_factory: encoder of the Q-function.
        q_func_factory: Q-function type (mean, QR, IQN).
        n_critics: ensemble size.
    """

    learning_rate: float = param(6.25e-5, check=POSITIVE)
    optim_factory: OptimizerFactory = param(default_factory=AdamFactory, check=instance_of(OptimizerFactory))
    encoder_factory: EncoderFactory = param(default_factory=DefaultEncoderFactory, check=instance_of(EncoderFactory))
    q_func_factory: QFunctionFactory = param(default_factory=MeanQFunctionFactory, check=instance_of(QFunctionFactory))
    n_critics: int = param(1, check=POSITIVE_INT)


@register("algorithm", "dqn")
@dataclasses.dataclass
class DQNConfig(QNetworkConfig):
    """Config of DQN (details in the module docstring).

    Loss:
        L(θ) = E_(s,a,r,s')~D [ ℓ(r + γ^k (1 − d) max_a' Q_θ⁻(s', a') − Q_θ(s, a)) ]
        with ℓ the Huber loss (the quantile Huber loss for QR / IQN
        Q-functions), k the transition's interval, d its terminal flag and
        θ⁻ copied from θ every ``target_update_interval`` steps.

    Defaults:
        d3rlpy 2.8.1's, which are Rainbow's (Hessel et al.): Adam with
        learning_rate=6.25e-5, batch_size=32, target_update_interval=8000
        steps (32K frames), gamma=0.99. The Nature DQN paper used RMSProp
        with learning rate 2.5e-4 and a target period of 10,000 updates.

    References:
        Mnih et al., "Human-level control through deep reinforcement
        learning", Nature 518, 2015 (its workshop version "Playing Atari with
        Deep Reinforcement Learning", 2013, is arXiv:1312.5602); Hessel et
        al., "Rainbow: Combining Improvements in Deep Reinforcement
        Learning", 2018, arXiv:1710.02298.

    Args:
        target_update_interval: steps between target network copies.
    """

    batch_size: int = param(32, check=POSITIVE_INT)
    target_update_interval: int = param(8000, check=POSITIVE_INT)


class DiscreteGreedyPolicy(nn.Module):
    """``argmax_a`` of the ensemble-mean Q-values (int64 indices)."""

    def __init__(self, q_function: nn.Module) -> None:
        super().__init__()
        self.q_function = q_function

    def forward(self, x) -> torch.Tensor:
        return self.q_function.expected(x).mean(dim=0).argmax(dim=-1)


def abs_td_errors(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-sample ``|E[target] - E[pred]|``, averaged over the ensemble, ``(B,)``:
    the priority signal for prioritized replay. ``pred``: ``(E, B, N)``,
    ``target``: ``(B, M)`` (quantiles are averaged to their expectation)."""
    return (target.mean(dim=-1).unsqueeze(0) - pred.mean(dim=-1)).abs().mean(dim=0)


def greedy_value(values: torch.Tensor, chooser: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``min_j values_j(s', a*)`` with ``a* = argmax_a mean_j chooser_j(s', a)``
    (``chooser`` defaults to ``values``), ``(B, 1)``; ``values`` and
    ``chooser`` are a mean Q-function's ``(E, B, A)``. The same numbers as
    the distribution path of :meth:`DQN._next_value` with fewer ops."""
    if chooser is None and values.shape[0] == 1:
        return values[0].max(dim=1, keepdim=True).values
    best = (values if chooser is None else chooser).mean(dim=0).argmax(dim=-1)  # (B,)
    return _at_actions(values, best).min(dim=0).values


def _at_actions(values: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """``values[:, b, actions[b]]`` of ``(E, B, A)`` values, ``(E, B, 1)``."""
    return values.gather(2, actions.reshape(1, -1, 1).long().expand(values.shape[0], -1, 1))


@dataclasses.dataclass(frozen=True)
class PlainQ:
    """A one-critic mean Q-function of plain ReLU MLPs with its backward
    written out (:mod:`offrl.models.plain_mlp`): the trained network and
    the target network's layers (the online network's without a target)."""

    online: PlainNetwork
    target: nn.Module
    target_layers: Optional[PlainLayers]

    @classmethod
    def create(cls, q: nn.Module, target: nn.Module, optim: object, side_heads: Sequence[nn.Module] = (),
               called: Sequence[nn.Module] = ()) -> "PlainQ":
        """``side_heads``: linear heads on the Q-network's features trained
        by the same step (DiscreteBCQ's imitator); ``called``: further
        modules the autograd step calls (their hooks count)."""
        # the single-critic path calls the encoders as modules (the target's too: its hooks count) and the
        # heads' weights directly
        called = list(called) + ([] if target is q else list(target.encoder.encoder.modules()))
        online = PlainNetwork.create(q, q.encoder.encoder, q.head, optim, called=called, side_heads=side_heads)
        target_layers = online.layers if target is q else plain_layers(target.encoder.encoder, target.head, trainable=False)
        return cls(online, target, target_layers)

    @property
    def layers(self) -> Optional[PlainLayers]:
        return self.online.layers if self.target_layers is not None else None

    def step(self, grads: List[torch.Tensor]) -> None:
        self.online.step(grads)


def plain_q(algo: object, q: nn.Module, target: nn.Module, optim: object, x: torch.Tensor) -> Optional[PlainQ]:
    """``algo``'s written-out Q step (cached on it, rebuilt when its networks
    change) when this step can take it: one mean critic and its target of
    plain ReLU MLPs, a float32 CPU step on input ``x`` with no hooks (see
    :mod:`offrl.models.plain_mlp`); else None (autograd)."""
    plain = plain_q_holder(algo, q, target, optim)
    return plain if plain.layers is not None and plain.online.usable(x) else None


def plain_q_holder(algo: object, q: nn.Module, target: nn.Module, optim: object, side_heads: Sequence[nn.Module] = (),
                   called: Sequence[nn.Module] = ()) -> PlainQ:
    """:class:`PlainQ` of ``algo``'s networks, cached on it (rebuilt when they change)."""
    plain = algo.__dict__.get("_plain")
    if plain is None or not plain.online.matches(q, optim, side_heads) or plain.target is not target:
        plain = PlainQ.create(q, target, optim, side_heads, called)
        algo.__dict__["_plain"] = plain
    return plain


def written_out_q_available(algo: object, q: nn.Module, target: nn.Module, optim: object) -> bool:
    """Whether ``algo``'s built one-critic Q step is written out (see
    :meth:`QLearningAlgoBase._written_out_step_available`)."""
    return (algo.is_built and getattr(algo, "_single_mean_q", False) and plain_backward_enabled()
            and plain_q_holder(algo, q, target, optim).layers is not None)


def plain_regression(plain: PlainQ, x: torch.Tensor, actions: Optional[torch.Tensor], target: torch.Tensor,
                     huber: bool) -> torch.Tensor:
    """One written-out step regressing ``Q(x)`` at ``actions`` (``(B, 1)``
    int64 indices; None: the network's single output) on ``target``
    ``(B, 1)``: the Huber loss (DQN) or the squared error (FQE), whose
    gradients with respect to the prediction are ``clamp(pred - y, -1, 1) / B``
    and ``2 (pred - y) / B``. Returns the loss; call without grad."""
    inputs, values = plain_forward(plain.layers, x)
    pred = values if actions is None else values.gather(1, actions)
    if huber:
        loss = F.smooth_l1_loss(pred, target, beta=1.0)
        grad_pred = (pred - target).clamp_(-1.0, 1.0).mul_(1.0 / pred.shape[0])
    else:
        loss = F.mse_loss(pred, target)
        grad_pred = (pred - target).mul_(2.0 / pred.numel())
    grad = grad_pred if actions is None else torch.zeros_like(values).scatter_(1, actions, grad_pred)
    plain.step(plain_backward(plain.layers, inputs, grad))
    return loss


@dataclasses.dataclass(frozen=True)
class DQNModules(Modules):
    """DQN's Q-function ensemble, its target copy (None without a target
    network: NFQ) and their optimizer."""

    q_function: QFunction
    targ_q_function: Optional[QFunction]
    optim: OptimizerWrapper


class DQN(QLearningAlgoBase, config=DQNConfig):
    """Deep Q-Network (see the module docstring).

    With a prioritized buffer (batches carrying ``weights``) the loss is the
    importance-weighted mean and the step's result carries
    :func:`abs_td_errors` (detached, on the device) for ``update_priorities``.
    """

    _action_type = ActionSpace.DISCRETE
    has_q_function = True
    supports_priorities = True
    _modules: DQNModules
    _q_modules = ("q_function", "targ_q_function")
    _q_optim = "optim"
    _double = False
    #: False: bootstrap from the online network itself (NFQ)
    _has_target_network = True

    def _build(self, observation_shape, action_size: int) -> DQNModules:
        cfg = self._config
        q = cfg.q_func_factory.create(cfg.encoder_factory, observation_shape, action_size, int(cfg.n_critics), discrete=True)
        #: mean Q-function: values read straight from Q(s, .) (no distribution axis)
        self._mean_q = isinstance(q, MeanQFunction)
        #: and a single critic: (B, A) values without the ensemble axis (d3rlpy's default DQN / NFQ)
        self._single_mean_q = self._mean_q and int(cfg.n_critics) == 1
        return DQNModules(
            q_function=q,
            targ_q_function=freeze(copy.deepcopy(q)) if self._has_target_network else None,
            optim=self._optimizer(cfg.optim_factory, [q], cfg.learning_rate),
        )

    def _target_q_function(self) -> nn.Module:
        """The network the target bootstraps from (the online one without a target network)."""
        return self._modules.targ_q_function if self._has_target_network else self._modules.q_function

    def _update(self, batch, grad_step: int) -> TrainStepResult:
        q = self._modules.q_function
        if self._single_mean_q and batch.weights is None:
            return self._update_single(batch, grad_step)
        with torch.no_grad():
            target = td_target(
                batch.rewards, self._next_value(batch.next_observations), batch.terminals, self._config.gamma, batch.intervals
            )
        pred, taus = q.at_action(batch.observations, batch.actions)
        loss = q.loss(pred, target, taus, batch.weights)
        td_errors = abs_td_errors(pred.detach(), target) if batch.weights is not None else None
        self._minimise(loss, grad_step)
        return TrainStepResult({"loss": loss.detach()}, td_errors)

    def _update_single(self, batch, grad_step: int) -> TrainStepResult:
        """:meth:`_update` for one mean critic and no importance weights:
        the same loss on ``(B, A)`` values, with fewer ops (and, for plain
        ReLU MLPs on the CPU, no autograd graph: :meth:`_update_plain`)."""
        plain = self._plain_q(batch.observations)
        if plain is not None:
            return self._update_plain(batch, grad_step, plain)
        q, targ = self._modules.q_function, self._target_q_function()
        with torch.no_grad():
            next_values = targ.single(batch.next_observations)  # (B, A)
            if self._double:
                best = q.single(batch.next_observations).argmax(dim=1, keepdim=True)
                next_value = next_values.gather(1, best)
            else:
                next_value = next_values.max(dim=1, keepdim=True).values
            target = td_target(batch.rewards, next_value, batch.terminals, self._config.gamma, batch.intervals)
        actions = batch.actions if batch.actions.dtype == torch.int64 else batch.actions.long()
        pred = q.single(batch.observations).gather(1, actions.view(-1, 1))
        loss = F.smooth_l1_loss(pred, target, beta=1.0)
        self._minimise(loss, grad_step)
        return TrainStepResult({"loss": loss.detach()}, None)

    def _plain_q(self, x) -> Optional[PlainQ]:
        """The written-out step's networks when this step can take it (see :func:`plain_q`)."""
        return plain_q(self, self._modules.q_function, self._target_q_function(), self._modules.optim, x)

    def _written_out_step_available(self) -> bool:
        return self.is_built and written_out_q_available(self, self._modules.q_function, self._target_q_function(),
                                                         self._modules.optim)

    def _greedy_targets(self, batch, plain: PlainQ) -> torch.Tensor:
        """``r + gamma^k (1 - d) Q_target(s', a*)`` by the plain layers, ``(B, 1)``; call without grad."""
        next_values = plain_output(plain.target_layers, batch.next_observations)  # (B, A)
        if self._double:
            best = plain_output(plain.layers, batch.next_observations).argmax(dim=1, keepdim=True)
            next_value = next_values.gather(1, best)
        else:
            next_value = next_values.max(dim=1, keepdim=True).values
        return td_target(batch.rewards, next_value, batch.terminals, self._config.gamma, batch.intervals)

    def _update_plain(self, batch, grad_step: int, plain: PlainQ) -> TrainStepResult:
        """:meth:`_update_single` with the backward written out (:func:`plain_regression`'s Huber loss)."""
        with torch.no_grad():
            target = self._greedy_targets(batch, plain)
            actions = (batch.actions if batch.actions.dtype == torch.int64 else batch.actions.long()).view(-1, 1)
            loss = plain_regression(plain, batch.observations, actions, target, huber=True)
        self._copy_target(grad_step)
        return TrainStepResult({"loss": loss}, None)

    def _minimise(self, loss: torch.Tensor, grad_step: int) -> None:
        """One optimizer step on ``loss``, then :meth:`_copy_target`."""
        optimizer_step(self._modules.optim, loss)
        self._copy_target(grad_step)

    def _copy_target(self, grad_step: int) -> None:
        """The target network's copy on steps that are multiples of
        ``target_update_interval`` (step 0 included, as d3rlpy)."""
        if self._has_target_network and grad_step % int(self._config.target_update_interval) == 0:
            hard_update(self._modules.targ_q_function, self._modules.q_function)

    def _next_value(self, next_observations) -> torch.Tensor:
        """``Q_target(s', a*)`` reduced over the ensemble, ``(B, N)``: one
        target forward pass for all actions, then a gather."""
        q, targ = self._modules.q_function, self._target_q_function()
        if self._mean_q:
            return greedy_value(targ.expected(next_observations), q.expected(next_observations) if self._double else None)
        dist = targ.distribution(next_observations, greedy_taus=False)  # (E, B, A, N)
        chooser = q.expected(next_observations) if self._double else dist.mean(dim=-1)
        next_action = chooser.mean(dim=0).argmax(dim=-1)  # (B,)
        index = next_action.view(1, -1, 1, 1).expand(dist.shape[0], -1, 1, dist.shape[-1])
        return q.reduce(dist.gather(2, index).squeeze(2), "min")

    def _predict(self, x) -> torch.Tensor:
        return self._modules.q_function.expected(x).mean(dim=0).argmax(dim=-1)

    def _predict_value(self, x, action: torch.Tensor) -> torch.Tensor:
        values = self._modules.q_function.expected(x).mean(dim=0)
        return values.gather(1, action.long().view(-1, 1)).squeeze(1)

    def policy_module(self) -> nn.Module:
        return DiscreteGreedyPolicy(self._modules.q_function)


@register("algorithm", "double_dqn")
@dataclasses.dataclass
class DoubleDQNConfig(DQNConfig):
    """Config of Double DQN: DQN whose target action is chosen by the online
    network (see :mod:`offrl.algos.dqn`).

    Loss:
        DQN's loss with the target r + γ^k (1 − d) Q_θ⁻(s', a*),
        a* = argmax_a Q_θ(s', a).

    Defaults:
        those of :class:`DQNConfig` (d3rlpy 2.8.1's).

    References:
        van Hasselt, Guez and Silver, "Deep Reinforcement Learning with
        Double Q-learning", 2016, arXiv:1509.06461.
    """


class DoubleDQN(DQN, config=DoubleDQNConfig):
    """Double DQN (van Hasselt et al., 2016)."""

    _double = True
