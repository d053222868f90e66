"""d3rlpy's extension API on offrl: an algorithm written as d3rlpy 2.8.1's
``examples/custom_algo.py`` writes one (a frozen ``Modules`` holder, an
Impl of ``QLearningAlgoImplBase`` with ``inner_update`` and friends, a
``LearnableConfig`` with ``create`` and an algorithm subclassing
``QLearningAlgoBase[Impl, Config]``), and a custom tuple-observation
encoder as ``examples/tuple_observation.py`` writes one, run by offrl's own
machinery: fit, fit_online, save / load, export.

The two example files are ported from d3rlpy (https://github.com/takuseno/d3rlpy,
``examples/custom_algo.py`` and ``examples/tuple_observation.py``; MIT
License, Copyright (c) 2021 Takuma Seno) with only ``d3rlpy`` -> ``offrl``
and ``gym`` -> ``gymnasium`` changed; their ``main()`` bodies are the tests
below, with the sizes shrunk and local data in place of downloads.
``custom_algo.py`` is the stored version whose ``create(self, device)``
calls ``CustomAlgo(self, device)`` and whose Impl takes d3rlpy 2.8.1's four
arguments.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Dict, Sequence, cast

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import offrl
from offrl.models.torch import Encoder, EncoderWithAction
from offrl.torch_utility import hard_sync
from offrl.types import Shape, TorchObservation


# ------------------------------------------------ examples/custom_algo.py (ported)
class QFunction(nn.Module):  # type: ignore
    def __init__(self, observation_shape: Sequence[int], action_size: int):
        super().__init__()
        self._fc1 = nn.Linear(observation_shape[0], 256)
        self._fc2 = nn.Linear(256, 256)
        self._fc3 = nn.Linear(256, action_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self._fc1(x))
        h = torch.relu(self._fc2(h))
        return self._fc3(h)


@dataclasses.dataclass(frozen=True)
class CustomAlgoModules(offrl.Modules):
    q_func: QFunction
    targ_q_func: QFunction
    optim: torch.optim.Optimizer


class CustomAlgoImpl(offrl.algos.QLearningAlgoImplBase):
    _modules: CustomAlgoModules

    def __init__(
        self,
        observation_shape: offrl.types.Shape,
        action_size: int,
        modules: CustomAlgoModules,
        target_update_interval: int,
        gamma: float,
        device: str,
    ):
        super().__init__(observation_shape, action_size, modules, device)
        self._target_update_interval = target_update_interval
        self._gamma = gamma

    def inner_update(
        self, batch: offrl.TorchMiniBatch, grad_step: int
    ) -> Dict[str, float]:
        self._modules.optim.zero_grad()

        with torch.no_grad():
            # (N, 1)
            targ_q = (
                self._modules.targ_q_func(batch.next_observations)
                .max(dim=1, keepdims=True)
                .values
            )
            # compute target
            y = batch.rewards + self._gamma * targ_q * (1 - batch.terminals)

        # compute TD loss
        action_mask = F.one_hot(
            batch.actions.view(-1).long(), num_classes=self._action_size
        )
        q = (action_mask * self._modules.q_func(batch.observations)).sum(
            dim=1, keepdims=True
        )
        loss = ((q - y) ** 2).mean()

        # update parameters
        loss.backward()
        self._modules.optim.step()

        # update target
        if grad_step % self._target_update_interval == 0:
            hard_sync(self._modules.targ_q_func, self._modules.q_func)

        return {"loss": float(loss.detach().numpy())}

    def inner_predict_best_action(
        self, x: offrl.types.TorchObservation
    ) -> torch.Tensor:
        q = self._modules.q_func(x)
        return q.argmax(dim=1)

    def inner_sample_action(
        self, x: offrl.types.TorchObservation
    ) -> torch.Tensor:
        return self.inner_predict_best_action(x)

    def inner_predict_value(
        self, x: offrl.types.TorchObservation, action: torch.Tensor
    ) -> torch.Tensor:
        q = self._modules.q_func(x)
        flat_action = action.reshape(-1)
        return q[torch.arange(0, q.size(0)), flat_action].reshape(-1)


@dataclasses.dataclass()
class CustomAlgoConfig(offrl.base.LearnableConfig):
    batch_size: int = 32
    learning_rate: float = 1e-3
    target_update_interval: int = 100
    gamma: float = 0.99

    def create(self, device: offrl.base.DeviceArg = False) -> "CustomAlgo":
        return CustomAlgo(self, device)

    @staticmethod
    def get_type() -> str:
        return "custom"


class CustomAlgo(
    offrl.algos.QLearningAlgoBase[CustomAlgoImpl, CustomAlgoConfig]
):
    def inner_create_impl(
        self, observation_shape: offrl.types.Shape, action_size: int
    ) -> None:
        # create Q-functions
        q_func = QFunction(cast(Sequence[int], observation_shape), action_size)
        targ_q_func = copy.deepcopy(q_func)

        # move to device
        q_func.to(self._device)
        targ_q_func.to(self._device)

        # create optimizer
        optim = torch.optim.Adam(
            params=q_func.parameters(),
            lr=self._config.learning_rate,
        )

        # prepare Modules object
        modules = CustomAlgoModules(
            q_func=q_func,
            targ_q_func=targ_q_func,
            optim=optim,
        )

        # create CustomAlgoImpl object
        self._impl = CustomAlgoImpl(
            observation_shape=observation_shape,
            action_size=action_size,
            modules=modules,
            target_update_interval=self._config.target_update_interval,
            gamma=self._config.gamma,
            device=self._device,
        )

    def get_action_type(self) -> offrl.ActionSpace:
        return offrl.ActionSpace.DISCRETE


# ------------------------------------------ examples/tuple_observation.py (ported)
class TupleEncoder(Encoder):
    def __init__(self, observation_shape: Shape):
        super().__init__()
        shape1, shape2 = observation_shape
        assert isinstance(shape1, (tuple, list))
        assert isinstance(shape2, (tuple, list))
        self.fc1 = nn.Linear(shape1[0], 256)
        self.fc2 = nn.Linear(shape2[0], 256)
        self.shared = nn.Linear(256 * 2, 256)

    def forward(self, x: TorchObservation) -> torch.Tensor:
        h1 = self.fc1(x[0])
        h2 = self.fc2(x[1])
        return self.shared(torch.cat([h1, h2], dim=1))


class TupleEncoderWithAction(EncoderWithAction):
    def __init__(self, observation_shape: Shape, action_size: int):
        super().__init__()
        shape1, shape2 = observation_shape
        assert isinstance(shape1, (tuple, list))
        assert isinstance(shape2, (tuple, list))
        self.fc1 = nn.Linear(shape1[0], 256)
        self.fc2 = nn.Linear(shape2[0], 256)
        self.shared = nn.Linear(256 * 2 + action_size, 256)

    def forward(
        self, x: TorchObservation, action: torch.Tensor
    ) -> torch.Tensor:
        h1 = self.fc1(x[0])
        h2 = self.fc2(x[1])
        return self.shared(torch.cat([h1, h2, action], dim=1))


class TupleEncoderFactory(offrl.models.EncoderFactory):
    def create(self, observation_shape: Shape) -> Encoder:
        return TupleEncoder(observation_shape)

    def create_with_action(
        self,
        observation_shape: Shape,
        action_size: int,
        discrete_action: bool = False,
    ) -> EncoderWithAction:
        return TupleEncoderWithAction(observation_shape, action_size)

    @staticmethod
    def get_type() -> str:
        return "custom"


# ----------------------------------------------------------------------- data
def _cartpole_dataset(n: int = 96, seed: int = 0) -> offrl.dataset.MDPDataset:
    """Random CartPole-shaped transitions: 4-dim observations, 2 actions."""
    rng = np.random.default_rng(seed)
    terminals = np.zeros(n, dtype=np.float32)
    terminals[np.arange(15, n, 16)] = 1.0
    return offrl.dataset.MDPDataset(rng.normal(size=(n, 4)).astype(np.float32), rng.integers(0, 2, size=n),
                                    rng.normal(size=n).astype(np.float32), terminals, action_size=2)


def _tuple_dataset(n: int = 64, seed: int = 0) -> offrl.dataset.MDPDataset:
    """Tuple observations of a (3,) and a (2,) part; 2-dim actions in [-1, 1]."""
    rng = np.random.default_rng(seed)
    observations = [rng.normal(size=(n, 3)).astype(np.float32), rng.normal(size=(n, 2)).astype(np.float32) + 5.0]
    terminals = np.zeros(n, dtype=np.float32)
    terminals[np.arange(15, n, 16)] = 1.0
    return offrl.dataset.MDPDataset(observations, rng.uniform(-1.0, 1.0, size=(n, 2)).astype(np.float32),
                                    rng.normal(size=n).astype(np.float32), terminals)


def _fit(algo, dataset, steps: int = 4):
    return algo.fit(dataset, n_steps=steps, n_steps_per_epoch=steps, show_progress=False,
                    logger_adapter=offrl.logging.NoopAdapterFactory())


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # fit_online's default logger writes under the working directory


# ---------------------------------------------------------------------- tests
def test_custom_algo_main_trains_online_on_cartpole():
    """The example's main(), shrunk: fit_online on CartPole with its explorer and buffer."""
    env = gym.make("CartPole-v1")
    eval_env = gym.make("CartPole-v1")
    explorer = offrl.algos.ConstantEpsilonGreedy(epsilon=0.3)
    buffer = offrl.dataset.create_fifo_replay_buffer(limit=1000000, env=env)
    algo = CustomAlgoConfig().create()
    algo.fit_online(env=env, explorer=explorer, buffer=buffer, eval_env=eval_env, n_steps=200, n_steps_per_epoch=100,
                    eval_n_trials=1, show_progress=False)
    assert 100 < algo.grad_step <= 200  # updates start once the buffer holds a batch
    assert buffer.transition_count == 200
    assert isinstance(algo.impl, CustomAlgoImpl) and algo.impl.modules is algo.impl._modules


