"""DQN, DoubleDQN, NFQ, DiscreteCQL, DiscreteBCQ, DiscreteSAC, the DDPG family, AWAC, CRR, IQL's policy, BC,
DiscreteBC and FQE (SAC's and CQL's: tests/algos/test_sac.py) with their backward
written out (``offrl.models.plain_mlp``): the same losses, gradients, weights
and optimizer state as the autograd update, and autograd wherever the
written-out step does not apply (other networks, hooks, bf16, clipping,
schedulers, replaced optimizer steps)."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import offrl
from offrl.dataset import TransitionMiniBatch
from offrl.models import QRQFunctionFactory, VectorEncoderFactory
from offrl.models import plain_mlp
from offrl.optimizers import AdamFactory, CosineAnnealingLRFactory, OptimizerFactory

NAMES = ["DQNConfig", "DoubleDQNConfig", "NFQConfig", "DiscreteCQLConfig"]


@pytest.fixture(autouse=True)
def _restore_switch():
    yield
    plain_mlp.plain_backward_enabled(True)


def random_batch(rng: np.random.Generator, n: int, obs_dim: int, n_actions: int,
                 action_dtype=np.int64) -> TransitionMiniBatch:
    return TransitionMiniBatch(
        observations=rng.normal(size=(n, obs_dim)).astype(np.float32),
        actions=rng.integers(0, n_actions, size=(n, 1)).astype(action_dtype),
        rewards=rng.normal(scale=3.0, size=(n, 1)).astype(np.float32),
        next_observations=rng.normal(size=(n, obs_dim)).astype(np.float32),
        next_actions=np.zeros((n, 1), dtype=np.int64),
        terminals=(rng.random((n, 1)) < 0.2).astype(np.float32),
        intervals=rng.integers(1, 4, size=(n, 1)).astype(np.float32),
    )


def make(name: str, hidden=(32, 16), **kwargs):
    cls = getattr(offrl.algos, name)
    if name != "NFQConfig":
        kwargs.setdefault("target_update_interval", 3)
    config = cls(encoder_factory=VectorEncoderFactory(hidden_units=list(hidden)), learning_rate=1e-2, **kwargs)
    offrl.seed(0)
    algo = config.create()
    algo.create_impl((5,), 4)
    return algo


def counting_backward(monkeypatch) -> dict:
    """Counts the written-out backward passes of the algorithms' modules."""
    calls = {"n": 0}
    original = plain_mlp.plain_backward

    def counted(*args, **kwargs):
        calls["n"] += 1
        return original(*args, **kwargs)

    for module in ("dqn", "cql", "bc", "bcq", "discrete_sac", "ddpg", "_common", "iql", "plas"):
        monkeypatch.setattr(f"offrl.algos.{module}.plain_backward", counted)
    return calls


def assert_hooks_route(algo, batch, calls: dict, cases) -> None:
    """For each ``(module, written)`` of ``cases``: one update of ``algo``
    with a forward hook on ``module`` runs ``written`` written-out backward
    passes (the rest through autograd) and calls the hook."""
    for module, written in cases:
        seen = []
        handle = module.register_forward_hook(lambda m, inputs, output: seen.append(1))
        before = calls["n"]
        algo.update(batch)
        handle.remove()
        assert calls["n"] - before == written and seen, module


def run_both(plain, autograd, batches):
    """Steps both copies on the same batches: the written-out path on
    ``plain``, autograd on ``autograd``; the losses of each step."""
    out = []
    for batch in batches:
        plain_mlp.plain_backward_enabled(True)
        a = plain.update(batch)
        plain_mlp.plain_backward_enabled(False)
        b = autograd.update(batch)
        out.append((a, b))
    plain_mlp.plain_backward_enabled(True)
    return out


def assert_same_state(plain, autograd, rtol=1e-5, atol=1e-6, weights=True):
    """The same weights (``weights``), gradients and Adam moments."""
    trained = "policy" if "policy" in plain.modules else "q_function"
    for key in (trained, "targ_q_function") if weights else ():
        if key not in plain.modules:
            continue
        for a, b in zip(plain.modules[key].parameters(), autograd.modules[key].parameters()):
            torch.testing.assert_close(a, b, rtol=rtol, atol=atol)
    q_a, q_b = plain.modules[trained], autograd.modules[trained]
    for a, b in zip(q_a.parameters(), q_b.parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=rtol, atol=atol)  # .grad kept as after backward()
        sa, sb = plain.optimizers["optim"].optim.state[a], autograd.optimizers["optim"].optim.state[b]
        assert int(sa["step"]) == int(sb["step"])
        torch.testing.assert_close(sa["exp_avg"], sb["exp_avg"], rtol=rtol, atol=atol)
        torch.testing.assert_close(sa["exp_avg_sq"], sb["exp_avg_sq"], rtol=rtol, atol=atol)


