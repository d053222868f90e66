"""FQE / DiscreteFQE: loss maths on hand-built batches, the evaluated policy's
action pipeline, accuracy against dynamic programming on small tabular MDPs,
the policy-value estimate, and the algorithm contract (FQE is exempt from
tests/algos/test_contract.py, which cannot give it an algorithm to evaluate)."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.base import clone
from torch import nn

import offrl
from offrl.algos import DQNConfig, IQLConfig
from offrl.algos.base import LearnableConfig, QLearningAlgoBase
from offrl.constants import ActionSpace
from offrl.dataset import MDPDataset, TransitionMiniBatch, create_fifo_replay_buffer
from offrl.logging import NoopAdapterFactory
from offrl.models import QRQFunctionFactory, VectorEncoderFactory
from offrl.models.modules import Modules
from offrl.ope import DiscreteFQE, DiscreteFQEConfig, FQE, FQEConfig, PolicyValueEstimate, initial_observations
from offrl.preprocessing import (
    MinMaxActionScaler,
    PixelObservationScaler,
    StandardObservationScaler,
    StandardRewardScaler,
    TupleObservationScaler,
)
from offrl.serialization import from_json_value, registered


# ------------------------------------------------------------------ helpers
@dataclasses.dataclass
class _TableConfig(LearnableConfig):
    """Config of the test policy (not registered: no contract run)."""

    @staticmethod
    def get_type() -> str:
        return "test_table_policy"


class _Table(nn.Module):
    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("table", table)


@dataclasses.dataclass(frozen=True)
class _TableModules(Modules):
    table: _Table


class TablePolicy(QLearningAlgoBase):
    """A fixed policy on (scaled) observations ``x``: ``argmax(x @ table)``
    for discrete actions, ``tanh(x @ table)`` for continuous ones."""

    _modules: _TableModules

    def __init__(self, table: np.ndarray, discrete: bool, observation_scaler=None, action_scaler=None) -> None:
        super().__init__(_TableConfig(observation_scaler=observation_scaler, action_scaler=action_scaler))
        self._action_type = ActionSpace.DISCRETE if discrete else ActionSpace.CONTINUOUS
        self._table = torch.as_tensor(np.asarray(table, dtype=np.float32))
        self.create_impl((self._table.shape[0],), self._table.shape[1])

    def _build(self, observation_shape, action_size: int) -> _TableModules:
        return _TableModules(table=_Table(self._table))

    def _predict(self, x) -> torch.Tensor:
        out = x @ self._modules.table.table
        return out.argmax(dim=-1) if self._action_type == ActionSpace.DISCRETE else torch.tanh(out)


def _fit(fqe, dataset, steps: int = 3, **kwargs):
    return fqe.fit(dataset, n_steps=steps, n_steps_per_epoch=kwargs.pop("n_steps_per_epoch", 2),
                   logger_adapter=NoopAdapterFactory(), show_progress=False, **kwargs)


def _dataset(kind: str, discrete: bool, n: int = 64, seed: int = 0) -> MDPDataset:
    """Random data: 'vector' (3,), 'image' (1, 36, 36) uint8, 'tuple' of both; 2 actions."""
    rng = np.random.default_rng(seed)
    vector = rng.normal(size=(n, 3)).astype(np.float32) * 2.0 + 1.0
    image = rng.integers(0, 256, size=(n, 1, 36, 36), dtype=np.uint8)
    observations = {"vector": vector, "image": image, "tuple": [vector, image]}[kind]
    actions = rng.integers(0, 2, size=n) if discrete else rng.uniform(-2.0, 3.0, size=(n, 2)).astype(np.float32)
    rewards = rng.normal(size=n).astype(np.float32)
    terminals = np.zeros(n, dtype=np.float32)
    terminals[np.arange(7, n, 8)] = 1.0
    return MDPDataset(observations, actions, rewards, terminals, action_size=2 if discrete else None)


def _observation_scaler(kind: str):
    return {
        "vector": StandardObservationScaler(),
        "image": PixelObservationScaler(),
        "tuple": TupleObservationScaler([StandardObservationScaler(), PixelObservationScaler()]),
    }[kind]


def _trained_algo(kind: str, discrete: bool, dataset) -> QLearningAlgoBase:
    """A DQN / IQL with scalers, fitted for a few steps."""
    scalers = {"observation_scaler": _observation_scaler(kind)}
    if not discrete:
        scalers["action_scaler"] = MinMaxActionScaler()
    config = DQNConfig(batch_size=8, **scalers) if discrete else IQLConfig(batch_size=8, **scalers)
    algo = config.create()
    _fit(algo, dataset, steps=2)
    return algo


def _fqe_config(kind: str, discrete: bool, **kwargs) -> FQEConfig:
    cls = DiscreteFQEConfig if discrete else FQEConfig
    scalers = {"observation_scaler": _observation_scaler(kind), "reward_scaler": StandardRewardScaler()}
    if not discrete:
        scalers["action_scaler"] = MinMaxActionScaler()
    return cls(batch_size=8, **{**scalers, **kwargs})


def _observations(dataset, n: int = 5):
    arrays = dataset.to_arrays()["observations"]
    return [a[:n] for a in arrays] if isinstance(arrays, list) else arrays[:n]


def _actions(dataset, n: int = 5):
    actions = dataset.to_arrays()["actions"][:n]
    return actions[:, 0] if np.issubdtype(actions.dtype, np.integer) else actions


def _batch(discrete: bool) -> TransitionMiniBatch:
    obs = np.array([[0.1, 0.2, 1.0], [0.3, -0.1, 0.0], [-0.5, 0.4, 2.0], [0.0, 1.0, -1.0]], dtype=np.float32)
    nxt = np.array([[0.2, 0.1, 0.5], [0.0, 0.0, 0.0], [0.6, -0.3, 1.0], [1.0, 1.0, 1.0]], dtype=np.float32)
    if discrete:
        actions = np.array([[0], [2], [1], [1]], dtype=np.int64)
        logged_next = np.zeros((4, 1), dtype=np.int64)
    else:
        actions = np.array([[1.0, -2.0], [0.5, 0.5], [-1.5, 3.0], [2.0, 0.0]], dtype=np.float32)
        logged_next = np.full((4, 2), 9.0, dtype=np.float32)  # the logged next actions: FQE must not use them
    return TransitionMiniBatch(
        observations=obs,
        actions=actions,
        rewards=np.array([[1.0], [0.0], [-1.0], [0.5]], dtype=np.float32),
        next_observations=nxt,
        next_actions=logged_next,
        terminals=np.array([[0.0], [1.0], [0.0], [0.0]], dtype=np.float32),
        intervals=np.array([[1.0], [1.0], [2.0], [1.0]], dtype=np.float32),
    )


def _perturb(module: nn.Module, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=generator))


# ---------------------------------------------------------------- config
def test_config_defaults_are_d3rlpys():
    for cls in (FQEConfig, DiscreteFQEConfig):
        config = cls()
        assert config.learning_rate == 1e-4
        assert config.optim_factory.get_type() == "adam"
        assert config.encoder_factory.get_type() == "default"
        assert config.q_func_factory.get_type() == "mean"
        assert (config.batch_size, config.gamma, config.n_critics, config.target_update_interval) == (100, 0.99, 1, 100)
        assert config.observation_scaler is None and config.action_scaler is None and config.reward_scaler is None
        assert cls.algorithm_class().evaluates_algorithm
        assert registered("algorithm")[config.get_type()] is cls
    assert (FQEConfig.get_type(), DiscreteFQEConfig.get_type()) == ("fqe", "discrete_fqe")


@pytest.mark.parametrize("field,value", [("learning_rate", 0.0), ("n_critics", 0), ("target_update_interval", -1), ("batch_size", 0)])
def test_config_rejects_bad_values(field, value):
    with pytest.raises(ValueError, match=field):
        FQEConfig(**{field: value})


@pytest.mark.parametrize("discrete", [False, True])
def test_config_json_round_trip(discrete):
    config = _fqe_config("tuple", discrete, n_critics=2, q_func_factory=QRQFunctionFactory(n_quantiles=4), gamma=0.9)
    data = config.to_dict()
    rebuilt = type(config).from_dict(data)
    assert rebuilt.to_dict() == data
    assert from_json_value(data).to_dict() == data
    assert type(from_json_value(data)) is type(config)


# ------------------------------------------------------------ loss maths
@pytest.mark.parametrize("n_critics", [1, 2])
def test_continuous_loss_matches_hand_computation(n_critics):
    """Squared TD error against r + gamma^k (1 - d) min_e Q_target_e(s', pi(s')),
    pi(s') through the evaluated policy's own scalers, then FQE's."""
    offrl.seed(0)
    w = np.array([[0.5, -1.0], [1.5, 0.3], [-0.7, 0.8]], dtype=np.float32)
    algo_mean, algo_std = np.array([0.1, -0.2, 0.5]), np.array([2.0, 0.5, 1.0])
    policy = TablePolicy(
        w, discrete=False,
        observation_scaler=StandardObservationScaler(mean=algo_mean, std=algo_std),
        action_scaler=MinMaxActionScaler(minimum=[-2.0, 0.0], maximum=[2.0, 1.0]),
    )
    fqe_mean, fqe_std = np.array([0.0, 0.3, -0.1]), np.array([1.0, 1.5, 0.8])
    config = FQEConfig(
        encoder_factory=VectorEncoderFactory(hidden_units=[8]), gamma=0.9, n_critics=n_critics,
        observation_scaler=StandardObservationScaler(mean=fqe_mean, std=fqe_std),
        action_scaler=MinMaxActionScaler(minimum=[-4.0, -1.0], maximum=[4.0, 3.0]),
    )
    fqe = FQE(algo=policy, config=config)
    fqe.create_impl((3,), 2)
    q, targ = fqe.modules["q_function"], fqe.modules["targ_q_function"]
    _perturb(targ, 1)
    batch = _batch(discrete=False)

    def fqe_obs(x):
        return (x - fqe_mean) / (fqe_std + 1e-3)

    def fqe_action(a):
        return (a - np.array([-4.0, -1.0])) / np.array([8.0, 4.0]) * 2.0 - 1.0

    policy_scaled = np.tanh(((batch.next_observations - algo_mean) / (algo_std + 1e-3)) @ w)
    policy_env = (policy_scaled + 1.0) / 2.0 * np.array([4.0, 1.0]) + np.array([-2.0, 0.0])
    next_action = fqe_action(policy_env)
    t = lambda a: torch.as_tensor(np.asarray(a, dtype=np.float32))  # noqa: E731
    with torch.no_grad():
        next_q = targ.expected(t(fqe_obs(batch.next_observations)), t(next_action))[..., 0].numpy()  # (E, 4)
        pred = q.expected(t(fqe_obs(batch.observations)), t(fqe_action(batch.actions)))[..., 0].numpy()
    y = batch.rewards[:, 0] + 0.9 ** batch.intervals[:, 0] * (1 - batch.terminals[:, 0]) * next_q.min(axis=0)
    expected = ((pred - y) ** 2).mean(axis=1).sum()

    preprocessed = fqe.preprocess_batch(batch.to_torch("cpu"))
    np.testing.assert_allclose(preprocessed.next_actions.numpy(), next_action, rtol=1e-5, atol=1e-5)
    assert fqe.update(batch)["loss"] == pytest.approx(float(expected), rel=1e-5)


def test_discrete_loss_matches_hand_computation():
    """Squared TD error (not DQN's Huber) against r + gamma^k (1 - d) Q_target(s', pi(s'))."""
    offrl.seed(0)
    table = np.array([[1.0, 0.0, 0.5], [0.0, 2.0, 0.0], [0.0, 0.0, 1.0]], dtype=np.float32)
    policy = TablePolicy(table, discrete=True)
    config = DiscreteFQEConfig(encoder_factory=VectorEncoderFactory(hidden_units=[8]), gamma=0.8)
    fqe = DiscreteFQE(algo=policy, config=config)
    fqe.create_impl((3,), 3)
    q, targ = fqe.modules["q_function"], fqe.modules["targ_q_function"]
    _perturb(targ, 2)
    batch = _batch(discrete=True)
    next_action = (batch.next_observations @ table).argmax(axis=1)
    assert len(set(next_action.tolist())) > 1  # the batch exercises different policy actions
    with torch.no_grad():
        next_q = targ.expected(torch.from_numpy(batch.next_observations))[0].numpy()
        q_now = q.expected(torch.from_numpy(batch.observations))[0].numpy()
    y = batch.rewards[:, 0] + 0.8 ** batch.intervals[:, 0] * (1 - batch.terminals[:, 0]) * next_q[np.arange(4), next_action]
    td = q_now[np.arange(4), batch.actions[:, 0]] - y
    assert np.abs(td).max() > 1.0  # where Huber and squared error differ
    expected = (td**2).mean()
    np.testing.assert_array_equal(fqe.preprocess_batch(batch.to_torch("cpu")).next_actions.numpy()[:, 0], next_action)
    assert fqe.update(batch)["loss"] == pytest.approx(float(expected), rel=1e-5)


@pytest.mark.parametrize("discrete", [False, True])
def test_target_network_synchronises_on_interval(discrete):
    table = np.eye(3, dtype=np.float32)
    cls, config_cls = (DiscreteFQE, DiscreteFQEConfig) if discrete else (FQE, FQEConfig)
    config = config_cls(encoder_factory=VectorEncoderFactory(hidden_units=[8]), target_update_interval=3, learning_rate=1e-2)
    fqe = cls(algo=TablePolicy(table if discrete else table[:, :2], discrete), config=config)
    fqe.create_impl((3,), 3 if discrete else 2)
    q, targ = fqe.modules["q_function"], fqe.modules["targ_q_function"]

    def same() -> bool:
        return all(torch.equal(a, b) for a, b in zip(q.parameters(), targ.parameters()))

    batch = _batch(discrete)
    # d3rlpy 2.8.1's schedule: copied after the updates of steps 0, 3, 6, ...
    assert same()
    fqe.update(batch)  # step 0: copied
    assert same()
    fqe.update(batch)
    fqe.update(batch)
    assert not same()
    fqe.update(batch)  # step 3: copied
    assert same()
    assert all(not p.requires_grad for p in targ.parameters())


def test_fit_leaves_the_evaluated_algorithm_unchanged():
    offrl.seed(3)
    dataset = _dataset("vector", discrete=False)
    algo = _trained_algo("vector", False, dataset)
    before = {k: v.clone() for k, v in algo.modules.state_dict().items()}
    step = algo.grad_step
    fqe = FQE(algo=algo, config=_fqe_config("vector", False))
    _fit(fqe, dataset, steps=4)
    after = algo.modules.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert algo.grad_step == step



def test_discrete_fqe_estimates_the_mean_of_skewed_returns():
    """One-step episodes whose reward is 10 with probability 0.2, else 0: the
    value is the mean, 2 (a Huber regression, as DQN's loss, would settle
    near the median instead, well below 1)."""
    rng = np.random.default_rng(0)
    n = 2000
    rewards = np.where(rng.random(n) < 0.2, 10.0, 0.0).astype(np.float32)
    dataset = MDPDataset(np.ones((n, 1), dtype=np.float32), np.zeros(n, dtype=np.int64), rewards,
                         np.ones(n, dtype=np.float32), action_size=1)
    config = DiscreteFQEConfig(encoder_factory=VectorEncoderFactory(hidden_units=[16]), learning_rate=1e-2, batch_size=128)
    fqe = DiscreteFQE(algo=TablePolicy(np.ones((1, 1)), discrete=True), config=config)
    offrl.seed(0)
    _fit(fqe, dataset, steps=300, n_steps_per_epoch=300)
    assert fqe.predict_value(np.ones((1, 1), dtype=np.float32), [0])[0] == pytest.approx(rewards.mean(), abs=0.25)


# ------------------------------------------------------ tabular accuracy
GAMMA = 0.8
N_STATES = 4


def _tabular_mdp(seed: int):
    """Random 4-state MDP: P[s, b, s'] for 2 action bins b, rewards r0[s] + r1[s] * a."""
    rng = np.random.default_rng(seed)
    transitions = rng.dirichlet(np.full(N_STATES, 0.5), size=(N_STATES, 2))
    return rng, transitions, rng.uniform(-1.0, 1.0, size=(N_STATES, 2))


def _policy_value(transitions: np.ndarray, rewards: np.ndarray, bins: np.ndarray) -> np.ndarray:
    """Exact V of the deterministic policy choosing action bin ``bins[s]``
    (``rewards[s]`` its expected reward there): ``(I - gamma P_pi)^-1 r_pi``."""
    p_pi = transitions[np.arange(N_STATES), bins]
    return np.linalg.solve(np.eye(N_STATES) - GAMMA * p_pi, rewards)


def _rollouts(rng, transitions, act, reward, n_episodes: int = 200, length: int = 20):
    """Episodes of ``length`` steps under a behaviour policy ``act(n) -> (actions, bins)``
    from uniformly drawn initial states, ending in a timeout."""
    state = rng.integers(0, N_STATES, size=n_episodes)
    first = state.copy()
    obs, actions, rewards = [], [], []
    for _ in range(length):
        action, bins = act(n_episodes)
        obs.append(state)
        actions.append(action)
        rewards.append(reward(state, action))
        cumulative = transitions[state, bins].cumsum(axis=1)
        state = np.minimum((rng.random((n_episodes, 1)) > cumulative).sum(axis=1), N_STATES - 1)
    stack = lambda xs: np.stack(xs, axis=1).reshape((n_episodes * length,) + np.shape(xs[0])[1:])  # noqa: E731
    timeouts = np.zeros(n_episodes * length, dtype=np.float32)
    timeouts[length - 1::length] = 1.0
    observations = np.eye(N_STATES, dtype=np.float32)[stack(obs)]
    return observations, stack(actions), stack(rewards).astype(np.float32), timeouts, first


def _fit_tabular(fqe, dataset, steps: int = 1000) -> PolicyValueEstimate:
    offrl.seed(0)
    fqe.fit(dataset, n_steps=steps, n_steps_per_epoch=steps, logger_adapter=NoopAdapterFactory(), show_progress=False)
    return fqe.estimate_policy_value(dataset, seed=0)


def _tabular_config(cls):
    return cls(encoder_factory=VectorEncoderFactory(hidden_units=[32, 32]), learning_rate=1e-3, gamma=GAMMA,
               target_update_interval=50, batch_size=64)


def _greedy_bins(transitions: np.ndarray, rewards: np.ndarray) -> np.ndarray:
    """The optimal choice among the 2 action bins (value iteration)."""
    q = np.zeros((N_STATES, 2))
    for _ in range(300):
        q = rewards + GAMMA * transitions @ q.max(axis=1)
    return q.argmax(axis=1)


ONE_HOT = np.eye(N_STATES, dtype=np.float32)


def test_discrete_fqe_matches_dynamic_programming():
    """Uniform behaviour, optimal target policy: FQE's value at the initial
    states is within 0.2 of the exact value (the behaviour's is over 1 away)."""
    rng, transitions, rewards = _tabular_mdp(0)
    target = _greedy_bins(transitions, rewards)
    true_value = _policy_value(transitions, rewards[np.arange(N_STATES), target], target)
    behaviour_value = np.linalg.solve(np.eye(N_STATES) - GAMMA * transitions.mean(axis=1), rewards.mean(axis=1))

    def act(n):
        a = rng.integers(0, 2, size=n)
        return a, a

    observations, actions, step_rewards, timeouts, first = _rollouts(rng, transitions, act, lambda s, a: rewards[s, a])
    dataset = MDPDataset(observations, actions, step_rewards, np.zeros_like(timeouts), timeouts, action_size=2)
    policy = TablePolicy(np.eye(2)[target], discrete=True)
    np.testing.assert_array_equal(policy.predict(ONE_HOT), target)

    fqe = DiscreteFQE(algo=policy, config=_tabular_config(DiscreteFQEConfig))
    estimate = _fit_tabular(fqe, dataset)
    truth, behaviour = true_value[first].mean(), behaviour_value[first].mean()
    assert abs(truth - behaviour) > 1.0
    assert estimate.value == pytest.approx(truth, abs=0.2)
    assert estimate.lower < estimate.value < estimate.upper
    np.testing.assert_allclose(fqe.predict_state_value(ONE_HOT), true_value, atol=0.25)


def test_continuous_fqe_matches_dynamic_programming():
    """Actions in [-1, 1]: the next state depends on the action's sign, the
    reward is r0[s] + r1[s] a. Uniform behaviour, target policy acting
    +-0.6: FQE's value at the initial states is within 0.2 of the exact value."""
    rng, transitions, rewards = _tabular_mdp(1)
    r0, r1 = rewards[:, 0], rewards[:, 1]
    choices = np.stack([r0 - 0.6 * r1, r0 + 0.6 * r1], axis=1)  # expected reward of acting -0.6 / +0.6
    target = _greedy_bins(transitions, choices)
    target_action = np.where(target == 1, 0.6, -0.6)
    true_value = _policy_value(transitions, r0 + r1 * target_action, target)
    behaviour_value = np.linalg.solve(np.eye(N_STATES) - GAMMA * transitions.mean(axis=1), r0)

    def act(n):
        a = rng.uniform(-1.0, 1.0, size=(n, 1)).astype(np.float32)
        return a, (a[:, 0] > 0).astype(np.int64)

    observations, actions, step_rewards, timeouts, first = _rollouts(rng, transitions, act, lambda s, a: r0[s] + r1[s] * a[:, 0])
    dataset = MDPDataset(observations, actions, step_rewards, np.zeros_like(timeouts), timeouts)
    policy = TablePolicy(np.arctanh(target_action)[:, None], discrete=False)
    np.testing.assert_allclose(policy.predict(ONE_HOT)[:, 0], target_action, rtol=1e-5)

    fqe = FQE(algo=policy, config=_tabular_config(FQEConfig))
    estimate = _fit_tabular(fqe, dataset)
    truth, behaviour = true_value[first].mean(), behaviour_value[first].mean()
    assert abs(truth - behaviour) > 1.0
    assert estimate.value == pytest.approx(truth, abs=0.2)
    np.testing.assert_allclose(fqe.predict_state_value(ONE_HOT), true_value, atol=0.25)



@pytest.mark.slow
def test_discrete_fqe_ranks_policies_like_dynamic_programming():
    """Offline policy selection: DiscreteFQE's values of all 16 deterministic
    policies of a 4-state MDP (gamma 0.9, value spread over 8) are within
    0.35 of the exact ones and rank them alike."""
    rng, transitions, rewards = _tabular_mdp(2)
    gamma = 0.9

    def act(n):
        a = rng.integers(0, 2, size=n)
        return a, a

    observations, actions, step_rewards, timeouts, first = _rollouts(
        rng, transitions, act, lambda s, a: rewards[s, a], n_episodes=400, length=40
    )
    dataset = MDPDataset(observations, actions, step_rewards, np.zeros_like(timeouts), timeouts, action_size=2)
    config = DiscreteFQEConfig(encoder_factory=VectorEncoderFactory(hidden_units=[64, 64]), learning_rate=5e-4, gamma=gamma)
    estimates, truths = [], []
    for code in range(2**N_STATES):
        bins = (code >> np.arange(N_STATES)) & 1
        p_pi = transitions[np.arange(N_STATES), bins]
        true_value = np.linalg.solve(np.eye(N_STATES) - gamma * p_pi, rewards[np.arange(N_STATES), bins])
        fqe = DiscreteFQE(algo=TablePolicy(np.eye(2)[bins], discrete=True), config=config)
        offrl.seed(code)
        fqe.fit(dataset, n_steps=4000, n_steps_per_epoch=4000, logger_adapter=NoopAdapterFactory(), show_progress=False)
        estimates.append(fqe.estimate_policy_value(dataset, n_bootstrap=10).value)
        truths.append(true_value[first].mean())
    estimates, truths = np.array(estimates), np.array(truths)
    assert truths.max() - truths.min() > 8.0
    np.testing.assert_allclose(estimates, truths, atol=0.35)
    assert estimates.argmax() == truths.argmax()
    ranks = lambda v: np.argsort(np.argsort(v))  # noqa: E731
    assert np.corrcoef(ranks(estimates), ranks(truths))[0, 1] > 0.95  # Spearman's rank correlation

# ------------------------------------------------------ policy-value estimate
def _naive_first_observations(episodes):
    firsts = [ep.observations[0] if not isinstance(ep.observations, list) else [o[0] for o in ep.observations]
              for ep in episodes]
    if isinstance(firsts[0], list):
        return [np.stack([f[k] for f in firsts]) for k in range(len(firsts[0]))]
    return np.stack(firsts)


@settings(max_examples=25, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 6), min_size=1, max_size=12),
    tuple_obs=st.booleans(),
    limit=st.one_of(st.none(), st.integers(3, 30)),
)
def test_initial_observations_match_a_loop_over_episodes(lengths, tuple_obs, limit):
    n = sum(lengths)
    vector = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    observations = [vector, np.arange(n, dtype=np.int64).reshape(n, 1)] if tuple_obs else vector
    terminals = np.zeros(n, dtype=np.float32)
    terminals[np.cumsum(lengths) - 1] = 1.0
    dataset = MDPDataset(observations, np.zeros((n, 1), dtype=np.float32), np.zeros(n, dtype=np.float32), terminals)
    if limit is not None:  # a FIFO buffer that dropped old transitions
        dataset = create_fifo_replay_buffer(limit, episodes=list(dataset.episodes))
    expected = _naive_first_observations(dataset.episodes)
    for source in (dataset, list(dataset.episodes)):  # columnar gather, and the per-episode path
        got = initial_observations(source)
        if tuple_obs:
            assert len(got) == 2
            for g, e in zip(got, expected):
                np.testing.assert_array_equal(g, e)
        else:
            np.testing.assert_array_equal(got, expected)


