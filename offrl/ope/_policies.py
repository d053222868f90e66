"""How likely a policy is to take the logged actions.

Shared by the importance-sampling estimators (the target policy) and by the
behaviour-policy models (an offrl algorithm used as the behaviour policy).

A policy is an offrl algorithm or a plain callable:

* discrete actions: ``policy(observations) -> (B, action_size)`` action
  probabilities (rows sum to 1);
* continuous actions: ``policy(observations, actions) -> (B,)`` densities of
  the given actions (in the dataset's action units).

Offrl algorithms with a stochastic policy (``has_stochastic_policy``) report
its probabilities through the algorithm interface:
``action_probabilities(x) -> (B, A)`` (discrete: DiscreteBC's softmax,
DiscreteRandomPolicy's uniform) and ``action_log_densities(x, actions) ->
(B,)`` (continuous, in the dataset's action units: SAC/CQL's squashed
Gaussian, stochastic BC and IQL's Gaussian, RandomPolicy).

Deterministic policies (DQN, DiscreteCQL, TD3+BC, deterministic BC, or any
algorithm with ``greedy=True``) have no density at most logged actions, so
they are smoothed, and the estimate is of the smoothed policy:

* discrete: epsilon-greedy, ``pi(a|s) = (1 - epsilon) 1[a = greedy(s)] + epsilon / A``
  (``epsilon = 0.05`` by default);
* continuous: a Gaussian kernel around the greedy action,
  ``pi(a|s) = N(a; greedy(s), diag(h^2))`` with ``h_j = bandwidth * std_j``,
  ``std_j`` the standard deviation of action dimension ``j`` in the dataset
  (``bandwidth = 0.1`` by default; ``h_j = bandwidth`` where ``std_j = 0``).

Sequence models (the Decision Transformer family) are judged as
:class:`~offrl.ope.SequencePolicy` ``(algo, target_return=...)``: their
action at each logged step is replayed from the episode's logged history
(:mod:`offrl.metrics.sequence`); a softmax sampler gives exact discrete
probabilities, a greedy sampler or continuous actions are smoothed as above.
A bare sequence model is refused with a ``ValueError`` asking for
``target_return``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional

import numpy as np
import torch

from ..algos.base import QLearningAlgoBase
from ..constants import ActionSpace
from ..metrics.sequence import SequencePolicy, as_sequence_policy
from ._logged import LoggedData, locate, take_rows

__all__ = [
    "DEFAULT_EPSILON",
    "DEFAULT_BANDWIDTH",
    "PolicyProbabilities",
    "policy_probabilities",
    "sample_policy_actions",
    "check_built",
    "kernel_widths",
    "int_seed",
]

DEFAULT_EPSILON = 0.05
DEFAULT_BANDWIDTH = 0.1
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


@dataclasses.dataclass(frozen=True)
class PolicyProbabilities:
    """``logged``: ``(N,)`` probability (discrete) or density (continuous) of
    each logged action; ``all_actions``: ``(N, A)`` probabilities of every
    action (discrete only); ``description``: what was evaluated;
    ``smoothing``: the smoothing applied to a deterministic policy, or None."""

    logged: np.ndarray
    all_actions: Optional[np.ndarray]
    description: str
    smoothing: Optional[str]


def int_seed(seed: Any) -> int:
    """An int for torch and scikit-learn from any ``np.random.default_rng`` seed."""
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) and 0 <= seed < 2**63:
        return int(seed)
    return int(np.random.SeedSequence(seed).generate_state(1)[0])


def check_built(algo: Any, role: str) -> None:
    """``ValueError`` when an offrl algorithm has no networks yet."""
    if isinstance(algo, QLearningAlgoBase) and not algo.is_built:
        raise ValueError(
            f"the {role} {type(algo).__name__} is not built: fit it, or call build_with_dataset / "
            "build_with_env / create_impl, before evaluating it"
        )


def _chunks(n: int, batch_size: int):
    for start in range(0, n, batch_size):
        yield slice(start, min(start + batch_size, n))


def _stochastic(algo: QLearningAlgoBase, discrete: bool, greedy: bool) -> bool:
    """Whether ``algo``'s own distribution is the target (not its smoothed greedy action)."""
    if not algo.has_stochastic_policy:
        return False
    # random policies have no greedy action: their distribution is the policy
    return not greedy or algo.predicts_stochastically


def kernel_widths(actions: np.ndarray, bandwidth: float) -> np.ndarray:
    """Per-dimension std of the Gaussian smoothing kernel, ``(action_size,)``."""
    std = actions.std(axis=0)
    return np.where(std > 0, bandwidth * std, bandwidth)