def run_seeded(plain, autograd, batches):
    """:func:`run_both` with the same torch seed before each update of both
    copies (TD3's target noise, a VAE's draws); with ``autograd`` None, the
    autograd copy is made anew from ``plain`` before each update (both start
    every update from the same weights and optimizer state)."""
    out = []
    for i, batch in enumerate(batches):
        other = copy.deepcopy(plain) if autograd is None else autograd
        plain_mlp.plain_backward_enabled(True)
        torch.manual_seed(i)
        a = plain.update(batch)
        plain_mlp.plain_backward_enabled(False)
        torch.manual_seed(i)
        out.append((a, other.update(batch)))
    plain_mlp.plain_backward_enabled(True)
    return out


def assert_same_weights_and_moments(plain, autograd, weights=True, rtol=1e-5, atol=1e-6):
    """Every trained parameter of every optimizer, and every module's state."""
    for key, wrapper in plain.optimizers.items():
        wa, wb = wrapper.optim, autograd.optimizers[key].optim
        for a, b in zip(wa.param_groups[0]["params"], wb.param_groups[0]["params"], strict=True):
            if a.grad is not None or b.grad is not None:
                torch.testing.assert_close(a.grad, b.grad, rtol=rtol, atol=atol)
            sa, sb = wa.state.get(a, {}), wb.state.get(b, {})
            assert sa.keys() == sb.keys()
            for k in sa:
                torch.testing.assert_close(sa[k], sb[k], rtol=rtol, atol=atol)
    if weights:
        for (k, a), b in zip(plain.modules.state_dict().items(), autograd.modules.state_dict().values(), strict=True):
            torch.testing.assert_close(a, b, rtol=rtol, atol=atol, msg=k)


