"""Behaviour cloning (BC) for continuous and discrete actions.

BC fits a policy to the logged actions by supervised learning; it has no
value function and ignores rewards (Pomerleau, 1991, "Efficient training of
artificial neural networks for autonomous navigation"; as an offline-RL
baseline, e.g. Fujimoto et al., 2019, "Off-Policy Deep Reinforcement
Learning without Exploration").

Continuous actions (``BC``), in the action scaler's normalised space [-1, 1]:

    deterministic:  L(theta) = E_{(s, a) ~ D} [ mean_j (tanh(f_theta(s))_j - a_j)^2 ]
    stochastic:     L(theta) = E_{(s, a) ~ D} [ -log N(a; tanh(mu_theta(s)), diag(sigma_theta(s)^2)) ]

with ``log sigma`` clamped to [-4, 15]. Both act with ``tanh(mu_theta(s))``;
the stochastic policy samples ``clip(N(tanh(mu), sigma^2), -1, 1)``.

Discrete actions (``DiscreteBC``), with logits ``z_theta(s)`` over ``A``
actions:

    L(theta) = E_{(s, a) ~ D} [ -log softmax(z_theta(s))_a ] + beta * mean_{s, k} z_theta(s)_k^2

The ``beta`` term keeps the raw logits small, as the discrete BC of
Fujimoto et al., 2019 ("Benchmarking Batch Deep Reinforcement Learning
Algorithms") does; d3rlpy 2.8.1 squares the normalised logits (log-
probabilities) instead (docs/COMPATIBILITY.md). Greedy action
``argmax_a z_theta(s)_a``; sampling draws from ``softmax(z_theta(s))``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Optional, Union

import torch
from torch import nn
import torch.nn.functional as F

from ..constants import ActionSpace
from ..models.encoders import DefaultEncoderFactory, EncoderFactory, compute_output_size
from ..models.modules import Modules
from ..models.optimizers import AdamFactory, OptimizerFactory, OptimizerWrapper
from ..models.plain_mlp import PlainNetwork, plain_backward, plain_backward_enabled, plain_forward
from ..models.policies import ArgmaxPolicy, CategoricalPolicy, DeterministicPolicy, GreedyNormalPolicy, NormalPolicy
from ..serialization import register
from ._common import optimizer_step
from .base import QLearningAlgoBase
from .config import NON_NEGATIVE, POSITIVE, POSITIVE_INT, LearnableConfig, instance_of, one_of, param

__all__ = [
    "BCConfig",
    "BC",
    "DiscreteBCConfig",
    "DiscreteBC",
    "BCModules",
    "DiscreteBCModules",
    "CategoricalPolicyBase",
]

POLICY_TYPES = ("deterministic", "stochastic")

#: log-std bounds of the stochastic BC policy (d3rlpy's values)
MIN_LOGSTD = -4.0
MAX_LOGSTD = 15.0


@register("algorithm", "bc")
@dataclasses.dataclass
class BCConfig(LearnableConfig):
    """Config of behaviour cloning for continuous actions.

    Loss:
        In the action scaler's [-1, 1] space (details in :mod:`offrl.algos.bc`):
        deterministic  L(θ) = E_(s,a)~D [ mean_j (tanh f_θ(s)_j − a_j)² ];
        stochastic     L(θ) = E_(s,a)~D [ −log N(a; tanh μ_θ(s), diag σ_θ(s)²) ].

    Defaults:
        d3rlpy 2.8.1's (Adam, learning_rate=1e-3, batch_size=100,
        deterministic policy). Behaviour cloning has no canonical paper
        setting.

    References:
        Pomerleau, "Efficient Training of Artificial Neural Networks for
        Autonomous Navigation", Neural Computation 3(1), 1991 (no arXiv id).

    Args:
        learning_rate: optimizer learning rate.
        policy_type: ``"deterministic"`` (mean squared error to the logged
            action) or ``"stochastic"`` (Gaussian negative log-likelihood).
        optim_factory: optimizer (Adam by default).
        encoder_factory: encoder of the policy.
    """

    batch_size: int = param(100, check=POSITIVE_INT)
    learning_rate: float = param(1e-3, check=POSITIVE)
    policy_type: str = param("deterministic", check=one_of(POLICY_TYPES))
    optim_factory: OptimizerFactory = param(default_factory=AdamFactory, check=instance_of(OptimizerFactory))
    encoder_factory: EncoderFactory = param(default_factory=DefaultEncoderFactory, check=instance_of(EncoderFactory))


@dataclasses.dataclass(frozen=True)
class BCModules(Modules):
    """BC's policy (Gaussian or deterministic) and its optimizer."""

    policy: Union[NormalPolicy, DeterministicPolicy]
    optim: OptimizerWrapper


def plain_policy(algo: Any, x: Any) -> Optional[PlainNetwork]:
    """``algo``'s policy (an encoder and a linear ``fc`` head) as a plain
    ReLU MLP whose step can be written out now (see
    :mod:`offrl.models.plain_mlp`), else None (autograd)."""
    plain = _plain_holder(algo)
    return plain if plain.usable(x) else None


