"""Sequence policies (the Decision Transformer family) judged on logged data.

A return-conditioned sequence model acts from a history, not from one
observation: at step ``t`` of an episode its stateful wrapper
(``algo.as_stateful_wrapper(target_return)``) feeds the transformer the last
``context_size`` steps of returns-to-go (``target_return`` minus the rewards
received so far), observations, actions and timesteps. On logged data,
:class:`SequencePolicy` defines the policy at every logged step by
*replaying each logged episode's own history*: the context at step ``t`` is
exactly what the stateful wrapper would hold at ``t`` had it been fed the
episode's observations and rewards, with one choice made explicit: the
actions in the context are the **logged** actions, not the model's own.
This is the standard for off-policy evaluation of history-dependent
policies (the importance weight of a trajectory is the product over its
steps of ``pi(a_t | h_t) / mu(a_t | h_t)`` with ``h_t`` the logged history),
and it makes every logged step's action (or action probabilities) a
function of the data alone, so that it is computed once, in batches.

:func:`replay_outputs` computes the model's output (continuous: the action
in the environment's units; discrete: the logits) at every logged step of
every episode with a handful of batched forward passes: one over the first
``context_size`` steps of all episodes at once (a causal transformer's
output at position ``j`` of a window that starts the episode is the output
for the context of steps ``0..j``), then one ``context_size``-step window
per later step, in chunks. No Python loop runs over steps or episodes.

How the replayed output becomes a policy (see :class:`SequencePolicy`):

* discrete, ``SoftmaxTransformerActionSampler(temperature)`` (the wrapper's
  default): ``pi(a | h) = softmax(logits / temperature)``, exact;
* discrete, ``GreedyTransformerActionSampler``: the argmax, smoothed
  epsilon-greedy by the importance-sampling family like any deterministic
  discrete policy;
* continuous (``IdentityTransformerActionSampler``): the action, smoothed by
  the same Gaussian kernel the family uses for deterministic continuous
  policies.

Action-match and action-difference metrics always use the greedy action
(the argmax of the logits), as they do for every other algorithm.

FQE of a sequence policy (``FQE(algo=SequencePolicy(dt, target_return=...))``)
bootstraps on ``Q(s', pi(s'))`` where ``pi(s')`` is the greedy action replayed
at the next step's logged history: the policy's action at every stored row
(and at the final observation of a truncated episode) is computed once per
dataset and looked up by row by :class:`ReplayedNextActionPicker`, which
FQE's ``fit`` puts on its training data. At an episode's first observation
the history is that observation alone, so ``V(s_0) = Q(s_0, pi(s_0))``
(``estimate_policy_value``) needs no replay (:meth:`SequencePolicy.policy_actions`).

This module lives in ``offrl.metrics``, the lowest layer that uses it: the
metric evaluators need it, and so do FQE (``offrl.algos``) and the OPE
estimators (``offrl.ope``), which import it from here.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, List, Optional, Union

import numpy as np
import torch

from ..constants import ActionSpace
from ..dataset.batch import TransitionMiniBatch
from ..dataset.replay_buffer import ReplayBuffer
from ..dataset.storage import ColumnStore
from .transitions import dataset_buffer

__all__ = [
    "SequencePolicy",
    "ReplayedNextActionPicker",
    "ReplayedTransitionMiniBatch",
    "as_sequence_policy",
    "is_sequence_model",
    "replay_outputs",
    "check_target_return",
]

Observations = Union[np.ndarray, List[np.ndarray]]


def is_sequence_model(algo: Any) -> bool:
    """Whether ``algo`` acts from a context of steps (``predicts_from_sequences``)."""
    return bool(getattr(algo, "predicts_from_sequences", False)) and not isinstance(algo, SequencePolicy)


def check_target_return(target_return: Any, who: str = "target_return") -> float:
    """``target_return`` as a float; ``ValueError`` naming it when it is
    missing or not a finite number."""
    if target_return is None:
        raise ValueError(f"{who} is None: a sequence model is conditioned on a return; give target_return=...")
    if isinstance(target_return, bool) or not isinstance(target_return, (int, float, np.integer, np.floating)) \
            or not math.isfinite(float(target_return)):
        raise ValueError(f"target_return must be a finite number, got {target_return!r}")
    return float(target_return)


def _sampler_kind(sampler: Any, discrete: bool) -> tuple:
    """``("softmax", temperature)``, ``("greedy", None)`` or ``("identity", None)``."""
    name = type(sampler).__name__
    if discrete and name == "SoftmaxTransformerActionSampler":
        return "softmax", float(sampler.temperature)
    if discrete and name == "GreedyTransformerActionSampler":
        return "greedy", None
    if not discrete and name == "IdentityTransformerActionSampler":
        return "identity", None
    expected = ("SoftmaxTransformerActionSampler or GreedyTransformerActionSampler" if discrete
                else "IdentityTransformerActionSampler")
    raise TypeError(f"action_sampler must be a {expected} for a {'discrete' if discrete else 'continuous'} sequence "
                    f"model judged on logged data (its probabilities must be known), got {name}")


class SequencePolicy:
    """A sequence model (Decision Transformer, DiscreteDecisionTransformer,
    TACR) as a policy conditioned on ``target_return``, for the evaluators,
    the importance-sampling family, FQE, ``rollout_returns`` and
    ``select_policies`` (see the module docstring for how it is defined on
    logged episodes).

    Args:
        algo: a built sequence model.
        target_return: the return the policy is conditioned on (finite).
        action_sampler: as in ``algo.as_stateful_wrapper``: default
            softmax sampling (temperature 1) for discrete actions, the
            identity for continuous ones.
    """

    #: acts from a history: rollouts step :meth:`as_stateful_wrapper`, never ``predict(observations)``
    predicts_from_sequences = True

    def __init__(self, algo: Any, target_return: float, action_sampler: Any = None) -> None:
        if not is_sequence_model(algo):
            raise TypeError(f"algo must be a sequence model (predicts_from_sequences, e.g. DecisionTransformer), "
                            f"got {type(algo).__name__}")
        if not algo.is_built:
            raise ValueError(f"{type(algo).__name__} is not built: fit it or build it before evaluating it")
        self._target_return = check_target_return(target_return)
        self._algo = algo
        self._discrete = algo.get_action_type() == ActionSpace.DISCRETE
        # the wrapper chooses the default sampler (and checks a given one)
        self._sampler = algo.as_stateful_wrapper(self._target_return, action_sampler).action_sampler
        self._kind, self._temperature = _sampler_kind(self._sampler, self._discrete)

    # ------------------------------------------------------------ description
    @property
    def algo(self) -> Any:
        return self._algo

    @property
    def target_return(self) -> float:
        return self._target_return

    @property
    def action_sampler(self) -> Any:
        return self._sampler

    @property
    def discrete(self) -> bool:
        return self._discrete

    @property
    def stochastic(self) -> bool:
        """Whether the policy samples from the softmax (its probabilities are exact)."""
        return self._kind == "softmax"

    @property
    def temperature(self) -> Optional[float]:
        return self._temperature

    @property
    def gamma(self) -> float:
        return float(self._algo.gamma)

    @property
    def is_built(self) -> bool:
        return bool(self._algo.is_built)

    @property
    def action_size(self) -> int:
        return int(self._algo.action_size)

    @property
    def observation_shape(self) -> Any:
        return self._algo.observation_shape

    def get_action_type(self) -> ActionSpace:
        return self._algo.get_action_type()

    @property
    def config(self) -> Any:
        """The sequence model's config (FQE records its type when saving)."""
        return self._algo.config

    @property
    def device(self) -> Any:
        return self._algo.device

    def observation_tensor(self, x: Any, name: str = "x") -> Any:
        """As the sequence model's :meth:`observation_tensor`."""
        return self._algo.observation_tensor(x, name)

    def policy_actions(self, observations: Any, sample: bool = False) -> torch.Tensor:
        """The greedy action at an episode's **first** step (the history is
        the observation alone: return-to-go ``target_return``, timestep 0)
        for raw observation tensors ``(B, ...)``: ``(B, action_size)``
        floats or ``(B,)`` int64 on the model's device. For any later step
        the action depends on the history: use :meth:`replay`."""
        if sample:
            raise ValueError(f"{self.name}: FQE evaluates the greedy action; sampling is not supported")
        obs = [o.detach().cpu().numpy() for o in observations] if isinstance(observations, (list, tuple)) \
            else observations.detach().cpu().numpy()
        count = len(obs[0]) if isinstance(obs, list) else len(obs)
        zeros = np.zeros(count, np.int64) if self._discrete else np.zeros((count, self.action_size), np.float32)
        outputs = self.replay(obs, zeros, np.zeros(count), np.ones(count, np.int64))
        actions = self.greedy_actions(outputs)
        return torch.as_tensor(actions if self._discrete else actions.astype(np.float32), device=self.device)

    def predict(self, x: Any) -> np.ndarray:
        raise TypeError(f"{self.name} acts from a history, not from single observations: replay it on logged "
                        "episodes (the evaluators and estimators do) or step as_stateful_wrapper()")

    def next_action_table(self, store: ColumnStore) -> np.ndarray:
        """The greedy action at every row of ``store`` that holds a step or
        a truncated episode's final observation, replayed from its
        episode's history: ``(rows,)`` int64 or ``(rows, action_size)``
        float32, indexed by store row (rows holding nothing are 0)."""
        starts, ends, _, has_final = (np.asarray(a) for a in store.episode_table())
        starts, ends = starts.astype(np.int64), ends.astype(np.int64)
        lengths = ends - starts + has_final.astype(np.int64)
        offsets = np.cumsum(lengths) - lengths
        flat = np.repeat(starts - offsets, lengths) + np.arange(int(lengths.sum()), dtype=np.int64)
        columns = store.observations
        observations = columns[0][flat] if len(columns) == 1 else [c[flat] for c in columns]
        # a final-observation row's action and reward are never read: only earlier rows' are
        outputs = self.replay(observations, store.actions[flat], store.rewards[flat], lengths)
        greedy = self.greedy_actions(outputs)
        size = int(flat.max()) + 1 if flat.size else 0
        table = np.zeros((size,) + greedy.shape[1:], dtype=np.int64 if self._discrete else np.float32)
        table[flat] = greedy
        return table

    def replay_next_actions(self, dataset: Any) -> ReplayBuffer:
        """``dataset`` (its store, not a copy, when it is columnar) with a
        :class:`ReplayedNextActionPicker`: each sampled transition's
        ``next_actions`` is this policy's replayed action at the next
        observation (what FQE's ``fit`` trains on)."""
        buffer = dataset_buffer(dataset)
        picker = ReplayedNextActionPicker(self, buffer.transition_picker, self.next_action_table(buffer.buffer))
        return ReplayBuffer(buffer.buffer, transition_picker=picker, trajectory_slicer=buffer.trajectory_slicer)

    def check_replayed(self, batch: Any) -> None:
        """``ValueError`` unless ``batch`` carries this policy's replayed next actions."""
        if not (isinstance(batch, ReplayedTransitionMiniBatch) and batch.policy is self):
            raise ValueError(f"the batch's next_actions are not {self.name}'s: sample it from "
                             "policy.replay_next_actions(dataset) (FQE.fit does)")

    def __repr__(self) -> str:
        return f"SequencePolicy({type(self._algo).__name__}, target_return={self._target_return:g})"

    @property
    def name(self) -> str:
        return f"{type(self._algo).__name__} at target_return={self._target_return:g}"

    def as_stateful_wrapper(self, target_return: Optional[float] = None) -> Any:
        """A fresh stateful wrapper acting at ``target_return`` with the
        sampler (what ``rollout_returns`` and ``EnvironmentEvaluator`` run);
        a ``target_return`` given here must be this policy's own."""
        if target_return is not None and check_target_return(target_return) != self._target_return:
            raise ValueError(f"target_return={target_return!r} differs from the policy's own "
                             f"target_return={self._target_return:g}: give it once")
        return self._algo.as_stateful_wrapper(self._target_return, self._sampler)

    # ------------------------------------------------------------ on logged data
    def replay(self, observations: Observations, actions: np.ndarray, rewards: np.ndarray, lengths: np.ndarray,
               batch_size: int = 1024) -> np.ndarray:
        """The model's output at every logged step (see :func:`replay_outputs`)."""
        return replay_outputs(self._algo, observations, actions, rewards, lengths, self._target_return, batch_size)

    def greedy_actions(self, outputs: np.ndarray) -> np.ndarray:
        """Replayed outputs -> greedy actions: ``(N,)`` int64 indices
        (argmax of the logits) or ``(N, action_size)`` actions."""
        return outputs.argmax(axis=1).astype(np.int64) if self._discrete else outputs

    def probabilities(self, outputs: np.ndarray) -> np.ndarray:
        """``(N, action_size)`` softmax probabilities of replayed logits at
        the sampler's temperature (discrete, softmax sampler)."""
        if not self.stochastic:
            raise ValueError(f"{self.name} is deterministic: its actions are smoothed, not given probabilities")
        z = outputs.astype(np.float64) / float(self._temperature)
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z)
        return p / p.sum(axis=1, keepdims=True)


