"""gymnasium environment wrappers and helpers (d3rlpy's ``d3rlpy.envs``)."""

from .utility import seed_env
from .wrappers import Atari, AtariPreprocessing, ChannelFirst, FrameStack, GoalConcatWrapper

__all__ = ["Atari", "AtariPreprocessing", "ChannelFirst", "FrameStack", "GoalConcatWrapper", "seed_env"]
