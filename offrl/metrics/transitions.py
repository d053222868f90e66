"""The transitions an evaluator scores: every transition of a set of
episodes, picked with the dataset's transition picker, in chunks.

The episodes live in one columnar store (the dataset's own, or a copy made
once from the episodes an evaluator was given), so the transitions of all
episodes are addressed with index arithmetic on the episode table and
gathered chunk by chunk with the picker's ``pick_batch``: no Python loop per
transition or per episode. A user's picker without ``pick_batch`` goes
through the per-item path, as in sampling.

The last step of a truncated episode is a transition only when the store
holds the observation that followed it (``final_observation``); otherwise it
has no next observation and is left out, exactly as training samples
transitions (``Episode.transition_count``).
"""

from __future__ import annotations

from typing import Any, Iterator, Optional, Sequence

import numpy as np

from ..dataset.batch import TransitionMiniBatch
from ..dataset.episode import EpisodeBase
from ..dataset.pickers import BasicTransitionPicker, TransitionPickerProtocol
from ..dataset.replay_buffer import ReplayBuffer, create_infinite_replay_buffer
from ..dataset.storage import ColumnStore, EpisodeSequence

__all__ = ["CHUNK_ROWS", "CHUNK_BYTES", "TransitionSet", "episodes_buffer", "dataset_buffer"]

#: most transitions in one forward pass
CHUNK_ROWS = 2048
#: most bytes of float32 observations in one chunk (bounds memory for images)
CHUNK_BYTES = 64 * 2**20


def episodes_buffer(episodes: Any) -> ReplayBuffer:
    """A columnar buffer over ``episodes``: the store itself for a dataset's
    ``episodes`` sequence (no copy), a validated copy for a list of episodes."""
    if isinstance(episodes, EpisodeSequence):
        return ReplayBuffer(episodes._store)
    if hasattr(episodes, "sample_transition_batch"):
        raise TypeError("episodes must be a sequence of episodes, got a dataset: pass dataset.episodes")
    if isinstance(episodes, (str, bytes)) or not hasattr(episodes, "__iter__"):
        raise TypeError(f"episodes must be a sequence of episodes (e.g. dataset.episodes), got {type(episodes).__name__}")
    episodes = list(episodes)
    if not episodes:
        raise ValueError("episodes is empty: give at least one episode, or None to use the dataset's episodes")
    bad = next((i for i, e in enumerate(episodes) if not isinstance(e, EpisodeBase)), None)
    if bad is not None:
        raise TypeError(f"episodes[{bad}] must be an episode (e.g. from dataset.episodes), got {type(episodes[bad]).__name__}")
    return create_infinite_replay_buffer(episodes=episodes)


def dataset_buffer(dataset: Any) -> ReplayBuffer:
    """``dataset`` itself when it is columnar, else a copy of its episodes."""
    if isinstance(dataset, ReplayBuffer) and isinstance(dataset.buffer, ColumnStore):
        return dataset
    if not hasattr(dataset, "episodes"):
        raise TypeError(f"dataset must be a ReplayBuffer or MDPDataset, got {type(dataset).__name__}")
    return episodes_buffer(dataset.episodes)


def _chunk_rows(store: ColumnStore, picker: Any) -> int:
    frames = int(getattr(picker, "n_frames", 1))
    row_bytes = 4 * frames * sum(int(np.prod(shape)) for shape in store.observation_signature.shape)
    return int(max(1, min(CHUNK_ROWS, CHUNK_BYTES // max(row_bytes, 1))))


class TransitionSet:
    """All transitions of the episodes in ``buffer``, in episode order, as
    ``picker`` builds them.

    Attributes:
        counts: ``(E,)`` transitions per episode.
        total: number of transitions.
    """

    def __init__(self, buffer: ReplayBuffer, picker: Optional[TransitionPickerProtocol] = None) -> None:
        self.buffer = buffer
        self.store: ColumnStore = buffer.buffer  # type: ignore[assignment]
        self.picker = picker if picker is not None else BasicTransitionPicker()
        self.counts = self.store.transition_counts()
        self.total = int(self.counts.sum())
        self.chunk_rows = _chunk_rows(self.store, self.picker) if self.store.is_initialized else CHUNK_ROWS

    def _pick(self, episode_ids: np.ndarray, rows: np.ndarray) -> TransitionMiniBatch:
        if hasattr(self.picker, "pick_batch"):
            return self.picker.pick_batch(self.store, episode_ids, rows)
        starts = self.store.episode_table()[0]
        views: dict = {}
        transitions = []
        for e, r in zip(episode_ids.tolist(), rows.tolist()):
            if e not in views:
                views[e] = self.store.episode(e)
            transitions.append(self.picker(views[e], r - int(starts[e])))
        return TransitionMiniBatch.from_transitions(transitions)

    def _chunks(self, episode_ids: np.ndarray, rows: np.ndarray) -> Iterator[TransitionMiniBatch]:
        for lo in range(0, rows.shape[0], self.chunk_rows):
            hi = lo + self.chunk_rows
            yield self._pick(episode_ids[lo:hi], rows[lo:hi])

    def batches(self) -> Iterator[TransitionMiniBatch]:
        """Every transition, in chunks of at most ``chunk_rows``."""
        return self._chunks(*self.store.locate_transitions(np.arange(self.total, dtype=np.int64)))

    def first_batches(self) -> Iterator[TransitionMiniBatch]:
        """The first transition of every episode that has one, in chunks."""
        episode_ids = np.flatnonzero(self.counts > 0)
        starts = self.store.episode_table()[0]
        return self._chunks(episode_ids, starts[episode_ids])

    def episode_last(self) -> np.ndarray:
        """``(total,)`` bool: the transition is its episode's last."""
        last = np.zeros(self.total, dtype=bool)
        last[np.cumsum(self.counts)[self.counts > 0] - 1] = True
        return last

    def per_transition(self, values: Sequence[Any]) -> np.ndarray:
        """A per-episode array repeated for each of the episode's transitions."""
        return np.repeat(np.asarray(values), self.counts)