def as_sequence_policy(policy: Any, target_return: Any = None, role: str = "policy") -> Optional[SequencePolicy]:
    """``policy`` as a :class:`SequencePolicy` when it is one or a sequence
    model (then ``target_return`` is required), else None (and then
    ``target_return`` must be None)."""
    if isinstance(policy, SequencePolicy):
        if target_return is not None and check_target_return(target_return) != policy.target_return:
            raise ValueError(f"target_return={target_return!r} differs from the {role}'s own "
                             f"target_return={policy.target_return:g}: give it once")
        return policy
    if is_sequence_model(policy):
        if target_return is None:
            raise ValueError(f"the {role} {type(policy).__name__} is a sequence model conditioned on a return: give "
                             f"target_return=... (or pass offrl.ope.SequencePolicy(algo, target_return=...))")
        return SequencePolicy(policy, target_return)
    if target_return is not None:
        raise ValueError(f"target_return is only for sequence models (the Decision Transformer family); the {role} "
                         f"{type(policy).__name__} acts from single observations")
    return None


# ---------------------------------------------------------------- the replay
def _take(observations: Observations, rows: np.ndarray) -> Observations:
    if isinstance(observations, list):
        return [o[rows] for o in observations]
    return observations[rows]


def _returns_to_go(rewards: np.ndarray, lengths: np.ndarray, target_return: float) -> np.ndarray:
    """``(N,)`` float64: ``target_return`` minus the episode's rewards before each step."""
    rewards = np.asarray(rewards, dtype=np.float64).reshape(-1)
    before = np.cumsum(rewards) - rewards  # rewards before each row, whole dataset
    starts = np.cumsum(lengths) - lengths
    return target_return - (before - np.repeat(before[starts], lengths))


