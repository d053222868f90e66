"""BC / DiscreteBC: losses on a hand-built batch, acting, learning a known
behaviour policy, and bad hyperparameters."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import offrl
from offrl.algos.bc import BC, BCConfig, DiscreteBC, DiscreteBCConfig
from offrl.dataset import MDPDataset, TransitionMiniBatch
from offrl.logging import NoopAdapterFactory
from offrl.models import SGDFactory, VectorEncoderFactory
from offrl.preprocessing import MinMaxActionScaler

OBS = np.array([[0.1, 0.2], [0.3, -0.1], [-0.5, 0.4], [0.0, 1.0]], dtype=np.float32)


def _batch(actions: np.ndarray) -> TransitionMiniBatch:
    return TransitionMiniBatch(
        observations=OBS,
        actions=actions,
        rewards=np.array([[1.0], [0.0], [-1.0], [0.5]], dtype=np.float32),
        next_observations=OBS[::-1].copy(),
        next_actions=np.zeros_like(actions),
        terminals=np.array([[0.0], [1.0], [0.0], [0.0]], dtype=np.float32),
        intervals=np.ones((4, 1), dtype=np.float32),
    )


CONTINUOUS_ACTIONS = np.array([[0.5, -0.2], [-0.9, 0.1], [0.0, 0.7], [0.3, -1.0]], dtype=np.float32)
DISCRETE_ACTIONS = np.array([[0], [2], [1], [2]], dtype=np.int64)


def _small(config_cls, **kwargs):
    return config_cls(encoder_factory=VectorEncoderFactory(hidden_units=[8]), **kwargs).create()


def _fit(algo, dataset, n_steps):
    return algo.fit(dataset, n_steps=n_steps, n_steps_per_epoch=n_steps, logger_adapter=NoopAdapterFactory(), show_progress=False)


def _gaussian_nll(a: np.ndarray, mean: np.ndarray, logstd: np.ndarray) -> float:
    """Mean over rows of -log N(a; tanh(mean), exp(logstd)), summed over action dims."""
    mu = np.tanh(mean)
    std = np.exp(logstd)
    log_density = -0.5 * ((a - mu) / std) ** 2 - logstd - 0.5 * math.log(2 * math.pi)
    return float(-log_density.sum(axis=1).mean())


# ---------------------------------------------------------------- maths
def test_deterministic_loss_is_mse_to_logged_action():
    offrl.seed(0)
    algo = _small(BCConfig)
    algo.create_impl((2,), 2)
    with torch.no_grad():
        pred = algo.modules["policy"](torch.from_numpy(OBS)).numpy()
    expected = float(np.mean((pred - CONTINUOUS_ACTIONS) ** 2))
    assert algo.update(_batch(CONTINUOUS_ACTIONS))["loss"] == pytest.approx(expected, rel=1e-5, abs=1e-6)


def test_deterministic_loss_is_taken_in_the_scaled_action_space():
    offrl.seed(0)
    low, high = np.array([0.0, 10.0]), np.array([2.0, 20.0])
    algo = _small(BCConfig, action_scaler=MinMaxActionScaler(minimum=low, maximum=high))
    algo.create_impl((2,), 2)
    raw = (low + (CONTINUOUS_ACTIONS + 1.0) / 2.0 * (high - low)).astype(np.float32)
    with torch.no_grad():
        pred = algo.modules["policy"](torch.from_numpy(OBS)).numpy()
    expected = float(np.mean((pred - CONTINUOUS_ACTIONS) ** 2))
    assert algo.update(_batch(raw))["loss"] == pytest.approx(expected, rel=1e-5, abs=1e-6)


def test_stochastic_loss_is_gaussian_nll_around_tanh_mean():
    offrl.seed(0)
    algo = _small(BCConfig, policy_type="stochastic")
    algo.create_impl((2,), 2)
    policy = algo.modules["policy"]
    with torch.no_grad():
        policy.logstd.bias.add_(torch.tensor([-0.5, 0.3]))
        mean, logstd = (t.numpy() for t in policy(torch.from_numpy(OBS)))
    expected = _gaussian_nll(CONTINUOUS_ACTIONS, mean, logstd)
    assert algo.update(_batch(CONTINUOUS_ACTIONS))["loss"] == pytest.approx(expected, abs=1e-5)


def test_stochastic_log_std_is_clamped_to_minus_4_and_15():
    offrl.seed(0)
    algo = _small(BCConfig, policy_type="stochastic")
    algo.create_impl((2,), 2)
    policy = algo.modules["policy"]
    with torch.no_grad():
        policy.logstd.weight.zero_()
        policy.logstd.bias.copy_(torch.tensor([-10.0, 40.0]))
        mean = policy(torch.from_numpy(OBS))[0].numpy()
    expected = _gaussian_nll(CONTINUOUS_ACTIONS, mean, np.broadcast_to(np.array([-4.0, 15.0]), mean.shape))
    loss = algo.update(_batch(CONTINUOUS_ACTIONS))["loss"]
    assert loss == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("beta", [0.0, 0.5, 2.0])
def test_discrete_loss_is_cross_entropy_plus_logit_penalty(beta):
    offrl.seed(0)
    algo = _small(DiscreteBCConfig, beta=beta)
    algo.create_impl((2,), 3)
    with torch.no_grad():
        logits = algo.modules["policy"](torch.from_numpy(OBS)).numpy().astype(np.float64)
    log_softmax = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    cross_entropy = -log_softmax[np.arange(4), DISCRETE_ACTIONS[:, 0]].mean()
    expected = cross_entropy + beta * np.mean(logits**2)
    assert algo.update(_batch(DISCRETE_ACTIONS))["loss"] == pytest.approx(expected, rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("config_cls,actions", [(BCConfig, CONTINUOUS_ACTIONS), (DiscreteBCConfig, DISCRETE_ACTIONS)])
def test_repeated_updates_lower_the_loss(config_cls, actions):
    offrl.seed(0)
    algo = _small(config_cls, learning_rate=1e-2)
    algo.create_impl((2,), 3 if config_cls is DiscreteBCConfig else 2)
    losses = [algo.update(_batch(actions))["loss"] for _ in range(50)]
    assert losses[-1] < 0.75 * losses[0]
    assert algo.grad_step == 50


def test_optimizer_factory_and_learning_rate_are_used():
    offrl.seed(0)
    algo = _small(BCConfig, optim_factory=SGDFactory(), learning_rate=0.1)
    algo.create_impl((2,), 2)
    policy = algo.modules["policy"]
    before = [p.detach().clone() for p in policy.parameters()]
    loss = algo._loss(algo.preprocess_batch(_batch(CONTINUOUS_ACTIONS)))
    grads = torch.autograd.grad(loss, list(policy.parameters()))
    algo.update(_batch(CONTINUOUS_ACTIONS))
    for old, new, grad in zip(before, policy.parameters(), grads):
        torch.testing.assert_close(new.detach(), old - 0.1 * grad)


# --------------------------------------------------------------- acting
def test_predict_is_tanh_mean_and_policy_module_matches():
    offrl.seed(0)
    for policy_type in ("deterministic", "stochastic"):
        algo = _small(BCConfig, policy_type=policy_type)
        algo.create_impl((2,), 2)
        with torch.no_grad():
            out = algo.modules["policy"](torch.from_numpy(OBS))
            expected = (torch.tanh(out[0]) if policy_type == "stochastic" else out).numpy()
            exported = algo.policy_module()(torch.from_numpy(OBS)).numpy()
        np.testing.assert_allclose(algo.predict(OBS), expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(exported, expected, rtol=1e-5, atol=1e-6)
    deterministic = _small(BCConfig)
    deterministic.create_impl((2,), 2)
    np.testing.assert_array_equal(deterministic.sample_action(OBS), deterministic.predict(OBS))


def test_stochastic_sampling_follows_normal_around_tanh_mean():
    offrl.seed(0)
    algo = _small(BCConfig, policy_type="stochastic")
    algo.create_impl((2,), 2)
    policy = algo.modules["policy"]
    with torch.no_grad():
        policy.logstd.weight.zero_()
        policy.logstd.bias.fill_(math.log(0.1))
    x = np.repeat(OBS[:1], 20000, axis=0)
    samples = algo.sample_action(x)
    greedy = algo.predict(OBS[:1])[0]
    np.testing.assert_allclose(samples.mean(axis=0), greedy, atol=0.005)
    np.testing.assert_allclose(samples.std(axis=0), [0.1, 0.1], rtol=0.05)


def test_stochastic_samples_are_clipped_before_the_action_scaler():
    offrl.seed(0)
    scaler = MinMaxActionScaler(minimum=[0.0, 10.0], maximum=[1.0, 20.0])
    algo = _small(BCConfig, policy_type="stochastic", action_scaler=scaler)
    algo.create_impl((2,), 2)
    with torch.no_grad():
        algo.modules["policy"].logstd.bias.fill_(3.0)  # std ~ 20: most draws are clipped
    samples = algo.sample_action(np.repeat(OBS, 1000, axis=0))
    assert samples.dtype == np.float32
    assert (samples >= [0.0, 10.0]).all() and (samples <= [1.0, 20.0]).all()
    at_bounds = np.isclose(samples, [0.0, 10.0]) | np.isclose(samples, [1.0, 20.0])
    assert at_bounds.mean() > 0.9


def test_discrete_predict_is_argmax_and_sampling_follows_softmax():
    offrl.seed(0)
    algo = _small(DiscreteBCConfig)
    algo.create_impl((2,), 3)
    with torch.no_grad():
        logits = algo.modules["policy"](torch.from_numpy(OBS)).numpy()
    np.testing.assert_array_equal(algo.predict(OBS), logits.argmax(axis=1))
    np.testing.assert_array_equal(algo.policy_module()(torch.from_numpy(OBS)).numpy(), logits.argmax(axis=1))
    probs = np.array([0.7, 0.2, 0.1])
    fc = algo.modules["policy"].fc
    with torch.no_grad():
        fc.weight.zero_()
        fc.bias.copy_(torch.from_numpy(np.log(probs)))
    samples = algo.sample_action(np.repeat(OBS[:1], 20000, axis=0))
    assert samples.dtype == np.int64 and samples.shape == (20000,)
    np.testing.assert_allclose(np.bincount(samples, minlength=3) / 20000, probs, atol=0.015)


def test_no_value_function():
    for algo, action in ((_small(BCConfig), CONTINUOUS_ACTIONS), (_small(DiscreteBCConfig), DISCRETE_ACTIONS[:, 0])):
        algo.create_impl((2,), 3 if isinstance(algo, DiscreteBC) else 2)
        with pytest.raises(NotImplementedError):
            algo.predict_value(OBS, action)
        with pytest.raises(ValueError, match="Q-functions"):
            algo.copy_q_function_from(algo)


def test_copy_policy_between_bc_algorithms():
    offrl.seed(0)
    source, target = _small(BCConfig), _small(BCConfig, learning_rate=3e-4)
    source.create_impl((2,), 2)
    target.create_impl((2,), 2)
    source.update(_batch(CONTINUOUS_ACTIONS))
    assert not np.allclose(source.predict(OBS), target.predict(OBS))
    target.copy_policy_from(source)
    target.copy_policy_optim_from(source)
    np.testing.assert_array_equal(source.predict(OBS), target.predict(OBS))
    stochastic = _small(BCConfig, policy_type="stochastic")
    stochastic.create_impl((2,), 2)
    with pytest.raises(ValueError, match="does not fit"):
        stochastic.copy_policy_from(source)


# ------------------------------------------------------------- learning
def _episodes_terminals(n: int, length: int = 50) -> np.ndarray:
    terminals = np.zeros(n, dtype=np.float32)
    terminals[length - 1 :: length] = 1.0
    return terminals


W = np.array([[0.8, -0.5, 0.3], [-0.2, 0.6, 0.9]], dtype=np.float32)


def _linear_behaviour(noise: float, n: int = 2000, seed: int = 0):
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, 3)).astype(np.float32)
    mean = np.tanh(obs @ W.T)
    actions = (mean + noise * rng.normal(size=mean.shape)).astype(np.float32)
    return obs, actions, mean


def test_bc_recovers_a_linear_behaviour_policy():
    offrl.seed(0)
    obs, actions, _ = _linear_behaviour(noise=0.01)
    # logged in a [0, 10] x [-3, 1] actuator range; the scaler maps it to [-1, 1]
    low, high = np.array([0.0, -3.0], dtype=np.float32), np.array([10.0, 1.0], dtype=np.float32)
    logged = low + (actions + 1.0) / 2.0 * (high - low)
    dataset = MDPDataset(obs, logged, np.zeros(len(obs), dtype=np.float32), _episodes_terminals(len(obs)))
    algo = BCConfig(
        batch_size=64, encoder_factory=VectorEncoderFactory(hidden_units=[64, 64]),
        action_scaler=MinMaxActionScaler(minimum=low - 0.1, maximum=high + 0.1),
    ).create()
    results = _fit(algo, dataset, 1500)
    assert results[-1][1]["loss"] < 0.01
    test_obs, _, test_mean = _linear_behaviour(noise=0.0, n=500, seed=1)
    test_obs = test_obs.clip(-2.0, 2.0)  # stay where the data is dense
    expected = low + (np.tanh(test_obs @ W.T) + 1.0) / 2.0 * (high - low)
    error = np.abs(algo.predict(test_obs) - expected) / (high - low)
    assert error.mean() < 0.015


def test_stochastic_bc_mean_approaches_the_behaviour_mean():
    offrl.seed(0)
    obs, actions, _ = _linear_behaviour(noise=0.1)
    dataset = MDPDataset(obs, actions, np.zeros(len(obs), dtype=np.float32), _episodes_terminals(len(obs)))
    algo = BCConfig(batch_size=64, policy_type="stochastic", encoder_factory=VectorEncoderFactory(hidden_units=[64, 64])).create()
    results = _fit(algo, dataset, 1500)
    test_obs = _linear_behaviour(noise=0.0, n=500, seed=1)[0].clip(-2.0, 2.0)
    assert np.abs(algo.predict(test_obs) - np.tanh(test_obs @ W.T)).mean() < 0.05
    with torch.no_grad():
        std = torch.exp(algo.modules["policy"](torch.from_numpy(test_obs))[1]).numpy()
    assert 0.07 < np.median(std) < 0.14  # the behaviour noise is 0.1
    assert results[-1][1]["loss"] < 0.0  # the NLL of a narrow Gaussian is negative


def test_discrete_bc_recovers_a_deterministic_rule():
    offrl.seed(0)
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(2000, 2)).astype(np.float32)
    rule = lambda o: np.argmax(o @ np.array([[1.0, 0.0, -1.0], [0.0, 1.0, 0.5]], dtype=np.float32), axis=1)  # noqa: E731
    dataset = MDPDataset(obs, rule(obs), np.zeros(2000, dtype=np.float32), _episodes_terminals(2000), action_size=3)
    algo = DiscreteBCConfig(batch_size=64, encoder_factory=VectorEncoderFactory(hidden_units=[64, 64])).create()
    _fit(algo, dataset, 1000)
    test_obs = rng.normal(size=(1000, 2)).astype(np.float32)
    assert (algo.predict(test_obs) == rule(test_obs)).mean() > 0.95


# ------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    "config_cls,kwargs,match",
    [
        (BCConfig, {"policy_type": "gaussian"}, "policy_type"),
        (BCConfig, {"policy_type": None}, "policy_type"),
        (BCConfig, {"learning_rate": -1e-3}, "learning_rate"),
        (BCConfig, {"learning_rate": 0.0}, "learning_rate"),
        (BCConfig, {"learning_rate": float("nan")}, "learning_rate"),
        (BCConfig, {"batch_size": 0}, "batch_size"),
        (BCConfig, {"gamma": 1.5}, "gamma"),
        (DiscreteBCConfig, {"learning_rate": -1.0}, "learning_rate"),
        (DiscreteBCConfig, {"beta": -0.1}, "beta"),
        (DiscreteBCConfig, {"beta": float("inf")}, "beta"),
    ],
)
def test_bad_hyperparameters_raise_value_error(config_cls, kwargs, match):
    with pytest.raises(ValueError, match=match):
        config_cls(**kwargs)


def test_bad_factories_raise_type_error():
    with pytest.raises(TypeError, match="encoder_factory"):
        BCConfig(encoder_factory="vector")
    with pytest.raises(TypeError, match="optim_factory"):
        DiscreteBCConfig(optim_factory="adam")


def test_set_params_validates():
    algo = BCConfig().create()
    with pytest.raises(ValueError, match="policy_type"):
        algo.set_params(policy_type="nope")


def test_defaults_mirror_d3rlpy():
    config = BCConfig()
    assert (config.batch_size, config.gamma, config.learning_rate, config.policy_type) == (100, 0.99, 1e-3, "deterministic")
    assert config.optim_factory.get_type() == "adam" and config.encoder_factory.get_type() == "default"
    discrete = DiscreteBCConfig()
    assert (discrete.batch_size, discrete.learning_rate, discrete.beta) == (100, 1e-3, 0.5)
    assert isinstance(config.create(), BC) and isinstance(discrete.create(), DiscreteBC)


def test_wrong_action_space_is_refused():
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(20, 2)).astype(np.float32)
    discrete = MDPDataset(obs, rng.integers(0, 2, size=20), np.zeros(20, dtype=np.float32), _episodes_terminals(20, 10), action_size=2)
    with pytest.raises(ValueError, match="continuous actions"):
        BCConfig().create().build_with_dataset(discrete)
    continuous = MDPDataset(obs, rng.uniform(-1, 1, size=(20, 2)).astype(np.float32), np.zeros(20, dtype=np.float32), _episodes_terminals(20, 10))
    with pytest.raises(ValueError, match="discrete actions"):
        DiscreteBCConfig().create().build_with_dataset(continuous)
