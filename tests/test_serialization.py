"""Model files hold JSON and tensors only; bad files give clear errors."""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest
import torch
from torch import nn

import offrl
from offrl.algos import DQNConfig
from offrl.models import AdamFactory, EncoderFactory, OptimizerFactory, VectorEncoderFactory, register_encoder_factory
from offrl.serialization import from_json_value


def _trained(tmp_path):
    algo = DQNConfig(encoder_factory=VectorEncoderFactory(hidden_units=[8])).create()
    algo.create_impl((3,), 2)
    path = tmp_path / "model.d3"
    algo.save(path)
    return algo, path


def test_round_trip_and_no_leftover_temp_files(tmp_path):
    algo, path = _trained(tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["model.d3"]
    loaded = offrl.load_learnable(path)
    x = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    np.testing.assert_array_equal(loaded.predict(x), algo.predict(x))


def test_file_loads_with_weights_only(tmp_path):
    _, path = _trained(tmp_path)
    payload = torch.load(path, weights_only=True)
    assert payload["format"] == "offrl.model"
    assert json.loads(payload["params"])["algorithm"] == "dqn"


def test_truncated_file(tmp_path):
    _, path = _trained(tmp_path)
    data = path.read_bytes()
    cut = tmp_path / "cut.d3"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="cut.d3 is not a readable offrl model file"):
        offrl.load_learnable(cut)


def test_garbage_and_empty_files(tmp_path):
    for name, content in [("garbage.d3", b"\x00\x01not a model" * 10), ("empty.d3", b"")]:
        p = tmp_path / name
        p.write_bytes(content)
        with pytest.raises(ValueError, match=name):
            offrl.load_learnable(p)


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned > /dev/null",))


def test_pickled_objects_are_refused(tmp_path):
    p = tmp_path / "evil.d3"
    torch.save({"format": "offrl.model", "payload": _Evil()}, p)
    with pytest.raises(ValueError, match="evil.d3 is not a readable offrl model file"):
        offrl.load_learnable(p)


def test_foreign_torch_file(tmp_path):
    p = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(3)}, p)
    with pytest.raises(ValueError, match="foreign.pt is not an offrl model file"):
        offrl.load_learnable(p)


def test_unknown_algorithm_type(tmp_path):
    _, path = _trained(tmp_path)
    payload = torch.load(path, weights_only=True)
    params = json.loads(payload["params"])
    params["config"]["type"] = "not_an_algorithm"
    payload["params"] = json.dumps(params)
    bad = tmp_path / "bad.d3"
    torch.save(payload, bad)
    with pytest.raises(ValueError, match=r"bad.d3: unknown algorithm type 'not_an_algorithm'"):
        offrl.load_learnable(bad)


def test_missing_weights(tmp_path):
    _, path = _trained(tmp_path)
    payload = torch.load(path, weights_only=True)
    del payload["modules"]["q_function"]
    bad = tmp_path / "partial.d3"
    torch.save(payload, bad)
    with pytest.raises(ValueError, match=r"partial.d3 has no weights for \['q_function'\]"):
        offrl.load_learnable(bad)


def test_missing_file():
    with pytest.raises(FileNotFoundError, match="no model file"):
        offrl.load_learnable("/nonexistent/model.d3")


@dataclasses.dataclass
class TinyEncoderFactory(EncoderFactory):
    feature_size: int = 4

    @staticmethod
    def get_type() -> str:
        return "tiny_test_encoder"

    def create(self, observation_shape):
        return nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(observation_shape)), self.feature_size), nn.ReLU())

    def create_with_action(self, observation_shape, action_size, discrete_action=False):
        raise NotImplementedError


def test_custom_encoder_needs_registration(tmp_path):
    algo = DQNConfig(encoder_factory=TinyEncoderFactory(feature_size=5)).create()
    algo.create_impl((3,), 2)
    path = tmp_path / "custom.d3"
    algo.save(path)
    with pytest.raises(ValueError, match=r"unknown encoder type 'tiny_test_encoder'.*register_encoder_factory"):
        offrl.load_learnable(path)
    register_encoder_factory(TinyEncoderFactory)
    loaded = offrl.load_learnable(path)
    x = np.ones((2, 3), dtype=np.float32)
    np.testing.assert_array_equal(loaded.predict_value(x, [0, 1]), algo.predict_value(x, [0, 1]))