def replay_outputs(algo: Any, observations: Observations, actions: np.ndarray, rewards: np.ndarray,
                   lengths: np.ndarray, target_return: float, batch_size: int = 1024) -> np.ndarray:
    """``(N, action_size)`` float64 outputs of the sequence model ``algo``
    at every logged step (episode order; ``lengths`` steps per episode):
    continuous actions in the environment's units, or logits. The context
    at step ``t`` holds steps ``max(0, t - context_size + 1) .. t`` of the
    same episode: observations, the logged actions, returns-to-go
    ``target_return - sum_{k < t} r_k`` and timesteps ``0, 1, ...``, as
    :meth:`StatefulTransformerWrapper.predict` builds it (with the logged
    actions in place of its own).

    Raises ``ValueError`` for an episode longer than ``max_timestep + 1``
    steps, a missing or non-finite ``target_return``, or arrays that
    disagree in length."""
    target_return = check_target_return(target_return)
    lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
    n = int(lengths.sum())
    if lengths.size == 0 or (lengths <= 0).any():
        raise ValueError("lengths must hold at least one episode, each with at least one step")
    n_obs = len(observations[0]) if isinstance(observations, list) else len(observations)
    for name, size in (("observations", n_obs), ("actions", len(actions)), ("rewards", len(rewards))):
        if size != n:
            raise ValueError(f"{name} has {size} rows, the episodes' lengths sum to {n}")
    longest = int(lengths.max())
    if longest - 1 > int(algo.max_timestep):
        episode = int(np.argmax(lengths))
        raise ValueError(f"episode {episode} has {longest} steps: its timesteps reach {longest - 1}, beyond "
                         f"max_timestep={algo.max_timestep} of {type(algo).__name__}")
    context = int(algo.context_size)
    discrete = algo.get_action_type() == ActionSpace.DISCRETE
    starts = np.cumsum(lengths) - lengths
    steps = np.arange(n, dtype=np.int64) - np.repeat(starts, lengths)
    rtg = _returns_to_go(rewards, lengths, target_return)
    if not np.isfinite(rtg).all():
        raise ValueError("the returns-to-go are not finite: check target_return and the rewards")
    actions = np.asarray(actions)
    actions = actions.reshape(n).astype(np.int64) if discrete else actions.reshape(n, -1).astype(np.float32)
    out = np.empty((n, int(algo.action_size)), dtype=np.float64)
    transformer = algo.modules["transformer"]
    was_training = transformer.training
    transformer.eval()
    try:
        with torch.no_grad():
            # 1. the first `width` steps of every episode: one window from the episode's start
            width = min(context, longest)
            episodes = np.arange(lengths.shape[0], dtype=np.int64)
            for lo in range(0, episodes.shape[0], max(1, batch_size // width)):
                ids = episodes[lo:lo + max(1, batch_size // width)]
                offsets = np.arange(width, dtype=np.int64)
                valid = offsets[None, :] < lengths[ids, None]
                rows = np.where(valid, starts[ids, None] + offsets[None, :], starts[ids, None])  # padding reads row 0
                result = _forward(algo, transformer, observations, actions, rtg, rows, valid, offsets, discrete,
                                  last_only=False)
                out[rows[valid]] = result[valid]
            # 2. every later step: its own window of `context` steps ending at it
            later = np.flatnonzero(steps >= context)
            offsets = np.arange(context, dtype=np.int64)
            for lo in range(0, later.shape[0], max(1, batch_size)):
                ends = later[lo:lo + batch_size]
                rows = ends[:, None] - (context - 1) + offsets[None, :]
                valid = np.ones(rows.shape, dtype=bool)
                out[ends] = _forward(algo, transformer, observations, actions, rtg, rows, valid,
                                     steps[rows], discrete, last_only=True)
    finally:
        transformer.train(was_training)
    return out


def _forward(algo: Any, transformer: Any, observations: Observations, actions: np.ndarray, rtg: np.ndarray,
             rows: np.ndarray, valid: np.ndarray, timesteps: np.ndarray, discrete: bool, last_only: bool) -> np.ndarray:
    """The transformer on windows ``rows`` ``(B, L)``: ``(B, L, out)``
    outputs at every step, or ``(B, out)`` at the last one (``last_only``)."""
    b, length = rows.shape
    flat = rows.reshape(-1)
    obs = algo.scale_observations(algo.observation_tensor(_take(observations, flat), "observations"))
    obs = [o.reshape((b, length) + tuple(o.shape[1:])) for o in obs] if isinstance(obs, list) \
        else obs.reshape((b, length) + tuple(obs.shape[1:]))
    device = algo.device
    # the step's own action is never read (causal order R, s, a): zero it as the stateful wrapper does
    window_actions = actions[flat].reshape((b, length) + actions.shape[1:])
    if discrete:
        window_actions = np.where(valid, window_actions, 0)
        act = torch.as_tensor(window_actions.reshape(b, length, 1), device=device)
    else:
        window_actions = np.where(valid[..., None], window_actions, np.float32(0.0))
        act = torch.as_tensor(window_actions, device=device)
        if algo.action_scaler is not None:
            act = algo.action_scaler.transform(act)
    returns = torch.as_tensor(np.where(valid, rtg[flat].reshape(b, length), 0.0).astype(np.float32)[..., None],
                              device=device)
    if algo.reward_scaler is not None:
        returns = algo.reward_scaler.transform(returns)
    timesteps = np.broadcast_to(timesteps, (b, length)) if timesteps.ndim == 1 else timesteps
    steps = torch.as_tensor(np.array(timesteps, dtype=np.int64), device=device)  # a copy: broadcasts are read-only
    result = transformer(obs, act, returns, steps, last_only=last_only)
    result = result[:, -1] if last_only else result
    if not discrete and algo.action_scaler is not None:
        result = algo.action_scaler.reverse_transform(result)
    return result.cpu().numpy().astype(np.float64)


# ------------------------------------------------------------ FQE's next actions
@dataclasses.dataclass(frozen=True)
class ReplayedTransitionMiniBatch(TransitionMiniBatch):
    """A transition batch whose ``next_actions`` are ``policy``'s replayed
    actions at the next observations (not the logged ones)."""

    policy: Any = dataclasses.field(default=None, compare=False)


class ReplayedNextActionPicker:
    """The transitions of ``base`` (an offrl picker with ``pick_batch``),
    with ``next_actions`` looked up in ``table`` (a sequence policy's
    replayed action by store row) at each transition's next row."""

    def __init__(self, policy: SequencePolicy, base: Any, table: np.ndarray) -> None:
        if not callable(getattr(base, "pick_batch", None)):
            raise TypeError(f"the dataset's transition picker {type(base).__name__} has no pick_batch: FQE of a "
                            "sequence policy needs one of offrl's pickers")
        self.policy, self.base, self.table = policy, base, table

    def __call__(self, episode: Any, index: int) -> Any:
        """The base picker's transition (an episode view does not say its
        store row, so ``next_action`` is the logged one: for shape
        inference; batches built from such transitions are refused by
        :meth:`SequencePolicy.check_replayed`)."""
        return self.base(episode, index)

    def pick_batch(self, store: ColumnStore, episode_ids: np.ndarray, rows: np.ndarray) -> ReplayedTransitionMiniBatch:
        batch = self.base.pick_batch(store, episode_ids, rows)
        next_rows = rows + batch.intervals.reshape(-1).astype(np.int64)
        # a terminal transition's next row may lie past the table: its value is never bootstrapped
        actions = self.table[np.minimum(next_rows, self.table.shape[0] - 1)]
        next_actions = actions.reshape(np.shape(batch.next_actions)).astype(np.asarray(batch.next_actions).dtype)
        fields = {f.name: getattr(batch, f.name) for f in dataclasses.fields(batch)}
        return ReplayedTransitionMiniBatch(**{**fields, "next_actions": next_actions, "policy": self.policy})

    def __repr__(self) -> str:
        return f"ReplayedNextActionPicker({self.policy!r}, {self.base!r})"
