import numpy as np
import onnxruntime
import torch

import offrl

TINY = ["--dataset-steps", "1000", "--steps", "30", "--eval-episodes", "1"]


def test_custom_encoder_trains_saves_loads_and_exports(tutorial, tmp_path):
    module = tutorial("custom_encoder")
    result = module.main(TINY + ["--out", str(tmp_path)])
    algo = result["algos"]["residual"]

    # the Q-function is built from the custom encoder, and trained
    encoders = [m for m in algo.modules["q_function"].modules() if isinstance(m, module.ResidualEncoder)]
    assert len(encoders) == 1 and len(encoders[0].blocks) == 2 and encoders[0].embed.out_features == 64
    assert algo.grad_step == 30
    assert result["encoder_record"] == {"kind": "encoder", "type": "tutorial_residual",
                                        "params": {"hidden_size": 64, "n_blocks": 2}}

    # load_learnable rebuilds the registered factory and the same weights
    loaded = offrl.load_learnable(result["model_path"])
    assert isinstance(loaded.config.encoder_factory, module.ResidualEncoderFactory)
    x = result["observations"]
    actions = algo.predict(x)
    np.testing.assert_array_equal(loaded.predict_value(x, actions), algo.predict_value(x, actions))
    assert result["same_values"]

    session = onnxruntime.InferenceSession(result["onnx_path"], providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(session.run(None, {"input_0": x})[0], actions)
    assert result["onnx_matches"]

    # SAC's two critics take observation (3) + action (1) through create_with_action
    assert [m.embed.in_features for m in result["critic_encoders"]] == [4, 4]
    assert result["sac_values"].shape == (4,) and np.isfinite(result["sac_values"]).all()


def test_encoder_with_discrete_action_one_hot_encodes(tutorial):
    module = tutorial("custom_encoder")
    factory = module.ResidualEncoderFactory(hidden_size=8, n_blocks=1)
    torch.manual_seed(0)
    encoder = factory.create_with_action((3,), 4, discrete_action=True)
    x = torch.randn(5, 3)
    indices = torch.tensor([[0], [3], [1], [2], [3]])
    one_hot = torch.nn.functional.one_hot(indices.reshape(-1), 4).float()
    expected = torch.relu(encoder.norm(encoder.blocks(encoder.embed(torch.cat([x, one_hot], dim=1)))))
    torch.testing.assert_close(encoder(x, indices), expected)
    assert encoder(x, indices).shape == (5, 8)
