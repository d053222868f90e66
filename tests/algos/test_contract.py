"""The contract every registered algorithm meets (in the spirit of
scikit-learn's estimator checks). An algorithm joins by being registered:
every module in ``offrl.algos`` is imported and every registered config runs
through the same checks."""

from __future__ import annotations

import importlib
import os
import pkgutil

import numpy as np
import pytest
from sklearn.base import clone

import offrl
import offrl.algos
from offrl.constants import ActionSpace
from offrl.logging import NoopAdapterFactory
from offrl.preprocessing import (
    MinMaxActionScaler,
    PixelObservationScaler,
    StandardObservationScaler,
    StandardRewardScaler,
    TupleObservationScaler,
)
from offrl.serialization import registered


for _module in pkgutil.iter_modules(offrl.algos.__path__):
    importlib.import_module(f"offrl.algos.{_module.name}")

#: run the suite on another device, e.g. OFFRL_TEST_DEVICE=cuda:0 on a GPU machine
DEVICE = os.environ.get("OFFRL_TEST_DEVICE", "cpu")

CONFIGS = dict(sorted(registered("algorithm").items()))
#: an exported policy runs on the CPU; ``predict`` runs on DEVICE. On a GPU its float32 kernels (a transformer's
#: attention and layer-norm reductions) sum in another order: 2e-5 apart on Decision Transformer on an H200
EXPORT_TOLERANCE = 1e-5 if DEVICE == "cpu" else 1e-4


def _action_kinds(config_cls) -> list[bool]:
    """Which action spaces (discrete=True/False) the algorithm learns."""
    kind = config_cls.algorithm_class()._action_type
    if kind == ActionSpace.BOTH:
        return [False, True]
    return [kind == ActionSpace.DISCRETE]


def _scalers(kind: str, discrete: bool) -> dict:
    observation = {
        "vector": StandardObservationScaler(),
        "image": PixelObservationScaler(),
        "tuple": TupleObservationScaler([StandardObservationScaler(), PixelObservationScaler()]),
    }[kind]
    scalers = {"observation_scaler": observation, "reward_scaler": StandardRewardScaler()}
    if not discrete:
        scalers["action_scaler"] = MinMaxActionScaler()
    return scalers


def _evaluated(discrete: bool, kind: str, device=DEVICE, scalers: bool = True):
    """The policy an algorithm that evaluates another (``evaluates_algorithm``:
    FQE) is made around: behaviour cloning, built when first needed."""
    config = (offrl.algos.DiscreteBCConfig if discrete else offrl.algos.BCConfig)(
        batch_size=8, **(_scalers(kind, discrete) if scalers else {}))
    return config.create(device=device)


def _make(name: str, kind: str, discrete: bool, device=DEVICE, scalers: bool = True):
    """``(config, algorithm)``; ``scalers=False`` leaves the scalers out (an
    environment cannot fit a standard scaler)."""
    cls = CONFIGS[name]
    config = cls(batch_size=8, **(_scalers(kind, discrete) if scalers else {}))
    if cls.algorithm_class().evaluates_algorithm:
        return config, cls.algorithm_class()(algo=_evaluated(discrete, kind, device, scalers), config=config, device=device)
    return config, config.create(device=device)


def _trainable(algo) -> bool:
    return algo.is_trainable


def _build(algo, dataset) -> None:
    if algo.evaluates_algorithm and not algo.algo.is_built:
        algo.algo.build_with_dataset(dataset)
    algo.build_with_dataset(dataset)


def _fit(algo, dataset, steps: int = 3):
    if algo.evaluates_algorithm and not algo.algo.is_built:
        algo.algo.build_with_dataset(dataset)
    return algo.fit(dataset, n_steps=steps, n_steps_per_epoch=2, logger_adapter=NoopAdapterFactory(), show_progress=False)


def _load(algo, path):
    """A saved algorithm read back (one that evaluates another is given it again)."""
    if algo.evaluates_algorithm:
        return type(algo).load(path, algo=algo.algo, device=DEVICE)
    return offrl.load_learnable(path, device=DEVICE)


def _observations(dataset, n: int = 5):
    arrays = dataset.to_arrays()["observations"]
    if isinstance(arrays, list):
        return [a[:n] for a in arrays]
    return arrays[:n]


