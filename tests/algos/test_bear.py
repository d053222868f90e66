"""BEAR: one update's losses (VAE, critics, actor with the MMD constraint,
temperature, Lagrange multiplier) reproduced with plain loops from the same
weights and random draws, the warm-up, the multiplier's bounds, the fixed
candidate table behind ``predict``, config validation and (slow) learning
on the one-step problem."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

import offrl
from offrl.algos.bear import BEARConfig

LATENT = 4  # 2 * action_size


@pytest.fixture
def bear_config(small_encoder):
    def make(**changes) -> BEARConfig:
        return BEARConfig(
            actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder,
            imitator_encoder_factory=small_encoder, **changes,
        )

    return make


def f64(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().astype(np.float64)


def kernel(u, v, name: str, sigma: float) -> float:
    if name == "gaussian":
        return math.exp(-sum((a - b) ** 2 for a, b in zip(u, v)) / (2 * sigma))
    return math.exp(-sum(abs(a - b) for a, b in zip(u, v)) / (2 * sigma))


def naive_mmd(xs, ys, name: str, sigma: float) -> float:
    xx = sum(kernel(a, b, name, sigma) for a in xs for b in xs) / len(xs) ** 2
    yy = sum(kernel(a, b, name, sigma) for a in ys for b in ys) / len(ys) ** 2
    xy = sum(kernel(a, b, name, sigma) for a in xs for b in ys) / (len(xs) * len(ys))
    return math.sqrt(xx + yy - 2 * xy + 1e-6)


def squashed_log_density(u: np.ndarray, mean: np.ndarray, logstd: np.ndarray) -> float:
    """log N(u; mean, exp(logstd)) - log(1 - tanh(u)^2), summed over dimensions."""
    total = 0.0
    for ui, mi, si in zip(u, mean, logstd):
        total += -0.5 * ((ui - mi) / math.exp(si)) ** 2 - si - 0.5 * math.log(2 * math.pi)
        total -= math.log(1.0 - math.tanh(ui) ** 2)
    return total


@pytest.mark.parametrize("kernel_name", ["laplacian", "gaussian"])
def test_bear_losses_on_hand_built_batch(kernel_name, hand_batch, build_algo, bear_config):
    offrl.seed(0)
    n, p, lam, gamma, thr, sigma = 3, 2, 0.6, 0.9, 0.05, 0.5
    temp0, alpha0, kl_weight = 0.7, 1.3, 0.4
    cfg = bear_config(
        n_target_samples=n, n_mmd_action_samples=p, lam=lam, gamma=gamma, alpha_threshold=thr, mmd_sigma=sigma,
        mmd_kernel=kernel_name, initial_temperature=temp0, initial_alpha=alpha0, vae_kl_weight=kl_weight, warmup_steps=0,
    )
    algo = build_algo(cfg, perturb=("targ_q_function",))
    nets = algo.modules
    batch = hand_batch()
    obs, act = torch.from_numpy(batch.observations), torch.from_numpy(batch.actions)
    nxt = torch.from_numpy(batch.next_observations)
    vae_before, q_before, targ, policy = (copy.deepcopy(nets[k]) for k in ("vae", "q_function", "targ_q_function", "policy"))
    torch.manual_seed(11)
    eps, target_noise, mmd_latents, mmd_noise, actor_noise = (
        torch.randn(*s) for s in [(4, LATENT), (n, 4, 2), (4 * p, LATENT), (4, p, 2), (4, 2)]
    )
    target_noise = target_noise.transpose(0, 1)  # the n target samples are drawn sample-major, as d3rlpy's sample_n

    torch.manual_seed(11)
    losses = algo.update(batch)
    assert set(losses) == {"imitator_loss", "critic_loss", "actor_loss", "temp_loss", "temp", "alpha_loss", "alpha", "mmd"}

    with torch.no_grad():
        mean, logstd = vae_before.encode(obs, act)
        recon = f64(vae_before.decode(obs, mean + eps * logstd.exp()))
    m, s = f64(mean), f64(logstd)
    kl = np.mean(0.5 * (m**2 + np.exp(2 * s) - 1.0) - s)
    assert losses["imitator_loss"] == pytest.approx(np.mean((recon - batch.actions) ** 2) + kl_weight * kl, rel=1e-5)

    # critics: n policy samples at s', the lam-mixed ensemble value of the best, minus temp * its log-density
    with torch.no_grad():
        next_mean, next_logstd = (f64(t) for t in policy(nxt))
        y = np.zeros(4)
        for b in range(4):
            scored = []
            for j in range(n):
                u = next_mean[b] + np.exp(next_logstd[b]) * f64(target_noise[b, j])
                a = torch.tensor(np.tanh(u), dtype=torch.float32)[None]
                values = f64(targ.expected(nxt[b : b + 1], a))[:, 0, 0]
                mixed = lam * values.min() + (1 - lam) * values.max()
                scored.append((mixed, mixed - temp0 * squashed_log_density(u, next_mean[b], next_logstd[b])))
            best = max(range(n), key=lambda j: scored[j][0])
            y[b] = batch.rewards[b, 0] + gamma ** batch.intervals[b, 0] * (1 - batch.terminals[b, 0]) * scored[best][1]
        pred = f64(q_before.expected(obs, act))[:, :, 0]
    assert losses["critic_loss"] == pytest.approx(sum(np.mean((pred[i] - y) ** 2) for i in range(2)), rel=1e-5, abs=1e-6)

    # MMD between the policy's and the (updated) VAE's samples before the tanh
    with torch.no_grad():
        mean_s, logstd_s = (f64(t) for t in policy(obs))
        behaviour = f64(nets["vae"].decode_raw(obs.repeat_interleave(p, dim=0), mmd_latents.clamp(-0.5, 0.5))).reshape(4, p, 2)
    distances = []
    for b in range(4):
        policy_raw = [mean_s[b] + np.exp(logstd_s[b]) * f64(mmd_noise[b, j]) for j in range(p)]
        distances.append(naive_mmd(policy_raw, list(behaviour[b]), kernel_name, sigma))
    distances = np.array(distances)
    assert losses["mmd"] == pytest.approx(distances.mean(), rel=1e-5)
    constraint = np.mean(alpha0 * (distances - thr))

    # temperature first (SAC's, d3rlpy's maths: -temp (log pi - H)), then the actor: SAC's loss against
    # the updated critics with the updated temperature, plus the constraint; alpha's loss
    q_mins, log_probs = [], []
    with torch.no_grad():
        for b in range(4):
            u = mean_s[b] + np.exp(logstd_s[b]) * f64(actor_noise[b])
            log_probs.append(squashed_log_density(u, mean_s[b], logstd_s[b]))
            q_mins.append(f64(nets["q_function"].expected(obs[b : b + 1], torch.tensor(np.tanh(u), dtype=torch.float32)[None]))[:, 0, 0].min())
    gap = np.mean(np.array(log_probs) - 2)
    temp1 = temp0 * math.exp(cfg.temp_learning_rate * np.sign(gap))  # Adam's first step: lr against the gradient's sign
    sac = [temp1 * lp - qm for lp, qm in zip(log_probs, q_mins)]
    assert losses["actor_loss"] == pytest.approx(np.mean(sac) + constraint, rel=1e-4, abs=1e-5)
    assert losses["temp_loss"] == pytest.approx(-temp0 * gap, rel=1e-4, abs=1e-6)
    assert losses["alpha_loss"] == pytest.approx(-constraint, rel=1e-5, abs=1e-7)
    assert losses["temp"] == pytest.approx(temp1, rel=1e-5) and losses["alpha"] == pytest.approx(alpha0)
    # alpha rises when the MMD is above the threshold
    assert (nets["log_alpha"]().item() > alpha0) == (distances.mean() > thr)


def test_warmup_minimises_only_the_mmd(hand_batch, build_algo, bear_config):
    offrl.seed(0)
    algo = build_algo(bear_config(warmup_steps=2, n_mmd_action_samples=3, n_target_samples=2))
    nets = algo.modules
    for step in range(3):
        temp, alpha = nets["log_temp"]().item(), nets["log_alpha"]().item()
        losses = algo.update(hand_batch())
        warm = step < 2
        if warm:
            # the actor's loss is alpha (MMD - threshold) alone
            assert losses["actor_loss"] == pytest.approx(alpha * (losses["mmd"] - 0.05), rel=1e-5)
            assert losses["temp_loss"] == 0.0 and losses["alpha_loss"] == 0.0
        assert (nets["log_temp"]().item() == temp) == warm
        assert (nets["log_alpha"]().item() == alpha) == warm


def test_constraint_gradient_reaches_the_policy_after_warmup(hand_batch, build_algo, bear_config):
    """After the warm-up the policy's step includes alpha * d MMD / d theta
    (d3rlpy 2.8.1's alpha step cancels it: see docs/COMPATIBILITY.md). Two
    copies draw the same noise; one sees the MMD without its gradient."""
    offrl.seed(0)
    algo = build_algo(bear_config(warmup_steps=0, n_mmd_action_samples=3, n_target_samples=2))
    no_gradient = copy.deepcopy(algo)
    mmd_of = type(algo)._mmd
    no_gradient._mmd = lambda x: mmd_of(no_gradient, x).detach()
    before = [p.detach().clone() for p in algo.modules["policy"].parameters()]
    for model in (algo, no_gradient):  # Adam's first step is the gradient's sign: take three
        torch.manual_seed(1)
        for _ in range(3):
            model.update(hand_batch())
    moved = [p.detach() for p in algo.modules["policy"].parameters()]
    unconstrained = [p.detach() for p in no_gradient.modules["policy"].parameters()]
    assert any(not torch.equal(a, b) for a, b in zip(moved, before))
    assert any(not torch.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(moved, unconstrained))
    # everything the constraint's gradient does not touch took the same step
    for name in ("q_function", "vae"):
        for a, b in zip(algo.modules[name].parameters(), no_gradient.modules[name].parameters()):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("threshold,bound", [(0.0, 10.0), (100.0, -5.0)])
def test_log_alpha_stays_in_its_bounds(threshold, bound, hand_batch, build_algo, bear_config):
    offrl.seed(0)
    algo = build_algo(bear_config(warmup_steps=0, alpha_learning_rate=50.0, alpha_threshold=threshold, n_target_samples=2, mmd_sigma=0.01))
    for _ in range(4):
        algo.update(hand_batch())
    assert algo.modules["log_alpha"].log_value.item() == pytest.approx(bound)


def test_fixed_learning_rates_of_zero_keep_temperature_and_alpha(hand_batch, build_algo, bear_config):
    algo = build_algo(bear_config(warmup_steps=0, temp_learning_rate=0.0, alpha_learning_rate=0.0, n_target_samples=2))
    assert "temp_optim" not in algo.optimizers and "alpha_optim" not in algo.optimizers
    losses = algo.update(hand_batch())
    assert losses["temp"] == 1.0 and losses["alpha"] == 1.0
    assert algo.modules["log_temp"]().item() == 1.0 and algo.modules["log_alpha"]().item() == 1.0


def test_bear_predict_is_the_best_fixed_candidate(build_algo, bear_config):
    offrl.seed(0)
    algo = build_algo(bear_config(n_action_samples=6))
    nets = algo.modules
    table = nets["candidate_noise"].values
    assert table.shape == (6, 2)
    x = np.random.default_rng(2).normal(size=(5, 3)).astype(np.float32)
    got = algo.predict(x)
    expected = []
    with torch.no_grad():
        for row in torch.from_numpy(x):
            s = row[None]
            mean, logstd = nets["policy"](s)
            candidates = [torch.tanh(mean[0] + logstd[0].exp() * e) for e in table]
            scores = [nets["q_function"].expected(s, c[None])[0, 0, 0].item() for c in candidates]
            expected.append(candidates[int(np.argmax(scores))].numpy())
    np.testing.assert_allclose(got, np.array(expected), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(algo.predict(x), got)
    sampled = algo.sample_action(x)
    assert sampled.shape == (5, 2) and np.abs(sampled).max() <= 1.0
    assert not np.array_equal(sampled, algo.sample_action(x))
    assert not algo.has_stochastic_policy


@pytest.mark.parametrize(
    "field,value",
    [("mmd_kernel", "cosine"), ("mmd_sigma", 0.0), ("n_mmd_action_samples", 0), ("n_target_samples", 0),
     ("n_action_samples", 0), ("lam", 2.0), ("alpha_threshold", -1.0), ("warmup_steps", -1),
     ("vae_kl_weight", -1.0), ("initial_alpha", 0.0), ("initial_alpha", 1e6), ("temp_learning_rate", -1.0)],
)
def test_bear_refuses_bad_config(field, value):
    with pytest.raises(ValueError, match=field):
        BEARConfig(**{field: value})


def test_bear_refuses_discrete_data(dataset_factory, fit_quietly):
    with pytest.raises(ValueError, match="actions"):
        fit_quietly(BEARConfig(batch_size=4).create(), dataset_factory("vector", True), 1)


@pytest.mark.slow
def test_bear_learns_the_one_step_problem(fit_one_step_problem):
    """Logged actions uniform in [-1, 1], reward -(a - 0.5)^2: the best
    action is inside the data's support, so BEAR moves onto it."""
    actions = fit_one_step_problem(lambda enc: BEARConfig(
        actor_encoder_factory=enc, critic_encoder_factory=enc, imitator_encoder_factory=enc,
        n_action_samples=20, batch_size=64, warmup_steps=200, actor_learning_rate=1e-3, critic_learning_rate=1e-3,
    ), seed=0, n_steps=1000)
    assert abs(float(np.median(actions)) - 0.5) < 0.15


def test_bear_written_out_critic_step_follows_the_autograd_step(monkeypatch):
    """BEAR's critics step with their backward written out where they are
    plain ReLU MLPs on the CPU (SAC's critic step, tests/algos/test_sac.py):
    the same losses, weights and optimizer state as autograd's step."""
    from test_plain_step import assert_same_weights_and_moments, continuous_batch, counting_backward, make_actor_critic, run_seeded

    from offrl.models import VectorEncoderFactory, plain_mlp

    calls = counting_backward(monkeypatch)
    plain = make_actor_critic("BEAR", imitator_encoder_factory=VectorEncoderFactory([16]), n_target_samples=3,
                              n_action_samples=3, warmup_steps=2)
    assert not plain._written_out_step_available()  # its actor and imitator steps are autograd's
    autograd = copy.deepcopy(plain)
    rng = np.random.default_rng(5)
    try:
        pairs = run_seeded(plain, autograd, [continuous_batch(rng, 16, 5, 2) for _ in range(5)])
    finally:
        plain_mlp.plain_backward_enabled(True)
    for step, (a, b) in enumerate(pairs):
        for k in a:
            assert float(a[k]) == pytest.approx(float(b[k]), rel=1e-5, abs=1e-6), (step, k)
    assert calls["n"] == 5  # the critics' step, each update
    assert_same_weights_and_moments(plain, autograd)
