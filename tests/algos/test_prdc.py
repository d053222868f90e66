"""PRDC: the losses on a hand-built batch with the nearest dataset point
found by a plain loop, the index built by ``fit`` (scaled points, every
transition), the memory check, bad config values and a learning check."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import offrl
import offrl.models.nearest
from offrl.algos.prdc import PRDC, PRDCConfig
from offrl.dataset import MDPDataset
from offrl.logging import NoopAdapterFactory
from offrl.preprocessing import MinMaxActionScaler, StandardObservationScaler

TARGETS = ("targ_q_function", "targ_policy")


@pytest.fixture
def small_config(small_encoder):
    def make(**changes) -> PRDCConfig:
        return PRDCConfig(actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder, **changes)

    return make


def logged_dataset(n: int = 40, seed: int = 0) -> MDPDataset:
    """``n`` one-step episodes of 3-dim observations and 2-dim actions in [-1, 1]."""
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, 3)).astype(np.float32)
    actions = rng.uniform(-1, 1, size=(n, 2)).astype(np.float32)
    return MDPDataset(obs, actions, rng.normal(size=n).astype(np.float32), np.ones(n, dtype=np.float32))


def nearest_action_loop(points_obs: np.ndarray, points_act: np.ndarray, obs: np.ndarray, act: np.ndarray, beta: float) -> np.ndarray:
    """For each (obs, act), the logged action of the nearest (beta s, a) point, by a plain loop."""
    out = []
    for s, a in zip(obs.astype(np.float64), act.astype(np.float64)):
        best, best_d = None, np.inf
        for ps, pa in zip(points_obs.astype(np.float64), points_act.astype(np.float64)):
            d = sum((beta * x - beta * y) ** 2 for x, y in zip(s, ps)) + sum((x - y) ** 2 for x, y in zip(a, pa))
            if d < best_d:
                best, best_d = pa, d
        out.append(best)
    return np.array(out)


def expected_critic_loss(algo: PRDC, batch, gamma: float) -> float:
    nets = algo.modules
    obs, act = torch.from_numpy(batch.observations), torch.from_numpy(batch.actions)
    next_obs = torch.from_numpy(batch.next_observations)
    with torch.no_grad():
        next_q = nets["targ_q_function"].expected(next_obs, nets["targ_policy"](next_obs)).double().numpy()[..., 0]
        q = nets["q_function"].expected(obs, act).double().numpy()[..., 0]
    r, d, k = batch.rewards[:, 0], batch.terminals[:, 0], batch.intervals[:, 0]
    y = r + gamma**k * (1.0 - d) * next_q.min(axis=0)
    return float(sum(np.mean((q[i] - y) ** 2) for i in range(q.shape[0])))


@pytest.mark.parametrize("beta", [0.3, 2.0])
def test_losses_on_hand_built_batch(beta, hand_batch, build_algo, small_config):
    offrl.seed(0)
    cfg = small_config(gamma=0.9, alpha=1.7, beta=beta, target_smoothing_sigma=0.0)
    algo = build_algo(cfg, perturb=TARGETS)
    dataset = logged_dataset()
    algo.fit_neighbor_index(dataset)
    batch = hand_batch()
    critic_loss = expected_critic_loss(algo, batch, cfg.gamma)
    with torch.no_grad():
        policy_actions = algo.modules["policy"](torch.from_numpy(batch.observations)).numpy()
    arrays = dataset.to_arrays()
    nearest = nearest_action_loop(arrays["observations"], arrays["actions"], batch.observations, policy_actions, beta)
    assert not np.allclose(nearest, batch.actions)  # the constraint is not behaviour cloning here

    losses = algo.update(batch)

    assert set(losses) == {"critic_loss", "actor_loss", "dc_loss"}
    assert losses["critic_loss"] == pytest.approx(critic_loss, rel=1e-5, abs=1e-5)
    dc_loss = float(np.mean((policy_actions.astype(np.float64) - nearest) ** 2))
    assert losses["dc_loss"] == pytest.approx(dc_loss, rel=1e-5, abs=1e-6)
    # the policy step follows the critic step: it sees the updated first critic
    with torch.no_grad():
        q_first = algo.modules["q_function"].expected(torch.from_numpy(batch.observations), torch.from_numpy(policy_actions))[0]
    q_first = q_first.double().numpy()[:, 0]
    lam = cfg.alpha / np.mean(np.abs(q_first))
    assert losses["actor_loss"] == pytest.approx(-lam * np.mean(q_first) + dc_loss, rel=1e-5, abs=1e-5)


def test_large_beta_is_behaviour_cloning_on_the_batchs_own_states(hand_batch, build_algo, small_config):
    """With the batch itself as the dataset and a large beta the nearest
    point is the same state's, so the constraint is TD3+BC's term."""
    offrl.seed(0)
    algo = build_algo(small_config(beta=1e4, alpha=0.0))
    batch = hand_batch()
    rewards = batch.rewards[:, 0]
    algo.fit_neighbor_index(MDPDataset(batch.observations, batch.actions, rewards, np.ones(4, dtype=np.float32)))
    with torch.no_grad():
        policy_actions = algo.modules["policy"](torch.from_numpy(batch.observations)).numpy()
    losses = algo.update(batch)
    bc = float(np.mean((policy_actions - batch.actions) ** 2))
    assert losses["dc_loss"] == pytest.approx(bc, rel=1e-5)
    assert losses["actor_loss"] == pytest.approx(bc, rel=1e-5)  # alpha = 0: the constraint alone


def test_fit_indexes_every_transition_scaled(small_config):
    offrl.seed(0)
    dataset = logged_dataset(n=30)
    algo = small_config(batch_size=8, beta=0.5, observation_scaler=StandardObservationScaler(),
                        action_scaler=MinMaxActionScaler()).create()
    algo.fit(dataset, n_steps=2, n_steps_per_epoch=2, logger_adapter=NoopAdapterFactory(), show_progress=False)
    index = algo.neighbor_index
    assert index.n_points == dataset.transition_count == 30 and index.dim == 5
    arrays = dataset.to_arrays()
    scaled_obs = algo.observation_scaler.transform(torch.from_numpy(arrays["observations"]))
    scaled_act = algo.action_scaler.transform(torch.from_numpy(arrays["actions"]))
    keys = torch.cat([0.5 * scaled_obs, scaled_act], dim=1)
    # every scaled point is its own nearest neighbour: the index holds exactly these points
    np.testing.assert_array_equal(index.query(keys).numpy(), np.arange(30))


def test_neighbour_of_a_scaled_action_is_brute_forces_in_the_scaled_space(hand_batch, small_config):
    """With scalers on, the constraint's neighbour is the brute-force nearest
    (beta * scaled s, scaled a) point to (beta * scaled s, pi(scaled s)), and
    its action is returned in the policy's (scaled) units, as d3rlpy 2.8.1
    does; the env-unit space would pick other neighbours here."""
    offrl.seed(0)
    rng = np.random.default_rng(3)
    n, beta = 80, 0.7
    obs = (rng.normal(size=(n, 3)) * [1.0, 4.0, 0.3] + [0.0, 2.0, 0.0]).astype(np.float32)
    actions = rng.uniform(-2.0, 2.0, size=(n, 2)).astype(np.float32)  # env units: torques in [-2, 2]
    dataset = MDPDataset(obs, actions, rng.normal(size=n).astype(np.float32), np.ones(n, dtype=np.float32))
    bound = np.full(2, 2.0, dtype=np.float32)
    algo = small_config(batch_size=8, beta=beta, alpha=0.0, update_actor_interval=1,
                        observation_scaler=StandardObservationScaler(),
                        action_scaler=MinMaxActionScaler(minimum=-bound, maximum=bound)).create()
    algo.fit(dataset, n_steps=1, n_steps_per_epoch=1, logger_adapter=NoopAdapterFactory(), show_progress=False)
    batch = hand_batch()
    batch.observations[:] = batch.observations * [1.0, 4.0, 0.3] + [0.0, 2.0, 0.0]
    scale_obs = algo.observation_scaler.transform
    with torch.no_grad():
        scaled_batch_obs = scale_obs(torch.from_numpy(batch.observations))
        policy_actions = algo.modules["policy"](scaled_batch_obs).numpy()
        scaled_obs = scale_obs(torch.from_numpy(obs)).numpy()
    scaled_actions = actions / 2.0
    nearest = nearest_action_loop(scaled_obs, scaled_actions, scaled_batch_obs.numpy(), policy_actions, beta)
    in_env_units = nearest_action_loop(obs, actions, batch.observations, 2.0 * policy_actions, beta) / 2.0
    assert not np.allclose(nearest, in_env_units)  # the two spaces disagree on this data

    losses = algo.update(batch)

    dc_loss = float(np.mean((policy_actions.astype(np.float64) - nearest) ** 2))
    assert losses["dc_loss"] == pytest.approx(dc_loss, rel=1e-5, abs=1e-6)
    assert losses["actor_loss"] == pytest.approx(dc_loss, rel=1e-5, abs=1e-6)  # alpha = 0: the constraint alone


def test_update_without_an_index_says_how_to_build_it(hand_batch, build_algo, small_config):
    algo = build_algo(small_config())
    with pytest.raises(RuntimeError, match="fit_neighbor_index"):
        algo.update(hand_batch())


def test_too_large_dataset_is_refused_before_allocating(monkeypatch, build_algo, small_config):
    algo = build_algo(small_config())
    monkeypatch.setattr(offrl.models.nearest, "available_bytes", lambda device: 1000)
    with pytest.raises(MemoryError, match=r"over 40 transitions .* needs about .* GiB, but only .* GiB is available"):
        algo.fit_neighbor_index(logged_dataset())
    assert algo.neighbor_index is None


@pytest.mark.parametrize("field,bad", [("beta", -1.0), ("beta", float("nan")), ("alpha", -0.5),
                                       ("update_actor_interval", 0), ("target_smoothing_sigma", -0.1)])
def test_bad_config_values_name_the_field(field, bad):
    with pytest.raises(ValueError, match=rf"^{field} must be"):
        PRDCConfig(**{field: bad})


def test_defaults_are_d3rlpy_s():
    cfg = PRDCConfig()
    assert (cfg.alpha, cfg.beta, cfg.batch_size, cfg.tau, cfg.n_critics, cfg.update_actor_interval) == (2.5, 2.0, 256, 0.005, 2, 2)
    assert (cfg.target_smoothing_sigma, cfg.target_smoothing_clip, cfg.actor_learning_rate, cfg.critic_learning_rate) == (0.2, 0.5, 3e-4, 3e-4)


@pytest.mark.slow
def test_learns_the_one_step_problem(fit_one_step_problem):
    """Logged actions uniform in [-1, 1], reward -(a - 0.5)^2: the greedy
    action moves to 0.5 (every logged action is in the dataset, so the
    constraint allows it)."""
    actions = fit_one_step_problem(lambda enc: PRDCConfig(actor_encoder_factory=enc, critic_encoder_factory=enc, batch_size=64,
                                                          actor_learning_rate=1e-3, critic_learning_rate=1e-3), 0, 1500)
    assert abs(float(np.mean(actions)) - 0.5) < 0.15


def test_fit_online_rebuilds_the_index_as_the_buffer_doubles(small_config):
    from envs import ContinuousCorridor

    from offrl.dataset import create_fifo_replay_buffer

    offrl.seed(0)
    env = ContinuousCorridor(max_steps=5)
    buffer = create_fifo_replay_buffer(limit=1000, env=env)
    algo = small_config(batch_size=4).create()
    seen = []

    def record(algo, epoch, step):
        index = algo.neighbor_index
        seen.append((int(buffer.transition_count), 0 if index is None else index.n_points))

    algo.fit_online(env, buffer, n_steps=60, n_steps_per_epoch=60, logger_adapter=NoopAdapterFactory(),
                    show_progress=False, callback=record)
    assert algo.grad_step > 0
    counts = [count for count, _ in seen if count > 0]
    indexed = [n for count, n in seen if count > 0]
    # the index always covers at least half of the buffer, and is rebuilt only when it doubled
    assert all(2 * n > count or n == count for count, n in zip(counts, indexed))
    assert len(set(indexed)) <= int(np.log2(max(counts))) + 2
    assert indexed[-1] > indexed[0]