def test_custom_algo_is_built_and_trained_through_its_impl():
    algo = CustomAlgoConfig(target_update_interval=2).create()
    dataset = _cartpole_dataset()
    algo.build_with_dataset(dataset)
    modules = algo.impl.modules
    assert isinstance(modules, CustomAlgoModules)
    # the generic machinery sees the holder's fields by name
    assert list(algo.modules) == ["q_func", "targ_q_func"] and algo.modules["q_func"] is modules.q_func
    assert algo.optimizers == {"optim": modules.optim}
    assert algo.has_q_function and algo.get_action_type() == offrl.ActionSpace.DISCRETE
    before = [p.detach().clone() for p in modules.q_func.parameters()]
    losses = algo.update(dataset.sample_transition_batch(32))
    assert set(losses) == {"loss"} and isinstance(losses["loss"], float)
    assert not all(torch.equal(a, b) for a, b in zip(before, modules.q_func.parameters()))
    # grad_step 0 synced the target to the updated network: the Impl saw offrl's step counter
    assert all(torch.equal(a, b) for a, b in zip(modules.targ_q_func.parameters(), modules.q_func.parameters()))
    results = _fit(algo, dataset, steps=6)
    assert algo.grad_step == 7 and np.isfinite(results[-1][1]["loss"])
    observations = dataset.episodes[0].observations[:5]
    assert algo.predict(observations).shape == (5,)
    assert algo.sample_action(observations).shape == (5,)
    values = algo.predict_value(observations, algo.predict(observations))
    expected = modules.q_func(torch.as_tensor(observations)).max(dim=1).values.detach().numpy()
    np.testing.assert_allclose(values, expected, rtol=1e-6)