def test_estimate_is_the_mean_state_value_at_first_observations():
    offrl.seed(5)
    dataset = _dataset("tuple", discrete=True)
    algo = _trained_algo("tuple", True, dataset)
    fqe = DiscreteFQE(algo=algo, config=_fqe_config("tuple", True))
    _fit(fqe, dataset, steps=3)
    firsts = _naive_first_observations(dataset.episodes)
    # V(s0) = Q(s0, pi(s0)) through the public calls
    values = fqe.predict_value(firsts, algo.predict(firsts))
    np.testing.assert_allclose(fqe.predict_state_value(firsts), values, rtol=1e-5, atol=1e-5 * np.abs(values).max())
    q_all = fqe.predict_action_values(firsts)
    assert q_all.shape == (8, 2)
    np.testing.assert_allclose(q_all[np.arange(8), algo.predict(firsts)], values, rtol=1e-5, atol=1e-5 * np.abs(values).max())
    estimate = fqe.estimate_policy_value(dataset, seed=0, batch_size=3)  # 3 chunks of observations
    assert isinstance(estimate, PolicyValueEstimate)
    np.testing.assert_allclose(estimate.initial_values, values, rtol=1e-5, atol=1e-5 * np.abs(values).max())
    assert estimate.value == pytest.approx(float(values.mean()), rel=1e-5, abs=1e-5 * float(np.abs(values).max()))
    assert float(estimate) == estimate.value
    assert estimate.lower <= estimate.value <= estimate.upper
    assert (estimate.confidence, estimate.n_bootstrap) == (0.95, 1000)
    again = fqe.estimate_policy_value(list(dataset.episodes), seed=0)
    np.testing.assert_allclose([again.value, again.lower, again.upper], [estimate.value, estimate.lower, estimate.upper], rtol=1e-5)


