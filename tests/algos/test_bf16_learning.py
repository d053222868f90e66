"""Learning in ``precision="bf16-mixed"``: the same small problems the
float32 learning checks use, trained with bf16 products (on a CPU without
bf16 units torch emulates them: bf16-rounded inputs, float32 accumulation,
a bf16 result, the arithmetic bf16 units do), against float32 from the same
seed. Batches of 256 rows, so the bf16 step runs (below its measured sizes
an algorithm with a written-out float32 step trains that instead)."""

from __future__ import annotations

import numpy as np
import pytest

import offrl
from offrl.algos import DQNConfig, SACConfig, TD3Config
from offrl.dataset import MDPDataset
from offrl.models.encoders import VectorEncoderFactory
from offrl.training import precision


@pytest.fixture
def bf16_units():
    """bf16 products on any CPU (emulated where the CPU has no bf16 units)."""
    precision.set_bf16_available(True)
    yield
    precision.set_bf16_available(None)


def _fit(fit_quietly, make_config, name: str, seed: int, n_steps: int, dataset, observations):
    """Greedy actions on ``observations`` after ``n_steps`` of ``fit`` in
    precision ``name``, seeded."""
    offrl.seed(seed)
    algo = make_config(precision=name).create()
    algo.build_with_dataset(dataset)
    assert algo.precision == name  # in effect: not the float32 fallback
    fit_quietly(algo, dataset, n_steps)
    return algo.predict(observations)


def _continuous(cls):
    """``precision -> config`` of ``cls`` with 64x64 encoders at batch 256."""
    encoder = VectorEncoderFactory(hidden_units=[64, 64])

    def make(precision: str):
        return cls(batch_size=256, actor_encoder_factory=encoder, critic_encoder_factory=encoder, precision=precision)
    return make


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0])
def test_td3_finds_the_best_action_in_bf16_as_in_float32(seed, bf16_units, one_step_dataset, fit_quietly):
    """Logged actions uniform in [-1, 1], reward -(a - 0.5)^2, random
    observations: the greedy action goes to 0.5 in both precisions, and the
    two policies agree to within the problem's tolerance."""
    dataset, _ = one_step_dataset(n=1000, seed=seed, constant=False)
    x = np.random.default_rng(seed + 100).normal(size=(100, 3)).astype(np.float32)
    got = {p: _fit(fit_quietly, _continuous(TD3Config), p, seed, 3000, dataset, x)[:, 0] for p in ("float32", "bf16-mixed")}
    for p, prediction in got.items():
        assert abs(prediction.mean() - 0.5) < 0.1, (p, prediction.mean())
        assert np.median(np.abs(prediction - 0.5)) < 0.1, (p, prediction)
    assert np.median(np.abs(got["bf16-mixed"] - got["float32"])) < 0.1


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_sac_finds_the_best_action_in_bf16_as_in_float32(seed, bf16_units, one_step_dataset, fit_quietly):
    dataset, _ = one_step_dataset(n=1000, seed=seed, constant=False)
    x = np.random.default_rng(seed + 100).normal(size=(100, 3)).astype(np.float32)
    got = {p: _fit(fit_quietly, _continuous(SACConfig), p, seed, 2000, dataset, x)[:, 0] for p in ("float32", "bf16-mixed")}
    for p, prediction in got.items():
        assert np.quantile(np.abs(prediction - 0.5), 0.9) < 0.25, (p, prediction)
    assert np.median(np.abs(got["bf16-mixed"] - got["float32"])) < 0.1


def _contextual_bandit(n: int = 2000, seed: int = 0):
    """One-step episodes: observation x ~ N(0, I_4), three actions logged
    uniformly; reward 1 for the action ``argmax(x[0], x[1], 0)``, else 0.
    Returns the dataset, its observations and each one's best action."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    best = np.argmax(np.stack([x[:, 0], x[:, 1], np.zeros(n)], axis=1), axis=1)
    actions = rng.integers(3, size=n)
    rewards = (actions == best).astype(np.float32)
    return MDPDataset(x, actions, rewards, np.ones(n, dtype=np.float32)), x, best


@pytest.mark.parametrize("seed", [0])
def test_dqn_learns_a_contextual_bandit_in_bf16_as_in_float32(seed, bf16_units, fit_quietly):
    """The greedy action is the rewarded one on nine states in ten, in both
    precisions, and the two Q-functions agree."""
    dataset, _, _ = _contextual_bandit(seed=seed)
    _, x, best = _contextual_bandit(n=500, seed=seed + 100)
    encoder = VectorEncoderFactory(hidden_units=[64, 64])
    q = {}
    for p in ("float32", "bf16-mixed"):
        offrl.seed(seed)
        algo = DQNConfig(batch_size=256, encoder_factory=encoder, learning_rate=1e-3, precision=p).create()
        algo.build_with_dataset(dataset)
        assert algo.precision == p
        fit_quietly(algo, dataset, 1500)
        assert (algo.predict(x) == best).mean() > 0.9, p
        q[p] = np.stack([algo.predict_value(x, np.full(len(x), a)) for a in range(3)], axis=1)
    assert np.abs(q["bf16-mixed"] - q["float32"]).mean() < 0.1
