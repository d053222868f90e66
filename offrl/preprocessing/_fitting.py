"""What a scaler is fitted on, gathered once for the three ways of fitting.

d3rlpy fits scalers either on the transitions a transition picker returns
(Q-learning algorithms) or on the whole-episode trajectories a trajectory
slicer returns (Decision Transformer); offrl also fits on a dataset's steps.
:class:`FitData` gathers the observations, actions, rewards and per-episode
returns for any of them, lazily (a scaler reads only what it needs), with
whole-array slicing for the built-in picker and slicer and a per-item loop
for any other (frame stacking, a user's picker), so every scaler computes
its statistics with one vectorised numpy pass over the gathered arrays.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Sequence, Tuple, Union

import numpy as np

__all__ = ["FitData", "Observations"]

Observations = Union[np.ndarray, List[np.ndarray]]


def _columns(observations: Any) -> List[np.ndarray]:
    if isinstance(observations, (list, tuple)):
        return [np.asarray(o) for o in observations]
    return [np.asarray(observations)]


def _join(columns: List[List[np.ndarray]], tuple_observations: bool) -> Observations:
    joined = [np.concatenate(parts, axis=0) for parts in columns]
    return joined if tuple_observations else joined[0]


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


def _is_offrl_component(component: Any) -> bool:
    """offrl's own pickers and slicers index every transition offrl stores;
    anyone else's gets only the indices valid under d3rlpy's contract."""
    return type(component).__module__.startswith("offrl.")


def _d3rlpy_transition_count(episode: Any) -> int:
    size = int(episode.size())
    return size if bool(episode.terminated) else max(size - 1, 0)


class FitData:
    """Observations, actions, flat rewards and per-episode returns, each
    computed on first use. Build it with :meth:`from_dataset`,
    :meth:`from_transition_picker` or :meth:`from_trajectory_slicer`."""

    def __init__(self, gather: Callable[[], Tuple[Observations, np.ndarray, np.ndarray, np.ndarray]],
                 source: str) -> None:
        self._gather = gather
        self._cache: Dict[str, Any] = {}
        self.source = source

    def _get(self, key: str) -> Any:
        if not self._cache:
            observations, actions, rewards, returns = self._gather()
            if np.asarray(rewards).size == 0:
                raise ValueError(f"{self.source} holds no transitions: there is nothing to fit a scaler on")
            self._cache = {"observations": observations, "actions": np.asarray(actions),
                           "rewards": np.asarray(rewards, dtype=np.float64).reshape(-1),
                           "returns": np.asarray(returns, dtype=np.float64).reshape(-1)}
        return self._cache[key]

    @property
    def observations(self) -> Observations:
        """``(N, *shape)`` array, or one such array per element of a tuple observation."""
        return self._get("observations")

    @property
    def actions(self) -> np.ndarray:
        return self._get("actions")

    @property
    def rewards(self) -> np.ndarray:
        """``(N,)`` float64."""
        return self._get("rewards")

    @property
    def returns(self) -> np.ndarray:
        """Undiscounted return of each episode, ``(n_episodes,)`` float64."""
        return self._get("returns")

    # ----------------------------------------------------------- builders
    @classmethod
    def from_arrays(cls, observations: Observations, actions: Any = None, rewards: Any = None,
                    source: str = "the data") -> "FitData":
        """Observations only (e.g. one element of a tuple observation)."""
        n = (observations[0] if isinstance(observations, list) else observations).shape[0]
        acts = np.zeros((n, 0)) if actions is None else actions
        rews = np.zeros(n) if rewards is None else rewards
        return cls(lambda: (observations, acts, rews, np.zeros(1)), source)

    @classmethod
    def from_dataset(cls, dataset: Any) -> "FitData":
        """Every stored step of ``dataset`` (a replay buffer or MDPDataset)."""
        to_arrays = getattr(dataset, "to_arrays", None)
        if to_arrays is None and hasattr(dataset, "episodes"):
            return cls.from_episode_steps(dataset.episodes)
        if to_arrays is None:
            raise TypeError(f"a scaler is fitted on a dataset (a ReplayBuffer or MDPDataset), got {type(dataset).__name__}")

        def gather():
            try:
                arrays = to_arrays()
            except TypeError:  # a buffer that is not columnar: read its episodes
                return cls.from_episode_steps(dataset.episodes)._gather()
            returns = dataset.compute_returns() if hasattr(dataset, "compute_returns") else np.zeros(1)
            return arrays["observations"], arrays["actions"], arrays["rewards"], returns

        return cls(gather, "the dataset")

    @classmethod
    def from_episode_steps(cls, episodes: Sequence[Any]) -> "FitData":
        """Every step of every episode (what the built-in slicer returns)."""
        episodes = _check_episodes(episodes, "dataset")

        def gather():
            return cls._slice_all(episodes, lambda episode: episode.size())

        return cls(gather, "the episodes")

    @staticmethod
    def _slice_all(episodes: Sequence[Any], count: Callable[[Any], int]):
        tuple_observations = isinstance(episodes[0].observations, (list, tuple))
        columns: List[List[np.ndarray]] = [[] for _ in _columns(episodes[0].observations)]
        actions, rewards, returns = [], [], []
        for episode in episodes:
            n = int(count(episode))
            for k, column in enumerate(_columns(episode.observations)):
                columns[k].append(column[:n])
            actions.append(np.asarray(episode.actions)[:n])
            episode_rewards = np.asarray(episode.rewards, dtype=np.float64).reshape(-1)[:n]
            rewards.append(episode_rewards)
            returns.append(float(np.sum(episode_rewards)))
        return _join(columns, tuple_observations), np.concatenate(actions), np.concatenate(rewards), np.asarray(returns)

    @staticmethod
    def _stack_items(items: List[Tuple[Any, Any, Any]], episode_returns: List[float]):
        first = items[0][0]
        tuple_observations = isinstance(first, (list, tuple))
        n_columns = len(first) if tuple_observations else 1
        columns = [[np.asarray(_columns(obs)[k])[None] for obs, _, _ in items] for k in range(n_columns)]
        actions = np.stack([np.asarray(a) for _, a, _ in items])
        rewards = np.asarray([np.asarray(r, dtype=np.float64).reshape(-1)[0] for _, _, r in items])
        return _join(columns, tuple_observations), actions, rewards, np.asarray(episode_returns)

    @classmethod
    def from_transition_picker(cls, episodes: Sequence[Any], transition_picker: Any) -> "FitData":
        """The transitions ``transition_picker(episode, i)`` returns for every
        transition index of every episode (d3rlpy's
        ``fit_with_transition_picker``)."""
        from ..dataset.pickers import BasicTransitionPicker

        episodes = _check_episodes(episodes, "transition picker")
        if not callable(transition_picker):
            raise TypeError(f"transition_picker must be callable as picker(episode, index), "
                            f"got {type(transition_picker).__name__}")
        if type(transition_picker) is BasicTransitionPicker:
            return cls(lambda: cls._slice_all(episodes, lambda e: e.transition_count), "the episodes")
        counted = (lambda e: e.transition_count) if _is_offrl_component(transition_picker) else _d3rlpy_transition_count

        def gather():
            items, returns = [], []
            for episode in episodes:
                total = 0.0
                for index in range(int(counted(episode))):
                    transition = transition_picker(episode, index)
                    items.append((transition.observation, transition.action, transition.reward))
                    total += float(np.sum(np.asarray(transition.reward, dtype=np.float64)))
                returns.append(total)
            if not items:
                raise ValueError("the episodes hold no transitions: there is nothing to fit a scaler on")
            return cls._stack_items(items, returns)

        return cls(gather, "the episodes")

    @classmethod
    def from_trajectory_slicer(cls, episodes: Sequence[Any], trajectory_slicer: Any) -> "FitData":
        """The whole-episode trajectory ``trajectory_slicer(episode, size - 1,
        size)`` returns for every episode (d3rlpy's
        ``fit_with_trajectory_slicer``)."""
        from ..dataset.slicers import BasicTrajectorySlicer

        episodes = _check_episodes(episodes, "trajectory slicer")
        if not callable(trajectory_slicer):
            raise TypeError(f"trajectory_slicer must be callable as slicer(episode, end_index, size), "
                            f"got {type(trajectory_slicer).__name__}")
        if type(trajectory_slicer) is BasicTrajectorySlicer:
            return cls(lambda: cls._slice_all(episodes, lambda e: e.size()), "the episodes")

        def gather():
            observations: List[Any] = []
            actions, rewards, returns = [], [], []
            for episode in episodes:
                size = int(episode.size())
                if size == 0:
                    continue
                trajectory = trajectory_slicer(episode, size - 1, size)
                observations.append(_columns(trajectory.observations))
                actions.append(np.asarray(trajectory.actions))
                episode_rewards = np.asarray(trajectory.rewards, dtype=np.float64).reshape(-1)
                rewards.append(episode_rewards)
                returns.append(float(np.sum(episode_rewards)))
            if not rewards:
                raise ValueError("the episodes hold no steps: there is nothing to fit a scaler on")
            tuple_observations = isinstance(episodes[0].observations, (list, tuple))
            columns = [[obs[k] for obs in observations] for k in range(len(observations[0]))]
            return _join(columns, tuple_observations), np.concatenate(actions), np.concatenate(rewards), np.asarray(returns)

        return cls(gather, "the episodes")
