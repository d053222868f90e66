"""``precision="bf16-mixed"`` (offrl.training.precision): one update against
float32 from the same weights and batch, the float32 parts, saving and
export, the fallbacks and bad input.

Tolerance of a bf16-mixed loss against float32. bf16 keeps 8 significant
bits, so rounding a number to bf16 changes it by a relative u = 2**-8 at
most. In the mixed step each hidden layer rounds its inputs and weights to
bf16 (<= 2u on each product, float32 accumulation) and its output (u): <= 3u
a layer, 6u after the two hidden layers of these networks; the output
layers run in float32 on those features. A squared error doubles a relative
error: 12u = 0.047 relative to the loss, plus the same absolute for losses
that are differences of larger terms (an actor's Q - alpha log pi). The
bound is a worst case (errors of random sign add far more slowly): the
differences measured on these seven algorithms were at most 0.12u (4.5e-4
relative), two orders of magnitude inside it.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import warnings

import numpy as np
import pytest
import torch
from torch import nn

import offrl
from offrl.algos import (AWACConfig, BCConfig, BCQConfig, BEARConfig, CQLConfig, CRRConfig, DiscreteBCQConfig,
                         DiscreteCQLConfig, DiscreteSACConfig, DQNConfig, FQEConfig, IQLConfig, NonFiniteLossError, SACConfig,
                         TD3PlusBCConfig)
from offrl.algos import dqn as dqn_module
from offrl.algos import iql as iql_module
from offrl.algos import sac as sac_module
from offrl.dataset import MDPDataset
from offrl.logging import FileAdapterFactory
from offrl.models import EncoderFactory, VectorEncoderFactory
from offrl.models.layers import EnsembleLinear, Linear
from offrl.training import precision

U = 2.0 ** -8  # bf16's unit roundoff (8 significant bits)
TOLERANCE = 12 * U

SMALL = VectorEncoderFactory(hidden_units=[64, 64])
CONTINUOUS = {
    "bc": lambda **kw: BCConfig(encoder_factory=SMALL, **kw),
    "td3_plus_bc": lambda **kw: TD3PlusBCConfig(actor_encoder_factory=SMALL, critic_encoder_factory=SMALL, **kw),
    "iql": lambda **kw: IQLConfig(actor_encoder_factory=SMALL, critic_encoder_factory=SMALL, value_encoder_factory=SMALL, **kw),
    "cql": lambda **kw: CQLConfig(actor_encoder_factory=SMALL, critic_encoder_factory=SMALL, **kw),
    "sac": lambda **kw: SACConfig(actor_encoder_factory=SMALL, critic_encoder_factory=SMALL, **kw),
}
DISCRETE = {
    "dqn": lambda **kw: DQNConfig(encoder_factory=SMALL, **kw),
    "discrete_cql": lambda **kw: DiscreteCQLConfig(encoder_factory=SMALL, **kw),
    "discrete_bcq": lambda **kw: DiscreteBCQConfig(encoder_factory=SMALL, **kw),
    "discrete_sac": lambda **kw: DiscreteSACConfig(actor_encoder_factory=SMALL, critic_encoder_factory=SMALL, **kw),
}
ALL = {**CONTINUOUS, **DISCRETE}


@pytest.fixture(autouse=True)
def bf16_units():
    """bf16 on (emulated where the CPU lacks the units: same numbers, slower)."""
    precision.set_bf16_available(True)
    yield
    precision.set_bf16_available(None)


def _dataset(discrete: bool, n: int = 256, seed: int = 0) -> MDPDataset:
    rng = np.random.default_rng(seed)
    actions = rng.integers(3, size=n) if discrete else rng.uniform(-1, 1, size=(n, 2)).astype(np.float32)
    return MDPDataset(rng.normal(size=(n, 5)).astype(np.float32), actions, rng.normal(size=n).astype(np.float32) + 1.0,
                      (np.arange(n) % 32 == 31).astype(np.float32), action_size=3 if discrete else None)


def _twins(name: str, config=None, discrete=None, **fields):
    """A float32 and a bf16-mixed algorithm with the same weights, and a
    batch (``config``: a config maker other than ``ALL[name]``; ``fields``
    passed to it)."""
    config = config or ALL[name]
    discrete = name in DISCRETE if discrete is None else discrete
    # bf16 runs from this batch size on (below it BC, DQN and DiscreteCQL run their written-out float32 step)
    fields.setdefault("batch_size", precision.WRITTEN_OUT_FASTER_BELOW)
    dataset = _dataset(discrete)
    offrl.seed(0)
    f32 = config(precision="float32", **fields).create()
    f32.build_with_dataset(dataset)
    b16 = config(precision="bf16-mixed", **fields).create()
    b16.build_with_dataset(dataset)
    b16.modules.load_state_dict(f32.modules.state_dict())
    offrl.seed(1)
    batch = dataset.sample_transition_batch(128)
    return f32, b16, batch


def _update(algo, batch):
    torch.manual_seed(2)  # the same noise (SAC's samples, CQL's random actions) in both
    return algo.update(batch)


@pytest.mark.parametrize("name", sorted(ALL))
def test_one_bf16_update_matches_float32_within_bf16s_precision(name):
    f32, b16, batch = _twins(name)
    assert b16.precision == "bf16-mixed"
    expected, got = _update(f32, batch), _update(b16, batch)
    assert sorted(got) == sorted(expected)
    for key, value in expected.items():
        assert math.isfinite(got[key])
        assert abs(got[key] - value) <= TOLERANCE * (abs(value) + 1.0), (key, got[key], value)
    assert got != expected  # it did run in bf16


# algorithms that use a network again after stepping it within one update (the actor's loss reads the critic
# after the critic's step, BCQ's and BEAR's critic targets the imitator after its step)
STEPPED = {
    "awac": lambda **kw: AWACConfig(actor_encoder_factory=SMALL, critic_encoder_factory=SMALL, **kw),
    "crr": lambda **kw: CRRConfig(actor_encoder_factory=SMALL, critic_encoder_factory=SMALL, **kw),
    "bcq": lambda **kw: BCQConfig(actor_encoder_factory=SMALL, critic_encoder_factory=SMALL,
                                  imitator_encoder_factory=SMALL, **kw),
    "bear": lambda **kw: BEARConfig(actor_encoder_factory=SMALL, critic_encoder_factory=SMALL,
                                    imitator_encoder_factory=SMALL, **kw),
    "discrete_sac": lambda **kw: DiscreteSACConfig(actor_encoder_factory=SMALL, critic_encoder_factory=SMALL, **kw),
    "sac": CONTINUOUS["sac"],
    "td3_plus_bc": CONTINUOUS["td3_plus_bc"],
}


@pytest.mark.parametrize("name", sorted(STEPPED))
def test_a_network_stepped_earlier_in_the_update_is_used_with_its_new_weights(name):
    # autocast keeps each weight's bf16 copy until its region ends, and the update steps its optimizers inside
    # the region: without a fresh cast, a network used after its own step computed with its old weights (AWAC,
    # CRR, BEAR and DiscreteSAC's actor losses then differ from float32's by 7-20 times the tolerance here).
    # Every learning rate large, so that one step moves the weights far
    rates = {f.name: 0.3 for f in dataclasses.fields(STEPPED[name]()) if f.name.endswith("learning_rate")}
    f32, b16, batch = _twins(name, STEPPED[name], name == "discrete_sac", **rates)
    expected, got = _update(f32, batch), _update(b16, batch)
    assert sorted(got) == sorted(expected)
    for key, value in expected.items():
        assert abs(got[key] - value) <= TOLERANCE * (abs(value) + 1.0), (key, got[key], value)


def test_an_optimizer_step_inside_autocast_refreshes_the_bf16_weights():
    layer = nn.Linear(4, 4)
    optim = offrl.optimizers.AdamFactory().create(layer.named_parameters(), lr=0.5)
    x = torch.ones(2, 4)
    with precision.autocast(torch.device("cpu")):
        optim.zero_grad()
        layer(x).sum().backward()
        optim.step()
        inside = layer(x).float()
    with precision.autocast(torch.device("cpu")):
        fresh = layer(x).float()
    assert torch.equal(inside, fresh)


@pytest.mark.parametrize("cache_safe", [None, False])
def test_a_weight_first_cast_without_grad_still_gets_its_gradient(monkeypatch, cache_safe):
    # a target computed under no_grad casts a network's weights first; the same network's loss then needs their
    # gradients (torch 2.5's autocast cache reused the cast made without grad: the step turns the cache off there)
    if cache_safe is not None:
        monkeypatch.setitem(precision._CACHE_SAFE, "cpu", cache_safe)
    layer = nn.Linear(8, 8)
    x = torch.ones(2, 8)
    context = precision.autocast(torch.device("cpu"))
    assert context._cache_enabled is precision._autocast_cache_safe("cpu")
    with context:
        with torch.no_grad():
            layer(x)
        layer(x).float().sum().backward()
    assert layer.weight.grad is not None and layer.weight.grad.abs().sum() > 0
    if cache_safe is not None:  # forced off: the step's autocast keeps no cache
        assert precision._autocast_cache_safe("cpu") is False


def test_the_hidden_products_run_in_bf16_and_the_outputs_in_float32(monkeypatch):
    """The wide hidden product (64 inputs) in bf16; the first layer (5 observation + 2
    action inputs, under ``narrow_inputs``' 32) and the head in float32."""
    f32, b16, batch = _twins("sac")
    seen = {}
    q_function = b16.modules["q_function"]
    first, hidden = [m for m in q_function.modules() if isinstance(m, (EnsembleLinear, Linear))][:2]
    assert first.in_features == 7 and hidden.in_features == 64
    first.register_forward_hook(lambda m, i, o: seen.setdefault("first", o.dtype) and None)
    hidden.register_forward_hook(lambda m, i, o: seen.setdefault("hidden", o.dtype) and None)
    targets = []
    real = sac_module.td_target
    monkeypatch.setattr(sac_module, "td_target", lambda *a, **k: targets.append(real(*a, **k).dtype) or real(*a, **k))
    result = b16.training_step(batch)
    assert seen == {"first": torch.float32, "hidden": torch.bfloat16}
    assert targets == [torch.float32]
    assert all(v.dtype == torch.float32 for v in result.metrics.values())
    with precision.autocast(b16.device):  # the shared networks' outputs inside a mixed step
        obs = torch.randn(4, 5)
        assert q_function.expected(obs, torch.zeros(4, 2)).dtype == torch.float32
        mean, logstd = b16.modules["policy"](obs)
        assert mean.dtype == logstd.dtype == torch.float32


@pytest.mark.parametrize("name", ["iql", "dqn"])
def test_weights_gradients_optimizer_state_and_targets_stay_float32(name, monkeypatch):
    _, b16, batch = _twins(name)
    module = iql_module if name == "iql" else dqn_module
    targets = []
    real = module.td_target
    monkeypatch.setattr(module, "td_target", lambda *a, **k: targets.append(real(*a, **k)) or targets[-1])
    for _ in range(2):
        result = b16.training_step(batch)
    assert targets and all(t.dtype == torch.float32 for t in targets)
    if result.td_errors is not None:
        assert result.td_errors.dtype == torch.float32
    for param in b16.modules.parameters():
        assert param.dtype == torch.float32
        assert param.grad is None or param.grad.dtype == torch.float32
    states = [v for optim in b16.optimizers.values() for s in optim.optim.state.values() for v in s.values()
              if isinstance(v, torch.Tensor) and v.is_floating_point()]
    assert states and all(v.dtype == torch.float32 for v in states)


def test_a_bf16_trained_model_saves_loads_predicts_and_exports_in_float32(tmp_path):
    from offrl.export import load_onnx_policy, load_torchscript_policy

    f32, b16, batch = _twins("iql")
    for _ in range(3):
        b16.update(batch)
    obs = np.random.default_rng(3).normal(size=(7, 5)).astype(np.float32)
    predicted = b16.predict(obs)
    assert predicted.dtype == np.float32
    f32.modules.load_state_dict(b16.modules.state_dict())
    np.testing.assert_array_equal(f32.predict(obs), predicted)  # predict is float32, no autocast
    path = tmp_path / "iql.d3"
    b16.save(str(path))
    loaded = offrl.load_learnable(str(path))
    assert loaded.config.precision == "bf16-mixed"
    np.testing.assert_array_equal(loaded.predict(obs), predicted)
    np.testing.assert_array_equal(loaded.predict_value(obs, predicted), b16.predict_value(obs, predicted))
    for ext, loader in ((".pt", load_torchscript_policy), (".onnx", load_onnx_policy)):
        b16.save_policy(str(tmp_path / f"policy{ext}"))
        got = loader(str(tmp_path / f"policy{ext}"))(obs)
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, predicted, atol=1e-5, rtol=1e-5)


