"""What a scaler is fitted on, summarised once for the three ways of fitting.

d3rlpy fits scalers either on the transitions a transition picker returns
(Q-learning algorithms) or on the whole-episode trajectories a trajectory
slicer returns (Decision Transformer); offrl also fits on a dataset's steps.
:class:`FitData` reads the observations, actions and rewards of any of them
in one pass and keeps only per-dimension summaries (count, minimum,
maximum, mean, variance) and the per-episode returns, so memory stays
bounded by a chunk however large the dataset or however large the picked
observations (frame stacks). Rows are gathered into chunks of up to
:data:`CHUNK_ROWS` and each chunk is summarised with vectorised numpy;
chunks are merged with the pairwise update of Chan et al. (1979). The
built-in picker and slicer are read by slicing whole episodes; any other
picker or slicer (frame stacking, a user's) item by item.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import numpy as np

from ..dataset.signature import observation_columns

__all__ = ["FitData", "Summary", "CHUNK_ROWS"]

#: rows summarised together (a dataset of fewer rows is summarised in one pass)
CHUNK_ROWS = 65536


@dataclasses.dataclass
class Summary:
    """Per-dimension statistics of ``count`` rows (float64 except
    ``minimum`` / ``maximum``, which keep the data's dtype)."""

    count: int
    minimum: np.ndarray
    maximum: np.ndarray
    mean: np.ndarray
    var: np.ndarray
    dtype: np.dtype

    @classmethod
    def of(cls, rows: np.ndarray) -> "Summary":
        rows = np.asarray(rows)
        return cls(int(rows.shape[0]), rows.min(axis=0), rows.max(axis=0), rows.mean(axis=0, dtype=np.float64),
                   rows.var(axis=0, dtype=np.float64), rows.dtype)

    def merge(self, other: "Summary") -> "Summary":
        count = self.count + other.count
        delta = other.mean - self.mean
        mean = self.mean + delta * (other.count / count)
        m2 = self.var * self.count + other.var * other.count + delta**2 * (self.count * other.count / count)
        return Summary(count, np.minimum(self.minimum, other.minimum), np.maximum(self.maximum, other.maximum),
                       mean, m2 / count, self.dtype)

    @property
    def std(self) -> np.ndarray:
        """Population standard deviation."""
        return np.sqrt(self.var)


class _Accumulator:
    """Collects row blocks, summarising every :data:`CHUNK_ROWS` rows."""

    def __init__(self) -> None:
        self._blocks: List[np.ndarray] = []
        self._rows = 0
        self.summary: Optional[Summary] = None

    def add(self, block: np.ndarray) -> None:
        block = np.asarray(block)
        if block.shape[0] == 0:
            return
        self._blocks.append(block)
        self._rows += block.shape[0]
        if self._rows >= CHUNK_ROWS:
            self.flush()

    def flush(self) -> None:
        if not self._blocks:
            return
        rows = self._blocks[0] if len(self._blocks) == 1 else np.concatenate(self._blocks, axis=0)
        self._blocks, self._rows = [], 0
        chunk = Summary.of(rows)
        self.summary = chunk if self.summary is None else self.summary.merge(chunk)


def _columns(observations: Any) -> List[np.ndarray]:
    if isinstance(observations, (list, tuple)):
        return [np.asarray(o) for o in observations]
    return [np.asarray(observations)]


def _check_episodes(episodes: Any, what: str) -> Sequence[Any]:
    if isinstance(episodes, (str, bytes)) or not hasattr(episodes, "__len__") or not hasattr(episodes, "__getitem__"):
        raise TypeError(f"episodes must be a sequence of episodes (e.g. dataset.episodes), got {type(episodes).__name__}")
    if len(episodes) == 0:
        raise ValueError(f"episodes is empty: a scaler needs at least one episode to be fitted with a {what}")
    for i, episode in enumerate(episodes):
        if not (hasattr(episode, "observations") and hasattr(episode, "actions") and hasattr(episode, "rewards")):
            raise TypeError(f"episodes[{i}] is a {type(episode).__name__}, expected an episode "
                            "(observations, actions, rewards)")
    return episodes


def _check_callable(component: Any, name: str, call: str) -> None:
    if not callable(component):
        raise TypeError(f"{name} must be callable as {call}, got {type(component).__name__}")


def _is_offrl_component(component: Any) -> bool:
    """offrl's own pickers and slicers index every transition offrl stores;
    anyone else's gets only the indices valid under d3rlpy's contract."""
    return type(component).__module__.startswith("offrl.")


def _d3rlpy_transition_count(episode: Any) -> int:
    size = int(episode.size())
    return size if bool(episode.terminated) else max(size - 1, 0)


class _Collector:
    """Observations (one accumulator per tuple element), actions, rewards
    and episode returns, fed block by block."""

    def __init__(self) -> None:
        self.observations: Optional[List[_Accumulator]] = None
        self.tuple_observations = False
        self.actions = _Accumulator()
        self.rewards = _Accumulator()
        self.returns: List[float] = []

    def add(self, observations: Any, actions: Any, rewards: Any) -> None:
        observations = observation_columns(observations)  # a dict's values in stored key order
        columns = _columns(observations)
        if self.observations is None:
            self.tuple_observations = isinstance(observations, (list, tuple))
            self.observations = [_Accumulator() for _ in columns]
        if len(columns) != len(self.observations):
            raise ValueError(f"observations have {len(columns)} elements here and {len(self.observations)} before")
        for accumulator, column in zip(self.observations, columns):
            accumulator.add(column)
        self.actions.add(np.asarray(actions))
        self.rewards.add(np.asarray(rewards, dtype=np.float64).reshape(-1))

    def finish(self, source: str) -> Dict[str, Any]:
        for accumulator in (*(self.observations or []), self.actions, self.rewards):
            accumulator.flush()
        if self.rewards.summary is None:
            raise ValueError(f"{source} holds no transitions: there is nothing to fit a scaler on")
        observations: Union[Summary, List[Summary]]
        summaries = [a.summary for a in self.observations or []]
        observations = summaries if self.tuple_observations else summaries[0]  # type: ignore[assignment]
        return {"observations": observations, "actions": self.actions.summary, "rewards": self.rewards.summary,
                "returns": np.asarray(self.returns, dtype=np.float64)}


class FitData:
    """Summaries of the observations, actions and rewards, and the return
    of each episode, read on first use. Build it with :meth:`from_dataset`,
    :meth:`from_transition_picker` or :meth:`from_trajectory_slicer`."""

    def __init__(self, read: Callable[[_Collector], None], source: str) -> None:
        self._read = read
        self._cache: Dict[str, Any] = {}
        self.source = source

    def _get(self, key: str) -> Any:
        if not self._cache:
            collector = _Collector()
            self._read(collector)
            self._cache = collector.finish(self.source)
        return self._cache[key]

    @property
    def observations(self) -> Union[Summary, List[Summary]]:
        """A :class:`Summary`, or one per element of a tuple observation."""
        return self._get("observations")

    @property
    def actions(self) -> Summary:
        return self._get("actions")

    @property
    def rewards(self) -> Summary:
        """Of the rewards as scalars (0-d statistics)."""
        return self._get("rewards")

    @property
    def returns(self) -> np.ndarray:
        """Undiscounted return of each episode, ``(n_episodes,)`` float64."""
        return self._get("returns")

    # ----------------------------------------------------------- builders
    @classmethod
    def from_summary(cls, observations: Summary, source: str) -> "FitData":
        """Observations only (one element of a tuple observation)."""
        data = cls(lambda collector: None, source)
        data._cache = {"observations": observations}
        return data

    @classmethod
    def from_dataset(cls, dataset: Any) -> "FitData":
        """Every stored step of ``dataset`` (a replay buffer or MDPDataset)."""
        to_arrays = getattr(dataset, "to_arrays", None)
        if to_arrays is None and hasattr(dataset, "episodes"):
            return cls.from_episode_steps(dataset.episodes)
        if to_arrays is None:
            raise TypeError(f"a scaler is fitted on a dataset (a ReplayBuffer or MDPDataset), got {type(dataset).__name__}")

        def read(collector: _Collector) -> None:
            try:
                arrays = to_arrays()
            except TypeError:  # a buffer that is not columnar: read its episodes
                cls._slice_all(collector, _check_episodes(dataset.episodes, "dataset"), lambda e: e.size())
                return
            collector.add(arrays["observations"], arrays["actions"], arrays["rewards"])
            returns = dataset.compute_returns() if hasattr(dataset, "compute_returns") else np.zeros(1)
            collector.returns.extend(np.asarray(returns, dtype=np.float64).tolist())

        return cls(read, "the dataset")

    @classmethod
    def from_episode_steps(cls, episodes: Sequence[Any]) -> "FitData":
        """Every step of every episode (what the built-in slicer returns)."""
        episodes = _check_episodes(episodes, "dataset")
        return cls(lambda collector: cls._slice_all(collector, episodes, lambda e: e.size()), "the episodes")

    @staticmethod
    def _slice_all(collector: _Collector, episodes: Sequence[Any], count: Callable[[Any], int]) -> None:
        for episode in episodes:
            n = int(count(episode))
            rewards = np.asarray(episode.rewards, dtype=np.float64).reshape(-1)[:n]
            stored = observation_columns(episode.observations)
            observations = [column[:n] for column in _columns(stored)]
            collector.add(observations if isinstance(stored, (list, tuple)) else observations[0],
                          np.asarray(episode.actions)[:n], rewards)
            collector.returns.append(float(np.sum(rewards)))

    @classmethod
    def from_transition_picker(cls, episodes: Sequence[Any], transition_picker: Any) -> "FitData":
        """The transitions ``transition_picker(episode, i)`` returns for every
        transition index of every episode (d3rlpy's
        ``fit_with_transition_picker``)."""
        from ..dataset.pickers import BasicTransitionPicker

        episodes = _check_episodes(episodes, "transition picker")
        _check_callable(transition_picker, "transition_picker", "picker(episode, index)")
        if type(transition_picker) is BasicTransitionPicker:
            return cls(lambda collector: cls._slice_all(collector, episodes, lambda e: e.transition_count),
                       "the episodes")
        counted = (lambda e: e.transition_count) if _is_offrl_component(transition_picker) else _d3rlpy_transition_count

        def read(collector: _Collector) -> None:
            for episode in episodes:
                total = 0.0
                for index in range(int(counted(episode))):
                    transition = transition_picker(episode, index)
                    observation = observation_columns(transition.observation)
                    if isinstance(observation, (list, tuple)):
                        observation = [np.asarray(o)[None] for o in observation]
                    else:
                        observation = np.asarray(observation)[None]
                    reward = np.asarray(transition.reward, dtype=np.float64).reshape(-1)[:1]
                    collector.add(observation, np.asarray(transition.action)[None], reward)
                    total += float(np.sum(np.asarray(transition.reward, dtype=np.float64)))
                collector.returns.append(total)

        return cls(read, "the episodes")

    @classmethod
    def from_trajectory_slicer(cls, episodes: Sequence[Any], trajectory_slicer: Any) -> "FitData":
        """The whole-episode trajectory ``trajectory_slicer(episode, size - 1,
        size)`` returns for every episode (d3rlpy's
        ``fit_with_trajectory_slicer``)."""
        from ..dataset.slicers import BasicTrajectorySlicer

        episodes = _check_episodes(episodes, "trajectory slicer")
        _check_callable(trajectory_slicer, "trajectory_slicer", "slicer(episode, end_index, size)")
        if type(trajectory_slicer) is BasicTrajectorySlicer:
            return cls(lambda collector: cls._slice_all(collector, episodes, lambda e: e.size()), "the episodes")

        def read(collector: _Collector) -> None:
            for episode in episodes:
                size = int(episode.size())
                if size == 0:
                    continue
                trajectory = trajectory_slicer(episode, size - 1, size)
                rewards = np.asarray(trajectory.rewards, dtype=np.float64).reshape(-1)
                collector.add(trajectory.observations, trajectory.actions, rewards)
                collector.returns.append(float(np.sum(rewards)))

        return cls(read, "the episodes")
