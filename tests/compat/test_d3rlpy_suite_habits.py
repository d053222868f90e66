"""Habits d3rlpy 2.8.1's own test suite encodes, each of which failed on
offrl before issue 33 (the ported suite is compat/d3rlpy_suite; these are
offrl's own, smaller checks of the same habits, with exact values)."""

from __future__ import annotations

import dataclasses
import importlib
import io
import json
import os

import numpy as np
import pytest
import torch

import offrl
from offrl.algos import DiscreteBCConfig, PRDCConfig, QLearningAlgoBase, QLearningAlgoImplBase
from offrl.export import allowed_difference
from offrl.dataset import EpisodeGenerator, MDPDataset, create_infinite_replay_buffer
from offrl.models import VectorEncoderFactory
from offrl.preprocessing import MinMaxActionScaler, MinMaxObservationScaler

SMALL = VectorEncoderFactory(hidden_units=[8])


def _continuous(n: int = 40) -> MDPDataset:
    rng = np.random.default_rng(0)
    terminals = np.zeros(n)
    terminals[n // 2 - 1] = terminals[-1] = 1.0
    return MDPDataset(rng.normal(size=(n, 3)).astype(np.float32) * 5 + 2,
                      rng.uniform(-1, 1, size=(n, 2)).astype(np.float32),
                      rng.normal(size=n).astype(np.float32), terminals)


def _episodes(actions: np.ndarray):
    n = actions.shape[0]
    terminals = np.zeros(n, dtype=np.float32)
    terminals[24::25] = 1.0
    observations = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    return EpisodeGenerator(observations, actions, np.ones(n, dtype=np.float32), terminals)()


# ------------------------------------------------ 1. algo.config is fitted
def test_config_of_a_fitted_algorithm_names_its_fitted_scalers_and_the_users_stays_unfitted():
    offrl.seed(0)
    config = DiscreteBCConfig(encoder_factory=SMALL, batch_size=4, observation_scaler=MinMaxObservationScaler())
    algo = config.create()
    assert algo.config is config  # nothing fitted yet: the user's own object
    actions = (np.arange(50) % 3).reshape(-1, 1)
    dataset = create_infinite_replay_buffer(_episodes(actions))
    algo.fit(dataset, n_steps=2, n_steps_per_epoch=2, show_progress=False,
             logger_adapter=offrl.logging.NoopAdapterFactory())
    assert config.observation_scaler.minimum is None  # the user's config is untouched
    reported = algo.config
    assert reported is algo.config and reported is not config
    assert reported.observation_scaler is algo.observation_scaler
    np.testing.assert_array_equal(reported.observation_scaler.minimum, [0.0, 1.0])
    np.testing.assert_array_equal(reported.observation_scaler.maximum, [98.0, 99.0])
    # d3rlpy's habit: a new algorithm from algo.config, networks copied, predicts the same
    other = algo.config.create()
    other.create_impl(algo.observation_shape, algo.action_size)
    other.copy_policy_from(algo)
    x = np.random.default_rng(1).uniform(0, 99, size=(16, 2)).astype(np.float32)
    np.testing.assert_array_equal(other.predict(x), algo.predict(x))


# ------------------------------------- 2. build_with_dataset prepares update
def test_prdc_update_right_after_build_with_dataset_and_after_rebuilding():
    offrl.seed(0)
    dataset = _continuous()
    algo = PRDCConfig(actor_encoder_factory=SMALL, critic_encoder_factory=SMALL, batch_size=4).create()
    algo.build_with_dataset(dataset)
    assert algo.neighbor_index is not None
    batch = dataset.sample_transition_batch(4)
    assert set(algo.update(batch)) >= {"dc_loss", "critic_loss"}
    algo.create_impl(algo.observation_shape, algo.action_size)  # new networks, same data: the index stays
    assert algo.neighbor_index is not None
    algo.update(batch)
    algo.create_impl((5,), 2)  # other shapes: the index does not fit them
    assert algo.neighbor_index is None


# --------------------------------------------- 3. discrete action sizes
def test_discrete_action_size_is_the_largest_index_over_all_episodes_plus_one():
    actions = np.zeros((100, 1), dtype=np.int64)
    actions[:25, 0] = np.arange(25) % 5  # the first episode only reaches 4
    actions[60, 0] = 96
    buffer = create_infinite_replay_buffer(_episodes(actions))
    assert buffer.dataset_info.action_size == 97
    assert offrl.dataset.ReplayBuffer(offrl.dataset.InfiniteBuffer(), episodes=_episodes(actions),
                                      action_size=100).dataset_info.action_size == 100


@pytest.mark.parametrize("bad,message", [(-1, "non-negative"), (2.5, "integer"), (np.nan, "nan")])
def test_discrete_actions_that_are_not_indices_are_still_refused(bad, message):
    actions = np.zeros((100, 1), dtype=np.float64 if not isinstance(bad, int) else np.int64)
    actions[:25, 0] = np.arange(25) % 5
    actions[60, 0] = bad
    with pytest.raises(ValueError, match=message):
        offrl.dataset.ReplayBuffer(offrl.dataset.InfiniteBuffer(), episodes=_episodes(actions),
                                   action_space=offrl.ActionSpace.DISCRETE)


def test_a_given_action_size_still_refuses_larger_actions():
    actions = np.zeros((50, 1), dtype=np.int64)
    actions[30, 0] = 7
    with pytest.raises(ValueError, match="expected an index below action_size=5"):
        offrl.dataset.ReplayBuffer(offrl.dataset.InfiniteBuffer(), episodes=_episodes(actions), action_size=5)


# ------------------------------------------- 4. module paths, generic bases
def test_d3rlpy_module_paths_and_subscripted_bases():
    from offrl.algos.qlearning.cal_ql import CalQLConfig
    from offrl.algos.qlearning.explorers import LinearDecayEpsilonGreedy
    from offrl.algos.qlearning.sac import DiscreteSACConfig, SACConfig
    from offrl.algos.transformer.inputs import TorchTransformerInput, TransformerInput
    from offrl.base import ImplBase, LearnableBase, LearnableConfig, save_config
    from offrl.logging import D3RLPyLogger
    from offrl.logging.logger import AlgProtocol, SaveProtocol  # noqa: F401
    from offrl.optimizers.optimizers import AdamWFactory

    assert SACConfig is offrl.algos.SACConfig and DiscreteSACConfig is offrl.algos.DiscreteSACConfig
    assert CalQLConfig is offrl.algos.CalQLConfig and LinearDecayEpsilonGreedy is offrl.algos.LinearDecayEpsilonGreedy
    assert TransformerInput is offrl.algos.TransformerInput and TorchTransformerInput is offrl.algos.TorchTransformerInput
    assert AdamWFactory is offrl.optimizers.AdamWFactory is importlib.import_module("offrl.optimizers.adamw").AdamWFactory
    assert D3RLPyLogger is offrl.logging.logger.D3RLPyLogger and callable(save_config)
    # subscripted in annotations, as d3rlpy's helpers do
    QLearningAlgoBase[QLearningAlgoImplBase, LearnableConfig]
    LearnableBase[ImplBase, LearnableConfig]
    offrl.algos.TransformerAlgoBase[offrl.algos.TransformerAlgoImplBase, offrl.algos.TransformerConfig]


def test_d3rlpy_logger_and_save_config_write_a_params_json_from_json_reads(tmp_path):
    algo = DiscreteBCConfig(encoder_factory=SMALL).create()
    algo.create_impl((3,), 4)
    logger = offrl.logging.D3RLPyLogger(algo=algo, adapter_factory=offrl.logging.FileAdapterFactory(str(tmp_path)),
                                        experiment_name="run", n_steps_per_epoch=1, with_timestamp=False)
    offrl.base.save_config(algo, logger)
    path = os.path.join(logger.adapter.logdir, "params.json")
    assert json.load(open(path))["action_size"] == 4
    rebuilt = type(algo).from_json(path)
    assert rebuilt.observation_shape == (3,) and rebuilt.action_size == 4
    logger.add_metric("loss", 1.0)
    logger.add_metric("loss", 3.0)
    assert logger.commit(1, 1) == {"loss": 2.0}


# ------------------------------------------------- 5. saving and exporting
def test_saving_twice_gives_the_same_bytes_also_into_a_file_object(tmp_path):
    algo = DiscreteBCConfig(encoder_factory=SMALL).create()
    algo.create_impl((3,), 4)
    first, second = io.BytesIO(), io.BytesIO()
    algo.save_model(first)
    algo.save_model(second)
    assert first.getvalue() == second.getvalue()
    algo.save(str(tmp_path / "a.d3"))
    assert (tmp_path / "a.d3").read_bytes() == first.getvalue()
    loaded = offrl.load_learnable(str(tmp_path / "a.d3"))
    again = io.BytesIO()
    loaded.save_model(again)
    assert again.getvalue() == first.getvalue()


def test_export_tolerance_scales_with_the_actions():
    assert allowed_difference(np.array([[0.5, -0.25]])) == 1e-4
    assert allowed_difference(np.array([[40.0, -80.0]])) == pytest.approx(8e-3)


def test_an_export_whose_actions_are_large_saves(tmp_path):
    offrl.seed(0)
    algo = offrl.algos.TD3PlusBCConfig(actor_encoder_factory=SMALL, critic_encoder_factory=SMALL,
                                       action_scaler=MinMaxActionScaler(minimum=np.array([-500.0, 0.0]),
                                                                        maximum=np.array([500.0, 900.0]))).create()
    algo.create_impl((3,), 2)
    algo.save_policy(str(tmp_path / "policy.pt"))
    policy = torch.jit.load(str(tmp_path / "policy.pt"))
    x = np.random.default_rng(0).normal(size=(8, 3)).astype(np.float32)
    got = policy(torch.from_numpy(x)).detach().numpy()
    assert np.abs(got - algo.predict(x)).max() <= allowed_difference(algo.predict(x))


# --------------------------------------------------- d3rlpy's small helpers
def test_optimizer_factories_take_d3rlpy_named_modules_and_compiled():
    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)
            self.table = torch.nn.Embedding(10, 4)

    module = M()
    optim = offrl.optimizers.GPTAdamWFactory(weight_decay=0.1).create(module.named_modules(), 1e-3, False)
    decay, no_decay = optim.optim.param_groups
    assert [p is module.linear.weight for p in decay["params"]] == [True]
    assert {id(p) for p in no_decay["params"]} == {id(module.linear.bias), id(module.table.weight)}
    module.linear(torch.ones(1, 4)).sum().backward()
    optim.zero_grad()  # compiled=False: zeroed in place, as d3rlpy's eager mode
    assert module.linear.weight.grad is not None and not module.linear.weight.grad.any()
    assert not optim.state
    sgd = offrl.optimizers.SGDFactory().create(module.named_modules(), 0.5)
    assert len(sgd.optim.param_groups[0]["params"]) == 3  # each parameter once


