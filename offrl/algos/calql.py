"""Calibrated Q-Learning (Cal-QL).

Cal-QL (Nakamoto et al., 2023, "Cal-QL: Calibrated Offline RL Pre-Training
for Efficient Online Fine-Tuning") is continuous CQL (:mod:`offrl.algos.cql`)
whose conservative term stops pushing a Q-value down once it reaches the
value of a reference policy, the behaviour policy, estimated by the
Monte-Carlo return-to-go of the logged transition:

    G(s_t) = sum_{k >= 0} gamma^k f(r_{t+k})      (to the end of the episode)
    log sum_a exp Q_i(s, a) ~ logsumexp_k [ Q~_i(s, a_k) - log q(a_k) ]
    Q~_i(s, a_k) = max(Q_i(s, a_k), G(s))   for a_k ~ pi(.|s) and a_k ~ pi(.|s')
    Q~_i(s, a_k) = Q_i(s, a_k)              for the uniform proposals

with ``f`` the reward scaler (the identity without one). Everything else
(the TD target, the Lagrange multiplier, the actor and temperature) is CQL's.
The learned values are then "calibrated": they lower-bound the policy's
value without falling below the behaviour policy's, which keeps the first
steps of online fine-tuning (``fit_online``) from unlearning.

The returns-to-go come with each mini-batch: the built-in transition
pickers record where each transition's episode ends, and the base computes
``G`` for the whole batch at once (vectorised over the batch and the
steps, with the config's ``gamma``) when the algorithm sets
``need_returns_to_go``. An episode that did not end in a terminal state
(a timeout, the end of the log) has no rewards after its last logged step:
its returns-to-go assume zero reward from there (d3rlpy does the same);
``fit`` warns and names those episodes.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, List

import torch

from ..serialization import register
from .cql import CQL, CQLConfig

__all__ = ["CalQLConfig", "CalQL", "truncated_episodes"]

#: truncated episodes named in the warning
_SHOWN = 5


@register("algorithm", "cal_ql")
@dataclasses.dataclass
class CalQLConfig(CQLConfig):
    """Config of Cal-QL: CQL whose conservative term is clipped by the
    behaviour policy's Monte-Carlo returns (details in :mod:`offrl.algos.calql`).

    Loss:
        CQL's, with the policy-sampled values inside the log-sum-exp
        replaced by max(Q_i(s, a_k), G(s)), G(s) the discounted
        return-to-go of the logged transition (reward scaler applied).

    Defaults:
        d3rlpy 2.8.1's, those of CQL: actor learning rate 1e-4, critics
        3e-4, temperature 1e-4, α learned (1e-4) towards the threshold 10,
        conservative_weight 5, 10 action samples, batch_size=256,
        tau=0.005. The paper's code fixes α (5 on AntMaze, 1 on Adroit)
        instead of learning it: ``alpha_learning_rate=0`` with
        ``initial_alpha`` set.

    References:
        Nakamoto, Zhai, Singh, Sobol Mark, Ma, Finn, Kumar and Levine,
        "Cal-QL: Calibrated Offline RL Pre-Training for Efficient Online
        Fine-Tuning", 2023, arXiv:2303.05479.

    Args:
        as :class:`~offrl.algos.cql.CQLConfig`.
    """


def truncated_episodes(dataset: Any) -> List[int]:
    """Indices of ``dataset``'s episodes that did not end in a terminal
    state (their returns-to-go stop at the last logged step)."""
    return [i for i, episode in enumerate(dataset.episodes) if not bool(episode.terminated)]


class CalQL(CQL, config=CalQLConfig):
    """Cal-QL (see the module docstring): CQL with the policy-sampled values
    of the conservative term clipped from below by the returns-to-go."""

    need_returns_to_go = True

    def build_with_dataset(self, dataset: Any) -> None:
        self._check_returns_to_go(dataset)
        super().build_with_dataset(dataset)

    def check_dataset(self, dataset: Any) -> None:
        super().check_dataset(dataset)
        self._check_returns_to_go(dataset)

    def _check_returns_to_go(self, dataset: Any) -> None:
        """Refuse a dataset without episodes; warn, naming them, about
        episodes whose returns-to-go are cut at the last logged step."""
        episodes = getattr(dataset, "episodes", None)
        if episodes is None:
            return  # not an episode dataset: the batches must bring their returns-to-go
        if len(episodes) == 0:
            raise ValueError("CalQL needs episodes to compute Monte-Carlo returns-to-go from: the dataset has none")
        truncated = truncated_episodes(dataset)
        if truncated:
            shown = ", ".join(f"{i} ({episodes[i].size()} steps)" for i in truncated[:_SHOWN])
            more = f" and {len(truncated) - _SHOWN} more" if len(truncated) > _SHOWN else ""
            warnings.warn(
                f"CalQL: {len(truncated)} of {len(episodes)} episodes did not end in a terminal state "
                f"(episodes {shown}{more}): their Monte-Carlo returns-to-go assume zero reward after the "
                "last logged step, so the calibration bound is the discounted return of the logged rewards only",
                UserWarning,
                stacklevel=3,
            )

    def _proposal_values(self, values: torch.Tensor, n: int, batch: Any) -> torch.Tensor:
        returns = batch.returns_to_go
        if returns is None:
            raise ValueError(
                "CalQL needs returns_to_go in its batches: pass a TransitionMiniBatch from a built-in transition "
                "picker (it records each transition's remaining rewards), not a torch batch without them"
            )
        bound = returns.view(1, -1, 1).to(values.dtype)  # (1, B, 1)
        return torch.cat([values[:, :, :n], torch.maximum(values[:, :, n:], bound)], dim=2)
