"""Explorers: epsilon schedules, Boltzmann probabilities and sampling,
normal and Ornstein-Uhlenbeck noise against their formulas, bounds, the
explorer protocol, and bad arguments."""

from __future__ import annotations

import numpy as np
import pytest
from envs import ContinuousCorridor, Corridor
from hypothesis import given, settings
from hypothesis import strategies as st

import offrl
from offrl.algos import (
    AdditiveOU,
    Boltzmann,
    ConstantEpsilonGreedy,
    DQNConfig,
    ExplorerProtocol,
    LinearDecayEpsilonGreedy,
    NormalNoise,
    SACConfig,
)
from offrl.training.explorers import action_values, check_explorer, inverse_cdf
from offrl.constants import ActionSpace
from offrl.logging import NoopAdapterFactory
from offrl.models import VectorEncoderFactory
from offrl.preprocessing import MinMaxActionScaler


class StubAlgo:
    """Acts greedily with ``greedy`` (an index, or a continuous action);
    ``Q(x, a) = q_table[int(x[0]), a]``."""

    def __init__(self, action_size=3, greedy=0, q_table=None, action_scaler=None):
        self.action_size = action_size
        self.greedy = greedy
        self.q_table = q_table
        self.action_scaler = action_scaler
        self.predict_calls = 0

    def predict(self, x):
        self.predict_calls += 1
        x0 = x[0] if isinstance(x, list) else x
        batch = x0.shape[0]
        if np.ndim(self.greedy) == 0:
            return np.full(batch, self.greedy, dtype=np.int64)
        return np.tile(np.asarray(self.greedy, dtype=np.float32), (batch, 1))

    def predict_value(self, x, action):
        x0 = x[0] if isinstance(x, list) else x
        return self.q_table[x0[:, 0].astype(int), np.asarray(action)]


def frequencies(actions, n):
    return np.bincount(actions, minlength=n) / len(actions)


N = 40000
TOL = 0.012  # > 4 binomial standard deviations at N draws


# ------------------------------------------------------------ epsilon-greedy
def test_epsilon_zero_is_greedy_and_one_never_predicts():
    offrl.seed(0)
    x = np.zeros((N, 4), dtype=np.float32)
    algo = StubAlgo(action_size=3, greedy=2)
    np.testing.assert_array_equal(ConstantEpsilonGreedy(0.0).sample(algo, x, 1), np.full(N, 2))
    algo = StubAlgo(action_size=3, greedy=2)
    actions = ConstantEpsilonGreedy(1.0).sample(algo, x, 1)
    assert algo.predict_calls == 0
    np.testing.assert_allclose(frequencies(actions, 3), [1 / 3] * 3, atol=TOL)


def test_epsilon_greedy_frequencies():
    # P(greedy) = 1 - eps + eps / A, P(other) = eps / A
    offrl.seed(1)
    actions = ConstantEpsilonGreedy(0.3).sample(StubAlgo(action_size=3, greedy=2), np.zeros((N, 4), np.float32), 1)
    np.testing.assert_allclose(frequencies(actions, 3), [0.1, 0.1, 0.8], atol=TOL)


def test_linear_decay_schedule():
    explorer = LinearDecayEpsilonGreedy(start_epsilon=1.0, end_epsilon=0.1, duration=100)
    assert explorer.compute_epsilon(0) == 1.0
    assert explorer.compute_epsilon(25) == pytest.approx(0.775)
    assert explorer.compute_epsilon(50) == pytest.approx(0.55)
    assert explorer.compute_epsilon(100) == pytest.approx(0.1)
    assert explorer.compute_epsilon(10**6) == pytest.approx(0.1)
    # increasing schedules work the same way
    assert LinearDecayEpsilonGreedy(0.0, 0.5, 10).compute_epsilon(4) == pytest.approx(0.2)