def _plain_holder(algo: Any) -> PlainNetwork:
    policy, optim = algo._modules.policy, algo._modules.optim
    plain = algo.__dict__.get("_plain")
    if plain is None or not plain.matches(policy, optim):
        # the autograd step calls the policy and its head as modules
        plain = algo._plain = PlainNetwork.create(policy, policy.encoder, policy.fc, optim, called=(policy, policy.fc))
    return plain


def written_out_step_available(algo: Any) -> bool:
    """Whether ``algo``'s built policy trains with its backward written out
    (see :meth:`QLearningAlgoBase._written_out_step_available`)."""
    return algo.is_built and plain_backward_enabled() and _plain_holder(algo).layers is not None


class BC(QLearningAlgoBase, config=BCConfig):
    """Behaviour cloning for continuous actions (see the module docstring)."""

    _action_type = ActionSpace.CONTINUOUS
    _modules: BCModules
    _policy_module = "policy"
    _policy_optim = "optim"

    @property
    def _stochastic(self) -> bool:
        return self._config.policy_type == "stochastic"

    @property
    def has_stochastic_policy(self) -> bool:
        """Only the stochastic policy has a density (the deterministic one is a point)."""
        return self._stochastic

    def _build(self, observation_shape, action_size: int) -> BCModules:
        cfg = self._config
        encoder = cfg.encoder_factory.create(observation_shape)
        feature_size = compute_output_size(encoder, observation_shape)
        if self._stochastic:
            policy: nn.Module = NormalPolicy(encoder, feature_size, action_size, min_logstd=MIN_LOGSTD, max_logstd=MAX_LOGSTD)
        else:
            policy = DeterministicPolicy(encoder, feature_size, action_size)
        return BCModules(policy=policy, optim=self._optimizer(cfg.optim_factory, [policy], cfg.learning_rate))

    def _loss(self, batch) -> torch.Tensor:
        """The imitation loss on a preprocessed torch batch (differentiable)."""
        policy = self._modules.policy
        if self._stochastic:
            return -policy.log_prob(batch.observations, batch.actions).mean()
        return ((policy(batch.observations) - batch.actions) ** 2).mean()

    def _update(self, batch, grad_step: int) -> Dict[str, torch.Tensor]:
        plain = None if self._stochastic else plain_policy(self, batch.observations)
        if plain is not None:
            return self._update_plain(batch, plain)
        loss = self._loss(batch)
        optimizer_step(self._modules.optim, loss)
        return {"loss": loss.detach()}

    def _written_out_step_available(self) -> bool:
        return not self._stochastic and written_out_step_available(self)

    def _update_plain(self, batch, plain: PlainNetwork) -> Dict[str, torch.Tensor]:
        """The deterministic policy's step with the backward written out:
        ``a_hat = tanh(z)``, and the loss ``mean((a_hat - a)^2)`` has the
        gradient ``2 (a_hat - a) (1 - a_hat^2) / n`` with respect to ``z``
        (``n`` = batch size x action size)."""
        with torch.no_grad():
            inputs, z = plain_forward(plain.layers, batch.observations)
            predicted = torch.tanh(z)
            error = predicted - batch.actions
            loss = (error**2).mean()
            grad = error.mul_(2.0 / error.numel()).mul_(1.0 - predicted * predicted)
            plain.step(plain_backward(plain.layers, inputs, grad))
        return {"loss": loss}

    def _predict(self, x) -> torch.Tensor:
        policy = self._modules.policy
        if self._stochastic:
            return torch.tanh(policy(x)[0])
        return policy(x)

    def _sample(self, x) -> torch.Tensor:
        if not self._stochastic:
            return self._predict(x)
        mean, logstd = self._modules.policy(x)
        action = torch.tanh(mean) + torch.randn_like(mean) * torch.exp(logstd)
        return action.clamp(-1.0, 1.0)

    def _action_log_prob(self, x, action: torch.Tensor) -> torch.Tensor:
        """Log-density of scaled ``action`` under ``N(tanh(mean), std)`` (stochastic
        policy only; the clipped mass at +-1 is ignored), ``(B,)`` (for :mod:`offrl.ope`)."""
        return self._modules.policy.log_prob(x, action)

    def policy_module(self) -> nn.Module:
        self._require_built()
        policy = self._modules.policy
        return GreedyNormalPolicy(policy) if self._stochastic else policy


