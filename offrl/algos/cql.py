"""Conservative Q-Learning, continuous and discrete.

CQL (Kumar et al., 2020, "Conservative Q-Learning for Offline Reinforcement
Learning") adds to the critic loss a term that pushes Q down on actions
the data does not support and up on the dataset's actions, so that the
learned values lower-bound the policy's true values.

Continuous CQL is SAC (:mod:`offrl.algos.sac`: same actor, temperature and
target networks) whose critics ``Q_i`` also minimise, with a Lagrange
multiplier ``alpha`` (``alpha = exp(log_alpha)``):

    C_i = w ( E_{s ~ D} [ log sum_a exp Q_i(s, a) - E_{a ~ D} Q_i(s, a) ] - tau_c )
    L(theta_i) = L_SAC(theta_i) + alpha C_i
    J(log_alpha) = -alpha mean_i C_i             (alpha grows while the gap exceeds tau_c)

with ``w = conservative_weight`` and ``tau_c = alpha_threshold``. The
log-sum-exp over the action box is estimated by importance sampling
(CQL(H), as in the paper's reference implementation) from ``N =
n_action_samples`` actions of each of three proposals, all evaluated at
``s``:

    log sum_a exp Q(s, a) ~ logsumexp_k [ Q(s, a_k) - log q(a_k) ]
    a_k ~ Uniform[-1, 1]^A  (log q = A log 0.5),  a_k ~ pi(.|s),  a_k ~ pi(.|s')

(log-probabilities and sampled actions carry no gradient). One policy
pass on ``[s; s']`` gives the target's action and both policy proposals,
and the dataset's actions and all 3N proposals go through the critic
ensemble in one call (separate calls when a network has batch norm, whose
statistics would mix the rows, or with quantile critics). ``alpha`` is
projected onto ``[1e-8, 1e6]`` after each step and stays at
``initial_alpha`` when ``alpha_learning_rate`` is 0 (``alpha_loss`` then
reads 0). With ``soft_q_backup`` the critic target is SAC's (with the
entropy term); by default it is ``min_j Q'_j(s', tanh(mean(s')))`` at the
policy's greedy action, without the entropy term. The critic and
multiplier losses share one backward pass, as do the actor and temperature
losses (their parameters are disjoint). ``critic_loss`` reports the TD loss
plus ``conservative_loss`` (``sum_i alpha C_i``).

Discrete CQL is Double DQN (:mod:`offrl.algos.dqn`) plus, for each critic,

    alpha E_{(s, a) ~ D} [ log sum_a' exp Q_i(s, a') - Q_i(s, a) ]

summed over the ensemble (the paper uses DQN; Double DQN as in d3rlpy).
``conservative_loss`` reports the term without ``alpha``; ``loss`` is
``td_loss + alpha * conservative_loss``. With prioritized replay the
importance weights scale the TD loss only (the conservative term is a
regulariser over the states sampled, left unweighted) and the TD errors
become the new priorities, as in DQN.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, Optional, Tuple

import torch
import torch.nn.functional as F

from .._allocator import retain_freed_memory
from ..models.encoders import DefaultEncoderFactory, EncoderFactory
from ..models.optimizers import AdamFactory, OptimizerFactory, OptimizerWrapper
from ..models.plain_mlp import plain_backward, plain_forward
from ..models.parameters import ScalarParameter
from ..models.policies import squashed_sample
from ..models.q_functions import MeanQFunctionFactory, QFunctionFactory
from ..serialization import register
from ._common import hard_update, mixes_rows, optimizer_step, soft_update, stack_observations, td_target
from .base import TrainStepResult
from .config import (
    BOOL,
    FINITE,
    NON_NEGATIVE,
    POSITIVE,
    POSITIVE_INT,
    UNIT_INTERVAL_OPEN_LOW,
    LearnableConfig,
    between,
    instance_of,
    param,
)
from .dqn import DQN, DQNConfig, PlainQ, abs_td_errors
from .sac import SAC, SACModules, actor_temperature_step

__all__ = ["CQLConfig", "CQL", "CQLModules", "DiscreteCQLConfig", "DiscreteCQL"]

#: range ``alpha`` is projected onto after each Lagrangian step
ALPHA_RANGE = (1e-8, 1e6)


@register("algorithm", "cql")
@dataclasses.dataclass
class CQLConfig(LearnableConfig):
    """Config of continuous CQL (details in the module docstring).

    Loss:
        SAC's losses, each critic's plus α · C_i with
        C_i = w (E_s~D [ log Σ_a exp Q_i(s, a) ] − E_(s,a)~D [ Q_i(s, a) ] − τ_c),
        and the multiplier's J(log α) = −α mean_i C_i, where
        w = ``conservative_weight``, τ_c = ``alpha_threshold`` and the
        log-sum-exp is estimated from ``n_action_samples`` actions of each
        of three proposals.

    Defaults:
        d3rlpy 2.8.1's: actor learning rate 1e-4, critics 3e-4, temperature
        1e-4, α learned (1e-4) towards the threshold 10, conservative_weight
        5, 10 action samples, batch_size=256, tau=0.005. The paper's code
        uses the same learning rates; its Gym-MuJoCo runs keep the
        multiplier fixed (``alpha_learning_rate=0`` here) with weight 5.

    References:
        Kumar, Zhou, Tucker and Levine, "Conservative Q-Learning for Offline
        Reinforcement Learning", 2020, arXiv:2006.04779.

    Args:
        actor_learning_rate, critic_learning_rate: learning rates of the
            policy and of the Q-functions.
        temp_learning_rate: learning rate of SAC's log temperature (0: fixed).
        alpha_learning_rate: learning rate of the log Lagrange multiplier
            (0: ``alpha`` fixed at ``initial_alpha``).
        actor_optim_factory, critic_optim_factory, temp_optim_factory,
            alpha_optim_factory: optimizers.
        actor_encoder_factory, critic_encoder_factory: encoders.
        q_func_factory: Q-function type.
        tau: target network update rate.
        n_critics: number of Q-functions in the ensemble.
        initial_temperature: initial entropy temperature.
        initial_alpha: initial Lagrange multiplier ``alpha``.
        alpha_threshold: the gap ``tau_c`` the multiplier aims for.
        conservative_weight: ``w``, scale of the conservative term.
        n_action_samples: actions drawn from each proposal to estimate the
            log-sum-exp (and for ``max_q_backup``).
        soft_q_backup: keep SAC's entropy term in the critic target.
        max_q_backup: the critic target is ``min_j max_k Q'_j(s', a_k)`` over
            ``n_action_samples`` actions ``a_k ~ pi(.|s')`` (the paper's
            max-backup variant; d3rlpy 2.8's flag).
    """

    batch_size: int = param(256, check=POSITIVE_INT)
    actor_learning_rate: float = param(1e-4, check=POSITIVE)
    critic_learning_rate: float = param(3e-4, check=POSITIVE)
    temp_learning_rate: float = param(1e-4, check=NON_NEGATIVE)
    alpha_learning_rate: float = param(1e-4, check=NON_NEGATIVE)
    actor_optim_factory: OptimizerFactory = param(default_factory=AdamFactory, check=instance_of(OptimizerFactory))
    critic_optim_factory: OptimizerFactory = param(default_factory=AdamFactory, check=instance_of(OptimizerFactory))
    temp_optim_factory: OptimizerFactory = param(default_factory=AdamFactory, check=instance_of(OptimizerFactory))
    alpha_optim_factory: OptimizerFactory = param(default_factory=AdamFactory, check=instance_of(OptimizerFactory))
    actor_encoder_factory: EncoderFactory = param(default_factory=DefaultEncoderFactory, check=instance_of(EncoderFactory))
    critic_encoder_factory: EncoderFactory = param(default_factory=DefaultEncoderFactory, check=instance_of(EncoderFactory))
    q_func_factory: QFunctionFactory = param(default_factory=MeanQFunctionFactory, check=instance_of(QFunctionFactory))
    tau: float = param(0.005, check=UNIT_INTERVAL_OPEN_LOW)
    n_critics: int = param(2, check=POSITIVE_INT)
    initial_temperature: float = param(1.0, check=POSITIVE)
    initial_alpha: float = param(1.0, check=between(*ALPHA_RANGE))
    alpha_threshold: float = param(10.0, check=FINITE)
    conservative_weight: float = param(5.0, check=NON_NEGATIVE)
    n_action_samples: int = param(10, check=POSITIVE_INT)
    soft_q_backup: bool = param(False, check=BOOL)
    max_q_backup: bool = param(False, check=BOOL)

    def validate(self) -> None:
        super().validate()
        if self.soft_q_backup and self.max_q_backup:
            raise ValueError("soft_q_backup and max_q_backup cannot both be True: choose one critic target")


def _uniform_actions(batch: int, n: int, action_size: int, device: torch.device) -> torch.Tensor:
    """``(batch, n, action_size)`` actions uniform in ``[-1, 1]``."""
    return torch.rand((batch, n, action_size), device=device) * 2.0 - 1.0


def _repeat_observations(x: Any, n: int) -> Any:
    """Each row repeated ``n`` times in place: row ``b * n + k`` is row ``b``."""
    if isinstance(x, (list, tuple)):
        return [v.repeat_interleave(n, dim=0) for v in x]
    return x.repeat_interleave(n, dim=0)


@dataclasses.dataclass(frozen=True)
class CQLModules(SACModules):
    """SAC's networks and optimizers plus the Lagrange multiplier
    (``alpha_optim`` is None when ``alpha`` is fixed)."""

    log_alpha: ScalarParameter
    alpha_optim: Optional[OptimizerWrapper]


class CQL(SAC, config=CQLConfig):
    """Conservative Q-Learning for continuous actions (see the module
    docstring): SAC's networks, acting and actor step, with the conservative
    critic update."""

    _modules: CQLModules

    def _build(self, observation_shape, action_size: int) -> CQLModules:
        modules = super()._build(observation_shape, action_size)
        cfg = self._config
        if self._device.type == "cpu":
            # the conservative term allocates and frees ~16 MB activations every
            # step: keep them in the heap rather than page-faulting them back
            retain_freed_memory()
        # rows of one call share batch-norm statistics: merge calls only without it
        self._one_policy_call = not mixes_rows(modules.policy)
        self._one_critic_call = isinstance(cfg.q_func_factory, MeanQFunctionFactory) and not mixes_rows(
            modules.q_function)
        log_alpha = ScalarParameter(cfg.initial_alpha)
        alpha_optim = self._optimizer(cfg.alpha_optim_factory, [log_alpha], cfg.alpha_learning_rate) \
            if cfg.alpha_learning_rate > 0 else None
        return CQLModules.extending(modules, log_alpha=log_alpha, alpha_optim=alpha_optim)

    def _target(self, batch, next_mean: torch.Tensor, next_logstd: torch.Tensor) -> torch.Tensor:
        targ = self._modules.targ_q_function
        if self._config.max_q_backup:
            n = int(self._config.n_action_samples)
            actions, _ = squashed_sample(next_mean, next_logstd, n)  # (B, n, A)
            values = targ.expected(_repeat_observations(batch.next_observations, n), actions.reshape(-1, actions.shape[-1]))
            values = values.view(values.shape[0], next_mean.shape[0], n)  # (E, B, n)
            next_value = values.max(dim=2).values.min(dim=0).values.unsqueeze(-1)  # (B, 1)
        elif self._config.soft_q_backup:
            next_action, next_log_prob = squashed_sample(next_mean, next_logstd)
            next_dist, _ = targ.at_action(batch.next_observations, next_action)
            next_value = targ.reduce(next_dist, "min") - self._modules.log_temp() * next_log_prob.unsqueeze(-1)
        else:
            next_dist, _ = targ.at_action(batch.next_observations, torch.tanh(next_mean))
            next_value = targ.reduce(next_dist, "min")
        return td_target(batch.rewards, next_value, batch.terminals, self._config.gamma, batch.intervals)

    def _proposal_values(self, values: torch.Tensor, n: int, batch: Any) -> torch.Tensor:
        """Hook: the critics' values ``(E, B, 3n)`` at the sampled actions
        as they enter the log-sum-exp (columns ``[0, n)`` uniform, ``[n, 3n)``
        the policy's at ``s`` and at ``s'``, all evaluated at ``s``);
        unchanged here (CalQL clips the policy's)."""
        return values

    def _proposals(self, mean: torch.Tensor, logstd: torch.Tensor, next_mean: torch.Tensor,
                   next_logstd: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """The ``3n`` proposal actions per state, ``(B, 3n, A)`` (uniform,
        ``pi(.|s)``, ``pi(.|s')``), and their log-densities ``(B, 3n)``;
        ``mean``, ``logstd``: the policy at ``s``, ``next_*`` at ``s'``."""
        n, size, batch_size = int(self._config.n_action_samples), int(self._action_size), mean.shape[0]
        actions_s, log_probs_s = squashed_sample(mean, logstd, n)  # (B, n, A), (B, n)
        actions_next, log_probs_next = squashed_sample(next_mean, next_logstd, n)
        uniform = _uniform_actions(batch_size, n, size, actions_s.device)
        actions = torch.cat([uniform, actions_s, actions_next], dim=1)
        log_density = torch.cat([torch.full_like(log_probs_s, size * math.log(0.5)), log_probs_s, log_probs_next], dim=1)
        return actions, log_density

    def _update(self, batch, grad_step: int) -> Dict[str, torch.Tensor]:
        cfg, m = self._config, self._modules
        q, targ = m.q_function, m.targ_q_function
        log_alpha = m.log_alpha
        observations = batch.observations
        n, size, batch_size = int(cfg.n_action_samples), int(self._action_size), batch.rewards.shape[0]
        policy = m.policy
        with torch.no_grad():
            if self._one_policy_call:  # one policy pass serves s (proposals) and s' (target, proposals)
                mean, logstd = policy(stack_observations(observations, batch.next_observations))
                next_mean, next_logstd = mean[batch_size:], logstd[batch_size:]
            else:
                next_mean, next_logstd = policy(batch.next_observations)
                mean, logstd = policy(observations)
            target = self._target(batch, next_mean, next_logstd)
            actions, log_density = self._proposals(mean[:batch_size], logstd[:batch_size], next_mean, next_logstd)
        if self._one_critic_call:
            # one critic call for the dataset's actions and the 3n proposals:
            # rows [0, B) hold (s, a), then row B + b * 3n + k holds (s_b, a_k)
            values = q.expected(
                stack_observations(observations, _repeat_observations(observations, 3 * n)),
                torch.cat([batch.actions.reshape(batch_size, size), actions.reshape(-1, size)]),
            )  # (E, B + 3nB, 1)
            pred, taus = values[:, :batch_size], None
            sampled = values[:, batch_size:].reshape(values.shape[0], batch_size, 3 * n)
        else:  # quantile critics (the TD loss draws its own taus) or batch norm
            pred, taus = q.at_action(observations, batch.actions)
            sampled = q.expected(_repeat_observations(observations, 3 * n), actions.reshape(-1, size))
            sampled = sampled.view(sampled.shape[0], batch_size, 3 * n)
        td_loss = q.loss(pred, target, taus)
        data_values = pred.mean(dim=-1)  # (E, B): expected Q at the dataset's actions
        # importance-sampled log sum_a exp Q_i(s, a), (E, B)
        logsumexp = torch.logsumexp(self._proposal_values(sampled, n, batch) - log_density, dim=2)
        # C_i of the module docstring, one per critic
        terms = cfg.conservative_weight * ((logsumexp - data_values).mean(dim=1) - cfg.alpha_threshold)  # (E,)
        alpha = log_alpha()
        conservative_loss = (alpha.detach() * terms).sum()
        alpha_optim = m.alpha_optim
        if alpha_optim is not None:
            alpha_loss = -(alpha * terms.detach()).mean()
        else:
            alpha_loss = torch.zeros((), device=alpha.device)
        critic_optim = m.critic_optim
        critic_optim.zero_grad()
        loss = td_loss + conservative_loss
        if alpha_optim is not None:
            # disjoint parameters: one backward pass serves both losses
            alpha_optim.zero_grad()
            loss = loss + alpha_loss
        loss.backward()
        critic_optim.step()
        if alpha_optim is not None:
            alpha_optim.step()
            log_alpha.clamp_(*ALPHA_RANGE)

        metrics = actor_temperature_step(
            m.policy, q, m.log_temp, m.actor_optim,
            m.temp_optim, batch.observations, -float(self._action_size),
            self._plain_actor(self._plain_networks(batch.observations)),  # written out where it can be
        )
        soft_update(targ, q, float(cfg.tau))
        return {
            "critic_loss": (td_loss + conservative_loss).detach(),
            **metrics,
            "alpha_loss": alpha_loss.detach(),
            "alpha": alpha.detach(),
            "conservative_loss": conservative_loss.detach(),
        }


@register("algorithm", "discrete_cql")
@dataclasses.dataclass
class DiscreteCQLConfig(DQNConfig):
    """Config of discrete CQL: Double DQN plus the conservative term (see
    the module docstring).

    Loss:
        Double DQN's loss + α Σ_i E_(s,a)~D [ log Σ_a' exp Q_i(s, a') − Q_i(s, a) ]
        with α = ``alpha``.

    Defaults:
        d3rlpy 2.8.1's: DQN's (Adam 6.25e-5, batch_size=32,
        target_update_interval=8000) with alpha=1.0. The paper's Atari
        experiments build on QR-DQN and set α per dataset.

    References:
        Kumar, Zhou, Tucker and Levine, "Conservative Q-Learning for Offline
        Reinforcement Learning", 2020, arXiv:2006.04779.

    Args:
        alpha: weight of the conservative term.
    """

    alpha: float = param(1.0, check=NON_NEGATIVE)


class DiscreteCQL(DQN, config=DiscreteCQLConfig):
    """Conservative Q-Learning for discrete actions: Double DQN networks and
    target, plus the conservative term (see the module docstring)."""

    _double = True

    def _update(self, batch, grad_step: int) -> TrainStepResult:
        cfg = self._config
        if self._single_mean_q and batch.weights is None:
            plain = self._plain_q(batch.observations)
            if plain is not None:
                return self._update_plain(batch, grad_step, plain)
        q, targ = self._modules.q_function, self._modules.targ_q_function
        with torch.no_grad():
            next_action = q.expected(batch.next_observations).mean(dim=0).argmax(dim=-1)
            next_dist, _ = targ.at_action(batch.next_observations, next_action)
            target = td_target(batch.rewards, q.reduce(next_dist, "min"), batch.terminals, cfg.gamma, batch.intervals)
        values = q.expected(batch.observations)  # (E, B, A)
        data_values = values.gather(2, batch.actions.long().view(1, -1, 1).expand(values.shape[0], -1, 1))  # (E, B, 1)
        if isinstance(cfg.q_func_factory, MeanQFunctionFactory):
            pred, taus = data_values, None  # the same forward pass serves the TD loss
        else:
            pred, taus = q.at_action(batch.observations, batch.actions)
        data_values = data_values.squeeze(-1)
        td_loss = q.loss(pred, target, taus, batch.weights)
        td_errors = abs_td_errors(pred.detach(), target) if batch.weights is not None else None
        conservative_loss = (torch.logsumexp(values, dim=2) - data_values).mean(dim=1).sum()
        loss = td_loss + cfg.alpha * conservative_loss
        optimizer_step(self._modules.optim, loss)
        if grad_step % int(cfg.target_update_interval) == 0:
            hard_update(targ, q)
        metrics = {"loss": loss.detach(), "td_loss": td_loss.detach(), "conservative_loss": conservative_loss.detach()}
        return TrainStepResult(metrics, td_errors)

    def _update_plain(self, batch, grad_step: int, plain: PlainQ) -> TrainStepResult:
        """:meth:`_update` for one mean critic of plain ReLU MLPs with the
        backward written out (see :meth:`DQN._update_plain`): the loss's
        gradient with respect to ``Q(s, .)`` is ``alpha / B * softmax(Q(s, .))``
        plus, at the chosen action, ``clamp(Q(s, a) - y, -1, 1) / B - alpha / B``."""
        alpha = float(self._config.alpha)
        with torch.no_grad():
            target = self._greedy_targets(batch, plain)
            actions = (batch.actions if batch.actions.dtype == torch.int64 else batch.actions.long()).view(-1, 1)
            inputs, values = plain_forward(plain.layers, batch.observations)  # (B, A)
            data_values = values.gather(1, actions)
            td_loss = F.smooth_l1_loss(data_values, target, beta=1.0)
            logsumexp = torch.logsumexp(values, dim=1, keepdim=True)
            conservative_loss = (logsumexp - data_values).mean()
            n = values.shape[0]
            grad = torch.exp(values - logsumexp).mul_(alpha / n)
            grad_data = (data_values - target).clamp_(-1.0, 1.0).mul_(1.0 / n).sub_(alpha / n)
            plain.step(plain_backward(plain.layers, inputs, grad.scatter_add_(1, actions, grad_data)))
        self._copy_target(grad_step)
        loss = td_loss + alpha * conservative_loss
        return TrainStepResult({"loss": loss, "td_loss": td_loss, "conservative_loss": conservative_loss}, None)