def test_bootstrap_interval_matches_the_normal_approximation():
    from offrl.algos.fqe import bootstrap_interval

    values = np.random.default_rng(0).normal(3.0, 2.0, size=400)
    half_width = float(1.96 * values.std() / np.sqrt(values.size))
    lower, upper = bootstrap_interval(values, 0.95, 4000, seed=1)  # 1e6 // 400 = 2500 rows a chunk: 2 chunks
    assert lower == pytest.approx(values.mean() - half_width, abs=0.1 * half_width)
    assert upper == pytest.approx(values.mean() + half_width, abs=0.1 * half_width)
    narrow = bootstrap_interval(values, 0.5, 4000, seed=1)
    assert lower < narrow[0] < values.mean() < narrow[1] < upper
    assert bootstrap_interval(np.full(7, 2.5), 0.9, 50, seed=0) == (2.5, 2.5)
    assert bootstrap_interval(values, 0.95, 300, seed=4) == bootstrap_interval(values, 0.95, 300, seed=4)


def test_estimate_rejects_bad_arguments():
    dataset = _dataset("vector", discrete=False)
    fqe = FQE(algo=_trained_algo("vector", False, dataset), config=_fqe_config("vector", False))
    with pytest.raises(RuntimeError, match="no networks"):
        fqe.estimate_policy_value(dataset)
    fqe.build_with_dataset(dataset)
    with pytest.raises(ValueError, match="confidence"):
        fqe.estimate_policy_value(dataset, confidence=1.0)
    with pytest.raises(ValueError, match="n_bootstrap"):
        fqe.estimate_policy_value(dataset, n_bootstrap=0)
    with pytest.raises(ValueError, match="empty"):
        fqe.estimate_policy_value([])
    with pytest.raises(TypeError, match=r"episodes\[1\]"):
        fqe.estimate_policy_value([dataset.episodes[0], "not an episode"])
    with pytest.raises(ValueError, match="shape"):
        fqe.predict_state_value(np.zeros((2, 4), dtype=np.float32))