def test_without_bf16_units_it_warns_once_and_runs_the_float32_path():
    precision.set_bf16_available(False)
    f32, b16, batch = _twins("td3_plus_bc")
    with pytest.warns(RuntimeWarning, match=r"precision='bf16-mixed'.*training runs in float32"):
        assert b16.precision == "float32"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once: no second warning
        assert _update(b16, batch) == _update(f32, batch)  # bit for bit the float32 step
        other = ALL["dqn"](precision="bf16-mixed").create()
        assert other.precision == "float32"


def test_the_memory_check_probes_in_float32_without_a_false_fallback_warning(monkeypatch, tmp_path):
    # fit sizes one training step on torch's meta device before training; on a CPU with bf16 units that probe
    # once warned "meta device has no bf16 units; training runs in float32" although training ran in bf16
    from offrl.algos import _sizing

    precision.set_bf16_available(None)
    monkeypatch.delenv(precision.ENV_VAR, raising=False)
    monkeypatch.setattr(precision, "_detect", lambda kind, device: kind == "cpu")  # a CPU with bf16 units
    dataset = _dataset(False)
    algo = ALL["td3_plus_bc"](precision="bf16-mixed").create()
    with warnings.catch_warnings(record=True) as caught:  # recorded: the probe's own errors are caught by the check
        warnings.simplefilter("always")
        algo.fit(dataset, n_steps=2, n_steps_per_epoch=2, show_progress=False, save_interval=10**6,
                 logger_adapter=FileAdapterFactory(str(tmp_path)))
        assert algo.precision == "bf16-mixed"
        sized = _sizing.training_step_bytes(algo, dataset)
    assert [str(w.message) for w in caught if "precision" in str(w.message)] == []
    reference = ALL["td3_plus_bc"]().create()
    reference.build_with_dataset(dataset)
    assert sized is not None and sized == _sizing.training_step_bytes(reference, dataset)  # float32's step: a bound