def assert_one_step_matches(plain, batch, seeded: bool = False, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """One update of ``plain`` and of a copy of it through autograd: the same
    losses, gradients and optimizer moments (not the weights: Adam's first
    step is lr * g / (|g| + eps), so a gradient near eps, as a 1-unit layer's,
    moves a weight by a visibly different amount for the last bit of g)."""
    autograd = copy.deepcopy(plain)
    ((a, b),) = (run_seeded if seeded else run_both)(plain, autograd, [batch])
    assert a.keys() == b.keys()
    for k in a:
        assert float(a[k]) == pytest.approx(float(b[k]), rel=rtol, abs=atol), k
    assert_same_weights_and_moments(plain, autograd, weights=False, rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", NAMES)
def test_written_out_steps_follow_the_autograd_steps(name, monkeypatch):
    calls = counting_backward(monkeypatch)
    plain = make(name)
    autograd = copy.deepcopy(plain)
    rng = np.random.default_rng(1)
    batches = [random_batch(rng, 32, 5, 4) for _ in range(8)]  # target copies at steps 0, 3, 6
    for step, (a, b) in enumerate(run_both(plain, autograd, batches)):
        assert a.keys() == b.keys()
        for k in a:
            assert a[k] == pytest.approx(b[k], rel=1e-5, abs=1e-6), (step, k)
    assert calls["n"] == 8
    assert_same_state(plain, autograd)
    if name != "NFQConfig":  # the target copied after step 6, as autograd's
        for a, b in zip(plain.modules["targ_q_function"].parameters(), plain.modules["q_function"].parameters()):
            assert not torch.equal(a, b)


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(NAMES), seed=st.integers(0, 2**16), n=st.integers(1, 40),
       hidden=st.lists(st.integers(1, 40), min_size=1, max_size=3), gamma=st.floats(0.0, 1.0),
       alpha=st.floats(0.0, 5.0), int32=st.booleans())
def test_one_written_out_step_equals_autograd_on_random_problems(name, seed, n, hidden, gamma, alpha, int32):
    kwargs = {"gamma": gamma}
    if name == "DiscreteCQLConfig":
        kwargs["alpha"] = alpha
    plain = make(name, hidden=hidden, **kwargs)
    autograd = copy.deepcopy(plain)
    rng = np.random.default_rng(seed)
    batch = random_batch(rng, n, 5, 4, np.int32 if int32 else np.int64)
    ((a, b),) = run_both(plain, autograd, [batch])
    for k in a:
        assert a[k] == pytest.approx(b[k], rel=1e-5, abs=1e-6), k
    # not the weights: Adam's first step is lr * g / (|g| + eps), so a gradient near eps (a 1-unit layer's)
    # moves a weight by a visibly different amount for the last bit of g
    assert_same_state(plain, autograd, weights=False)


@pytest.mark.parametrize("factory", [
    VectorEncoderFactory([16], use_layer_norm=True),
    VectorEncoderFactory([16], use_batch_norm=True),
    VectorEncoderFactory([16], dropout_rate=0.1),
    VectorEncoderFactory([16], activation="tanh"),
    VectorEncoderFactory([16, 8], exclude_last_activation=True),
])
def test_other_networks_train_through_autograd(factory, monkeypatch):
    calls = counting_backward(monkeypatch)
    algo = offrl.algos.DQNConfig(encoder_factory=factory).create()
    algo.create_impl((5,), 4)
    algo.update(random_batch(np.random.default_rng(0), 8, 5, 4))
    assert calls["n"] == 0
    assert algo._plain.layers is None


@pytest.mark.parametrize("kwargs", [{"n_critics": 2}, {"q_func_factory": QRQFunctionFactory(n_quantiles=4)}])
def test_ensembles_and_distributions_train_through_autograd(kwargs, monkeypatch):
    calls = counting_backward(monkeypatch)
    algo = make("DiscreteCQLConfig", **kwargs)
    algo.update(random_batch(np.random.default_rng(0), 8, 5, 4))
    assert calls["n"] == 0


def test_a_forward_hook_added_after_building_is_honoured(monkeypatch):
    calls = counting_backward(monkeypatch)
    algo = make("DQNConfig")
    batch = random_batch(np.random.default_rng(0), 8, 5, 4)
    algo.update(batch)
    assert calls["n"] == 1
    seen = []
    layer = algo.modules["q_function"].encoder.encoder.mlp.layers[0]
    handle = layer.register_forward_hook(lambda module, inputs, output: seen.append(output.shape[0]))
    algo.update(batch)
    assert calls["n"] == 1 and seen  # autograd's step: the hook ran
    handle.remove()
    algo.update(batch)
    assert calls["n"] == 2
    target_layer = algo.modules["targ_q_function"].encoder.encoder.mlp.layers[0]
    handle = target_layer.register_forward_hook(lambda module, inputs, output: seen.append("target"))
    algo.update(batch)
    assert calls["n"] == 2 and seen[-1] == "target"  # a hook on the target network counts too
    handle.remove()


def test_bf16_mixed_runs_the_written_out_passes_in_bf16_from_its_batch_size_on(monkeypatch):
    from offrl.training import precision

    precision.set_bf16_available(True)
    try:
        calls = counting_backward(monkeypatch)
        algo = make("DQNConfig", precision="bf16-mixed", batch_size=precision.WRITTEN_OUT_FASTER_BELOW)
        algo.update(random_batch(np.random.default_rng(0), 8, 5, 4))
        assert algo.precision == "bf16-mixed" and calls["n"] == 1  # written out, its hidden products in bf16
        calls["n"] = 0
        with pytest.warns(RuntimeWarning, match="DQN at batch_size 32 trains in float32 with its backward written out"):
            small = make("DQNConfig", precision="bf16-mixed", batch_size=32)
            small.update(random_batch(np.random.default_rng(0), 8, 5, 4))
        assert small.precision == "float32" and calls["n"] == 1
    finally:
        precision.set_bf16_available(None)



# torch's scheduler warns that the optimizer's step was replaced when the algorithm is copied before its first step
@pytest.mark.filterwarnings("ignore:Seems like `optimizer.step\\(\\)` has been overridden")
@pytest.mark.parametrize("optim_factory", [
    AdamFactory(clip_grad_norm=0.05),
    AdamFactory(lr_scheduler_factory=CosineAnnealingLRFactory(T_max=4)),
    OptimizerFactory("SGD", momentum=0.9),
    OptimizerFactory("RMSprop"),
])
def test_optimizers_the_direct_step_cannot_take_step_as_their_own(optim_factory):
    # clipping, schedulers and other optimizers step through the optimizer wrapper: the same weights as autograd's
    plain = make("DiscreteCQLConfig", optim_factory=optim_factory)
    autograd = copy.deepcopy(plain)
    rng = np.random.default_rng(2)
    run_both(plain, autograd, [random_batch(rng, 16, 5, 4) for _ in range(5)])
    if isinstance(optim_factory, AdamFactory):
        assert_same_state(plain, autograd)
    for a, b in zip(plain.modules["q_function"].parameters(), autograd.modules["q_function"].parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    lr = [w.optim.param_groups[0]["lr"] for w in (plain.optimizers["optim"], autograd.optimizers["optim"])]
    assert lr[0] == lr[1]


def test_a_replaced_optimizer_step_is_called(monkeypatch):
    # torchrun's gradient averaging replaces the wrapper's step on the instance
    calls = counting_backward(monkeypatch)
    algo = make("DQNConfig")
    wrapper = algo.optimizers["optim"]
    stepped = []
    original = type(wrapper).step.__get__(wrapper)

    def averaged():
        stepped.append([p.grad.clone() for p in algo.modules["q_function"].parameters()])
        original()

    batch = random_batch(np.random.default_rng(0), 8, 5, 4)
    algo.update(batch)  # the optimizer's state exists: the direct fused step could run
    wrapper.step = averaged
    algo.update(batch)
    assert calls["n"] == 2 and len(stepped) == 1


def test_swapped_networks_are_looked_at_anew():
    algo = make("DQNConfig")
    batch = random_batch(np.random.default_rng(0), 8, 5, 4)
    algo.update(batch)
    first = algo._plain
    algo.update(batch)  # the same networks: the same holder
    assert algo._plain is first
    algo.create_impl((5,), 4)  # new networks
    algo.update(batch)
    assert algo._plain is not first and algo._plain.online.network is algo.modules["q_function"]


def continuous_batch(rng: np.random.Generator, n: int, obs_dim: int, action_size: int) -> TransitionMiniBatch:
    import dataclasses

    batch = random_batch(rng, n, obs_dim, 2)
    return dataclasses.replace(batch, actions=rng.uniform(-1.0, 1.0, size=(n, action_size)).astype(np.float32))


def make_bc(name: str, hidden=(32, 16), **kwargs):
    config = getattr(offrl.algos, name)(encoder_factory=VectorEncoderFactory(hidden_units=list(hidden)),
                                        learning_rate=1e-2, **kwargs)
    offrl.seed(0)
    algo = config.create()
    algo.create_impl((5,), 3 if name == "BCConfig" else 4)
    return algo


def bc_batch(name: str, rng: np.random.Generator, n: int) -> TransitionMiniBatch:
    return continuous_batch(rng, n, 5, 3) if name == "BCConfig" else random_batch(rng, n, 5, 4)


@pytest.mark.parametrize("name", ["BCConfig", "DiscreteBCConfig"])
def test_behaviour_cloning_written_out_steps_follow_the_autograd_steps(name, monkeypatch):
    calls = counting_backward(monkeypatch)
    plain = make_bc(name)
    autograd = copy.deepcopy(plain)
    rng = np.random.default_rng(4)
    for step, (a, b) in enumerate(run_both(plain, autograd, [bc_batch(name, rng, 32) for _ in range(6)])):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5, abs=1e-6), step
    assert calls["n"] == 6
    assert_same_state(plain, autograd)


@settings(max_examples=20, deadline=None)
@given(name=st.sampled_from(["BCConfig", "DiscreteBCConfig"]), seed=st.integers(0, 2**16), n=st.integers(1, 40),
       hidden=st.lists(st.integers(1, 40), min_size=1, max_size=3), beta=st.floats(0.0, 2.0))
def test_one_behaviour_cloning_step_equals_autograd_on_random_problems(name, seed, n, hidden, beta):
    plain = make_bc(name, hidden=hidden, **({"beta": beta} if name == "DiscreteBCConfig" else {}))
    autograd = copy.deepcopy(plain)
    ((a, b),) = run_both(plain, autograd, [bc_batch(name, np.random.default_rng(seed), n)])
    assert a["loss"] == pytest.approx(b["loss"], rel=1e-5, abs=1e-6)
    assert_same_state(plain, autograd, weights=False)


def test_stochastic_bc_and_a_hooked_policy_train_through_autograd(monkeypatch):
    calls = counting_backward(monkeypatch)
    batch = continuous_batch(np.random.default_rng(0), 8, 5, 3)
    make_bc("BCConfig", policy_type="stochastic").update(batch)
    assert calls["n"] == 0
    algo = make_bc("BCConfig")
    seen = []
    algo.modules["policy"].fc.register_forward_hook(lambda module, inputs, output: seen.append(1))
    algo.update(batch)
    assert calls["n"] == 0 and seen == [1]


def make_fqe(discrete: bool, **kwargs):
    from offrl.algos import FQE, DiscreteFQE, DiscreteFQEConfig, FQEConfig

    offrl.seed(0)
    policy = make_bc("DiscreteBCConfig" if discrete else "BCConfig")
    config = (DiscreteFQEConfig if discrete else FQEConfig)(
        encoder_factory=VectorEncoderFactory(hidden_units=[32, 16]), learning_rate=1e-2, target_update_interval=3, **kwargs)
    return (DiscreteFQE if discrete else FQE)(algo=policy, config=config)


@pytest.mark.parametrize("discrete", [False, True])
@pytest.mark.parametrize("ema_decay", [None, 0.9])
def test_fqe_written_out_steps_follow_the_autograd_steps(discrete, ema_decay, monkeypatch):
    calls = {"n": 0}
    original = plain_mlp.plain_backward

    def counted(*args, **kwargs):
        calls["n"] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr("offrl.algos.dqn.plain_backward", counted)
    plain = make_fqe(discrete, ema_decay=ema_decay)
    rng = np.random.default_rng(5)
    first = bc_batch("DiscreteBCConfig" if discrete else "BCConfig", rng, 32)
    plain.create_impl((5,), 4 if discrete else 3)
    autograd = copy.deepcopy(plain)
    batches = [first] + [bc_batch("DiscreteBCConfig" if discrete else "BCConfig", rng, 32) for _ in range(6)]
    for step, (a, b) in enumerate(run_both(plain, autograd, batches)):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5, abs=1e-6), step
    assert calls["n"] == 7
    assert_same_state(plain, autograd)
    if ema_decay is not None:
        for a, b in zip(plain.modules["averaged_q_function"].parameters(), autograd.modules["averaged_q_function"].parameters()):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    # the same values read back
    x = first.observations
    actions = plain.predict(x)
    np.testing.assert_allclose(plain.predict_value(x, actions), autograd.predict_value(x, actions), rtol=1e-5, atol=1e-6)