def test_custom_algo_saves_loads_and_exports(tmp_path):
    offrl.base.register_learnable(CustomAlgoConfig)  # as d3rlpy: a custom config is registered to load back
    dataset = _cartpole_dataset()
    algo = CustomAlgoConfig().create()
    _fit(algo, dataset)
    observations = dataset.episodes[1].observations[:7]
    path = str(tmp_path / "custom.d3")
    algo.save(path)
    loaded = offrl.load_learnable(path)
    assert type(loaded) is CustomAlgo and isinstance(loaded.impl, CustomAlgoImpl)
    assert loaded.grad_step == algo.grad_step
    np.testing.assert_array_equal(loaded.predict(observations), algo.predict(observations))
    for name, module in algo.impl.modules.torch_modules().items():
        for a, b in zip(module.state_dict().values(), getattr(loaded.impl.modules, name).state_dict().values()):
            assert torch.equal(a, b)
    assert loaded.impl.modules.optim.state_dict()["state"].keys() == algo.impl.modules.optim.state_dict()["state"].keys()
    again = CustomAlgoConfig().create()
    again.build_with_dataset(dataset)
    again.load_model(path)
    np.testing.assert_array_equal(again.predict(observations), algo.predict(observations))
    for extension in (".pt", ".onnx"):  # save_policy checks the file against predict
        algo.save_policy(str(tmp_path / f"policy{extension}"))
    policy = offrl.export.load_torchscript_policy(str(tmp_path / "policy.pt"))
    np.testing.assert_array_equal(np.asarray(policy(observations)), algo.predict(observations))
    algo.reset_optimizer_states()  # a torch optimizer in the holder, not offrl's wrapper
    assert not algo.impl.modules.optim.state