def test_linear_decay_samples_with_the_epsilon_of_the_step():
    offrl.seed(2)
    explorer = LinearDecayEpsilonGreedy(1.0, 0.1, 100)
    x = np.zeros((N, 4), np.float32)
    at_50 = explorer.sample(StubAlgo(action_size=2, greedy=1), x, 50)  # eps 0.55: P(0) = 0.275
    at_end = explorer.sample(StubAlgo(action_size=2, greedy=1), x, 500)  # eps 0.1: P(0) = 0.05
    assert frequencies(at_50, 2)[0] == pytest.approx(0.275, abs=TOL)
    assert frequencies(at_end, 2)[0] == pytest.approx(0.05, abs=TOL)


# ---------------------------------------------------------------- Boltzmann
def test_boltzmann_probabilities_by_hand():
    q = np.array([[1.0, 2.0, 3.0]])
    e = np.exp([1.0, 2.0, 3.0])
    np.testing.assert_allclose(Boltzmann(1.0).probabilities(q)[0], e / e.sum())
    e2 = np.exp([2.0, 4.0, 6.0])
    np.testing.assert_allclose(Boltzmann(0.5).probabilities(q)[0], e2 / e2.sum())
    np.testing.assert_allclose(Boltzmann(1e6).probabilities(q)[0], [1 / 3] * 3, atol=1e-6)
    # huge values do not overflow
    np.testing.assert_allclose(Boltzmann(1.0).probabilities(np.array([[1000.0, 1000.0]]))[0], [0.5, 0.5])


def test_action_values_for_vector_and_tuple_observations():
    table = np.array([[0.0, 1.0, 2.0], [10.0, 11.0, 12.0]])
    algo = StubAlgo(action_size=3, q_table=table)
    x = np.array([[1.0, 5.0], [0.0, 5.0]], dtype=np.float32)
    np.testing.assert_array_equal(action_values(algo, x), table[[1, 0]])
    np.testing.assert_array_equal(action_values(algo, [x, np.zeros((2, 1, 2, 2))]), table[[1, 0]])


def test_boltzmann_sampling_frequencies_per_row():
    offrl.seed(3)
    table = np.array([[0.0, 1.0, 2.0], [2.0, 0.0, 0.0]])
    rows = np.repeat([0, 1], N // 2)
    x = np.stack([rows, np.zeros_like(rows)], axis=1).astype(np.float32)
    actions = Boltzmann(1.0).sample(StubAlgo(action_size=3, q_table=table), x, 1)
    for row in (0, 1):
        want = np.exp(table[row]) / np.exp(table[row]).sum()
        np.testing.assert_allclose(frequencies(actions[rows == row], 3), want, atol=1.5 * TOL)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 8), st.integers(0, 2**31 - 1))
