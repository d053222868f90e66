"""d3rlpy's ``d3rlpy.algos.transformer`` import path, as an alias.

The Decision Transformer family (``DecisionTransformer``,
``DiscreteDecisionTransformer``, ``TACR``, their configs, action samplers
and ``StatefulTransformerWrapper``) comes with issue 18: until then this
module exists so that d3rlpy code importing it fails on the name, with an
``AttributeError`` / ``ImportError`` that says so, rather than on the
module path. Names that offrl has are the same objects as in
:mod:`offrl.algos` and appear here by themselves once added.
"""

from __future__ import annotations

import sys
from typing import Any, Dict, List

#: public names of ``d3rlpy.algos.transformer`` in d3rlpy 2.8.1
D3RLPY_NAMES = (
    "DecisionTransformer", "DecisionTransformerConfig", "DiscreteDecisionTransformer",
    "DiscreteDecisionTransformerConfig", "GreedyTransformerActionSampler", "IdentityTransformerActionSampler",
    "SoftmaxTransformerActionSampler", "StatefulTransformerWrapper", "TACR", "TACRConfig", "TorchTransformerInput",
    "TransformerActionSampler", "TransformerAlgoBase", "TransformerAlgoImplBase", "TransformerConfig",
    "TransformerInput",
)
_NO_COUNTERPART = ("TransformerAlgoImplBase", "TorchTransformerInput")

_algos = sys.modules[__name__.rpartition(".")[0]]

__all__: List[str] = [name for name in D3RLPY_NAMES if hasattr(_algos, name)]
globals().update({name: getattr(_algos, name) for name in __all__})

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
