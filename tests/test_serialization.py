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
from offrl._model_file import read_payload, weights_only_is_safe, write_payload
from offrl.serialization import dumps, from_json_value, model_payload


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


def test_file_is_safetensors_with_offrl_json(tmp_path):
    """A model file is a safetensors file: any safetensors reader sees its
    tensors by dotted name and offrl's JSON in the metadata."""
    from safetensors import safe_open

    algo, path = _trained(tmp_path)
    with safe_open(str(path), framework="pt") as f:
        metadata = f.metadata()
        names = set(f.keys())
        weight = f.get_tensor("modules.q_function.head.weight")
    assert metadata["format"] == "offrl.model" and metadata["format_version"] == "2"
    record = json.loads(metadata["offrl"])
    assert json.loads(record["params"])["algorithm"] == "dqn"
    assert record["modules"]["q_function"]["head.weight"] == {"$tensor": "modules.q_function.head.weight"}
    assert names == {f"modules.{m}.{k}" for m, state in algo.get_state()["modules"].items() for k in state}
    assert torch.equal(weight, algo.get_state()["modules"]["q_function"]["head.weight"])


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


#: what a torch archive gets on a torch whose weights_only unpickler offrl does not trust (before 2.10): refused
#: unread, whatever it holds (offrl._model_file.weights_only_is_safe)
_ARCHIVE_REFUSED = "is a torch archive .*offrl reads version-1 files only with torch >= 2.10"


def test_pickled_objects_are_refused(tmp_path):
    p = tmp_path / "evil.d3"
    torch.save({"format": "offrl.model", "payload": _Evil()}, p)
    refused = "is not a readable offrl model file" if weights_only_is_safe() else _ARCHIVE_REFUSED
    with pytest.raises(ValueError, match="evil.d3 " + refused):
        offrl.load_learnable(p)


def test_foreign_torch_file(tmp_path):
    p = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(3)}, p)
    refused = "is not an offrl model file" if weights_only_is_safe() else _ARCHIVE_REFUSED
    with pytest.raises(ValueError, match="foreign.pt " + refused):
        offrl.load_learnable(p)


def test_unknown_algorithm_type(tmp_path):
    _, path = _trained(tmp_path)
    payload = read_payload(path)
    params = json.loads(payload["params"])
    params["config"]["type"] = "not_an_algorithm"
    payload["params"] = json.dumps(params)
    bad = tmp_path / "bad.d3"
    write_payload(payload, bad)
    with pytest.raises(ValueError, match=r"bad.d3: unknown algorithm type 'not_an_algorithm'"):
        offrl.load_learnable(bad)


def test_missing_weights(tmp_path):
    _, path = _trained(tmp_path)
    payload = read_payload(path)
    del payload["modules"]["q_function"]
    bad = tmp_path / "partial.d3"
    write_payload(payload, bad)
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

    real_open = open

    def broken_open(file, mode="r", *args, **kwargs):
        handle = real_open(file, mode, *args, **kwargs)
        if "w" in mode and ".offrl-" in str(file):
            handle.write(b"partial")
            handle.close()
            raise OSError(28, "No space left on device")
        return handle

    import builtins

    monkeypatch.setattr(builtins, "open", broken_open)
    with pytest.raises(OSError, match="model.d3"):
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
    payload = read_payload(algo_path)
    params = json.loads(payload["params"])
    edit(payload, params)
    payload["params"] = json.dumps(params)
    out = tmp_path / name
    write_payload(payload, out)
    return out


@pytest.fixture
def real_builds(monkeypatch):
    """Records the devices networks are really built on (the meta device,
    where nothing is allocated, is not recorded)."""
    from offrl.algos.base import QLearningAlgoBase

    builds = []
    original = QLearningAlgoBase.create_impl

    def spy(self, observation_shape, action_size):
        # where a new tensor lands (torch 2.5's get_default_device() misses a `with torch.device(...)` block)
        if torch.empty(0).device.type != "meta":
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


def _safetensors_writes_complex() -> bool:
    from safetensors.torch import save

    try:
        save({"x": torch.ones(1, dtype=torch.complex64)})
    except (KeyError, TypeError, ValueError):
        return False
    return True


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
    if "complex" in message and not _safetensors_writes_complex():
        pytest.skip("this safetensors cannot write complex tensors (0.4.0 cannot); "
                    "test_a_header_that_lies_is_refused_before_any_tensor_is_read reads a C64 tensor written by hand")
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
    payload = read_payload(path)
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


# ------------------------------------------------ format version 2: no unpickler (issue 28)


def _save_v1(algo, path):
    """A model file as offrl wrote it before format version 2: a torch.save archive."""
    payload = {**model_payload(algo), "format_version": 1, "params": dumps(algo.to_params())}
    torch.save(payload, path)