def test_save_is_atomic(tmp_path, monkeypatch):
    algo, path = _trained(tmp_path)
    before = path.read_bytes()

    def broken_save(obj, f, *args, **kwargs):
        with open(f, "wb") as fh:
            fh.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        algo.save(path)
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["model.d3"]


def test_optimizer_factories_round_trip():
    for factory in [OptimizerFactory(torch.optim.RMSprop, alpha=0.9), OptimizerFactory("SGD", momentum=0.5, clip_grad_norm=1.0), AdamFactory(weight_decay=1e-4)]:
        rebuilt = from_json_value(json.loads(json.dumps(factory.to_dict())))
        assert rebuilt.to_dict() == factory.to_dict()
    with pytest.raises(ValueError, match="torch.optim"):
        from_json_value({"kind": "optimizer", "type": "optimizer", "params": {"optim_cls": "os.system", "clip_grad_norm": None, "kwargs": {}}})


def test_load_model_checks_algorithm_type(tmp_path):
    _, path = _trained(tmp_path)
    from offrl.algos import DoubleDQNConfig

    other = DoubleDQNConfig().create()
    with pytest.raises(ValueError, match="'dqn' model"):
        other.load_model(path)


# ------------------------------------------------ hostile model files (issue 15)


def _rewrite(tmp_path, name, edit, algo_path=None):
    """A copy of a saved model whose payload (config record as a dict) ``edit`` changed."""
    if algo_path is None:
        _, algo_path = _trained(tmp_path)
    payload = torch.load(algo_path, weights_only=True)
    params = json.loads(payload["params"])
    edit(payload, params)
    payload["params"] = json.dumps(params)
    out = tmp_path / name
    torch.save(payload, out)
    return out


@pytest.fixture
def real_builds(monkeypatch):
    """Records the devices networks are really built on (the meta device,
    where nothing is allocated, is not recorded)."""
    from offrl.algos.base import QLearningAlgoBase

    builds = []
    original = QLearningAlgoBase.create_impl

    def spy(self, observation_shape, action_size):
        if torch.get_default_device().type != "meta":
            builds.append((observation_shape, action_size))
        return original(self, observation_shape, action_size)

    monkeypatch.setattr(QLearningAlgoBase, "create_impl", spy)
    return builds


def _set_config(field, value):
    def edit(payload, params):
        params["config"]["params"][field] = value
    return edit


def _set_hidden_units(value):
    def edit(payload, params):
        params["config"]["params"]["encoder_factory"]["params"]["hidden_units"] = value
    return edit


def _set_param(field, value):
    def edit(payload, params):
        params[field] = value
    return edit


@pytest.mark.parametrize(
    "edit, declared",
    [
        (_set_config("n_critics", 10**7), "n_critics=10000000"),
        (_set_param("observation_shape", [10**12]), "observation_shape=[1000000000000]"),
        (_set_param("action_size", 2**62), f"action_size={2**62}"),
        (_set_hidden_units([10**9, 10**9]), "hidden_units=[1000000000, 1000000000]"),
        (_set_param("observation_shape", [3, 10**6, 10**6]), "observation_shape=[3, 1000000, 1000000]"),
    ],
)
def test_size_bombs_are_refused_before_allocating(tmp_path, real_builds, edit, declared):
    bomb = _rewrite(tmp_path, "bomb.d3", edit)
    real_builds.clear()
    with pytest.raises(ValueError) as info:
        offrl.load_learnable(bomb)
    message = str(info.value)
    assert "bomb.d3" in message and declared in message, message
    assert real_builds == []


def test_a_million_hidden_layers_are_refused_from_the_record(tmp_path, real_builds):
    bomb = _rewrite(tmp_path, "layers.d3", _set_hidden_units([1] * 100_000))
    real_builds.clear()
    with pytest.raises(ValueError, match=r"layers.d3: config.params.encoder_factory.params.hidden_units declares 100000 items"):
        offrl.load_learnable(bomb)
    assert real_builds == []