def _check_probability_rows(probs: np.ndarray, rows: slice, n_actions: int, role: str) -> None:
    if probs.shape != (rows.stop - rows.start, n_actions):
        raise ValueError(
            f"the {role} policy returned action probabilities of shape {probs.shape}, "
            f"expected (batch, {n_actions}) = ({rows.stop - rows.start}, {n_actions})"
        )
    bad = ~np.isfinite(probs) | (probs < -1e-6) | (probs > 1 + 1e-6)
    if bad.any():
        i, a = np.argwhere(bad)[0]
        raise ValueError(
            f"the {role} policy's probability of action {a} at step {rows.start + i} is {probs[i, a]}, "
            "expected a number in [0, 1]"
        )
    sums = probs.sum(axis=1)
    off = np.abs(sums - 1.0) > 1e-3
    if off.any():
        i = int(np.argmax(off))
        raise ValueError(
            f"the {role} policy's action probabilities at step {rows.start + i} sum to {sums[i]:.6g}, expected 1"
        )


def policy_probabilities(
    policy: Any,
    data: LoggedData,
    *,
    role: str = "target",
    greedy: bool = False,
    epsilon: float = DEFAULT_EPSILON,
    bandwidth: float = DEFAULT_BANDWIDTH,
    allow_smoothing: bool = True,
    batch_size: int = 4096,
) -> PolicyProbabilities:
    """Probabilities (densities) of the logged actions under ``policy`` (see
    the module docstring for what is accepted and how deterministic policies
    are smoothed)."""
    n, discrete, size = data.n_steps, data.discrete, data.action_size
    sequence = as_sequence_policy(policy, role=role)
    if sequence is not None:
        return _sequence_probabilities(sequence, data, role=role, greedy=greedy, epsilon=epsilon,
                                       bandwidth=bandwidth, allow_smoothing=allow_smoothing, batch_size=batch_size)
    if isinstance(policy, QLearningAlgoBase):
        check_built(policy, role)
        name = type(policy).__name__
        policy.check_action_space(ActionSpace.DISCRETE if discrete else ActionSpace.CONTINUOUS)
        if policy.action_size is not None and policy.action_size != size:
            raise ValueError(
                f"the {role} {name} was built for action_size={policy.action_size}, the dataset has {size}"
            )
        if _stochastic(policy, discrete, greedy):
            if discrete:
                probs = np.concatenate([
                    policy.action_probabilities(take_rows(data.observations, rows)) for rows in _chunks(n, batch_size)
                ])
                logged = probs[np.arange(n), data.actions]
                return PolicyProbabilities(logged, probs, f"action probabilities of {name}", None)
            parts = [
                policy.action_log_densities(take_rows(data.observations, rows), data.actions[rows])
                for rows in _chunks(n, batch_size)
            ]
            return PolicyProbabilities(np.exp(np.concatenate(parts)), None, f"action density of {name}", None)
        if not allow_smoothing:
            raise ValueError(
                f"the {role} {name} is deterministic (it has no action probabilities): use a stochastic "
                "policy (e.g. DiscreteBC, or BC with policy_type='stochastic'), logged probabilities, or an estimated model"
            )
        greedy_actions = np.concatenate([
            policy.predict(take_rows(data.observations, rows)) for rows in _chunks(n, batch_size)
        ])
        return _smoothed(greedy_actions, data, name, epsilon, bandwidth)

    if not callable(policy):
        raise TypeError(
            f"the {role} policy must be an offrl algorithm or a callable (or an offrl.ope.SequencePolicy), "
            f"got {type(policy).__name__}"
        )
    if discrete:
        parts = []
        for rows in _chunks(n, batch_size):
            probs = np.asarray(policy(take_rows(data.observations, rows)), dtype=np.float64)
            _check_probability_rows(probs, rows, size, role)
            parts.append(np.clip(probs, 0.0, 1.0))
        probs = np.concatenate(parts)
        return PolicyProbabilities(probs[np.arange(n), data.actions], probs, f"{role} callable's probabilities", None)
    parts = []
    for rows in _chunks(n, batch_size):
        density = np.asarray(policy(take_rows(data.observations, rows), data.actions[rows]), dtype=np.float64)
        m = rows.stop - rows.start
        if density.shape not in ((m,), (m, 1)):
            raise ValueError(
                f"the {role} policy returned densities of shape {density.shape}, expected (batch,) = ({m},)"
            )
        density = density.reshape(-1)
        bad = ~np.isfinite(density) | (density < 0)
        if bad.any():
            i = rows.start + int(np.argmax(bad))
            episode, step = locate(data.lengths, i)
            raise ValueError(
                f"the {role} policy's density of the action at step {i} (episode {episode}, step {step}) is "
                f"{density[i - rows.start]}, expected a finite number >= 0"
            )
        parts.append(density)
    return PolicyProbabilities(np.concatenate(parts), None, f"{role} callable's densities", None)


