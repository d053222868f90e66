"""Transition pickers: how a sampled step becomes an ``(s, a, r, s')`` sample.

A picker is called per item as ``picker(episode, index) -> Transition``
(:class:`TransitionPickerProtocol`, which a user's own picker implements).
The built-in pickers also build a whole mini-batch at once from the
columnar store with numpy fancy indexing (``pick_batch``); the replay buffer
uses that path whenever the picker has it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Protocol, Sequence, runtime_checkable

import numpy as np

from .batch import RewardsToGo, TransitionMiniBatch
from .episode import EpisodeBase, Transition, create_zero_observation, retrieve_observation
from .signature import keyed_observation, observation_columns
from .storage import ColumnStore

__all__ = [
    "TransitionPickerProtocol",
    "BasicTransitionPicker",
    "MultiStepTransitionPicker",
    "FrameStackTransitionPicker",
    "SparseRewardTransitionPicker",
]


@runtime_checkable
class TransitionPickerProtocol(Protocol):
    """Builds the transition at step ``index`` of ``episode``."""

    def __call__(self, episode: EpisodeBase, index: int) -> Transition: ...


def _unwrap(columns: Sequence[np.ndarray]):
    return columns[0] if len(columns) == 1 else list(columns)


def _check_index(episode: EpisodeBase, index: int) -> None:
    if not 0 <= index < episode.transition_count:
        raise IndexError(
            f"transition index {index} is out of range for an episode with "
            f"{episode.transition_count} transitions"
        )


def _next_action(episode: EpisodeBase, next_index: int) -> np.ndarray:
    if next_index < episode.size():
        return episode.actions[next_index]
    return np.zeros_like(episode.actions[0])


def _final_observation(episode: EpisodeBase):
    return getattr(episode, "final_observation", None)


def _stored_next_observation(episode: EpisodeBase, index: int):
    """The observation after step ``index`` that ``episode`` stores: the next
    step's, or the final observation after its last step (None if none)."""
    if index + 1 < episode.size():
        return retrieve_observation(episode.observations, index + 1)
    return _final_observation(episode)


def _one_step_transition(episode: EpisodeBase, index: int, observation: Any, next_observation: Any,
                         is_terminal: bool) -> Transition:
    """The transition from step ``index`` of ``episode`` to the next (interval 1)."""
    return Transition(
        observation=observation,
        action=episode.actions[index],
        reward=episode.rewards[index],
        next_observation=next_observation,
        next_action=_next_action(episode, index + 1),
        terminal=float(is_terminal),
        interval=1,
        rewards_to_go=episode.rewards[index:],
    )


def _batch_context(store: ColumnStore, episode_ids: np.ndarray, rows: np.ndarray):
    starts, ends, terminated, has_final = store.episode_table()
    return starts[episode_ids], ends[episode_ids], terminated[episode_ids], has_final[episode_ids]


def _gather_next_actions(store: ColumnStore, next_rows: np.ndarray, ends: np.ndarray) -> np.ndarray:
    return _next_actions_at(store, next_rows, next_rows < ends)


