"""Policy in the Latent Action Space (PLAS), with and without perturbation.

PLAS (Zhou, Bajracharya and Held, 2020, "PLAS: Latent Action Space for
Offline Reinforcement Learning", https://arxiv.org/abs/2011.07213) keeps
the policy on the support of the data by letting it choose a *latent*
action that a conditional VAE of the logged actions
(:class:`offrl.models.vae.ConditionalVAE`, latent size ``2 * action_size``)
decodes:

    z(s)  = max_latent * tanh(f_phi(s))                  (max_latent = 2)
    a(s)  = tanh(D(s, z(s)))                             (the VAE's decoder)

Training has two phases:

* for the first ``warmup_steps`` steps only the VAE learns, on the β-weighted
  negative ELBO ``E ||D(s, z) - a||^2 / A + beta * KL(q(z | s, a) || N(0, I))``
  (``vae_loss``);
* then, every step, the twin critics and the latent policy (DDPG's order
  and Polyak averaging with ``tau``; the VAE stays fixed):

      a'     = tanh(D(s', z'(s')))                      (target latent policy)
      y      = r + gamma^k (1 - d) [ lam min_j Q'_j(s', a') + (1 - lam) max_j Q'_j(s', a') ]
      L_Q    = sum_i E [ l(y - Q_i(s, a)) ]
      L_pi   = -E_s [ Q_1(s, a(s)) ]                     (gradients through the decoder)

PLASWithPerturbation adds BCQ's perturbation actor ``xi`` on the decoded
action (``clip(a + action_flexibility * tanh(g(s, a)), -1, 1)``, trained
with the latent policy by the same optimizer, with its own target copy):
the acted, bootstrapped and optimised action is ``xi(s, a(s))``.

Every step reports ``vae_loss``, ``critic_loss`` and ``actor_loss``: the
loss of the phase not running is its last value (0 before it first runs),
as the logging loop needs one set of names.

Past the warm-up, where the networks are plain ReLU MLPs on the CPU (the
defaults), the critics' step and the actor's (through the fixed decoder and
the perturbation actor) run with their backward passes written out
(:mod:`offrl.models.plain_mlp`; the same maths as autograd's step).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Dict, Optional, Tuple

import torch
from torch import nn

from ..models.encoders import compute_output_size
from ..models.optimizers import OptimizerWrapper
from ..models.perturbation import PerturbationActor, create_perturbation_actor
from ..models.plain_mlp import (PlainNetwork, plain_backward, plain_backward_with_input_grad, plain_forward, plain_input_grad,
                                plain_layers)
from ..optimizers.optimizers import DirectStep
from ..models.policies import DeterministicPolicy
from ..models.vae import ConditionalVAE, VAEDecoder, create_conditional_vae
from ..serialization import register
from ._common import freeze, no_param_grads, optimizer_step, plain_encoder_head, shared_direct_step, soft_update
from .actor_critic import ImitatorActorCriticConfig
from .config import (
    NON_NEGATIVE,
    NON_NEGATIVE_INT,
    POSITIVE,
    POSITIVE_INT,
    UNIT_INTERVAL,
    param,
)
from .ddpg import DDPG, DDPGModules

__all__ = ["PLASConfig", "PLAS", "PLASModules", "PLASWithPerturbationConfig", "PLASWithPerturbation", "MAX_LATENT"]

#: the latent policy's range, ``[-MAX_LATENT, MAX_LATENT]`` per latent dimension (the paper's and d3rlpy's 2)
MAX_LATENT = 2.0


@register("algorithm", "plas")
@dataclasses.dataclass
class PLASConfig(ImitatorActorCriticConfig):
    """Config of PLAS (details in the module docstring).

    Loss:
        VAE (first ``warmup_steps`` steps) E ||D(s, z) − a||² / A + β KL(q(z | s, a) || N(0, I));
        critics Σ_i E [ ℓ(r + γ^k (1 − d) (λ min_j Q'_j(s', a') + (1 − λ) max_j Q'_j(s', a')) − Q_i(s, a)) ],
                a' = D(s', 2 tanh(f'(s')));
        actor   −E_s [ Q_1(s, D(s, 2 tanh(f(s)))) ].

    Defaults:
        d3rlpy 2.8.1's: batch_size=100, actor 1e-4, critic 1e-3, imitator
        (VAE) 1e-4 learning rates, tau=0.005, two critics, lam=0.75,
        beta=0.5, warmup_steps=500000 (the paper pre-trains the VAE for
        500k steps too). d3rlpy builds the VAE's optimizer with
        ``critic_optim_factory``; offrl uses ``imitator_optim_factory``, the
        field meant for it (both default to Adam).

    References:
        Zhou, Bajracharya and Held, "PLAS: Latent Action Space for Offline
        Reinforcement Learning", 2020, arXiv:2011.07213.

    Args:
        lam: weight of the critics' minimum against their maximum in the target.
        warmup_steps: steps that train only the VAE, before the critics and policy.
        beta: weight of the KL term of the VAE's loss.
    """

    batch_size: int = param(100, check=POSITIVE_INT)
    actor_learning_rate: float = param(1e-4, check=POSITIVE)
    imitator_learning_rate: float = param(1e-4, check=POSITIVE)
    lam: float = param(0.75, check=UNIT_INTERVAL)
    warmup_steps: int = param(500000, check=NON_NEGATIVE_INT)
    beta: float = param(0.5, check=NON_NEGATIVE)


@register("algorithm", "plas_with_perturbation")
@dataclasses.dataclass
class PLASWithPerturbationConfig(PLASConfig):
    """Config of PLAS with a perturbation actor (details in the module docstring).

    Loss:
        VAE as PLAS; critics as PLAS with a' = ξ'(s', D(s', 2 tanh(f'(s'))));
        actor −E_s [ Q_1(s, ξ(s, D(s, 2 tanh(f(s))))) ] over the latent
        policy and the perturbation actor ξ(s, a) = clip(a + Φ tanh(g(s, a)), −1, 1).

    Defaults:
        PLAS's, and action_flexibility Φ = 0.05 (d3rlpy 2.8.1's and the paper's).

    References:
        Zhou, Bajracharya and Held, "PLAS: Latent Action Space for Offline
        Reinforcement Learning", 2020, arXiv:2011.07213; Fujimoto, Meger and
        Precup, "Off-Policy Deep Reinforcement Learning without
        Exploration", 2019, arXiv:1812.02900.

    Args:
        action_flexibility: largest change the perturbation actor makes to
            each decoded action dimension (in the normalised range [-1, 1]).
    """

    action_flexibility: float = param(0.05, check=NON_NEGATIVE)


class LatentPolicy(nn.Module):
    """The acting policy of PLAS: ``x -> tanh(D(x, MAX_LATENT * pi(x)))``,
    then the perturbation actor when there is one (exported as is)."""

    def __init__(self, policy: nn.Module, vae: nn.Module, perturbation: Any = None) -> None:
        super().__init__()
        self.policy = policy
        self.vae = vae
        self.perturbation = perturbation

    def forward(self, x: Any) -> torch.Tensor:
        action = self.vae.decode(x, MAX_LATENT * self.policy(x))
        if self.perturbation is not None:
            action = self.perturbation(x, action)
        return action


@dataclasses.dataclass(frozen=True)
class PLASModules(DDPGModules):
    """DDPG's networks (the policy acting in the latent space) plus the
    conditional VAE, its optimizer and, with perturbation, the perturbation
    actor and its target copy (trained by ``actor_optim``)."""

    vae: ConditionalVAE
    perturbation: Optional[PerturbationActor]
    targ_perturbation: Optional[PerturbationActor]
    imitator_optim: OptimizerWrapper


class PLAS(DDPG, config=PLASConfig):
    """PLAS (see the module docstring): DDPG whose policy acts in the latent
    space of a conditional VAE pre-trained for ``warmup_steps``."""

    _modules: PLASModules

    def _build(self, observation_shape, action_size: int) -> PLASModules:
        cfg = self._config
        latent_size = 2 * action_size
        encoder = cfg.actor_encoder_factory.create(observation_shape)
        policy = DeterministicPolicy(encoder, compute_output_size(encoder, observation_shape), latent_size)
        q = cfg.q_func_factory.create(cfg.critic_encoder_factory, observation_shape, action_size, int(cfg.n_critics), discrete=False)
        vae = create_conditional_vae(cfg.imitator_encoder_factory, observation_shape, action_size, latent_size)
        perturbation = self._build_perturbation(observation_shape, action_size)
        actors = [policy] if perturbation is None else [policy, perturbation]
        zero = torch.zeros((), device=self._device)
        self._last_actor_loss = self._last_critic_loss = self._last_vae_loss = zero
        return PLASModules(
            policy=policy, targ_policy=freeze(copy.deepcopy(policy)), q_function=q, targ_q_function=freeze(copy.deepcopy(q)),
            vae=vae, perturbation=perturbation,
            targ_perturbation=None if perturbation is None else freeze(copy.deepcopy(perturbation)),
            actor_optim=self._optimizer(cfg.actor_optim_factory, actors, cfg.actor_learning_rate),
            critic_optim=self._optimizer(cfg.critic_optim_factory, [q], cfg.critic_learning_rate),
            imitator_optim=self._optimizer(cfg.imitator_optim_factory, [vae], cfg.imitator_learning_rate),
        )

    def _build_perturbation(self, observation_shape, action_size: int) -> Optional[PerturbationActor]:
        """The perturbation actor (``None``: plain PLAS)."""
        return None

    @staticmethod
    def _perturb(perturbation: Optional[nn.Module], x: Any, action: torch.Tensor) -> torch.Tensor:
        """``action`` through a perturbation actor (identity without one: PLAS)."""
        return action if perturbation is None else perturbation(x, action)

    def _decode(self, x: Any, latent_policy_output: torch.Tensor) -> torch.Tensor:
        return self._modules.vae.decode(x, MAX_LATENT * latent_policy_output)

    # ------------------------------------------------------------- hooks
    def _target_actions(self, next_observations: Any) -> torch.Tensor:
        action = self._decode(next_observations, self._modules.targ_policy(next_observations))
        return self._perturb(self._modules.targ_perturbation, next_observations, action)

    def _next_value(self, batch: Any, next_actions: torch.Tensor) -> torch.Tensor:
        """``lam * min_j Q'_j + (1 - lam) * max_j Q'_j`` at ``s'`` (no gradient)."""
        targ_q = self._modules.targ_q_function
        next_dist, _ = targ_q.at_action(batch.next_observations, next_actions)
        lam = float(self._config.lam)
        return lam * targ_q.reduce(next_dist, "min") + (1.0 - lam) * targ_q.reduce(next_dist, "max")

    def _actor_loss(self, batch: Any, policy_actions: torch.Tensor) -> torch.Tensor:
        # gradients flow through the (fixed) decoder to the latent action
        with no_param_grads(self._modules.vae):
            action = self._decode(batch.observations, policy_actions)
        action = self._perturb(self._modules.perturbation, batch.observations, action)
        return -self._modules.q_function.expected(batch.observations, action)[0].mean()

    # -------------------------------------------- the written-out step
    # bf16-mixed from DDPG's 64 rows on: measured (1-thread AVX-512 BF16 EPYC, against this step) 0.93x / 1.00x /
    # 1.18x / 1.33x at 32 / 64 / 128 / 256 rows, PLASWithPerturbation 0.90x / 1.04x / 1.13x / 1.28x (written_out.py)

    def _plain_decoder(self) -> PlainNetwork:
        """The VAE's decoder as a plain ReLU MLP read (not trained) by the
        written-out actor step (``layers`` None where it is not one); cached,
        looked at anew when the VAE changes."""
        vae = self._modules.vae
        held = self.__dict__.get("_plain_dec")
        if held is None or held.network is not vae:
            decoder = vae.decoder
            layers = plain_layers(decoder.encoder, decoder.fc, trainable=False) if type(decoder) is VAEDecoder else None
            modules = [] if layers is None else list(decoder.encoder.modules()) + [decoder, decoder.fc, vae]
            held = self._plain_dec = PlainNetwork(vae, None, layers, modules, None)
        return held

    def _plain_perturbation(self, actor: PlainNetwork) -> Tuple[PlainNetwork, Optional[DirectStep]]:
        """The perturbation actor as a plain ReLU MLP and one optimizer step
        over the latent policy's and its parameters (their shared optimizer;
        None where either is not plain); cached, looked at anew when the
        networks change."""
        m = self._modules
        held = self.__dict__.get("_plain_pert")
        if held is None or not held[0].matches(m.perturbation, m.actor_optim) or held[2] is not actor:
            pert = plain_encoder_head(m.perturbation, m.actor_optim, PerturbationActor)
            held = self._plain_pert = (pert, shared_direct_step(m.actor_optim, actor, pert), actor)
        return held[0], held[1]

    def _written_out_step_available(self) -> bool:
        if not super()._written_out_step_available() or self._plain_decoder().layers is None:
            return False
        return self._modules.perturbation is None or self._plain_perturbation(self._plain_holders()[0])[1] is not None

    def _actor_step_plain(self, batch: Any, actor: PlainNetwork, critic: PlainNetwork, encoder: nn.Module) -> torch.Tensor:
        """The latent policy's step written out, through the fixed decoder:
        with ``t = tanh(f(s))``, ``a = tanh(D(s, MAX_LATENT t))`` and the
        loss ``-mean Q_1(s, a)``, the gradient reaching ``a`` through the
        first critic's input goes through the decoder's tanh and its input
        (no gradient into its weights), times ``MAX_LATENT (1 - t^2)``. Where
        the decoder or the perturbation actor is not a plain ReLU MLP (or is
        hooked), the step runs through autograd.

        With the perturbation actor ``xi(s, a) = clip(a + phi tanh(g(s, a)),
        -1, 1)`` on the decoded action: the gradient reaching ``xi``'s output
        passes the clip's mask, then goes both to ``a`` directly and through
        ``phi (1 - tanh(g)^2)`` into ``g``'s weights and its input ``a``; one
        step of the shared optimizer takes the latent policy's and ``g``'s
        gradients."""
        m = self._modules
        decoder = self._plain_decoder()
        obs = batch.observations
        pert, step = (None, actor.step) if m.perturbation is None else self._plain_perturbation(actor)
        if step is None or not decoder.usable(obs) or (pert is not None and not pert.usable(obs)):
            return self._actor_step(batch)
        with torch.no_grad():
            policy_inputs, z = plain_forward(actor.layers, obs)
            t = torch.tanh(z)
            decoder_inputs, raw = plain_forward(decoder.layers, m.vae.decoder.encoder.flat_with_action(obs, MAX_LATENT * t))
            decoded = actions = torch.tanh(raw)
            if pert is not None:
                pert_inputs, g = plain_forward(pert.layers, m.perturbation.encoder.flat_with_action(obs, decoded))
                squashed = torch.tanh(g)
                unclipped = decoded + m.perturbation.action_flexibility * squashed
                actions = unclipped.clamp(-1.0, 1.0)
            inputs, values = plain_forward(critic.layers, encoder.flat_with_action(obs, actions))
            q_first = values[0] if values.dim() == 3 else values  # (B, 1)
            loss = -q_first.mean()
            grad_q = torch.full_like(q_first, -1.0 / q_first.shape[0])
            grad_actions = plain_input_grad(critic.layers, inputs, grad_q)[:, -actions.shape[1]:]
            pert_grads: list = []
            if pert is not None:
                grad_actions = grad_actions.mul_(((unclipped >= -1.0) & (unclipped <= 1.0)).to(grad_actions.dtype))
                grad_g = (grad_actions * (1.0 - squashed * squashed)).mul_(m.perturbation.action_flexibility)
                pert_grads, grad_pert_input = plain_backward_with_input_grad(pert.layers, pert_inputs, grad_g)
                grad_actions = grad_actions.add_(grad_pert_input[:, -actions.shape[1]:])
            grad_raw = grad_actions.mul_(1.0 - decoded * decoded)
            grad_latent = plain_input_grad(decoder.layers, decoder_inputs, grad_raw)[:, -t.shape[1]:]
            grad_z = grad_latent.mul_(MAX_LATENT).mul_(1.0 - t * t)
            step(plain_backward(actor.layers, policy_inputs, grad_z) + pert_grads)
        return loss

    def _update(self, batch, grad_step: int) -> Dict[str, torch.Tensor]:
        if grad_step < int(self._config.warmup_steps):
            loss, _, _ = self._modules.vae.loss(batch.observations, batch.actions, float(self._config.beta))
            optimizer_step(self._modules.imitator_optim, loss)
            self._last_vae_loss = loss.detach()
        else:
            losses = super()._update(batch, grad_step)
            self._last_critic_loss = losses["critic_loss"]
            if self._modules.perturbation is not None:
                soft_update(self._modules.targ_perturbation, self._modules.perturbation, float(self._config.tau))
        return {"vae_loss": self._last_vae_loss, "critic_loss": self._last_critic_loss, "actor_loss": self._last_actor_loss}

    # ---------------------------------------------------------- acting
    def _predict(self, x) -> torch.Tensor:
        return self._perturb(self._modules.perturbation, x, self._decode(x, self._modules.policy(x)))

    def policy_module(self) -> nn.Module:
        self._require_built()
        return LatentPolicy(self._modules.policy, self._modules.vae, self._modules.perturbation)


class PLASWithPerturbation(PLAS, config=PLASWithPerturbationConfig):
    """PLAS with BCQ's perturbation actor on the decoded action (see the
    module docstring)."""

    def _build_perturbation(self, observation_shape, action_size: int) -> Optional[PerturbationActor]:
        cfg = self._config
        return create_perturbation_actor(cfg.actor_encoder_factory, observation_shape, action_size, float(cfg.action_flexibility))


PLAS._actor_loss_written_for = PLAS._actor_loss