def test_an_impl_that_is_not_set_is_named():
    class Forgetful(CustomAlgo):
        def inner_create_impl(self, observation_shape, action_size) -> None:
            pass

    algo = Forgetful(CustomAlgoConfig())
    with pytest.raises(TypeError, match="Forgetful.inner_create_impl must set self._impl to a QLearningAlgoImplBase"):
        algo.create_impl((4,), 2)


def test_tuple_observation_example_trains_saves_and_exports(tmp_path):
    """The example's main(), shrunk, on a small local tuple dataset (it downloads antmaze)."""
    dataset = _tuple_dataset()
    sac = offrl.algos.SACConfig(
        batch_size=16,
        actor_encoder_factory=TupleEncoderFactory(),
        critic_encoder_factory=TupleEncoderFactory(),
        observation_scaler=offrl.preprocessing.TupleObservationScaler(
            [
                offrl.preprocessing.StandardObservationScaler(),
                offrl.preprocessing.StandardObservationScaler(),
            ]
        ),
    ).create(device=False)
    _fit(sac, dataset)
    assert isinstance(sac.modules["policy"].encoder, TupleEncoder)
    observations = [dataset.episodes[0].observations[0][:4], dataset.episodes[0].observations[1][:4]]
    assert sac.predict(observations).shape == (4, 2)
    offrl.models.register_encoder_factory(TupleEncoderFactory)
    path = str(tmp_path / "sac.d3")
    sac.save(path)
    loaded = offrl.load_learnable(path)
    np.testing.assert_array_equal(loaded.predict(observations), sac.predict(observations))
    sac.save_policy(str(tmp_path / "policy.onnx"))


# ------------------------------- a d3rlpy-style algorithm on d3rlpy's builders
# Written as d3rlpy 2.8.1's own SAC is (``algos/qlearning/sac.py`` and
# ``torch/sac_impl.py``): networks from ``d3rlpy.models.builders``, the
# critics used through their ensemble forwarders, the temperature a
# ``Parameter``; only the import is offrl's.
from offrl.models.builders import (  # noqa: E402
    create_continuous_q_function,
    create_normal_policy,
    create_parameter,
)
from offrl.models.torch import (  # noqa: E402
    ContinuousEnsembleQFunctionForwarder,
    NormalPolicy,
    Parameter,
    build_squashed_gaussian_distribution,
    get_parameter,
)