# ---------------------------------------------------------------- contract
KINDS = [(kind, discrete) for discrete in (False, True) for kind in ("vector", "image", "tuple")]
KIND_IDS = [f"{k}-{'discrete' if d else 'continuous'}" for k, d in KINDS]


@pytest.mark.parametrize("kind,discrete", KINDS, ids=KIND_IDS)
def test_fit_predict_shapes(kind, discrete):
    offrl.seed(0)
    dataset = _dataset(kind, discrete)
    algo = _trained_algo(kind, discrete, dataset)
    config = _fqe_config(kind, discrete)
    before = config.to_dict()
    fqe = (DiscreteFQE if discrete else FQE)(algo=algo, config=config)
    results = _fit(fqe, dataset)
    assert [epoch for epoch, _ in results] == [1, 2]
    for _, metrics in results:
        assert np.isfinite(metrics["loss"])
        assert all(isinstance(v, float) and np.isfinite(v) for v in metrics.values())
    assert fqe.grad_step == 3
    assert config.to_dict() == before, "fit must not change the user's config"
    x = _observations(dataset)
    np.testing.assert_array_equal(fqe.predict(x), algo.predict(x))
    offrl.seed(9)
    sampled = fqe.sample_action(x)
    offrl.seed(9)
    np.testing.assert_array_equal(sampled, algo.sample_action(x))
    values = fqe.predict_value(x, _actions(dataset))
    assert values.shape == (5,) and values.dtype == np.float32 and np.isfinite(values).all()
    state_values = fqe.predict_state_value(x)
    assert state_values.shape == (5,) and np.isfinite(state_values).all()


