"""Algorithms: one file each, sharing base.py and training.py."""

from .base import LearnableConfig, NonFiniteLossError, QLearningAlgoBase, parse_device
from .dqn import DQN, DQNConfig, DoubleDQN, DoubleDQNConfig

__all__ = [
    "LearnableConfig",
    "QLearningAlgoBase",
    "NonFiniteLossError",
    "parse_device",
    "DQNConfig",
    "DQN",
    "DoubleDQNConfig",
    "DoubleDQN",
]
