"""Prioritized experience replay (Schaul et al., 2016, proportional variant).

Transition ``i`` is sampled with probability ``P(i) = p_i / sum_k p_k``,
where its priority is ``p_i = (|delta_i| + epsilon) ** alpha`` after its TD
error ``delta_i`` was reported with :meth:`PrioritizedReplayBuffer.update_priorities`
(a new transition gets the largest priority given so far, 1.0 at first, so
it is replayed at least once soon). The bias of non-uniform sampling is
corrected by importance weights

    w_i = (N P(i)) ** -beta / max_{j in batch} w_j = (p_i / min_{j in batch} p_j) ** -beta

(normalised by the batch's largest weight, so they only scale the step
down), with ``beta`` annealed linearly from ``beta_start`` to 1 over
``beta_steps`` sampled batches.

Priorities live in a :class:`SumTree`: a batch of ``B`` samples is ``B``
prefix-sum descents done together, one vectorised step per tree level
(``O(B log n)`` array work, no Python loop per sample), and a batch of
priority updates recomputes the touched ancestors level by level. The top
ten levels (1,023 nodes) are handled whole, by one search in their prefix
sums when sampling and contiguous sums when updating, which is cheaper than
ten gather steps.

Choices where the paper leaves room: batches are stratified (one draw in
each of ``B`` equal slices of the total, as in the paper); weights are
normalised by the batch's largest weight (PFRL's default; no min-tree);
the maximum priority is a running maximum of every priority set; TD errors
are not clipped (``epsilon = 0.01`` as PFRL's ``eps``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Optional, Sequence

import numpy as np

from .._random import get_rng
from ..constants import ActionSpace
from .batch import TransitionMiniBatch
from .episode import EpisodeBase, Transition
from .pickers import TransitionPickerProtocol
from .replay_buffer import PathOrFile, ReplayBuffer, as_positive_int
from .signature import Observation, Signature
from .slicers import TrajectorySlicerProtocol
from .storage import BufferProtocol, ColumnStore, FIFOBuffer, InfiniteBuffer
from .writer import WriterPreprocessProtocol

__all__ = ["SumTree", "PrioritizedReplayBuffer", "create_prioritized_replay_buffer"]

#: the level (of 2**10 nodes) down to which ``SumTree`` searches and updates
#: the top of the tree whole rather than one level at a time
_SEARCH_LEVEL = 10


def _last_occurrence(leaves: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique ``leaves`` with the value of each one's last occurrence."""
    if leaves.shape[0] < 2:
        return leaves, values
    reversed_leaves = leaves[::-1]
    unique, first_in_reversed = np.unique(reversed_leaves, return_index=True)
    return unique, values[::-1][first_in_reversed]