def test_fqe_ensembles_train_through_autograd(monkeypatch):
    calls = counting_backward(monkeypatch)
    fqe = make_fqe(False, n_critics=2)
    fqe.create_impl((5,), 3)
    fqe.update(continuous_batch(np.random.default_rng(0), 8, 5, 3))
    assert calls["n"] == 0


def make_bcq(hidden=(32, 16), **kwargs):
    kwargs.setdefault("target_update_interval", 3)
    kwargs.setdefault("encoder_factory", VectorEncoderFactory(hidden_units=list(hidden)))
    config = offrl.algos.DiscreteBCQConfig(learning_rate=1e-2, **kwargs)
    offrl.seed(0)
    algo = config.create()
    algo.create_impl((5,), 4)
    return algo


def test_discrete_bcq_written_out_steps_follow_the_autograd_steps(monkeypatch):
    calls = counting_backward(monkeypatch)
    # Adam's eps well above float rounding: its first step is lr * g / (|g| + eps), so a weight whose gradient
    # is a sum cancelling to ~1e-9 (summed in another order in the two paths) would move by up to lr either way
    plain = make_bcq(beta=0.7, action_flexibility=0.2, optim_factory=AdamFactory(eps=1e-4))
    assert plain._written_out_step_available()
    autograd = copy.deepcopy(plain)
    rng = np.random.default_rng(3)
    batches = [random_batch(rng, 32, 5, 4) for _ in range(8)]  # target copies at steps 0, 3, 6
    for step, (a, b) in enumerate(run_both(plain, autograd, batches)):
        assert a.keys() == b.keys() == {"loss", "td_loss", "imitator_loss"}
        for k in a:
            assert a[k] == pytest.approx(b[k], rel=1e-5, abs=1e-6), (step, k)
    assert calls["n"] == 8
    assert_same_weights_and_moments(plain, autograd)  # the target networks' too
    for a, b in zip(plain.modules["targ_q_function"].parameters(), plain.modules["q_function"].parameters()):
        assert not torch.equal(a, b)  # copied after step 6, trained on step 7
    x = np.random.default_rng(4).normal(size=(64, 5)).astype(np.float32)
    np.testing.assert_array_equal(plain.predict(x), autograd.predict(x))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), n=st.integers(1, 40), hidden=st.lists(st.integers(1, 40), min_size=1, max_size=3),
       gamma=st.floats(0.0, 1.0), beta=st.floats(0.0, 3.0), flexibility=st.floats(0.0, 0.99), int32=st.booleans())
