"""d3rlpy 2.8.1 fidelity of configs and of create/fit/fitter: compile_graph,
enable_ddp, fitter's positional order, serialize/deserialize, share_encoder."""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
import warnings

import numpy as np
import pytest
import torch

import offrl
import offrl.algos
import offrl.algos.config
from offrl.algos import DQNConfig, SACConfig
from offrl.models import IQNQFunctionFactory, MeanQFunctionFactory, QRQFunctionFactory, VectorEncoderFactory
from offrl.serialization import registered

for _module in pkgutil.iter_modules(offrl.algos.__path__):
    importlib.import_module(f"offrl.algos.{_module.name}")

CONFIGS = dict(sorted(registered("algorithm").items()))

#: what d3rlpy 2.8.1 prints for ``DQNConfig(batch_size=3).serialize()``
D3RLPY_DQN_JSON = (
    '{"batch_size": 3, "gamma": 0.99, "observation_scaler": {"type": "none", "params": {}}, "action_scaler": '
    '{"type": "none", "params": {}}, "reward_scaler": {"type": "none", "params": {}}, "compile_graph": false, '
    '"learning_rate": 6.25e-05, "optim_factory": {"type": "adam", "params": {"clip_grad_norm": null, '
    '"lr_scheduler_factory": {"type": "none", "params": {}}, "betas": [0.9, 0.999], "eps": 1e-08, "weight_decay": 0, '
    '"amsgrad": false}}, "encoder_factory": {"type": "default", "params": {"activation": "relu", "use_batch_norm": '
    'false, "dropout_rate": null}}, "q_func_factory": {"type": "mean", "params": {"share_encoder": false}}, '
    '"n_critics": 1, "target_update_interval": 8000}'
)


# ------------------------------------------------------------ compile_graph
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_config_has_compile_graph(name):
    cls = CONFIGS[name]
    config = cls()
    assert config.compile_graph is False
    assert "compile_graph" in config.get_params()
    assert cls(compile_graph=True).compile_graph is True
    assert json.loads(config.serialize())["compile_graph"] is False
    with pytest.raises(ValueError, match="compile_graph must be a bool, got 'yes'"):
        cls(compile_graph="yes")


def test_compile_graph_is_not_warned_about_at_create():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        algo = DQNConfig(compile_graph=True).create()
    assert algo.compiled is False  # compiled at the first training step (tests/algos/test_compile_graph.py)


# ----------------------------------------------------------------- enable_ddp
def test_create_signature_matches_d3rlpy():
    parameters = inspect.signature(DQNConfig.create).parameters
    assert list(parameters) == ["self", "device", "enable_ddp"]
    assert parameters["device"].default is False and parameters["enable_ddp"].default is False


