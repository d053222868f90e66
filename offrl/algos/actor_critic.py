"""Config fields that families of actor-critic algorithms share, written
once (on :class:`~offrl.algos.config.SharedFieldsConfig`, which also
writes their ``Args`` text once).

:class:`ActorCriticConfig` holds the seven fields of AWAC, CRR, DDPG, TD3,
TD3+BC, PRDC and ReBRAC (learning rates, optimizers and encoders of the
policy and the Q-functions, the Q-function type); :class:`TD3StyleConfig`
adds the four that TD3 and the algorithms built on it share (``tau``,
``n_critics``, target policy smoothing). :class:`SoftActorCriticConfig`
holds the nine that SAC and discrete SAC share (the policy's, the
Q-functions' and the temperature's), :class:`ImitatorActorCriticConfig`
the twelve of BCQ and PLAS (the actor's, the Q-functions' and the VAE's).
A field an algorithm gives another default is redefined in its own config,
which keeps its place in the field order, so every config lists its fields
in d3rlpy's order.

None of these classes is registered: they are not algorithms.
"""

from __future__ import annotations

import dataclasses

from ..models.encoders import DefaultEncoderFactory, EncoderFactory
from ..models.q_functions import MeanQFunctionFactory, QFunctionFactory
from ..optimizers.optimizers import AdamFactory, OptimizerFactory
from .config import NON_NEGATIVE, POSITIVE, POSITIVE_INT, UNIT_INTERVAL_OPEN_LOW, SharedFieldsConfig, instance_of, param

__all__ = ["ActorCriticConfig", "TD3StyleConfig", "SoftActorCriticConfig", "ImitatorActorCriticConfig"]


@dataclasses.dataclass
class ActorCriticConfig(SharedFieldsConfig):
    """The fields of an actor-critic config.

    Args:
        actor_learning_rate: learning rate of the policy.
        critic_learning_rate: learning rate of the Q-functions.
        actor_optim_factory: optimizer of the policy (Adam).
        critic_optim_factory: optimizer of the Q-functions (Adam).
        actor_encoder_factory: encoder of the policy.
        critic_encoder_factory: encoder of the Q-functions.
        q_func_factory: Q-function type (mean, QR, IQN).
    """

    actor_learning_rate: float = param(3e-4, check=POSITIVE)
    critic_learning_rate: float = param(3e-4, check=POSITIVE)
    actor_optim_factory: OptimizerFactory = param(default_factory=AdamFactory, check=instance_of(OptimizerFactory))
    critic_optim_factory: OptimizerFactory = param(default_factory=AdamFactory, check=instance_of(OptimizerFactory))
    actor_encoder_factory: EncoderFactory = param(default_factory=DefaultEncoderFactory, check=instance_of(EncoderFactory))
    critic_encoder_factory: EncoderFactory = param(default_factory=DefaultEncoderFactory, check=instance_of(EncoderFactory))
    q_func_factory: QFunctionFactory = param(default_factory=MeanQFunctionFactory, check=instance_of(QFunctionFactory))


@dataclasses.dataclass
class TD3StyleConfig(ActorCriticConfig):
    """:class:`ActorCriticConfig` and the fields TD3 adds, shared by TD3,
    TD3+BC, PRDC and ReBRAC.

    Args:
        tau: Polyak averaging factor of the target networks.
        n_critics: number of Q-functions.
        target_smoothing_sigma: standard deviation of the target policy noise.
        target_smoothing_clip: the target policy noise is clipped to ``[-clip, clip]``.
    """

    tau: float = param(0.005, check=UNIT_INTERVAL_OPEN_LOW)
    n_critics: int = param(2, check=POSITIVE_INT)
    target_smoothing_sigma: float = param(0.2, check=NON_NEGATIVE)
    target_smoothing_clip: float = param(0.5, check=NON_NEGATIVE)


