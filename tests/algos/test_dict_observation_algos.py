"""Every registered algorithm with dict observations.

A dict observation is stored as the tuple of its values in sorted key order,
so the reference is the same algorithm trained, with the same seed, on the
equivalent tuple dataset: predictions must be identical, and the dict path
must accept dicts of batched arrays in ``predict``/``predict_value``/
``sample_action`` and name a missing or extra key."""

from __future__ import annotations

import importlib
import pkgutil

import numpy as np
import pytest

import offrl
import offrl.algos
from offrl.constants import ActionSpace
from offrl.dataset import MDPDataset
from offrl.logging import NoopAdapterFactory
from offrl.preprocessing import (
    DictObservationScaler,
    MinMaxObservationScaler,
    PixelObservationScaler,
    StandardObservationScaler,
    TupleObservationScaler,
)
from offrl.serialization import registered

for _module in pkgutil.iter_modules(offrl.algos.__path__):
    importlib.import_module(f"offrl.algos.{_module.name}")

CONFIGS = dict(sorted(registered("algorithm").items()))


def _action_kinds(config_cls) -> list[bool]:
    kind = config_cls.algorithm_class()._action_type
    return [False, True] if kind == ActionSpace.BOTH else [kind == ActionSpace.DISCRETE]


def _arrays(discrete: bool, image: bool = False, n: int = 48, seed: int = 0):
    rng = np.random.default_rng(seed)
    observations = {
        "state": (rng.normal(size=(n, 3)) * 2.0 + 1.0).astype(np.float32),
        "joints": rng.uniform(-1.0, 4.0, size=(n, 2)).astype(np.float32),
    }
    if image:
        observations = {"state": observations["state"], "camera": rng.integers(0, 256, size=(n, 1, 36, 36), dtype=np.uint8)}
    actions = rng.integers(0, 2, size=n) if discrete else rng.uniform(-1.0, 1.0, size=(n, 2)).astype(np.float32)
    rewards = rng.normal(size=n).astype(np.float32)
    terminals = np.zeros(n, dtype=np.float32)
    terminals[np.arange(7, n, 8)] = 1.0
    return observations, actions, rewards, terminals


def _datasets(discrete: bool, image: bool = False):
    """``(dict dataset, the equivalent tuple dataset in sorted key order)``."""
    observations, actions, rewards, terminals = _arrays(discrete, image)
    size = 2 if discrete else None
    as_dict = MDPDataset(observations, actions, rewards, terminals, action_size=size)
    as_tuple = MDPDataset([observations[k] for k in sorted(observations)], actions, rewards, terminals, action_size=size)
    return as_dict, as_tuple, observations


def _make(name: str, discrete: bool, scaler):
    cls = CONFIGS[name]
    config = cls(batch_size=8, observation_scaler=scaler)
    if cls.algorithm_class().evaluates_algorithm:
        behaviour = (offrl.algos.DiscreteBCConfig if discrete else offrl.algos.BCConfig)(batch_size=8, observation_scaler=scaler)
        return cls.algorithm_class()(algo=behaviour.create(), config=config)
    return config.create()


def _fit(algo, dataset):
    if algo.evaluates_algorithm:
        algo.algo.build_with_dataset(dataset)
    if algo.is_trainable:
        algo.fit(dataset, n_steps=2, n_steps_per_epoch=2, logger_adapter=NoopAdapterFactory(), show_progress=False)
    else:
        algo.build_with_dataset(dataset)


CASES = [(name, d) for name, cls in CONFIGS.items() for d in _action_kinds(cls)]