def test_enable_ddp_without_a_process_group_says_how_to_launch(monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR"):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(ValueError, match="enable_ddp=True needs a torch.distributed process group.*torchrun"):
        DQNConfig().create(enable_ddp=True)
    with pytest.raises(ValueError, match="torchrun"):
        offrl.algos.DQN(DQNConfig(), "cpu:0", True)  # d3rlpy's positional (config, device, enable_ddp)
    with pytest.raises(TypeError, match="enable_ddp must be a bool, got str"):
        DQNConfig().create(enable_ddp="yes")
    assert isinstance(DQNConfig().create(enable_ddp=False), offrl.algos.DQN)


def test_enable_ddp_inside_a_process_group_creates_a_data_parallel_algorithm(tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        assert DQNConfig().create(enable_ddp=True).enable_ddp is True  # training: tests/algos/test_ddp.py
    finally:
        dist.destroy_process_group()


# -------------------------------------------------------------------- fitter
def test_fit_and_fitter_parameter_order_is_d3rlpys():
    common = ["save_interval", "evaluators", "callback", "epoch_callback"]
    fit = list(inspect.signature(DQNConfig().create().fit).parameters)
    fitter = list(inspect.signature(DQNConfig().create().fitter).parameters)
    assert fit[:13] == ["dataset", "n_steps", "n_steps_per_epoch", "experiment_name", "with_timestamp", "logging_steps",
                        "logging_strategy", "logger_adapter", "show_progress"] + common
    assert fitter[:13] == ["dataset", "n_steps", "n_steps_per_epoch", "logging_steps", "logging_strategy",
                           "experiment_name", "with_timestamp", "logger_adapter", "show_progress"] + common


def test_fitter_positional_arguments_land_where_d3rlpy_puts_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    data = offrl.dataset.MDPDataset(rng.normal(size=(32, 3)), rng.integers(0, 2, 32), rng.normal(size=32),
                                    np.r_[np.zeros(31), 1], action_size=2)
    algo = DQNConfig(batch_size=4, encoder_factory=VectorEncoderFactory(hidden_units=[4])).create()
    # (dataset, n_steps, n_steps_per_epoch, logging_steps, logging_strategy, experiment_name, with_timestamp, logger_adapter)
    epochs = list(algo.fitter(data, 4, 2, 500, "epoch", "positional", False, offrl.logging.FileAdapterFactory(str(tmp_path / "logs")),
                              False))
    assert [epoch for epoch, _ in epochs] == [1, 2]
    assert (tmp_path / "logs" / "positional" / "params.json").exists()


# --------------------------------------------------------- serialize / deserialize
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_serialize_round_trips_every_config(name, tmp_path):
    cls = CONFIGS[name]
    config = cls(batch_size=7, gamma=0.5)
    text = config.serialize()
    assert isinstance(text, str)
    data = json.loads(text)
    assert data["batch_size"] == 7 and data["observation_scaler"] == {"type": "none", "params": {}}
    assert all("kind" not in v for v in data.values() if isinstance(v, dict))  # d3rlpy's {"type", "params"}
    assert cls.deserialize(text) == config
    assert cls.deserialize_from_dict(config.serialize_to_dict()) == config
    (tmp_path / "config.json").write_text(text)
    assert cls.deserialize_from_file(str(tmp_path / "config.json")) == config


def test_serialize_matches_d3rlpy_and_reads_its_output():
    ours = json.loads(DQNConfig(batch_size=3).serialize())
    theirs = json.loads(D3RLPY_DQN_JSON)
    assert theirs["optim_factory"]["params"]["lr_scheduler_factory"] == {"type": "none", "params": {}}
    assert ours == theirs  # the optimizer's unset scheduler included
    assert DQNConfig.deserialize(D3RLPY_DQN_JSON) == DQNConfig(batch_size=3)


def test_serialize_keeps_fitted_scalers_and_nested_factories():
    from offrl.preprocessing import MinMaxActionScaler, StandardObservationScaler

    config = SACConfig(observation_scaler=StandardObservationScaler(), action_scaler=MinMaxActionScaler(),
                       actor_encoder_factory=VectorEncoderFactory(hidden_units=[5, 6]),
                       q_func_factory=QRQFunctionFactory(n_quantiles=4, share_encoder=True))
    data = config.serialize_to_dict()
    assert data["actor_encoder_factory"]["params"]["hidden_units"] == [5, 6]
    assert data["q_func_factory"] == {"type": "qr", "params": {"share_encoder": True, "n_quantiles": 4}}
    assert data["observation_scaler"]["type"] == "standard"
    assert SACConfig.deserialize(config.serialize()) == config


def test_deserialize_refuses_bad_input():
    with pytest.raises(ValueError, match=r"DQNConfig has no parameters \['batchsize'\]"):
        DQNConfig.deserialize('{"batchsize": 3}')
    with pytest.raises(ValueError, match=r"n_critics: a \{'type', 'params'\} record where DQNConfig expects a plain value"):
        DQNConfig.deserialize('{"n_critics": {"type": "mean", "params": {}}}')
    with pytest.raises(ValueError, match="unknown encoder type 'os.system'"):
        DQNConfig.deserialize('{"encoder_factory": {"type": "os.system", "params": {}}}')
    with pytest.raises(TypeError, match="expects a JSON string, got dict"):
        DQNConfig.deserialize({"batch_size": 3})
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        DQNConfig.deserialize('{"batch_size": -1}')


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_from_json_and_from_dict_read_offrls_record_and_d3rlpys_parameters(name):
    cls = CONFIGS[name]
    config = cls(batch_size=7, gamma=0.5)
    assert cls.from_json(config.to_json()) == config  # offrl's {"kind", "type", "params"} record
    assert cls.from_dict(config.to_dict()) == config
    assert cls.from_json(config.serialize()) == config  # d3rlpy's to_json() / serialize()
    assert cls.from_dict(config.serialize_to_dict()) == config
    assert cls.from_dict({"gamma": 0.5, "batch_size": 7}) == config  # fields left out keep their defaults
    assert cls.from_dict({}) == cls()


def test_from_json_reads_d3rlpys_text_and_names_bad_input():
    assert DQNConfig.from_json(D3RLPY_DQN_JSON) == DQNConfig(batch_size=3)
    assert DQNConfig.from_json(D3RLPY_DQN_JSON.encode(), infer_missing=True) == DQNConfig(batch_size=3)
    with pytest.raises(ValueError, match=r"DQNConfig.from_json: not valid JSON"):
        DQNConfig.from_json('{"batch_size": 3')
    with pytest.raises(TypeError, match="DQNConfig.from_dict takes a dict, got list"):
        DQNConfig.from_json("[3]")
    with pytest.raises(ValueError, match=r"DQNConfig has no parameters \['batchsize'\]"):
        DQNConfig.from_dict({"batchsize": 3})
    with pytest.raises(ValueError, match="DQNConfig cannot load a 'sac' record"):
        DQNConfig.from_dict(SACConfig().to_dict())
    with pytest.raises(ValueError, match="unknown encoder type 'os.system'"):
        DQNConfig.from_json('{"encoder_factory": {"type": "os.system", "params": {}}}')


def test_factories_from_json_and_from_dict_read_both_forms():
    from offrl.optimizers import AdamFactory

    encoder = VectorEncoderFactory(hidden_units=[8], activation="tanh")
    assert VectorEncoderFactory.from_dict({"hidden_units": [8], "activation": "tanh"}) == encoder  # d3rlpy's to_dict()
    assert VectorEncoderFactory.from_json(encoder.to_json()) == encoder
    adam = AdamFactory(weight_decay=0.1, betas=(0.5, 0.9))
    assert AdamFactory.from_json('{"weight_decay": 0.1, "betas": [0.5, 0.9]}') == adam
    assert AdamFactory.from_dict(adam.to_dict()) == adam
    assert QRQFunctionFactory.from_json('{"share_encoder": true, "n_quantiles": 8}') == QRQFunctionFactory(
        share_encoder=True, n_quantiles=8)


def test_factory_serialize_matches_d3rlpy():
    assert QRQFunctionFactory(n_quantiles=5).serialize() == '{"share_encoder": false, "n_quantiles": 5}'
    assert MeanQFunctionFactory().serialize() == '{"share_encoder": false}'
    assert IQNQFunctionFactory.deserialize('{"share_encoder": true, "n_quantiles": 8}') == IQNQFunctionFactory(
        share_encoder=True, n_quantiles=8)


# ------------------------------------------------------------- share_encoder
@pytest.mark.parametrize("discrete", [False, True])
def test_share_encoder_uses_one_encoder_for_all_critics(discrete):
    encoder = VectorEncoderFactory(hidden_units=[6])
    shared = MeanQFunctionFactory(share_encoder=True).create(encoder, (3,), 2, 3, discrete)
    separate = MeanQFunctionFactory().create(encoder, (3,), 2, 3, discrete)
    n_encoder = sum(p.numel() for p in shared.encoder.parameters())
    assert n_encoder == sum(p.numel() for p in VectorEncoderFactory(hidden_units=[6]).create(
        (3,)).parameters()) + (0 if discrete else 2 * 6)
    assert sum(p.numel() for p in separate.encoder.parameters()) == 3 * n_encoder
    x = torch.randn(5, 3)
    action = torch.randint(0, 2, (5, 1)) if discrete else torch.randn(5, 2)
    values = shared.expected(x, None if discrete else action)
    assert values.shape == ((3, 5, 2) if discrete else (3, 5, 1))
    # each critic's head on the one shared feature vector
    features = shared.encoder.encoder(x) if discrete else shared.encoder.encoder(x, action)
    for member in range(3):
        expected = features @ shared.head.weight[member] + shared.head.bias[member]
        torch.testing.assert_close(values[member], expected, rtol=1e-5, atol=1e-6)
    values.sum().backward()  # the shared encoder gets every critic's gradient
    assert all(p.grad is not None for p in shared.encoder.parameters())


# ------------------------------------------------------------ module aliases
def test_qlearning_alias_module_has_d3rlpys_names():
    import offrl.algos.qlearning as qlearning
    from offrl.algos.qlearning import CQLConfig, DQN, IQLConfig, QLearningAlgoBase  # d3rlpy's import path

    assert CQLConfig is offrl.algos.CQLConfig and DQN is offrl.algos.DQN and IQLConfig is offrl.algos.IQLConfig
    assert QLearningAlgoBase is offrl.algos.QLearningAlgoBase
    # every d3rlpy 2.8.1 name is either here (the same object as offrl.algos') or listed as missing with a reason
    assert set(qlearning.__all__) | set(qlearning.MISSING) == set(qlearning.D3RLPY_NAMES)
    assert not set(qlearning.__all__) & set(qlearning.MISSING)
    for name in qlearning.__all__:
        assert getattr(qlearning, name) is getattr(offrl.algos, name)
    for name in ("SACConfig", "TD3PlusBCConfig", "DiscreteCQLConfig", "DoubleDQNConfig", "BCConfig", "ConstantEpsilonGreedy"):
        assert name in qlearning.__all__


def test_qlearning_alias_submodules_and_missing_names():
    import offrl.algos.cql
    import offrl.algos.qlearning as qlearning
    from offrl.algos.qlearning.cql import CQLConfig

    assert CQLConfig is offrl.algos.cql.CQLConfig
    assert qlearning.QLearningAlgoImplBase is offrl.algos.QLearningAlgoImplBase  # d3rlpy's extension API (issue 30)
    assert not qlearning.MISSING
    if "BCQConfig" in qlearning.MISSING:
        with pytest.raises(AttributeError, match="does not provide d3rlpy's BCQConfig yet: planned in issue 17"):
            qlearning.BCQConfig
        with pytest.raises(ImportError):
            from offrl.algos.qlearning import BCQConfig  # noqa: F401
    with pytest.raises(AttributeError, match="has no attribute 'NotAName'"):
        qlearning.NotAName


def test_transformer_alias_module_names_what_is_missing():
    import offrl.algos.transformer as transformer

    assert set(transformer.__all__) | set(transformer.MISSING) == set(transformer.D3RLPY_NAMES)
    for name in transformer.__all__:
        assert getattr(transformer, name) is getattr(offrl.algos, name)
    if "DecisionTransformerConfig" in transformer.MISSING:
        with pytest.raises(AttributeError, match="DecisionTransformerConfig yet: the Decision Transformer family is planned in issue 18"):
            transformer.DecisionTransformerConfig
