"""Import paths of d3rlpy's submodules (``d3rlpy.algos.qlearning.cql``,
``d3rlpy.algos.transformer.inputs``) as alias modules: each holds the names
d3rlpy's submodule holds, bound to offrl's objects (no code of its own)."""

from __future__ import annotations

import sys
import types
from typing import Any, Dict

__all__ = ["alias_submodule"]


def alias_submodule(parent: types.ModuleType, name: str, names: Dict[str, Any]) -> types.ModuleType:
    """Register ``<parent>.<name>`` as a module holding ``names`` (so that
    ``from <parent>.<name> import X`` works) and return it."""
    full = f"{parent.__name__}.{name}"
    module = types.ModuleType(full, f"d3rlpy's ``{full.replace('offrl', 'd3rlpy', 1)}`` import path: "
                                    f"{', '.join(names) or 'no names yet'} (aliases of offrl's objects).")
    module.__dict__.update(names)
    module.__all__ = list(names)  # type: ignore[attr-defined]
    sys.modules[full] = module
    setattr(parent, name, module)
    return module