@pytest.mark.parametrize("name,discrete", CASES, ids=[f"{n}-{'discrete' if d else 'continuous'}" for n, d in CASES])
def test_dict_observations_train_like_the_equivalent_tuple(name, discrete):
    dict_data, tuple_data, observations = _datasets(discrete)
    offrl.seed(3)
    algo = _make(name, discrete, {"state": StandardObservationScaler(), "joints": MinMaxObservationScaler()})
    _fit(algo, dict_data)
    offrl.seed(3)
    # sorted key order: joints, state
    reference = _make(name, discrete, TupleObservationScaler([MinMaxObservationScaler(), StandardObservationScaler()]))
    _fit(reference, tuple_data)
    assert isinstance(algo.config.observation_scaler, DictObservationScaler)
    x_dict = {k: v[:5] for k, v in observations.items()}
    x_tuple = [x_dict["joints"], x_dict["state"]]
    if algo.predicts_from_sequences:  # a context of dicts, and the stateful wrapper fed dicts
        n = 5
        acts = np.zeros(n, np.int64) if discrete else np.zeros((n, 2), np.float32)
        context = dict(actions=acts, rewards=np.zeros((n, 1), np.float32),
                       returns_to_go=np.ones((n, 1), np.float32), timesteps=np.arange(n))
        np.testing.assert_array_equal(algo.predict(offrl.algos.TransformerInput(observations=x_dict, **context)),
                                      reference.predict(offrl.algos.TransformerInput(observations=x_tuple, **context)))
        sampler = offrl.algos.GreedyTransformerActionSampler() if discrete else None
        wrapper = algo.as_stateful_wrapper(1.0, action_sampler=sampler)
        reference_wrapper = reference.as_stateful_wrapper(1.0, action_sampler=sampler)
        for i in range(3):
            a = wrapper.predict({k: v[i] for k, v in x_dict.items()}, 0.5)
            np.testing.assert_array_equal(a, reference_wrapper.predict([v[i] for v in x_tuple], 0.5))
        return
    actions = algo.predict(x_dict)
    if "random" not in name:  # random policies draw fresh actions per call
        np.testing.assert_array_equal(actions, reference.predict(x_tuple))
        np.testing.assert_array_equal(actions, algo.predict(x_tuple))
    assert algo.sample_action(x_dict).shape == actions.shape
    try:
        values = algo.predict_value(x_dict, actions)
    except NotImplementedError:
        pass
    else:
        np.testing.assert_allclose(values, reference.predict_value(x_tuple, actions), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="'joints'"):
        algo.predict({"state": x_dict["state"]})
    with pytest.raises(ValueError, match="'extra'"):
        algo.predict({**x_dict, "extra": x_dict["state"]})


@pytest.mark.parametrize("name", ["dqn", "sac", "iql", "discrete_cql"])
def test_image_and_state_by_key(name, tmp_path):
    """An image key and a vector key: pixel and standard scalers per key,
    the dict encoder factory, save/load by key."""
    cls = CONFIGS[name]
    discrete = _action_kinds(cls)[0]
    dict_data, _, observations = _datasets(discrete, image=True)
    factory = offrl.models.DictEncoderFactory()
    fields = {f for f in cls.__dataclass_fields__ if f.endswith("encoder_factory")}
    config = cls(
        batch_size=8,
        observation_scaler={"camera": PixelObservationScaler(), "state": StandardObservationScaler()},
        **{f: factory for f in fields},
    )
    algo = config.create()
    offrl.seed(0)
    _fit(algo, dict_data)
    state_scaler = algo.observation_scaler.observation_scalers[1]
    np.testing.assert_allclose(state_scaler.mean, observations["state"].mean(axis=0), rtol=1e-5)
    x = {k: v[:4] for k, v in observations.items()}
    path = tmp_path / "model.d3"
    algo.save(path)
    loaded = offrl.load_learnable(path)
    np.testing.assert_array_equal(loaded.predict(x), algo.predict(x))
    assert isinstance(loaded.config.observation_scaler, DictObservationScaler)
    assert loaded.config.observation_scaler.keys == ("camera", "state")
    assert loaded.config.to_dict() == algo.config.to_dict()


class _DictEnv:
    """A gymnasium env with a Dict observation space (made lazily so the
    module imports without gymnasium)."""

    @staticmethod
    def make(continuous: bool):
        import gymnasium
        from gymnasium import spaces

        class Env(gymnasium.Env):
            observation_space = spaces.Dict({"velocity": spaces.Box(-1, 1, (2,), np.float32),
                                             "position": spaces.Box(-1, 1, (3,), np.float32)})
            action_space = spaces.Box(-1, 1, (2,), np.float32) if continuous else spaces.Discrete(2)

            def reset(self, *, seed=None, options=None):
                super().reset(seed=seed)
                self._t = 0
                return self.observation_space.sample(), {}

            def step(self, action):
                self._t += 1
                return self.observation_space.sample(), 1.0, False, self._t >= 6, {}

        return Env()


@pytest.mark.parametrize("name", ["dqn", "sac"])
def test_fit_online_on_a_dict_env(name):
    continuous = name == "sac"
    env, eval_env = _DictEnv.make(continuous), _DictEnv.make(continuous)
    env.observation_space.seed(0)
    algo = CONFIGS[name](batch_size=4, observation_scaler={"velocity": MinMaxObservationScaler(),
                                                           "position": MinMaxObservationScaler()}).create()
    buffer = offrl.dataset.create_infinite_replay_buffer(env=env)
    offrl.seed(0)
    results = algo.fit_online(env, buffer, n_steps=12, n_steps_per_epoch=6, update_start_step=4, eval_env=eval_env,
                              eval_n_trials=1, logger_adapter=NoopAdapterFactory(), show_progress=False)
    assert [epoch for epoch, _ in results] == [1, 2]
    assert results[-1][1]["evaluation"] == 6.0
    assert buffer.dataset_info.observation_signature.keys == ("position", "velocity")
    assert buffer.transition_count == 12
    # MinMax fitted from the Dict space by key
    np.testing.assert_array_equal(algo.observation_scaler.observation_scalers[0].minimum, [-1, -1, -1])
