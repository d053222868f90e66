"""The state-action density ratio ``w(s, a) = d_pi(s, a) / d_D(s, a)`` of
:mod:`offrl.ope.marginal`'s estimators, learned from data by DualDICE
(Nachum, Chow, Dai and Li, 2019, "DualDICE: Behavior-Agnostic Estimation of
Discounted Stationary Distribution Corrections", arXiv:1906.04733), which
needs no behaviour probabilities. Two networks ``nu(s, a)`` and ``zeta(s, a)`` play

    min_nu max_zeta J = E_D[(nu(s, a) - gamma nu(s', a')) zeta(s, a) - zeta(s, a)^2 / 2]
                        - (1 - gamma) E_{s_0, a_0 ~ pi}[nu(s_0, a_0)]

with ``a' ~ pi(s')`` (for discrete actions the exact expectation
``sum_a' pi(a'|s') nu(s', a')``), ``nu(s', .) = 0`` after an episode's last
step, and ``s_0`` the episodes' first observations. At the saddle point
``zeta = nu - gamma P_pi nu = d_pi / d_D`` (the Fenchel form of the
squared Bellman residual, so no double sampling of ``s'`` is needed).
Both players take one Adam step per mini-batch (simultaneous gradient
descent-ascent, ``zeta`` on the faster timescale), and the ratio is
``zeta``'s weights averaged over the last half of training. The target's
action probabilities at every logged step (discrete) or ``n_action_samples`` of its actions per step (continuous) are
computed once before training and kept on the device with the data, so an
update makes no host transfer: ``nu`` on the batch's states, next states and
(a quarter as many) initial states in one forward pass, ``zeta`` on the
batch, ``J``'s gradients with respect to those values written out (a few
ops, ``zeta``'s reversed) and one backward pass through both networks, one
fused Adam step per player, and ``zeta``'s running average by foreach ops.
When both networks are plain ReLU MLPs (the default vector encoder) the
backward pass is written out too: the forward runs without autograd,
keeping each layer's input, and each layer's gradients come from the same
products autograd would use (:func:`offrl.models.layers.linear_backward`);
with the default Adam, torch's fused kernel is called on the optimizer's
own state. Autograd's graph and ``Optimizer.step``'s bookkeeping cost ~40 %
of such an update on a CPU (256-256 MLPs, batch 100: ~2.2 -> ~1.3 ms);
other encoders and optimizers train through autograd. Negative ``zeta`` outputs are clipped to 0 (a ratio of
densities is non-negative); the result reports how many.

With :class:`DensityRatioConfig`'s defaults, on the tabular MDP of
``tests/ope/tabular_mdp.py`` (800 episodes, gamma 0.9, 2 datasets) MIS was
off by -0.005 and -0.021 (WIS with the logged probabilities: -0.026 and
+0.078); 10,000 updates took 3-4 minutes on the shared 2-CPU machine at
load 9-10 (one thread).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any, List, Optional, Tuple

import numpy as np
import torch
from torch import nn

from ..training.device import DeviceArg, parse_device
from ..models.encoders import DefaultEncoderFactory, EncoderFactory, compute_output_size
from ..models.layers import Linear
from ..models.plain_mlp import PlainLayers, plain_backward, plain_forward, plain_layers
from ..optimizers import AdamFactory, OptimizerFactory
from ..optimizers.optimizers import DirectStep
from ._logged import LoggedData, logged_data
from ._policies import (
    DEFAULT_BANDWIDTH,
    DEFAULT_EPSILON,
    check_built,
    int_seed,
    policy_probabilities,
    sample_policy_actions,
)

__all__ = ["DensityRatioConfig", "DensityRatioModel", "dualdice_loss", "fit_density_ratio"]


@dataclasses.dataclass
class DensityRatioConfig:
    """Hyperparameters of the DualDICE density-ratio model.

    Args:
        encoder_factory: the encoder of each of ``nu`` and ``zeta`` (default:
            offrl's default, a ``[256, 256]`` ReLU MLP for vectors); a linear
            head gives one value per action (discrete) or one value of
            ``(s, a)`` (continuous).
        optim_factory: optimizer of both networks (default Adam); weight
            decay (``AdamFactory(weight_decay=...)``) regularises them.
        nu_learning_rate, zeta_learning_rate: step sizes of the two players;
            ``zeta`` moves faster (two timescales), so it tracks its best
            response ``nu - gamma P_pi nu`` and ``nu`` descends the squared
            residual, which on the tabular MDP of the tests was stable where
            equal rates oscillated.
        batch_size: logged steps (and as many initial states) per update.
        n_steps: updates.
        log_interval: updates between loss records (one host sync each,
            where divergence is checked).
        n_action_samples: continuous actions: actions of the target drawn
            per logged step beforehand (one is used per update and row).
        average_fraction: the ratio is ``zeta`` with its weights averaged
            uniformly over this last fraction of the updates
            (Polyak-Ruppert tail averaging): gradient descent-ascent
            iterates circle the saddle point and their average settles where
            the last iterate does not (on the tabular MDP of the tests the
            last iterate's MIS error wandered by +-0.2 while the average's
            stayed within 0.03). 0 uses the last iterate.
        initial_batch_size: initial states per update (default
            ``max(1, batch_size // 4)``): the initial-state term enters ``J``
            with weight ``1 - gamma``, so its sampling noise matters little
            and a quarter of the rows keeps most of the update's cost for
            the Bellman term (the estimate stays unbiased).
    """

    encoder_factory: EncoderFactory = dataclasses.field(default_factory=DefaultEncoderFactory)
    optim_factory: OptimizerFactory = dataclasses.field(default_factory=AdamFactory)
    nu_learning_rate: float = 1e-4
    zeta_learning_rate: float = 1e-3
    batch_size: int = 256
    n_steps: int = 10_000
    log_interval: int = 500
    n_action_samples: int = 10
    average_fraction: float = 0.5
    initial_batch_size: Optional[int] = None

    def __post_init__(self) -> None:
        if not isinstance(self.encoder_factory, EncoderFactory):
            raise TypeError(f"encoder_factory must be an EncoderFactory, got {type(self.encoder_factory).__name__}")
        if not isinstance(self.optim_factory, OptimizerFactory):
            raise TypeError(f"optim_factory must be an OptimizerFactory, got {type(self.optim_factory).__name__}")
        for name in ("nu_learning_rate", "zeta_learning_rate"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        if isinstance(self.average_fraction, bool) or not 0.0 <= self.average_fraction < 1.0:
            raise ValueError(f"average_fraction must be in [0, 1), got {self.average_fraction!r}")
        if self.initial_batch_size is None and isinstance(self.batch_size, (int, np.integer)):
            self.initial_batch_size = max(1, int(self.batch_size) // 4)
        for name in ("batch_size", "n_steps", "log_interval", "n_action_samples", "initial_batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")


def dualdice_loss(nu: torch.Tensor, nu_next: torch.Tensor, zeta: torch.Tensor, nu_initial: torch.Tensor,
                  gamma: float) -> torch.Tensor:
    """DualDICE's saddle objective ``J`` on a mini-batch (module docstring):
    ``mean((nu - gamma nu_next) zeta - zeta^2 / 2) - (1 - gamma) mean(nu_initial)``.

    ``nu``, ``zeta``: ``(B,)`` at the logged ``(s, a)``; ``nu_next``:
    ``(B,)`` ``E_{a' ~ pi} nu(s', a')`` (0 after an episode's last step);
    ``nu_initial``: ``(B0,)`` ``E_{a ~ pi} nu(s_0, a)``. ``nu`` minimises it,
    ``zeta`` maximises it."""
    return ((nu - gamma * nu_next) * zeta - 0.5 * zeta**2).mean() - (1.0 - gamma) * nu_initial.mean()


class _DualDiceObjective(torch.autograd.Function):
    """:func:`dualdice_loss` from ``nu``'s values on the stacked rows
    ``[batch, next states, initial states]`` (``(2 B + B0,)``, the next
    states' already the target's expectation) and ``zeta``'s on the batch
    ``(B,)``, with its gradients written out (a handful of ops where
    autograd records about twenty nodes):

        dJ/dnu = zeta / B    dJ/dnu_next = -gamma not_last zeta / B
        dJ/dnu_initial = -(1 - gamma) / B0    dJ/dzeta = (nu - gamma not_last nu_next - zeta) / B

    With ``reverse`` the gradient reaching ``zeta`` is negated, so one
    backward pass gives descent directions for both players."""

    @staticmethod
    def forward(ctx: Any, nu_values: torch.Tensor, zeta: torch.Tensor, not_last: torch.Tensor, gamma: float,
                reverse: bool) -> torch.Tensor:
        j, residual = _objective(nu_values, zeta, not_last, gamma)
        ctx.save_for_backward(zeta, residual, not_last)
        ctx.gamma, ctx.reverse, ctx.n_initial = gamma, reverse, nu_values.shape[0] - 2 * zeta.shape[0]
        return j

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
        zeta, residual, not_last = ctx.saved_tensors
        grad_nu, grad_zeta = _objective_grads(grad, zeta, residual, not_last, ctx.gamma, ctx.n_initial, ctx.reverse)
        return grad_nu, grad_zeta, None, None, None


def _objective(nu_values: torch.Tensor, zeta: torch.Tensor, not_last: torch.Tensor,
               gamma: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """``J`` (:class:`_DualDiceObjective`'s arguments) and the Bellman
    residual ``nu - gamma not_last nu_next`` ``(B,)`` its gradients need."""
    b = zeta.shape[0]
    residual = nu_values[:b] - gamma * (nu_values[b:2 * b] * not_last)
    j = (residual * zeta - 0.5 * zeta**2).mean() - (1.0 - gamma) * nu_values[2 * b:].mean()
    return j, residual


def _objective_grads(grad: Any, zeta: torch.Tensor, residual: torch.Tensor, not_last: torch.Tensor, gamma: float,
                     n_initial: int, reverse: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    """``grad`` (a 0-dim tensor or a number) times ``J``'s gradients with
    respect to ``nu``'s stacked values ``(2 B + B0,)`` and ``zeta`` ``(B,)``
    (the latter negated with ``reverse``): :class:`_DualDiceObjective`'s formulas."""
    per_row = grad / zeta.shape[0]
    initial = grad * (-(1.0 - gamma) / n_initial)
    initial = initial.expand(n_initial) if isinstance(initial, torch.Tensor) else zeta.new_full((n_initial,), initial)
    grad_nu = torch.cat([zeta * per_row, zeta * not_last * (-gamma * per_row), initial])
    grad_zeta = (residual - zeta) * (-per_row if reverse else per_row)
    return grad_nu, grad_zeta


class _Head(nn.Module):
    """An encoder and a linear head: ``(B, A)`` values per action
    (discrete), or ``(B,)`` values of ``(s, a)`` (continuous)."""

    def __init__(self, factory: EncoderFactory, observation_shape: Tuple[int, ...], action_size: int,
                 discrete: bool) -> None:
        super().__init__()
        self.discrete = discrete
        if discrete:
            self.encoder = factory.create(observation_shape)
            features = compute_output_size(self.encoder, observation_shape)
            self.head = Linear(features, action_size)
        else:
            self.encoder = factory.create_with_action(observation_shape, action_size)
            features = compute_output_size(self.encoder, observation_shape, action_size)
            self.head = Linear(features, 1)

    def forward(self, x: torch.Tensor, action: Optional[torch.Tensor] = None) -> torch.Tensor:
        if self.discrete:
            return self.head(self.encoder(x))
        return self.head(self.encoder(x, action)).view(-1)


def _value_at(net: _Head, x: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """``net(s, a)`` at given actions: ``(B,)``."""
    if net.discrete:
        return net(x).gather(1, actions.view(-1, 1)).view(-1)
    return net(x, actions)


def _plain_layers(net: _Head) -> Optional[PlainLayers]:
    """``(weight, bias)`` of each layer, the head last, when ``net`` is a
    plain ReLU MLP (the default vector encoder; see
    :func:`~offrl.models.plain_mlp.plain_layers`); None for any other
    network (it trains through autograd)."""
    return plain_layers(net.encoder, net.head)


class DensityRatioModel:
    """A DualDICE density-ratio model ``w(s, a) = d_pi(s, a) / d_D(s, a)``
    of one target policy on one dataset (see the module docstring); made by
    :func:`fit_density_ratio`.

    Attributes:
        config: the hyperparameters.
        gamma: the discount it was trained for.
        losses: ``(step, J)`` records every ``config.log_interval`` updates.
        device: where the networks live.
    """

    def __init__(self, config: DensityRatioConfig, observation_shape: Tuple[int, ...], action_size: int,
                 discrete: bool, gamma: float, device: torch.device) -> None:
        self.config = config
        self.gamma = float(gamma)
        self.device = device
        self.discrete = discrete
        self.action_size = int(action_size)
        self.nu = _Head(config.encoder_factory, observation_shape, action_size, discrete).to(device)
        self.zeta = _Head(config.encoder_factory, observation_shape, action_size, discrete).to(device)
        self._nu_optim = config.optim_factory.create(list(self.nu.named_parameters()), lr=config.nu_learning_rate)
        self._zeta_optim = config.optim_factory.create(list(self.zeta.named_parameters()), lr=config.zeta_learning_rate)
        # plain ReLU MLPs (the default encoder) train with their backward written out (no autograd graph)
        nu_layers, zeta_layers = _plain_layers(self.nu), _plain_layers(self.zeta)
        self._plain = None if nu_layers is None or zeta_layers is None else (nu_layers, zeta_layers)
        if self._plain is not None:
            self._nu_step = DirectStep(self._nu_optim, [t for layer in nu_layers for t in layer], keep_grads=False)
            self._zeta_step = DirectStep(self._zeta_optim, [t for layer in zeta_layers for t in layer], keep_grads=False)
        self.losses: List[Tuple[int, float]] = []
        self._action_ids = torch.arange(self.action_size, device=device)
        #: ``zeta`` averaged over the last ``config.average_fraction`` of training (what :meth:`ratios` uses)
        self.zeta_average = copy.deepcopy(self.zeta).requires_grad_(False)
        self._n_averaged = 0
        # the averaged float tensors (parameters and float buffers) and the others (copied), in the same order
        pairs = list(zip(list(self.zeta_average.parameters()) + list(self.zeta_average.buffers()),
                         list(self.zeta.parameters()) + list(self.zeta.buffers())))
        self._average_pairs = ([a for a, _ in pairs if a.is_floating_point()], [z for a, z in pairs if a.is_floating_point()])
        self._copy_pairs = [(a, z) for a, z in pairs if not a.is_floating_point()]

    # ---------------------------------------------------------------- training
    def loss(self, observations: torch.Tensor, actions: torch.Tensor, next_observations: torch.Tensor,
             next_policy: torch.Tensor, not_last: torch.Tensor, initial_observations: torch.Tensor,
             initial_policy: torch.Tensor, reverse_zeta: bool = False) -> torch.Tensor:
        """``J`` on one mini-batch (a 0-dim tensor, differentiable in both networks;
        with ``reverse_zeta`` the gradients reaching ``zeta`` are negated, so
        one backward pass gives descent directions for both players).

        ``next_policy`` / ``initial_policy``: discrete: ``(B, A)`` target
        probabilities at ``s'`` / ``s_0``; continuous: ``(B, action_size)``
        actions drawn from the target there (``B0`` rows for the initial
        states). ``not_last``: ``(B,)`` 0 where the step is its episode's last."""
        b = observations.shape[0]
        if next_observations.shape[0] != b or not_last.shape[0] != b:
            raise ValueError(f"next_observations and not_last need one row per logged step ({b}), got "
                             f"{next_observations.shape[0]} and {not_last.shape[0]}")
        x = torch.cat([observations, next_observations, initial_observations])  # one pass of nu over every row
        if self.discrete:
            # each row's weights over the actions: the logged action's indicator, then the target's probabilities
            indicator = actions.view(-1, 1) == self._action_ids  # F.one_hot would check the indices' range each step
            weights = torch.cat([indicator.to(next_policy.dtype), next_policy, initial_policy])
            nu_values = (self.nu(x) * weights).sum(dim=1)
        else:
            nu_values = self.nu(x, torch.cat([actions, next_policy, initial_policy]))
        zeta = _value_at(self.zeta, observations, actions)
        return _DualDiceObjective.apply(nu_values, zeta, not_last, self.gamma, reverse_zeta)

    def update(self, batch: Tuple[torch.Tensor, ...]) -> torch.Tensor:
        """One simultaneous descent (nu) / ascent (zeta) step on a batch of
        :meth:`loss`'s arguments; returns ``J`` (detached)."""
        if self._plain is not None:
            return self._plain_update(*batch)
        j = self.loss(*batch, reverse_zeta=True)
        self._nu_optim.zero_grad()
        self._zeta_optim.zero_grad()
        j.backward()
        self._nu_optim.step()
        self._zeta_optim.step()
        return j.detach()

    @torch.no_grad()
    def _plain_update(self, observations: torch.Tensor, actions: torch.Tensor, next_observations: torch.Tensor,
                      next_policy: torch.Tensor, not_last: torch.Tensor, initial_observations: torch.Tensor,
                      initial_policy: torch.Tensor) -> torch.Tensor:
        """:meth:`update` for plain ReLU MLPs: :meth:`loss`'s forward with
        each layer's inputs kept, then ``J``'s gradients (``zeta``'s
        reversed) through both networks by :func:`~offrl.models.plain_mlp.plain_backward`, and one
        step per player (:class:`~offrl.optimizers.optimizers.DirectStep`). The same values as autograd's
        up to the summation order inside a product (a test holds it to it)."""
        b = observations.shape[0]
        if next_observations.shape[0] != b or not_last.shape[0] != b:
            raise ValueError(f"next_observations and not_last need one row per logged step ({b}), got "
                             f"{next_observations.shape[0]} and {not_last.shape[0]}")
        nu_layers, zeta_layers = self._plain
        x = torch.cat([observations, next_observations, initial_observations])
        x = x.reshape(x.shape[0], -1).float()
        if self.discrete:
            indicator = (actions.view(-1, 1) == self._action_ids).to(next_policy.dtype)
            weights = torch.cat([indicator, next_policy, initial_policy])
            nu_inputs, nu_out = plain_forward(nu_layers, x)
            nu_values = (nu_out * weights).sum(dim=1)
            zeta_inputs, zeta_out = plain_forward(zeta_layers, x[:b])
            zeta = zeta_out.gather(1, actions.view(-1, 1)).view(-1)
        else:
            x = torch.cat([x, torch.cat([actions, next_policy, initial_policy])], dim=1)
            nu_inputs, nu_out = plain_forward(nu_layers, x)
            nu_values = nu_out.view(-1)
            zeta_inputs, zeta_out = plain_forward(zeta_layers, x[:b])  # zeta's (s, a): nu's first b rows
            zeta = zeta_out.view(-1)
        j, residual = _objective(nu_values, zeta, not_last, self.gamma)
        grad_nu, grad_zeta = _objective_grads(1.0, zeta, residual, not_last, self.gamma, x.shape[0] - 2 * b, True)
        if self.discrete:
            grad_nu_out, grad_zeta_out = grad_nu.view(-1, 1) * weights, indicator * grad_zeta.view(-1, 1)
        else:
            grad_nu_out, grad_zeta_out = grad_nu.view(-1, 1), grad_zeta.view(-1, 1)
        nu_grads = plain_backward(nu_layers, nu_inputs, grad_nu_out)
        zeta_grads = plain_backward(zeta_layers, zeta_inputs, grad_zeta_out)
        self._nu_step(nu_grads)
        self._zeta_step(zeta_grads)
        return j

    @torch.no_grad()
    def update_average(self) -> None:
        """Add the current ``zeta`` to the average :meth:`ratios` uses (a
        running mean: ``average += (zeta - average) / n``, foreach ops)."""
        averaged, current = self._average_pairs
        self._n_averaged += 1
        if self._n_averaged == 1:
            torch._foreach_copy_(averaged, current)
        else:
            torch._foreach_lerp_(averaged, current, 1.0 / self._n_averaged)
        for a, z in self._copy_pairs:
            a.copy_(z)

    # ---------------------------------------------------------------- use
    @torch.no_grad()
    def ratios(self, observations: np.ndarray, actions: np.ndarray, batch_size: int = 4096) -> np.ndarray:
        """``(B,)`` raw ratios (not clipped at 0): the averaged ``zeta(s, a)``
        (the last iterate before any averaging) for observations
        ``(B, *obs_shape)`` and actions ``(B,)`` indices or ``(B, action_size)``."""
        zeta = self.zeta_average if self._n_averaged else self.zeta
        out = []
        for start in range(0, len(observations), batch_size):
            x = torch.as_tensor(np.asarray(observations[start:start + batch_size]), dtype=torch.float32, device=self.device)
            a = np.asarray(actions[start:start + batch_size])
            at = torch.as_tensor(a.reshape(-1) if self.discrete else a, device=self.device)
            at = at.long() if self.discrete else at.float()
            out.append(_value_at(zeta, x, at).double().cpu().numpy())
        return np.concatenate(out) if out else np.empty(0)

    def __call__(self, observations: np.ndarray, actions: np.ndarray) -> np.ndarray:
        return self.ratios(observations, actions)


def _diverged(what: str, step: int, config: DensityRatioConfig) -> ValueError:
    return ValueError(
        f"the DualDICE density-ratio model diverged ({what} at update {step}): lower "
        f"nu_learning_rate / zeta_learning_rate (now {config.nu_learning_rate:g} / {config.zeta_learning_rate:g}), "
        f"train fewer n_steps (now {config.n_steps}), or regularise with weight decay "
        "(optim_factory=AdamFactory(weight_decay=1e-4)); a target that takes actions the data never shows "
        "also makes the ratio unbounded"
    )


def array_observations(data: LoggedData) -> np.ndarray:
    """``data``'s observations as one array (``TypeError`` for tuple observations, which DualDICE does not take)."""
    if isinstance(data.observations, list):
        raise TypeError("the marginal estimators take array observations; tuple observations are not supported")
    return data.observations


def target_policy_actions(target: Any, data: LoggedData, *, discrete: bool, greedy: bool, epsilon: float,
                          bandwidth: float, n_samples: int, seed: Any, batch_size: int) -> np.ndarray:
    """Discrete: ``(N, A)`` target probabilities at every logged observation;
    continuous: ``(N, n_samples, action_size)`` target actions drawn there."""
    if discrete:
        return policy_probabilities(
            target, data, greedy=greedy, epsilon=epsilon, bandwidth=bandwidth, batch_size=batch_size
        ).all_actions
    return sample_policy_actions(target, data, n_samples, greedy=greedy, bandwidth=bandwidth, seed=seed,
                                 batch_size=batch_size)


def fit_density_ratio(
    target: Any,
    dataset: Any,
    *,
    gamma: float,
    config: Optional[DensityRatioConfig] = None,
    seed: Any = 0,
    device: DeviceArg = None,
    greedy: bool = False,
    epsilon: float = DEFAULT_EPSILON,
    bandwidth: float = DEFAULT_BANDWIDTH,
    batch_size: int = 4096,
) -> DensityRatioModel:
    """Train a DualDICE ratio model of ``target`` on ``dataset``.

    ``target`` as for :func:`~offrl.ope.estimate_policy_value` (continuous
    actions need an offrl algorithm, whose actions can be drawn). ``seed``
    fixes the initial weights and the mini-batches; ``device`` is any
    offrl device argument (``"cuda:0"``, ``True``...). ``batch_size`` is
    for the target's forward passes, not the training mini-batch (that is
    ``config.batch_size``).

    Raises:
        ValueError: ``gamma`` outside [0, 1), or the model diverging (naming
            what to change).
    """
    config = DensityRatioConfig() if config is None else config
    if not isinstance(config, DensityRatioConfig):
        raise TypeError(f"config must be a DensityRatioConfig, got {type(config).__name__}")
    if not 0.0 <= gamma < 1.0:
        raise ValueError(f"gamma must be in [0, 1) for the marginal estimators (they divide by 1 - gamma), got {gamma!r}")
    data = dataset if isinstance(dataset, LoggedData) else logged_data(dataset)
    return fit_ratio_model(target, data, gamma, config, seed, parse_device(device), greedy, epsilon, bandwidth,
                           batch_size)


class _TrainingData:
    """The logged steps on the device, and mini-batches drawn from them
    (uniform steps, uniform episode starts) with a seeded generator."""

    def __init__(self, data: LoggedData, target_actions: np.ndarray, batch_size: int, initial_batch_size: int,
                 device: torch.device, seed: int) -> None:
        self.n = data.n_steps
        self.discrete = data.discrete
        self.batch_size = int(batch_size)
        self.initial_batch_size = int(initial_batch_size)
        self.observations = torch.as_tensor(np.asarray(array_observations(data)), dtype=torch.float32, device=device)
        actions = torch.as_tensor(data.actions, device=device)
        self.actions = actions.long() if data.discrete else actions.float()
        self.policy = torch.as_tensor(target_actions, dtype=torch.float32, device=device)
        not_last = np.ones(self.n, dtype=np.float32)
        not_last[np.cumsum(data.lengths) - 1] = 0.0
        self.not_last = torch.as_tensor(not_last, device=device)
        self.starts = torch.as_tensor(data.starts, dtype=torch.long, device=device)
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)
        self.device = device

    def sample(self) -> Tuple[torch.Tensor, ...]:
        """The arguments of :meth:`DensityRatioModel.loss` for one mini-batch."""
        b, g, device = self.batch_size, self.generator, self.device
        rows = torch.randint(0, self.n, (b,), device=device, generator=g)
        nxt = torch.clamp(rows + 1, max=self.n - 1)  # a last step's "next" row is masked by not_last
        b0 = self.initial_batch_size
        first = self.starts[torch.randint(0, self.starts.shape[0], (b0,), device=device, generator=g)]
        if self.discrete:
            next_policy, initial_policy = self.policy[nxt], self.policy[first]
        else:
            k = torch.randint(0, self.policy.shape[1], (b + b0,), device=device, generator=g)
            next_policy, initial_policy = self.policy[nxt, k[:b]], self.policy[first, k[b:]]
        obs = self.observations
        return obs[rows], self.actions[rows], obs[nxt], next_policy, self.not_last[rows], obs[first], initial_policy


def _train(model: DensityRatioModel, batches: _TrainingData, first_step: int, n_steps: int) -> None:
    """Updates ``first_step .. first_step + n_steps - 1`` (1-based) of a run of
    ``model.config.n_steps``: averaging in the last ``average_fraction`` of
    them, losses read and checked once per ``log_interval``."""
    config = model.config
    average_from = config.n_steps - int(config.n_steps * config.average_fraction)
    pending: List[Tuple[int, torch.Tensor]] = []
    last = first_step + n_steps - 1
    for step in range(first_step, last + 1):
        pending.append((step, model.update(batches.sample())))
        if step > average_from:
            model.update_average()
        if step % config.log_interval == 0 or step == last:
            values = torch.stack([v for _, v in pending]).cpu().numpy()  # one host sync per interval
            bad = ~np.isfinite(values)
            if bad.any():
                raise _diverged(f"loss {values[int(np.argmax(bad))]}", pending[int(np.argmax(bad))][0], config)
            if step % config.log_interval == 0 or step == config.n_steps:
                model.losses.append((step, float(values[-1])))
            pending = []


def _prepare_training(target: Any, data: LoggedData, gamma: float, config: DensityRatioConfig, seed: Any,
                      device: torch.device, greedy: bool, epsilon: float, bandwidth: float, batch_size: int,
                      target_actions: Optional[np.ndarray] = None) -> Tuple[DensityRatioModel, _TrainingData]:
    """A freshly initialised model and its device-resident data (seeded)."""
    observations = array_observations(data)
    check_built(target, "target policy")
    if target_actions is None:
        target_actions = target_policy_actions(target, data, discrete=data.discrete, greedy=greedy, epsilon=epsilon,
                                               bandwidth=bandwidth, n_samples=config.n_action_samples, seed=seed,
                                               batch_size=batch_size)
    seed_int = int_seed(seed)
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed_int)
        model = DensityRatioModel(config, tuple(observations.shape[1:]), data.action_size, data.discrete, gamma, device)
    return model, _TrainingData(data, target_actions, config.batch_size, config.initial_batch_size, device,
                                seed_int)


def fit_ratio_model(target: Any, data: LoggedData, gamma: float, config: DensityRatioConfig, seed: Any,
                    device: torch.device, greedy: bool, epsilon: float, bandwidth: float, batch_size: int,
                    target_actions: Optional[np.ndarray] = None) -> DensityRatioModel:
    """:func:`fit_density_ratio` on checked inputs (logged data, a parsed device), reusing ``target_actions`` if given."""
    model, batches = _prepare_training(target, data, gamma, config, seed, device, greedy, epsilon, bandwidth,
                                       batch_size, target_actions)
    _train(model, batches, 1, config.n_steps)
    return model


def ratio_values(ratio_model: Any, data: LoggedData, config_step: int) -> np.ndarray:
    """``(N,)`` ratios of a fitted model or callable at every logged step, checked for shape and finiteness."""
    observations = array_observations(data)
    if isinstance(ratio_model, DensityRatioModel):
        values = ratio_model.ratios(observations, data.actions)
    elif callable(ratio_model):
        values = ratio_model(observations, data.actions)
    else:
        raise TypeError(
            "ratio_model must be None, a DensityRatioConfig, a fitted DensityRatioModel, or a callable "
            f"(observations, actions) -> (N,) ratios; got {type(ratio_model).__name__}"
        )
    values = np.asarray(values, dtype=np.float64)
    if values.shape not in ((data.n_steps,), (data.n_steps, 1)):
        raise ValueError(f"ratio_model returned ratios of shape {values.shape}, expected ({data.n_steps},)")
    values = values.reshape(-1)
    bad = ~np.isfinite(values)
    if bad.any():
        i = int(np.argmax(bad))
        if isinstance(ratio_model, DensityRatioModel):
            raise _diverged(f"ratio {values[i]} at logged step {i}", config_step, ratio_model.config)
        raise ValueError(f"ratio_model returned a non-finite ratio {values[i]} at logged step {i}")
    return values