def test_one_discrete_bcq_step_equals_autograd_on_random_problems(seed, n, hidden, gamma, beta, flexibility, int32):
    plain = make_bcq(hidden=hidden, gamma=gamma, beta=beta, action_flexibility=flexibility)
    assert_one_step_matches(plain, random_batch(np.random.default_rng(seed), n, 5, 4, np.int32 if int32 else np.int64))


def test_discrete_bcq_weighted_batches_and_hooks_train_through_autograd(monkeypatch):
    import dataclasses

    calls = counting_backward(monkeypatch)
    algo = make_bcq()
    batch = random_batch(np.random.default_rng(0), 8, 5, 4)
    algo.update(dataclasses.replace(batch, weights=np.full((8, 1), 0.5, np.float32)))  # a prioritized batch
    assert calls["n"] == 0
    algo.update(batch)
    assert calls["n"] == 1
    for module in (algo.modules["imitator"].fc, algo.modules["q_function"].head, algo.modules["targ_q_function"].head):
        seen = []
        handle = module.register_forward_hook(lambda m, inputs, output: seen.append(1))
        algo.update(batch)
        handle.remove()
        assert calls["n"] == 1 and seen, module  # autograd's step: the hook ran
    plain_mlp.plain_backward_enabled(False)
    assert not algo._written_out_step_available()


def make_discrete_sac(hidden=(32, 16), **kwargs):
    encoder = kwargs.pop("encoder", VectorEncoderFactory(hidden_units=list(hidden)))
    kwargs.setdefault("target_update_interval", 3)
    for key in ("actor", "critic", "temp"):
        kwargs.setdefault(f"{key}_learning_rate", 1e-2)
    for key in ("actor", "critic"):  # see the DiscreteBCQ test: Adam's eps above float rounding
        kwargs.setdefault(f"{key}_optim_factory", AdamFactory(eps=1e-4))
    config = offrl.algos.DiscreteSACConfig(actor_encoder_factory=encoder, critic_encoder_factory=encoder, **kwargs)
    offrl.seed(0)
    algo = config.create()
    algo.create_impl((5,), 4)
    return algo


@pytest.mark.parametrize("kwargs", [{}, {"n_critics": 3, "temp_learning_rate": 0.0},
                                    {"initial_temperature": 0.0, "temp_learning_rate": 0.0}])
def test_discrete_sac_written_out_steps_follow_the_autograd_steps(kwargs, monkeypatch):
    calls = counting_backward(monkeypatch)
    plain = make_discrete_sac(**kwargs)
    assert plain._written_out_step_available()
    autograd = copy.deepcopy(plain)
    rng = np.random.default_rng(5)
    batches = [random_batch(rng, 32, 5, 4) for _ in range(8)]  # target copies at steps 0, 3, 6
    for step, (a, b) in enumerate(run_both(plain, autograd, batches)):
        assert a.keys() == b.keys() == {"critic_loss", "actor_loss", "temp_loss", "temp"}
        for k in a:
            assert float(a[k]) == pytest.approx(float(b[k]), rel=1e-5, abs=1e-6), (step, k)
    assert calls["n"] == 16  # the critics' and the policy's, each step
    assert_same_weights_and_moments(plain, autograd)
    for a, b in zip(plain.modules["targ_q_function"].parameters(), plain.modules["q_function"].parameters()):
        assert not torch.equal(a, b)  # copied after step 6, trained on step 7


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**16), n=st.integers(1, 40), hidden=st.lists(st.integers(1, 40), min_size=1, max_size=3),
       gamma=st.floats(0.0, 1.0), n_critics=st.integers(2, 3), temperature=st.floats(0.01, 3.0), int32=st.booleans())
