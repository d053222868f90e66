"""The config families that share fields through a SharedFieldsConfig base
(offrl/algos/actor_critic.py, offrl/algos/dqn.py, offrl/algos/decision_transformer.py) keep d3rlpy 2.8.1's field
order and document every field once, in that order."""

from __future__ import annotations

import dataclasses
import inspect
import re

import pytest

from offrl.algos import (
    BCQConfig,
    DecisionTransformerConfig,
    DiscreteDecisionTransformerConfig,
    DiscreteBCQConfig,
    DiscreteCQLConfig,
    DiscreteSACConfig,
    DoubleDQNConfig,
    DQNConfig,
    NFQConfig,
    PLASConfig,
    PLASWithPerturbationConfig,
    SACConfig,
)
from offrl.algos.config import LearnableConfig, _documented_args

_SAC = ["actor_learning_rate", "critic_learning_rate", "temp_learning_rate", "actor_optim_factory",
        "critic_optim_factory", "temp_optim_factory", "actor_encoder_factory", "critic_encoder_factory",
        "q_func_factory"]
_IMITATOR = ["actor_learning_rate", "critic_learning_rate", "imitator_learning_rate", "actor_optim_factory",
             "critic_optim_factory", "imitator_optim_factory", "actor_encoder_factory", "critic_encoder_factory",
             "imitator_encoder_factory", "q_func_factory", "tau", "n_critics"]
_DT = ["context_size", "max_timestep", "learning_rate", "encoder_factory", "optim_factory", "num_heads", "num_layers",
       "attn_dropout", "resid_dropout", "embed_dropout", "activation_type"]
_Q = ["learning_rate", "optim_factory", "encoder_factory", "q_func_factory", "n_critics"]
# each config's own fields in d3rlpy 2.8.1's order (after LearnableConfig's)
_D3RLPY_ORDER = {
    SACConfig: _SAC + ["tau", "n_critics", "initial_temperature"],
    DiscreteSACConfig: _SAC + ["n_critics", "initial_temperature", "target_update_interval"],
    BCQConfig: _IMITATOR + ["update_actor_interval", "lam", "n_action_samples", "action_flexibility",
                            "rl_start_step", "beta"],
    PLASConfig: _IMITATOR + ["lam", "warmup_steps", "beta"],
    PLASWithPerturbationConfig: _IMITATOR + ["lam", "warmup_steps", "beta", "action_flexibility"],
    DQNConfig: _Q + ["target_update_interval"],
    DoubleDQNConfig: _Q + ["target_update_interval"],
    DiscreteCQLConfig: _Q + ["target_update_interval", "alpha"],
    NFQConfig: _Q,
    DiscreteBCQConfig: _Q + ["action_flexibility", "beta", "target_update_interval", "share_encoder"],
    DecisionTransformerConfig: _DT + ["position_encoding_type"],
    DiscreteDecisionTransformerConfig: _DT + ["embed_activation_type", "position_encoding_type", "warmup_tokens",
                                              "final_tokens"],
}


def _own_fields(cls: type) -> list:
    base = {f.name for f in dataclasses.fields(LearnableConfig)}
    return [f.name for f in dataclasses.fields(cls) if f.name not in base]


def _documented(cls: type) -> list:
    # entries one level under "Args:" (4 spaces in, or 8 where Python < 3.13 keeps the class body's indentation)
    head, section = cls.__doc__.split("Args:\n", 1)
    entry = " " * (len(head) - len(head.rstrip(" ")) + 4)
    return [name for line in section.splitlines()
            for match in [re.match(rf"^{entry}(\w+(?:, \w+)*):(?: |$)", line)] if match
            for name in match.group(1).split(", ")]


@pytest.mark.parametrize("cls", list(_D3RLPY_ORDER), ids=lambda c: c.__name__)
def test_fields_keep_d3rlpys_order_and_every_one_is_documented_once_in_that_order(cls):
    assert _own_fields(cls) == _D3RLPY_ORDER[cls]
    assert _documented(cls) == _D3RLPY_ORDER[cls]


def test_defaults_that_differ_from_the_shared_ones_stay_each_algorithms():
    assert (PLASConfig().actor_learning_rate, PLASConfig().imitator_learning_rate) == (1e-4, 1e-4)
    assert (BCQConfig().actor_learning_rate, BCQConfig().imitator_learning_rate) == (1e-3, 1e-3)
    assert DQNConfig().learning_rate == NFQConfig().learning_rate == 6.25e-5
    assert (DiscreteDecisionTransformerConfig().num_heads, DecisionTransformerConfig().num_heads) == (8, 1)
    with pytest.raises(ValueError, match="temp_learning_rate"):
        SACConfig(temp_learning_rate=-1.0)  # the shared field keeps its check


@pytest.mark.parametrize("cls", [SACConfig, DQNConfig, BCQConfig], ids=lambda c: c.__name__)
def test_args_entries_read_alike_from_an_indented_or_a_dedented_docstring(cls):
    # Python 3.13 stores docstrings without their common indentation (inspect.cleandoc's form); earlier ones as written
    doc = cls.__doc__
    entries = _documented_args(doc)
    assert len(entries) >= 5
    flat = _documented_args(inspect.cleandoc(doc))
    assert list(flat) == list(entries)
    assert all(flat[name].split() == entries[name].split() for name in entries)  # the same words, each entry whole


def test_a_one_line_subclass_gets_the_shared_entries_under_an_args_section_it_can_read():
    from offrl.algos.actor_critic import ActorCriticConfig

    @dataclasses.dataclass()
    class OneLineConfig(ActorCriticConfig):
        """A config documenting nothing of its own."""

    shared = _documented_args(ActorCriticConfig.__doc__)
    assert list(_documented_args(OneLineConfig.__doc__)) == list(shared) and len(shared) >= 5