def test_the_environment_variable_turns_bf16_off_and_on(monkeypatch):
    precision.set_bf16_available(None)
    monkeypatch.setenv(precision.ENV_VAR, "0")
    with pytest.warns(RuntimeWarning, match=f"{precision.ENV_VAR}=0"):
        assert SACConfig(precision="bf16-mixed").create().precision == "float32"
    monkeypatch.setenv(precision.ENV_VAR, "1")
    assert SACConfig(precision="bf16-mixed").create().precision == "bf16-mixed"
    assert SACConfig().create().precision == "float32"


def test_the_hardware_check_reads_the_cpu_flags_and_the_gpu_capability(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx512f avx512_bf16\n")
    assert precision.cpu_bf16_flags(str(cpuinfo)) == ("avx512_bf16",)
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2\n")
    assert precision.cpu_bf16_flags(str(cpuinfo)) == ()
    cpuinfo.write_text("processor\t: 0\nFeatures\t: fp asimd bf16 i8mm\n")  # ARM (Graviton 3, ...)
    assert precision.cpu_bf16_flags(str(cpuinfo)) == ("bf16",)
    assert precision.cpu_bf16_flags(str(tmp_path / "absent")) == ()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for capability, expected in (((8, 0), True), ((9, 0), True), ((7, 5), False)):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None, c=capability: c)
        assert precision._detect("cuda", torch.device("cuda")) is expected