@pytest.mark.parametrize("kind,discrete", [c for c in KINDS if c[0] != "image"], ids=[i for i, c in zip(KIND_IDS, KINDS) if c[0] != "image"])
def test_save_load_gives_identical_predictions(kind, discrete, tmp_path):
    offrl.seed(1)
    dataset = _dataset(kind, discrete)
    algo = _trained_algo(kind, discrete, dataset)
    cls = DiscreteFQE if discrete else FQE
    fqe = cls(algo=algo, config=_fqe_config(kind, discrete, n_critics=2))
    _fit(fqe, dataset, steps=2)
    path = tmp_path / "fqe.d3"
    fqe.save(path)
    x, a = _observations(dataset), _actions(dataset)
    expected = fqe.predict_value(x, a)
    loaded = cls.load(path, algo=algo)
    assert type(loaded) is cls and loaded.algo is algo
    assert loaded.grad_step == fqe.grad_step == 2
    assert loaded.config.to_dict() == fqe.config.to_dict()
    np.testing.assert_array_equal(loaded.predict_value(x, a), expected)
    np.testing.assert_array_equal(loaded.predict_state_value(x), fqe.predict_state_value(x))
    fresh = cls(algo=algo, config=copy.deepcopy(fqe.config))
    fresh.load_model(path)
    np.testing.assert_array_equal(fresh.predict_value(x, a), expected)
    # training goes on from the saved optimizer state
    offrl.seed(2)
    _fit(loaded, dataset, steps=1, n_steps_per_epoch=1)
    offrl.seed(2)
    _fit(fqe, dataset, steps=1, n_steps_per_epoch=1)
    np.testing.assert_array_equal(loaded.predict_value(x, a), fqe.predict_value(x, a))
    with pytest.raises(TypeError, match="load"):
        offrl.load_learnable(path)