def test_one_discrete_sac_step_equals_autograd_on_random_problems(seed, n, hidden, gamma, n_critics, temperature, int32):
    plain = make_discrete_sac(hidden=hidden, gamma=gamma, n_critics=n_critics, initial_temperature=temperature)
    assert_one_step_matches(plain, random_batch(np.random.default_rng(seed), n, 5, 4, np.int32 if int32 else np.int64))


@pytest.mark.parametrize("make_algo, kwargs", [
    (make_bcq, {"share_encoder": False}), (make_bcq, {"n_critics": 2}),
    (make_bcq, {"q_func_factory": QRQFunctionFactory(n_quantiles=4)}),
    (make_bcq, {"encoder_factory": VectorEncoderFactory([16], use_layer_norm=True)}),
    (make_discrete_sac, {"n_critics": 1}), (make_discrete_sac, {"q_func_factory": QRQFunctionFactory(n_quantiles=4)}),
    (make_discrete_sac, {"encoder": VectorEncoderFactory([16], use_layer_norm=True)}),
])
def test_discrete_bcq_and_sac_other_networks_train_through_autograd(make_algo, kwargs, monkeypatch):
    calls = counting_backward(monkeypatch)
    algo = make_algo(**kwargs)
    algo.update(random_batch(np.random.default_rng(0), 8, 5, 4))
    assert calls["n"] == 0 and not algo._written_out_step_available()


def test_discrete_sac_hooks_train_through_autograd(monkeypatch):
    calls = counting_backward(monkeypatch)
    algo = make_discrete_sac()
    batch = random_batch(np.random.default_rng(0), 8, 5, 4)
    algo.update(batch)
    assert calls["n"] == 2
    for module in (algo.modules["policy"], algo.modules["policy"].fc, algo.modules["q_function"].head,
                   algo.modules["q_function"].encoder.mlp.layers[0]):
        seen = []
        handle = module.register_forward_hook(lambda m, inputs, output: seen.append(1))
        algo.update(batch)
        handle.remove()
        assert calls["n"] == 2 and seen, module  # autograd's step: the hook ran
    algo.update(batch)
    assert calls["n"] == 4


def make_actor_critic(name: str, hidden=(32, 16), **kwargs):
    encoder = kwargs.pop("encoder", VectorEncoderFactory(hidden_units=list(hidden)))
    kwargs.setdefault("critic_encoder_factory", encoder)
    for key in ("actor", "critic"):
        kwargs.setdefault(f"{key}_learning_rate", 1e-2)
        kwargs.setdefault(f"{key}_optim_factory", AdamFactory(eps=1e-4))  # see the DiscreteBCQ test
    config = getattr(offrl.algos, f"{name}Config")(actor_encoder_factory=encoder, **kwargs)
    offrl.seed(0)
    algo = config.create()
    algo.create_impl((5,), 2)
    return algo


ACTOR_CRITICS = [("DDPG", {}), ("DDPG", {"n_critics": 2}), ("TD3", {}), ("TD3PlusBC", {}), ("TD3PlusBC", {"n_critics": 3}),
                 ("PRDC", {})]


@pytest.mark.parametrize("name, kwargs", ACTOR_CRITICS)
def test_ddpg_family_written_out_steps_follow_the_autograd_steps(name, kwargs, monkeypatch):
    calls = counting_backward(monkeypatch)
    plain = make_actor_critic(name, **kwargs)
    rng = np.random.default_rng(6)
    batches = [continuous_batch(rng, 32, 5, 2) for _ in range(8)]
    if name == "PRDC":  # its neighbour index over the batches' (beta s, a)
        from offrl.dataset import MDPDataset

        plain.fit_neighbor_index(MDPDataset(np.concatenate([b.observations for b in batches]),
                                            np.concatenate([b.actions for b in batches]), np.zeros(256, np.float32),
                                            np.zeros(256), timeouts=np.r_[np.zeros(255), 1.0]))
    assert plain._written_out_step_available()
    autograd = copy.deepcopy(plain)
    for step, (a, b) in enumerate(run_seeded(plain, autograd, batches)):
        assert a.keys() == b.keys()
        for k in a:
            assert float(a[k]) == pytest.approx(float(b[k]), rel=1e-5, abs=1e-6), (step, k)
    interval = 1 if name == "DDPG" else 2
    assert calls["n"] == 8 + 8 // interval  # the critics' each step, the policy's on its steps
    assert_same_weights_and_moments(plain, autograd)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**16), n=st.integers(1, 40), hidden=st.lists(st.integers(1, 40), min_size=1, max_size=3),
       gamma=st.floats(0.0, 1.0), alpha=st.floats(0.1, 5.0), n_critics=st.integers(1, 3))