def test_inverse_cdf_matches_a_loop(n_actions, batch, seed):
    rng = np.random.default_rng(seed)
    probs = rng.dirichlet(np.ones(n_actions), size=batch)
    u = rng.random(batch)
    u[: batch // 2] = np.cumsum(probs, axis=1)[: batch // 2, 0]  # values exactly on a boundary
    expected = []
    for p, ui in zip(probs, u):
        total, pick = 0.0, n_actions - 1
        for k in range(n_actions):
            total += p[k]
            if total > ui:
                pick = k
                break
        expected.append(pick)
    np.testing.assert_array_equal(inverse_cdf(probs, u), expected)


# ------------------------------------------------------------ normal noise
def test_normal_noise_moments_and_clipping():
    offrl.seed(4)
    x = np.zeros((N, 1), np.float32)
    wide = NormalNoise(mean=0.5, std=2.0, low=-100.0, high=100.0)
    noise = wide.sample(StubAlgo(greedy=[0.0, 0.0]), x, 1) - 0.0
    assert noise.shape == (N, 2) and noise.dtype == np.float32
    assert noise.mean() == pytest.approx(0.5, abs=0.05)
    assert noise.std() == pytest.approx(2.0, rel=0.02)
    clipped = NormalNoise(std=1.0).sample(StubAlgo(greedy=[0.95]), x, 1)
    assert clipped.min() == -1.0 and clipped.max() == 1.0  # d3rlpy's default range [-1, 1]
    assert (clipped == 1.0).mean() == pytest.approx(0.48, abs=0.02)  # P(N(0.95, 1) > 1)


def test_noise_is_clipped_to_a_min_max_action_scaler_range():
    offrl.seed(5)
    scaler = MinMaxActionScaler(minimum=[-2.0, 0.0], maximum=[3.0, 0.5])
    actions = NormalNoise(std=5.0).sample(StubAlgo(greedy=[0.0, 0.0], action_scaler=scaler), np.zeros((N, 1)), 1)
    np.testing.assert_array_equal(actions.min(axis=0), [-2.0, 0.0])
    np.testing.assert_array_equal(actions.max(axis=0), [3.0, 0.5])


# ------------------------------------------------------- Ornstein-Uhlenbeck
def test_ou_noise_follows_the_recursion():
    offrl.seed(6)
    explorer = AdditiveOU(mu=0.2, theta=0.3, sigma=0.5, low=-100.0, high=100.0)
    algo = StubAlgo(greedy=[1.0, -1.0])
    x = np.zeros((1, 3), np.float32)
    noises = [explorer.sample(algo, x, t) - np.array([1.0, -1.0]) for t in range(1, 30)]
    rng = np.random.default_rng(6)  # what offrl.seed(6) gives offrl's generator
    z = rng.normal(0.2, 0.5 / np.sqrt(2 * 0.3 - 0.3**2), size=(1, 2))
    expected = [z]
    for _ in range(28):
        z = z + 0.3 * (0.2 - z) + 0.5 * rng.standard_normal((1, 2))
        expected.append(z)
    np.testing.assert_allclose(np.concatenate(noises), np.concatenate(expected), rtol=1e-5, atol=1e-5)


def test_ou_variance_approaches_the_stationary_value():
    # from z_0 = mu: Var z_t = sigma^2 (1 - (1 - theta)^(2t)) / (2 theta - theta^2)
    offrl.seed(7)
    theta, sigma = 0.15, 0.3
    explorer = AdditiveOU(mu=0.0, theta=theta, sigma=sigma, start_with_mu=True, low=-100.0, high=100.0)
    algo = StubAlgo(greedy=[0.0])
    x = np.zeros((N, 1), np.float32)
    first = explorer.sample(algo, x, 1)
    np.testing.assert_array_equal(first, 0.0)
    for t in range(1, 11):
        noise = explorer.sample(algo, x, t + 1)
    want = sigma**2 * (1 - (1 - theta) ** 20) / (2 * theta - theta**2)
    assert noise.var() == pytest.approx(want, rel=0.04)
    assert explorer.stationary_std == pytest.approx(sigma / np.sqrt(2 * theta - theta**2))


def test_ou_reset_restarts_the_process():
    offrl.seed(8)
    explorer = AdditiveOU(mu=0.7, start_with_mu=True, low=-100.0, high=100.0)
    algo = StubAlgo(greedy=[0.0])
    x = np.zeros((1, 1), np.float32)
    explorer.sample(algo, x, 1)
    assert explorer.sample(algo, x, 2)[0, 0] != pytest.approx(0.7)
    explorer.reset()
    assert explorer.sample(algo, x, 3)[0, 0] == pytest.approx(0.7)


# ---------------------------------------------- with algorithms, in a loop
def test_boltzmann_and_ou_drive_collect():
    offrl.seed(9)
    dqn = DQNConfig(encoder_factory=VectorEncoderFactory(hidden_units=[8])).create()
    buffer = dqn.collect(Corridor(), explorer=Boltzmann(0.5), n_steps=50, show_progress=False)
    assert buffer.transition_count == 50
    assert set(np.unique(buffer.to_arrays()["actions"])) <= {0, 1}
    enc = VectorEncoderFactory(hidden_units=[8])
    sac = SACConfig(actor_encoder_factory=enc, critic_encoder_factory=enc).create()
    explorer = AdditiveOU(sigma=2.0)
    buffer = sac.collect(ContinuousCorridor(max_steps=5), explorer=explorer, n_steps=20, show_progress=False)
    actions = buffer.to_arrays()["actions"]
    assert actions.min() == -1.0 and actions.max() == 1.0  # wide noise, clipped to the range


def test_user_explorer_protocol():
    class Always1:
        def sample(self, algo, x, step):
            return np.ones(np.asarray(x).shape[0], dtype=np.int64)

    assert isinstance(Always1(), ExplorerProtocol)
    dqn = DQNConfig(batch_size=4, encoder_factory=VectorEncoderFactory(hidden_units=[8])).create()
    buffer = dqn.collect(Corridor(length=3, max_steps=10), explorer=Always1(), n_steps=6, show_progress=False)
    np.testing.assert_array_equal(buffer.to_arrays()["actions"][:, 0], 1)
    dqn.fit_online(Corridor(length=3), explorer=Always1(), n_steps=10, logger_adapter=NoopAdapterFactory(),
                   show_progress=False)


# ------------------------------------------------------------ bad arguments
@pytest.mark.parametrize(
    "make,error,match",
    [
        (lambda: ConstantEpsilonGreedy(1.5), ValueError, r"epsilon must be a number in \[0, 1\], got 1.5"),
        (lambda: ConstantEpsilonGreedy("0.1"), ValueError, "epsilon must be a number"),
        (lambda: LinearDecayEpsilonGreedy(1.0, -0.1, 10), ValueError, "end_epsilon must be a number"),
        (lambda: LinearDecayEpsilonGreedy(1.0, 0.1, 0), ValueError, "duration must be a positive int, got 0"),
        (lambda: Boltzmann(0.0), ValueError, "temperature must be a finite number > 0, got 0.0"),
        (lambda: NormalNoise(std=-1.0), ValueError, "std must be a finite number >= 0"),
        (lambda: NormalNoise(low=1.0, high=0.0), ValueError, "low must be <= high"),
        (lambda: NormalNoise(low=float("nan")), ValueError, "low must be finite"),
        (lambda: AdditiveOU(theta=0.0), ValueError, "theta must be a finite number > 0"),
        (lambda: AdditiveOU(theta=2.0), ValueError, r"theta must be in \(0, 2\)"),
        (lambda: AdditiveOU(sigma=float("inf")), ValueError, "sigma must be a finite number >= 0"),
    ],
)
def test_bad_arguments(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_check_explorer():
    check_explorer(None, ActionSpace.DISCRETE)
    check_explorer(ConstantEpsilonGreedy(0.1), ActionSpace.DISCRETE)
    check_explorer(AdditiveOU(), ActionSpace.CONTINUOUS)
    with pytest.raises(ValueError, match="Boltzmann explores discrete actions, but SAC acts in a continuous action space here"):
        check_explorer(Boltzmann(), ActionSpace.CONTINUOUS, "SAC")
    with pytest.raises(ValueError, match="AdditiveOU explores continuous actions.*use ConstantEpsilonGreedy"):
        check_explorer(AdditiveOU(), ActionSpace.DISCRETE)
    with pytest.raises(TypeError, match="explorer must have a sample"):
        check_explorer(lambda algo, x, step: x, ActionSpace.DISCRETE)


def test_noise_is_clipped_to_the_environments_bounds_in_collect():
    """Pendulum's torques lie in [-2, 2]: d3rlpy's [-1, 1] default would
    silently halve the range; collect binds the explorer to the env."""
    import gymnasium as gym

    from offrl.training.explorers import NormalNoise
    from offrl.datasets.builtin import PendulumController

    env = gym.make("Pendulum-v1")
    algo = PendulumController()
    algo.build_with_env(env)
    actions = algo.collect(env, explorer=NormalNoise(std=3.0), n_steps=400, show_progress=False).to_arrays()["actions"]
    assert actions.min() == pytest.approx(-2.0) and actions.max() == pytest.approx(2.0)
    assert (np.abs(actions) > 1.5).mean() > 0.2
    # explicit bounds still win
    actions = algo.collect(env, explorer=NormalNoise(std=3.0, low=-0.5, high=0.5), n_steps=200,
                           show_progress=False).to_arrays()["actions"]
    assert actions.min() == pytest.approx(-0.5) and actions.max() == pytest.approx(0.5)
    # without an environment, the explorer keeps d3rlpy's default
    x = np.zeros((1000, 3), dtype=np.float32)
    sampled = NormalNoise(std=3.0).sample(algo, x, 0)
    assert sampled.min() == pytest.approx(-1.0) and sampled.max() == pytest.approx(1.0)