def _next_actions_at(store: ColumnStore, next_rows: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """The actions at ``next_rows``, zeros where not ``valid``."""
    next_actions = store.actions[np.where(valid, next_rows, 0)]
    if not valid.all():
        next_actions[~valid] = 0
    return next_actions


def _one_step_batch(store: ColumnStore, rows: np.ndarray, next_rows: np.ndarray, is_terminal: Optional[np.ndarray],
                    terminals: np.ndarray, next_valid: np.ndarray, rewards_to_go: RewardsToGo) -> TransitionMiniBatch:
    """The one-step batch at ``rows``: next observations at ``next_rows``,
    zeroed where ``is_terminal`` (None: no terminal step in the batch); next
    actions at ``next_rows`` where ``next_valid``, else zeros (``next_rows``
    is ``rows + 1`` wherever ``next_valid``)."""
    fields = store.one_step_fields(rows, next_rows)
    if fields is None:
        next_observations = []
        for column in store.observations:
            nxt = column[next_rows]
            if is_terminal is not None:
                nxt[is_terminal] = 0
            next_observations.append(nxt)
        observations = [column[rows] for column in store.observations]
        actions, rewards = store.actions[rows], store.rewards[rows]
        next_actions = _next_actions_at(store, next_rows, next_valid)
    else:
        observations, actions, rewards, next_observations, next_actions = fields
        if is_terminal is not None:
            for nxt in next_observations:
                nxt[is_terminal] = 0
        if not next_valid.all():
            next_actions[~next_valid] = 0
    return TransitionMiniBatch(
        observations=store.observation_view(observations),
        actions=actions,
        rewards=rewards,
        next_observations=store.observation_view(next_observations),
        next_actions=next_actions,
        terminals=terminals,
        intervals=np.ones((rows.shape[0], 1), dtype=np.float32),
        rewards_to_go=rewards_to_go,
    )


class BasicTransitionPicker:
    """One-step transitions: the next observation is the next step's, zeros
    after a terminal step, the stored final observation after the last step
    of a truncated episode."""

    def __call__(self, episode: EpisodeBase, index: int) -> Transition:
        _check_index(episode, index)
        observation = retrieve_observation(episode.observations, index)
        is_terminal = bool(episode.terminated) and index == episode.size() - 1
        if is_terminal:
            next_observation = create_zero_observation(observation)
        else:
            next_observation = _stored_next_observation(episode, index)
        return _one_step_transition(episode, index, observation, next_observation, is_terminal)

    def pick_batch(self, store: ColumnStore, episode_ids: np.ndarray, rows: np.ndarray) -> TransitionMiniBatch:
        _, ends, terminated, _ = _batch_context(store, episode_ids, rows)
        is_terminal = terminated & (rows == ends - 1)
        # a terminal row may be the very last stored row: read any valid row, then zero it
        next_rows = np.where(is_terminal, rows, rows + 1)
        return _one_step_batch(
            store, rows, next_rows, is_terminal if is_terminal.any() else None, is_terminal.astype(np.float32)[:, None],
            rows + 1 < ends, RewardsToGo(store.rewards, rows, ends),
        )

    def pick_transitions(self, store: ColumnStore, indices: np.ndarray) -> TransitionMiniBatch:
        """:meth:`pick_batch` of transitions ``indices`` (in ``[0,
        transition_count)``), through the store's :class:`TransitionTable`
        when it has one: the same batch with fewer operations."""
        table = store.transition_table()
        if table is None:
            return self.pick_batch(store, *store.locate_transitions(indices))
        rows = table.rows[indices]
        next_rows = table.next_rows[indices]
        terminals = table.terminals[indices]
        return _one_step_batch(
            store, rows, next_rows, terminals[:, 0] > 0 if terminals.any() else None, terminals,
            table.next_valid[indices], RewardsToGo._trusted(store.rewards, rows, table.ends[indices]),
        )

    def __repr__(self) -> str:
        return "BasicTransitionPicker()"


class MultiStepTransitionPicker:
    """``n_steps``-step transitions for n-step returns.

    ``reward = sum_{k < interval} gamma**k * r[t + k]`` and the next
    observation is ``interval`` steps ahead, where ``interval`` is
    ``n_steps`` or less near the end of the episode. ``terminal`` is 1 when
    the episode terminates within the interval. An algorithm bootstraps with
    ``gamma ** interval``.
    """

    def __init__(self, n_steps: int, gamma: float) -> None:
        if isinstance(n_steps, bool) or not isinstance(n_steps, (int, np.integer)):
            raise TypeError(f"n_steps must be an int, got {type(n_steps).__name__}")
        if n_steps < 1:
            raise ValueError(f"n_steps must be >= 1, got {n_steps}")
        if not 0.0 <= float(gamma) <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        self.n_steps = int(n_steps)
        self.gamma = float(gamma)
        self._discounts = (self.gamma ** np.arange(self.n_steps)).astype(np.float64)

    def __call__(self, episode: EpisodeBase, index: int) -> Transition:
        _check_index(episode, index)
        size = episode.size()
        final = _final_observation(episode)
        last = size if (episode.terminated or final is not None) else size - 1
        next_index = min(index + self.n_steps, last)
        is_terminal = bool(episode.terminated) and next_index == size
        observation = retrieve_observation(episode.observations, index)
        if is_terminal:
            next_observation = create_zero_observation(observation)
        elif next_index < size:
            next_observation = retrieve_observation(episode.observations, next_index)
        else:
            next_observation = final
        interval = next_index - index
        ret = 0.0
        for k in range(interval):
            ret += self.gamma**k * float(episode.rewards[index + k][0])
        return Transition(
            observation=observation,
            action=episode.actions[index],
            reward=np.array([ret], dtype=np.float32),
            next_observation=next_observation,
            next_action=_next_action(episode, next_index),
            terminal=float(is_terminal),
            interval=interval,
            rewards_to_go=episode.rewards[index:],
        )

    def pick_batch(self, store: ColumnStore, episode_ids: np.ndarray, rows: np.ndarray) -> TransitionMiniBatch:
        starts, ends, terminated, has_final = _batch_context(store, episode_ids, rows)
        last = np.where(terminated | has_final, ends, ends - 1)
        next_rows = np.minimum(rows + self.n_steps, last)
        intervals = next_rows - rows
        is_terminal = terminated & (next_rows == ends)
        window = rows[:, None] + np.arange(self.n_steps)
        in_window = window < next_rows[:, None]
        rewards = store.rewards[np.where(in_window, window, rows[:, None]), 0]
        returns = np.sum(np.where(in_window, rewards * self._discounts, 0.0), axis=1)
        safe_next = np.where(is_terminal, rows, next_rows)
        any_terminal = bool(is_terminal.any())
        next_observations = []
        for column in store.observations:
            nxt = column[safe_next]
            if any_terminal:
                nxt[is_terminal] = 0
            next_observations.append(nxt)
        return TransitionMiniBatch(
            observations=store.observation_view([column[rows] for column in store.observations]),
            actions=store.actions[rows],
            rewards=returns.astype(np.float32)[:, None],
            next_observations=store.observation_view(next_observations),
            next_actions=_gather_next_actions(store, next_rows, ends),
            terminals=is_terminal.astype(np.float32)[:, None],
            intervals=intervals.astype(np.float32)[:, None],
            rewards_to_go=RewardsToGo(store.rewards, rows, ends),
        )

    def __repr__(self) -> str:
        return f"MultiStepTransitionPicker(n_steps={self.n_steps}, gamma={self.gamma})"


def stacks_frames(keys: Optional[Sequence[str]], step_ndim: int) -> bool:
    """Whether frame stacking applies to an observation element: every
    element of array/tuple observations; a dict's image keys (3-D per step)."""
    return keys is None or step_ndim == 3


def check_n_frames(n_frames: Any) -> int:
    """``n_frames`` of a frame-stacking picker or slicer, checked: an int >= 1."""
    if isinstance(n_frames, bool) or not isinstance(n_frames, (int, np.integer)):
        raise TypeError(f"n_frames must be an int, got {type(n_frames).__name__}")
    if n_frames < 1:
        raise ValueError(f"n_frames must be >= 1, got {n_frames}")
    return int(n_frames)


def stack_frames(frames: Sequence[np.ndarray]) -> np.ndarray:
    """Concatenate frames along their first (channel) axis."""
    return np.concatenate([np.asarray(f) for f in frames], axis=0)


class FrameStackTransitionPicker:
    """Transitions whose observations stack the ``n_frames`` most recent
    frames along the channel axis (axis 0 of each observation), oldest first.
    Frames before the episode start are zeros. The next observation of a
    terminal step is all zeros.

    Use with :class:`~offrl.dataset.LastFrameWriterPreprocess` to store each
    frame once instead of ``n_frames`` times.

    Dict observations stack per key where the key is an image (3-D per
    step); other keys are the current step's value. Tuple observations stack
    every element.
    """

    def __init__(self, n_frames: int) -> None:
        self.n_frames = check_n_frames(n_frames)

    def _stack(self, episode: EpisodeBase, index: int, next_frame=None):
        """Stack frames ``index - n + 1 .. index``; with ``next_frame``, the
        window shifted by one step whose newest frame is ``next_frame``."""
        columns = observation_columns(episode.observations)
        columns = columns if isinstance(columns, list) else [columns]
        keys = getattr(episode, "observation_keys", None)
        stacked = []
        for k, column in enumerate(columns):
            if not stacks_frames(keys, np.ndim(column) - 1):
                stacked.append(np.asarray(column[index] if next_frame is None else next_frame[k]))
                continue
            frames = []
            lo = index - self.n_frames + 1 + (1 if next_frame is not None else 0)
            hi = index + 1
            for t in range(lo, hi):
                frames.append(column[t] if t >= 0 else np.zeros_like(column[0]))
            if next_frame is not None:
                frames.append(next_frame[k])
            stacked.append(stack_frames(frames))
        return keyed_observation(_unwrap(stacked), keys)

    def __call__(self, episode: EpisodeBase, index: int) -> Transition:
        _check_index(episode, index)
        is_terminal = bool(episode.terminated) and index == episode.size() - 1
        observation = self._stack(episode, index)
        if is_terminal:
            next_observation = create_zero_observation(observation)
        else:
            nxt = observation_columns(_stored_next_observation(episode, index))
            nxt_list = nxt if isinstance(nxt, list) else [nxt]
            next_observation = self._stack(episode, index, next_frame=nxt_list)
        return _one_step_transition(episode, index, observation, next_observation, is_terminal)

    def pick_batch(self, store: ColumnStore, episode_ids: np.ndarray, rows: np.ndarray) -> TransitionMiniBatch:
        starts, ends, terminated, _ = _batch_context(store, episode_ids, rows)
        n = self.n_frames
        is_terminal = terminated & (rows == ends - 1)
        # frames rows-n+1 .. rows+1; the last one is the next step (or final row)
        window = rows[:, None] + np.arange(-n + 1, 2)
        before_start = window < starts[:, None]
        window = np.where(before_start, rows[:, None], window)
        window[:, -1] = np.where(is_terminal, rows, window[:, -1])
        any_padding = bool(before_start.any())
        any_terminal = bool(is_terminal.any())
        batch = rows.shape[0]
        keys = store.observation_signature.keys
        observations, next_observations = [], []
        for column in store.observations:
            if not stacks_frames(keys, column.ndim - 1):  # a dict's non-image key: the step itself
                observations.append(column[rows])
                nxt = column[window[:, -1]]
                if any_terminal:
                    nxt[is_terminal] = 0
                next_observations.append(nxt)
                continue
            frames = column[window]  # (B, n + 1, C, ...)
            if any_padding:
                frames[before_start] = 0
            shape = column.shape[1:]
            stacked_shape = (batch, n * shape[0]) + shape[1:]
            observations.append(frames[:, :n].reshape(stacked_shape))
            # reshape of a strided slice may be a view sharing frames with the observation
            nxt = frames[:, 1:].reshape(stacked_shape).copy()
            if any_terminal:
                nxt[is_terminal] = 0
            next_observations.append(nxt)
        return TransitionMiniBatch(
            observations=store.observation_view(observations),
            actions=store.actions[rows],
            rewards=store.rewards[rows],
            next_observations=store.observation_view(next_observations),
            next_actions=_gather_next_actions(store, rows + 1, ends),
            terminals=is_terminal.astype(np.float32)[:, None],
            intervals=np.ones((batch, 1), dtype=np.float32),
            rewards_to_go=RewardsToGo(store.rewards, rows, ends),
        )

    def __repr__(self) -> str:
        return f"FrameStackTransitionPicker(n_frames={self.n_frames})"


class SparseRewardTransitionPicker:
    """One-step transitions (as :class:`BasicTransitionPicker`) for sparse
    rewards: when every reward from the sampled step to the end of its
    episode equals ``step_reward`` (a failed episode, e.g. in AntMaze), the
    transition's ``rewards_to_go`` is ``[[failure_return]]``, so that a
    Monte-Carlo return does not depend on where a timeout cut the episode.

    Args:
        failure_return: the return given to failed transitions.
        step_reward: the per-step reward of the sparse setting.
    """

    def __init__(self, failure_return: float, step_reward: float = 0.0) -> None:
        for name, value in (("failure_return", failure_return), ("step_reward", step_reward)):
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise TypeError(f"{name} must be a number, got {type(value).__name__}")
            if not np.isfinite(value):
                raise ValueError(f"{name} must be finite, got {value}")
        self.failure_return = float(failure_return)
        self.step_reward = float(step_reward)
        self._basic = BasicTransitionPicker()
        self._cache: tuple[int, int, np.ndarray] | None = None

    def __call__(self, episode: EpisodeBase, index: int) -> Transition:
        transition = self._basic(episode, index)
        remaining = np.asarray(transition.rewards_to_go)
        if np.all(remaining == np.float32(self.step_reward)):
            transition = dataclasses.replace(
                transition, rewards_to_go=np.array([[self.failure_return]], dtype=np.float32)
            )
        return transition

    def _other_reward_counts(self, store: ColumnStore) -> np.ndarray:
        """Cached prefix counts of rows whose reward differs from ``step_reward``."""
        cache = self._cache
        if cache is None or cache[0] != id(store) or cache[1] != store.version:
            differs = store.rewards[: store.tail, 0] != np.float32(self.step_reward)
            cache = (id(store), store.version, np.cumsum(differs, dtype=np.int64))
            self._cache = cache
        return cache[2]

    def pick_batch(self, store: ColumnStore, episode_ids: np.ndarray, rows: np.ndarray) -> TransitionMiniBatch:
        batch = self._basic.pick_batch(store, episode_ids, rows)
        _, ends, _, _ = _batch_context(store, episode_ids, rows)
        counts = self._other_reward_counts(store)
        first_differs = store.rewards[rows, 0] != np.float32(self.step_reward)
        others = counts[ends - 1] - counts[rows] + first_differs
        override = np.where(others == 0, self.failure_return, np.nan)
        rewards_to_go = RewardsToGo(store.rewards, rows, ends, override)
        return dataclasses.replace(batch, rewards_to_go=rewards_to_go)

    def __repr__(self) -> str:
        return f"SparseRewardTransitionPicker(failure_return={self.failure_return}, step_reward={self.step_reward})"