@dataclasses.dataclass
class SoftActorCriticConfig(SharedFieldsConfig):
    """The fields SAC and discrete SAC share: learning rates, optimizers of
    the policy, the Q-functions and the entropy temperature, encoders of the
    policy and the Q-functions, the Q-function type.

    Args:
        actor_learning_rate: learning rate of the policy.
        critic_learning_rate: learning rate of the Q-functions.
        temp_learning_rate: learning rate of the (log) temperature (0: fixed).
        actor_optim_factory, critic_optim_factory, temp_optim_factory: optimizers.
        actor_encoder_factory, critic_encoder_factory: encoders of the policy
            and of the Q-functions.
        q_func_factory: Q-function type (mean, QR, IQN).
    """

    actor_learning_rate: float = param(3e-4, check=POSITIVE)
    critic_learning_rate: float = param(3e-4, check=POSITIVE)
    temp_learning_rate: float = param(3e-4, check=NON_NEGATIVE)
    actor_optim_factory: OptimizerFactory = param(default_factory=AdamFactory, check=instance_of(OptimizerFactory))
    critic_optim_factory: OptimizerFactory = param(default_factory=AdamFactory, check=instance_of(OptimizerFactory))
    temp_optim_factory: OptimizerFactory = param(default_factory=AdamFactory, check=instance_of(OptimizerFactory))
    actor_encoder_factory: EncoderFactory = param(default_factory=DefaultEncoderFactory, check=instance_of(EncoderFactory))
    critic_encoder_factory: EncoderFactory = param(default_factory=DefaultEncoderFactory, check=instance_of(EncoderFactory))
    q_func_factory: QFunctionFactory = param(default_factory=MeanQFunctionFactory, check=instance_of(QFunctionFactory))


@dataclasses.dataclass
class ImitatorActorCriticConfig(SharedFieldsConfig):
    """The fields BCQ and PLAS share: learning rates, optimizers and
    encoders of the actor, the Q-functions and the imitator (a conditional
    VAE of the logged actions), the Q-function type, the target networks'
    rate and the number of Q-functions.

    Args:
        actor_learning_rate: learning rate of the actor.
        critic_learning_rate: learning rate of the Q-functions.
        imitator_learning_rate: learning rate of the VAE.
        actor_optim_factory, critic_optim_factory, imitator_optim_factory: optimizers.
        actor_encoder_factory, critic_encoder_factory, imitator_encoder_factory:
            encoders of the actor, the Q-functions and the VAE.
        q_func_factory: Q-function type (mean, QR, IQN).
        tau: Polyak averaging factor of the target networks.
        n_critics: number of Q-functions.
    """

    actor_learning_rate: float = param(1e-3, check=POSITIVE)
    critic_learning_rate: float = param(1e-3, check=POSITIVE)
    imitator_learning_rate: float = param(1e-3, check=POSITIVE)
    actor_optim_factory: OptimizerFactory = param(default_factory=AdamFactory, check=instance_of(OptimizerFactory))
    critic_optim_factory: OptimizerFactory = param(default_factory=AdamFactory, check=instance_of(OptimizerFactory))
    imitator_optim_factory: OptimizerFactory = param(default_factory=AdamFactory, check=instance_of(OptimizerFactory))
    actor_encoder_factory: EncoderFactory = param(default_factory=DefaultEncoderFactory, check=instance_of(EncoderFactory))
    critic_encoder_factory: EncoderFactory = param(default_factory=DefaultEncoderFactory, check=instance_of(EncoderFactory))
    imitator_encoder_factory: EncoderFactory = param(default_factory=DefaultEncoderFactory, check=instance_of(EncoderFactory))
    q_func_factory: QFunctionFactory = param(default_factory=MeanQFunctionFactory, check=instance_of(QFunctionFactory))
    tau: float = param(0.005, check=UNIT_INTERVAL_OPEN_LOW)
    n_critics: int = param(2, check=POSITIVE_INT)