def _smoothed(greedy_actions: np.ndarray, data: LoggedData, name: str, epsilon: float,
              bandwidth: float) -> PolicyProbabilities:
    """A deterministic policy's greedy actions at the logged steps, smoothed
    (epsilon-greedy or a Gaussian kernel, see the module docstring)."""
    n, size = data.n_steps, data.action_size
    if data.discrete:
        probs = np.full((n, size), epsilon / size)
        probs[np.arange(n), greedy_actions.reshape(-1).astype(np.int64)] += 1.0 - epsilon
        logged = probs[np.arange(n), data.actions]
        smoothing = f"epsilon-greedy around {name}'s greedy action, epsilon={epsilon:g}"
        return PolicyProbabilities(logged, probs, f"{smoothing}", smoothing)
    widths = kernel_widths(data.actions, bandwidth)
    z = (data.actions - greedy_actions.reshape(n, size)) / widths
    log_density = (-0.5 * z**2 - np.log(widths) - _LOG_SQRT_2PI).sum(axis=1)
    smoothing = (
        f"Gaussian kernel around {name}'s greedy action, std = {bandwidth:g} x the dataset's action std per dimension"
    )
    return PolicyProbabilities(np.exp(log_density), None, smoothing, smoothing)


def _check_sequence(policy: SequencePolicy, data: LoggedData, role: str) -> None:
    name = type(policy.algo).__name__
    if policy.discrete != data.discrete:
        kind = "discrete" if policy.discrete else "continuous"
        raise ValueError(f"the {role} {name} acts with {kind} actions, the dataset's are "
                         f"{'discrete' if data.discrete else 'continuous'}")
    if policy.action_size != data.action_size:
        raise ValueError(f"the {role} {name} was built for action_size={policy.action_size}, "
                         f"the dataset has {data.action_size}")


def _replayed(policy: SequencePolicy, data: LoggedData, batch_size: int) -> np.ndarray:
    return policy.replay(data.observations, data.actions, data.rewards, data.lengths, batch_size=batch_size)


def _sequence_probabilities(policy: SequencePolicy, data: LoggedData, *, role: str, greedy: bool, epsilon: float,
                            bandwidth: float, allow_smoothing: bool, batch_size: int) -> PolicyProbabilities:
    """:func:`policy_probabilities` of a sequence policy replayed on the logged histories."""
    _check_sequence(policy, data, role)
    outputs = _replayed(policy, data, batch_size)
    if policy.stochastic and not greedy:
        probs = policy.probabilities(outputs)
        return PolicyProbabilities(probs[np.arange(data.n_steps), data.actions], probs,
                                   f"softmax probabilities of {policy.name} (temperature {policy.temperature:g}), "
                                   "replayed on the logged histories", None)
    if not allow_smoothing:
        raise ValueError(f"the {role} {policy.name} is deterministic (it has no action probabilities): use "
                         "SequencePolicy with a SoftmaxTransformerActionSampler, or an estimated model")
    return _smoothed(policy.greedy_actions(outputs), data, policy.name, epsilon, bandwidth)


def sample_policy_actions(
    policy: Any,
    data: LoggedData,
    n_samples: int,
    *,
    greedy: bool = False,
    bandwidth: float = DEFAULT_BANDWIDTH,
    seed: Any = 0,
    batch_size: int = 4096,
) -> np.ndarray:
    """``(N, n_samples, action_size)`` continuous actions drawn from the
    target policy at each logged observation: its own sampler for
    stochastic algorithms, the smoothing kernel around the greedy action for
    deterministic ones (sequence policies included: around the replayed
    action). Callables (densities only) cannot be sampled."""
    sequence = as_sequence_policy(policy)
    if sequence is not None:
        _check_sequence(sequence, data, "target")
        rng = np.random.default_rng(seed)
        greedy_actions = _replayed(sequence, data, batch_size).reshape(data.n_steps, 1, data.action_size)
        noise = rng.normal(size=(data.n_steps, n_samples, data.action_size))
        return greedy_actions + noise * kernel_widths(data.actions, bandwidth)
    if not isinstance(policy, QLearningAlgoBase):
        raise ValueError(
            "doubly robust estimates for continuous actions need actions drawn from the target policy, "
            "which a density callable cannot give: pass an offrl algorithm as the target"
        )
    n, size = data.n_steps, data.action_size
    out = np.empty((n, n_samples, size))
    if _stochastic(policy, False, greedy):
        devices = [policy.device] if policy.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(int_seed(seed))
            for rows in _chunks(n, max(1, batch_size // n_samples)):
                x = take_rows(data.observations, rows)
                repeated = [np.repeat(o, n_samples, axis=0) for o in x] if isinstance(x, list) else np.repeat(x, n_samples, axis=0)
                out[rows] = policy.sample_action(repeated).reshape(-1, n_samples, size)
        return out
    rng = np.random.default_rng(seed)
    widths = kernel_widths(data.actions, bandwidth)
    for rows in _chunks(n, batch_size):
        greedy_actions = policy.predict(take_rows(data.observations, rows)).reshape(-1, 1, size)
        out[rows] = greedy_actions + rng.normal(size=(rows.stop - rows.start, n_samples, size)) * widths
    return out
