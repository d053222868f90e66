"""Algorithms: one file each, sharing base.py; the loops that run them live in offrl.training."""

from .base import LearnableConfig, NonFiniteLossError, QLearningAlgoBase, TrainStepResult, parse_device
from .impl import QLearningAlgoImplBase, TQLearningConfig, TQLearningImpl, TransformerAlgoImplBase
from .awac import AWAC, AWACConfig
from .calql import CalQL, CalQLConfig
from .bc import BC, BCConfig, DiscreteBC, DiscreteBCConfig
from .bcq import BCQ, BCQConfig, DiscreteBCQ, DiscreteBCQConfig
from .bear import BEAR, BEARConfig
from .cql import CQL, CQLConfig, DiscreteCQL, DiscreteCQLConfig
from .crr import CRR, CRRConfig
from .ddpg import DDPG, DDPGConfig
from .discrete_sac import DiscreteSAC, DiscreteSACConfig
from .decision_transformer import (
    DecisionTransformer,
    DecisionTransformerConfig,
    DiscreteDecisionTransformer,
    DiscreteDecisionTransformerConfig,
    GreedyTransformerActionSampler,
    IdentityTransformerActionSampler,
    SoftmaxTransformerActionSampler,
    StatefulTransformerWrapper,
    TransformerActionSampler,
    TransformerAlgoBase,
    TransformerConfig,
    TransformerInput,
)
from .transformer_inputs import TorchTransformerInput
from .dqn import DQN, DQNConfig, DoubleDQN, DoubleDQNConfig
from .tacr import TACR, TACRConfig
from .fqe import DiscreteFQE, DiscreteFQEConfig, FQE, FQEConfig  # noqa: F401 (registered; offrl.ope re-exports them)
from ..training.explorers import (
    AdditiveOU,
    Boltzmann,
    ConstantEpsilonGreedy,
    Explorer,
    ExplorerProtocol,
    LinearDecayEpsilonGreedy,
    NormalNoise,
)
from ..training.hooks import LinearInterpolationHook, combine_callbacks, set_config, set_learning_rate
from .iql import IQL, IQLConfig
from .nfq import NFQ, NFQConfig
from .plas import PLAS, PLASConfig, PLASWithPerturbation, PLASWithPerturbationConfig
from .prdc import PRDC, PRDCConfig
from .random_policy import DiscreteRandomPolicy, DiscreteRandomPolicyConfig, RandomPolicy, RandomPolicyConfig
from .rebrac import ReBRAC, ReBRACConfig
from .sac import SAC, SACConfig
from .td3 import TD3, TD3Config
from .td3_plus_bc import TD3PlusBC, TD3PlusBCConfig

__all__ = [
    "LearnableConfig",
    "QLearningAlgoBase",
    "QLearningAlgoImplBase",
    "TransformerAlgoImplBase",
    "TorchTransformerInput",
    "TQLearningConfig",
    "TQLearningImpl",
    "NonFiniteLossError",
    "TrainStepResult",
    "parse_device",
    "BCConfig",
    "BC",
    "DiscreteBCConfig",
    "DiscreteBC",
    "DQNConfig",
    "DQN",
    "DoubleDQNConfig",
    "DoubleDQN",
    "SACConfig",
    "SAC",
    "CQLConfig",
    "CQL",
    "DiscreteCQLConfig",
    "DiscreteCQL",
    "IQLConfig",
    "IQL",
    "TD3PlusBCConfig",
    "TD3PlusBC",
    "NFQConfig",
    "NFQ",
    "DDPGConfig",
    "DDPG",
    "TD3Config",
    "TD3",
    "DiscreteSACConfig",
    "DiscreteSAC",
    "BCQConfig",
    "BCQ",
    "DiscreteBCQConfig",
    "DiscreteBCQ",
    "BEARConfig",
    "BEAR",
    "DecisionTransformerConfig",
    "DecisionTransformer",
    "DiscreteDecisionTransformerConfig",
    "DiscreteDecisionTransformer",
    "TACRConfig",
    "TACR",
    "TransformerConfig",
    "TransformerAlgoBase",
    "TransformerInput",
    "TransformerActionSampler",
    "IdentityTransformerActionSampler",
    "SoftmaxTransformerActionSampler",
    "GreedyTransformerActionSampler",
    "StatefulTransformerWrapper",
    "AWACConfig",
    "AWAC",
    "CRRConfig",
    "CRR",
    "CalQLConfig",
    "CalQL",
    "ReBRACConfig",
    "ReBRAC",
    "PLASConfig",
    "PLAS",
    "PLASWithPerturbationConfig",
    "PLASWithPerturbation",
    "PRDCConfig",
    "PRDC",
    "RandomPolicyConfig",
    "RandomPolicy",
    "DiscreteRandomPolicyConfig",
    "DiscreteRandomPolicy",
    "Explorer",
    "ExplorerProtocol",
    "ConstantEpsilonGreedy",
    "LinearDecayEpsilonGreedy",
    "Boltzmann",
    "NormalNoise",
    "AdditiveOU",
    "LinearInterpolationHook",
    "set_learning_rate",
    "set_config",
    "combine_callbacks",
]
