"""offrl: offline-first reinforcement learning.

Fit a policy on logged decisions with a scikit-learn-like API, judge it
without touching the real system, and export it to run anywhere.

The subpackages and helpers below are imported on first use (PEP 562), so
``import offrl`` and the ``offrl`` command start without loading torch.
"""

from __future__ import annotations

import importlib
from typing import Any, Dict, List, Tuple

from ._version import __version__

__all__ = [
    "__version__",
    "seed",
    "ActionSpace",
    "LoggingStrategy",
    "PositionEncodingType",
    "load_learnable",
    "algos",
    "dataset",
    "datasets",
    "distributed",
    "envs",
    "logging",
    "metrics",
    "models",
    "ope",
    "optimizers",
    "preprocessing",
    "types",
]

#: subpackages imported on first attribute access (``model_selection`` too,
#: though not in ``__all__``: it needs the search extra; ``base`` and
#: ``torch_utility``, d3rlpy's paths for writing one's own algorithm)
_LAZY_MODULES = frozenset({
    "algos", "dataset", "datasets", "logging", "metrics", "models", "ope", "preprocessing",
    "envs", "types", "optimizers", "distributed", "model_selection", "base", "torch_utility",
})

#: names imported on first access: (module, attribute)
_LAZY_ATTRIBUTES: Dict[str, Tuple[str, str]] = {
    "seed": ("._random", "seed"),
    "ActionSpace": (".constants", "ActionSpace"),
    "LoggingStrategy": (".constants", "LoggingStrategy"),
    "PositionEncodingType": (".constants", "PositionEncodingType"),
    "load_learnable": (".serialization", "load_learnable"),
    # d3rlpy's extension API (not in __all__, as model_selection)
    "Modules": (".torch_utility", "Modules"),
    "TorchMiniBatch": (".torch_utility", "TorchMiniBatch"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY_MODULES:
        # import_module also binds the submodule as an attribute of this package
        try:
            return importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise  # a dependency of the submodule is missing: say which
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    if name in _LAZY_ATTRIBUTES:
        if name == "load_learnable":
            # a model file names its algorithm, encoder and scaler types: the
            # built-in ones register themselves when these packages load
            importlib.import_module(".algos", __name__)
            importlib.import_module(".ope", __name__)
        module_name, attribute = _LAZY_ATTRIBUTES[name]
        value = getattr(importlib.import_module(module_name, __name__), attribute)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(__all__))
