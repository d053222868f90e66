"""PLAS and PLASWithPerturbation: the VAE loss of a warm-up step and the
critic and actor losses after it on a hand-built batch (plain loops), which
networks each phase moves, the acting policy, config checks and a learning
check."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import offrl
from offrl.algos.plas import MAX_LATENT, PLAS, PLASConfig, PLASWithPerturbation, PLASWithPerturbationConfig
from offrl.models import VectorEncoderFactory

TARGETS = ("targ_q_function", "targ_policy")


@pytest.fixture
def small_config(small_encoder):
    def make(cls=PLASConfig, **changes):
        return cls(actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder,
                   imitator_encoder_factory=small_encoder, **changes)

    return make


def params(module: torch.nn.Module) -> list:
    return [p.detach().clone() for p in module.parameters()]


def moved(before: list, module: torch.nn.Module) -> bool:
    return any(not torch.equal(a, b) for a, b in zip(before, module.parameters()))


def acted(algo, obs: torch.Tensor, targets: bool = False) -> torch.Tensor:
    """The action of the (target) latent policy, decoded and perturbed, computed here."""
    nets = algo.modules
    with torch.no_grad():
        latent = MAX_LATENT * nets["targ_policy" if targets else "policy"](obs)
        action = nets["vae"].decode(obs, latent)
        name = "targ_perturbation" if targets else "perturbation"
        if name in nets:
            action = nets[name](obs, action)
    return action


def test_warmup_step_trains_the_vae_on_its_elbo(hand_batch, build_algo, small_config):
    offrl.seed(0)
    cfg = small_config(beta=0.7, warmup_steps=2)
    algo = build_algo(cfg)
    batch = hand_batch()
    obs, act = torch.from_numpy(batch.observations), torch.from_numpy(batch.actions)
    vae = algo.modules["vae"]
    torch.manual_seed(11)
    with torch.no_grad():
        mean, logstd = vae.encode(obs, act)
        eps = torch.randn_like(mean)
        decoded = vae.decode(obs, mean + eps * logstd.exp()).double().numpy()
    mean, logstd = mean.double().numpy(), logstd.double().numpy()
    mse = np.mean([(decoded[b, j] - batch.actions[b, j]) ** 2 for b in range(4) for j in range(2)])
    kl = np.mean([0.5 * (mean[b, k] ** 2 + np.exp(2 * logstd[b, k]) - 1) - logstd[b, k]
                  for b in range(4) for k in range(mean.shape[1])])
    assert mean.shape == (4, 4)  # latent size 2 * action_size
    others = {n: params(algo.modules[n]) for n in ("policy", "q_function", "targ_policy", "targ_q_function")}
    vae_before = params(vae)

    torch.manual_seed(11)
    losses = algo.update(batch)

    assert set(losses) == {"vae_loss", "critic_loss", "actor_loss"}
    assert losses["vae_loss"] == pytest.approx(mse + 0.7 * kl, rel=1e-5)
    assert losses["critic_loss"] == losses["actor_loss"] == 0.0  # not run yet
    assert moved(vae_before, vae)
    assert not any(moved(before, algo.modules[n]) for n, before in others.items())


@pytest.mark.parametrize("cls", [PLASConfig, PLASWithPerturbationConfig])
@pytest.mark.parametrize("lam", [0.75, 0.2])
def test_losses_after_warmup_on_hand_built_batch(cls, lam, hand_batch, build_algo, small_config):
    offrl.seed(0)
    extra = {"action_flexibility": 0.3} if cls is PLASWithPerturbationConfig else {}
    cfg = small_config(cls, gamma=0.9, lam=lam, warmup_steps=0, n_critics=3, tau=0.2, **extra)
    targets = TARGETS + (("targ_perturbation",) if extra else ())
    algo = build_algo(cfg, perturb=targets + ("vae",))
    nets = algo.modules
    batch = hand_batch()
    obs, act = torch.from_numpy(batch.observations), torch.from_numpy(batch.actions)
    nxt = torch.from_numpy(batch.next_observations)
    with torch.no_grad():
        next_q = nets["targ_q_function"].expected(nxt, acted(algo, nxt, targets=True)).double().numpy()[..., 0]  # (E, B)
        q = nets["q_function"].expected(obs, act).double().numpy()[..., 0]
    r, d, k = batch.rewards[:, 0], batch.terminals[:, 0], batch.intervals[:, 0]
    mixed = np.array([lam * min(next_q[:, b]) + (1 - lam) * max(next_q[:, b]) for b in range(4)])
    y = r + cfg.gamma**k * (1 - d) * mixed
    critic_loss = sum(np.mean((q[i] - y) ** 2) for i in range(3))
    policy_action = acted(algo, obs)
    vae_before = params(nets["vae"])
    targ_perturbation_before = params(nets["targ_perturbation"]) if extra else None

    losses = algo.update(batch)

    assert losses["critic_loss"] == pytest.approx(critic_loss, rel=1e-5, abs=1e-6)
    with torch.no_grad():  # the actor step follows the critic step
        q_first = nets["q_function"].expected(obs, policy_action)[0].double().numpy()[:, 0]
    assert losses["actor_loss"] == pytest.approx(-q_first.mean(), rel=1e-5, abs=1e-6)
    assert losses["vae_loss"] == 0.0
    assert not moved(vae_before, nets["vae"])  # the VAE is fixed after warm-up
    if extra:
        for old, targ, online in zip(targ_perturbation_before, nets["targ_perturbation"].parameters(),
                                     nets["perturbation"].parameters()):
            torch.testing.assert_close(targ, 0.8 * old + 0.2 * online, rtol=1e-5, atol=1e-6)


def test_actor_step_moves_the_perturbation_actor_with_the_latent_policy(hand_batch, build_algo, small_config):
    offrl.seed(0)
    algo = build_algo(small_config(PLASWithPerturbationConfig, warmup_steps=0))
    before = {n: params(algo.modules[n]) for n in ("policy", "perturbation", "q_function")}
    algo.update(hand_batch())
    assert all(moved(b, algo.modules[n]) for n, b in before.items())


@pytest.mark.parametrize("cls", [PLASConfig, PLASWithPerturbationConfig])
def test_predict_decodes_the_latent_action(cls, build_algo, small_config):
    offrl.seed(0)
    algo = build_algo(small_config(cls, **({"action_flexibility": 0.1} if cls is PLASWithPerturbationConfig else {})))
    x = np.random.default_rng(0).normal(size=(6, 3)).astype(np.float32)
    expected = acted(algo, torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(algo.predict(x), expected, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(algo.sample_action(x), algo.predict(x))
    if cls is PLASWithPerturbationConfig:
        with torch.no_grad():
            decoded = algo.modules["vae"].decode(torch.from_numpy(x), MAX_LATENT * algo.modules["policy"](torch.from_numpy(x)))
        assert np.abs(expected - decoded.numpy()).max() <= 0.1 + 1e-6
        assert isinstance(algo, PLASWithPerturbation)
    else:
        assert type(algo) is PLAS and "perturbation" not in algo.modules


@pytest.mark.parametrize("field,bad", [("lam", 1.5), ("lam", -0.1), ("warmup_steps", -1), ("warmup_steps", 2.5),
                                       ("beta", -1.0), ("imitator_learning_rate", 0.0)])
def test_bad_config_values_name_the_field(field, bad):
    for cls in (PLASConfig, PLASWithPerturbationConfig):
        with pytest.raises(ValueError, match=rf"^{field} must be"):
            cls(**{field: bad})
    with pytest.raises(ValueError, match="^action_flexibility must be"):
        PLASWithPerturbationConfig(action_flexibility=-0.05)


def test_defaults_are_d3rlpy_s():
    cfg = PLASWithPerturbationConfig()
    assert (cfg.batch_size, cfg.actor_learning_rate, cfg.critic_learning_rate, cfg.imitator_learning_rate) == (100, 1e-4, 1e-3, 1e-4)
    assert (cfg.tau, cfg.n_critics, cfg.lam, cfg.warmup_steps, cfg.beta, cfg.action_flexibility) == (0.005, 2, 0.75, 500000, 0.5, 0.05)


@pytest.mark.slow
@pytest.mark.parametrize("cls", [PLASConfig, PLASWithPerturbationConfig])
def test_learns_the_one_step_problem(cls, fit_one_step_problem):
    """Logged actions uniform in [-1, 1], reward -(a - 0.5)^2: after the
    VAE's warm-up the decoded greedy action moves to 0.5."""
    actions = fit_one_step_problem(lambda enc: cls(actor_encoder_factory=enc, critic_encoder_factory=enc, imitator_encoder_factory=enc,
                                                   batch_size=64, warmup_steps=500, actor_learning_rate=1e-3,
                                                   imitator_learning_rate=1e-3), 0, 1500)
    assert abs(float(np.mean(actions)) - 0.5) < 0.15