def test_torch_transformer_input_pads_on_the_left_and_masks():
    inpt = offrl.algos.TransformerInput(observations=np.ones((2, 3), dtype=np.float32),
                                        actions=np.full((2, 1), 2.0, dtype=np.float32),
                                        rewards=np.ones((2, 1), dtype=np.float32),
                                        returns_to_go=np.full((2, 1), 5.0, dtype=np.float32),
                                        timesteps=np.array([3, 4]))
    t = offrl.algos.TorchTransformerInput.from_numpy(inpt, context_size=4, device="cpu")
    assert t.observations.shape == (1, 4, 3) and t.length == 4
    assert t.masks.tolist() == [[0.0, 0.0, 1.0, 1.0]]
    assert t.timesteps.tolist() == [[0, 0, 3, 4]] and t.timesteps.dtype == torch.int64
    assert t.returns_to_go[0, :, 0].tolist() == [0.0, 0.0, 5.0, 5.0]
    t = offrl.algos.TorchTransformerInput.from_numpy(inpt, context_size=1, device="cpu")
    assert t.timesteps.tolist() == [[4]] and t.masks.tolist() == [[1.0]]


def test_torch_mini_batch_from_batch_returns_to_go():
    dataset = _continuous()
    batch = dataset.sample_transition_batch(4)
    torch_batch = offrl.torch_utility.TorchMiniBatch.from_batch(batch, gamma=0.5, compute_returns_to_go=False,
                                                                device="cpu")
    assert torch_batch.returns_to_go.tolist() == [[0.0]] * 4
    torch_batch = offrl.torch_utility.TorchMiniBatch.from_batch(batch, gamma=0.5, compute_returns_to_go=True,
                                                                device="cpu")
    np.testing.assert_allclose(torch_batch.returns_to_go.numpy(), batch.compute_returns_to_go(0.5))