class SumTree:
    """Binary sum tree over ``capacity`` non-negative leaf values (float64).

    Node ``k`` holds the sum of nodes ``2k`` and ``2k + 1``; the root is node
    1 and leaf ``i`` is node ``size + i`` (``size``: ``capacity`` rounded up
    to a power of two; the padding leaves stay 0).
    """

    def __init__(self, capacity: int) -> None:
        capacity = as_positive_int(capacity, "capacity")
        self.capacity = capacity
        self._size = 1 << max(0, (capacity - 1).bit_length())
        self._depth = self._size.bit_length() - 1
        self._nodes = np.zeros(2 * self._size, dtype=np.float64)

    @property
    def total(self) -> float:
        """Sum of all leaves."""
        return float(self._nodes[1])

    @property
    def leaves(self) -> np.ndarray:
        """Read-only view of the ``capacity`` leaf values."""
        view = self._nodes[self._size : self._size + self.capacity]
        view.flags.writeable = False
        return view

    def get(self, leaves: np.ndarray) -> np.ndarray:
        """Values of the given leaves."""
        return self._nodes[self._size + np.asarray(leaves, dtype=np.int64)]

    def set(self, leaves: np.ndarray, values: np.ndarray) -> None:
        """Set ``leaves`` to ``values`` (the last value wins for a repeated
        leaf) and update their ancestors."""
        leaves = np.asarray(leaves, dtype=np.int64).reshape(-1)
        values = np.asarray(values, dtype=np.float64).reshape(-1)
        if leaves.shape != values.shape:
            raise ValueError(f"leaves has {leaves.shape[0]} entries, values has {values.shape[0]}")
        if leaves.size == 0:
            return
        if leaves.min() < 0 or leaves.max() >= self.capacity:
            bad = int(np.flatnonzero((leaves < 0) | (leaves >= self.capacity))[0])
            raise IndexError(f"leaves[{bad}] is {int(leaves[bad])}, expected a leaf in [0, {self.capacity})")
        if values.min() < 0 or not np.isfinite(values).all():
            bad = int(np.flatnonzero(~(values >= 0) | ~np.isfinite(values))[0])
            raise ValueError(f"values[{bad}] is {values[bad]}, expected a finite value >= 0")
        self._assign(leaves, values)

    def _assign(self, leaves: np.ndarray, values: np.ndarray) -> None:
        """:meth:`set` without input checks (int64 leaves in range, values >= 0)."""
        nodes = self._nodes
        if leaves.shape[0] == 1:
            self._assign_one(int(leaves[0]), float(values[0]))
            return
        leaves, values = _last_occurrence(leaves, values)
        nodes[self._size + leaves] = values
        if leaves.shape[0] * 4 >= self._size:
            self._rebuild()
            return
        top = min(self._depth, _SEARCH_LEVEL)
        index = self._size + leaves
        for _ in range(self._depth - top):
            # a parent listed twice gets the same (correct) sum twice
            index >>= 1
            left = index << 1
            nodes[index] = nodes.take(left) + nodes.take(left + 1)
        # the small top levels: recomputed whole, one contiguous op each
        self._rebuild(1 << top)

    def _assign_one(self, leaf: int, value: float) -> None:
        """Set one leaf: scalar steps up the tree are cheaper than array ops."""
        nodes = self._nodes
        i = self._size + leaf
        nodes[i] = value
        for _ in range(self._depth):
            i >>= 1
            nodes[i] = nodes[2 * i] + nodes[2 * i + 1]

    def _rebuild(self, width: int = 0) -> None:
        """Recompute the inner nodes above the level of ``width`` nodes (the
        leaves by default), one level at a time."""
        nodes = self._nodes
        width = width or self._size
        while width > 1:
            half = width // 2
            nodes[half:width] = nodes[width : 2 * width : 2] + nodes[width + 1 : 2 * width : 2]
            width = half

    def find(self, prefix: np.ndarray) -> np.ndarray:
        """For each value ``u`` in ``[0, total)``, the leaf ``i`` with
        ``sum(leaves[:i]) <= u < sum(leaves[:i + 1])``; never a zero leaf
        (``u`` at or past ``total`` by rounding gives the last positive leaf).
        Needs ``total > 0``."""
        nodes = self._nodes
        if not nodes[1] > 0:
            raise ValueError("cannot search a sum tree whose total is 0")
        u = np.array(prefix, dtype=np.float64, copy=True).reshape(-1)
        # the top levels in one step: a search in the prefix sums of the
        # 2**top nodes of level ``top`` (cheaper than ``top`` array steps)
        top = min(self._depth, _SEARCH_LEVEL)
        level = nodes[1 << top : 2 << top]
        cumulative = np.cumsum(level)
        index = np.searchsorted(cumulative, u, side="right")
        np.minimum(index, level.shape[0] - 1, out=index)
        u -= np.where(index > 0, cumulative[index - 1], 0.0)
        index += 1 << top
        for _ in range(self._depth - top):
            index <<= 1
            left = nodes.take(index)
            go_right = u >= left
            np.subtract(u, left, out=u, where=go_right)
            index += go_right
        empty = nodes.take(index) <= 0
        if empty.any():  # u reached past a subtree's sum by rounding
            index[empty] = self._find_guarded(np.asarray(prefix, dtype=np.float64).reshape(-1)[empty])
        return index - self._size

    def _find_guarded(self, prefix: np.ndarray) -> np.ndarray:
        """Descent from the root that never enters an empty subtree (node ids)."""
        nodes = self._nodes
        u = prefix.copy()
        index = np.ones(u.shape[0], dtype=np.int64)
        for _ in range(self._depth):
            left = nodes[2 * index]
            go_right = (u >= left) & (nodes[2 * index + 1] > 0)
            u -= np.where(go_right, left, 0.0)
            index = 2 * index + go_right
        return index

    def grow(self, capacity: int) -> None:
        """Enlarge to ``capacity`` leaves, keeping the current leaf values."""
        if capacity <= self.capacity:
            return
        leaves = self._nodes[self._size : self._size + self.capacity].copy()
        self.capacity = int(capacity)
        self._size = 1 << (self.capacity - 1).bit_length()
        self._depth = self._size.bit_length() - 1
        self._nodes = np.zeros(2 * self._size, dtype=np.float64)
        self._nodes[self._size : self._size + leaves.shape[0]] = leaves
        self._rebuild()


