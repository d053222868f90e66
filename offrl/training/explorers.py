"""Explorers: how an algorithm's actions are perturbed while it collects data.

An explorer turns the algorithm's policy into a behaviour policy for
:meth:`~offrl.algos.base.QLearningAlgoBase.fit_online` and
:meth:`~offrl.algos.base.QLearningAlgoBase.collect`. Any object with
``sample(algo, x, step) -> actions`` works (d3rlpy's protocol): ``x`` is a
batch of observations (``(B, *obs_shape)``, a list of arrays for tuple
observations), ``step`` the 1-based environment step, and the result one
action per row (``(B,)`` indices, or ``(B, action_size)``). Optionally:

* ``reset()`` is called at the start of every episode (``AdditiveOU``
  restarts its noise process there);
* ``action_space`` (an :class:`~offrl.constants.ActionSpace`) says which
  action spaces the explorer suits, so a mismatch fails before training;
* ``sample_envs(algo, x, step, env_indices, generators)`` and
  ``reset_env(index)``: the per-environment form used with vectorised
  environments (a ``gymnasium.vector`` env or a list of envs). Row ``i`` of
  ``x`` is an observation of environment ``env_indices[i]`` and every random
  draw for that row comes from ``generators[i]`` (that environment's own
  generator), so each environment explores independently and reproducibly;
  ``reset_env`` starts environment ``index``'s episode (``AdditiveOU``
  restarts only that environment's noise). An explorer without them gets
  ``sample`` on the batch and ``reset()`` whenever any environment starts an
  episode.

Random draws come from offrl's generator, so ``offrl.seed(n)`` makes them
reproducible.

Built in:

* :class:`ConstantEpsilonGreedy` ``(epsilon)``, :class:`LinearDecayEpsilonGreedy`
  ``(start_epsilon, end_epsilon, duration)``: with probability ``epsilon`` a
  uniform action index, else the greedy one (discrete actions);
* :class:`Boltzmann` ``(temperature)``: ``P(a | s) = softmax(Q(s, .) / T)``
  (discrete actions; needs ``predict_value``);
* :class:`NormalNoise` ``(mean, std)``: greedy action plus Gaussian noise,
  clipped to the action range (continuous actions);
* :class:`AdditiveOU` ``(mu, theta, sigma)``: greedy action plus
  Ornstein-Uhlenbeck noise (continuous actions).
"""

from __future__ import annotations

import abc
from typing import Any, Dict, Optional, Protocol, Sequence, Tuple, Union, runtime_checkable

import numpy as np

from .._random import get_rng
from ..constants import ActionSpace
from ..preprocessing import MinMaxActionScaler

__all__ = [
    "ExplorerProtocol",
    "Explorer",
    "ConstantEpsilonGreedy",
    "LinearDecayEpsilonGreedy",
    "Boltzmann",
    "NormalNoise",
    "AdditiveOU",
    "check_explorer",
    "action_values",
    "action_bounds",
    "inverse_cdf",
]

Bound = Union[float, np.ndarray, None]


@runtime_checkable
class ExplorerProtocol(Protocol):
    """What ``fit_online`` and ``collect`` call: actions for a batch of
    observations at environment step ``step``."""

    def sample(self, algo: Any, x: Any, step: int) -> np.ndarray: ...


class Explorer(abc.ABC):
    """Base of the built-in explorers (subclassing it is optional)."""

    #: the action space the explorer suits (None: any)
    action_space: Optional[ActionSpace] = None

    @abc.abstractmethod
    def sample(self, algo: Any, x: Any, step: int) -> np.ndarray:
        """Actions for the observations ``x`` at environment step ``step``."""

    def reset(self) -> None:
        """Called at the start of every episode."""

    def reset_env(self, index: int) -> None:
        """Called when vectorised environment ``index`` starts an episode."""
        self.reset()

    def sample_envs(self, algo: Any, x: Any, step: int, env_indices: Sequence[int],
                    generators: Sequence[np.random.Generator]) -> np.ndarray:
        """Actions for a batch of observations of several environments, row
        ``i``'s random draws from ``generators[i]`` (see the module docstring).
        The base version calls :meth:`sample` (draws from offrl's generator)."""
        return self.sample(algo, x, step)


