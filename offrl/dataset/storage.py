"""Columnar episode storage: the Buffer component of a replay buffer.

Every field is one contiguous array with steps on the first axis
(observations, or one array per element of a tuple observation; actions;
rewards), plus a small table of episodes: ``start`` and ``end`` rows,
``terminated`` and ``has_final`` flags. When the data gives the observation
reached after the last step of a truncated episode, it is stored as one extra
row right after the episode's steps, so that the next observation of any
non-terminal step ``r`` is simply row ``r + 1``.

An optional ``behaviour_probabilities`` column (float64, one value per row)
holds the logged probability (or density) of each step's action under the
policy that collected the data, for off-policy evaluation. It exists once any
written step carries one; steps written without one hold NaN, and
final-observation rows hold 1.0.

:class:`InfiniteBuffer` keeps everything; :class:`FIFOBuffer` keeps the
newest ``limit`` transitions. Both also implement d3rlpy's ``BufferProtocol``
(``append(episode, index)``, ``episodes``, ``transition_count``,
``__len__``, ``__getitem__``) so user code written against it keeps working.
"""

from __future__ import annotations

from typing import Any, Iterator, NamedTuple, Optional, Protocol, Sequence, Tuple, runtime_checkable

import numpy as np

from .episode import Episode, EpisodeBase
from .signature import Signature, keyed_observation

__all__ = [
    "BufferProtocol",
    "ColumnStore",
    "InfiniteBuffer",
    "FIFOBuffer",
    "EpisodeSequence",
    "TransitionTable",
]


class TransitionTable(NamedTuple):
    """Per-transition lookups of a store at one version, for one-step
    sampling without locating episodes per batch. Transition ``i`` (in
    ``[0, transition_count)``) is at ``rows[i]``; its next observation at
    ``next_rows[i]`` (the row itself for a terminal step, whose next
    observation is zeros); its next action at ``next_rows[i]`` where
    ``next_valid[i]`` (zeros after the last step of an episode); its
    episode ends at ``ends[i]``; ``terminals`` is ``(N, 1)`` float32. Rows,
    not values: data written into the columns in place (through an
    episode's views) is sampled as written."""

    rows: np.ndarray
    next_rows: np.ndarray
    ends: np.ndarray
    terminals: np.ndarray
    next_valid: np.ndarray


@runtime_checkable
class BufferProtocol(Protocol):
    """Interface of a Buffer: stores transitions as ``(episode, index)``."""

    def append(self, episode: EpisodeBase, index: int) -> None: ...

    @property
    def episodes(self) -> Sequence[EpisodeBase]: ...

    @property
    def transition_count(self) -> int: ...

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Tuple[EpisodeBase, int]: ...


class EpisodeSequence(Sequence[Episode]):
    """Lazy, read-only sequence of episode views of a :class:`ColumnStore`.

    Indexing builds an :class:`Episode` whose arrays are slices of the
    store (no copy). Views taken before later writes keep showing the data
    they were taken on.
    """

    def __init__(self, store: "ColumnStore") -> None:
        self._store = store

    def __len__(self) -> int:
        return self._store.episode_count

    def __getitem__(self, index):  # type: ignore[override]
        n = len(self)
        if isinstance(index, slice):
            return [self._store.episode(i) for i in range(*index.indices(n))]
        index = int(index)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"episode index {index} is out of range for {n} episodes")
        return self._store.episode(index)

    def __iter__(self) -> Iterator[Episode]:
        for i in range(len(self)):
            yield self._store.episode(i)

    def __repr__(self) -> str:
        return f"EpisodeSequence({len(self)} episodes)"


def _grow(array: np.ndarray, capacity: int, start: int, stop: int) -> np.ndarray:
    """A new array of ``capacity`` rows holding ``array[start:stop]`` at the top."""
    out = np.empty((capacity,) + array.shape[1:], dtype=array.dtype)
    out[: stop - start] = array[start:stop]
    return out