@dataclasses.dataclass(frozen=True)
class BuilderSACModules(offrl.Modules):
    policy: NormalPolicy
    q_funcs: nn.ModuleList
    targ_q_funcs: nn.ModuleList
    log_temp: Parameter
    actor_optim: torch.optim.Optimizer
    critic_optim: torch.optim.Optimizer


class BuilderSACImpl(offrl.algos.QLearningAlgoImplBase):
    _modules: BuilderSACModules

    def __init__(self, observation_shape, action_size, modules, q_func_forwarder, targ_q_func_forwarder, gamma, tau,
                 device):
        super().__init__(observation_shape, action_size, modules, device)
        self._q_func_forwarder: ContinuousEnsembleQFunctionForwarder = q_func_forwarder
        self._targ_q_func_forwarder: ContinuousEnsembleQFunctionForwarder = targ_q_func_forwarder
        self._gamma = gamma
        self._tau = tau
        hard_sync(modules.targ_q_funcs, modules.q_funcs)

    def inner_update(self, batch: offrl.TorchMiniBatch, grad_step: int) -> Dict[str, float]:
        temp = get_parameter(self._modules.log_temp).exp().detach()
        with torch.no_grad():
            dist = build_squashed_gaussian_distribution(self._modules.policy(batch.next_observations))
            action, log_prob = dist.sample_with_log_prob()
            target = self._targ_q_func_forwarder.compute_target(batch.next_observations, action, reduction="min")
            target = target - temp * log_prob
        self._modules.critic_optim.zero_grad()
        critic_loss = self._q_func_forwarder.compute_error(
            observations=batch.observations, actions=batch.actions, rewards=batch.rewards, target=target,
            terminals=batch.terminals, gamma=self._gamma)
        critic_loss.backward()
        self._modules.critic_optim.step()

        self._modules.actor_optim.zero_grad()
        dist = build_squashed_gaussian_distribution(self._modules.policy(batch.observations))
        action, log_prob = dist.sample_with_log_prob()
        q_t = self._q_func_forwarder.compute_expected_q(batch.observations, action, "min")
        actor_loss = (temp * log_prob - q_t).mean()
        actor_loss.backward()
        self._modules.actor_optim.step()
        with torch.no_grad():
            for targ, online in zip(self._modules.targ_q_funcs.parameters(), self._modules.q_funcs.parameters()):
                targ.mul_(1.0 - self._tau).add_(self._tau * online)
        return {"critic_loss": float(critic_loss.detach()), "actor_loss": float(actor_loss.detach())}

    def inner_predict_best_action(self, x: TorchObservation) -> torch.Tensor:
        return self._modules.policy(x).squashed_mu

    def inner_sample_action(self, x: TorchObservation) -> torch.Tensor:
        return build_squashed_gaussian_distribution(self._modules.policy(x)).sample()

    def inner_predict_value(self, x: TorchObservation, action: torch.Tensor) -> torch.Tensor:
        return self._q_func_forwarder.compute_expected_q(x, action, "mean").reshape(-1)


@dataclasses.dataclass()
class BuilderSACConfig(offrl.base.LearnableConfig):
    batch_size: int = 16
    learning_rate: float = 3e-4
    gamma: float = 0.99
    tau: float = 0.005
    n_critics: int = 2
    initial_temperature: float = 0.5

    def create(self, device: offrl.base.DeviceArg = False) -> "BuilderSAC":
        return BuilderSAC(self, device)

    @staticmethod
    def get_type() -> str:
        return "builder_sac"


