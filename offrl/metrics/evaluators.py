"""Metric evaluators (d3rlpy 2.x API), usable in ``fit(evaluators={...})``
and on their own as ``evaluator(algo, dataset) -> float``.

Each dataset evaluator scores ``algo`` on the transitions of ``episodes``
(``None``: every episode of ``dataset``), picked with the dataset's
transition picker (frame stacking, multi-step returns and final
observations as in training). Values come from the public ``algo.predict``
and ``algo.predict_value``, so they work for any algorithm, FQE included,
and are computed in large batched forward passes over all transitions of
all episodes at once (see :mod:`offrl.metrics.transitions`). As in
training, the last step of an episode cut by a timeout is a transition only
when the data holds the observation that followed it (``final_observation``,
or ``next_observations`` given to ``MDPDataset``); otherwise it has no next
observation and is not scored.

Differences from d3rlpy 2.x, where its numbers come from an artefact of
its 1024-transition windows: the discounted sum of advantages runs over
whole episodes (not restarting every 1024 transitions), the initial-state
value uses only each episode's first state (not also the first state of
every later window), and the TD error bootstraps with ``gamma ** interval``
for multi-step pickers, like training does. ``episodes=[]`` is an error, not
a silent fall-back to the dataset's episodes, and so is a set of episodes
without a single transition (d3rlpy fails with an IndexError on any episode
without a transition; offrl leaves such episodes out). ``SoftOPCEvaluator``
gives NaN when no episode reaches the threshold, as d3rlpy does.

Sequence models (the Decision Transformer family) act from a history, not
from one observation. The action evaluators (``ContinuousActionDiffEvaluator``,
``DiscreteActionMatchEvaluator`` and the two ``Compare*`` ones) judge them at a
return: give the evaluator ``target_return=...`` (used for sequence models,
ignored for the others, so one evaluator serves a sweep over algorithms), or
pass ``offrl.ope.SequencePolicy(algo, target_return=...)`` as the algorithm.
The policy's action at each logged step is replayed from that episode's own
logged history (observations, logged actions, returns-to-go from the target
return, timesteps), exactly the context its stateful wrapper would hold
there (see :mod:`offrl.metrics.sequence`); discrete actions are the argmax of
the logits. ``EnvironmentEvaluator`` runs them through the stateful wrapper.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional, Protocol, Sequence, runtime_checkable

import numpy as np

from .._scores import environment_of, get_normalized_score
from ..constants import ActionSpace
from ..dataset.batch import TransitionMiniBatch
from ..dataset.episode import EpisodeBase
from .sequence import ReplayedNextActionPicker, SequencePolicy, check_target_return, is_sequence_model
from .transitions import TransitionSet, dataset_buffer, episodes_buffer
from .utility import check_rollout_args, evaluate_qlearning_with_environment, evaluate_transformer_with_environment

__all__ = [
    "EvaluatorProtocol",
    "TDErrorEvaluator",
    "DiscountedSumOfAdvantageEvaluator",
    "AverageValueEstimationEvaluator",
    "InitialStateValueEstimationEvaluator",
    "SoftOPCEvaluator",
    "ContinuousActionDiffEvaluator",
    "DiscreteActionMatchEvaluator",
    "CompareContinuousActionDiffEvaluator",
    "CompareDiscreteActionMatchEvaluator",
    "EnvironmentEvaluator",
    "discounted_suffix_sums",
    "make_batches",
]


@runtime_checkable
class EvaluatorProtocol(Protocol):
    """A metric: ``evaluator(algo, dataset) -> float``. Implement it for a
    metric of your own and pass it in ``fit(evaluators={name: evaluator})``."""

    def __call__(self, algo: Any, dataset: Any) -> float: ...


def discounted_suffix_sums(values: np.ndarray, gamma: float, last: np.ndarray) -> np.ndarray:
    """``S[t] = values[t] + gamma * S[t + 1]`` within each segment, where
    ``last[t]`` marks the final element of a segment (``last[-1]`` must be
    True). Float64, ``(N,)``.

    A doubling scan: ``ceil(log2(longest segment))`` vectorised passes, each
    folding in the partial sum ``2**k`` steps ahead (``carry`` is the
    discount over those steps, 0 across a segment end).
    """
    sums = np.asarray(values, dtype=np.float64).copy()
    carry = np.where(last, 0.0, float(gamma))
    shift = 1
    while shift < sums.shape[0] and carry.any():
        sums[:-shift] += carry[:-shift] * sums[shift:]
        carry[:-shift] = carry[:-shift] * carry[shift:]
        carry[-shift:] = 0.0
        shift *= 2
    return sums


def make_batches(episode: EpisodeBase, window_size: int, transition_picker: Any) -> Iterator[TransitionMiniBatch]:
    """Mini-batches of up to ``window_size`` consecutive transitions of
    ``episode``, picked with ``transition_picker`` (d3rlpy's helper for
    writing an evaluator). offrl's own pickers see every transition offrl
    stores; any other picker only the indices valid under d3rlpy's contract
    (never the last step of an episode that did not terminate)."""
    if isinstance(window_size, bool) or not isinstance(window_size, (int, np.integer)) or window_size <= 0:
        raise ValueError(f"window_size must be a positive int, got {window_size!r}")
    if not callable(transition_picker):
        raise TypeError(f"transition_picker must be callable as picker(episode, index), got {type(transition_picker).__name__}")
    if type(transition_picker).__module__.startswith("offrl."):
        count = int(episode.transition_count)
    else:
        count = int(episode.size()) if episode.terminated else max(int(episode.size()) - 1, 0)
    for head in range(0, count, int(window_size)):
        stop = min(head + int(window_size), count)
        yield TransitionMiniBatch.from_transitions([transition_picker(episode, i) for i in range(head, stop)])


def _name(algo: Any) -> str:
    return type(algo).__name__


def _has_value_function(algo: Any) -> bool:
    flag = getattr(algo, "has_q_function", None)
    if isinstance(flag, bool):
        return flag
    return callable(getattr(algo, "predict_value", None))


def _action_type(algo: Any) -> ActionSpace:
    get = getattr(algo, "get_action_type", None)
    return get() if callable(get) else ActionSpace.BOTH


def _check_algo(who: str, algo: Any, role: str = "algo", value: bool = False,
                action_space: Optional[ActionSpace] = None) -> None:
    """Raise a ValueError saying why ``algo`` cannot be scored by ``who``."""
    if not callable(getattr(algo, "predict", None)):
        raise TypeError(f"{who}: {role} must be an algorithm with predict(), got {_name(algo)}")
    if not getattr(algo, "is_built", True):
        raise ValueError(
            f"{who}: {role} ({_name(algo)}) is not built: fit it, or call build_with_dataset or "
            "build_with_env, before evaluating it"
        )
    if value and not _has_value_function(algo):
        raise ValueError(
            f"{who} needs a Q-function (predict_value), and {role} ({_name(algo)}) has none: "
            "it only acts (behaviour cloning, a random policy); use an action metric instead"
        )
    kind = _action_type(algo)
    if action_space is not None and kind not in (action_space, ActionSpace.BOTH):
        raise ValueError(
            f"{who} is for {action_space.name.lower()} actions, and {role} ({_name(algo)}) acts in a "
            f"{kind.name.lower()} action space"
        )


class _EpisodesEvaluator(EvaluatorProtocol):
    """Scores an algorithm on the transitions of a set of episodes.

    Args:
        episodes: the episodes to score on; ``None`` uses every episode of
            the dataset the evaluator is called with. A list of episodes is
            copied once, here; a dataset's ``episodes`` is used in place.
    """

    #: needs ``predict_value``
    _needs_value = False
    #: the action space the metric is defined for (None: either)
    _action_space: Optional[ActionSpace] = None

    def __init__(self, episodes: Optional[Sequence[EpisodeBase]] = None) -> None:
        self._episodes = episodes
        self._buffer = None if episodes is None else episodes_buffer(episodes)

    def _transitions(self, algo: Any, dataset: Any) -> TransitionSet:
        who = type(self).__name__
        _check_algo(who, algo, value=self._needs_value, action_space=self._action_space)
        if self._buffer is None and dataset is None:
            raise ValueError(f"{who} was given no episodes: call it with a dataset, or give it episodes")
        buffer = self._buffer if self._buffer is not None else dataset_buffer(dataset)
        picker = getattr(dataset, "transition_picker", None)
        transitions = TransitionSet(buffer, picker)
        if transitions.total == 0:
            where = "the episodes it was given have" if self._buffer is not None else "the dataset has"
            raise ValueError(
                f"{who}: {where} no transitions ({len(transitions.counts)} episodes; a truncated "
                "episode's last step without a final observation is not a transition)"
            )
        data_space = buffer.dataset_info.action_space
        if _action_type(algo) not in (data_space, ActionSpace.BOTH):
            raise ValueError(
                f"{who}: the episodes have {data_space.name.lower()} actions, and {_name(algo)} "
                f"acts in a {_action_type(algo).name.lower()} action space"
            )
        return transitions


def _greedy_values(algo: Any, observations: Any) -> np.ndarray:
    """``Q(s, pi(s))`` as float64."""
    return algo.predict_value(observations, algo.predict(observations)).astype(np.float64)


def _greedy_value_batches(algo: Any, transitions: TransitionSet, first: bool = False) -> Iterator[tuple]:
    """``(batch, Q(s, pi(s)))`` for every chunk of the transitions (each
    episode's first one with ``first``). For an FQE of a sequence policy
    ``pi(s_t)`` is the action replayed at the step's logged history."""
    batches = transitions.first_batches() if first else transitions.batches()
    policy = getattr(algo, "algo", None)  # what an FQE evaluates
    if not isinstance(policy, SequencePolicy):
        for batch in batches:
            yield batch, _greedy_values(algo, batch.observations)
        return
    actions = _replayed_actions(policy, transitions)
    if first:
        counts = transitions.counts
        actions = actions[(np.cumsum(counts) - counts)[counts > 0]]
    offset = 0
    for batch in batches:
        chunk = actions[offset:offset + len(batch.actions)]
        offset += len(batch.actions)
        yield batch, algo.predict_value(batch.observations, chunk).astype(np.float64)


class TDErrorEvaluator(_EpisodesEvaluator):
    r"""Mean squared TD error of the Q-function on the episodes' transitions:

        mean_t (Q(s_t, a_t) - r'_t - gamma**k_t * (1 - terminal_t) * Q(s'_t, pi(s'_t)))**2

    where ``r'`` is the reward after the algorithm's reward scaler, ``k`` the
    picker's interval (1, or up to n for multi-step pickers) and
    ``gamma = algo.gamma``. A large TD error on held-out episodes suggests
    the Q-function overfits its training data. For an FQE of a sequence
    policy, ``pi(s'_t)`` is the policy's action replayed at the next step's
    logged history.
    """

    _needs_value = True

    def __call__(self, algo: Any, dataset: Any = None) -> float:
        transitions = self._transitions(algo, dataset)
        policy = getattr(algo, "algo", None)  # what an FQE evaluates
        replayed = isinstance(policy, SequencePolicy)
        if replayed:
            table = policy.next_action_table(transitions.store)
            transitions = TransitionSet(transitions.buffer, ReplayedNextActionPicker(policy, transitions.picker, table))
        scaler = getattr(algo, "reward_scaler", None)
        total = 0.0
        for batch in transitions.batches():
            values = algo.predict_value(batch.observations, batch.actions).astype(np.float64)
            if replayed:
                next_values = algo.predict_value(batch.next_observations, batch.next_actions).astype(np.float64)
            else:
                next_values = _greedy_values(algo, batch.next_observations)
            rewards = np.asarray(batch.rewards)
            if scaler is not None:
                rewards = scaler.transform_numpy(rewards)
            rewards = rewards.reshape(-1).astype(np.float64)
            discounts = float(algo.gamma) ** batch.intervals.reshape(-1).astype(np.float64)
            mask = 1.0 - batch.terminals.reshape(-1).astype(np.float64)
            total += float(np.sum((values - rewards - discounts * mask * next_values) ** 2))
        return total / transitions.total


class DiscountedSumOfAdvantageEvaluator(_EpisodesEvaluator):
    r"""Mean over transitions of the discounted sum of advantages to the end
    of the episode (Murphy, 2005, "A generalization error for Q-learning"):

        mean_t sum_{t' >= t} gamma**(t' - t) * (Q(s_t', a_t') - Q(s_t', pi(s_t')))

    Smaller is better: the greedy policy prefers actions the Q-function values
    more than the logged ones.
    """

    _needs_value = True

    def __call__(self, algo: Any, dataset: Any = None) -> float:
        transitions = self._transitions(algo, dataset)
        advantages = np.concatenate([
            algo.predict_value(batch.observations, batch.actions).astype(np.float64) - greedy
            for batch, greedy in _greedy_value_batches(algo, transitions)
        ])
        sums = discounted_suffix_sums(advantages, float(algo.gamma), transitions.episode_last())
        return float(np.mean(sums))


class AverageValueEstimationEvaluator(_EpisodesEvaluator):
    r"""Mean ``Q(s_t, pi(s_t))`` over the episodes' transitions: the scale of
    the value estimates (a growing value often means overestimation)."""

    _needs_value = True

    def __call__(self, algo: Any, dataset: Any = None) -> float:
        transitions = self._transitions(algo, dataset)
        total = sum(float(np.sum(values)) for _, values in _greedy_value_batches(algo, transitions))
        return total / transitions.total


class InitialStateValueEstimationEvaluator(_EpisodesEvaluator):
    r"""Mean ``Q(s_0, pi(s_0))`` over the episodes' initial states: the
    return the policy expects from where the data starts (Paine et al.,
    2020, "Hyperparameter Selection for Offline Reinforcement Learning").
    Episodes without a transition (a single truncated step) are left out."""

    _needs_value = True

    def __call__(self, algo: Any, dataset: Any = None) -> float:
        transitions = self._transitions(algo, dataset)
        values = np.concatenate([values for _, values in _greedy_value_batches(algo, transitions, first=True)])
        return float(np.mean(values))


class SoftOPCEvaluator(_EpisodesEvaluator):
    r"""Soft off-policy classification (Irpan et al., 2019, "Off-Policy
    Evaluation via Off-Policy Classification"): mean ``Q(s, a)`` over the
    transitions of successful episodes (undiscounted return >=
    ``return_threshold``) minus mean ``Q(s, a)`` over all transitions, with
    the logged actions. Larger is better.

    NaN when no episode reaches the threshold (as d3rlpy: the mean over no
    successful transitions is undefined).
    """

    _needs_value = True

    def __init__(self, return_threshold: float, episodes: Optional[Sequence[EpisodeBase]] = None) -> None:
        if isinstance(return_threshold, bool) or not isinstance(return_threshold, (int, float, np.integer, np.floating)) \
                or not np.isfinite(return_threshold):
            raise ValueError(f"return_threshold must be a finite number, got {return_threshold!r}")
        self._return_threshold = float(return_threshold)
        super().__init__(episodes)

    def __call__(self, algo: Any, dataset: Any = None) -> float:
        transitions = self._transitions(algo, dataset)
        returns = transitions.buffer.compute_returns()
        success = transitions.per_transition(returns >= self._return_threshold)
        if not success.any():
            return float("nan")
        values = np.concatenate([
            algo.predict_value(b.observations, b.actions).astype(np.float64) for b in transitions.batches()
        ])
        return float(np.mean(values[success]) - np.mean(values))


def _sequence_policy(who: str, algo: Any, target_return: Optional[float], role: str) -> Optional[SequencePolicy]:
    """``algo`` as a :class:`SequencePolicy` (a sequence model at the
    evaluator's ``target_return``), or None for an algorithm that acts from
    single observations."""
    if isinstance(algo, SequencePolicy):
        if target_return is not None and target_return != algo.target_return:
            raise ValueError(f"{who}: target_return={target_return:g} differs from the {role}'s own "
                             f"target_return={algo.target_return:g}: give it once")
        return algo
    if is_sequence_model(algo):
        if target_return is None:
            raise ValueError(f"{who}: {role} ({_name(algo)}) is a sequence model conditioned on a return: give the "
                             "evaluator target_return=... (or pass offrl.ope.SequencePolicy(algo, target_return=...))")
        _check_algo(who, algo, role)
        return SequencePolicy(algo, target_return)
    return None


def _replayed_actions(policy: SequencePolicy, transitions: TransitionSet) -> np.ndarray:
    """The sequence policy's greedy action at every transition, in
    transition order: ``(total,)`` indices or ``(total, action_size)``."""
    store = transitions.store
    starts, ends = (np.asarray(a, dtype=np.int64) for a in store.episode_table()[:2])
    lengths = ends - starts
    offsets = np.cumsum(lengths) - lengths
    flat = np.repeat(starts - offsets, lengths) + np.arange(int(lengths.sum()), dtype=np.int64)  # store row per step
    columns = store.observations
    observations = columns[0][flat] if len(columns) == 1 else [c[flat] for c in columns]
    outputs = policy.replay(observations, store.actions[flat], store.rewards[flat], lengths)
    episode_ids, rows = store.locate_transitions(np.arange(transitions.total, dtype=np.int64))
    return policy.greedy_actions(outputs[offsets[episode_ids] + rows - starts[episode_ids]])


class _ActionEvaluator(_EpisodesEvaluator):
    """An evaluator of the greedy action at the episodes' transitions; a
    sequence model is replayed at ``target_return`` (module docstring).

    Args:
        episodes: as for every dataset evaluator.
        target_return: the return a sequence model is conditioned on
            (ignored for other algorithms).
    """

    def __init__(self, episodes: Optional[Sequence[EpisodeBase]] = None, *,
                 target_return: Optional[float] = None) -> None:
        self._target_return = None if target_return is None else check_target_return(target_return)
        super().__init__(episodes)

    def _greedy_actions(self, algo: Any, transitions: TransitionSet, role: str = "algo") -> Iterator[np.ndarray]:
        """The greedy actions at the transitions, chunk by chunk."""
        policy = _sequence_policy(type(self).__name__, algo, self._target_return, role)
        if policy is not None:
            yield _replayed_actions(policy, transitions)
            return
        for batch in transitions.batches():
            yield algo.predict(batch.observations)

    def _logged_and_greedy(self, algo: Any, dataset: Any) -> tuple:
        policy = _sequence_policy(type(self).__name__, algo, self._target_return, "algo")
        transitions = self._transitions(algo if policy is None else policy.algo, dataset)
        if policy is not None:
            logged = transitions.store.actions[transitions.store.locate_transitions(
                np.arange(transitions.total, dtype=np.int64))[1]]
            return transitions, [(logged, _replayed_actions(policy, transitions))]
        return transitions, ((batch.actions, algo.predict(batch.observations)) for batch in transitions.batches())


class ContinuousActionDiffEvaluator(_ActionEvaluator):
    r"""Mean over transitions of ``sum_j (a_t,j - pi(s_t)_j)**2``: how far
    the greedy policy is from the logged continuous actions."""

    _action_space = ActionSpace.CONTINUOUS

    def __call__(self, algo: Any, dataset: Any = None) -> float:
        transitions, pairs = self._logged_and_greedy(algo, dataset)
        total = 0.0
        for logged, greedy in pairs:
            diff = np.asarray(logged, np.float64).reshape(greedy.shape) - greedy
            total += float(np.sum(diff**2))
        return total / transitions.total


class DiscreteActionMatchEvaluator(_ActionEvaluator):
    r"""Fraction of transitions whose logged discrete action equals the
    greedy policy's."""

    _action_space = ActionSpace.DISCRETE

    def __call__(self, algo: Any, dataset: Any = None) -> float:
        transitions, pairs = self._logged_and_greedy(algo, dataset)
        matches = 0
        for logged, greedy in pairs:
            matches += int(np.count_nonzero(np.asarray(logged).reshape(-1) == np.asarray(greedy).reshape(-1)))
        return matches / transitions.total


class _CompareEvaluator(_ActionEvaluator):
    """Compares ``algo``'s greedy actions with ``base_algo``'s on the
    episodes' observations (either may be a sequence model, replayed at
    ``target_return``)."""

    def __init__(self, base_algo: Any, episodes: Optional[Sequence[EpisodeBase]] = None, *,
                 target_return: Optional[float] = None) -> None:
        if not (isinstance(base_algo, SequencePolicy) or callable(getattr(base_algo, "predict", None))):
            raise TypeError(f"base_algo must be an algorithm with predict(), got {_name(base_algo)}")
        self._base_algo = base_algo
        super().__init__(episodes, target_return=target_return)

    def _action_pairs(self, algo: Any, dataset: Any):
        who = type(self).__name__
        base = self._base_algo
        base_policy = _sequence_policy(who, base, self._target_return, "base_algo")
        _check_algo(who, base if base_policy is None else base_policy.algo, "base_algo",
                    action_space=self._action_space)
        policy = _sequence_policy(who, algo, self._target_return, "algo")
        transitions = self._transitions(algo if policy is None else policy.algo, dataset)
        if policy is None and base_policy is None:
            pairs = ((algo.predict(b.observations), base.predict(b.observations)) for b in transitions.batches())
            return transitions, pairs
        # a sequence model's actions come in one piece: gather the other side whole too
        ours = np.concatenate(list(self._greedy_actions(algo, transitions)))
        theirs = np.concatenate(list(self._greedy_actions(base, transitions, "base_algo")))
        return transitions, [(ours, theirs)]


class CompareContinuousActionDiffEvaluator(_CompareEvaluator):
    r"""Mean over the episodes' observations of
    ``sum_j (pi(s)_j - pi_base(s)_j)**2``."""

    _action_space = ActionSpace.CONTINUOUS

    def __call__(self, algo: Any, dataset: Any = None) -> float:
        transitions, pairs = self._action_pairs(algo, dataset)
        total = sum(float(np.sum((np.asarray(a, np.float64) - b) ** 2)) for a, b in pairs)
        return total / transitions.total


class CompareDiscreteActionMatchEvaluator(_CompareEvaluator):
    r"""Fraction of the episodes' observations where ``algo`` and
    ``base_algo`` pick the same discrete action."""

    _action_space = ActionSpace.DISCRETE

    def __call__(self, algo: Any, dataset: Any = None) -> float:
        transitions, pairs = self._action_pairs(algo, dataset)
        return sum(int(np.count_nonzero(np.asarray(a).reshape(-1) == np.asarray(b).reshape(-1)))
                   for a, b in pairs) / transitions.total


class EnvironmentEvaluator(EvaluatorProtocol):
    """Mean undiscounted return of ``n_trials`` episodes of the greedy
    policy in a gymnasium environment, taking a random action with
    probability ``epsilon`` (the dataset is not used). A sequence model
    (``predicts_from_sequences``: the Decision Transformer family) acts
    through its stateful wrapper conditioned on ``target_return``.
    ``normalize`` (offrl's addition: a locomotion dataset or task name such
    as ``"hopper-medium-v0"``) reports D4RL's normalised score of that mean
    instead (:func:`offrl.datasets.get_normalized_score`)."""

    def __init__(self, env: Any, n_trials: int = 10, epsilon: float = 0.0,
                 target_return: Optional[float] = None, normalize: Optional[str] = None) -> None:
        if not (isinstance(env, (list, tuple)) or (callable(getattr(env, "reset", None)) and callable(getattr(env, "step", None)))):
            raise TypeError(f"env must be a gymnasium environment (reset and step), a gymnasium.vector env or a list "
                            f"of environments, got {type(env).__name__}")
        check_rollout_args(n_trials, epsilon)
        self._env = env
        self._n_trials = int(n_trials)
        self._epsilon = float(epsilon)
        self._target_return = None if target_return is None else check_target_return(target_return)
        if normalize is not None:
            environment_of(normalize)  # an unknown name fails here, not after the rollouts
        self._normalize = normalize

    def __call__(self, algo: Any, dataset: Any = None) -> float:
        if getattr(algo, "predicts_from_sequences", False):
            own = isinstance(algo, SequencePolicy)  # carries its target_return
            if (self._target_return is None and not own) or self._epsilon:
                raise ValueError(f"EnvironmentEvaluator: {_name(algo)} is conditioned on a return: give "
                                 "target_return=... (and epsilon=0)")
            actor = algo.as_stateful_wrapper(self._target_return)
            value = evaluate_transformer_with_environment(actor, self._env, self._n_trials)
        else:
            value = evaluate_qlearning_with_environment(algo, self._env, self._n_trials, self._epsilon)
        return value if self._normalize is None else get_normalized_score(self._normalize, value)