def test_loading_checks_the_evaluated_algorithm(tmp_path):
    dataset = _dataset("vector", discrete=True)
    dqn = _trained_algo("vector", True, dataset)
    fqe = DiscreteFQE(algo=dqn, config=_fqe_config("vector", True))
    fqe.build_with_dataset(dataset)
    path = tmp_path / "fqe.d3"
    fqe.save(path)
    table_policy = TablePolicy(np.ones((3, 2), dtype=np.float32), discrete=True)
    with pytest.raises(ValueError, match="'dqn' policy"):
        DiscreteFQE.load(path, algo=table_policy)
    with pytest.raises(ValueError, match="'dqn' policy"):
        DiscreteFQE(algo=table_policy, config=_fqe_config("vector", True)).load_model(path)
    with pytest.raises(ValueError, match="DiscreteFQE.load"):
        FQE.load(path, algo=_trained_algo("vector", False, _dataset("vector", False)))
    algo_path = tmp_path / "dqn.d3"
    dqn.save(algo_path)
    with pytest.raises(ValueError, match="not an FQE"):
        DiscreteFQE.load(algo_path, algo=dqn)


@pytest.mark.parametrize("discrete", [False, True])
def test_same_seed_same_result(discrete):
    dataset = _dataset("vector", discrete)
    algo = _trained_algo("vector", discrete, dataset)
    outputs = []
    for _ in range(2):
        offrl.seed(123)
        fqe = (DiscreteFQE if discrete else FQE)(algo=algo, config=_fqe_config("vector", discrete))
        _fit(fqe, dataset, steps=4)
        outputs.append(fqe.predict_value(_observations(dataset), _actions(dataset)))
    np.testing.assert_array_equal(outputs[0], outputs[1])


