"""d3rlpy docs, "Tutorials / Customize Neural Network", "Use Distributional
Q-Function", "API Reference / Network Architectures, Q Functions,
Optimizers" and the "Improve performance" tip, run with ``import offrl``.

Changes other than the import (marked ``# docs:``): sizes; the tutorial's
``CustomEncoderWithAction.forward`` is mis-indented and the reference's
``CustomEncoder`` skips ``super().__init__()`` and misspells
``observation_shape`` (both fail in any library as written); the reference's
``create_with_action`` lacks ``self``. ``d3rlpy.models.OptimizerFactory(Adam,
weight_decay=1e-4)`` is d3rlpy 1.x's API (2.8.1 has no optimizer-class
argument and fails on it); offrl keeps it working.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn as nn

import offrl

NOOP = {"show_progress": False, "logger_adapter": offrl.logging.NoopAdapterFactory()}


class CustomEncoder(nn.Module):
    calls = 0  # forward calls, counted by the tests (not in the docs)

    def __init__(self, observation_shape, feature_size):
        super().__init__()
        self.feature_size = feature_size
        self.fc1 = nn.Linear(observation_shape[0], feature_size)
        self.fc2 = nn.Linear(feature_size, feature_size)

    def forward(self, x):
        CustomEncoder.calls += 1
        h = torch.relu(self.fc1(x))
        h = torch.relu(self.fc2(h))
        return h


class CustomEncoderWithAction(nn.Module):
    def __init__(self, observation_shape, action_size, feature_size):
        super().__init__()
        self.feature_size = feature_size
        self.fc1 = nn.Linear(observation_shape[0] + action_size, feature_size)
        self.fc2 = nn.Linear(feature_size, feature_size)

    def forward(self, x, action):  # docs: mis-indented
        h = torch.cat([x, action], dim=1)
        h = torch.relu(self.fc1(h))
        h = torch.relu(self.fc2(h))
        return h


@dataclasses.dataclass()
class CustomEncoderFactory(offrl.models.EncoderFactory):
    feature_size: int

    def create(self, observation_shape):
        return CustomEncoder(observation_shape, self.feature_size)

    def create_with_action(self, observation_shape, action_size, discrete_action):
        return CustomEncoderWithAction(observation_shape, action_size, self.feature_size)

    @staticmethod
    def get_type() -> str:
        return "compat_custom"  # docs: "custom" (a name other tests of this suite may register)


def test_custom_encoder_factory_with_dqn(cartpole, workdir) -> None:
    dataset, _ = cartpole
    # integrate your model into d3rlpy algorithm
    dqn = offrl.algos.DQNConfig(encoder_factory=CustomEncoderFactory(64)).create()
    dqn.fit(dataset, n_steps=3, n_steps_per_epoch=3, **NOOP)
    x = dataset.episodes[0].observations[:4]
    # the user's module is the Q-function's encoder
    before = CustomEncoder.calls
    dqn.predict(x)
    assert CustomEncoder.calls > before
    assert dqn.predict(x).shape == (4,)
    assert dqn.predict_value(x, dqn.predict(x)).shape == (4,)


def test_custom_encoder_factory_with_sac(pendulum, workdir) -> None:
    dataset, _ = pendulum
    encoder_factory = CustomEncoderFactory(64)
    sac = offrl.algos.SACConfig(
        actor_encoder_factory=encoder_factory,
        critic_encoder_factory=encoder_factory,
        batch_size=16,
    ).create()
    sac.fit(dataset, n_steps=3, n_steps_per_epoch=3, **NOOP)
    x = dataset.episodes[0].observations[:4]
    assert sac.predict(x).shape == (4, 1)
    assert sac.predict_value(x, sac.predict(x)).shape == (4,)


def test_register_encoder_factory_and_load_learnable(cartpole, workdir) -> None:
    from offrl.models.encoders import register_encoder_factory

    dataset, _ = cartpole
    # register your own encoder factory
    register_encoder_factory(CustomEncoderFactory)
    dqn = offrl.algos.DQNConfig(encoder_factory=CustomEncoderFactory(feature_size=32)).create()
    dqn.fit(dataset, n_steps=2, n_steps_per_epoch=2, **NOOP)
    dqn.save("model.d3")
    # load algorithm from d3
    loaded = offrl.load_learnable("model.d3")
    assert isinstance(loaded.config.encoder_factory, CustomEncoderFactory)
    assert loaded.config.encoder_factory.feature_size == 32
    x = dataset.episodes[0].observations[:8]
    np.testing.assert_array_equal(loaded.predict(x), dqn.predict(x))


class PlainCustomEncoderFactory(offrl.models.EncoderFactory):
    """A factory subclass written without ``@dataclass`` (d3rlpy's base
    factory is a dataclass, so its subclasses work either way)."""

    def __init__(self, feature_size: int = 16) -> None:
        self.feature_size = feature_size

    def create(self, observation_shape):
        return CustomEncoder(observation_shape, self.feature_size)

    @staticmethod
    def get_type() -> str:
        return "compat_plain_custom"


def test_encoder_factory_without_dataclass_decorator(cartpole, workdir) -> None:
    dataset, _ = cartpole
    dqn = offrl.algos.DQNConfig(encoder_factory=PlainCustomEncoderFactory()).create()
    dqn.fit(dataset, n_steps=2, n_steps_per_epoch=2, **NOOP)
    assert dqn.predict(dataset.episodes[0].observations[:3]).shape == (3,)


def test_distributional_q_functions(pendulum, workdir) -> None:
    dataset, _ = pendulum
    x = dataset.episodes[0].observations[:4]
    # default standard Q-function
    mean_q_function = offrl.models.MeanQFunctionFactory()
    # Quantile Regression Q-function
    qr_q_function = offrl.models.QRQFunctionFactory(n_quantiles=200)
    # Implicit Quantile Network Q-function
    iqn_q_function = offrl.models.IQNQFunctionFactory(
        n_quantiles=32,
        n_greedy_quantiles=64,
        embed_size=64,
    )
    for q_func in (mean_q_function, qr_q_function, iqn_q_function):
        sac = offrl.algos.SACConfig(q_func_factory=q_func, batch_size=8).create()
        sac.fit(dataset, n_steps=2, n_steps_per_epoch=2, **NOOP)
        assert sac.predict_value(x, sac.predict(x)).shape == (4,)
        assert sac.config.q_func_factory == q_func
    assert qr_q_function.n_quantiles == 200
    assert (iqn_q_function.n_quantiles, iqn_q_function.n_greedy_quantiles, iqn_q_function.embed_size) == (32, 64, 64)


def test_q_functions_reference_with_cql() -> None:
    cql = offrl.algos.CQLConfig(q_func_factory=offrl.models.QRQFunctionFactory())
    assert isinstance(cql.q_func_factory, offrl.models.QRQFunctionFactory)
    # change hyper-parameters
    q_func = offrl.models.QRQFunctionFactory(n_quantiles=32)
    cql = offrl.algos.CQLConfig(q_func_factory=q_func).create()
    cql.create_impl((3,), 1)
    assert cql.predict_value(np.zeros((2, 3), np.float32), np.zeros((2, 1), np.float32)).shape == (2,)


def test_vector_encoder_factory(cartpole, workdir) -> None:
    dataset, _ = cartpole
    # encoder factory
    encoder_factory = offrl.models.VectorEncoderFactory(
        hidden_units=[300, 400],
        activation="tanh",
    )
    # set EncoderFactory
    dqn = offrl.algos.DQNConfig(encoder_factory=encoder_factory).create()
    dqn.build_with_dataset(dataset)
    encoder = encoder_factory.create((4,))
    linears = [m for m in encoder.modules() if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(4, 300), (300, 400)]
    assert any(isinstance(m, nn.Tanh) for m in encoder.modules())


def test_optimizer_factories(cartpole, workdir) -> None:
    from torch.optim import Adam

    dataset, _ = cartpole
    # modify weight decay
    optim_factory = offrl.models.OptimizerFactory(Adam, weight_decay=1e-4)
    # set OptimizerFactory
    dqn = offrl.algos.DQNConfig(optim_factory=optim_factory).create()
    dqn.fit(dataset, n_steps=2, n_steps_per_epoch=2, **NOOP)
    wrapper = optim_factory.create(nn.Linear(2, 2).named_parameters(), lr=1e-3)
    torch_optim = wrapper.optim  # d3rlpy's OptimizerWrapper.optim
    assert isinstance(torch_optim, Adam) and torch_optim.param_groups[0]["weight_decay"] == 1e-4
    # alias for Adam optimizer (d3rlpy <= 2.6 spelling; 2.7+ has it in d3rlpy.optimizers)
    for optim_factory in (offrl.models.AdamFactory(weight_decay=1e-4), offrl.optimizers.AdamFactory(weight_decay=1e-4)):
        dqn = offrl.algos.DQNConfig(optim_factory=optim_factory).create()
        dqn.fit(dataset, n_steps=2, n_steps_per_epoch=2, **NOOP)
        assert dqn.config.optim_factory.weight_decay == 1e-4
    for name in ("OptimizerFactory", "AdamFactory", "SGDFactory", "RMSpropFactory", "GPTAdamWFactory"):
        assert hasattr(offrl.models, name), name
    for name in ("OptimizerFactory", "AdamFactory", "AdamWFactory", "SGDFactory", "RMSpropFactory", "GPTAdamWFactory"):
        assert hasattr(offrl.optimizers, name), name


def test_improve_performance_tip(cartpole, pendulum, workdir) -> None:
    dataset, env = cartpole
    # use batch normalization
    encoder = offrl.models.DefaultEncoderFactory(use_batch_norm=True)
    # use distributional Q function leading to robust improvement
    q_func = offrl.models.QRQFunctionFactory()
    dqn = offrl.algos.DQNConfig(
        encoder_factory=encoder,
        q_func_factory=q_func,
    ).create()
    dqn.fit(dataset, n_steps=2, n_steps_per_epoch=2, **NOOP)
    assert any(isinstance(m, nn.BatchNorm1d) for m in encoder.create((4,)).modules())
    x = dataset.episodes[0].observations[:4]
    np.testing.assert_array_equal(dqn.predict(x), dqn.predict(x))  # batch norm in eval mode at predict

    # use dropout
    encoder = offrl.models.DefaultEncoderFactory(dropout_rate=0.2)
    sac = offrl.algos.SACConfig(actor_encoder_factory=encoder, batch_size=8).create()
    sac.fit(pendulum[0], n_steps=2, n_steps_per_epoch=2, **NOOP)
    # evaluation is deterministic: dropout is off at predict
    x = pendulum[0].episodes[0].observations[:4]
    np.testing.assert_array_equal(sac.predict(x), sac.predict(x))


@pytest.mark.parametrize("name", ["DefaultEncoderFactory", "PixelEncoderFactory", "VectorEncoderFactory"])
def test_documented_encoder_factories(name) -> None:
    factory = getattr(offrl.models, name)()
    shape = (1, 84, 84) if name == "PixelEncoderFactory" else (5,)
    encoder = factory.create(shape)
    out = encoder(torch.zeros((2, *shape)))
    assert out.shape[0] == 2