def test_on_cuda_the_step_autocasts_cuda_to_bf16():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that CUDA is absent here
        context = precision.autocast(torch.device("cuda", 0))
    assert context.device == "cuda" and context.fast_dtype == torch.bfloat16
    context = precision.autocast(torch.device("cpu"))
    assert context.device == "cpu" and context.fast_dtype == torch.bfloat16


def test_an_unknown_precision_lists_the_valid_ones():
    for make in (lambda: IQLConfig(precision="fp16"), lambda: FQEConfig(precision="bf16"),
                 lambda: DQNConfig().set_params(precision="float16")):
        with pytest.raises(ValueError, match=r"precision must be one of \['float32', 'bf16-mixed'\]"):
            make()


def test_the_field_is_keyword_only_defaults_to_float32_and_round_trips():
    parameter = inspect.signature(IQLConfig).parameters["precision"]
    assert parameter.kind is inspect.Parameter.KEYWORD_ONLY and parameter.default == "float32"
    assert FQEConfig().precision == "float32"
    record = IQLConfig(precision="bf16-mixed").to_dict()
    assert IQLConfig.from_dict(record).precision == "bf16-mixed"
    del record["params"]["precision"]  # a file written before the field
    assert IQLConfig.from_dict(record).precision == "float32"
    assert IQLConfig.deserialize(IQLConfig(precision="bf16-mixed").serialize()).precision == "bf16-mixed"


