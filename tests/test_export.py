"""save_policy: format by extension, verification against predict, no half-written files."""

from __future__ import annotations

import numpy as np
import pytest

import offrl.export
from offrl.algos import DQNConfig, RandomPolicyConfig
from offrl.models import VectorEncoderFactory


def _algo():
    algo = DQNConfig(encoder_factory=VectorEncoderFactory(hidden_units=[8])).create()
    algo.create_impl((3,), 2)
    return algo


def test_unknown_extension(tmp_path):
    with pytest.raises(ValueError, match=r"\.pt .*\.onnx"):
        _algo().save_policy(tmp_path / "policy.zip")


def test_mismatch_is_an_error_and_leaves_no_file(tmp_path, monkeypatch):
    algo = _algo()
    original = offrl.export._expected
    monkeypatch.setattr(offrl.export, "_expected", lambda a, inputs: 1 - original(a, inputs))
    for ext in (".pt", ".onnx"):
        with pytest.raises(offrl.export.ExportError, match="other actions"):
            algo.save_policy(tmp_path / f"policy{ext}")
    assert list(tmp_path.iterdir()) == []


def test_policy_without_network_cannot_be_exported(tmp_path):
    algo = RandomPolicyConfig().create()
    algo.create_impl((3,), 2)
    with pytest.raises(ValueError, match="no policy network"):
        algo.save_policy(tmp_path / "policy.onnx")
    assert list(tmp_path.iterdir()) == []


def test_unbuilt_algorithm(tmp_path):
    with pytest.raises(ValueError, match="not built"):
        DQNConfig().create().save_policy(tmp_path / "policy.pt")