@pytest.mark.parametrize("discrete", [False, True])
def test_clone_and_params(discrete):
    dataset = _dataset("vector", discrete)
    algo = _trained_algo("vector", discrete, dataset)
    cls = DiscreteFQE if discrete else FQE
    given = _fqe_config("vector", discrete)
    fqe = cls(algo=algo, config=given)
    fqe.build_with_dataset(dataset)
    params = fqe.get_params()
    # the constructor's config (scikit-learn's contract); fqe.config names the scalers fitted by build_with_dataset
    assert params["algo"] is algo and params["config"] is given
    assert fqe.config.observation_scaler.built and not given.observation_scaler.built
    assert params["config__batch_size"] == 8
    cloned = clone(fqe)
    assert type(cloned) is cls
    assert cloned.algo is algo, "the evaluated algorithm is shared, not cloned (a clone would be untrained)"
    assert cloned.config.to_dict() == given.to_dict() and cloned.config is not given  # unfitted, as scikit-learn clones
    assert not cloned.is_built
    original = fqe.config
    fqe.set_params(batch_size=16)
    assert fqe.batch_size == 16 and original.batch_size == 8
    assert not fqe.is_built
    with pytest.raises(ValueError, match="no parameter"):
        fqe.set_params(not_a_field=1)
    other = _trained_algo("vector", discrete, dataset)
    fqe.set_params(algo=other)
    assert fqe.algo is other