def _actions(dataset, n: int = 5):
    actions = dataset.to_arrays()["actions"][:n]
    return actions[:, 0] if np.issubdtype(actions.dtype, np.integer) else actions


def _context(dataset, n: int = 5):
    """The first ``n`` steps of ``dataset`` as one context (sequence models)."""
    arrays = dataset.to_arrays()
    rewards = np.asarray(arrays["rewards"][:n], dtype=np.float32).reshape(n, 1)
    returns_to_go = np.cumsum(rewards[::-1])[::-1].reshape(n, 1).copy()
    return offrl.algos.TransformerInput(observations=_observations(dataset, n), actions=_actions(dataset, n),
                                        rewards=rewards, returns_to_go=returns_to_go, timesteps=np.arange(n))


def _predict(algo, dataset, n: int = 5):
    """``predict`` on ``n`` observations, or on a context of ``n`` steps for
    an algorithm that ``predicts_from_sequences``."""
    return algo.predict(_context(dataset, n) if algo.predicts_from_sequences else _observations(dataset, n))


def _sequence_actions(algo, dataset, n: int = 5, sample: bool = False):
    """Actions of a sequence model acting step by step through its stateful
    wrapper over the first ``n`` observations of ``dataset``."""
    discrete = algo.get_action_type() == ActionSpace.DISCRETE
    sampler = offrl.algos.SoftmaxTransformerActionSampler() if sample and discrete else None
    actor = algo.as_stateful_wrapper(target_return=1.0, action_sampler=sampler)
    obs = _observations(dataset, n)
    steps = [[o[i] for o in obs] if isinstance(obs, list) else obs[i] for i in range(n)]
    return np.stack([np.asarray(actor.predict(x, 0.5)) for x in steps])


CASES = [
    (name, kind, discrete)
    for name, cls in CONFIGS.items()
    for discrete in _action_kinds(cls)
    for kind in ("vector", "image", "tuple")
]
IDS = [f"{n}-{k}-{'discrete' if d else 'continuous'}" for n, k, d in CASES]


@pytest.mark.parametrize("name,kind,discrete", CASES, ids=IDS)
def test_fit_predict_shapes(name, kind, discrete, dataset_factory):
    make_dataset = dataset_factory
    offrl.seed(0)
    dataset = make_dataset(kind, discrete)
    config, algo = _make(name, kind, discrete)
    before = config.to_dict()
    if _trainable(algo):
        results = _fit(algo, dataset)
        assert [epoch for epoch, _ in results] == [1, 2]
        for _, metrics in results:
            assert all(isinstance(v, float) and np.isfinite(v) for v in metrics.values())
        assert algo.grad_step == 3
    else:
        with pytest.raises((RuntimeError, TypeError, NotImplementedError)):
            _fit(algo, dataset)
        _build(algo, dataset)
    assert config.to_dict() == before, "fit must not change the user's config"

    if algo.predicts_from_sequences:  # predict takes a context; acting goes through the stateful wrapper
        output = _predict(algo, dataset)
        assert output.shape == (2,) and np.isfinite(output).all()
        acted = _sequence_actions(algo, dataset)
        assert acted.shape == ((5,) if discrete else (5, 2))
        assert ((acted >= 0) & (acted < 2)).all() if discrete else np.isfinite(acted).all()
        return
    x = _observations(dataset)
    actions = algo.predict(x)
    sampled = algo.sample_action(x)
    if discrete:
        assert actions.shape == (5,) and np.issubdtype(actions.dtype, np.integer)
        assert sampled.shape == (5,)
        assert ((actions >= 0) & (actions < 2)).all()
    else:
        assert actions.shape == (5, 2) and actions.dtype == np.float32
        assert sampled.shape == (5, 2)
        assert np.isfinite(actions).all()
    try:
        values = algo.predict_value(x, _actions(dataset))
    except NotImplementedError:
        pass
    else:
        assert values.shape == (5,) and np.isfinite(values).all()


