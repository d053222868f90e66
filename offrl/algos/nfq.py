"""Neural Fitted Q Iteration.

NFQ (Riedmiller, 2005, "Neural Fitted Q Iteration - First Experiences with
a Data Efficient Neural Reinforcement Learning Method") regresses Q on a
target bootstrapped from the current network itself:

    L(theta) = E_{(s, a, r, s') ~ D} [ l( r + gamma^k (1 - d) max_a' Q_theta-(s', a') - Q_theta(s, a) ) ]

where ``theta-`` are the current weights with no gradient through them,
``l`` the Huber loss (the quantile Huber loss for QR / IQN Q-functions),
``k`` the transition's interval and ``d`` its terminal flag. It is DQN
(:mod:`offrl.algos.dqn`) without a target network: d3rlpy 2.8.1 builds NFQ
as DQN whose target network is copied after every step, which gives the
same numbers as bootstrapping from the online network, so no copy is kept
here (nor saved). With ``n_critics > 1`` the greedy next action uses the
ensemble mean and the target the ensemble minimum; prioritized replay works
as for DQN.
"""

from __future__ import annotations

import dataclasses

from ..serialization import register
from .config import POSITIVE_INT, param
from .dqn import DQN, QNetworkConfig

__all__ = ["NFQConfig", "NFQ"]


@register("algorithm", "nfq")
@dataclasses.dataclass
class NFQConfig(QNetworkConfig):
    """Config of NFQ (details in the module docstring).

    Loss:
        L(θ) = E_(s,a,r,s')~D [ ℓ(r + γ^k (1 − d) max_a' Q_θ⁻(s', a') − Q_θ(s, a)) ]
        with θ⁻ the current weights without gradient and ℓ the Huber loss.

    Defaults:
        d3rlpy 2.8.1's, DQN's optimizer settings (Adam, learning_rate=6.25e-5,
        batch_size=32). The paper trained on the whole data set with Rprop.

    References:
        Riedmiller, "Neural Fitted Q Iteration - First Experiences with a
        Data Efficient Neural Reinforcement Learning Method", ECML 2005 (no
        arXiv id).
    """

    batch_size: int = param(32, check=POSITIVE_INT)


class NFQ(DQN, config=NFQConfig):
    """Neural Fitted Q Iteration (see the module docstring): DQN that
    bootstraps from its own network."""

    _q_modules = ("q_function",)
    _has_target_network = False