# ------------------------------ PLAS's latent policy written out through the decoder (tests/algos/test_plain_step.py)
@pytest.fixture
def restore_switch():
    from offrl.models import plain_mlp

    yield plain_mlp
    plain_mlp.plain_backward_enabled(True)


@pytest.mark.parametrize("name, kwargs", [("PLAS", {}), ("PLAS", {"n_critics": 3, "lam": 0.3}), ("PLASWithPerturbation", {}),
                                          ("PLASWithPerturbation", {"action_flexibility": 0.8})])
def test_plas_written_out_actor_step_follows_the_autograd_step(name, kwargs, restore_switch, monkeypatch):
    import copy

    from test_plain_step import assert_same_weights_and_moments, continuous_batch, counting_backward, make_actor_critic, run_seeded

    calls = counting_backward(monkeypatch)
    plain = make_actor_critic(name, warmup_steps=2, imitator_encoder_factory=VectorEncoderFactory([32, 16]), **kwargs)
    assert plain._written_out_step_available()
    if kwargs.get("action_flexibility") == 0.8:  # decoded actions near 1: many perturbed ones clipped
        with torch.no_grad():
            plain.modules["vae"].decoder.fc.bias[0] = 3.0
    autograd = copy.deepcopy(plain)
    rng = np.random.default_rng(16)
    for step, (a, b) in enumerate(run_seeded(plain, autograd, [continuous_batch(rng, 32, 5, 2) for _ in range(7)])):
        for k in a:
            assert float(a[k]) == pytest.approx(float(b[k]), rel=1e-5, abs=1e-6), (step, k)
    # past the two warm-up steps: the critics' and the latent policy's (the perturbation actor's beside it), each step
    assert calls["n"] == 10
    assert_same_weights_and_moments(plain, autograd)
    if kwargs.get("action_flexibility") == 0.8:  # some perturbed actions clipped at +-1: the mask was exercised
        with torch.no_grad():
            obs = torch.as_tensor(continuous_batch(rng, 256, 5, 2).observations)
            decoded = plain.modules["vae"].decode(obs, MAX_LATENT * plain.modules["policy"](obs))
            clipped = plain.modules["perturbation"](obs, decoded).abs() == 1.0
            assert clipped.any() and not clipped.all()


