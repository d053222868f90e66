# Ported mechanically from d3rlpy 2.8.1 tests/algos/qlearning/torch/test_utility.py by port.py (MIT,
# Copyright (c) 2021 Takuma Seno); see README.md.  Do not edit: edit
# upstream/tests/algos/qlearning/torch/test_utility.py or port.py and regenerate.
import pytest

from offrl.algos.qlearning.torch.utility import sample_q_values_with_policy
from offrl.models.builders import (
    create_continuous_q_function,
    create_normal_policy,
)
from offrl.models.q_functions import MeanQFunctionFactory
from offrl.types import Shape

from ....models.torch.model_test import DummyEncoderFactory
from ....testing_utils import create_torch_observations


@pytest.mark.parametrize(
    "observation_shape", [(100,), (4, 84, 84), ((100,), (200,))]
)
@pytest.mark.parametrize("action_size", [4])
@pytest.mark.parametrize("n_action_samples", [10])
@pytest.mark.parametrize("batch_size", [256])
@pytest.mark.parametrize("n_critics", [2])
def test_sample_q_values_with_policy(
    observation_shape: Shape,
    action_size: int,
    n_action_samples: int,
    batch_size: int,
    n_critics: int,
) -> None:
    policy = create_normal_policy(
        observation_shape=observation_shape,
        action_size=action_size,
        encoder_factory=DummyEncoderFactory(),
        device="cpu:0",
        enable_ddp=False,
    )
    _, q_func_forwarder = create_continuous_q_function(
        observation_shape=observation_shape,
        action_size=action_size,
        encoder_factory=DummyEncoderFactory(),
        q_func_factory=MeanQFunctionFactory(),
        n_ensembles=n_critics,
        device="cpu:0",
        enable_ddp=False,
    )

    observations = create_torch_observations(observation_shape, batch_size)

    q_values, log_probs = sample_q_values_with_policy(
        policy=policy,
        q_func_forwarder=q_func_forwarder,
        policy_observations=observations,
        value_observations=observations,
        n_action_samples=n_action_samples,
        detach_policy_output=False,
    )
    assert q_values.shape == (n_critics, batch_size, n_action_samples)
    assert log_probs.shape == (1, batch_size, n_action_samples)