def _forbid_unpickling(monkeypatch):
    import pickle

    def refuse(*args, **kwargs):
        raise AssertionError("an unpickler was called")

    for owner, name in ((torch, "load"), (torch.serialization, "load"), (pickle, "load"), (pickle, "loads"),
                        (pickle, "Unpickler")):
        monkeypatch.setattr(owner, name, refuse)


def test_a_version_2_file_loads_without_any_unpickler(tmp_path, monkeypatch):
    from offrl.preprocessing import StandardObservationScaler

    algo = DQNConfig(encoder_factory=VectorEncoderFactory(hidden_units=[8]),
                     observation_scaler=StandardObservationScaler(mean=np.zeros(3), std=np.ones(3))).create()
    algo.create_impl((3,), 2)
    path = tmp_path / "model.d3"
    algo.save(path)
    _forbid_unpickling(monkeypatch)
    loaded = offrl.load_learnable(path)
    other = DQNConfig(encoder_factory=VectorEncoderFactory(hidden_units=[8]),
                      observation_scaler=StandardObservationScaler(mean=np.zeros(3), std=np.ones(3))).create()
    other.load_model(path)
    x = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    np.testing.assert_array_equal(loaded.predict_value(x, [0, 1, 0, 1]), algo.predict_value(x, [0, 1, 0, 1]))
    np.testing.assert_array_equal(other.predict_value(x, [0, 1, 0, 1]), algo.predict_value(x, [0, 1, 0, 1]))


@pytest.mark.skipif(not weights_only_is_safe(), reason="this torch's weights_only unpickler has known flaws: "
                    "offrl refuses version-1 files on it (the next test)")
def test_a_version_1_file_still_loads_on_a_torch_whose_unpickler_is_safe(tmp_path):
    algo, _ = _trained(tmp_path)
    old = tmp_path / "old.d3"
    _save_v1(algo, old)
    assert old.read_bytes()[:4] == b"PK\x03\x04"
    loaded = offrl.load_learnable(old)
    x = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    np.testing.assert_array_equal(loaded.predict_value(x, [0, 1, 0, 1]), algo.predict_value(x, [0, 1, 0, 1]))
    loaded.save(tmp_path / "converted.d3")  # converting: load, save again
    assert read_payload(tmp_path / "converted.d3")["format_version"] == 2


@pytest.mark.parametrize("version", ["2.2.0", "2.5.1+cpu", "2.9.1", "2.10.0a0+git5f3e2a1", "2.10.0rc2"])
def test_a_version_1_file_is_refused_on_an_older_torch_without_unpickling(tmp_path, monkeypatch, version):
    algo, _ = _trained(tmp_path)
    old = tmp_path / "old.d3"
    _save_v1(algo, old)
    monkeypatch.setattr(torch, "__version__", version)
    _forbid_unpickling(monkeypatch)
    with pytest.raises(ValueError) as info:
        offrl.load_learnable(old)
    message = str(info.value)
    assert message.startswith(f"{old} is a torch archive (offrl model format version 1)")
    for part in (f"torch {version}'s weights_only unpickler", "CVE-2025-32434", "CVE-2026-24747",
                 "only with torch >= 2.10", "save it again"):
        assert part in message, message


@pytest.mark.parametrize("version, safe", [("2.10.0", True), ("2.10.1+cpu", True), ("2.13.0+cu126", True),
                                           ("2.11.0.dev20260101", True), ("3.0.0", True), ("2.9.9", False),
                                           ("2.10.0a0", False), ("1.13.1", False), ("nightly", False)])
def test_which_torch_reads_version_1_files(version, safe):
    from offrl._model_file import weights_only_is_safe

    assert weights_only_is_safe(version) is safe


def _split(path):
    """(header dict, tensor bytes) of a version-2 file."""
    data = path.read_bytes()
    length = int.from_bytes(data[:8], "little")
    return json.loads(data[8:8 + length]), data[8 + length:]


def _join(out, header, body, length=None):
    text = json.dumps(header).encode()
    out.write_bytes((len(text) if length is None else length).to_bytes(8, "little") + text + body)
    return out


def _header_edit(edit):
    def apply(header, body):
        edit(header)
        return header, body
    return apply


def _spec(name, **fields):
    return _header_edit(lambda header: header[name].update(fields))


def _record_edit(edit):
    def apply(header):
        record = json.loads(header["__metadata__"]["offrl"])
        edit(record)
        header["__metadata__"]["offrl"] = json.dumps(record)
    return _header_edit(apply)


WEIGHT = "modules.q_function.head.weight"  # 2 x 8 float32: 64 bytes