class _Float32Only(nn.Module):
    """A custom encoder built around a float32-only operation."""

    def __init__(self, observation_shape, feature_size):
        super().__init__()
        self.fc = nn.Linear(observation_shape[0], feature_size)
        self.out = nn.Linear(feature_size, feature_size)

    def forward(self, x):
        h = torch.relu(self.fc(x))
        if h.dtype != torch.float32:
            raise TypeError(f"_Float32Only needs float32, got {h.dtype}")
        return torch.relu(self.out(h))


class _Float32OnlyFactory(EncoderFactory):
    def __init__(self, feature_size=32):
        self.feature_size = feature_size

    def create(self, observation_shape):
        return _Float32Only(observation_shape, self.feature_size)

    @staticmethod
    def get_type():
        return "test_float32_only"


def test_a_custom_encoder_that_cannot_run_in_bf16_falls_back_to_float32_with_one_warning():
    dataset = _dataset(discrete=True)
    algo = DQNConfig(encoder_factory=_Float32OnlyFactory(), precision="bf16-mixed").create()
    algo.build_with_dataset(dataset)
    batch = dataset.sample_transition_batch(32)
    with pytest.warns(RuntimeWarning, match=r"q_func.*\(_Float32Only\).*cannot run in bf16 \(TypeError"):
        losses = algo.update(batch)
    assert all(math.isfinite(v) for v in losses.values())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        algo.update(batch)
    assert algo.precision == "bf16-mixed"
    obs = np.zeros((2, 5), dtype=np.float32)
    assert algo.predict(obs).shape == (2,)


class _Plain(_Float32Only):
    def forward(self, x):
        return torch.relu(self.out(torch.relu(self.fc(x))))


class _PlainFactory(_Float32OnlyFactory):
    def create(self, observation_shape):
        return _Plain(observation_shape, self.feature_size)


def test_a_custom_encoder_that_runs_in_bf16_is_left_alone():
    dataset = _dataset(discrete=True)
    algo = DQNConfig(encoder_factory=_PlainFactory(), precision="bf16-mixed").create()
    algo.build_with_dataset(dataset)
    seen = []
    encoder = next(m for m in algo.modules.modules() if isinstance(m, _Plain))
    encoder.out.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        algo.update(dataset.sample_transition_batch(32))
    assert torch.bfloat16 in seen


def test_a_loss_that_becomes_non_finite_in_bf16_names_the_precision(tmp_path):
    f32, b16, batch = _twins("iql")
    batch.rewards[:] = 1e30  # squared: inf
    with pytest.raises(NonFiniteLossError, match=r"loss is inf at step \d+ with precision='bf16-mixed'"):
        b16.update(batch)
    rng = np.random.default_rng(0)
    huge = MDPDataset(rng.normal(size=(64, 5)).astype(np.float32), rng.uniform(-1, 1, size=(64, 2)).astype(np.float32),
                      np.full(64, 1e30, dtype=np.float32), (np.arange(64) % 16 == 15).astype(np.float32))
    algo = CONTINUOUS["iql"](batch_size=64, precision="bf16-mixed").create()  # from its written-out threshold on: bf16
    with pytest.raises(NonFiniteLossError, match=r"precision='bf16-mixed'.*restored"):
        algo.fit(huge, 4, 2, logger_adapter=FileAdapterFactory(str(tmp_path)), show_progress=False)
    assert not list(tmp_path.rglob("*.d3"))  # nothing diverged was saved