@pytest.mark.parametrize(
    "edit, message",
    [
        (_set_param("observation_shape", [0]), r"observation_shape is \[0\]; expected a non-empty list of positive ints"),
        (_set_param("observation_shape", ["3"]), r"observation_shape is \['3'\]"),
        (_set_param("action_size", True), r"action_size is True; expected a positive int"),
        (_set_param("action_size", -2), r"action_size is -2"),
        (_set_config("n_critics", 0), r"n_critics must be a positive int, got 0"),
    ],
)
def test_malformed_declared_sizes(tmp_path, edit, message):
    bad = _rewrite(tmp_path, "sizes.d3", edit)
    with pytest.raises(ValueError, match="sizes.d3.*" + message):
        offrl.load_learnable(bad)


def test_params_json_declaring_more_than_free_memory_is_refused(tmp_path, real_builds):
    algo, _ = _trained(tmp_path)
    params = algo.to_params()
    params["observation_shape"] = [10**12]
    path = tmp_path / "params.json"
    path.write_text(json.dumps(params))
    real_builds.clear()
    with pytest.raises(ValueError, match=r"params.json: the config declares networks of \d+ numbers "
                                         r"\(observation_shape=\[1000000000000\].*GiB free"):
        DQNConfig().create().from_json(str(path))
    assert real_builds == []
    params["observation_shape"] = [3]
    path.write_text(json.dumps(params))
    assert type(offrl.algos.DQN.from_json(str(path))).__name__ == "DQN"


def _scaled(tmp_path):
    from offrl.preprocessing import StandardObservationScaler

    config = DQNConfig(encoder_factory=VectorEncoderFactory(hidden_units=[8]),
                       observation_scaler=StandardObservationScaler(mean=np.array([0.5, -1.0, 2.0]),
                                                                    std=np.array([1.0, 2.0, 0.5])))
    algo = config.create()
    algo.create_impl((3,), 2)
    path = tmp_path / "scaled.d3"
    algo.save(path)
    return algo, path


def _scaler_state(key, value):
    def edit(payload, params):
        payload["scalers"]["observation_scaler"][key] = value
    return edit


def _module_state(module, key, value):
    def edit(payload, params):
        payload["modules"][module][key] = value
    return edit


def _weight_with(value, dtype=torch.float32):
    w = torch.zeros(2, 8, dtype=dtype)
    w[1, 3] = value
    return w


@pytest.mark.parametrize(
    "edit, message",
    [
        (_scaler_state("mean", torch.tensor([0.5], dtype=torch.float64)),
         r"observation_scaler does not fit: .*mean has shape \(1,\), observations have shape \(3,\)"),
        (_scaler_state("std", torch.tensor([1.0, float("nan"), 1.0], dtype=torch.float64)),
         r"scalers\['observation_scaler'\]\['std'\] holds nan at index \(1,\)"),
        (_scaler_state("std", torch.tensor([1.0, -2.0, 1.0], dtype=torch.float64)),
         r"scalers\['observation_scaler'\]\['std'\] holds a negative standard deviation"),
        (_scaler_state("mean", torch.tensor([1, 2, 3])),
         r"scalers\['observation_scaler'\]\['mean'\] has dtype torch.int64; expected floating-point statistics"),
        (_scaler_state("mean", torch.ones(3, dtype=torch.complex64)),
         r"scalers\['observation_scaler'\]\['mean'\] holds complex numbers"),
        (_scaler_state("transform", torch.ones(3, dtype=torch.float64)),
         r"scalers\['observation_scaler'\]\['transform'\] is not a statistic of StandardObservationScaler"),
        (_module_state("q_function", "head.weight", _weight_with(float("nan"))),
         r"modules\['q_function'\]\['head.weight'\] holds nan at index \(1, 3\)"),
        (_module_state("q_function", "head.weight", _weight_with(float("-inf"))),
         r"modules\['q_function'\]\['head.weight'\] holds -inf at index \(1, 3\)"),
        (_module_state("q_function", "head.weight", _weight_with(1, torch.complex64)),
         r"modules\['q_function'\]\['head.weight'\] holds complex numbers"),
        (_module_state("q_function", "head.weight", _weight_with(1, torch.float64)),
         r"modules\['q_function'\]\['head.weight'\] has dtype torch.float64; expected torch.float32"),
        (_module_state("q_function", "head.extra", torch.zeros(0)),
         r"modules\['q_function'\]\['head.extra'\] is not a state entry of the network the config declares"),
        (lambda payload, params: payload["modules"].update(predict={"weight": torch.zeros(0)}),
         r"modules \['predict'\] are not part of the recorded algorithm"),
    ],
)
def test_corrupt_state_is_refused_naming_file_and_key(tmp_path, edit, message):
    _, path = _scaled(tmp_path)
    bad = _rewrite(tmp_path, "corrupt.d3", edit, path)
    with pytest.raises(ValueError, match="corrupt.d3.*" + message):
        offrl.load_learnable(bad)


