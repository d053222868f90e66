"""Bare-torch reference updates for ``benchmarks/algos.py``.

The same maths as offrl's algorithms at their default configs, written the
plain way: ``nn.Sequential`` MLPs (256-256, ReLU), ``torch.optim.Adam``,
mini-batches gathered with numpy fancy indexing from preallocated arrays and
wrapped with ``torch.from_numpy``. No offrl import: this is the floor that
offrl's update is measured against ("how fast can a torch user write this
by hand on this machine").

Critic ensembles come in two forms (``critics=``):

* ``"list"``: ``E`` separate ``nn.Sequential`` critics, outputs stacked;
* ``"batched"``: one module whose linear layers hold ``(E, in, out)``
  weights and run as one ``baddbmm`` per layer for all members (the CORL
  EDAC style; offrl's own critic ensembles are built this way).

The benchmark times both and compares offrl with the faster one.

Products (``products=``): ``"torch"`` (default) keeps torch's own
``nn.Linear`` / ``baddbmm`` (MKL's sgemm on the CPU); ``"onednn"`` swaps
every linear layer, after construction and with the same parameters, for
``offrl.models.layers``' ``Linear`` / ``EnsembleLinear``, whose float32 CPU
products go through oneDNN as offrl's networks do (on AMD CPUs about
twice MKL's rate for these shapes). That is the one offrl import here, so
that the like-for-like reference (oneDNN products, fused Adam, batched
critics) differs from offrl only in the code around the products.

Other plain-torch choices, made for speed and stated here:

* Adam with ``foreach=True`` (what offrl's ``AdamFactory`` uses too), or
  with ``fused=True`` (``fused_adam=True``; on the CPU in torch >= 2.4 the
  fused kernel is markedly faster for these small networks, so the
  benchmark shows it as a separate figure of what is possible);
* ``zero_grad(set_to_none=True)``;
* target networks follow with one ``torch._foreach_lerp_`` (Polyak) or
  ``torch._foreach_copy_`` (hard copy);
* while the actor's loss is backpropagated through a critic, the critic's
  parameters are switched to ``requires_grad=False`` so no weight gradients
  are computed for them (what offrl does as well);
* rewards, terminal flags are ``(B, 1)``; ``gamma`` is a Python float (offrl
  computes ``gamma ** interval`` per row to support multi-step pickers: one
  extra small op).

Every class has ``update(obs, actions, rewards, next_obs, terminals)`` on
torch tensors (followed by the tensors its ``extras`` names, when it has
them); :class:`NumpySampler` produces those.
"""

from __future__ import annotations

import copy
import math
from typing import Dict, List, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

HIDDEN = (256, 256)
LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)

__all__ = [
    "NumpySampler",
    "REFERENCES",
    "make_reference",
]


# ------------------------------------------------------------------- data
class NumpySampler:
    """Uniform transitions from preallocated ``(T, ...)`` arrays: one
    ``rng.integers`` draw and five fancy-index gathers per batch."""

    def __init__(self, observations: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
                 next_observations: np.ndarray, terminals: np.ndarray, seed: int = 1, **extras: np.ndarray) -> None:
        self.observations = np.ascontiguousarray(observations, dtype=np.float32)
        self.actions = np.ascontiguousarray(actions)
        self.rewards = np.ascontiguousarray(rewards, dtype=np.float32).reshape(-1, 1)
        self.next_observations = np.ascontiguousarray(next_observations, dtype=np.float32)
        self.terminals = np.ascontiguousarray(terminals, dtype=np.float32).reshape(-1, 1)
        self.size = self.observations.shape[0]
        self.rng = np.random.default_rng(seed)
        # per-row arrays some references also take (next_actions, returns_to_go), (T, ...) float32
        self.extras = {k: np.ascontiguousarray(v, dtype=np.float32).reshape(self.size, -1) for k, v in extras.items()}

    def sample(self, batch_size: int, extras: Sequence[str] = ()) -> Tuple[torch.Tensor, ...]:
        """The five tensors every reference takes, then ``extras`` by name."""
        idx = self.rng.integers(0, self.size, size=batch_size)
        return (
            torch.from_numpy(self.observations[idx]),
            torch.from_numpy(self.actions[idx]),
            torch.from_numpy(self.rewards[idx]),
            torch.from_numpy(self.next_observations[idx]),
            torch.from_numpy(self.terminals[idx]),
        ) + tuple(torch.from_numpy(self.extras[name][idx]) for name in extras)


# ----------------------------------------------------------------- models
def mlp(in_features: int, out_features: int, hidden: Sequence[int] = HIDDEN) -> nn.Sequential:
    layers: List[nn.Module] = []
    size = in_features
    for units in hidden:
        layers += [nn.Linear(size, units), nn.ReLU()]
        size = units
    layers.append(nn.Linear(size, out_features))
    return nn.Sequential(*layers)


class BatchedLinear(nn.Module):
    """``E`` linear layers as ``(E, in, out)`` weights; ``(E, B, in) -> (E, B, out)``."""

    def __init__(self, ensemble: int, in_features: int, out_features: int) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(in_features)
        self.weight = nn.Parameter(torch.empty(ensemble, in_features, out_features).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(ensemble, 1, out_features).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)


