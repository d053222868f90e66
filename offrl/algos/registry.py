"""Algorithms by name: ``"cql"``, ``"CQL"``, ``"CQLConfig"`` -> ``CQLConfig``.

The names come from the config registry of :mod:`offrl.serialization`
(every algorithm config registers itself there under its type name), so an
algorithm registered by a user is found the same way as a built-in one.
"""

from __future__ import annotations

from typing import Dict

# importing this module runs offrl/algos/__init__.py first, which imports
# (and so registers) every built-in algorithm
from ..serialization import registered

__all__ = ["algorithm_configs", "resolve_algorithm"]


def algorithm_configs() -> Dict[str, type]:
    """The registered algorithm config classes that a user can create by
    name, by type name (helpers such as FQE, which needs an algorithm to
    evaluate, are left out)."""
    return {name: cls for name, cls in registered("algorithm").items() if not cls.algorithm_class().evaluates_algorithm}


def _normalise(name: str) -> str:
    return name.strip().lower().replace("-", "").replace("_", "")


def resolve_algorithm(name: str) -> type:
    """The config class of an algorithm named by its type (``discrete_cql``,
    ``discrete-cql``), its class (``DiscreteCQL``) or its config class
    (``DiscreteCQLConfig``), case-insensitively.

    Raises ``TypeError`` for a non-string and ``ValueError`` listing the
    known type names for an unknown one."""
    if not isinstance(name, str):
        raise TypeError(f"algorithm name must be a str, got {type(name).__name__}")
    configs = algorithm_configs()
    wanted = _normalise(name)
    for type_name, cls in configs.items():
        class_name = cls.__name__
        aliases = {type_name, class_name, class_name.removesuffix("Config")}
        if wanted and wanted in {_normalise(alias) for alias in aliases}:
            return cls
    raise ValueError(f"unknown algorithm {name!r}; valid: {', '.join(sorted(configs))}")