def test_missing_directory(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        _algo().save_policy(tmp_path / "nope" / "policy.onnx")


def test_loaded_policies_have_predict(tmp_path):
    algo = _algo()
    x = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    for ext, load in ((".pt", offrl.export.load_torchscript_policy), (".onnx", offrl.export.load_onnx_policy)):
        algo.save_policy(tmp_path / f"p{ext}")
        np.testing.assert_array_equal(load(tmp_path / f"p{ext}").predict(x), algo.predict(x))


def _continuous_tuple():
    """A TD3+BC policy on tuple observations ((3,), (2,)) with scalers on both sides."""
    from offrl.algos import TD3PlusBCConfig
    from offrl.dataset import MDPDataset
    from offrl.preprocessing import MinMaxActionScaler, StandardObservationScaler, TupleObservationScaler

    rng = np.random.default_rng(3)
    observations = [rng.normal(size=(40, 3)) * 3 + 1, rng.normal(size=(40, 2))]
    data = MDPDataset(observations, rng.uniform(-2, 2, size=(40, 2)), rng.normal(size=40), np.r_[np.zeros(39), 1])
    scaler = TupleObservationScaler([StandardObservationScaler(), StandardObservationScaler()])
    algo = TD3PlusBCConfig(batch_size=8, observation_scaler=scaler, action_scaler=MinMaxActionScaler()).create()
    algo.build_with_dataset(data)
    return algo


def test_onnx_graph_uses_d3rlpy_names(tmp_path):
    import json

    import onnx

    algo = _algo()
    algo.save_policy(tmp_path / "p.onnx")
    model = onnx.load(str(tmp_path / "p.onnx"))
    assert [i.name for i in model.graph.input] == ["input_0"]
    assert [o.name for o in model.graph.output] == ["output_0"]
    meta = {p.key: p.value for p in model.metadata_props}
    assert json.loads(meta["inputs"]) == ["input_0"]  # metadata stays JSON

    algo = _continuous_tuple()
    algo.save_policy(tmp_path / "t.onnx")
    model = onnx.load(str(tmp_path / "t.onnx"))
    assert [i.name for i in model.graph.input] == ["input_0", "input_1"]
    assert [o.name for o in model.graph.output] == ["output_0"]


def test_deployment_snippet_from_d3rlpy_docs_vector(tmp_path):
    """``ort.InferenceSession(path).run(None, {"input_0": x})`` as d3rlpy's docs
    show, for discrete and continuous policies, at any batch size."""
    import onnxruntime as ort

    rng = np.random.default_rng(5)
    discrete = _algo()
    discrete.save_policy(str(tmp_path / "dqn.onnx"))
    x = rng.normal(size=(6, 3)).astype(np.float32)
    (actions,) = ort.InferenceSession(str(tmp_path / "dqn.onnx")).run(None, {"input_0": x})
    assert actions.dtype == np.int64
    np.testing.assert_array_equal(actions, discrete.predict(x))

    from offrl.algos import TD3PlusBCConfig
    from offrl.dataset import MDPDataset

    data = MDPDataset(rng.normal(size=(30, 3)), rng.uniform(-1, 1, size=(30, 2)), rng.normal(size=30), np.r_[np.zeros(29), 1])
    continuous = TD3PlusBCConfig(batch_size=8, actor_encoder_factory=VectorEncoderFactory(hidden_units=[8])).create()
    continuous.build_with_dataset(data)
    continuous.save_policy(str(tmp_path / "td3.onnx"))
    for batch in (1, 4):
        x = rng.normal(size=(batch, 3)).astype(np.float32)
        (actions,) = ort.InferenceSession(str(tmp_path / "td3.onnx")).run(None, {"input_0": x})
        np.testing.assert_allclose(actions, continuous.predict(x), rtol=1e-5, atol=1e-5)


def test_deployment_snippet_from_d3rlpy_docs_tuple(tmp_path):
    import onnxruntime as ort

    algo = _continuous_tuple()
    algo.save_policy(str(tmp_path / "t.onnx"))
    rng = np.random.default_rng(6)
    x = [rng.normal(size=(5, 3)).astype(np.float32), rng.normal(size=(5, 2)).astype(np.float32)]
    session = ort.InferenceSession(str(tmp_path / "t.onnx"))
    (actions,) = session.run(None, {"input_0": x[0], "input_1": x[1]})
    expected = algo.predict(x)
    np.testing.assert_allclose(actions, expected, rtol=1e-5, atol=1e-5)
    (by_name,) = session.run(["output_0"], {"input_0": x[0], "input_1": x[1]})
    np.testing.assert_array_equal(by_name, actions)
    # TorchScript takes the elements positionally, as d3rlpy's traced function
    import torch

    algo.save_policy(str(tmp_path / "t.pt"))
    module = torch.jit.load(str(tmp_path / "t.pt"))
    with torch.no_grad():
        got = module(torch.from_numpy(x[0]), torch.from_numpy(x[1])).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_files_with_the_old_names_still_load(tmp_path, monkeypatch):
    """Files exported before the d3rlpy names (inputs ``observation`` /
    ``observation_<k>``, output ``action``) load and run."""
    import onnx

    monkeypatch.setattr(offrl.export, "_input_names", lambda algo: (
        [f"observation_{k}" for k in range(len(algo.observation_shape))] if isinstance(algo.observation_shape, list) else ["observation"]))
    monkeypatch.setattr(offrl.export, "OUTPUT_NAME", "action")
    vector, tuple_algo = _algo(), _continuous_tuple()
    vector.save_policy(tmp_path / "v.onnx")
    tuple_algo.save_policy(tmp_path / "t.onnx")
    monkeypatch.undo()
    assert [i.name for i in onnx.load(str(tmp_path / "v.onnx")).graph.input] == ["observation"]
    assert [o.name for o in onnx.load(str(tmp_path / "t.onnx")).graph.output] == ["action"]
    rng = np.random.default_rng(7)
    x = rng.normal(size=(4, 3)).astype(np.float32)
    np.testing.assert_array_equal(offrl.export.load_onnx_policy(tmp_path / "v.onnx").predict(x), vector.predict(x))
    xt = [rng.normal(size=(4, 3)).astype(np.float32), rng.normal(size=(4, 2)).astype(np.float32)]
    np.testing.assert_allclose(offrl.export.load_onnx_policy(tmp_path / "t.onnx").predict(xt), tuple_algo.predict(xt),
                               rtol=1e-5, atol=1e-5)


def test_onnx_policy_checks_the_number_of_inputs(tmp_path):
    algo = _continuous_tuple()
    algo.save_policy(tmp_path / "t.onnx")
    policy = offrl.export.load_onnx_policy(tmp_path / "t.onnx")
    with pytest.raises(ValueError, match=r"2 observation input\(s\) \['input_0', 'input_1'\], got 1"):
        policy(np.zeros((1, 3), np.float32))