@pytest.mark.parametrize("name,kind,discrete", [c for c in CASES if c[1] != "image"], ids=[i for i, c in zip(IDS, CASES) if c[1] != "image"])
def test_save_load_gives_identical_predictions(name, kind, discrete, tmp_path, dataset_factory):
    make_dataset = dataset_factory
    offrl.seed(1)
    dataset = make_dataset(kind, discrete)
    _, algo = _make(name, kind, discrete)
    if _trainable(algo):
        _fit(algo, dataset, steps=2)
    else:
        _build(algo, dataset)
    path = tmp_path / "model.d3"
    algo.save(path)
    loaded = _load(algo, path)
    assert type(loaded) is type(algo)
    assert loaded.grad_step == algo.grad_step
    assert loaded.config.to_dict() == algo.config.to_dict()
    x = _observations(dataset)
    if not algo.predicts_stochastically:
        np.testing.assert_array_equal(_predict(loaded, dataset), _predict(algo, dataset))
    try:
        expected = algo.predict_value(x, _actions(dataset))
    except NotImplementedError:
        return
    np.testing.assert_array_equal(loaded.predict_value(x, _actions(dataset)), expected)
    # load_model into a fresh algorithm of the same config
    fresh = clone(algo)
    fresh.load_model(path)
    np.testing.assert_array_equal(fresh.predict_value(x, _actions(dataset)), expected)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_same_seed_same_result(name, dataset_factory):
    make_dataset = dataset_factory
    discrete = _action_kinds(CONFIGS[name])[0]
    dataset = make_dataset("vector", discrete)
    outputs = []
    for _ in range(2):
        offrl.seed(123)
        _, algo = _make(name, "vector", discrete)
        if _trainable(algo):
            _fit(algo, dataset, steps=4)
        else:
            _build(algo, dataset)
        offrl.seed(7)
        if algo.predicts_from_sequences:
            outputs.append((_predict(algo, dataset), _sequence_actions(algo, dataset, sample=True)))
            continue
        outputs.append((algo.predict(_observations(dataset)), algo.sample_action(_observations(dataset))))
    np.testing.assert_array_equal(outputs[0][0], outputs[1][0])
    np.testing.assert_array_equal(outputs[0][1], outputs[1][1])


@pytest.mark.parametrize("name", list(CONFIGS))
def test_clone_and_params(name):
    discrete = _action_kinds(CONFIGS[name])[0]
    _, algo = _make(name, "vector", discrete)
    params = algo.get_params()
    assert params["config"] is algo.config
    assert params["config__batch_size"] == 8
    cloned = clone(algo)
    assert type(cloned) is type(algo)
    assert cloned.config.to_dict() == algo.config.to_dict()
    assert cloned.config is not algo.config
    assert not cloned.is_built
    original = algo.config
    algo.set_params(batch_size=16)
    assert algo.batch_size == 16 and original.batch_size == 8
    with pytest.raises(ValueError, match="no parameter"):
        algo.set_params(not_a_field=1)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_config_json_round_trip(name):
    discrete = _action_kinds(CONFIGS[name])[0]
    config, _ = _make(name, "tuple", discrete)
    data = config.to_dict()
    rebuilt = type(config).from_dict(data)
    assert rebuilt.to_dict() == data
    assert offrl.serialization.from_json_value(data).to_dict() == data