def test_one_td3_plus_bc_step_equals_autograd_on_random_problems(seed, n, hidden, gamma, alpha, n_critics):
    plain = make_actor_critic("TD3PlusBC", hidden=hidden, gamma=gamma, alpha=alpha, n_critics=n_critics,
                              update_actor_interval=1)
    assert_one_step_matches(plain, continuous_batch(np.random.default_rng(seed), n, 5, 2), seeded=True)


def test_other_actor_losses_keep_autograd_for_the_policy_only(monkeypatch):
    """ReBRAC (another actor loss) writes out only its critics' step, when
    those are plain (the PLAS family's actor through the decoder:
    tests/algos/test_plas.py)."""
    calls = counting_backward(monkeypatch)
    rng = np.random.default_rng(7)
    plain_critic = VectorEncoderFactory([32, 16])
    for name, kwargs in [("ReBRAC", {"critic_encoder_factory": plain_critic})]:
        plain = make_actor_critic(name, **kwargs)
        autograd = copy.deepcopy(plain)
        assert not plain._written_out_step_available()
        calls["n"] = 0
        run_seeded(plain, autograd, [continuous_batch(rng, 16, 5, 2) for _ in range(6)])
        assert calls["n"] == (6 if name == "ReBRAC" else 4)  # the critics' steps (PLAS past its warm-up)
        assert_same_weights_and_moments(plain, autograd)


def test_ddpg_family_hooks_and_other_networks_train_through_autograd(monkeypatch):
    calls = counting_backward(monkeypatch)
    rng = np.random.default_rng(8)
    layer_norm = make_actor_critic("TD3PlusBC", encoder=VectorEncoderFactory([16], use_layer_norm=True),
                                   update_actor_interval=1)
    layer_norm.update(continuous_batch(rng, 8, 5, 2))
    assert calls["n"] == 0 and not layer_norm._written_out_step_available()
    algo = make_actor_critic("TD3PlusBC", update_actor_interval=1)
    batch = continuous_batch(rng, 8, 5, 2)
    algo.update(batch)
    assert calls["n"] == 2
    q = algo.modules["q_function"]
    # a hook on a critic: both steps through autograd; on the policy: its step only (the critics' written out)
    assert_hooks_route(algo, batch, calls, [(q.head, 0), (q.encoder.mlp.layers[0], 0), (algo.modules["policy"].fc, 1)])


# ---------------------------------------------------- AWAC, CRR, IQL's policy
ADVANTAGE_WEIGHTED = [("AWAC", {}), ("AWAC", {"n_critics": 3}), ("CRR", {}), ("CRR", {"advantage_type": "max", "weight_type": "binary"}),
                      ("CRR", {"n_critics": 2, "target_update_type": "soft"}), ("IQL", {})]


def make_advantage_weighted(name: str, hidden=(32, 16), **kwargs):
    kwargs.setdefault("n_action_samples", 3) if name != "IQL" else None
    if name == "IQL":
        kwargs.setdefault("value_encoder_factory", VectorEncoderFactory(hidden_units=list(hidden)))
    return make_actor_critic(name, hidden=hidden, **kwargs)


@pytest.mark.parametrize("name, kwargs", ADVANTAGE_WEIGHTED)
def test_advantage_weighted_written_out_steps_follow_the_autograd_steps(name, kwargs, monkeypatch):
    calls = counting_backward(monkeypatch)
    plain = make_advantage_weighted(name, **kwargs)
    if name == "CRR":  # one log-std dimension beyond max_logstd: the clamp passes no gradient there
        with torch.no_grad():
            plain.modules["policy"].logstd.bias[0] = 3.0
    assert plain._written_out_step_available()
    autograd = copy.deepcopy(plain)
    rng = np.random.default_rng(9)
    for step, (a, b) in enumerate(run_seeded(plain, autograd, [continuous_batch(rng, 32, 5, 2) for _ in range(8)])):
        assert a.keys() == b.keys()
        for k in a:
            assert float(a[k]) == pytest.approx(float(b[k]), rel=1e-5, abs=1e-6), (step, k)
    assert calls["n"] == (24 if name == "IQL" else 16)  # the policy's and the critics' each step (IQL: and V's)
    if name == "IQL":  # the critics' and V's step: one fused Adam call over their shared optimizer's parameters
        assert plain._plain_critics_and_value()[3]._fusable
    assert_same_weights_and_moments(plain, autograd)
    if name == "CRR":
        assert plain.modules["policy"].logstd.bias.grad[0] == 0.0 and plain.modules["policy"].logstd.bias.grad[1] != 0.0


@settings(max_examples=20, deadline=None)
@given(name=st.sampled_from(["AWAC", "CRR", "IQL"]), seed=st.integers(0, 2**16), n=st.integers(1, 40),
       hidden=st.lists(st.integers(1, 40), min_size=1, max_size=3), gamma=st.floats(0.0, 1.0),
       temperature=st.floats(0.1, 5.0))