def test_the_onednn_float32_path_steps_aside_under_autocast():
    """offrl's layers send wide float32 CPU products to oneDNN through their
    own autograd functions, which autocast cannot see: in a mixed step they
    take autocast's bf16 products instead."""
    x = torch.randn(256, 256)
    for layer in (EnsembleLinear(2, 256, 256), Linear(256, 256)):
        assert layer(x).dtype == torch.float32
        with precision.autocast(torch.device("cpu")):
            assert layer(x).dtype == torch.bfloat16


def test_fqe_takes_the_precision_too():
    from offrl.algos import FQE

    f32_policy, _, batch = _twins("td3_plus_bc")
    dataset = _dataset(discrete=False)
    evaluators = {}
    for name in ("float32", "bf16-mixed"):
        offrl.seed(0)
        evaluators[name] = FQE(algo=f32_policy, config=FQEConfig(encoder_factory=SMALL, precision=name,
                                                                 batch_size=precision.WRITTEN_OUT_FASTER_BELOW))
        evaluators[name].build_with_dataset(dataset)
    evaluators["bf16-mixed"].modules.load_state_dict(evaluators["float32"].modules.state_dict())
    assert evaluators["bf16-mixed"].precision == "bf16-mixed"
    expected, got = _update(evaluators["float32"], batch)["loss"], _update(evaluators["bf16-mixed"], batch)["loss"]
    assert got != expected and abs(got - expected) <= TOLERANCE * (abs(expected) + 1.0)
    below = precision.WRITTEN_OUT_FASTER_BELOW - 1
    small = FQE(algo=f32_policy, config=FQEConfig(encoder_factory=SMALL, precision="bf16-mixed", batch_size=below))
    small.build_with_dataset(dataset)
    with pytest.warns(RuntimeWarning, match=f"FQE at batch_size {below} trains in float32 with its backward written out"):
        assert small.precision == "float32"  # FQE's step is written out too


@pytest.mark.parametrize("name", ["bc", "dqn", "discrete_cql", "discrete_bcq", "discrete_sac", "td3_plus_bc", "sac", "iql"])
def test_small_batches_run_the_written_out_float32_step(name):
    """Below WRITTEN_OUT_FASTER_BELOW rows on the CPU (an algorithm's own
    measured size where it has one), an algorithm whose float32 step has its
    backward written out runs that step (faster than bf16-mixed there), with
    one warning; from that size on it runs bf16, and so does any network
    whose step is not written out."""
    from offrl.models import plain_mlp

    precision._WARNED.clear()
    below = type(ALL[name]().create())._written_out_faster_below
    assert below == {"discrete_sac": 32, "td3_plus_bc": 64, "sac": 32, "iql": 64}.get(name, precision.WRITTEN_OUT_FASTER_BELOW)
    small = ALL[name](precision="bf16-mixed", batch_size=below - 1).create()
    assert small.precision == "bf16-mixed"  # not built: no step yet
    small.build_with_dataset(_dataset(name in DISCRETE))
    with pytest.warns(RuntimeWarning, match="trains in float32 with its backward written out"):
        assert small.precision == "float32"
    batch = _dataset(name in DISCRETE).sample_transition_batch(16)
    dtypes = []
    actor_critic = name in ("discrete_sac", "td3_plus_bc", "sac", "iql")
    hook = small.modules["policy" if name == "bc" or actor_critic else "q_function"].encoder
    (hook if name == "bc" or actor_critic else hook.encoder).register_forward_hook(
        lambda m, i, out: dtypes.append(out.dtype))
    small.update(batch)  # a hook: the autograd step, in float32 (the precision in effect)
    assert dtypes == [torch.float32] * len(dtypes) and dtypes
    large = ALL[name](precision="bf16-mixed", batch_size=below).create()
    large.build_with_dataset(_dataset(name in DISCRETE))
    assert large.precision == "bf16-mixed"
    normalised = VectorEncoderFactory([16], use_layer_norm=True)  # another network: not written out
    encoders = ({"actor_encoder_factory": normalised, "critic_encoder_factory": normalised} if actor_critic
                else {"encoder_factory": normalised})
    config = {"bc": BCConfig, "dqn": DQNConfig, "discrete_cql": DiscreteCQLConfig, "discrete_bcq": DiscreteBCQConfig,
              "discrete_sac": DiscreteSACConfig, "td3_plus_bc": TD3PlusBCConfig, "sac": SACConfig, "iql": IQLConfig}[name]
    other = config(precision="bf16-mixed", batch_size=32, **encoders).create()
    other.build_with_dataset(_dataset(name in DISCRETE))
    assert other.precision == "bf16-mixed"
    plain_mlp.plain_backward_enabled(False)
    try:
        assert small.precision == "bf16-mixed"  # switched off: the autograd step, in bf16
    finally:
        plain_mlp.plain_backward_enabled(True)