def test_default_configs_and_config_create():
    dataset = _dataset("vector", discrete=True)
    dqn = _trained_algo("vector", True, dataset)
    assert type(DiscreteFQE(algo=dqn).config) is DiscreteFQEConfig
    assert type(DiscreteFQE(algo=dqn, config=FQEConfig()).config) is FQEConfig  # d3rlpy's way
    created = DiscreteFQEConfig().create(algo=dqn)
    assert type(created) is DiscreteFQE and created.algo is dqn
    with pytest.raises(NotImplementedError, match="algorithm it evaluates"):  # as d3rlpy
        DiscreteFQEConfig().create()
    iql = _trained_algo("vector", False, _dataset("vector", False))
    assert type(FQE(algo=iql).config) is FQEConfig
    with pytest.raises(TypeError, match="FQEConfig"):
        FQE(algo=iql, config=DiscreteFQEConfig())
    with pytest.raises(TypeError, match="config"):
        FQE(algo=iql, config=IQLConfig())


# ---------------------------------------------------------------- bad input
def test_wrong_action_kind_of_the_evaluated_algorithm():
    dqn = _trained_algo("vector", True, _dataset("vector", True))
    iql = _trained_algo("vector", False, _dataset("vector", False))
    with pytest.raises(ValueError, match="discrete actions: use DiscreteFQE"):
        FQE(algo=dqn)
    with pytest.raises(ValueError, match="continuous actions: use FQE"):
        DiscreteFQE(algo=iql)
    with pytest.raises(TypeError, match="algo must be"):
        FQE(algo=IQLConfig())


def test_unbuilt_evaluated_algorithm():
    dataset = _dataset("vector", discrete=False)
    fqe = FQE(algo=IQLConfig().create(), config=_fqe_config("vector", False))
    with pytest.raises(ValueError, match=r"algo \(IQL\) is not built"):
        _fit(fqe, dataset)
    with pytest.raises(ValueError, match="not built"):
        fqe.build_with_dataset(dataset)
    assert not fqe.is_built


def test_dataset_that_does_not_fit_the_evaluated_algorithm():
    dataset = _dataset("vector", discrete=False)
    iql = _trained_algo("vector", False, dataset)
    fqe = FQE(algo=iql, config=_fqe_config("vector", False))
    # 4-dim observations, algorithm built for 3
    rng = np.random.default_rng(0)
    wide = MDPDataset(rng.normal(size=(16, 4)).astype(np.float32), rng.normal(size=(16, 2)).astype(np.float32),
                      np.zeros(16, dtype=np.float32), np.eye(16, dtype=np.float32)[15])
    with pytest.raises(ValueError, match=r"shape \(4,\).*IQL.*\(3,\)"):
        _fit(fqe, wide)
    three_actions = MDPDataset(rng.normal(size=(16, 3)).astype(np.float32), rng.normal(size=(16, 3)).astype(np.float32),
                               np.zeros(16, dtype=np.float32), np.eye(16, dtype=np.float32)[15])
    with pytest.raises(ValueError, match="action_size=3.*action_size=2"):
        _fit(fqe, three_actions)
    with pytest.raises(ValueError, match="discrete actions"):
        _fit(fqe, _dataset("vector", discrete=True))
    assert not fqe.is_built
    _fit(fqe, dataset, steps=1)
    with pytest.raises(ValueError, match="shape"):
        _fit(fqe, wide)


def test_scorers_is_an_alias_of_evaluators():
    dataset = _dataset("vector", discrete=True)
    fqe = DiscreteFQE(algo=_trained_algo("vector", True, dataset), config=_fqe_config("vector", True))
    calls = []

    def init_value(algo, data) -> float:
        calls.append(algo)
        return float(algo.estimate_policy_value(data, n_bootstrap=10).value)

    results = _fit(fqe, dataset, steps=4, scorers={"init_value": init_value})
    assert calls == [fqe, fqe]  # once an epoch
    assert [np.isfinite(m["init_value"]) for _, m in results] == [True, True]
    with pytest.raises(ValueError, match="not both"):
        _fit(fqe, dataset, evaluators={"a": init_value}, scorers={"b": init_value})
