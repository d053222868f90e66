"""Constants shared across offrl."""

from __future__ import annotations

import enum

__all__ = ["ActionSpace"]


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