class ListCritics(nn.Module):
    """``E`` separate ``nn.Sequential`` Q(s, a) networks; output ``(E, B, 1)``."""

    def __init__(self, ensemble: int, in_features: int) -> None:
        super().__init__()
        self.members = nn.ModuleList(mlp(in_features, 1) for _ in range(ensemble))

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        x = torch.cat([obs, action], dim=-1)
        return torch.stack([m(x) for m in self.members])

    def first(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """The first critic only, ``(B, 1)``."""
        return self.members[0](torch.cat([obs, action], dim=-1))


class BatchedCritics(nn.Module):
    """``E`` Q(s, a) networks with batched weights; output ``(E, B, 1)``."""

    def __init__(self, ensemble: int, in_features: int) -> None:
        super().__init__()
        self.ensemble = ensemble
        layers: List[nn.Module] = []
        size = in_features
        for units in HIDDEN:
            layers += [BatchedLinear(ensemble, size, units), nn.ReLU()]
            size = units
        layers.append(BatchedLinear(ensemble, size, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        x = torch.cat([obs, action], dim=-1)
        return self.net(x.unsqueeze(0).expand(self.ensemble, -1, -1))

    def first(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.forward(obs, action)[0]


def make_critics(kind: str, ensemble: int, in_features: int) -> nn.Module:
    if kind == "list":
        return ListCritics(ensemble, in_features)
    if kind == "batched":
        return BatchedCritics(ensemble, in_features)
    raise ValueError(f"critics must be 'list' or 'batched', got {kind!r}")


class GaussianPolicy(nn.Module):
    """Shared trunk, ``mu`` head and a ``logstd`` head (state-dependent,
    clamped) or parameter (state-independent, mapped into the range by a
    sigmoid, as offrl's ``NormalPolicy(use_std_parameter=True)``)."""

    def __init__(self, obs_dim: int, action_dim: int, min_logstd: float, max_logstd: float,
                 state_dependent_std: bool) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(obs_dim, HIDDEN[0]), nn.ReLU(), nn.Linear(HIDDEN[0], HIDDEN[1]), nn.ReLU())
        self.mu = nn.Linear(HIDDEN[1], action_dim)
        self.state_dependent_std = state_dependent_std
        if state_dependent_std:
            self.logstd = nn.Linear(HIDDEN[1], action_dim)
        else:
            self.logstd = nn.Parameter(torch.zeros(1, action_dim))
        self.min_logstd, self.max_logstd = min_logstd, max_logstd

    def forward(self, obs: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        h = self.trunk(obs)
        mean = self.mu(h)
        if self.state_dependent_std:
            return mean, self.logstd(h).clamp(self.min_logstd, self.max_logstd)
        span = self.max_logstd - self.min_logstd
        return mean, (self.min_logstd + torch.sigmoid(self.logstd) * span).expand_as(mean)


def squashed_sample(mean: torch.Tensor, logstd: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """``tanh(u)``, ``u ~ N(mean, exp(logstd))`` (reparameterised), and its
    log-density with the tanh correction; samples along the leading axes."""
    noise = torch.randn_like(mean)
    u = mean + noise * logstd.exp()
    log_prob = (-0.5 * noise**2 - logstd - LOG_SQRT_2PI).sum(dim=-1)
    log_prob = log_prob - (2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))).sum(dim=-1)
    return torch.tanh(u), log_prob


def adam(params, lr: float, fused: bool = False) -> torch.optim.Adam:
    """Adam with the multi-tensor (``foreach``) kernels, or the fused one."""
    if fused:
        return torch.optim.Adam(list(params), lr=lr, fused=True)
    return torch.optim.Adam(list(params), lr=lr, foreach=True)


def polyak(target: nn.Module, source: nn.Module, tau: float) -> None:
    with torch.no_grad():
        torch._foreach_lerp_(list(target.parameters()), list(source.parameters()), tau)


def frozen_copy(module: nn.Module) -> nn.Module:
    target = copy.deepcopy(module)
    for p in target.parameters():
        p.requires_grad_(False)
    return target


def set_requires_grad(params: List[nn.Parameter], flag: bool) -> None:
    for p in params:
        p.requires_grad_(flag)


# ------------------------------------------------------------- algorithms
class RefBC:
    """Deterministic BC: ``mean((tanh(f(s)) - a)^2)``; batch 100, lr 1e-3."""

    batch_size = 100
    n_critics = 0

    def __init__(self, obs_dim: int, action_dim: int, critics: str = "list", fused_adam: bool = False) -> None:
        self.policy = mlp(obs_dim, action_dim)
        self.optim = adam(self.policy.parameters(), 1e-3, fused_adam)

    def update(self, obs, actions, rewards, next_obs, terminals, step: int) -> Dict[str, torch.Tensor]:
        loss = ((torch.tanh(self.policy(obs)) - actions) ** 2).mean()
        self.optim.zero_grad(set_to_none=True)
        loss.backward()
        self.optim.step()
        return {"loss": loss.detach()}


class RefTD3PlusBC:
    """TD3+BC (Fujimoto & Gu 2021) at d3rlpy's defaults: batch 256, lr 3e-4,
    2 critics, tau 0.005, target noise 0.2 clipped at 0.5, alpha 2.5, actor
    (and targets) every 2nd step."""

    batch_size = 256
    n_critics = 2

    def __init__(self, obs_dim: int, action_dim: int, critics: str = "batched", gamma: float = 0.99,
                 fused_adam: bool = False) -> None:
        self.gamma = gamma
        self.policy = mlp(obs_dim, action_dim)
        self.targ_policy = frozen_copy(self.policy)
        self.q = make_critics(critics, 2, obs_dim + action_dim)
        self.targ_q = frozen_copy(self.q)
        self.actor_optim = adam(self.policy.parameters(), 3e-4, fused_adam)
        self.critic_optim = adam(self.q.parameters(), 3e-4, fused_adam)
        self.critic_params = list(self.q.parameters())
        self.actor_loss = torch.zeros(())

    def update(self, obs, actions, rewards, next_obs, terminals, step: int) -> Dict[str, torch.Tensor]:
        with torch.no_grad():
            next_actions = torch.tanh(self.targ_policy(next_obs))
            noise = (torch.randn_like(next_actions) * 0.2).clamp(-0.5, 0.5)
            next_actions = (next_actions + noise).clamp(-1.0, 1.0)
            next_q = self.targ_q(next_obs, next_actions).min(dim=0).values  # (B, 1)
            target = rewards + self.gamma * (1.0 - terminals) * next_q
        critic_loss = ((self.q(obs, actions) - target) ** 2).mean(dim=(1, 2)).sum()
        self.critic_optim.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_optim.step()
        if step % 2 == 0:
            set_requires_grad(self.critic_params, False)
            policy_actions = torch.tanh(self.policy(obs))
            q_first = self.q.first(obs, policy_actions)
            lam = 2.5 / q_first.abs().mean().detach()
            actor_loss = -lam * q_first.mean() + ((policy_actions - actions) ** 2).mean()
            self.actor_optim.zero_grad(set_to_none=True)
            actor_loss.backward()
            self.actor_optim.step()
            set_requires_grad(self.critic_params, True)
            polyak(self.targ_q, self.q, 0.005)
            polyak(self.targ_policy, self.policy, 0.005)
            self.actor_loss = actor_loss.detach()
        return {"critic_loss": critic_loss.detach(), "actor_loss": self.actor_loss}


class RefIQL:
    """IQL (Kostrikov et al. 2021) as offrl computes it: batch 256, lr 3e-4,
    2 critics, expectile 0.7, weight_temp 3, max_weight 100, tau 0.005;
    Normal(tanh(mu), std) policy with a state-independent logstd in [-5, 2]
    (sigmoid-mapped);
    one backward pass for critic + value + actor losses."""

    batch_size = 256
    n_critics = 2

    def __init__(self, obs_dim: int, action_dim: int, critics: str = "batched", gamma: float = 0.99,
                 fused_adam: bool = False) -> None:
        self.gamma = gamma
        self.policy = GaussianPolicy(obs_dim, action_dim, -5.0, 2.0, state_dependent_std=False)
        self.q = make_critics(critics, 2, obs_dim + action_dim)
        self.targ_q = frozen_copy(self.q)
        self.value = mlp(obs_dim, 1)
        self.actor_optim = adam(self.policy.parameters(), 3e-4, fused_adam)
        self.critic_optim = adam(list(self.q.parameters()) + list(self.value.parameters()), 3e-4, fused_adam)

    def update(self, obs, actions, rewards, next_obs, terminals, step: int) -> Dict[str, torch.Tensor]:
        with torch.no_grad():
            targ_q = self.targ_q(obs, actions).min(dim=0).values  # (B, 1)
            target = rewards + self.gamma * (1.0 - terminals) * self.value(next_obs)
        value = self.value(obs)
        diff = targ_q - value
        v_loss = (torch.where(diff > 0, 0.7, 0.3) * diff**2).mean()
        q_loss = ((self.q(obs, actions) - target) ** 2).mean(dim=(1, 2)).sum()
        weight = torch.exp(3.0 * (targ_q - value.detach())).clamp(max=100.0).view(-1)
        mean, logstd = self.policy(obs)
        log_prob = (-0.5 * ((actions - torch.tanh(mean)) * torch.exp(-logstd)) ** 2 - logstd - LOG_SQRT_2PI).sum(dim=-1)
        actor_loss = -(weight * log_prob).mean()
        self.critic_optim.zero_grad(set_to_none=True)
        self.actor_optim.zero_grad(set_to_none=True)
        (q_loss + v_loss + actor_loss).backward()
        self.critic_optim.step()
        self.actor_optim.step()
        polyak(self.targ_q, self.q, 0.005)
        return {"q_loss": q_loss.detach(), "v_loss": v_loss.detach(), "actor_loss": actor_loss.detach()}


class _SACBase:
    """Squashed-Gaussian actor (state-dependent logstd in [-20, 2]), critics,
    learned temperature; the actor/temperature step of SAC."""

    batch_size = 256
    n_critics = 2

    def __init__(self, obs_dim: int, action_dim: int, critics: str, gamma: float,
                 actor_lr: float, critic_lr: float, temp_lr: float, fused_adam: bool) -> None:
        self.gamma = gamma
        self.target_entropy = -float(action_dim)
        self.policy = GaussianPolicy(obs_dim, action_dim, -20.0, 2.0, state_dependent_std=True)
        self.q = make_critics(critics, 2, obs_dim + action_dim)
        self.targ_q = frozen_copy(self.q)
        self.log_temp = nn.Parameter(torch.zeros(()))  # initial temperature 1.0
        self.actor_optim = adam(self.policy.parameters(), actor_lr, fused_adam)
        self.critic_optim = adam(self.q.parameters(), critic_lr, fused_adam)
        self.temp_optim = adam([self.log_temp], temp_lr, fused_adam)
        self.critic_params = list(self.q.parameters())

    def actor_temperature_step(self, obs: torch.Tensor) -> Dict[str, torch.Tensor]:
        mean, logstd = self.policy(obs)
        action, log_prob = squashed_sample(mean, logstd)
        temp = self.log_temp.exp()
        set_requires_grad(self.critic_params, False)
        q_value = self.q(obs, action).min(dim=0).values.squeeze(-1)
        set_requires_grad(self.critic_params, True)
        actor_loss = (temp.detach() * log_prob - q_value).mean()
        temp_loss = -(self.log_temp * (log_prob.detach() + self.target_entropy)).mean()
        self.actor_optim.zero_grad(set_to_none=True)
        self.temp_optim.zero_grad(set_to_none=True)
        (actor_loss + temp_loss).backward()
        self.actor_optim.step()
        self.temp_optim.step()
        return {"actor_loss": actor_loss.detach(), "temp_loss": temp_loss.detach(), "temp": temp.detach()}


class RefSAC(_SACBase):
    """SAC at d3rlpy's defaults: batch 256, all learning rates 3e-4, 2
    critics, tau 0.005, initial temperature 1."""

    def __init__(self, obs_dim: int, action_dim: int, critics: str = "batched", gamma: float = 0.99,
                 fused_adam: bool = False) -> None:
        super().__init__(obs_dim, action_dim, critics, gamma, 3e-4, 3e-4, 3e-4, fused_adam)

    def update(self, obs, actions, rewards, next_obs, terminals, step: int) -> Dict[str, torch.Tensor]:
        with torch.no_grad():
            mean, logstd = self.policy(next_obs)
            next_action, next_log_prob = squashed_sample(mean, logstd)
            next_value = self.targ_q(next_obs, next_action).min(dim=0).values - self.log_temp.exp() * next_log_prob.unsqueeze(-1)
            target = rewards + self.gamma * (1.0 - terminals) * next_value
        critic_loss = ((self.q(obs, actions) - target) ** 2).mean(dim=(1, 2)).sum()
        self.critic_optim.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_optim.step()
        metrics = self.actor_temperature_step(obs)
        polyak(self.targ_q, self.q, 0.005)
        return {"critic_loss": critic_loss.detach(), **metrics}


class RefCQL(_SACBase):
    """CQL (Kumar et al. 2020) at d3rlpy 2.x's defaults: batch 256, actor lr
    1e-4, critic lr 3e-4, temperature and alpha lr 1e-4, 2 critics, tau
    0.005, conservative_weight 5, alpha_threshold 10, n_action_samples 10,
    deterministic backup (no soft / max backup).

    Conservative term per critic ``i``::

        5 * (mean_s logsumexp_j [ Q_i(s, a_j) - log mu(a_j) ] - mean_{s,a} Q_i(s, a) - 10)

    over 10 actions from pi(.|s), 10 from pi(.|s') (both evaluated at s,
    detached) and 10 uniform in [-1, 1]^A (log density A * log 0.5). As in
    offrl: the Lagrange multiplier alpha = exp(log_alpha) (projected onto
    [1e-8, 1e6]) scales the conservative terms with its value before this
    step, and its loss ``-alpha * mean_i(conservative_i)`` shares the critic
    loss's backward pass. All 30 * B sampled (s, a) pairs go through the
    critics in one forward pass; one policy pass on [s; s'] serves the
    target's greedy action and both proposals.
    """

    n_action_samples = 10

    def __init__(self, obs_dim: int, action_dim: int, critics: str = "batched", gamma: float = 0.99,
                 fused_adam: bool = False) -> None:
        super().__init__(obs_dim, action_dim, critics, gamma, 1e-4, 3e-4, 1e-4, fused_adam)
        self.action_dim = action_dim
        self.log_alpha = nn.Parameter(torch.zeros(()))  # initial alpha 1.0
        self.alpha_optim = adam([self.log_alpha], 1e-4, fused_adam)

    def update(self, obs, actions, rewards, next_obs, terminals, step: int) -> Dict[str, torch.Tensor]:
        n, batch = self.n_action_samples, obs.shape[0]
        with torch.no_grad():
            both = torch.cat([obs, next_obs])  # one policy pass for s and s'
            mean, logstd = self.policy(both)
            next_action = torch.tanh(mean[batch:])
            target = rewards + self.gamma * (1.0 - terminals) * self.targ_q(next_obs, next_action).min(dim=0).values
            # (2B, n, A) samples and (2B, n) log densities
            mean = mean.unsqueeze(1).expand(-1, n, -1)
            logstd = logstd.unsqueeze(1).expand(-1, n, -1)
            policy_actions, policy_log_probs = squashed_sample(mean, logstd)
            random_actions = torch.empty(batch * n, self.action_dim).uniform_(-1.0, 1.0)
            # (B, 3n) importance weights, in the order [pi(s), pi(s'), uniform]
            log_probs = torch.cat([
                policy_log_probs[:batch], policy_log_probs[batch:],
                torch.full((batch, n), self.action_dim * math.log(0.5)),
            ], dim=1)
        # critics on s (repeated) with the 3n sampled actions: (E, 3 * B * n, 1)
        sampled_actions = torch.cat([
            policy_actions[:batch].reshape(batch * n, -1),
            policy_actions[batch:].reshape(batch * n, -1),
            random_actions,
        ])
        repeated_obs = obs.repeat_interleave(n, dim=0).repeat(3, 1)
        sampled_q = self.q(repeated_obs, sampled_actions).view(-1, 3, batch, n)
        sampled_q = sampled_q.permute(0, 2, 1, 3).reshape(-1, batch, 3 * n)
        sampled_q = self.sampled_values(sampled_q, n)
        logsumexp = torch.logsumexp(sampled_q - log_probs, dim=2)  # (E, B)
        data_q = self.q(obs, actions)  # (E, B, 1)
        conservative = 5.0 * ((logsumexp - data_q.squeeze(-1)).mean(dim=1) - 10.0)  # (E,)

        alpha = self.log_alpha.exp()
        alpha_loss = -(alpha * conservative.detach()).mean()
        td_loss = ((data_q - target) ** 2).mean(dim=(1, 2)).sum()
        critic_loss = td_loss + alpha.detach() * conservative.sum()
        # critics and log_alpha share no parameters: one backward pass for both
        self.critic_optim.zero_grad(set_to_none=True)
        self.alpha_optim.zero_grad(set_to_none=True)
        (critic_loss + alpha_loss).backward()
        self.critic_optim.step()
        self.alpha_optim.step()
        with torch.no_grad():
            self.log_alpha.clamp_(math.log(1e-8), math.log(1e6))
        alpha = alpha.detach()
        metrics = self.actor_temperature_step(obs)
        polyak(self.targ_q, self.q, 0.005)
        return {"critic_loss": critic_loss.detach(), "alpha": alpha, **metrics}

    def sampled_values(self, sampled_q: torch.Tensor, n: int) -> torch.Tensor:
        """``(E, B, 3n)`` critic values at [pi(s), pi(s'), uniform] samples."""
        return sampled_q


class RefCalQL(RefCQL):
    """Cal-QL (Nakamoto et al. 2023) as offrl computes it: RefCQL with the
    2n policy-sampled values clipped from below by the transition's
    Monte-Carlo return-to-go (gamma 0.99; precomputed once per row here,
    where offrl sums each batch's remaining rewards)."""

    extras = ("returns_to_go",)

    def update(self, obs, actions, rewards, next_obs, terminals, returns_to_go, step: int) -> Dict[str, torch.Tensor]:
        self.bound = returns_to_go.view(1, -1, 1)
        return super().update(obs, actions, rewards, next_obs, terminals, step)

    def sampled_values(self, sampled_q: torch.Tensor, n: int) -> torch.Tensor:
        return torch.cat([torch.maximum(sampled_q[:, :, : 2 * n], self.bound), sampled_q[:, :, 2 * n :]], dim=2)


class RefReBRAC:
    """ReBRAC (Tarasov et al. 2023) at d3rlpy's defaults: batch 1024, lr 1e-3,
    2 critics, tau 0.005, target noise 0.2 clipped at 0.5, actor_beta 0.001,
    critic_beta 0.01 (penalty ||a' - a'_D||^2 in the target), actor loss
    -Q_min / mean|Q_min| + beta_1 ||pi(s) - a||^2, actor and targets every 2nd step."""

    batch_size = 1024
    n_critics = 2
    extras = ("next_actions",)

    def __init__(self, obs_dim: int, action_dim: int, critics: str = "batched", gamma: float = 0.99,
                 fused_adam: bool = False) -> None:
        self.gamma = gamma
        self.policy = mlp(obs_dim, action_dim)
        self.targ_policy = frozen_copy(self.policy)
        self.q = make_critics(critics, 2, obs_dim + action_dim)
        self.targ_q = frozen_copy(self.q)
        self.actor_optim = adam(self.policy.parameters(), 1e-3, fused_adam)
        self.critic_optim = adam(self.q.parameters(), 1e-3, fused_adam)
        self.critic_params = list(self.q.parameters())
        self.actor_loss = torch.zeros(())

    def update(self, obs, actions, rewards, next_obs, terminals, next_data_actions, step: int) -> Dict[str, torch.Tensor]:
        with torch.no_grad():
            next_actions = torch.tanh(self.targ_policy(next_obs))
            noise = (torch.randn_like(next_actions) * 0.2).clamp(-0.5, 0.5)
            next_actions = (next_actions + noise).clamp(-1.0, 1.0)
            penalty = ((next_actions - next_data_actions) ** 2).sum(dim=1, keepdim=True)
            next_q = self.targ_q(next_obs, next_actions).min(dim=0).values - 0.01 * penalty  # (B, 1)
            target = rewards + self.gamma * (1.0 - terminals) * next_q
        critic_loss = ((self.q(obs, actions) - target) ** 2).mean(dim=(1, 2)).sum()
        self.critic_optim.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_optim.step()
        if step % 2 == 0:
            set_requires_grad(self.critic_params, False)
            policy_actions = torch.tanh(self.policy(obs))
            q_min = self.q(obs, policy_actions).min(dim=0).values
            lam = 1.0 / q_min.abs().mean().detach()
            bc = ((policy_actions - actions) ** 2).sum(dim=1, keepdim=True)
            actor_loss = (-lam * q_min + 0.001 * bc).mean()
            self.actor_optim.zero_grad(set_to_none=True)
            actor_loss.backward()
            self.actor_optim.step()
            set_requires_grad(self.critic_params, True)
            polyak(self.targ_q, self.q, 0.005)
            polyak(self.targ_policy, self.policy, 0.005)
            self.actor_loss = actor_loss.detach()
        return {"critic_loss": critic_loss.detach(), "actor_loss": self.actor_loss}


class RefDQN:
    """DQN at d3rlpy's defaults: batch 32, lr 6.25e-5, one Q-network, Huber
    loss, target copied every 8000 steps; ``double`` picks the target action
    with the online network (Double DQN)."""

    batch_size = 32
    n_critics = 1

    def __init__(self, obs_dim: int, n_actions: int, critics: str = "list", gamma: float = 0.99,
                 double: bool = False, conservative_alpha: float = 0.0, fused_adam: bool = False) -> None:
        self.gamma = gamma
        self.double = double
        self.conservative_alpha = conservative_alpha
        self.q = mlp(obs_dim, n_actions)
        self.targ_q = frozen_copy(self.q)
        self.optim = adam(self.q.parameters(), 6.25e-5, fused_adam)

    def update(self, obs, actions, rewards, next_obs, terminals, step: int) -> Dict[str, torch.Tensor]:
        actions = actions.view(-1, 1)
        with torch.no_grad():
            targ_values = self.targ_q(next_obs)
            if self.double:
                next_value = targ_values.gather(1, self.q(next_obs).argmax(dim=1, keepdim=True))
            else:
                next_value = targ_values.max(dim=1, keepdim=True).values
            target = rewards + self.gamma * (1.0 - terminals) * next_value
        values = self.q(obs)
        pred = values.gather(1, actions)
        loss = F.smooth_l1_loss(pred, target)
        out = {}
        if self.conservative_alpha:
            conservative = (torch.logsumexp(values, dim=1, keepdim=True) - pred).mean()
            out = {"td_loss": loss.detach(), "conservative_loss": conservative.detach()}
            loss = loss + self.conservative_alpha * conservative
        self.optim.zero_grad(set_to_none=True)
        loss.backward()
        self.optim.step()
        if (step + 1) % 8000 == 0:
            with torch.no_grad():
                torch._foreach_copy_(list(self.targ_q.parameters()), list(self.q.parameters()))
        return {"loss": loss.detach(), **out}


class RefDiscreteCQL(RefDQN):
    """Discrete CQL at d3rlpy's defaults: Double DQN plus
    ``alpha * mean(logsumexp_a Q(s, a) - Q(s, a_data))``, alpha 1."""

    def __init__(self, obs_dim: int, n_actions: int, critics: str = "list", gamma: float = 0.99,
                 fused_adam: bool = False) -> None:
        super().__init__(obs_dim, n_actions, critics, gamma, double=True, conservative_alpha=1.0, fused_adam=fused_adam)


class RefTD3:
    """TD3 (Fujimoto et al. 2018) at d3rlpy's defaults: batch 256, lr 3e-4,
    2 critics, tau 0.005, target noise 0.2 clipped at 0.5, actor (and
    targets) every 2nd step; ``-mean Q_1(s, pi(s))`` as the actor loss.
    :class:`RefDDPG` sets one critic, no noise, every step."""

    batch_size = 256
    n_critics = 2
    noise, interval = 0.2, 2

    def __init__(self, obs_dim: int, action_dim: int, critics: str = "batched", gamma: float = 0.99,
                 fused_adam: bool = False) -> None:
        self.gamma = gamma
        self.policy = mlp(obs_dim, action_dim)
        self.targ_policy = frozen_copy(self.policy)
        self.q = make_critics(critics, self.n_critics, obs_dim + action_dim)
        self.targ_q = frozen_copy(self.q)
        self.actor_optim = adam(self.policy.parameters(), 3e-4, fused_adam)
        self.critic_optim = adam(self.q.parameters(), 3e-4, fused_adam)
        self.critic_params = list(self.q.parameters())
        self.actor_loss = torch.zeros(())

    def update(self, obs, actions, rewards, next_obs, terminals, step: int) -> Dict[str, torch.Tensor]:
        with torch.no_grad():
            next_actions = torch.tanh(self.targ_policy(next_obs))
            if self.noise:
                noise = (torch.randn_like(next_actions) * self.noise).clamp(-0.5, 0.5)
                next_actions = (next_actions + noise).clamp(-1.0, 1.0)
            next_q = self.targ_q(next_obs, next_actions).min(dim=0).values  # (B, 1)
            target = rewards + self.gamma * (1.0 - terminals) * next_q
        critic_loss = ((self.q(obs, actions) - target) ** 2).mean(dim=(1, 2)).sum()
        self.critic_optim.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_optim.step()
        if step % self.interval == 0:
            set_requires_grad(self.critic_params, False)
            actor_loss = -self.q.first(obs, torch.tanh(self.policy(obs))).mean()
            self.actor_optim.zero_grad(set_to_none=True)
            actor_loss.backward()
            self.actor_optim.step()
            set_requires_grad(self.critic_params, True)
            polyak(self.targ_q, self.q, 0.005)
            polyak(self.targ_policy, self.policy, 0.005)
            self.actor_loss = actor_loss.detach()
        return {"critic_loss": critic_loss.detach(), "actor_loss": self.actor_loss}


class RefDDPG(RefTD3):
    """DDPG at d3rlpy's defaults: one critic, no target noise, actor and
    targets every step."""

    n_critics = 1
    noise, interval = 0.0, 1


class RefNFQ(RefDQN):
    """NFQ at d3rlpy's defaults: DQN bootstrapping from the online network
    (d3rlpy copies it into its target every step)."""

    def __init__(self, obs_dim: int, n_actions: int, critics: str = "list", gamma: float = 0.99,
                 fused_adam: bool = False) -> None:
        super().__init__(obs_dim, n_actions, critics, gamma, fused_adam=fused_adam)
        self.targ_q = self.q  # copying every step is the same as no copy


class DiscreteCritics(nn.Module):
    """``E`` Q(s, .) networks, output ``(E, B, A)``: separate ``nn.Sequential``
    (``list``) or one batched-weight stack (``batched``)."""

    def __init__(self, kind: str, ensemble: int, obs_dim: int, n_actions: int) -> None:
        super().__init__()
        self.kind, self.ensemble = kind, ensemble
        if kind == "list":
            self.members = nn.ModuleList(mlp(obs_dim, n_actions) for _ in range(ensemble))
        elif kind == "batched":
            layers: List[nn.Module] = []
            size = obs_dim
            for units in HIDDEN:
                layers += [BatchedLinear(ensemble, size, units), nn.ReLU()]
                size = units
            layers.append(BatchedLinear(ensemble, size, n_actions))
            self.net = nn.Sequential(*layers)
        else:
            raise ValueError(f"critics must be 'list' or 'batched', got {kind!r}")

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self.kind == "list":
            return torch.stack([m(obs) for m in self.members])
        return self.net(obs.unsqueeze(0).expand(self.ensemble, -1, -1))


class RefDiscreteSAC:
    """Discrete SAC (Christodoulou 2019) at d3rlpy's defaults: batch 64,
    lr 3e-4 (actor, critics, temperature), 2 critics with Huber loss,
    temperature 1 learned towards 0.98 log(A), target critics copied every
    8000 steps."""

    batch_size = 64
    n_critics = 2

    def __init__(self, obs_dim: int, n_actions: int, critics: str = "batched", gamma: float = 0.99,
                 fused_adam: bool = False) -> None:
        self.gamma = gamma
        self.policy = mlp(obs_dim, n_actions)
        self.q = DiscreteCritics(critics, 2, obs_dim, n_actions)
        self.targ_q = frozen_copy(self.q)
        self.log_temp = nn.Parameter(torch.zeros(()))
        self.actor_optim = adam(self.policy.parameters(), 3e-4, fused_adam)
        self.critic_optim = adam(self.q.parameters(), 3e-4, fused_adam)
        self.temp_optim = adam([self.log_temp], 3e-4, fused_adam)
        self.target_entropy = 0.98 * math.log(n_actions)

    def update(self, obs, actions, rewards, next_obs, terminals, step: int) -> Dict[str, torch.Tensor]:
        actions = actions.view(-1, 1)
        with torch.no_grad():
            next_log_pi = F.log_softmax(self.policy(next_obs), dim=-1)
            soft = self.targ_q(next_obs).min(dim=0).values - self.log_temp.exp() * next_log_pi
            target = rewards + self.gamma * (1.0 - terminals) * (next_log_pi.exp() * soft).sum(dim=1, keepdim=True)
        pred = self.q(obs).gather(2, actions.unsqueeze(0).expand(2, -1, -1))  # (E, B, 1)
        critic_loss = F.smooth_l1_loss(pred, target.unsqueeze(0).expand(2, -1, -1), reduction="none").mean(dim=(1, 2)).sum()
        self.critic_optim.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_optim.step()
        with torch.no_grad():
            q_min = self.q(obs).min(dim=0).values
        log_pi = F.log_softmax(self.policy(obs), dim=-1)
        pi = log_pi.exp()
        temp_loss = -(self.log_temp.exp() * ((pi * log_pi).sum(dim=1).detach() + self.target_entropy)).mean()
        self.temp_optim.zero_grad(set_to_none=True)
        temp_loss.backward()
        self.temp_optim.step()
        temp = self.log_temp.detach().exp()
        actor_loss = (pi * (temp * log_pi - q_min)).sum(dim=1).mean()
        self.actor_optim.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_optim.step()
        if step % 8000 == 0:
            with torch.no_grad():
                torch._foreach_copy_(list(self.targ_q.parameters()), list(self.q.parameters()))
        return {"critic_loss": critic_loss.detach(), "actor_loss": actor_loss.detach(), "temp_loss": temp_loss.detach()}



def gaussian_sample(mean: torch.Tensor, logstd: torch.Tensor, n: int = 0) -> torch.Tensor:
    """Clipped draws from ``N(tanh(mean), exp(logstd))``: ``(B, A)`` or ``(B, n, A)``."""
    loc, std = torch.tanh(mean), logstd.exp()
    if n:
        loc, std = loc.unsqueeze(1).expand(-1, n, -1), std.unsqueeze(1).expand(-1, n, -1)
    return (loc + torch.randn_like(loc) * std).clamp(-1.0, 1.0)


def gaussian_log_prob(actions: torch.Tensor, mean: torch.Tensor, logstd: torch.Tensor) -> torch.Tensor:
    return (-0.5 * ((actions - torch.tanh(mean)) * torch.exp(-logstd)) ** 2 - logstd - LOG_SQRT_2PI).sum(dim=-1)


def logged_and_sampled_values(q: nn.Module, obs: torch.Tensor, actions: torch.Tensor, sampled: torch.Tensor) -> torch.Tensor:
    """Every critic at the logged action and the ``N`` sampled ones, in one
    call: ``(E, B, 1 + N)``."""
    batch, n, size = sampled.shape
    all_actions = torch.cat([actions.unsqueeze(1), sampled], dim=1).reshape(-1, size)
    return q(obs.repeat_interleave(n + 1, dim=0), all_actions).view(-1, batch, n + 1)


class RefAWAC:
    """AWAC (Nair et al. 2020) as offrl computes it, at d3rlpy's defaults:
    batch 1024, lr 3e-4, 2 critics, tau 0.005, lambda 1, one action sample;
    Normal(tanh(mu), std) policy with a state-independent logstd in [-6, 0]
    (sigmoid-mapped); critic step, then actor step against the new critics."""

    batch_size = 1024
    n_critics = 2

    def __init__(self, obs_dim: int, action_dim: int, critics: str = "batched", gamma: float = 0.99,
                 fused_adam: bool = False) -> None:
        self.gamma = gamma
        self.policy = GaussianPolicy(obs_dim, action_dim, -6.0, 0.0, state_dependent_std=False)
        self.q = make_critics(critics, 2, obs_dim + action_dim)
        self.targ_q = frozen_copy(self.q)
        self.actor_optim = adam(self.policy.parameters(), 3e-4, fused_adam)
        self.critic_optim = adam(self.q.parameters(), 3e-4, fused_adam)

    def update(self, obs, actions, rewards, next_obs, terminals, step: int) -> Dict[str, torch.Tensor]:
        with torch.no_grad():
            next_q = self.targ_q(next_obs, gaussian_sample(*self.policy(next_obs))).min(dim=0).values
            target = rewards + self.gamma * (1.0 - terminals) * next_q
        critic_loss = ((self.q(obs, actions) - target) ** 2).mean(dim=(1, 2)).sum()
        self.critic_optim.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_optim.step()
        mean, logstd = self.policy(obs)
        with torch.no_grad():
            values = logged_and_sampled_values(self.q, obs, actions, gaussian_sample(mean, logstd, 1)).min(dim=0).values
            advantage = values[:, 0] - values[:, 1:].mean(dim=1)
            weights = torch.softmax(advantage, dim=0) * advantage.shape[0]
        actor_loss = -(weights * gaussian_log_prob(actions, mean, logstd)).mean()
        self.actor_optim.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_optim.step()
        polyak(self.targ_q, self.q, 0.005)
        return {"critic_loss": critic_loss.detach(), "actor_loss": actor_loss.detach()}


class RefCRR:
    """CRR (Wang et al. 2020) as offrl computes it, at d3rlpy's defaults:
    batch 100, lr 3e-4, one critic, 4 action samples, mean advantage, exp
    weights (beta 1, cap 20), hard target copies every 100 steps;
    Normal(tanh(mu), std) policy with a state-dependent logstd in [-20, 2]."""

    batch_size = 100
    n_critics = 1

    def __init__(self, obs_dim: int, action_dim: int, critics: str = "batched", gamma: float = 0.99,
                 fused_adam: bool = False) -> None:
        self.gamma = gamma
        self.policy = GaussianPolicy(obs_dim, action_dim, -20.0, 2.0, state_dependent_std=True)
        self.targ_policy = frozen_copy(self.policy)
        self.q = make_critics(critics, 1, obs_dim + action_dim)
        self.targ_q = frozen_copy(self.q)
        self.actor_optim = adam(self.policy.parameters(), 3e-4, fused_adam)
        self.critic_optim = adam(self.q.parameters(), 3e-4, fused_adam)

    def update(self, obs, actions, rewards, next_obs, terminals, step: int) -> Dict[str, torch.Tensor]:
        with torch.no_grad():
            next_q = self.targ_q(next_obs, gaussian_sample(*self.targ_policy(next_obs))).min(dim=0).values
            target = rewards + self.gamma * (1.0 - terminals) * next_q
        critic_loss = ((self.q(obs, actions) - target) ** 2).mean(dim=(1, 2)).sum()
        self.critic_optim.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_optim.step()
        mean, logstd = self.policy(obs)
        with torch.no_grad():
            values = logged_and_sampled_values(self.q, obs, actions, gaussian_sample(mean, logstd, 4)).mean(dim=0)
            weights = torch.exp(values[:, 0] - values[:, 1:].mean(dim=1)).clamp(max=20.0)
        actor_loss = -(weights * gaussian_log_prob(actions, mean, logstd)).mean()
        self.actor_optim.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_optim.step()
        if step % 100 == 0:
            with torch.no_grad():
                torch._foreach_copy_(list(self.targ_q.parameters()), list(self.q.parameters()))
                torch._foreach_copy_(list(self.targ_policy.parameters()), list(self.policy.parameters()))
        return {"critic_loss": critic_loss.detach(), "actor_loss": actor_loss.detach()}


REFERENCES = {
    "BC": RefBC,
    "TD3PlusBC": RefTD3PlusBC,
    "IQL": RefIQL,
    "SAC": RefSAC,
    "CQL": RefCQL,
    "CalQL": RefCalQL,
    "ReBRAC": RefReBRAC,
    "DQN": RefDQN,
    "DiscreteCQL": RefDiscreteCQL,
    "DDPG": RefDDPG,
    "TD3": RefTD3,
    "NFQ": RefNFQ,
    "DiscreteSAC": RefDiscreteSAC,
    "AWAC": RefAWAC,
    "CRR": RefCRR,
}


def _onednn_layers(module: nn.Module) -> None:
    """Replace, in place and recursively, each ``nn.Linear`` by
    ``offrl.models.layers.Linear`` and each :class:`BatchedLinear` by
    ``EnsembleLinear``, the new layers holding the same ``Parameter``
    objects (optimizers built before keep working)."""
    from offrl.models.layers import EnsembleLinear, Linear

    for child_name, child in list(module.named_children()):
        if type(child) is nn.Linear:
            new = Linear(child.in_features, child.out_features, bias=child.bias is not None)
            new.weight, new.bias = child.weight, child.bias
        elif isinstance(child, BatchedLinear):
            ensemble, in_features, out_features = child.weight.shape
            new = EnsembleLinear(ensemble, in_features, out_features)
            new.weight, new.bias = child.weight, child.bias
        else:
            _onednn_layers(child)
            continue
        setattr(module, child_name, new)


def make_reference(name: str, obs_dim: int, action_dim: int, critics: str, fused_adam: bool = False,
                   products: str = "torch"):
    """The reference of algorithm ``name`` (``action_dim``: the number of
    actions for DQN / DiscreteCQL); ``products``: ``"torch"`` or
    ``"onednn"`` (see the module docstring)."""
    if products not in ("torch", "onednn"):
        raise ValueError(f"products must be 'torch' or 'onednn', got {products!r}")
    reference = REFERENCES[name](obs_dim, action_dim, critics=critics, fused_adam=fused_adam)
    if products == "onednn":
        for value in vars(reference).values():
            if isinstance(value, nn.Module):
                _onednn_layers(value)
    return reference