def test_one_advantage_weighted_step_equals_autograd_on_random_problems(name, seed, n, hidden, gamma, temperature):
    kwargs = {"AWAC": {"lam": temperature}, "CRR": {"beta": temperature}, "IQL": {"weight_temp": temperature}}[name]
    plain = make_advantage_weighted(name, hidden=hidden, gamma=gamma, **kwargs)
    # AWAC's weights are B softmax(A / lambda): up to B times a row's rounding (float32's 6e-8), so 1e-4 relative
    assert_one_step_matches(plain, continuous_batch(np.random.default_rng(seed), n, 5, 2), seeded=True, rtol=1e-4, atol=1e-5)


def test_advantage_weighted_hooks_and_other_networks_train_through_autograd(monkeypatch):
    calls = counting_backward(monkeypatch)
    rng = np.random.default_rng(10)
    batch = continuous_batch(rng, 8, 5, 2)
    layer_norm = make_advantage_weighted("CRR", encoder=VectorEncoderFactory([16], use_layer_norm=True))
    layer_norm.update(batch)
    assert calls["n"] == 0 and not layer_norm._written_out_step_available()
    algo = make_advantage_weighted("CRR")
    algo.update(batch)
    assert calls["n"] == 2
    policy, q = algo.modules["policy"], algo.modules["q_function"]
    # a hook on the policy: its step through autograd, the critics' written out; on the critics: the other way
    assert_hooks_route(algo, batch, calls, [(policy.logstd, 1), (policy.mu, 1), (policy.encoder.mlp.layers[0], 1),
                                            (q.encoder.encoder.mlp.layers[0], 1)])


BF16_WRITTEN = [("DQN", make), ("DiscreteBCQ", make_bcq), ("DiscreteSAC", make_discrete_sac), ("BC", make_bc),
                ("DiscreteBC", make_bc), ("TD3PlusBC", make_actor_critic), ("DDPG", make_actor_critic),
                ("CRR", make_advantage_weighted), ("AWAC", make_advantage_weighted), ("IQL", make_advantage_weighted),
                ("SAC", make_actor_critic), ("PLAS", make_actor_critic), ("PLASWithPerturbation", make_actor_critic)]


@pytest.mark.parametrize("name, factory", BF16_WRITTEN, ids=[n for n, _ in BF16_WRITTEN])
def test_bf16_mixed_written_out_steps_follow_autocasts_autograd_step(name, factory, monkeypatch):
    """A bf16-mixed update with the written-out passes (their hidden
    products in bf16, plain_mlp.plain_products) against the same update
    through autograd under autocast, from the same weights and draws: the
    same bf16 products, so the losses agree to a small fraction of bf16's
    unit roundoff u = 2**-8 (the float32 twin differs by up to 12 u,
    tests/test_precision.py), over steps where each network is used after
    another's optimizer step (a stale low-precision copy of a weight would
    be off by far more); and the steps differ from float32's. The autograd
    copy is made anew from the written-out one before each update, so each
    update starts from the same weights and optimizer state: bf16's
    roundings leave a near-zero gradient element with either sign, which
    Adam's first steps turn into a whole learning-rate step either way, and
    two copies run apart would drift by that (AWAC's softmax weights then
    move its actor loss by more than u)."""
    from offrl.training import precision

    precision.set_bf16_available(True)
    try:
        calls = counting_backward(monkeypatch)
        kwargs = {"precision": "bf16-mixed", "batch_size": 128}
        if factory in (make, make_bc):
            plain = factory(f"{name}Config", **kwargs)
        elif factory in (make_actor_critic, make_advantage_weighted):
            extra = {"TD3PlusBC": {"update_actor_interval": 1}, "PLAS": {"warmup_steps": 0},
                     "PLASWithPerturbation": {"warmup_steps": 0}}.get(name, {})
            plain = factory(name, **extra, **kwargs)
        else:
            plain = factory(**kwargs)
        float32 = copy.deepcopy(plain)
        float32._config = dataclasses.replace(plain._config, precision="float32")
        plain._written_out_faster_below = 0  # bf16 at the test's small batches too
        rng = np.random.default_rng(11)
        if factory in (make, make_bcq, make_discrete_sac):
            batches = [random_batch(rng, 24, 5, 4) for _ in range(3)]
        elif factory is make_bc:
            batches = [bc_batch(f"{name}Config", rng, 24) for _ in range(3)]
        else:
            batches = [continuous_batch(rng, 24, 5, 2) for _ in range(3)]
        assert plain.precision == "bf16-mixed"
        pairs = run_seeded(plain, None, batches)  # a stale bf16 copy in the written-out passes' cache: autograd's copy has no use for it
        assert calls["n"] >= 3  # the written-out passes ran, in the bf16-mixed step
        for step, (a, b) in enumerate(pairs):
            for k in a:
                assert abs(float(a[k]) - float(b[k])) <= 2**-8 * (abs(float(b[k])) + 1.0), (step, k)
        torch.manual_seed(0)
        f32 = float32.update(batches[0])
        assert any(float(f32[k]) != float(pairs[0][0][k]) for k in f32)  # bf16 products: not float32's values
    finally:
        precision.set_bf16_available(None)