def _check_probability(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
    return float(value)


def _check_number(value: Any, name: str, positive: bool = False, non_negative: bool = False) -> float:
    ok = not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating)) and np.isfinite(value)
    if ok and positive:
        ok = value > 0
    if ok and non_negative:
        ok = value >= 0
    if not ok:
        what = "a finite number" + (" > 0" if positive else " >= 0" if non_negative else "")
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return float(value)


def _batch_size(x: Any) -> int:
    first = x[0] if isinstance(x, (list, tuple)) else x
    return int(np.shape(first)[0])


def _epsilon_greedy(algo: Any, x: Any, epsilon: float) -> np.ndarray:
    """Uniform action indices with probability ``epsilon``, greedy ones
    otherwise; ``predict`` runs only when some row is greedy."""
    rng = get_rng()
    batch = _batch_size(x)
    explore = rng.random(batch) < epsilon
    random_actions = rng.integers(int(algo.action_size), size=batch)
    if explore.all():
        return random_actions
    return np.where(explore, random_actions, algo.predict(x))


def _epsilon_greedy_envs(algo: Any, x: Any, epsilon: float, generators: Sequence[np.random.Generator]) -> np.ndarray:
    """Per-environment epsilon-greedy: row ``i`` draws one uniform, then one
    action index, from ``generators[i]``; ``predict`` runs only when some
    row is greedy."""
    n_actions = int(algo.action_size)
    explore = np.empty(len(generators), dtype=bool)
    random_actions = np.empty(len(generators), dtype=np.int64)
    for i, generator in enumerate(generators):
        explore[i] = generator.random() < epsilon
        random_actions[i] = generator.integers(n_actions)
    if explore.all():
        return random_actions
    return np.where(explore, random_actions, algo.predict(x))


class ConstantEpsilonGreedy(Explorer):
    """Epsilon-greedy with a constant ``epsilon``: a uniformly drawn action
    index with probability ``epsilon``, the greedy action otherwise."""

    action_space = ActionSpace.DISCRETE

    def __init__(self, epsilon: float) -> None:
        self.epsilon = _check_probability(epsilon, "epsilon")

    def compute_epsilon(self, step: int) -> float:
        return self.epsilon

    def sample(self, algo: Any, x: Any, step: int) -> np.ndarray:
        return _epsilon_greedy(algo, x, self.epsilon)

    def sample_envs(self, algo: Any, x: Any, step: int, env_indices: Sequence[int],
                    generators: Sequence[np.random.Generator]) -> np.ndarray:
        return _epsilon_greedy_envs(algo, x, self.epsilon, generators)

    def __repr__(self) -> str:
        return f"ConstantEpsilonGreedy(epsilon={self.epsilon})"


class LinearDecayEpsilonGreedy(Explorer):
    """Epsilon-greedy whose ``epsilon`` falls linearly from ``start_epsilon``
    at step 0 to ``end_epsilon`` at step ``duration``, then stays there:

        epsilon(t) = end + (start - end) * (1 - t / duration)   for t < duration
    """

    action_space = ActionSpace.DISCRETE

    def __init__(self, start_epsilon: float = 1.0, end_epsilon: float = 0.1, duration: int = 1000000) -> None:
        self.start_epsilon = _check_probability(start_epsilon, "start_epsilon")
        self.end_epsilon = _check_probability(end_epsilon, "end_epsilon")
        if isinstance(duration, bool) or not isinstance(duration, (int, np.integer)) or duration <= 0:
            raise ValueError(f"duration must be a positive int, got {duration!r}")
        self.duration = int(duration)

    def compute_epsilon(self, step: int) -> float:
        """``epsilon`` at environment step ``step``."""
        if step >= self.duration:
            return self.end_epsilon
        return self.end_epsilon + (self.start_epsilon - self.end_epsilon) * (1.0 - step / self.duration)

    def sample(self, algo: Any, x: Any, step: int) -> np.ndarray:
        return _epsilon_greedy(algo, x, self.compute_epsilon(step))

    def sample_envs(self, algo: Any, x: Any, step: int, env_indices: Sequence[int],
                    generators: Sequence[np.random.Generator]) -> np.ndarray:
        return _epsilon_greedy_envs(algo, x, self.compute_epsilon(step), generators)

    def __repr__(self) -> str:
        return (
            f"LinearDecayEpsilonGreedy(start_epsilon={self.start_epsilon}, "
            f"end_epsilon={self.end_epsilon}, duration={self.duration})"
        )