def test_small_d3rlpy_modules():
    from offrl.dataclass_utils import asdict_as_float
    from offrl.itertools import first_flag, last_flag
    from offrl.tokenizers import FloatTokenizer

    assert list(last_flag("abc")) == [(False, "a"), (False, "b"), (True, "c")] and list(last_flag([])) == []
    assert list(first_flag("ab")) == [(True, "a"), (False, "b")]
    @dataclasses.dataclass(frozen=True)
    class Loss:
        a: float
        b: torch.Tensor

    assert asdict_as_float(Loss(1.0, torch.tensor(2.5))) == {"a": 1.0, "b": 2.5}
    tokenizer = FloatTokenizer(num_bins=4, use_mu_law_encode=False)
    assert tokenizer(np.array([-1.0, -0.4, 0.0, 0.9])).tolist() == [0, 1, 2, 3]
    assert tokenizer.decode(np.array([0, 3])).tolist() == [-1.0, 0.5]


def test_tacr_update_on_a_batch_of_padding_only_is_finite():
    """d3rlpy's transformer update test builds windows whose masks are all 0;
    TACR's loss scale (alpha / mean |Q| over real steps) was alpha / 0."""
    offrl.seed(0)
    algo = offrl.algos.TACRConfig(batch_size=2, context_size=3).create()
    algo.create_impl((3,), 2)
    rng = np.random.default_rng(0)
    trajectories = [offrl.dataset.PartialTrajectory(
        observations=rng.random((3, 3)).astype(np.float32), actions=rng.random((3, 2)).astype(np.float32),
        rewards=np.ones((3, 1), dtype=np.float32), returns_to_go=np.ones((3, 1), dtype=np.float32),
        terminals=np.zeros((3, 1), dtype=np.float32), timesteps=np.arange(3), masks=np.zeros(3, dtype=np.float32),
        length=3) for _ in range(2)]
    losses = algo.update(offrl.dataset.TrajectoryMiniBatch.from_partial_trajectories(trajectories))
    assert losses["actor_loss"] == 0.0 and np.isfinite(losses["critic_loss"])
