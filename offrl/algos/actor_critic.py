"""Config fields that the actor-critic algorithms share, written once.

:class:`ActorCriticConfig` holds the seven fields of AWAC, CRR, DDPG, TD3,
TD3+BC, PRDC and ReBRAC (learning rates, optimizers and encoders of the
policy and the Q-functions, the Q-function type); :class:`TD3StyleConfig`
adds the four that TD3 and the algorithms built on it share (``tau``,
``n_critics``, target policy smoothing). A field an algorithm gives another
default is redefined in its own config, which keeps its place in the field
order (dataclasses keep a redefined field where it was first declared), so
every config lists its fields in d3rlpy's order.

Their ``Args`` text is written once too: a subclass's docstring lists its
own fields under ``Args:``, and the shared ones are put in front of them
when the class is made (``help(TD3Config)`` shows every field).

Neither class is registered: they are not algorithms.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Dict

from ..models.encoders import DefaultEncoderFactory, EncoderFactory
from ..models.q_functions import MeanQFunctionFactory, QFunctionFactory
from ..optimizers.optimizers import AdamFactory, OptimizerFactory
from .config import NON_NEGATIVE, POSITIVE, POSITIVE_INT, UNIT_INTERVAL_OPEN_LOW, LearnableConfig, instance_of, param

__all__ = ["ActorCriticConfig", "TD3StyleConfig"]


def _documented_args(doc: str) -> Dict[str, str]:
    """``{field: its Args line}`` of a docstring's ``Args:`` section, the
    lines as written (continuation lines joined to their field)."""
    found: Dict[str, str] = {}
    section = doc.split("Args:", 1)[1] if "Args:" in doc else ""
    name = None
    for line in section.splitlines():
        match = re.match(r"^\s{8}(\w+(?:, \w+)*): ", line)
        if match:
            for name in match.group(1).split(", "):
                found[name] = line.strip()
        elif name is not None and line.startswith(" " * 12) and line.strip():
            found[name] += " " + line.strip()
        elif line.strip():
            break
    return found


@dataclasses.dataclass
class ActorCriticConfig(LearnableConfig):
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

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        doc = cls.__dict__.get("__doc__")
        if not doc or "Args:" not in doc:
            return
        own = _documented_args(doc)
        shared: Dict[str, str] = {}
        for base in reversed(cls.__mro__[1:]):
            if isinstance(base, type) and issubclass(base, ActorCriticConfig) and base.__dict__.get("__doc__"):
                shared.update(_documented_args(base.__dict__["__doc__"]))
        missing = [f"        {line}\n" for name, line in shared.items() if name not in own]
        if missing:  # the shared fields come first in every such config: their lines go first
            head, section = doc.split("Args:\n", 1)
            cls.__doc__ = head + "Args:\n" + "".join(missing) + section


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