class ColumnStore:
    """Columnar storage of steps and episode boundaries.

    Rows ``[head, tail)`` are live, where ``head`` is the start of the first
    live episode. Episodes ``[ep_head, ep_tail)`` are live; the last one is
    *open* while an episode is being written online.
    """

    _INITIAL_ROWS = 1024
    _INITIAL_EPISODES = 64

    def __init__(self) -> None:
        self._observations: Optional[list[np.ndarray]] = None
        self._actions: Optional[np.ndarray] = None
        self._rewards: Optional[np.ndarray] = None
        self._behaviour: Optional[np.ndarray] = None
        self._tail = 0
        self._ep_start = np.zeros(0, dtype=np.int64)
        self._ep_end = np.zeros(0, dtype=np.int64)
        self._ep_terminated = np.zeros(0, dtype=bool)
        self._ep_has_final = np.zeros(0, dtype=bool)
        self._ep_head = 0
        self._ep_tail = 0
        self._open = False
        self._version = 0
        self._cum_cache: tuple[int, np.ndarray, np.ndarray] | None = None
        self._prefix_cache: tuple[int, np.ndarray] | None = None
        self._step_cache: tuple[int, np.ndarray, np.ndarray] | None = None
        self._table_cache: tuple[int, Optional[TransitionTable]] | None = None
        #: (version, calls of transition_table at that version)
        self._table_asked: tuple[int, int] = (-1, 0)
        self.observation_signature: Optional[Signature] = None
        self.action_signature: Optional[Signature] = None
        self.reward_signature: Optional[Signature] = None

    # ------------------------------------------------------------------ setup
    @property
    def is_initialized(self) -> bool:
        return self._observations is not None

    def initialize(
        self,
        observation_signature: Signature,
        action_signature: Signature,
        reward_signature: Signature,
    ) -> None:
        """Allocate empty columns for the given signatures."""
        if self.is_initialized:
            if (
                observation_signature != self.observation_signature
                or action_signature != self.action_signature
                or reward_signature != self.reward_signature
            ):
                raise ValueError(
                    "data does not match the buffer's signatures: buffer has "
                    f"observations {self.observation_signature!r}, actions "
                    f"{self.action_signature!r}, rewards {self.reward_signature!r}; data has "
                    f"observations {observation_signature!r}, actions {action_signature!r}, "
                    f"rewards {reward_signature!r}"
                )
            return
        self.observation_signature = observation_signature
        self.action_signature = action_signature
        self.reward_signature = reward_signature
        self._observations = [
            np.empty((0,) + tuple(s), dtype=d)
            for d, s in zip(observation_signature.dtype, observation_signature.shape)
        ]
        self._actions = np.empty((0,) + tuple(action_signature.shape[0]), action_signature.dtype[0])
        self._rewards = np.empty((0,) + tuple(reward_signature.shape[0]), reward_signature.dtype[0])

    def set_columns(
        self,
        observations: list[np.ndarray],
        actions: np.ndarray,
        rewards: np.ndarray,
        starts: np.ndarray,
        ends: np.ndarray,
        terminated: np.ndarray,
        has_final: np.ndarray,
        behaviour_probabilities: Optional[np.ndarray] = None,
        observation_keys: Optional[tuple[str, ...]] = None,
    ) -> None:
        """Adopt whole, already validated columns (used when building a dataset
        from arrays or loading a file). The store must be empty.
        ``behaviour_probabilities``: optional float64 ``(rows,)`` column;
        ``observation_keys``: the key of each column for dict observations."""
        if self._ep_tail != self._ep_head:
            raise ValueError("set_columns needs an empty buffer")
        self._observations = list(observations)
        self._actions = actions
        self._rewards = rewards
        self._behaviour = (
            None if behaviour_probabilities is None
            else np.ascontiguousarray(behaviour_probabilities, dtype=np.float64)
        )
        self.observation_signature = Signature(
            dtype=[o.dtype for o in observations], shape=[o.shape[1:] for o in observations],
            keys=observation_keys,
        )
        self.action_signature = Signature(dtype=[actions.dtype], shape=[actions.shape[1:]])
        self.reward_signature = Signature(dtype=[rewards.dtype], shape=[rewards.shape[1:]])
        self._tail = int(actions.shape[0])
        self._ep_start = np.ascontiguousarray(starts, dtype=np.int64)
        self._ep_end = np.ascontiguousarray(ends, dtype=np.int64)
        self._ep_terminated = np.ascontiguousarray(terminated, dtype=bool)
        self._ep_has_final = np.ascontiguousarray(has_final, dtype=bool)
        self._ep_head = 0
        self._ep_tail = int(starts.shape[0])
        self._open = False
        self._changed()

    # ------------------------------------------------------------- accessors
    @property
    def observations(self) -> list[np.ndarray]:
        """Raw observation columns (one per tuple element), all rows."""
        return self._observations  # type: ignore[return-value]

    def observation_view(self, columns: Sequence[np.ndarray]) -> Any:
        """Columns gathered from :attr:`observations` (same order) as a user
        reads them: the one array, the list of a tuple observation, or a
        dict by key for dict observations (what every built-in picker and
        slicer puts in its mini-batches)."""
        return keyed_observation(columns[0] if len(columns) == 1 else list(columns), self.observation_signature.keys)

    @property
    def actions(self) -> np.ndarray:
        return self._actions  # type: ignore[return-value]

    @property
    def rewards(self) -> np.ndarray:
        return self._rewards  # type: ignore[return-value]

    @property
    def behaviour_probabilities(self) -> Optional[np.ndarray]:
        """The behaviour-probability column (all rows), or None."""
        return self._behaviour

    @property
    def head(self) -> int:
        return int(self._ep_start[self._ep_head]) if self._ep_tail > self._ep_head else self._tail

    @property
    def tail(self) -> int:
        return self._tail

    @property
    def episode_count(self) -> int:
        return self._ep_tail - self._ep_head

    @property
    def has_open_episode(self) -> bool:
        return self._open

    @property
    def version(self) -> int:
        """Changes whenever the stored data changes."""
        return self._version

    def episode_table(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(starts, ends, terminated, has_final)`` of the live episodes (views)."""
        s = slice(self._ep_head, self._ep_tail)
        return self._ep_start[s], self._ep_end[s], self._ep_terminated[s], self._ep_has_final[s]

    def transition_counts(self) -> np.ndarray:
        starts, ends, terminated, has_final = self.episode_table()
        sizes = ends - starts
        return np.maximum(sizes - ~(terminated | has_final), 0)

    @property
    def transition_count(self) -> int:
        return int(self._cumulative()[1][-1]) if self.episode_count else 0

    def d3rlpy_transition_counts(self) -> np.ndarray:
        """Transitions per live episode under d3rlpy's contract: every step of
        a terminated episode, all but the last step of any other one (even
        when its final observation is stored). A user's picker or slicer is
        only given indices below this count."""
        starts, ends, terminated, _ = self.episode_table()
        return np.maximum(ends - starts - ~terminated, 0)

    def _d3rlpy_cumulative(self) -> tuple[np.ndarray, np.ndarray]:
        cache = getattr(self, "_d3rlpy_cache", None)
        if cache is None or cache[0] != self._version:
            counts = self.d3rlpy_transition_counts()
            cache = (self._version, counts, np.cumsum(counts))
            self._d3rlpy_cache = cache
        return cache[1], cache[2]

    @property
    def d3rlpy_transition_count(self) -> int:
        """Total of :meth:`d3rlpy_transition_counts`."""
        return int(self._d3rlpy_cumulative()[1][-1]) if self.episode_count else 0

    def locate_d3rlpy_transitions(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Map indices in ``[0, d3rlpy_transition_count)`` to
        ``(episode positions, rows)``, counting d3rlpy's transitions only."""
        counts, cum = self._d3rlpy_cumulative()
        episode_ids = np.searchsorted(cum, indices, side="right")
        starts = self._ep_start[self._ep_head + episode_ids]
        rows = starts + (indices - (cum[episode_ids] - counts[episode_ids]))
        return episode_ids, rows

    @property
    def step_count(self) -> int:
        return int(self._step_cumulative()[1][-1]) if self.episode_count else 0

    def _changed(self) -> None:
        self._version += 1

    def _cumulative(self) -> tuple[np.ndarray, np.ndarray]:
        """Cached ``(counts, cumsum(counts))`` of transitions per live episode."""
        cache = self._cum_cache
        if cache is None or cache[0] != self._version:
            counts = self.transition_counts()
            cache = (self._version, counts, np.cumsum(counts))
            self._cum_cache = cache
        return cache[1], cache[2]

    def _step_cumulative(self) -> tuple[np.ndarray, np.ndarray]:
        """Cached ``(sizes, cumsum(sizes))`` of steps per live episode."""
        cache = self._step_cache
        if cache is None or cache[0] != self._version:
            starts, ends, _, _ = self.episode_table()
            sizes = ends - starts
            cache = (self._version, sizes, np.cumsum(sizes))
            self._step_cache = cache
        return cache[1], cache[2]

    def reward_prefix_sums(self) -> np.ndarray:
        """Cached float64 ``cumsum`` of rewards over rows ``[0, tail)``; the
        sum of rewards of rows ``a..b`` is ``p[b] - p[a] + r[a]``."""
        cache = self._prefix_cache
        if cache is None or cache[0] != self._version:
            cache = (self._version, np.cumsum(self._rewards[: self._tail, 0], dtype=np.float64))
            self._prefix_cache = cache
        return cache[1]

    def locate_transitions(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Map transition indices in ``[0, transition_count)`` to
        ``(episode positions, rows)``; episode positions count live episodes."""
        counts, cum = self._cumulative()
        episode_ids = np.searchsorted(cum, indices, side="right")
        starts = self._ep_start[self._ep_head + episode_ids]
        rows = starts + (indices - (cum[episode_ids] - counts[episode_ids]))
        return episode_ids, rows

    def __getstate__(self) -> dict:
        # a copy or pickle does not carry the sampling table (up to 128 MiB or more); it is rebuilt if used
        state = self.__dict__.copy()
        state["_table_cache"] = None
        state["_table_asked"] = (-1, 0)
        return state

    #: False: :meth:`transition_table` is always None (the disk store: a
    #: table in memory would outgrow its memory budget)
    keeps_transition_table = True
    #: bytes of a :class:`TransitionTable` per transition
    _TABLE_BYTES = 3 * 8 + 4 + 1
    #: a table is built when it needs at most this many bytes, or at most a
    #: quarter of the stored columns' bytes
    _TABLE_FLOOR_BYTES = 128 << 20

    def transition_table(self) -> Optional[TransitionTable]:
        """The :class:`TransitionTable` of the current data, or None.

        Built (vectorised, once) when more than ``transition_count // 256``
        calls (at least one) have found the data unchanged since it last
        changed: building costs about as much as that many batches save, so
        a buffer written between samples (online training, even with
        several updates per step) never builds one. None as well when it
        would take more than
        ``max(128 MiB, a quarter of the columns' bytes)`` (29 bytes a
        transition), for
        a store whose ``keeps_transition_table`` is False, or when a subclass
        customises :meth:`locate_transitions` (the disk store counts the
        rows it reads there)."""
        cache = self._table_cache
        version = self._version
        if cache is not None and cache[0] == version:
            return cache[1]
        asked = self._table_asked
        if asked[0] != version:
            self._table_asked = (version, 1)
            return None
        if (not self.keeps_transition_table or type(self).locate_transitions is not ColumnStore.locate_transitions
                or not self.episode_count):
            self._table_cache = (version, None)
            return None
        counts, cum = self._cumulative()
        total = int(cum[-1])
        if asked[1] <= total // 256:
            self._table_asked = (version, asked[1] + 1)
            return None
        columns = sum(int(c.nbytes) for c in self._observations or ()) + int(self._actions.nbytes) + int(self._rewards.nbytes)
        table = None
        if total and total * self._TABLE_BYTES <= max(self._TABLE_FLOOR_BYTES, columns // 4):
            table = self._build_table(counts, cum, total)
        self._table_cache = (version, table)
        return table

    def _build_table(self, counts: np.ndarray, cum: np.ndarray, total: int) -> TransitionTable:
        starts, ends, terminated, _ = self.episode_table()
        first = np.repeat(starts - (cum - counts), counts)  # row of transition i is first[i] + i
        rows = first + np.arange(total, dtype=np.int64)
        ends_t = np.repeat(ends, counts)
        is_terminal = np.repeat(terminated, counts) & (rows == ends_t - 1)
        next_valid = rows + 1 < ends_t
        return TransitionTable(
            rows=rows,
            next_rows=np.where(is_terminal, rows, rows + 1),
            ends=ends_t,
            terminals=is_terminal.astype(np.float32)[:, None],
            next_valid=next_valid,
        )

    def one_step_fields(self, rows: np.ndarray, next_rows: np.ndarray) -> Optional[tuple]:
        """The fields of a one-step batch gathered by the store itself, or
        None (the default): the picker gathers each column.

        Returns ``(observation columns at rows, actions at rows, rewards at
        rows, observation columns at next_rows, actions at next_rows)``, new
        arrays; ``rows`` and ``next_rows`` are in range, ``next_rows`` is
        ``rows`` or ``rows + 1``. The disk store reads the two records of a
        transition in one system call here."""
        return None

    def locate_steps(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Map step indices in ``[0, step_count)`` to ``(episode positions, rows)``."""
        sizes, cum = self._step_cumulative()
        episode_ids = np.searchsorted(cum, indices, side="right")
        starts = self._ep_start[self._ep_head + episode_ids]
        rows = starts + (indices - (cum[episode_ids] - sizes[episode_ids]))
        return episode_ids, rows

    def step_rows(self) -> np.ndarray | slice:
        """Rows holding steps (a slice when there are no final-observation rows)."""
        starts, ends, _, has_final = self.episode_table()
        if not has_final.any():
            return slice(self.head, self._tail)
        sizes = ends - starts
        offsets = np.repeat(starts - np.concatenate(([0], np.cumsum(sizes)[:-1])), sizes)
        return np.arange(int(sizes.sum()), dtype=np.int64) + offsets

    def episode(self, position: int) -> Episode:
        """A view of the live episode at ``position``."""
        i = self._ep_head + position
        start, end = int(self._ep_start[i]), int(self._ep_end[i])
        obs = self._observations
        observations = obs[0][start:end] if len(obs) == 1 else [o[start:end] for o in obs]
        final = None
        if self._ep_has_final[i]:
            final = obs[0][end] if len(obs) == 1 else [o[end] for o in obs]
        return Episode(
            observations=observations,
            actions=self._actions[start:end],
            rewards=self._rewards[start:end],
            terminated=bool(self._ep_terminated[i]),
            final_observation=final,
            behaviour_probabilities=None if self._behaviour is None else self._behaviour[start:end],
            observation_keys=self.observation_signature.keys,
        )

    def copy_episodes(self, episode_indices: np.ndarray) -> "InfiniteBuffer":
        """A new :class:`InfiniteBuffer` holding copies of the live episodes
        at ``episode_indices`` (positions, in that order), final-observation
        rows and behaviour probabilities included."""
        starts, ends, terminated, has_final = self.episode_table()
        idx = np.asarray(episode_indices, dtype=np.int64)
        spans = (ends - starts + has_final)[idx]
        new_starts = np.cumsum(spans) - spans
        rows = np.arange(int(spans.sum()), dtype=np.int64) + np.repeat(starts[idx] - new_starts, spans)
        behaviour = self.behaviour_probabilities
        new = InfiniteBuffer()
        new.set_columns(
            [o[rows] for o in self.observations], self.actions[rows], self.rewards[rows], new_starts,
            new_starts + (ends - starts)[idx], terminated[idx], has_final[idx],
            None if behaviour is None else behaviour[rows], observation_keys=self.observation_signature.keys,
        )
        return new

    @property
    def episodes(self) -> EpisodeSequence:
        return EpisodeSequence(self)

    # -------------------------------------------------------------- writing
    def _reserve_rows(self, n: int) -> None:
        capacity = self._actions.shape[0]
        if self._tail + n <= capacity:
            return
        head = self.head
        live = self._tail - head
        needed = live + n
        if needed > capacity or head < capacity // 4:
            capacity = max(needed, capacity + capacity // 2, self._INITIAL_ROWS)
        # always into new arrays: episode views already handed out keep their data
        self._observations = [_grow(o, capacity, head, self._tail) for o in self._observations]
        self._actions = _grow(self._actions, capacity, head, self._tail)
        self._rewards = _grow(self._rewards, capacity, head, self._tail)
        if self._behaviour is not None:
            self._behaviour = _grow(self._behaviour, capacity, head, self._tail)
        self._ep_start[self._ep_head : self._ep_tail] -= head
        self._ep_end[self._ep_head : self._ep_tail] -= head
        self._tail = live

    def _reserve_episode(self) -> None:
        capacity = self._ep_start.shape[0]
        if self._ep_tail < capacity:
            return
        live = self._ep_tail - self._ep_head
        if live >= capacity // 2 or self._ep_head < capacity // 4:
            capacity = max(capacity * 2, self._INITIAL_EPISODES)
        self._ep_start = _grow(self._ep_start, capacity, self._ep_head, self._ep_tail)
        self._ep_end = _grow(self._ep_end, capacity, self._ep_head, self._ep_tail)
        self._ep_terminated = _grow(self._ep_terminated, capacity, self._ep_head, self._ep_tail)
        self._ep_has_final = _grow(self._ep_has_final, capacity, self._ep_head, self._ep_tail)
        self._ep_head, self._ep_tail = 0, live

    def _write_rows(
        self,
        observations: Sequence[np.ndarray],
        actions: np.ndarray,
        rewards: Optional[np.ndarray],
        behaviour_probabilities: Optional[np.ndarray] = None,
        is_final_row: bool = False,
    ) -> int:
        n = actions.shape[0]
        self._reserve_rows(n)
        t = self._tail
        for column, values in zip(self._observations, observations):
            column[t : t + n] = values
        self._actions[t : t + n] = actions
        if rewards is None:
            self._rewards[t : t + n] = 0
        else:
            self._rewards[t : t + n] = rewards
        if behaviour_probabilities is not None and self._behaviour is None:
            # the first step with a logged probability: earlier rows have none
            self._behaviour = np.full(self._actions.shape[0], np.nan)
        if self._behaviour is not None:
            if is_final_row:
                self._behaviour[t : t + n] = 1.0
            elif behaviour_probabilities is None:
                self._behaviour[t : t + n] = np.nan
            else:
                self._behaviour[t : t + n] = behaviour_probabilities
        self._tail = t + n
        return t

    def append_step(self, observation: Sequence[np.ndarray], action: np.ndarray, reward: np.ndarray) -> None:
        """Append one step to the open episode (opening one if needed)."""
        if not self._open:
            self._reserve_episode()
            self._reserve_rows(1)
            i = self._ep_tail
            self._ep_start[i] = self._ep_end[i] = self._tail
            self._ep_terminated[i] = False
            self._ep_has_final[i] = False
            self._ep_tail += 1
            self._open = True
        self._write_rows([o[None] for o in observation], action[None], reward[None])
        self._ep_end[self._ep_tail - 1] = self._tail
        self._after_write()

    def close_episode(self, terminated: bool, final_observation: Optional[Sequence[np.ndarray]] = None) -> None:
        """Close the open episode; a no-op when none is open."""
        if not self._open:
            return
        i = self._ep_tail - 1
        self._ep_terminated[i] = bool(terminated)
        if final_observation is not None and not terminated:
            self._write_rows(
                [o[None] for o in final_observation],
                np.zeros((1,) + self._actions.shape[1:], self._actions.dtype),
                None,
                is_final_row=True,
            )
            self._ep_has_final[i] = True
        self._open = False
        self._after_write()

    def add_episode(
        self,
        observations: Sequence[np.ndarray],
        actions: np.ndarray,
        rewards: np.ndarray,
        terminated: bool,
        final_observation: Optional[Sequence[np.ndarray]] = None,
        behaviour_probabilities: Optional[np.ndarray] = None,
    ) -> None:
        """Append a whole, closed episode (arrays already in the store's dtypes;
        ``behaviour_probabilities`` validated, ``(n,)``)."""
        if self._open:
            raise ValueError(
                "an episode is being written with append(); call clip_episode() "
                "before appending whole episodes"
            )
        n = actions.shape[0]
        if n == 0:
            raise ValueError("cannot append an episode with no steps")
        has_final = final_observation is not None and not terminated
        self._reserve_episode()
        self._reserve_rows(n + int(has_final))
        start = self._write_rows(observations, actions, rewards, behaviour_probabilities)
        if has_final:
            self._write_rows(
                [o[None] for o in final_observation],
                np.zeros((1,) + actions.shape[1:], actions.dtype),
                None,
                is_final_row=True,
            )
        i = self._ep_tail
        self._ep_start[i] = start
        self._ep_end[i] = start + n
        self._ep_terminated[i] = bool(terminated)
        self._ep_has_final[i] = has_final
        self._ep_tail += 1
        self._after_write()

    def _after_write(self) -> None:
        self._changed()

    # ------------------------------------------------- BufferProtocol parts
    def __len__(self) -> int:
        return self.transition_count

    def __getitem__(self, index: int) -> Tuple[Episode, int]:
        total = self.transition_count
        index = int(index)
        if index < 0:
            index += total
        if not 0 <= index < total:
            raise IndexError(f"transition index {index} is out of range for {total} transitions")
        episode_ids, rows = self.locate_transitions(np.array([index]))
        position = int(episode_ids[0])
        return self.episode(position), int(rows[0] - self._ep_start[self._ep_head + position])

    def append(self, episode: EpisodeBase, index: int) -> None:
        """d3rlpy's ``BufferProtocol.append``: the buffer holds the episode's
        transitions. The whole episode is stored on its first call (a fresh
        buffer takes its signatures from it); later calls for the same
        episode object store the steps it has gained since (an episode
        written step by step) and its current ``terminated`` flag."""
        from .checks import episode_columns, observation_keys

        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"index must be an int, got {type(index).__name__}")
        if getattr(self, "_protocol_episode", None) is episode:
            self._extend_protocol_episode(episode)
            return
        obs, actions, rewards, final, behaviour = episode_columns(episode, self)
        if not self.is_initialized:
            keys = getattr(episode, "observation_keys", None) or observation_keys(episode.observations)
            self.initialize(
                Signature(dtype=[o.dtype for o in obs], shape=[o.shape[1:] for o in obs], keys=keys),
                Signature(dtype=[actions.dtype], shape=[actions.shape[1:]]),
                Signature(dtype=[rewards.dtype], shape=[rewards.shape[1:]]),
            )
        self.add_episode(obs, actions, rewards, bool(episode.terminated), final, behaviour)
        self._protocol_episode = episode
        self._protocol_position = self._ep_tail - 1
        self._protocol_size = int(actions.shape[0])

    def _extend_protocol_episode(self, episode: EpisodeBase) -> None:
        """Store what an episode appended before has gained since, when it is
        still the newest stored episode and has no final-observation row."""
        from .checks import episode_columns

        i = self._protocol_position
        is_newest = self._ep_head <= i == self._ep_tail - 1 and int(self._ep_end[i]) == self._tail
        if not is_newest or self._ep_has_final[i]:
            return
        size = episode.size()
        stored = self._protocol_size
        if size > stored:
            obs, actions, rewards, _, behaviour = episode_columns(episode, self)
            self._write_rows(
                [o[stored:] for o in obs], actions[stored:], rewards[stored:],
                None if behaviour is None else behaviour[stored:],
            )
            self._ep_end[i] = self._tail
            self._protocol_size = size
        self._ep_terminated[i] = bool(episode.terminated)
        self._after_write()


class InfiniteBuffer(ColumnStore):
    """Buffer with unlimited capacity."""

    def __repr__(self) -> str:
        return f"InfiniteBuffer(episodes={self.episode_count}, transitions={self.transition_count})"


class FIFOBuffer(ColumnStore):
    """Buffer that keeps the newest ``limit`` transitions.

    When full, the oldest transitions are dropped from the front of the
    oldest episode (an episode whose transitions are all gone is removed),
    so the buffer always holds exactly ``min(limit, written)`` transitions.
    """

    def __init__(self, limit: int) -> None:
        if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)):
            raise TypeError(f"limit must be an int, got {type(limit).__name__}")
        if limit <= 0:
            raise ValueError(f"limit must be > 0, got {limit}")
        super().__init__()
        self.limit = int(limit)

    def _after_write(self) -> None:
        self._changed()
        excess = self.transition_count - self.limit
        if excess <= 0:
            return
        counts = self.transition_counts()
        i = 0
        # drop whole episodes while their transitions fit in the excess
        while excess > 0 and i < counts.shape[0]:
            c = int(counts[i])
            if c <= excess and not (self._open and self._ep_head + i == self._ep_tail - 1):
                excess -= c
                i += 1
                continue
            break
        self._ep_head += i
        if excess > 0:
            # trim the front of the oldest remaining episode
            self._ep_start[self._ep_head] += excess
        self._changed()

    def set_columns(self, *args, **kwargs) -> None:  # type: ignore[override]
        super().set_columns(*args, **kwargs)
        self._after_write()

    def __repr__(self) -> str:
        return (
            f"FIFOBuffer(limit={self.limit}, episodes={self.episode_count}, "
            f"transitions={self.transition_count})"
        )