def _drop(*keys):
    def edit(payload, params):
        table = payload
        for key in keys[:-1]:
            table = table[key]
        del table[keys[-1]]
    return edit


def _add(keys, value):
    def edit(payload, params):
        table = payload
        for key in keys[:-1]:
            table = table[key]
        table[keys[-1]] = value
    return edit


@pytest.mark.parametrize(
    "edit, message",
    [
        (_drop("modules", "q_function", "head.bias"), r"modules\['q_function'\] is missing 'head.bias'"),
        (_drop("optimizers", "optim"), r"has no optimizer state for \['optim'\]"),
        (_drop("scalers", "observation_scaler", "std"), r"scalers\['observation_scaler'\] is missing \['std'\]"),
        (_add(("optimizers", "fit"), {"state": {}, "param_groups": []}), r"optimizers \['fit'\] are not part"),
        (_add(("scalers", "load_model"), {}), r"scalers\['load_model'\] is not a scaler of an algorithm"),
        (_add(("__reduce__",), 1), r"unknown entries \['__reduce__'\]"),
        (_add(("grad_step",), -1), r"grad_step is -1; expected a non-negative int"),
        (_add(("grad_step",), True), r"grad_step is True"),
        (_add(("modules", "q_function"), [1, 2]), r"modules\['q_function'\] is not a named state dict"),
        (_add(("optimizers", "optim", "state"), {0: {"exp_avg": torch.tensor([float("nan")])}}),
         r"optimizers\['optim'\]\['state'\]\[0\]\['exp_avg'\] holds nan"),
        (_add(("optimizers", "optim", "state"), {0: {"step": torch.tensor(1.0), "exp_avg": torch.zeros(5, 5),
                                                      "exp_avg_sq": torch.zeros(5, 5)}}),
         r"optimizers\['optim'\]\['state'\]\[0\]\['exp_avg'\] has shape \(5, 5\); the parameter has \(8, 3\)"),
        (_add(("optimizers", "optim", "param_groups"), []), r"optimizers\['optim'\] has 0 parameter groups"),
    ],
)
def test_missing_and_extra_entries_are_refused(tmp_path, edit, message):
    _, path = _scaled(tmp_path)
    payload = torch.load(path, weights_only=True)
    assert list(payload["optimizers"]) == ["optim"]
    bad = _rewrite(tmp_path, "entries.d3", edit, path)
    with pytest.raises(ValueError, match="entries.d3.*" + message):
        offrl.load_learnable(bad)


def test_a_constant_feature_fitted_std_of_zero_round_trips(tmp_path):
    from offrl.dataset import MDPDataset
    from offrl.preprocessing import StandardObservationScaler

    obs = np.random.default_rng(0).normal(size=(20, 3))
    obs[:, 1] = 2.0  # fitting gives std 0 there; transform adds eps
    dataset = MDPDataset(obs, np.zeros(20, dtype=int), np.zeros(20), np.r_[np.zeros(19), 1.0], action_size=2)
    algo = DQNConfig(encoder_factory=VectorEncoderFactory(hidden_units=[8]),
                     observation_scaler=StandardObservationScaler()).create()
    algo.build_with_dataset(dataset)
    path = tmp_path / "constant.d3"
    algo.save(path)
    loaded = offrl.load_learnable(path)
    np.testing.assert_array_equal(loaded.predict(obs.astype(np.float32)), algo.predict(obs.astype(np.float32)))