def _check_probability_params(alpha: Any, beta_start: Any, beta_steps: Any, epsilon: Any) -> tuple[float, float, int, float]:
    for name, value in (("alpha", alpha), ("beta_start", beta_start), ("epsilon", epsilon)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if not 0.0 <= float(alpha) <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if not 0.0 <= float(beta_start) <= 1.0:
        raise ValueError(f"beta_start must be in [0, 1], got {beta_start}")
    if not float(epsilon) > 0.0 or not np.isfinite(float(epsilon)):
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon}")
    return float(alpha), float(beta_start), as_positive_int(beta_steps, "beta_steps"), float(epsilon)


class PrioritizedReplayBuffer(ReplayBuffer):
    """Replay buffer that samples transitions in proportion to their priority
    (see the module docstring for the maths).

    Takes every argument of :class:`ReplayBuffer` (the storage must be an
    :class:`InfiniteBuffer` or a :class:`FIFOBuffer`), plus:

    Args:
        alpha: how strongly priorities skew sampling (0: uniform), in [0, 1].
        beta_start: importance-weight exponent of the first batch, in [0, 1].
        beta_steps: sampled batches over which beta grows linearly to 1.
        epsilon: added to ``|td error|`` so no transition's priority is 0.

    ``sample_transition_batch`` returns batches with ``weights`` ``(B, 1)``
    and ``indices`` ``(B,)``; give those indices and the batch's TD errors
    to :meth:`update_priorities` (``fit`` / ``fit_online`` do this for the
    algorithms that support it: DQN, DoubleDQN, DiscreteCQL).

    Indices are transition ids: transition ``k`` ever written has id ``k``,
    so an id keeps naming the same transition while the FIFO buffer evicts
    older ones (an update for an evicted id is ignored). Write to the buffer
    only through this object: a write straight into its storage (or the
    dataset it wraps, see :meth:`from_dataset`) is detected at the next
    sample and raises. Priorities are not saved by :meth:`dump`; a loaded
    buffer starts with every priority at 1. Trajectory sampling stays uniform.
    """

    def __init__(
        self,
        buffer: BufferProtocol,
        transition_picker: Optional[TransitionPickerProtocol] = None,
        trajectory_slicer: Optional[TrajectorySlicerProtocol] = None,
        writer_preprocessor: Optional[WriterPreprocessProtocol] = None,
        episodes: Optional[Sequence[EpisodeBase]] = None,
        env: Any = None,
        observation_signature: Optional[Signature] = None,
        action_signature: Optional[Signature] = None,
        reward_signature: Optional[Signature] = None,
        action_space: Optional[ActionSpace] = None,
        action_size: Optional[int] = None,
        *,
        alpha: float = 0.6,
        beta_start: float = 0.4,
        beta_steps: int = 200_000,
        epsilon: float = 0.01,
    ) -> None:
        if not isinstance(buffer, ColumnStore):
            raise TypeError(
                "PrioritizedReplayBuffer needs an InfiniteBuffer or FIFOBuffer as buffer, "
                f"got {type(buffer).__name__}"
            )
        self.alpha, self.beta_start, self.beta_steps, self.epsilon = _check_probability_params(
            alpha, beta_start, beta_steps, epsilon
        )
        self._limit: Optional[int] = buffer.limit if isinstance(buffer, FIFOBuffer) else None
        existing = buffer.transition_count if buffer.is_initialized else 0
        capacity = self._limit if self._limit is not None else max(1024, existing)
        self._tree = SumTree(capacity)
        self._max_priority = 1.0
        self._written = 0  # transitions ever written: the next transition's id
        self._live = 0  # transitions in the store now: ids [written - live, written)
        self._sampled_batches = 0
        self._add_transitions(existing, existing)
        self._seen_version = buffer.version
        super().__init__(
            buffer, transition_picker, trajectory_slicer, writer_preprocessor, episodes, env,
            observation_signature, action_signature, reward_signature, action_space, action_size,
        )
        self._seen_version = buffer.version

    # ------------------------------------------------------------ creation
    @classmethod
    def from_dataset(
        cls,
        dataset: ReplayBuffer,
        *,
        alpha: float = 0.6,
        beta_start: float = 0.4,
        beta_steps: int = 200_000,
        epsilon: float = 0.01,
    ) -> "PrioritizedReplayBuffer":
        """Prioritized sampling over an existing dataset or buffer, sharing its
        storage, picker, slicer and writer (no copy; every priority starts
        at 1). Write to the data through the returned buffer from then on."""
        if not isinstance(dataset, ReplayBuffer) or not isinstance(dataset.buffer, ColumnStore):
            raise TypeError(
                "dataset must be a ReplayBuffer or MDPDataset over an InfiniteBuffer or FIFOBuffer, "
                f"got {type(dataset).__name__}"
            )
        info = dataset._info
        return cls(
            dataset.buffer, dataset.transition_picker, dataset.trajectory_slicer, dataset.writer_preprocessor,
            action_space=None if info is None else info.action_space,
            action_size=None if info is None else info.action_size,
            alpha=alpha, beta_start=beta_start, beta_steps=beta_steps, epsilon=epsilon,
        )

    @classmethod
    def load(  # type: ignore[override]
        cls,
        f: PathOrFile,
        buffer: Optional[BufferProtocol] = None,
        transition_picker: Optional[TransitionPickerProtocol] = None,
        trajectory_slicer: Optional[TrajectorySlicerProtocol] = None,
        writer_preprocessor: Optional[WriterPreprocessProtocol] = None,
        **priority_params: Any,
    ) -> "PrioritizedReplayBuffer":
        """Read a file written by :meth:`dump` (priorities all start at 1);
        ``priority_params``: ``alpha``, ``beta_start``, ``beta_steps``, ``epsilon``."""
        plain = ReplayBuffer.load(f, buffer, transition_picker=transition_picker, trajectory_slicer=trajectory_slicer,
                                  writer_preprocessor=writer_preprocessor)
        return cls.from_dataset(plain, **priority_params)

    @classmethod
    def from_episode_generator(  # type: ignore[override]
        cls, episode_generator: Iterable[EpisodeBase], buffer: BufferProtocol, **kwargs: Any
    ) -> "PrioritizedReplayBuffer":
        """Build a buffer from an iterable of episodes."""
        out = cls(buffer, **kwargs)
        for episode in episode_generator:
            out.append_episode(episode)
        return out

    # ------------------------------------------------------------- state
    @property
    def beta(self) -> float:
        """Importance-weight exponent of the next batch."""
        progress = min(1.0, self._sampled_batches / self.beta_steps)
        return self.beta_start + (1.0 - self.beta_start) * progress

    @property
    def sampled_batches(self) -> int:
        """Batches sampled so far (beta's annealing clock)."""
        return self._sampled_batches

    @property
    def max_priority(self) -> float:
        """Priority given to new transitions: the largest one set so far."""
        return self._max_priority

    def transition_ids(self) -> np.ndarray:
        """Ids of the stored transitions, in transition order, ``(transition_count,)`` int64."""
        self._check_in_sync()
        return np.arange(self._written - self._live, self._written, dtype=np.int64)

    @property
    def priorities(self) -> np.ndarray:
        """Priority of each stored transition, in transition order, float64."""
        return self._tree.get(self._leaves(self.transition_ids()))

    def _leaves(self, ids: np.ndarray) -> np.ndarray:
        return ids if self._limit is None else ids % self._limit

    def _check_in_sync(self) -> None:
        if self._store.version != self._seen_version:
            raise ValueError(
                "the storage of this PrioritizedReplayBuffer was written to directly (e.g. through the "
                "dataset it wraps); write through the PrioritizedReplayBuffer so new transitions get priorities"
            )

    def _add_transitions(self, created: int, live_after: int) -> None:
        """Account for ``created`` new transitions, after which the store
        holds ``live_after``: the new live ones get the current maximum
        priority. A FIFO buffer holds exactly ``min(limit, written)``
        transitions, so the leaf of every evicted id is reused by a new id
        (leaf = id mod limit) and needs no clearing."""
        written = self._written + created
        if self._limit is None and written > self._tree.capacity:
            self._tree.grow(max(written, 2 * self._tree.capacity))
        first_fresh = max(self._written, written - live_after)
        if written - first_fresh == 1:  # one step written online
            leaf = first_fresh if self._limit is None else first_fresh % self._limit
            self._tree._assign_one(leaf, self._max_priority)
        elif written > first_fresh:
            fresh = np.arange(first_fresh, written, dtype=np.int64)
            self._tree._assign(self._leaves(fresh), np.full(fresh.shape[0], self._max_priority))
        self._written, self._live = written, live_after

    # ------------------------------------------------------------ writing
    def append(self, observation: Observation, action: Any, reward: Any) -> None:
        self._check_in_sync()
        was_open = self._store.has_open_episode
        super().append(observation, action, reward)
        # a step added to an open episode makes the previous step a transition
        self._add_transitions(int(was_open), self._store.transition_count)
        self._seen_version = self._store.version

    def clip_episode(self, terminated: bool, final_observation: Optional[Observation] = None) -> None:
        self._check_in_sync()
        was_open = self._store.has_open_episode
        super().clip_episode(terminated, final_observation)
        # the last step becomes a transition when it is terminal or its next observation is given
        created = int(was_open and (bool(terminated) or final_observation is not None))
        self._add_transitions(created, self._store.transition_count)
        self._seen_version = self._store.version

    def append_episode(
        self,
        episode: EpisodeBase,
        action_space: Optional[ActionSpace] = None,
        action_size: Optional[int] = None,
    ) -> None:
        self._check_in_sync()
        super().append_episode(episode, action_space, action_size)
        store = self._store
        _, _, terminated, has_final = store.episode_table()
        steps = int(np.shape(episode.actions)[0])
        created = steps - 1 + int(bool(terminated[-1]) or bool(has_final[-1]))
        self._add_transitions(created, store.transition_count)
        self._seen_version = store.version

    # ----------------------------------------------------------- sampling
    def _sample_ids(self, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        """``batch_size`` ids drawn in proportion to priority (one uniform
        draw in each of ``batch_size`` equal slices of the total, as in the
        paper), and their priorities."""
        self._check_in_sync()
        self._require_transitions()
        total = self._tree.total
        prefix = (np.arange(batch_size) + get_rng().random(batch_size)) * (total / batch_size)
        leaves = self._tree.find(prefix)
        priorities = self._tree.get(leaves)
        first = self._written - self._live
        if self._limit is None:
            ids = leaves
        else:
            ids = first + (leaves - first) % self._limit
        return ids, priorities

    def _pick(self, ids: np.ndarray) -> TransitionMiniBatch:
        positions = ids - (self._written - self._live)
        if self._batch_picker:
            episode_ids, rows = self._store.locate_transitions(positions)
            return self._transition_picker.pick_batch(self._store, episode_ids, rows)
        transitions = []
        for position in positions:
            episode, index = self._buffer[int(position)]
            transitions.append(self._transition_picker(episode, index))
        return TransitionMiniBatch.from_transitions(transitions)

    def sample_transition(self) -> Transition:
        """One transition drawn in proportion to priority (no weight)."""
        ids, _ = self._sample_ids(1)
        episode, index = self._buffer[int(ids[0] - (self._written - self._live))]
        return self._transition_picker(episode, index)

    def sample_transition_batch(self, batch_size: int) -> TransitionMiniBatch:
        """A batch drawn in proportion to priority, with importance
        ``weights`` ``(B, 1)`` float32 and transition ``indices`` ``(B,)``
        int64; advances beta's annealing by one batch."""
        batch_size = as_positive_int(batch_size, "batch_size")
        ids, priorities = self._sample_ids(batch_size)
        beta = self.beta
        self._sampled_batches += 1
        weights = (priorities / priorities.min()) ** (-beta)
        return dataclasses.replace(self._pick(ids), weights=weights.astype(np.float32)[:, None], indices=ids)

    # ---------------------------------------------------------- priorities
    def update_priorities(self, indices: Any, td_errors: Any) -> None:
        """Set the priority of transitions ``indices`` (ids from a sampled
        batch, ``(B,)``) from their TD errors (``(B,)`` or ``(B, 1)``, numpy
        or torch): ``(|td_error| + epsilon) ** alpha``. The last value wins
        for a repeated id; ids of transitions evicted since are ignored."""
        self._check_in_sync()
        ids = _as_numpy(indices)
        errors = _as_numpy(td_errors)
        if ids.ndim != 1 or not (np.issubdtype(ids.dtype, np.integer) or ids.size == 0):
            raise TypeError(f"indices must be a 1-D integer array, got dtype {ids.dtype} and shape {ids.shape}")
        if errors.ndim == 2 and errors.shape[1] == 1:
            errors = errors[:, 0]
        if errors.shape != ids.shape:
            raise ValueError(f"td_errors has shape {errors.shape}, expected ({ids.shape[0]},) to match indices")
        if ids.size == 0:
            return
        errors = errors.astype(np.float64, copy=False)
        if not np.isfinite(errors.sum()):  # one reduction on the usual, all-finite path
            finite = np.isfinite(errors)
            if not finite.all():
                i = int(np.flatnonzero(~finite)[0])
                raise ValueError(f"td_errors[{i}] is {errors[i]}, expected a finite number")
        ids = ids.astype(np.int64, copy=False)
        lowest, highest = int(ids.min()), int(ids.max())
        if lowest < 0 or highest >= self._written:
            i = int(np.flatnonzero((ids < 0) | (ids >= self._written))[0])
            raise ValueError(
                f"indices[{i}] is {int(ids[i])}, expected a transition id in [0, {self._written})"
            )
        if lowest < self._written - self._live:
            keep = ids >= self._written - self._live
            ids, errors = ids[keep], errors[keep]
            if ids.size == 0:
                return
        priorities = (np.abs(errors) + self.epsilon) ** self.alpha
        self._max_priority = max(self._max_priority, float(priorities.max()))
        self._tree._assign(self._leaves(ids), priorities)


def _as_numpy(values: Any) -> np.ndarray:
    if hasattr(values, "detach"):  # a torch tensor, possibly on an accelerator
        values = values.detach().cpu().numpy()
    return np.asarray(values)


def create_prioritized_replay_buffer(
    limit: Optional[int] = None,
    episodes: Optional[Sequence[EpisodeBase]] = None,
    transition_picker: Optional[TransitionPickerProtocol] = None,
    trajectory_slicer: Optional[TrajectorySlicerProtocol] = None,
    writer_preprocessor: Optional[WriterPreprocessProtocol] = None,
    env: Any = None,
    *,
    alpha: float = 0.6,
    beta_start: float = 0.4,
    beta_steps: int = 200_000,
    epsilon: float = 0.01,
    **kwargs: Any,
) -> PrioritizedReplayBuffer:
    """A :class:`PrioritizedReplayBuffer` over a :class:`FIFOBuffer` of
    ``limit`` transitions, or over an :class:`InfiniteBuffer` when ``limit``
    is None."""
    buffer = InfiniteBuffer() if limit is None else FIFOBuffer(limit)
    return PrioritizedReplayBuffer(
        buffer, transition_picker, trajectory_slicer, writer_preprocessor, episodes=episodes, env=env,
        alpha=alpha, beta_start=beta_start, beta_steps=beta_steps, epsilon=epsilon, **kwargs,
    )
