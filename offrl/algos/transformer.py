"""d3rlpy's ``d3rlpy.algos.transformer`` import path, as an alias.

Every name of that d3rlpy module is this module's, the same object as in
:mod:`offrl.algos`; its submodule paths (``.inputs``, ``.base``,
``.action_samplers``, ``.decision_transformer``, ``.tacr``) are modules
holding the names d3rlpy's submodule of that name holds.
"""

from __future__ import annotations

import sys
from typing import Any, Dict, List

from ._aliases import alias_submodule

#: public names of ``d3rlpy.algos.transformer`` in d3rlpy 2.8.1
D3RLPY_NAMES = (
    "DecisionTransformer", "DecisionTransformerConfig", "DiscreteDecisionTransformer",
    "DiscreteDecisionTransformerConfig", "GreedyTransformerActionSampler", "IdentityTransformerActionSampler",
    "SoftmaxTransformerActionSampler", "StatefulTransformerWrapper", "TACR", "TACRConfig", "TorchTransformerInput",
    "TransformerActionSampler", "TransformerAlgoBase", "TransformerAlgoImplBase", "TransformerConfig",
    "TransformerInput",
)
_NO_COUNTERPART: tuple = ()

#: d3rlpy 2.8.1's submodules of ``d3rlpy.algos.transformer`` and the names each holds
_SUBMODULES: Dict[str, tuple] = {
    "action_samplers": ("TransformerActionSampler", "IdentityTransformerActionSampler",
                        "SoftmaxTransformerActionSampler", "GreedyTransformerActionSampler"),
    "base": ("TransformerAlgoImplBase", "StatefulTransformerWrapper", "TransformerConfig", "TransformerAlgoBase"),
    "decision_transformer": ("DecisionTransformerConfig", "DecisionTransformer", "DiscreteDecisionTransformerConfig",
                             "DiscreteDecisionTransformer"),
    "inputs": ("TransformerInput", "TorchTransformerInput"),
    "tacr": ("TACRConfig", "TACR"),
}

_algos = sys.modules[__name__.rpartition(".")[0]]

__all__: List[str] = [name for name in D3RLPY_NAMES if hasattr(_algos, name)]
globals().update({name: getattr(_algos, name) for name in __all__})
for _name, _names in _SUBMODULES.items():
    alias_submodule(sys.modules[__name__], _name, {n: getattr(_algos, n) for n in _names if hasattr(_algos, n)})

#: d3rlpy names not available here yet, with the reason
MISSING: Dict[str, str] = {
    name: ("it is part of d3rlpy's implementation layer, which offrl does not have" if name in _NO_COUNTERPART
           else "the Decision Transformer family is planned in issue 18")
    for name in D3RLPY_NAMES if name not in __all__
}


def __getattr__(name: str) -> Any:
    if name in MISSING:
        raise AttributeError(f"offrl does not provide d3rlpy's {name} yet: {MISSING[name]}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