def test_the_written_out_rule_is_for_the_cpu_only():
    assert precision.written_out_step_is_faster("bf16-mixed", "DQN", 32, "cpu")
    assert not precision.written_out_step_is_faster("bf16-mixed", "DQN", 32, "cuda:0")
    assert not precision.written_out_step_is_faster("bf16-mixed", "DQN", precision.WRITTEN_OUT_FASTER_BELOW, "cpu")
    assert not precision.written_out_step_is_faster("float32", "DQN", 32, "cpu")


def test_the_largest_product_counts_linear_layers_and_ensembles_and_gives_up_on_unknown_matrices():
    mlp = nn.Sequential(nn.Linear(23, 256), nn.LayerNorm(256), nn.ReLU(), Linear(256, 300), nn.Linear(300, 1))
    assert precision.largest_product(mlp, 64) == 64 * 256 * 300
    ensemble = nn.ModuleDict({"q": nn.Sequential(EnsembleLinear(3, 23, 256), EnsembleLinear(3, 256, 256)),
                              "embed": nn.Embedding(10, 8), "norm": nn.BatchNorm1d(8)})
    assert precision.largest_product(ensemble, 10) == 10 * 3 * 256 * 256  # three members' products
    temperature = nn.Module()
    temperature.log_alpha = nn.Parameter(torch.zeros(1, 1))  # a scalar parameter costs no product
    assert precision.largest_product(nn.ModuleList([temperature, nn.Linear(4, 5)]), 2) == 2 * 4 * 5
    assert precision.largest_product(nn.Sequential(nn.Conv2d(4, 32, 8), nn.Linear(256, 256)), 32) is None
    custom = nn.Module()
    custom.kernel = nn.Parameter(torch.zeros(16, 16))  # a matrix of unknown use
    assert precision.largest_product(nn.ModuleList([custom, nn.Linear(4, 5)]), 2) is None
    assert precision.largest_product(nn.ModuleDict(), 256) is None  # nothing built


def test_on_cuda_small_products_train_in_float32_with_one_warning_and_large_ones_in_bf16():
    pays = precision.CUDA_BF16_PAYS_FROM
    with pytest.warns(RuntimeWarning, match=r"SAC's largest product per step \(1.7e\+07 multiply-adds\)"):
        assert precision.products_too_small("bf16-mixed", "SAC", 256 * 256 * 256, "cuda:0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per algorithm
        assert precision.products_too_small("bf16-mixed", "SAC", 256 * 256 * 256, "cuda:0")
        assert not precision.products_too_small("bf16-mixed", "SAC", pays, "cuda:0")
        assert not precision.products_too_small("bf16-mixed", "SAC", None, "cuda:0")  # unknown: bf16 as asked
        assert not precision.products_too_small("bf16-mixed", "SAC", 256, "cpu")  # the rule is CUDA's
        assert not precision.products_too_small("float32", "SAC", 256, "cuda:0")
    small = SACConfig(precision="bf16-mixed").create()
    large = SACConfig(precision="bf16-mixed", batch_size=1024,
                      actor_encoder_factory=VectorEncoderFactory(hidden_units=[4096, 4096]),
                      critic_encoder_factory=VectorEncoderFactory(hidden_units=[4096, 4096])).create()
    for algo in (small, large):
        algo.build_with_dataset(_dataset(False))
        algo._device = torch.device("cuda", 0)  # the rule reads the device only (no GPU here)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert small.precision == "float32"  # d3rlpy's networks: 2 critics x 256 rows x 256 x 256
    assert small._largest_product() == 2 * 256 * 256 * 256
    assert large.precision == "bf16-mixed" and large._largest_product() == 2 * 1024 * 4096 * 4096 >= pays
