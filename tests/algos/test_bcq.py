"""BCQ and DiscreteBCQ: one update's losses reproduced by hand from the same
weights and random draws, the soft-clipped target and the candidate choice
against plain loops, the fixed candidate table behind ``predict`` / export,
the restricted argmax, the shared encoder, config validation and (slow)
learning on the one-step problem and the 5-state chain."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import offrl
from offrl.models.layers import EnsembleLinear
from hand_losses import discrete_batch, huber
from offrl.algos.bcq import BCQConfig, DiscreteBCQConfig, restricted_argmax, soft_clipped_max
from offrl.models import QRQFunctionFactory, VectorEncoderFactory
from offrl.models.vae import repeat_observations

TARGETS = ("targ_q_function", "targ_policy")


@pytest.fixture
def bcq_config(small_encoder):
    def make(**changes) -> BCQConfig:
        return BCQConfig(
            actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder,
            imitator_encoder_factory=small_encoder, **changes,
        )

    return make


def f64(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().astype(np.float64)


def draws(seed: int, shapes):
    """The standard-normal draws ``update`` makes after ``torch.manual_seed(seed)``."""
    torch.manual_seed(seed)
    return [torch.randn(*s) for s in shapes]


# ---------------------------------------------------------------- BCQ
@pytest.mark.parametrize("n_critics", [1, 2])
def test_bcq_losses_on_hand_built_batch(n_critics, hand_batch, build_algo, bcq_config):
    offrl.seed(0)
    n, lam, beta, gamma = 3, 0.7, 0.4, 0.9
    cfg = bcq_config(n_critics=n_critics, n_action_samples=n, lam=lam, beta=beta, gamma=gamma, action_flexibility=0.2)
    algo = build_algo(cfg, perturb=TARGETS)
    nets = algo.modules
    batch = hand_batch()
    obs, act = torch.from_numpy(batch.observations), torch.from_numpy(batch.actions)
    nxt = torch.from_numpy(batch.next_observations)
    vae_before, q_before = copy.deepcopy(nets["vae"]), copy.deepcopy(nets["q_function"])
    targ_q, targ_policy, policy_before = (copy.deepcopy(nets[k]) for k in ("targ_q_function", "targ_policy", "policy"))
    latent = 4  # 2 * action_size
    eps, z_target, z_actor = draws(5, [(4, latent), (4 * n, latent), (4, latent)])

    torch.manual_seed(5)
    losses = algo.update(batch)
    assert set(losses) == {"vae_loss", "critic_loss", "actor_loss"}

    # VAE: mse of the reconstruction through mean + eps * std, plus beta * KL, with the weights before the step
    with torch.no_grad():
        mean, logstd = vae_before.encode(obs, act)
        recon = f64(vae_before.decode(obs, mean + eps * logstd.exp()))
    m, s = f64(mean), f64(logstd)
    kl = np.mean(0.5 * (m**2 + np.exp(2 * s) - 1.0) - s)
    assert losses["vae_loss"] == pytest.approx(np.mean((recon - batch.actions) ** 2) + beta * kl, rel=1e-5)

    # critics: the target uses the VAE after its step (the one the algorithm holds now) and the old targets
    vae_after = nets["vae"]
    z_target = z_target.clamp(-0.5, 0.5)
    y = np.zeros(4)
    with torch.no_grad():
        for b in range(4):
            best = -math.inf
            for j in range(n):
                s_b = nxt[b : b + 1]
                a = targ_policy(s_b, vae_after.decode(s_b, z_target[b * n + j : b * n + j + 1]))
                values = f64(targ_q.expected(s_b, a))[:, 0, 0]  # (E,)
                best = max(best, lam * values.min() + (1 - lam) * values.max())
            y[b] = batch.rewards[b, 0] + gamma ** batch.intervals[b, 0] * (1 - batch.terminals[b, 0]) * best
        pred = f64(q_before.expected(obs, act))[:, :, 0]  # (E, B)
    critic = sum(np.mean((pred[i] - y) ** 2) for i in range(n_critics))
    assert losses["critic_loss"] == pytest.approx(critic, rel=1e-5, abs=1e-6)

    # actor: the old actor at VAE actions from clipped latents, against the updated first critic
    with torch.no_grad():
        generated = vae_after.decode(obs, z_actor.clamp(-0.5, 0.5))
        actor = -np.mean(f64(nets["q_function"].expected(obs, policy_before(obs, generated)))[0])
    assert losses["actor_loss"] == pytest.approx(actor, rel=1e-5, abs=1e-6)


def test_bcq_trains_only_the_vae_before_rl_start_step(hand_batch, build_algo, bcq_config):
    offrl.seed(0)
    algo = build_algo(bcq_config(rl_start_step=2, n_action_samples=2))
    nets = algo.modules
    for step in range(3):
        vae = [p.clone() for p in nets["vae"].parameters()]
        q = [p.clone() for p in nets["q_function"].parameters()]
        policy = [p.clone() for p in nets["policy"].parameters()]
        losses = algo.update(hand_batch())
        started = step >= 2
        assert any(not torch.equal(a, b) for a, b in zip(vae, nets["vae"].parameters()))
        assert any(not torch.equal(a, b) for a, b in zip(q, nets["q_function"].parameters())) == started
        assert any(not torch.equal(a, b) for a, b in zip(policy, nets["policy"].parameters())) == started
        assert (losses["critic_loss"] != 0.0) == started and (losses["actor_loss"] != 0.0) == started


def test_bcq_actor_updates_every_interval(hand_batch, build_algo, bcq_config):
    offrl.seed(0)
    algo = build_algo(bcq_config(update_actor_interval=2, n_action_samples=2))
    reported = []
    for step in range(4):
        before = [p.clone() for p in algo.modules["policy"].parameters()]
        reported.append(algo.update(hand_batch())["actor_loss"])
        moved = any(not torch.equal(a, b) for a, b in zip(before, algo.modules["policy"].parameters()))
        assert moved == (step % 2 == 0)
    assert reported[1] == reported[0] and reported[3] == reported[2] != reported[0]


@settings(max_examples=15, deadline=None)
@given(lam=st.floats(0.0, 1.0), n=st.integers(1, 4), seed=st.integers(0, 10))
def test_soft_clipped_max_matches_a_loop_for_quantile_critics(lam, n, seed):
    torch.manual_seed(seed)
    q = QRQFunctionFactory(n_quantiles=3).create(VectorEncoderFactory([8]), (3,), 2, 2, discrete=False)
    x = torch.randn(4, 3)
    actions = torch.rand(4, n, 2) * 2 - 1
    repeated = repeat_observations(x, n)
    with torch.no_grad():
        value, index = soft_clipped_max(q, repeated, actions, lam)
        for b in range(4):
            scores = []
            for j in range(n):
                dist = q.at_action(x[b : b + 1], actions[b, j : j + 1])[0][:, 0]  # (E, N)
                means = dist.mean(dim=-1)
                scores.append(lam * means.min().item() + (1 - lam) * means.max().item())
            j = int(np.argmax(scores))
            assert int(index[b]) == j
            dist = q.at_action(x[b : b + 1], actions[b, j : j + 1])[0][:, 0]
            means = dist.mean(dim=-1)
            expected = lam * dist[means.argmin()] + (1 - lam) * dist[means.argmax()]
            torch.testing.assert_close(value[b], expected, rtol=1e-5, atol=1e-6)


def test_bcq_predict_is_the_best_fixed_candidate(build_algo, bcq_config):
    """predict: the fixed latent table decoded, perturbed and scored one by
    one; repeatable, the same per observation as in a batch, and the exported
    module's action; sample_action draws fresh latents."""
    offrl.seed(0)
    algo = build_algo(bcq_config(n_action_samples=5, action_flexibility=0.3))
    nets = algo.modules
    table = nets["candidate_latents"].values
    assert table.shape == (5, 4) and table.abs().max() <= 0.5
    x = np.random.default_rng(1).normal(size=(6, 3)).astype(np.float32)
    got = algo.predict(x)
    expected = []
    with torch.no_grad():
        for row in torch.from_numpy(x):
            s = row[None]
            candidates = [nets["policy"](s, nets["vae"].decode(s, z[None]))[0] for z in table]
            scores = [nets["q_function"].expected(s, c[None])[0, 0, 0].item() for c in candidates]
            expected.append(candidates[int(np.argmax(scores))].numpy())
    np.testing.assert_allclose(got, np.array(expected), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(algo.predict(x), got)
    np.testing.assert_allclose(algo.predict(x[2:3]), got[2:3], rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        np.testing.assert_allclose(algo.policy_module()(torch.from_numpy(x)).numpy(), got, rtol=1e-5, atol=1e-6)
    sampled = algo.sample_action(x)
    assert sampled.shape == (6, 2) and np.abs(sampled).max() <= 1.0
    assert not np.array_equal(sampled, algo.sample_action(x))


@pytest.mark.parametrize(
    "field,value",
    [("lam", 1.5), ("lam", -0.1), ("n_action_samples", 0), ("beta", -1.0), ("action_flexibility", -0.1),
     ("rl_start_step", -1), ("update_actor_interval", 0), ("n_critics", 0)],
)
def test_bcq_refuses_bad_config(field, value):
    with pytest.raises(ValueError, match=field):
        BCQConfig(**{field: value})


def test_bcq_refuses_discrete_data(dataset_factory, fit_quietly):
    algo = BCQConfig(batch_size=4).create()
    with pytest.raises(ValueError, match="actions"):
        fit_quietly(algo, dataset_factory("vector", True), 1)


@pytest.mark.slow
def test_bcq_learns_the_one_step_problem(fit_one_step_problem):
    """Logged actions uniform in [-1, 1], reward -(a - 0.5)^2. The VAE's
    candidates (latents clipped to [-0.5, 0.5]) cover about [-0.5, 0.5], plus
    the perturbation of 0.05: the best reachable action is near 0.5 and BCQ
    must move from the data's mean (0, reward -0.25; a random logged action
    earns -0.58 on average) towards it."""
    actions = fit_one_step_problem(lambda enc: BCQConfig(
        actor_encoder_factory=enc, critic_encoder_factory=enc, imitator_encoder_factory=enc,
        n_action_samples=20, batch_size=64,
    ), seed=0, n_steps=1000)
    assert float(np.median(actions)) > 0.25
    assert float(np.mean(-((actions - 0.5) ** 2))) > -0.07


# -------------------------------------------------------------- DiscreteBCQ
@settings(max_examples=60, deadline=None)
@given(
    values=arrays(np.float32, (3, 4), elements=st.floats(-5, 5, width=32)),
    logits=arrays(np.float32, (3, 4), elements=st.floats(-5, 5, width=32)),
    tau=st.sampled_from([0.0, 0.1, 0.3, 0.9]),
)
def test_restricted_argmax_matches_a_loop(values, logits, tau):
    got = restricted_argmax(torch.from_numpy(values), torch.from_numpy(logits), tau).numpy()
    for b in range(3):
        p = np.exp(logits[b].astype(np.float64) - logits[b].max())
        ratio = p / p.max()
        # float32 against float64 rounding: actions within 1e-4 of the threshold may go either way
        surely = [a for a in range(4) if tau == 0.0 or ratio[a] > tau + 1e-4]
        maybe = [a for a in range(4) if tau == 0.0 or ratio[a] > tau - 1e-4]
        assert got[b] in maybe
        assert values[b, got[b]] >= max(values[b, a] for a in surely)
        if surely == maybe:
            assert values[b, got[b]] == max(values[b, a] for a in surely)


@pytest.mark.parametrize("share_encoder,n_critics", [(True, 1), (False, 1), (True, 2), (False, 2)])
def test_discrete_bcq_loss_by_hand(share_encoder, n_critics):
    # share_encoder with a mean Q-function takes the one-encoder-pass path (values and logits from the same features)
    offrl.seed(0)
    tau, beta, gamma = 0.4, 0.3, 0.9
    algo = DiscreteBCQConfig(
        encoder_factory=VectorEncoderFactory(hidden_units=[8]), gamma=gamma, action_flexibility=tau, beta=beta,
        share_encoder=share_encoder, n_critics=n_critics,
    ).create()
    algo.create_impl((2,), 3)
    q, targ, imitator = algo.modules["q_function"], algo.modules["targ_q_function"], algo.modules["imitator"]
    with torch.no_grad():
        for p in targ.parameters():
            p.add_(0.3 * torch.randn_like(p))
    batch = discrete_batch()
    obs, nxt = torch.from_numpy(batch.observations), torch.from_numpy(batch.next_observations)
    with torch.no_grad():
        q_now, q_next = f64(q.expected(obs)), f64(q.expected(nxt))  # (E, B, A)
        q_next_target = f64(targ.expected(nxt))
        logits, next_logits = f64(imitator(obs)), f64(imitator(nxt))
    y, imitation = np.zeros(4), np.zeros(4)
    for b in range(4):
        p = np.exp(next_logits[b] - next_logits[b].max())
        p /= p.sum()
        allowed = [a for a in range(3) if p[a] / p.max() > tau]
        a_star = max(allowed, key=lambda a: np.mean([q_next[e, b, a] for e in range(n_critics)]))
        smallest = min(q_next_target[e, b, a_star] for e in range(n_critics))
        y[b] = batch.rewards[b, 0] + gamma ** batch.intervals[b, 0] * (1 - batch.terminals[b, 0]) * smallest
        log_z = math.log(sum(math.exp(v) for v in logits[b]))
        imitation[b] = -(logits[b, batch.actions[b, 0]] - log_z)
    # each critic's mean Huber error, summed over the critics
    td = sum(huber(q_now[e, np.arange(4), batch.actions[:, 0]] - y).mean() for e in range(n_critics))
    imitator_loss = imitation.mean() + beta * np.mean(logits**2)
    losses = algo.update(batch)
    assert losses["td_loss"] == pytest.approx(td, rel=1e-5, abs=1e-6)
    assert losses["imitator_loss"] == pytest.approx(imitator_loss, rel=1e-5, abs=1e-6)
    assert losses["loss"] == pytest.approx(td + imitator_loss, rel=1e-5, abs=1e-6)


def test_discrete_bcq_shares_the_q_encoder_once_in_the_optimizer():
    algo = DiscreteBCQConfig(encoder_factory=VectorEncoderFactory(hidden_units=[8])).create()
    algo.create_impl((2,), 3)
    q, imitator = algo.modules["q_function"], algo.modules["imitator"]
    q_params = {id(p) for p in q.parameters()}
    shared = [p for p in imitator.parameters() if id(p) in q_params]
    assert len(shared) == len(list(q.encoder.parameters())) > 0
    optimized = [id(p) for g in algo.optimizers["optim"].optim.param_groups for p in g["params"]]
    assert len(optimized) == len(set(optimized)) == len(q_params) + 2  # + the imitator's head
    separate = DiscreteBCQConfig(encoder_factory=VectorEncoderFactory(hidden_units=[8]), share_encoder=False).create()
    separate.create_impl((2,), 3)
    assert not {id(p) for p in separate.modules["imitator"].parameters()} & {id(p) for p in separate.modules["q_function"].parameters()}


@pytest.mark.parametrize("n_critics,share_encoder", [(1, True), (2, True), (1, False)])
def test_discrete_bcq_predict_is_the_restricted_greedy_action(monkeypatch, n_critics, share_encoder):
    offrl.seed(0)
    algo = DiscreteBCQConfig(encoder_factory=VectorEncoderFactory(hidden_units=[8]), action_flexibility=0.5,
                             n_critics=n_critics, share_encoder=share_encoder).create()
    algo.create_impl((2,), 3)
    x = np.random.default_rng(0).normal(size=(20, 2)).astype(np.float32)
    with torch.no_grad():
        values = algo.modules["q_function"].expected(torch.from_numpy(x)).mean(dim=0)
        expected = restricted_argmax(values, algo.modules["imitator"](torch.from_numpy(x)), 0.5).numpy()
    first = next(m for m in algo.modules["q_function"].modules() if isinstance(m, (torch.nn.Linear, EnsembleLinear)))
    calls = []
    original = first.forward
    monkeypatch.setattr(first, "forward", lambda *args: calls.append(1) or original(*args))
    np.testing.assert_array_equal(algo.predict(x), expected)
    # the Q-network's encoder runs once: shared, one pass gives the values and the imitator's logits
    assert len(calls) == 1
    monkeypatch.undo()
    algo.set_params(action_flexibility=0.0)
    algo.create_impl((2,), 3)
    with torch.no_grad():
        greedy = algo.modules["q_function"].expected(torch.from_numpy(x)).mean(dim=0).argmax(dim=1).numpy()
    np.testing.assert_array_equal(algo.predict(x), greedy)  # tau = 0: DQN's greedy action


@pytest.mark.parametrize("field,value", [("action_flexibility", 1.0), ("action_flexibility", -0.1), ("beta", -1.0), ("n_critics", 0)])
def test_discrete_bcq_refuses_bad_config(field, value):
    with pytest.raises(ValueError, match=field):
        DiscreteBCQConfig(**{field: value})


@pytest.mark.slow
def test_discrete_bcq_learns_the_chain():
    from test_dqn import chain_dataset

    offrl.seed(0)
    algo = DiscreteBCQConfig(
        encoder_factory=VectorEncoderFactory(hidden_units=[32]), learning_rate=3e-3, batch_size=64,
        target_update_interval=50, gamma=0.9,
    ).create()
    algo.fit(chain_dataset(), n_steps=1500, n_steps_per_epoch=1500, logger_adapter=offrl.logging.NoopAdapterFactory(), show_progress=False)
    states = np.eye(5, dtype=np.float32)[:4]
    np.testing.assert_array_equal(algo.predict(states), [1, 1, 1, 1])
    np.testing.assert_allclose(algo.predict_value(states, np.ones(4, dtype=np.int64)), 0.9 ** np.array([3, 2, 1, 0]), atol=0.1)
