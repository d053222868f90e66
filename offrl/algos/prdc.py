"""Policy Regularization with Dataset Constraint.

PRDC (Ran et al., 2023, "Policy Regularization with Dataset Constraint for
Offline Reinforcement Learning", https://arxiv.org/abs/2306.06569) is
TD3+BC (:mod:`offrl.algos.td3_plus_bc`) whose behaviour-cloning term pulls
the policy's action not towards the logged action of the same state but
towards the action of the dataset point nearest to ``(beta * s, pi(s))``:

    (s_hat, a_hat) = argmin_{(s~, a~) in D} || (beta s) (+) pi(s) - (beta s~) (+) a~ ||_2
    L_pi(phi)      = E_{s ~ D} [ -lambda Q_1(s, pi_phi(s)) + mean_j (pi_phi(s)_j - a_hat_j)^2 ]
    lambda         = alpha / E_{s ~ D} |Q_1(s, pi_phi(s))|          (no gradient)

with ``(+)`` concatenation, states and actions as the networks see them
(scaled; image and tuple observations flattened) and the critics exactly
TD3's (twin critics, target policy smoothing, delayed policy updates). A
large ``beta`` makes the nearest point share the state (TD3+BC); a small
one lets the policy pick any logged action (of any state) close to its own.
The neighbour is looked up without gradient; ``dc_loss`` (the squared
distance term) is reported beside ``actor_loss`` and ``critic_loss``.

**The neighbour index.** ``fit`` builds it from every transition of its
dataset (with the dataset's transition picker and the fitted scalers)
before training: a KD-tree on the CPU, exact brute force on a GPU (see
:mod:`offrl.models.nearest` and ``benchmarks/nearest_neighbors.py``), after
checking that the memory it needs is available (:class:`MemoryError`
saying how much otherwise). :meth:`PRDC.fit_neighbor_index` builds it for
calls of ``update`` outside ``fit``. The index is not saved in model files
(it is the dataset's, not the policy's): ``fit`` on a loaded model builds it
again. ``fit_online`` rebuilds it from the replay buffer whenever the
buffer's transition count has doubled since the last build (so building
costs amortised ``O(N log N)``; the newest half of the buffer may not be in
the index yet).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from ..dataset import create_fifo_replay_buffer
from ..metrics.transitions import TransitionSet, dataset_buffer
from ..models import nearest
from ..serialization import register
from .actor_critic import TD3StyleConfig
from .config import NON_NEGATIVE, POSITIVE_INT, param
from .ddpg import DDPGModules
from .td3_plus_bc import TD3PlusBC, bc_actor_loss_grads
from ..training.fit import prepare_algorithm

__all__ = ["PRDCConfig", "PRDC"]


@register("algorithm", "prdc")
@dataclasses.dataclass
class PRDCConfig(TD3StyleConfig):
    """Config of PRDC (details in the module docstring).

    Loss:
        critics Σ_i E [ ℓ(r + γ^k (1 − d) min_j Q'_j(s', a') − Q_i(s, a)) ],
                a' = clip(π'(s') + clip(ε, −c, c), −1, 1), ε ~ N(0, σ²) (TD3's);
        actor   E_s~D [ −λ Q_1(s, π(s)) + (π(s) − â)² ], λ = α / E_s |Q_1(s, π(s))|,
                â the action of the dataset point nearest to (β s, π(s)).

    Defaults:
        d3rlpy 2.8.1's: alpha 2.5, beta 2.0, learning rates 3e-4,
        batch_size=256, tau=0.005, σ=0.2, c=0.5, a policy update every 2
        critic updates (the paper's TD3+BC settings; it tunes beta per task,
        2.0 for most locomotion datasets). The paper standardises
        observations: pass ``observation_scaler=StandardObservationScaler()``.

    References:
        Ran, Li, Zhang, Zhou and Yu, "Policy Regularization with Dataset
        Constraint for Offline Reinforcement Learning", 2023,
        arXiv:2306.06569; Fujimoto and Gu, "A Minimalist Approach to Offline
        Reinforcement Learning", 2021, arXiv:2106.06860.

    Args:
        alpha: weight of the Q term against the dataset-constraint term.
        beta: weight of the state in the neighbour search (against the action).
        update_actor_interval: critic steps per policy (and target) update.
    """

    alpha: float = param(2.5, check=NON_NEGATIVE)
    beta: float = param(2.0, check=NON_NEGATIVE)
    update_actor_interval: int = param(2, check=POSITIVE_INT)


def _flat(observations: Any) -> torch.Tensor:
    """``(B, ...)`` observations (or a list of them) as one ``(B, D)`` float tensor."""
    parts = observations if isinstance(observations, (list, tuple)) else [observations]
    return torch.cat([p.reshape(p.shape[0], -1).to(torch.float32) for p in parts], dim=1)


def _key_dim(observation_shape: Any, action_size: int) -> int:
    """The dimension of the index's ``(beta * s, a)`` points."""
    shapes = observation_shape if isinstance(observation_shape, list) else [observation_shape]
    return sum(int(torch.Size(s).numel()) for s in shapes) + int(action_size)


class PRDC(TD3PlusBC, config=PRDCConfig):
    """PRDC (see the module docstring): :class:`~offrl.algos.td3_plus_bc.TD3PlusBC`
    whose behaviour-cloning target is the nearest dataset point's action."""

    def _build(self, observation_shape, action_size: int) -> DDPGModules:
        modules = super()._build(observation_shape, action_size)
        # the index describes the data, not the networks: rebuilding the
        # networks for the same shapes keeps it (as d3rlpy's, which lives on
        # the algorithm), other shapes drop it
        previous = getattr(self, "_neighbor_dim", None)
        if previous is None or previous != _key_dim(observation_shape, action_size):
            self._neighbor_index: Optional[nearest.NearestNeighborIndex] = None
            self._neighbor_actions: Optional[torch.Tensor] = None
            self._neighbor_count = 0
            self._neighbor_dim: Optional[int] = None
        self._last_dc_loss = torch.zeros((), device=self._device)
        return modules

    def build_with_dataset(self, dataset: Any) -> None:
        """Fit the scalers, build the networks and the neighbour index over
        ``dataset``: everything :meth:`update` needs (d3rlpy's habit of
        calling ``update`` by hand after ``build_with_dataset``)."""
        super().build_with_dataset(dataset)
        self.fit_neighbor_index(dataset)

    # ------------------------------------------------------ the index
    @property
    def neighbor_index(self) -> Optional[nearest.NearestNeighborIndex]:
        """The index over ``(beta * s, a)`` of the training data (``None``
        before :meth:`fit_neighbor_index` or ``fit``)."""
        return getattr(self, "_neighbor_index", None)

    def fit_neighbor_index(self, dataset: Any) -> None:
        """Build the index over ``(beta * s, a)`` of every transition of
        ``dataset`` (scaled as the networks see them). The algorithm must be
        built, and its scalers fitted, first (``fit`` does both)."""
        self.require_built()
        transitions = TransitionSet(dataset_buffer(dataset), getattr(dataset, "transition_picker", None))
        n = transitions.total
        if n == 0:
            raise ValueError("the dataset holds no transitions to build PRDC's neighbour index from")
        dim = _key_dim(self._observation_shape, self._action_size)
        backend = "kd_tree" if self._device.type == "cpu" else "brute"
        # the keys, their copy into the index and the actions kept for the loss
        needed = nearest.index_bytes(n, dim, backend) + 2 * n * dim * 4 + n * int(self._action_size) * 4
        available = nearest.available_bytes(self._device)
        if available is not None and needed > available:
            raise MemoryError(
                f"PRDC's neighbour index over {n} transitions ((beta * state, action) points of dimension {dim}) "
                f"needs about {needed / 2**30:.3g} GiB, but only {available / 2**30:.3g} GiB is available on "
                f"{self._device}: train on a smaller dataset, or on a device with more memory"
            )
        beta = float(self._config.beta)
        keys, actions = [], []
        with torch.no_grad():
            for batch in transitions.batches():
                scaled = self.preprocess_batch(batch)
                keys.append(torch.cat([beta * _flat(scaled.observations), scaled.actions.to(torch.float32)], dim=1))
                actions.append(scaled.actions.to(torch.float32))
        points = torch.cat(keys)
        del keys
        self._neighbor_index = nearest.NearestNeighborIndex(points, backend=backend, available_bytes=available)
        self._neighbor_actions = torch.cat(actions)
        self._neighbor_count = n
        self._neighbor_dim = dim

    @torch.compiler.disable  # compile_graph: the neighbour search (scikit-learn / numpy) runs eagerly
    def _nearest_actions(self, observations: Any, policy_actions: torch.Tensor) -> torch.Tensor:
        """The action of the dataset point nearest to ``(beta s, pi(s))``, ``(B, A)``."""
        if self._neighbor_index is None:
            raise RuntimeError(
                "PRDC has no neighbour index over its training data: train it with fit (which builds it), "
                "or call fit_neighbor_index(dataset) before update"
            )
        with torch.no_grad():
            key = torch.cat([float(self._config.beta) * _flat(observations), policy_actions.detach()], dim=1)
            return self._neighbor_actions[self._neighbor_index.query(key).to(self._neighbor_actions.device)]

    # ------------------------------------------------------ the hooks
    def _actor_loss(self, batch, policy_actions: torch.Tensor) -> torch.Tensor:
        q_first = self._modules.q_function.expected(batch.observations, policy_actions)[0]  # (B, 1)
        lam = float(self._config.alpha) / q_first.abs().mean().detach()
        target = self._nearest_actions(batch.observations, policy_actions).to(policy_actions.device)
        dc_loss = ((policy_actions - target) ** 2).mean()
        self._last_dc_loss = dc_loss.detach()
        return -lam * q_first.mean() + dc_loss

    def _actor_loss_grads(self, batch, q_first: torch.Tensor, policy_actions: torch.Tensor):
        target = self._nearest_actions(batch.observations, policy_actions).to(policy_actions.device)
        loss, grad_q, grad_actions = bc_actor_loss_grads(float(self._config.alpha), q_first, policy_actions - target)
        self._last_dc_loss = ((policy_actions - target) ** 2).mean()
        return loss, grad_q, grad_actions

    def _update(self, batch, grad_step: int) -> Dict[str, torch.Tensor]:
        losses = super()._update(batch, grad_step)
        losses["dc_loss"] = self._last_dc_loss
        return losses

    # ------------------------------------------------ training entries
    def fitter(self, dataset: Any, n_steps: int, *args: Any, **kwargs: Any):
        """:meth:`QLearningAlgoBase.fitter` after building the neighbour
        index over ``dataset`` (arguments as there)."""
        generator = super().fitter(dataset, n_steps, *args, **kwargs)  # checks the arguments first
        was_built = self.is_built
        prepare_algorithm(self, dataset)  # builds the index too when it builds the algorithm
        if was_built:
            self.fit_neighbor_index(dataset)
        return generator

    def fit_online(self, env: Any, buffer: Any = None, explorer: Any = None, n_steps: int = 1000000,
                   n_steps_per_epoch: int = 10000, update_interval: int = 1, n_updates: int = 1,
                   update_start_step: int = 0, random_steps: int = 0, eval_env: Any = None, eval_epsilon: float = 0.0,
                   eval_n_trials: int = 10, save_interval: int = 1, experiment_name: Optional[str] = None,
                   with_timestamp: bool = True, logging_steps: int = 500, logging_strategy: Any = "epoch",
                   logger_adapter: Any = None, show_progress: bool = True, callback: Optional[Callable[..., None]] = None,
                   epoch_callback: Optional[Callable[..., None]] = None) -> List[Tuple[int, Dict[str, float]]]:
        """:meth:`QLearningAlgoBase.fit_online`, with the neighbour index
        rebuilt from ``buffer`` whenever its transition count has doubled
        since the last build (and built first from a buffer that already
        holds transitions)."""
        if callback is not None and not callable(callback):
            raise TypeError(f"callback must be callable as callback(algo, epoch, total_step), got {type(callback).__name__}")
        if buffer is None:
            buffer = create_fifo_replay_buffer(limit=1000000, env=env)
        self._neighbor_count = 0
        if int(getattr(buffer, "transition_count", 0)) > 0:
            if not self.is_built:
                self.build_with_env(env)
            self.fit_neighbor_index(buffer)

        def refresh(algo: Any, epoch: int, total_step: int) -> None:
            count = int(buffer.transition_count)
            if count > 0 and (self._neighbor_index is None or count >= 2 * self._neighbor_count):
                self.fit_neighbor_index(buffer)
            if callback is not None:
                callback(algo, epoch, total_step)

        return super().fit_online(env, buffer, explorer, n_steps, n_steps_per_epoch, update_interval, n_updates,
                                  update_start_step, random_steps, eval_env, eval_epsilon, eval_n_trials,
                                  save_interval, experiment_name, with_timestamp, logging_steps, logging_strategy,
                                  logger_adapter, show_progress, refresh, epoch_callback)


PRDC._actor_loss_written_for = PRDC._actor_loss