def action_values(algo: Any, x: Any) -> np.ndarray:
    """``Q(x, a)`` for every action index ``a``: ``(B, action_size)``, from
    one ``predict_value`` call on the observations repeated per action."""
    n_actions = int(algo.action_size)
    batch = _batch_size(x)
    if isinstance(x, (list, tuple)):
        repeated: Any = [np.repeat(np.asarray(part), n_actions, axis=0) for part in x]
    else:
        repeated = np.repeat(np.asarray(x), n_actions, axis=0)
    actions = np.tile(np.arange(n_actions), batch)
    return np.asarray(algo.predict_value(repeated, actions)).reshape(batch, n_actions)


def inverse_cdf(probs: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Per row ``i`` of ``probs`` ``(B, A)``, the first index ``k`` with
    ``probs[i, :k + 1].sum() > u[i]`` (``u`` uniform in [0, 1)): one draw per
    row from each row's categorical distribution. The last index is returned
    when rounding leaves a row's total just below ``u``."""
    cdf = np.cumsum(probs, axis=1)
    return np.minimum((cdf <= np.asarray(u)[:, None]).sum(axis=1), probs.shape[1] - 1)


class Boltzmann(Explorer):
    """Boltzmann (softmax) exploration: action ``a`` is drawn with
    probability ``exp(Q(s, a) / T) / sum_b exp(Q(s, b) / T)``, ``T`` the
    ``temperature`` (after PFRL's ``Boltzmann``). Needs an algorithm with
    ``predict_value`` (DQN, DiscreteCQL, ...)."""

    action_space = ActionSpace.DISCRETE

    def __init__(self, temperature: float = 1.0) -> None:
        self.temperature = _check_number(temperature, "temperature", positive=True)

    def probabilities(self, values: np.ndarray) -> np.ndarray:
        """Softmax of ``values / temperature`` over the last axis (float64)."""
        logits = np.asarray(values, dtype=np.float64) / self.temperature
        logits -= logits.max(axis=-1, keepdims=True)
        weights = np.exp(logits)
        return weights / weights.sum(axis=-1, keepdims=True)

    def sample(self, algo: Any, x: Any, step: int) -> np.ndarray:
        probs = self.probabilities(action_values(algo, x))
        return inverse_cdf(probs, get_rng().random(probs.shape[0]))

    def sample_envs(self, algo: Any, x: Any, step: int, env_indices: Sequence[int],
                    generators: Sequence[np.random.Generator]) -> np.ndarray:
        probs = self.probabilities(action_values(algo, x))
        return inverse_cdf(probs, np.array([g.random() for g in generators]))

    def __repr__(self) -> str:
        return f"Boltzmann(temperature={self.temperature})"


def _as_bound(value: Bound, name: str) -> Optional[np.ndarray]:
    if value is None:
        return None
    array = np.asarray(value, dtype=np.float64)
    if not np.isfinite(array).all():
        raise ValueError(f"{name} must be finite, got {value!r}")
    return array


def action_bounds(algo: Any, low: Optional[np.ndarray] = None, high: Optional[np.ndarray] = None,
                  env_low: Any = None, env_high: Any = None) -> Tuple[Any, Any]:
    """The range noisy actions are clipped to: ``low``/``high`` when given,
    else the ``MinMaxActionScaler``'s range, else the environment's action
    bounds (``env_low``/``env_high``, known once ``fit_online`` or ``collect``
    has bound the explorer to an environment), else ``[-1, 1]`` (d3rlpy's
    rule, which would clip e.g. Pendulum's [-2, 2] torques to half)."""
    default_low: Any = -1.0 if env_low is None else env_low
    default_high: Any = 1.0 if env_high is None else env_high
    scaler = getattr(algo, "action_scaler", None)
    if isinstance(scaler, MinMaxActionScaler) and scaler.built:
        stats = scaler.stats_numpy()
        default_low, default_high = stats["minimum"], stats["maximum"]
    return (default_low if low is None else low), (default_high if high is None else high)


class _ContinuousNoise(Explorer):
    action_space = ActionSpace.CONTINUOUS

    def __init__(self, low: Bound, high: Bound) -> None:
        self.low = _as_bound(low, "low")
        self.high = _as_bound(high, "high")
        if self.low is not None and self.high is not None and np.any(self.low > self.high):
            raise ValueError(f"low must be <= high, got low={low!r}, high={high!r}")
        self.env_low: Optional[np.ndarray] = None
        self.env_high: Optional[np.ndarray] = None

    def bind_action_space(self, space: Any) -> None:
        """Remember a gymnasium Box's bounds as the default clipping range
        (called by ``fit_online`` and ``collect``)."""
        low, high = getattr(space, "low", None), getattr(space, "high", None)
        if low is not None and high is not None and np.isfinite(low).all() and np.isfinite(high).all():
            self.env_low = np.asarray(low, dtype=np.float64)
            self.env_high = np.asarray(high, dtype=np.float64)

    def _clip(self, algo: Any, action: np.ndarray) -> np.ndarray:
        low, high = action_bounds(algo, self.low, self.high, self.env_low, self.env_high)
        return np.clip(action, low, high).astype(np.float32, copy=False)


class NormalNoise(_ContinuousNoise):
    """Greedy action plus Gaussian noise ``N(mean, std^2)`` per dimension,
    clipped to the action range: ``low``/``high`` when given, else the
    ``MinMaxActionScaler``'s range, else the environment's bounds (in
    ``fit_online`` / ``collect``), else ``[-1, 1]`` (d3rlpy's default)."""

    def __init__(self, mean: float = 0.0, std: float = 0.1, low: Bound = None, high: Bound = None) -> None:
        super().__init__(low, high)
        self.mean = _check_number(mean, "mean")
        self.std = _check_number(std, "std", non_negative=True)

    def sample(self, algo: Any, x: Any, step: int) -> np.ndarray:
        action = np.asarray(algo.predict(x))
        noise = get_rng().normal(self.mean, self.std, size=action.shape)
        return self._clip(algo, action + noise)

    def sample_envs(self, algo: Any, x: Any, step: int, env_indices: Sequence[int],
                    generators: Sequence[np.random.Generator]) -> np.ndarray:
        action = np.asarray(algo.predict(x))
        noise = np.stack([g.normal(self.mean, self.std, size=action.shape[1:]) for g in generators])
        return self._clip(algo, action + noise)

    def __repr__(self) -> str:
        return f"NormalNoise(mean={self.mean}, std={self.std})"


class AdditiveOU(_ContinuousNoise):
    """Greedy action plus Ornstein-Uhlenbeck noise (after PFRL's
    ``AdditiveOU``; Uhlenbeck & Ornstein, 1930; used by DDPG), clipped to the
    action range as :class:`NormalNoise`. The noise state ``z`` follows, per
    action dimension and environment step,

        z_{t+1} = z_t + theta (mu - z_t) + sigma eps_t,   eps_t ~ N(0, 1)

    and starts each episode at ``mu`` (``start_with_mu=True``) or drawn from
    the process's stationary distribution
    ``N(mu, sigma^2 / (2 theta - theta^2))``. The first action of an episode
    uses the starting state; each later call moves the state one step first.
    """

    def __init__(self, mu: float = 0.0, theta: float = 0.15, sigma: float = 0.3, start_with_mu: bool = False,
                 low: Bound = None, high: Bound = None) -> None:
        super().__init__(low, high)
        self.mu = _check_number(mu, "mu")
        self.theta = _check_number(theta, "theta", positive=True)
        if self.theta >= 2.0:
            raise ValueError(f"theta must be in (0, 2) for the process to be stable, got {theta!r}")
        self.sigma = _check_number(sigma, "sigma", non_negative=True)
        self.start_with_mu = bool(start_with_mu)
        self.state: Optional[np.ndarray] = None
        self.env_states: Dict[int, np.ndarray] = {}  # per vectorised environment

    @property
    def stationary_std(self) -> float:
        """Standard deviation of the stationary distribution."""
        return self.sigma / float(np.sqrt(2.0 * self.theta - self.theta**2))

    def reset(self) -> None:
        self.state = None
        self.env_states = {}

    def reset_env(self, index: int) -> None:
        self.env_states.pop(int(index), None)

    def evolve(self) -> np.ndarray:
        """Move the noise state one step; returns it."""
        noise = get_rng().standard_normal(self.state.shape)
        self.state = self.state + self.theta * (self.mu - self.state) + self.sigma * noise
        return self.state

    def sample(self, algo: Any, x: Any, step: int) -> np.ndarray:
        action = np.asarray(algo.predict(x))
        if self.state is None or self.state.shape != action.shape:
            if self.start_with_mu:
                self.state = np.full(action.shape, self.mu, dtype=np.float64)
            else:
                self.state = get_rng().normal(self.mu, self.stationary_std, size=action.shape)
        else:
            self.evolve()
        return self._clip(algo, action + self.state)

    def sample_envs(self, algo: Any, x: Any, step: int, env_indices: Sequence[int],
                    generators: Sequence[np.random.Generator]) -> np.ndarray:
        """Each environment's noise follows its own process, advanced only
        on that environment's steps, with draws from its generator."""
        action = np.asarray(algo.predict(x))
        noise = np.empty(action.shape, dtype=np.float64)
        for row, (index, generator) in enumerate(zip(env_indices, generators)):
            state = self.env_states.get(int(index))
            if state is None or state.shape != action.shape[1:]:
                if self.start_with_mu:
                    state = np.full(action.shape[1:], self.mu, dtype=np.float64)
                else:
                    state = generator.normal(self.mu, self.stationary_std, size=action.shape[1:])
            else:
                state = state + self.theta * (self.mu - state) + self.sigma * generator.standard_normal(state.shape)
            self.env_states[int(index)] = state
            noise[row] = state
        return self._clip(algo, action + noise)

    def __repr__(self) -> str:
        return f"AdditiveOU(mu={self.mu}, theta={self.theta}, sigma={self.sigma}, start_with_mu={self.start_with_mu})"


def check_explorer(explorer: Any, action_space: ActionSpace, algo_name: str = "the algorithm") -> None:
    """Raise ``TypeError`` unless ``explorer`` has ``sample(algo, x, step)``,
    ``ValueError`` when it declares an action space other than ``action_space``
    (the environment's)."""
    if explorer is None:
        return
    if not callable(getattr(explorer, "sample", None)):
        raise TypeError(
            f"explorer must have a sample(algo, x, step) method (e.g. ConstantEpsilonGreedy(0.1)), "
            f"got {type(explorer).__name__}"
        )
    suits = getattr(explorer, "action_space", None)
    if isinstance(suits, ActionSpace) and suits != ActionSpace.BOTH and suits != action_space:
        hint = "NormalNoise or AdditiveOU" if action_space == ActionSpace.CONTINUOUS else "ConstantEpsilonGreedy, LinearDecayEpsilonGreedy or Boltzmann"
        raise ValueError(
            f"explorer {type(explorer).__name__} explores {suits.name.lower()} actions, but "
            f"{algo_name} acts in a {action_space.name.lower()} action space here (use {hint})"
        )