class BuilderSAC(offrl.algos.QLearningAlgoBase[BuilderSACImpl, BuilderSACConfig]):
    def inner_create_impl(self, observation_shape: Shape, action_size: int) -> None:
        encoder_factory = offrl.models.VectorEncoderFactory(hidden_units=[32, 32])
        q_func_factory = offrl.models.MeanQFunctionFactory()
        policy = create_normal_policy(observation_shape, action_size, encoder_factory, device=self._device,
                                      enable_ddp=self._enable_ddp)
        q_funcs, q_func_forwarder = create_continuous_q_function(
            observation_shape, action_size, encoder_factory, q_func_factory, n_ensembles=self._config.n_critics,
            device=self._device, enable_ddp=self._enable_ddp)
        targ_q_funcs, targ_q_func_forwarder = create_continuous_q_function(
            observation_shape, action_size, encoder_factory, q_func_factory, n_ensembles=self._config.n_critics,
            device=self._device, enable_ddp=self._enable_ddp)
        log_temp = create_parameter((1, 1), math.log(self._config.initial_temperature), device=self._device,
                                    enable_ddp=self._enable_ddp)
        modules = BuilderSACModules(
            policy=policy, q_funcs=q_funcs, targ_q_funcs=targ_q_funcs, log_temp=log_temp,
            actor_optim=torch.optim.Adam(policy.parameters(), lr=self._config.learning_rate),
            critic_optim=torch.optim.Adam(q_funcs.parameters(), lr=self._config.learning_rate))
        self._impl = BuilderSACImpl(observation_shape, action_size, modules, q_func_forwarder, targ_q_func_forwarder,
                                    self._config.gamma, self._config.tau, self._device)

    def get_action_type(self) -> offrl.ActionSpace:
        return offrl.ActionSpace.CONTINUOUS


def _pendulum_like_dataset(n: int = 96, seed: int = 0) -> offrl.dataset.MDPDataset:
    rng = np.random.default_rng(seed)
    terminals = np.zeros(n, dtype=np.float32)
    terminals[np.arange(23, n, 24)] = 1.0
    return offrl.dataset.MDPDataset(rng.normal(size=(n, 3)).astype(np.float32),
                                    rng.uniform(-1.0, 1.0, size=(n, 1)).astype(np.float32),
                                    rng.normal(size=n).astype(np.float32), terminals)


def test_an_algorithm_on_d3rlpys_builders_trains_saves_and_loads(tmp_path):
    offrl.base.register_learnable(BuilderSACConfig)
    dataset = _pendulum_like_dataset()
    algo = BuilderSACConfig().create()
    algo.build_with_dataset(dataset)
    modules = algo.impl.modules
    assert list(algo.modules) == ["policy", "q_funcs", "targ_q_funcs", "log_temp"]
    before = [p.detach().clone() for p in modules.q_funcs.parameters()]
    results = _fit(algo, dataset, steps=5)
    metrics = results[-1][1]
    assert algo.grad_step == 5 and {"critic_loss", "actor_loss"} <= set(metrics)
    assert np.isfinite(metrics["critic_loss"]) and np.isfinite(metrics["actor_loss"])
    assert not any(torch.equal(a, b) for a, b in zip(before, modules.q_funcs.parameters()))
    observations = dataset.episodes[0].observations[:6]
    actions = algo.predict(observations)
    assert actions.shape == (6, 1) and np.abs(actions).max() <= 1.0
    expected = torch.stack([q(torch.as_tensor(observations), torch.as_tensor(actions)).q_value
                            for q in modules.q_funcs]).mean(dim=0).reshape(-1).detach().numpy()
    np.testing.assert_allclose(algo.predict_value(observations, actions), expected, rtol=1e-5)
    path = str(tmp_path / "builder_sac.d3")
    algo.save(path)
    loaded = offrl.load_learnable(path)
    assert type(loaded) is BuilderSAC and loaded.grad_step == 5
    np.testing.assert_array_equal(loaded.predict(observations), actions)
    np.testing.assert_array_equal(loaded.predict_value(observations, actions), algo.predict_value(observations, actions))
    # the loaded forwarders read the loaded networks
    for a, b in zip(loaded.impl.modules.q_funcs.parameters(), modules.q_funcs.parameters()):
        assert torch.equal(a, b)
