"""``register(kind, type_name)`` gives a class its ``get_type()`` (the name
saved in files), as the built-in algorithm configs are registered."""

from __future__ import annotations

import pytest

from offrl.algos import DoubleDQNConfig, DQNConfig, SACConfig
from offrl.serialization import lookup, register


def test_the_registered_name_is_the_configs_get_type():
    assert SACConfig.get_type() == SACConfig().get_type() == "sac"
    assert (DQNConfig.get_type(), DoubleDQNConfig.get_type()) == ("dqn", "double_dqn")  # a subclass has its own
    assert lookup("algorithm", "double_dqn") is DoubleDQNConfig
    assert SACConfig.from_dict(SACConfig().to_dict()) == SACConfig()


def test_a_class_that_writes_get_type_too_is_refused():
    class Both:
        @staticmethod
        def get_type() -> str:
            return "both"

    with pytest.raises(TypeError, match="defines get_type and is registered with a type name"):
        register("test_kind", "both")(Both)


def test_a_class_may_still_write_get_type_itself():
    @register("test_kind")
    class Own:
        @staticmethod
        def get_type() -> str:
            return "own"

    assert lookup("test_kind", "own") is Own
