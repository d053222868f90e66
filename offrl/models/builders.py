"""Networks several algorithms build the same way: SAC's squashed-Gaussian
policy (also BEAR's) and the critic ensemble with its frozen target copy
(SAC, CQL, AWAC, BEAR).

d3rlpy's ``d3rlpy.models.builders`` (``create_normal_policy``,
``create_continuous_q_function``, ...) return d3rlpy's own torch modules
(policies returning ``ActionOutput``, Q-function lists with a
"forwarder"), whose outputs offrl's networks do not share, so those names
are not provided (see docs/COMPATIBILITY.md).
"""

from __future__ import annotations

import copy
from typing import Any, Tuple

from .encoders import EncoderFactory, compute_output_size
from .modules import freeze
from .policies import NormalPolicy
from .q_functions import QFunction

__all__ = ["build_normal_policy", "build_critics"]


def build_normal_policy(encoder_factory: EncoderFactory, observation_shape: Any, action_size: int) -> NormalPolicy:
    """A state-dependent Gaussian policy with ``logstd`` in ``[-20, 2]``."""
    encoder = encoder_factory.create(observation_shape)
    return NormalPolicy(encoder, compute_output_size(encoder, observation_shape), action_size, min_logstd=-20.0, max_logstd=2.0)


def build_critics(config: Any, observation_shape: Any, action_size: int) -> Tuple[QFunction, QFunction]:
    """The continuous-action critic ensemble of a config with
    ``q_func_factory``, ``critic_encoder_factory`` and ``n_critics``, and
    its (frozen) target copy."""
    q = config.q_func_factory.create(config.critic_encoder_factory, observation_shape, action_size, int(config.n_critics), discrete=False)
    return q, freeze(copy.deepcopy(q))
