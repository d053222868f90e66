# Ported mechanically from d3rlpy 2.8.1 tests/algos/transformer/test_action_samplers.py by port.py (MIT,
# Copyright (c) 2021 Takuma Seno); see README.md.  Do not edit: edit
# upstream/tests/algos/transformer/test_action_samplers.py or port.py and regenerate.
import numpy as np
import pytest

from offrl.algos import (
    GreedyTransformerActionSampler,
    IdentityTransformerActionSampler,
    SoftmaxTransformerActionSampler,
)


@pytest.mark.parametrize("action_size", [4])
def test_identity_transformer_action_sampler(action_size: int) -> None:
    action_sampler = IdentityTransformerActionSampler()

    x = np.random.random(action_size)
    action = action_sampler(x)

    assert np.all(action == x)


@pytest.mark.parametrize("action_size", [10])
def test_softmax_transformer_action_sampler(action_size: int) -> None:
    action_sampler = SoftmaxTransformerActionSampler()

    logits = np.random.random(action_size)
    action = action_sampler(logits)
    assert isinstance(action, int)

    same_actions = []
    for _ in range(100):
        same_actions.append(action == action_sampler(logits))
    assert not all(same_actions)


@pytest.mark.parametrize("action_size", [10])
def test_greedy_transformer_action_sampler(action_size: int) -> None:
    action_sampler = GreedyTransformerActionSampler()

    logits = np.random.random(action_size)
    action = action_sampler(logits)
    assert isinstance(action, int)
    assert action == np.argmax(logits)