def test_load_model_leaves_the_algorithm_unchanged_on_a_bad_file(tmp_path):
    from offrl.dataset import MDPDataset

    algo, path = _scaled(tmp_path)
    rng = np.random.default_rng(1)
    dataset = MDPDataset(rng.normal(size=(40, 3)), rng.integers(0, 2, 40), rng.normal(size=40),
                         np.r_[np.zeros(39), 1.0], action_size=2)
    from offrl.logging import NoopAdapterFactory

    algo.fit(dataset, n_steps=3, n_steps_per_epoch=3, show_progress=False, logger_adapter=NoopAdapterFactory())
    before = algo.get_state()
    x = rng.normal(size=(5, 3)).astype(np.float32)
    values = algo.predict_value(x, np.zeros(5, dtype=int))
    # the file's networks and optimizer are valid, its scaler (checked last) is not
    # (saved before the fit: loading its networks or optimizer would change the algorithm)
    bad = _rewrite(tmp_path, "half.d3", _scaler_state("std", torch.tensor([1.0, 1.0], dtype=torch.float64)), path)
    with pytest.raises(ValueError, match="half.d3"):
        algo.load_model(bad)
    after = algo.get_state()
    np.testing.assert_array_equal(algo.predict_value(x, np.zeros(5, dtype=int)), values)
    assert after["grad_step"] == before["grad_step"] == 3
    for key in before["modules"]:
        for name, tensor in before["modules"][key].items():
            assert torch.equal(after["modules"][key][name], tensor), (key, name)
    optim_before, optim_after = before["optimizers"]["optim"]["state"], after["optimizers"]["optim"]["state"]
    assert optim_before.keys() == optim_after.keys() and len(optim_before) > 0
    for index in optim_before:
        for field, tensor in optim_before[index].items():
            assert torch.equal(optim_after[index][field], tensor)
    np.testing.assert_array_equal(algo.observation_scaler.std, [1.0, 2.0, 0.5])


@pytest.mark.parametrize("command", [["info"], ["evaluate", "--env", "CartPole-v1", "--n-trials", "1"]])
def test_cli_reports_a_bomb_in_one_line(tmp_path, capsys, command):
    from offrl.cli import main

    bomb = _rewrite(tmp_path, "bomb.d3", _set_config("n_critics", 10**7))
    code = main([command[0], str(bomb)] + command[1:])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "bomb.d3" in err and "n_critics=10000000" in err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes need a POSIX system")
def test_a_named_pipe_is_refused_without_reading(tmp_path):
    fifo = tmp_path / "pipe.d3"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="pipe.d3 is not a regular file"):
        offrl.load_learnable(fifo)


@pytest.mark.parametrize(
    "edit",
    [_module_state("q_function", "head.weight", _weight_with(float("nan"))),
     _scaler_state("mean", torch.tensor([1, 2, 3]))],
)
def test_cli_info_reports_corrupt_state_in_one_line(tmp_path, capsys, edit):
    from offrl.cli import main

    _, path = _scaled(tmp_path)
    bad = _rewrite(tmp_path, "corrupt.d3", edit, path)
    assert main(["info", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("offrl info: error: ") and err.count("\n") == 1 and "corrupt.d3" in err


def test_optimizer_with_a_learning_rate_scheduler_round_trips(tmp_path):
    """A model whose optimizer steps a scheduler saves the scheduler's state
    beside the optimizer's, and load_learnable restores both."""
    from offrl.optimizers import AdamWFactory, CosineAnnealingLRFactory

    rng = np.random.default_rng(0)
    observations = rng.normal(size=(60, 3)).astype(np.float32)
    terminals = (np.arange(60) % 30 == 29).astype(np.float32)
    dataset = offrl.dataset.MDPDataset(observations, rng.integers(2, size=60), rng.normal(size=60).astype(np.float32), terminals)
    algo = offrl.algos.DQNConfig(batch_size=8, optim_factory=AdamWFactory(
        lr_scheduler_factory=CosineAnnealingLRFactory(T_max=10))).create()
    algo.fit(dataset, n_steps=4, n_steps_per_epoch=2, show_progress=False, logger_adapter=offrl.logging.NoopAdapterFactory())
    path = tmp_path / "scheduled.d3"
    algo.save(path)
    loaded = offrl.load_learnable(path)
    np.testing.assert_array_equal(loaded.predict(observations), algo.predict(observations))
    assert loaded.optimizers["optim"].lr_scheduler.state_dict() == algo.optimizers["optim"].lr_scheduler.state_dict()
    assert loaded.optimizers["optim"].lr_scheduler.last_epoch == 4
