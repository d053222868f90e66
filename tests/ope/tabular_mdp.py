"""A small finite-horizon MDP whose policy values are known exactly, for
testing the off-policy estimators.

``S`` states and an absorbing terminal state, ``A`` actions, horizon ``H``:
an episode ends when it enters the terminal state (``terminals``) or after
``H`` steps (``timeouts``), so episode lengths vary. Rewards are
``R[s, a]`` plus Gaussian noise. Observations are ``[one_hot(s), one_hot(t)]``
(``S + H`` floats), so the time-dependent action values ``Q_t(s, a)`` are a
function of the observation and an exact model can be handed to DR.

Values come from backward dynamic programming:
``Q_t(s, a) = R[s, a] + gamma sum_{s'} P[s, a, s'] V_{t+1}(s')``,
``V_t(s) = sum_a pi[s, a] Q_t(s, a)``, ``V_H = 0``, terminal value 0.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Tuple

import numpy as np

from offrl.dataset import MDPDataset


@dataclasses.dataclass(frozen=True)
class TabularMDP:
    transitions: np.ndarray  # (S, A, S + 1), last column: terminal
    rewards: np.ndarray  # (S, A) mean rewards
    initial: np.ndarray  # (S,)
    horizon: int
    reward_noise: float

    @property
    def n_states(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def n_actions(self) -> int:
        return int(self.rewards.shape[1])

    def observations(self, states: np.ndarray, steps: np.ndarray) -> np.ndarray:
        obs = np.zeros((states.shape[0], self.n_states + self.horizon), dtype=np.float32)
        obs[np.arange(states.shape[0]), states] = 1.0
        obs[np.arange(states.shape[0]), self.n_states + steps] = 1.0
        return obs

    def decode(self, observations: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """``(states, steps)`` of observations."""
        x = np.asarray(observations)
        return x[:, : self.n_states].argmax(axis=1), x[:, self.n_states:].argmax(axis=1)


def make_mdp(n_states: int = 3, n_actions: int = 3, horizon: int = 4, terminal_probability: float = 0.15,
             reward_noise: float = 0.3, seed: int = 0) -> TabularMDP:
    rng = np.random.default_rng(seed)
    moves = rng.dirichlet(np.ones(n_states), size=(n_states, n_actions)) * (1.0 - terminal_probability)
    transitions = np.concatenate([moves, np.full((n_states, n_actions, 1), terminal_probability)], axis=2)
    rewards = rng.uniform(0.0, 1.0, size=(n_states, n_actions))
    initial = rng.dirichlet(np.ones(n_states))
    return TabularMDP(transitions, rewards, initial, horizon, reward_noise)


def action_values(mdp: TabularMDP, policy: np.ndarray, gamma: float) -> Tuple[np.ndarray, float]:
    """Exact ``Q_t(s, a)``, ``(H, S, A)``, and the policy's value from the initial distribution."""
    s, h = mdp.n_states, mdp.horizon
    q = np.zeros((h, s, mdp.n_actions))
    v_next = np.zeros(s)
    for t in range(h - 1, -1, -1):
        q[t] = mdp.rewards + gamma * mdp.transitions[:, :, :s] @ v_next
        v_next = (policy * q[t]).sum(axis=1)
    return q, float(mdp.initial @ v_next)


def true_value(mdp: TabularMDP, policy: np.ndarray, gamma: float) -> float:
    return action_values(mdp, policy, gamma)[1]


def _categorical(rng: np.random.Generator, probs: np.ndarray) -> np.ndarray:
    """One draw per row of ``(n, k)`` probabilities."""
    return (rng.random((probs.shape[0], 1)) > np.cumsum(probs, axis=1)).sum(axis=1).clip(max=probs.shape[1] - 1)


@dataclasses.dataclass(frozen=True)
class Logged:
    dataset: MDPDataset
    behaviour_probabilities: np.ndarray  # (N,) mu(a_t | s_t), in episode order
    states: np.ndarray  # (N,)
    steps: np.ndarray  # (N,)
    actions: np.ndarray  # (N,)


def sample_dataset(mdp: TabularMDP, behaviour: np.ndarray, n_episodes: int, seed: int) -> Logged:
    """``n_episodes`` episodes of ``behaviour`` (``(S, A)`` probabilities),
    simulated for all episodes at once, one time step at a time."""
    rng = np.random.default_rng(seed)
    states = _categorical(rng, np.broadcast_to(mdp.initial, (n_episodes, mdp.n_states)))
    alive = np.ones(n_episodes, dtype=bool)
    columns = {k: [] for k in ("episode", "step", "state", "action", "reward", "terminal", "timeout")}
    for t in range(mdp.horizon):
        episode = np.flatnonzero(alive)
        s = states[episode]
        a = _categorical(rng, behaviour[s])
        r = mdp.rewards[s, a] + mdp.reward_noise * rng.normal(size=s.shape[0])
        nxt = _categorical(rng, mdp.transitions[s, a])
        terminal = nxt == mdp.n_states
        for key, value in zip(columns, (episode, np.full(s.shape[0], t), s, a, r, terminal,
                                        ~terminal & (t == mdp.horizon - 1))):
            columns[key].append(value)
        states[episode] = nxt
        alive[episode[terminal]] = False
    flat = {k: np.concatenate(v) for k, v in columns.items()}
    order = np.lexsort((flat["step"], flat["episode"]))
    flat = {k: v[order] for k, v in flat.items()}
    dataset = MDPDataset(
        mdp.observations(flat["state"], flat["step"]), flat["action"], flat["reward"].astype(np.float32),
        flat["terminal"].astype(np.float32), flat["timeout"].astype(np.float32),
        action_size=mdp.n_actions,
    )
    mu = behaviour[flat["state"], flat["action"]]
    return Logged(dataset, mu, flat["state"], flat["step"], flat["action"])


def table_policy(mdp: TabularMDP, policy: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """The ``(S, A)`` table as a target callable: observations -> ``(B, A)`` probabilities."""
    return lambda x: policy[mdp.decode(x)[0]]


def table_q(mdp: TabularMDP, q: np.ndarray) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """``Q_t(s, a)`` (``(H, S, A)``) as a DR model callable ``(x, action) -> (B,)``."""

    def model(x: np.ndarray, action: np.ndarray) -> np.ndarray:
        states, steps = mdp.decode(x)
        return q[steps, states, np.asarray(action).reshape(-1)]

    return model