@pytest.mark.parametrize(
    "edit, message",
    [
        (_spec(WEIGHT, shape=[10**12, 10**12]), r"modules\['q_function'\]\['head.weight'\] declares shape "
                                               r"\(1000000000000, 1000000000000\) of F32 \(4e\+06 EB\), but its data_offsets span 64 B"),
        (_spec(WEIGHT, shape=[10**12, 10**12], data_offsets=[0, 4 * 10**24]),
         r"declares bytes 0 to 4000000000000000000000000 of the tensor data, but the file holds \d+ \(truncated"),
        (_spec(WEIGHT, data_offsets=[8, 72]), r"data_offsets \[8, 72\] (overlaps the tensor before it|leaves bytes)"),
        (_spec(WEIGHT, data_offsets=[-64, 0]), r"data_offsets \[-64, 0\]; expected \[begin, end\]"),
        (_spec(WEIGHT, data_offsets=[0, 64, 128]), r"data_offsets \[0, 64, 128\]"),
        (_spec(WEIGHT, dtype="C64", shape=[2, 4]), r"modules\['q_function'\]\['head.weight'\] holds complex numbers \(dtype C64\)"),
        (_spec(WEIGHT, dtype="U32"), r"modules\['q_function'\]\['head.weight'\] has dtype 'U32'; offrl model files hold"),
        (_spec(WEIGHT, dtype=["F32"]), r"has dtype \"\['F32'\]\""),
        (_spec(WEIGHT, shape=[2, -8]), r"has shape \[2, -8\]; expected at most 32 non-negative ints"),
        (_spec(WEIGHT, shape=[1] * 40), r"has shape \[1, 1, .*expected at most 32 non-negative ints"),
        (_spec(WEIGHT, shape="2x8"), r"has shape 2x8"),
        (_header_edit(lambda h: h[WEIGHT].pop("dtype")), r"its header entry is not a tensor's dtype, shape and data_offsets"),
        (_header_edit(lambda h: h.update(stray={"dtype": "F32", "shape": [0], "data_offsets": [0, 0]})),
         r"it holds tensors the offrl record does not name: \['stray'\]"),
        (_header_edit(lambda h: h.pop(WEIGHT)), r"modules\['q_function'\]\['head.weight'\] names the tensor "
                                                r"'modules.q_function.head.weight', which the file does not hold"),
        (_record_edit(lambda r: r["modules"]["q_function"].update(extra={"$tensor": WEIGHT})), r"both name the tensor"),
        (_record_edit(lambda r: r["modules"].update(x={"$pickle": "os.system"})), r"modules\['x'\] is an unknown tagged value"),
        (_record_edit(lambda r: r.update(format_version=1)), r"its offrl record holds 'format_version'"),
        (_record_edit(lambda r: r["optimizers"]["optim"]["state"].update({"$dict": [[True, 1]]})),
         r"holds \[True, 1\]; expected distinct \[int or text key, value\] pairs"),
        (_header_edit(lambda h: h["__metadata__"].update(offrl="[" * 5000 + "]" * 5000)),
         r"its offrl record: JSON nested 5000 levels deep"),
        (_header_edit(lambda h: h["__metadata__"].update(extra="1")), r"its header metadata is \['extra', 'format'"),
        (_header_edit(lambda h: h["__metadata__"].update(offrl=7)), r"expected the texts"),
    ],
)
def test_a_header_that_lies_is_refused_before_any_tensor_is_read(tmp_path, monkeypatch, edit, message):
    import offrl._model_file as model_file

    _, path = _trained(tmp_path)
    header, body = edit(*_split(path))
    bad = _join(tmp_path / "lying.d3", header, body)

    def never(*args):
        raise AssertionError("tensors were read")

    monkeypatch.setattr(model_file, "_read_tensors", never)
    with pytest.raises(ValueError, match="lying.d3 is not a readable offrl model file: .*" + message):
        offrl.load_learnable(bad)


@pytest.mark.parametrize(
    "length, message",
    [(2**40, r"it declares a header of 1.1 TB; at most 16.8 MB are accepted"),
     (2**63 + 5, r"it declares a header of 9.22 EB"),
     (10**6, r"it declares a header of 1000000 bytes, but holds \d+ after the length \(truncated\?\)"),
     (3, r"its safetensors header: not valid JSON")],
)
def test_a_header_length_beyond_the_cap_or_the_file_is_refused_unread(tmp_path, length, message):
    _, path = _trained(tmp_path)
    header, body = _split(path)
    bad = _join(tmp_path / "length.d3", header, body, length=length)
    with pytest.raises(ValueError, match="length.d3 is not a readable offrl model file: " + message):
        offrl.load_learnable(bad)