def test_plas_hooked_decoder_and_perturbation_keep_autograd_for_the_actor(restore_switch, monkeypatch):
    from test_plain_step import assert_hooks_route, continuous_batch, counting_backward, make_actor_critic

    calls = counting_backward(monkeypatch)
    batch = continuous_batch(np.random.default_rng(17), 8, 5, 2)
    algo = make_actor_critic("PLAS", warmup_steps=0, imitator_encoder_factory=VectorEncoderFactory([16]))
    algo.update(batch)
    assert calls["n"] == 2
    decoder = algo.modules["vae"].decoder
    # the critics' step written out, the actor's through autograd
    assert_hooks_route(algo, batch, calls, [(decoder.fc, 1), (decoder.encoder.mlp.layers[0], 1)])
    perturbed = make_actor_critic("PLASWithPerturbation", warmup_steps=0, imitator_encoder_factory=VectorEncoderFactory([16]))
    assert perturbed._written_out_step_available()
    perturbed.update(batch)
    assert_hooks_route(perturbed, batch, calls, [(perturbed.modules["perturbation"].fc, 1)])  # its actor through autograd


@settings(max_examples=20, deadline=None)
@given(name=st.sampled_from(["PLAS", "PLASWithPerturbation"]), seed=st.integers(0, 2**16), n=st.integers(1, 40),
       hidden=st.lists(st.integers(1, 40), min_size=1, max_size=3), flexibility=st.floats(0.0, 1.0), bias=st.floats(-3.0, 3.0))
def test_one_plas_step_equals_autograd_on_random_problems(name, seed, n, hidden, flexibility, bias):
    from test_plain_step import assert_one_step_matches, continuous_batch, make_actor_critic

    kwargs = {"action_flexibility": flexibility} if name == "PLASWithPerturbation" else {}
    plain = make_actor_critic(name, hidden=hidden, warmup_steps=0, imitator_encoder_factory=VectorEncoderFactory(hidden),
                              **kwargs)
    with torch.no_grad():  # decoded actions anywhere in (-1, 1), and perturbed ones clipped at times
        plain.modules["vae"].decoder.fc.bias.fill_(bias)
    assert_one_step_matches(plain, continuous_batch(np.random.default_rng(seed), n, 5, 2), seeded=True, rtol=1e-4, atol=1e-5)
