"""Constants shared across offrl."""

from __future__ import annotations

import enum

__all__ = ["ActionSpace", "LoggingStrategy", "PositionEncodingType"]


class ActionSpace(enum.Enum):
    """Kind of action space of a dataset or an algorithm.

    ``BOTH`` is reported by algorithms that accept either kind (random
    policies, behaviour cloning families); datasets are always one of
    ``CONTINUOUS`` or ``DISCRETE``.
    """

    CONTINUOUS = 1
    DISCRETE = 2
    BOTH = 3

    @classmethod
    def parse(cls, value: "ActionSpace | str | int") -> "ActionSpace":
        """Accept an ``ActionSpace``, its name (any case) or its value."""
        if isinstance(value, ActionSpace):
            return value
        if isinstance(value, str):
            try:
                return cls[value.upper()]
            except KeyError:
                pass
        elif isinstance(value, int) and not isinstance(value, bool):
            try:
                return cls(value)
            except ValueError:
                pass
        raise ValueError(
            f"action_space must be an ActionSpace, 'continuous' or 'discrete', got {value!r}"
        )


class LoggingStrategy(enum.Enum):
    """When ``fit`` writes metrics: at the end of each epoch (``EPOCH``) or,
    in addition, every ``logging_steps`` steps (``STEPS``)."""

    STEPS = "steps"
    EPOCH = "epoch"

    @classmethod
    def parse(cls, value: "LoggingStrategy | str") -> "LoggingStrategy":
        if isinstance(value, LoggingStrategy):
            return value
        if isinstance(value, str):
            for member in cls:
                if value.lower() == member.value:
                    return member
        raise ValueError(f"logging_strategy must be 'steps' or 'epoch' (a LoggingStrategy), got {value!r}")


class PositionEncodingType(enum.Enum):
    """Position encodings of the Decision Transformer family (d3rlpy's names)."""

    SIMPLE = "simple"
    GLOBAL = "global"