def test_a_file_that_is_not_offrl_or_of_another_version_is_named(tmp_path):
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(2)}, str(tmp_path / "plain.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"plain.safetensors is not an offrl model file: it has no 'offrl.model' format mark"):
        offrl.load_learnable(tmp_path / "plain.safetensors")
    _, path = _trained(tmp_path)
    header, body = _split(path)
    header["__metadata__"]["format_version"] = "3"
    with pytest.raises(ValueError, match=r"v3.d3 has model format version '3'; this offrl reads version 2 \(and version 1"):
        offrl.load_learnable(_join(tmp_path / "v3.d3", header, body))


def test_bool_tensors_hold_only_zero_and_one(tmp_path):
    algo, _ = _trained(tmp_path)
    payload = {**model_payload(algo), "random_tensors": {"flag": torch.ones(4, dtype=torch.bool)}}
    write_payload(payload, tmp_path / "flags.d3")
    header, body = _split(tmp_path / "flags.d3")
    begin = header["random_tensors.flag"]["data_offsets"][0]
    body = body[:begin + 1] + b"\x07" + body[begin + 2:]
    with pytest.raises(ValueError, match=r"flags2.d3 is not a readable offrl model file: random_tensors\['flag'\] is a "
                                         r"bool tensor holding bytes other than 0 and 1"):
        offrl.load_learnable(_join(tmp_path / "flags2.d3", header, body))


def test_tensors_beyond_the_available_memory_are_refused_before_reading(tmp_path, monkeypatch):
    import offrl._model_file as model_file

    _, path = _trained(tmp_path)
    monkeypatch.setattr(model_file, "available_memory", lambda: 100)
    with pytest.raises(ValueError, match=r"model.d3 holds \d+ B of tensors; this machine has 100 B available"):
        offrl.load_learnable(path)


def test_truncated_files_are_refused_at_every_length(tmp_path):
    _, path = _trained(tmp_path)
    data = path.read_bytes()
    cut = tmp_path / "cut.d3"
    for end in sorted({0, 4, 7, 8, 9, 100, len(data) // 2, len(data) - 64, len(data) - 1}):
        cut.write_bytes(data[:end])
        with pytest.raises(ValueError, match="cut.d3 is not a readable offrl model file"):
            offrl.load_learnable(cut)


def test_python_values_json_lacks_round_trip(tmp_path):
    """Tuples, int keys, floats (nan, inf, -0.0), big ints, shared and
    non-contiguous tensors come back as they were written."""
    from offrl._model_file import read_payload as read

    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    entries = {"betas": (0.9, 0.999), "by_index": {0: {"step": torch.tensor(3.0)}, "5": "text"},
               "floats": [float("nan"), float("inf"), -0.0, 1e-320, 2**70], "dollar": {"$tensor": "not a tag"},
               "same": [base, base], "view": base.t(), "empty": torch.zeros(0, 3, dtype=torch.int64),
               "half": torch.ones(2, dtype=torch.bfloat16)}
    write_payload({"format": "offrl.model", "format_version": 2, "entries": entries}, tmp_path / "values.d3")
    back = read(tmp_path / "values.d3")["entries"]
    assert back["betas"] == (0.9, 0.999) and isinstance(back["betas"], tuple)
    assert set(back["by_index"]) == {0, "5"} and torch.equal(back["by_index"][0]["step"], torch.tensor(3.0))
    assert np.isnan(back["floats"][0]) and back["floats"][1:] == [float("inf"), -0.0, 1e-320, 2**70]
    assert str(back["floats"][2]) == "-0.0"
    assert back["dollar"] == {"$tensor": "not a tag"}
    assert torch.equal(back["same"][0], base) and torch.equal(back["same"][1], base)
    assert torch.equal(back["view"], base.t()) and back["empty"].shape == (0, 3) and back["empty"].dtype == torch.int64
    assert back["half"].dtype == torch.bfloat16 and torch.equal(back["half"], torch.ones(2, dtype=torch.bfloat16))


def test_a_config_record_with_an_int_of_5000_digits_names_the_file(tmp_path):
    algo, _ = _trained(tmp_path)
    write_payload({**model_payload(algo), "params": '{"action_size": ' + "7" * 5000 + "}"}, tmp_path / "digits.d3")
    with pytest.raises(ValueError, match=r"digits.d3: its config record: not valid JSON \(Exceeds the limit"):
        offrl.load_learnable(tmp_path / "digits.d3")


def test_an_unreadable_file_is_a_value_error_naming_it(tmp_path, monkeypatch):
    import builtins

    _, path = _trained(tmp_path)
    real_open = builtins.open

    def denied(file, mode="r", *args, **kwargs):
        if str(file) == str(path):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", denied)
    with pytest.raises(ValueError, match=r"model.d3: cannot read this model file \(Permission denied\)"):
        offrl.load_learnable(path)