@pytest.mark.parametrize("name", list(CONFIGS))
def test_bad_input(name, dataset_factory):
    make_dataset = dataset_factory
    discrete = _action_kinds(CONFIGS[name])[0]
    dataset = make_dataset("vector", discrete)
    _, algo = _make(name, "vector", discrete)
    with pytest.raises(RuntimeError, match="no networks"):
        _predict(algo, dataset)
    _build(algo, dataset)
    if algo.predicts_from_sequences:  # a context whose observations have the wrong width
        context = _context(dataset, 2)
        with pytest.raises(ValueError, match="shape"):
            algo.predict(offrl.algos.TransformerInput(np.zeros((2, 4), np.float32), context.actions, context.rewards,
                                                      context.returns_to_go, context.timesteps))
    else:
        with pytest.raises(ValueError, match="shape"):
            algo.predict(np.zeros(3, dtype=np.float32))  # no batch dimension
        with pytest.raises(ValueError, match="shape"):
            algo.predict(np.zeros((2, 4), dtype=np.float32))
    if _trainable(algo):
        with pytest.raises(ValueError, match="n_steps"):
            algo.fit(dataset, n_steps=0, logger_adapter=NoopAdapterFactory(), show_progress=False)
    other = make_dataset("vector", not discrete)
    if algo.get_action_type() != ActionSpace.BOTH and _trainable(algo):
        fresh = _make(name, "vector", discrete)[1]
        if fresh.evaluates_algorithm:
            fresh.algo.build_with_dataset(dataset)
        with pytest.raises(ValueError, match="actions"):
            fresh.fit(other, n_steps=1, logger_adapter=NoopAdapterFactory(), show_progress=False)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_build_with_env(name):
    import gymnasium

    discrete = _action_kinds(CONFIGS[name])[0]
    env = gymnasium.make("CartPole-v1" if discrete else "Pendulum-v1")
    _, algo = _make(name, "vector", discrete, scalers=False)
    if algo.evaluates_algorithm:
        algo.algo.build_with_env(env)
    algo.build_with_env(env)
    observation, _ = env.reset(seed=0)
    if algo.predicts_from_sequences:
        action = np.asarray(algo.as_stateful_wrapper(target_return=1.0).predict(observation, 0.0))
    else:
        action = algo.predict(observation[None])[0]
    if discrete:
        assert env.action_space.contains(int(action))
        assert algo.action_size == 2 and algo.observation_shape == (4,)
    else:
        assert action.shape == (1,) and algo.observation_shape == (3,)
    env.step(int(action) if discrete else action)
    other = gymnasium.make("Pendulum-v1" if discrete else "CartPole-v1")
    if algo.get_action_type() != ActionSpace.BOTH and not algo.evaluates_algorithm:
        with pytest.raises(ValueError, match="actions"):
            CONFIGS[name]().create(device=DEVICE).build_with_env(other)


EXPORT_CASES = [c for c in CASES if c[1] != "image" and CONFIGS[c[0]].algorithm_class().is_trainable]


def _exported_inputs(algo, dataset, batch: int):
    """What an exported policy takes: ``batch`` observations, or for a
    sequence model one context of ``batch`` steps (a batch of one window:
    observations, actions, returns-to-go and timesteps, all float32)."""
    x = _observations(dataset, batch)
    inputs = x if isinstance(x, list) else [x]
    if not algo.predicts_from_sequences:
        return inputs
    context = _context(dataset, batch)
    return [o[None] for o in inputs] + [np.asarray(a, np.float32)[None] for a in
                                        (context.actions, context.returns_to_go, context.timesteps)]


def _exported_expected(algo, dataset, batch: int, discrete: bool):
    if not algo.predicts_from_sequences:
        return algo.predict(_observations(dataset, batch))
    output = algo.predict(_context(dataset, batch))
    return np.array([np.argmax(output)]) if discrete else output[None]


@pytest.mark.parametrize("name,kind,discrete", EXPORT_CASES, ids=[f"{n}-{k}-{'discrete' if d else 'continuous'}" for n, k, d in EXPORT_CASES])
def test_exported_policy_matches_predict(name, kind, discrete, tmp_path, dataset_factory):
    import json

    from offrl.export import load_onnx_policy, load_torchscript_policy

    offrl.seed(4)
    dataset = dataset_factory(kind, discrete)
    _, algo = _make(name, kind, discrete)
    _fit(algo, dataset, steps=2)
    for ext, loader in ((".pt", load_torchscript_policy), (".onnx", load_onnx_policy)):
        path = tmp_path / f"policy{ext}"
        algo.save_policy(path)
        policy = loader(path)
        for batch in (1, 7):
            got = policy(*_exported_inputs(algo, dataset, batch))
            expected = _exported_expected(algo, dataset, batch, discrete)
            if discrete:
                assert got.dtype == np.int64
                np.testing.assert_array_equal(got, expected)
            else:
                assert got.dtype == np.float32
                np.testing.assert_allclose(got, expected, atol=EXPORT_TOLERANCE, rtol=EXPORT_TOLERANCE)
        meta = policy.metadata
        exported = algo.algo.config.get_type() if algo.evaluates_algorithm else name  # FQE exports the evaluated policy
        assert meta["algorithm"] == exported and meta["action_space"] == ("discrete" if discrete else "continuous")
        assert int(meta["action_size"]) == 2
        assert json.loads(meta["observation_shapes"]) == ([[3], [1, 36, 36]] if kind == "tuple" else [[3]])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["policy.onnx", "policy.pt"]