@register("algorithm", "discrete_bc")
@dataclasses.dataclass
class DiscreteBCConfig(LearnableConfig):
    """Config of behaviour cloning for discrete actions.

    Loss:
        L(θ) = E_(s,a)~D [ −log softmax(z_θ(s))_a ] + β · mean_(s,k) z_θ(s)_k²
        with logits z_θ(s) over the actions and β = ``beta``.

    Defaults:
        d3rlpy 2.8.1's (Adam, learning_rate=1e-3, batch_size=100, beta=0.5).
        The logit penalty comes from discrete BCQ, whose reference code
        weights it 0.01.

    References:
        Fujimoto, Conti, Ghavamzadeh and Pineau, "Benchmarking Batch Deep
        Reinforcement Learning Algorithms", 2019, arXiv:1910.01708.

    Args:
        learning_rate: optimizer learning rate.
        optim_factory: optimizer (Adam by default).
        encoder_factory: encoder of the policy.
        beta: weight of the ``mean(logits**2)`` penalty.
    """

    batch_size: int = param(100, check=POSITIVE_INT)
    learning_rate: float = param(1e-3, check=POSITIVE)
    optim_factory: OptimizerFactory = param(default_factory=AdamFactory, check=instance_of(OptimizerFactory))
    encoder_factory: EncoderFactory = param(default_factory=DefaultEncoderFactory, check=instance_of(EncoderFactory))
    beta: float = param(0.5, check=NON_NEGATIVE)


@dataclasses.dataclass(frozen=True)
class DiscreteBCModules(Modules):
    """Discrete BC's policy (logits) and its optimizer."""

    policy: CategoricalPolicy
    optim: OptimizerWrapper


class CategoricalPolicyBase(QLearningAlgoBase):
    """The acting and OPE hooks of an algorithm whose ``policy`` module
    gives action logits (DiscreteBC, DiscreteSAC): greedy at the argmax,
    sampling from ``softmax(logits)``, exported as the argmax."""

    def _predict(self, x) -> torch.Tensor:
        return self._modules.policy(x).argmax(dim=-1)

    def _sample(self, x) -> torch.Tensor:
        probs = torch.softmax(self._modules.policy(x), dim=-1)
        return torch.multinomial(probs, 1).squeeze(1)

    def _action_probabilities(self, x) -> torch.Tensor:
        """``softmax(logits)``, ``(B, A)``: the distribution ``sample_action`` draws from (for :mod:`offrl.ope`)."""
        return torch.softmax(self._modules.policy(x), dim=-1)

    def policy_module(self) -> nn.Module:
        self._require_built()
        return ArgmaxPolicy(self._modules.policy)


class DiscreteBC(CategoricalPolicyBase, config=DiscreteBCConfig):
    """Behaviour cloning for discrete actions (see the module docstring)."""

    _action_type = ActionSpace.DISCRETE
    _modules: DiscreteBCModules
    _policy_module = "policy"
    _policy_optim = "optim"

    def _build(self, observation_shape, action_size: int) -> DiscreteBCModules:
        cfg = self._config
        encoder = cfg.encoder_factory.create(observation_shape)
        policy = CategoricalPolicy(encoder, compute_output_size(encoder, observation_shape), action_size)
        return DiscreteBCModules(policy=policy, optim=self._optimizer(cfg.optim_factory, [policy], cfg.learning_rate))

    def _loss(self, batch) -> torch.Tensor:
        """Cross entropy plus the logit penalty on a preprocessed torch batch."""
        logits = self._modules.policy(batch.observations)
        cross_entropy = F.cross_entropy(logits, batch.actions.reshape(-1).long())
        return cross_entropy + float(self._config.beta) * (logits**2).mean()

    def _update(self, batch, grad_step: int) -> Dict[str, torch.Tensor]:
        plain = plain_policy(self, batch.observations)
        if plain is not None:
            return self._update_plain(batch, plain)
        loss = self._loss(batch)
        optimizer_step(self._modules.optim, loss)
        return {"loss": loss.detach()}

    def _written_out_step_available(self) -> bool:
        return written_out_step_available(self)

    def _update_plain(self, batch, plain: PlainNetwork) -> Dict[str, torch.Tensor]:
        """:meth:`_update` with the backward written out: the loss's gradient
        with respect to the logits is ``(softmax(logits) - onehot(a)) / B +
        2 beta logits / (B x actions)``."""
        with torch.no_grad():
            inputs, logits = plain_forward(plain.layers, batch.observations)
            loss, grad = imitation_loss_and_grad(logits, batch.actions, float(self._config.beta))
            plain.step(plain_backward(plain.layers, inputs, grad))
        return {"loss": loss}


def imitation_loss_and_grad(logits: torch.Tensor, actions: torch.Tensor, beta: float):
    """DiscreteBC's (and DiscreteBCQ's imitator's) loss, cross entropy plus
    ``beta mean(logits^2)``, and its gradient with respect to the logits,
    ``(softmax(logits) - onehot(a)) / B + 2 beta logits / (B x actions)``;
    call without grad."""
    actions = actions.reshape(-1).long()
    loss = F.cross_entropy(logits, actions) + beta * (logits**2).mean()
    n = logits.shape[0]
    grad = torch.softmax(logits, dim=1).mul_(1.0 / n)
    grad.scatter_add_(1, actions.view(-1, 1), grad.new_full((n, 1), -1.0 / n))
    grad.add_(logits, alpha=2.0 * beta / logits.numel())
    return loss, grad

