"""d3rlpy's ``d3rlpy.algos.qlearning`` import path, as an alias.

``from offrl.algos.qlearning import CQLConfig`` works as in d3rlpy 2.8.1:
every name of that d3rlpy module that offrl has is this module's, the same
object as in :mod:`offrl.algos` (algorithms added later appear here by
themselves). Submodule paths (``offrl.algos.qlearning.cql``,
``offrl.algos.qlearning.sac`` with ``DiscreteSAC``, ``.explorers``,
``.cal_ql``) are modules holding the names d3rlpy's submodule of that name
holds, the same objects as in :mod:`offrl.algos`. A d3rlpy name offrl does not have yet raises
an ``AttributeError`` (so an ``ImportError`` on ``from ... import``) naming
the issue that will bring it (:data:`MISSING`).
"""

from __future__ import annotations

import sys
from typing import Any, Dict, List

from . import qlearning_torch
from ._aliases import alias_submodule

#: public names of ``d3rlpy.algos.qlearning`` in d3rlpy 2.8.1 (classes and functions)
D3RLPY_NAMES = (
    "AWAC", "AWACConfig", "BC", "BCConfig", "BCQ", "BCQConfig", "BEAR", "BEARConfig", "CQL", "CQLConfig", "CRR",
    "CRRConfig", "CalQL", "CalQLConfig", "ConstantEpsilonGreedy", "DDPG", "DDPGConfig", "DQN", "DQNConfig", "DiscreteBC",
    "DiscreteBCConfig", "DiscreteBCQ", "DiscreteBCQConfig", "DiscreteCQL", "DiscreteCQLConfig", "DiscreteRandomPolicy",
    "DiscreteRandomPolicyConfig", "DiscreteSAC", "DiscreteSACConfig", "DoubleDQN", "DoubleDQNConfig", "Explorer", "IQL",
    "IQLConfig", "LinearDecayEpsilonGreedy", "NFQ", "NFQConfig", "NormalNoise", "PLAS", "PLASConfig",
    "PLASWithPerturbation", "PLASWithPerturbationConfig", "PRDC", "PRDCConfig", "QLearningAlgoBase",
    "QLearningAlgoImplBase", "RandomPolicy", "RandomPolicyConfig", "ReBRAC", "ReBRACConfig", "SAC", "SACConfig", "TD3",
    "TD3Config", "TD3PlusBC", "TD3PlusBCConfig", "TQLearningConfig", "TQLearningImpl",
)

#: d3rlpy 2.8.1's submodules of ``d3rlpy.algos.qlearning`` and the names each holds
_SUBMODULES: Dict[str, tuple] = {
    "awac": ("AWACConfig", "AWAC"), "bc": ("BCConfig", "BC", "DiscreteBCConfig", "DiscreteBC"),
    "bcq": ("BCQConfig", "BCQ", "DiscreteBCQConfig", "DiscreteBCQ"), "bear": ("BEARConfig", "BEAR"),
    "cal_ql": ("CalQLConfig", "CalQL"), "cql": ("CQLConfig", "CQL", "DiscreteCQLConfig", "DiscreteCQL"),
    "crr": ("CRRConfig", "CRR"), "ddpg": ("DDPGConfig", "DDPG"),
    "dqn": ("DQNConfig", "DQN", "DoubleDQNConfig", "DoubleDQN"),
    "explorers": ("Explorer", "ConstantEpsilonGreedy", "LinearDecayEpsilonGreedy", "NormalNoise"),
    "iql": ("IQLConfig", "IQL"), "nfq": ("NFQConfig", "NFQ"),
    "plas": ("PLASConfig", "PLAS", "PLASWithPerturbationConfig", "PLASWithPerturbation"),
    "prdc": ("PRDCConfig", "PRDC"),
    "random_policy": ("RandomPolicyConfig", "RandomPolicy", "DiscreteRandomPolicyConfig", "DiscreteRandomPolicy"),
    "rebrac": ("ReBRACConfig", "ReBRAC"), "sac": ("SACConfig", "SAC", "DiscreteSACConfig", "DiscreteSAC"),
    "td3": ("TD3Config", "TD3"), "td3_plus_bc": ("TD3PlusBCConfig", "TD3PlusBC"),
}

#: the issue that brings each d3rlpy name offrl does not have
_PLANNED: Dict[str, str] = {
    **{n: "issue 16" for n in ("AWAC", "CRR", "CalQL", "ReBRAC")},
    **{n: "issue 17" for n in ("BCQ", "DiscreteBCQ", "BEAR", "PLAS", "PLASWithPerturbation", "PRDC")},
}

_algos = sys.modules[__name__.rpartition(".")[0]]

__all__: List[str] = [name for name in D3RLPY_NAMES if hasattr(_algos, name)]
globals().update({name: getattr(_algos, name) for name in __all__})

for _name, _names in _SUBMODULES.items():
    alias_submodule(sys.modules[__name__], _name, {n: getattr(_algos, n) for n in _names if hasattr(_algos, n)})

# ``d3rlpy.algos.qlearning.torch.utility``: the helpers of d3rlpy's torch layer (the per-algorithm Impl
# classes of ``d3rlpy.algos.qlearning.torch`` are not provided)
_utility = {n: getattr(qlearning_torch, n) for n in qlearning_torch.__all__}
alias_submodule(alias_submodule(sys.modules[__name__], "torch", {}), "utility", _utility)


def _why_missing(name: str) -> str:
    base = name[: -len("Config")] if name.endswith("Config") else name
    return f"planned in {_PLANNED.get(base, 'a later issue')}"


#: d3rlpy names not available here yet, with the reason
MISSING: Dict[str, str] = {name: _why_missing(name) for name in D3RLPY_NAMES if name not in __all__}


def __getattr__(name: str) -> Any:
    if name in MISSING:
        raise AttributeError(f"offrl does not provide d3rlpy's {name} yet: {MISSING[name]}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