BF16_CASES = [(name, kind, discrete) for name, kind, discrete in CASES
              if kind == "vector" and CONFIGS[name].algorithm_class().is_trainable]


#: algorithms whose float32 step is written out for plain networks: bf16-mixed runs that step below this many rows
WRITTEN_OUT = {"dqn", "double_dqn", "nfq", "discrete_cql", "discrete_bcq", "discrete_sac", "bc", "discrete_bc", "fqe", "discrete_fqe",
               "ddpg", "td3", "td3_plus_bc", "prdc", "awac", "crr", "sac", "iql", "plas", "plas_with_perturbation"}


def _bf16_batch(name: str, config) -> None:
    """A batch size at which bf16-mixed runs in bf16 (below it the algorithms
    with a written-out float32 step run that; tests/test_precision.py)."""
    from offrl.training import precision

    if name in WRITTEN_OUT:
        config.batch_size = precision.WRITTEN_OUT_FASTER_BELOW


@pytest.fixture
def bf16_forced(monkeypatch):
    """bf16-mixed forced on: emulated where the CPU lacks bf16 units, and on
    a GPU (``OFFRL_TEST_DEVICE=cuda:0``) also for these small networks,
    which it otherwise trains in float32 (their products are under
    ``CUDA_BF16_PAYS_FROM``)."""
    from offrl.training import precision

    monkeypatch.setattr(precision, "CUDA_BF16_PAYS_FROM", 0)
    precision.set_bf16_available(True)
    yield
    precision.set_bf16_available(None)


@pytest.mark.parametrize("name,kind,discrete", BF16_CASES, ids=[f"{n}-{'discrete' if d else 'continuous'}" for n, _, d in BF16_CASES])
def test_bf16_mixed_trains_with_finite_losses_and_float32_predictions(name, kind, discrete, dataset_factory, bf16_forced):
    """precision="bf16-mixed" (forced on) trains every algorithm; predict
    stays float32 and finite."""
    offrl.seed(0)
    dataset = dataset_factory(kind, discrete)
    config, algo = _make(name, kind, discrete)
    config.precision = "bf16-mixed"
    _bf16_batch(name, config)
    results = _fit(algo, dataset, steps=2)
    assert algo.precision == "bf16-mixed"
    assert all(np.isfinite(v) for _, metrics in results for k, v in metrics.items() if not k.startswith("time_"))
    if algo.has_policy and not algo.predicts_from_sequences:  # (a sequence model predicts from a context)
        action = algo.predict(_observations(dataset))
        assert action.dtype == (np.int64 if discrete else np.float32) and np.isfinite(action.astype(np.float64)).all()


@pytest.mark.parametrize("name,kind,discrete", BF16_CASES, ids=[f"{n}-{'discrete' if d else 'continuous'}" for n, _, d in BF16_CASES])
def test_bf16_mixed_weights_are_those_of_an_uncached_cast(name, kind, discrete, dataset_factory, bf16_forced):
    """Autocast caches each weight's bf16 copy, and the update steps its
    optimizers inside the autocast region: a stale copy would change what a
    network used after its own step computes (it did in AWAC, CRR, BEAR,
    BCQ and DiscreteSAC). Three bf16-mixed steps equal, bit for bit, three
    with autocast's cache off (every product casting its weights anew)."""
    import torch

    states = []
    try:
        for cache in (True, False):
            torch.set_autocast_cache_enabled(cache)
            offrl.seed(0)
            config, algo = _make(name, kind, discrete)
            config.precision = "bf16-mixed"
            _bf16_batch(name, config)
            _fit(algo, dataset_factory(kind, discrete), steps=3)
            states.append(algo.modules.state_dict())
    finally:
        torch.set_autocast_cache_enabled(True)
    cached, uncached = states
    assert cached.keys() == uncached.keys()
    for key, value in cached.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, uncached[key]), key
