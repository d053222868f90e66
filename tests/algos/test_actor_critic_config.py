"""The actor-critic configs share their common fields (offrl/algos/actor_critic.py)
and still list them in d3rlpy 2.8.1's order, with their own defaults and every
field documented under Args."""

from __future__ import annotations

import dataclasses
import re

import pytest

from offrl.algos import AWACConfig, CRRConfig, DDPGConfig, PRDCConfig, ReBRACConfig, TD3Config, TD3PlusBCConfig
from offrl.algos.actor_critic import ActorCriticConfig, TD3StyleConfig
from offrl.algos.config import LearnableConfig
from offrl.serialization import registered

_SHARED = ["actor_learning_rate", "critic_learning_rate", "actor_optim_factory", "critic_optim_factory",
           "actor_encoder_factory", "critic_encoder_factory", "q_func_factory"]
_TD3 = ["tau", "n_critics", "target_smoothing_sigma", "target_smoothing_clip"]
# each config's own fields in d3rlpy 2.8.1's order (dataclasses.fields of d3rlpy's config, after LearnableConfig's)
_D3RLPY_ORDER = {
    AWACConfig: _SHARED + ["tau", "lam", "n_action_samples", "n_critics"],
    CRRConfig: _SHARED + ["beta", "n_action_samples", "advantage_type", "weight_type", "max_weight", "n_critics",
                          "target_update_type", "tau", "target_update_interval", "update_actor_interval"],
    DDPGConfig: _SHARED + ["tau", "n_critics"],
    PRDCConfig: _SHARED + _TD3 + ["alpha", "beta", "update_actor_interval"],
    ReBRACConfig: _SHARED + _TD3 + ["actor_beta", "critic_beta", "update_actor_interval"],
    TD3Config: _SHARED + _TD3 + ["update_actor_interval"],
    TD3PlusBCConfig: _SHARED + _TD3 + ["alpha", "update_actor_interval"],
}


def _own_fields(cls: type) -> list:
    base = {f.name for f in dataclasses.fields(LearnableConfig)}
    return [f.name for f in dataclasses.fields(cls) if f.name not in base]


def _documented(cls: type) -> list:
    # entries one level under "Args:" (4 spaces in, or 8 where Python < 3.13 keeps the class body's indentation)
    head, section = cls.__doc__.split("Args:\n", 1)
    entry = " " * (len(head) - len(head.rstrip(" ")) + 4)
    return [name for line in section.splitlines()
            for match in [re.match(rf"^{entry}(\w+): ", line)] if match for name in [match.group(1)]]


@pytest.mark.parametrize("cls", list(_D3RLPY_ORDER), ids=lambda c: c.__name__)
def test_fields_keep_d3rlpys_order_and_every_one_is_documented_once_in_that_order(cls):
    assert _own_fields(cls) == _D3RLPY_ORDER[cls]
    assert _documented(cls) == _D3RLPY_ORDER[cls]


def test_defaults_that_differ_from_the_shared_ones_stay_each_algorithms():
    assert (ReBRACConfig().actor_learning_rate, ReBRACConfig().critic_learning_rate) == (1e-3, 1e-3)
    assert (TD3Config().actor_learning_rate, AWACConfig().critic_learning_rate) == (3e-4, 3e-4)
    assert DDPGConfig().n_critics == 1 and TD3Config().n_critics == 2 and CRRConfig().n_critics == 1
    assert (ReBRACConfig().batch_size, AWACConfig().batch_size, CRRConfig().batch_size, TD3Config().batch_size) == (
        1024, 1024, 100, 256)
    with pytest.raises(ValueError, match="actor_learning_rate"):
        TD3Config(actor_learning_rate=-1.0)  # the shared field keeps its check


def test_the_shared_bases_are_not_algorithms():
    algorithms = set(registered("algorithm").values())
    assert ActorCriticConfig not in algorithms and TD3StyleConfig not in algorithms
    assert all(cls in algorithms for cls in _D3RLPY_ORDER)
