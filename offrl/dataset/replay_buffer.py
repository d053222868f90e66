"""Replay buffers.

A :class:`ReplayBuffer` composes a Buffer (storage), a transition picker, a
trajectory slicer and a writer preprocessor, as in d3rlpy 2.x. With the
built-in columnar buffers and pickers, a mini-batch is gathered with numpy
fancy indexing; user components go through a per-item path.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np

from .._random import get_rng
from .._safety import DEFAULT_MAX_EXPANSION, available_memory
from ..constants import ActionSpace
from . import checks
from .batch import TrajectoryMiniBatch, TransitionMiniBatch
from .buffer_base import DatasetInfo, EmptyBufferError, PathOrFile, ReplayBufferBase, as_positive_int, discrete_action_size
from .episode import Episode, EpisodeBase, PartialTrajectory, Transition, get_observation_signature
from .pickers import BasicTransitionPicker, TransitionPickerProtocol
from .signature import Observation, Signature, dict_observation_keys, observation_from_dict
from .slicers import BasicTrajectorySlicer, TrajectorySlicerProtocol
from .storage import BufferProtocol, ColumnStore, FIFOBuffer, InfiniteBuffer
from .summary import summary_dict
from .signature import normalise_action_signature, signatures_from_env
from .writer import BasicWriterPreprocess, WriterPreprocessProtocol

__all__ = [
    "DatasetInfo",
    "ReplayBufferBase",
    "ReplayBuffer",
    "create_infinite_replay_buffer",
    "create_fifo_replay_buffer",
]

def _available_memory() -> Optional[int]:
    """Bytes of memory available now, or None when unknown (a seam the
    tests pin)."""
    return available_memory()


#: mini-batches up to this size are sampled without asking how much memory
#: is available (asking reads /proc/meminfo: about 40 us a call)
_ALWAYS_AFFORDABLE = 64 * 2**20


def _signature_bytes(signature: Signature) -> int:
    # math.prod over Python ints: np.prod costs ~2 us a call, and this runs per sampled batch
    return sum(np.dtype(d).itemsize * math.prod(int(n) for n in s) for d, s in zip(signature.dtype, signature.shape))


def _check_sample_memory(info: DatasetInfo, batch_size: int, length: Optional[int]) -> bool:
    """Refuse, before allocating, a mini-batch whose arrays would need more
    than half the memory available now, saying what was asked and needed.
    True when the batch is small enough never to need asking.
    A transition holds two observations, an action, a reward and a few
    float32/int64 scalars and indices; a trajectory of ``length`` steps
    holds per step an observation, an action, a reward, a return-to-go, a
    terminal flag, a timestep and a mask, plus its indices."""
    observation = _signature_bytes(info.observation_signature)
    action = max(_signature_bytes(info.action_signature), 8)
    reward = _signature_bytes(info.reward_signature)
    if length is None:
        per_item = 2 * observation + action + reward + 48
        what = f"sample_transition_batch(batch_size={batch_size})"
    else:
        per_item = length * (observation + action + 2 * reward + 4 + 8 + 4) + 48
        what = f"sample_trajectory_batch(batch_size={batch_size}, length={length})"
    needed = per_item * batch_size
    if needed <= _ALWAYS_AFFORDABLE:
        return True  # the training loop's batches: no /proc read per sampled batch
    available = _available_memory()
    if available is not None and needed > available // 2:
        raise ValueError(
            f"{what} would need about {needed / 2**30:.3g} GiB for the mini-batch "
            f"({per_item} bytes a {'transition' if length is None else 'trajectory'}), more than half of the "
            f"{available / 2**30:.3g} GiB of memory available: ask for a smaller batch"
        )
    return False


def _is_user_component(component: Any, batch_method: str) -> bool:
    """Whether ``component`` must go through the per-item path: it has no
    ``batch_method``, or it overrides ``__call__`` below the class that
    defines ``batch_method`` (its batch method would ignore the override)."""
    cls = type(component)
    batch_owner = next((c for c in cls.__mro__ if batch_method in c.__dict__), None)
    if batch_owner is None:
        return True
    call_owner = next(c for c in cls.__mro__ if "__call__" in c.__dict__)
    return call_owner is not batch_owner and issubclass(call_owner, batch_owner)


_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _real_step_value(value: Any, field: str) -> np.ndarray:
    """``value`` as an array of real numbers (bool, int or float). A string
    is not parsed (``ValueError``); complex, object or text arrays raise
    ``TypeError`` as the constructor does; both name ``field``."""
    if isinstance(value, (str, bytes)):
        raise ValueError(f"{field} must be a real number or an array of them, got {type(value).__name__} {value!r}")
    array = value if isinstance(value, np.ndarray) else np.asarray(value)
    if array.dtype.kind not in "biuf":
        what = {"c": "complex numbers", "U": "strings", "S": "bytes", "O": "Python objects"}.get(array.dtype.kind, str(array.dtype))
        raise TypeError(f"{field} must hold real numbers, got {what} (dtype {array.dtype})")
    if array.dtype.kind == "f" and array.dtype.itemsize > 4 and array.size:
        with np.errstate(invalid="ignore"):
            beyond = np.isfinite(array) & (np.abs(array) > _FLOAT32_MAX)  # nan and inf: the finiteness checks
        if beyond.any():
            where = tuple(int(i) for i in np.argwhere(beyond)[0])
            index = f"[{', '.join(map(str, where))}]" if where else ""
            raise ValueError(f"{field}{index} is {array[where].item()!r}, beyond float32's range (|x| <= {_FLOAT32_MAX:.4g})")
    return array


class ReplayBuffer(ReplayBufferBase):
    """Experience replay buffer and offline dataset.

    Args:
        buffer: storage, :class:`InfiniteBuffer` or :class:`FIFOBuffer` (or a
            user ``BufferProtocol``).
        transition_picker: defaults to :class:`BasicTransitionPicker`.
        trajectory_slicer: defaults to :class:`BasicTrajectorySlicer`.
        writer_preprocessor: applied to steps written with :meth:`append`;
            defaults to :class:`BasicWriterPreprocess`.
        episodes: initial episodes (their signatures define the buffer's).
        env: a gymnasium environment whose spaces define the signatures.
        observation_signature, action_signature, reward_signature: explicit
            signatures, when neither episodes nor env is given.
        action_space, action_size: override what is inferred. From
            ``episodes``, discrete actions get d3rlpy's action size: the
            largest action index over all the episodes, plus one (an action
            at or beyond a given ``action_size`` is refused).
        cache_size: d3rlpy's writer cache size; offrl's stores grow as
            needed, so it is only checked (a positive int).
        write_at_termination: keep the steps given to :meth:`append` aside
            and store the episode whole at :meth:`clip_episode` (d3rlpy's
            flag: nothing of an episode is sampled before it ends). By
            default each step is stored, and can be sampled, at once.

    Without any of these, the signatures are taken from the first step or
    episode written.
    """

    #: whether :meth:`_subset` (splits) gives this class back; a subclass
    #: whose ``__init__`` takes other arguments than :class:`ReplayBuffer`'s
    #: and whose state is the buffer's alone (``MDPDataset``) sets it
    subsets_keep_type = False

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
        cache_size: int = 10000,
        write_at_termination: bool = False,
    ) -> None:
        if isinstance(cache_size, bool) or not isinstance(cache_size, (int, np.integer)) or cache_size <= 0:
            raise ValueError(f"cache_size must be a positive int, got {cache_size!r}")
        if not isinstance(write_at_termination, (bool, np.bool_)):
            raise TypeError(f"write_at_termination must be a bool, got {type(write_at_termination).__name__}")
        # d3rlpy's writer cache; offrl's stores grow as needed, so it only has to be valid
        self._cache_size = int(cache_size)
        # keep an episode's steps aside until clip_episode, then store it whole
        self._write_at_termination = bool(write_at_termination)
        if not isinstance(buffer, BufferProtocol):
            raise TypeError(
                f"buffer must implement BufferProtocol (e.g. InfiniteBuffer() or FIFOBuffer(limit)), "
                f"got {type(buffer).__name__}"
            )
        self._buffer = buffer
        self._store: Optional[ColumnStore] = buffer if isinstance(buffer, ColumnStore) else None
        self._transition_picker = transition_picker or BasicTransitionPicker()
        self._trajectory_slicer = trajectory_slicer or BasicTrajectorySlicer()
        self._writer_preprocessor = writer_preprocessor or BasicWriterPreprocess()
        self._info: Optional[DatasetInfo] = None
        self._pending: Optional[dict] = None  # the episode being written into a user buffer
        self._steps_written = 0  # steps given to append (names the step in errors)
        # a user's picker/slicer (no batch method, or an overridden __call__)
        # is called per item, with indices valid under d3rlpy's contract
        self._user_picker = _is_user_component(self._transition_picker, "pick_batch")
        self._user_slicer = _is_user_component(self._trajectory_slicer, "slice_batch")
        self._batch_picker = not self._user_picker and self._store is not None
        #: ``(dataset_info, batch_size)`` last found small enough for :func:`_check_sample_memory` to pass
        self._affordable: tuple = ()
        self._batch_slicer = not self._user_slicer and self._store is not None

        if action_space is not None:
            action_space = ActionSpace.parse(action_space)
        if episodes is not None and len(episodes) > 0:
            if action_size is None:
                action_size = discrete_action_size(episodes, action_space)
            for i, episode in enumerate(episodes):
                try:
                    self.append_episode(episode, action_space=action_space, action_size=action_size)
                except (ValueError, TypeError) as e:
                    raise type(e)(f"episodes[{i}]: {e}") from None
        elif env is not None:
            obs_sig, act_sig, rew_sig, space, size = signatures_from_env(env, self._writer_preprocessor)
            self._set_info(obs_sig, act_sig, rew_sig, action_space or space, action_size or size)
        elif observation_signature is not None and action_signature is not None:
            act_sig, space = normalise_action_signature(action_signature, action_space)
            if action_size is None:
                if space == ActionSpace.DISCRETE:
                    raise ValueError("action_size is needed with a discrete action_signature")
                action_size = int(act_sig.shape[0][0])
            rew_sig = reward_signature or Signature(dtype=[np.float32], shape=[(1,)])
            self._set_info(observation_signature, act_sig, Signature(dtype=[np.float32], shape=[rew_sig.shape[0] or (1,)]), space, action_size)
        elif self._store is not None and self._store.is_initialized:
            self._info_from_store(action_space, action_size)

    # ---------------------------------------------------------------- info
    def _set_info(self, obs_sig, act_sig, rew_sig, action_space, action_size) -> None:
        self._info = DatasetInfo(obs_sig, act_sig, rew_sig, ActionSpace.parse(action_space), int(action_size))
        if self._store is not None:
            self._store.initialize(obs_sig, act_sig, rew_sig)

    def _info_from_store(self, action_space, action_size) -> None:
        store = self._store
        is_discrete = np.issubdtype(store.action_signature.dtype[0], np.integer)
        space = action_space or (ActionSpace.DISCRETE if is_discrete else ActionSpace.CONTINUOUS)
        if action_size is None:
            if space == ActionSpace.DISCRETE:
                rows = store.step_rows()
                actions = store.actions[rows]
                action_size = int(actions.max()) + 1 if actions.size else 1
            else:
                action_size = int(store.action_signature.shape[0][0])
        self._info = DatasetInfo(
            store.observation_signature, store.action_signature, store.reward_signature, space, action_size
        )

    @property
    def dataset_info(self) -> DatasetInfo:
        if self._info is None:
            raise EmptyBufferError(
                "the buffer has no data and no signatures yet: give episodes, env or signatures, "
                "or write a step first"
            )
        return self._info

    @property
    def buffer(self) -> BufferProtocol:
        return self._buffer

    @property
    def transition_picker(self) -> TransitionPickerProtocol:
        return self._transition_picker

    @property
    def trajectory_slicer(self) -> TrajectorySlicerProtocol:
        return self._trajectory_slicer

    @property
    def writer_preprocessor(self) -> WriterPreprocessProtocol:
        return self._writer_preprocessor

    @property
    def episodes(self) -> Sequence[EpisodeBase]:
        return self._buffer.episodes

    @property
    def transition_count(self) -> int:
        return int(self._buffer.transition_count)

    @property
    def behaviour_probabilities(self) -> Optional[np.ndarray]:
        """Logged behaviour probability (discrete actions) or density
        (continuous actions) of every step's action, ``(steps,)`` float64,
        aligned with ``np.concatenate([ep.actions for ep in dataset.episodes])``;
        None when the data has none. Steps written without one (e.g. appended
        online to a dataset that has them) hold NaN."""
        if self._store is not None:
            column = self._store.behaviour_probabilities
            return None if column is None else column[self._store.step_rows()]
        episodes = self.episodes
        columns = [getattr(e, "behaviour_probabilities", None) for e in episodes]
        if all(c is None for c in columns):
            return None
        return np.concatenate([
            np.full(e.size(), np.nan) if c is None else np.asarray(c, np.float64).reshape(-1)
            for e, c in zip(episodes, columns)
        ])

    def size(self) -> int:
        """Number of episodes."""
        return len(self._buffer.episodes)

    # ------------------------------------------------------------- writing
    def append(self, observation: Observation, action: Any, reward: Any) -> None:
        """Write one step of the episode being collected (online writing).
        A dict observation must have the keys of the first step (or of the
        env's ``Dict`` space)."""
        keys = None
        if isinstance(observation, Mapping):
            name = f"observation at step {self._steps_written}"
            if self._info is not None:
                keys = self._info.observation_signature.keys
                if keys is None:
                    raise TypeError(f"{name} is a dict, but the buffer holds array or tuple observations")
            else:
                keys = dict_observation_keys(observation, name)
            observation = observation_from_dict(observation, keys, name)
            if len(observation) == 1:
                observation = observation[0]
        observation = self._writer_preprocessor.process_observation(observation)
        action = self._writer_preprocessor.process_action(action)
        reward = self._writer_preprocessor.process_reward(reward)
        if self._info is None:
            self._init_from_step(observation, action, keys)
        info = self._info
        parts = observation if isinstance(observation, (list, tuple)) else [observation]
        for k, part in enumerate(parts):
            _real_step_value(part, f"observation[{k}]" if isinstance(observation, (list, tuple)) else "observation")
        obs = checks.as_single_observation(observation, info.observation_signature)
        act = self._step_action(_real_step_value(action, "action"))
        rew = _real_step_value(reward, "reward").reshape(-1)
        if rew.shape != (1,):
            raise ValueError(f"reward must be a scalar, got shape {np.shape(reward)}")
        if not np.isfinite(rew[0]):
            raise ValueError(f"reward is {rew[0]}")
        if abs(float(rew[0])) > _FLOAT32_MAX:
            raise ValueError(f"reward is {float(rew[0])!r}, beyond float32's range (|x| <= {_FLOAT32_MAX:.4g})")
        rew = rew.astype(np.float32)
        self._steps_written += 1
        if self._store is not None and not self._write_at_termination:
            self._store.append_step(obs, act, rew)
        else:
            if self._pending is None:
                self._pending = {"obs": [], "actions": [], "rewards": []}
            self._pending["obs"].append(obs)
            self._pending["actions"].append(act)
            self._pending["rewards"].append(rew)

    def _init_from_step(self, observation: Observation, action: Any, keys: Optional[tuple] = None) -> None:
        items = list(observation) if isinstance(observation, (list, tuple)) else [observation]
        arrays = [np.asarray(o) for o in items]
        obs_sig = Signature(
            dtype=[np.float32 if np.issubdtype(a.dtype, np.floating) else a.dtype for a in arrays],
            shape=[a.shape for a in arrays],
            keys=keys if keys is not None and len(keys) == len(arrays) else None,
        )
        a = np.asarray(action)
        if np.issubdtype(a.dtype, np.integer) and a.size == 1:
            raise ValueError(
                "a buffer written online with discrete actions needs the action size: "
                "create it with env=... or action_signature/action_size"
            )
        act = a.reshape(-1)
        self._set_info(
            obs_sig,
            Signature(dtype=[np.float32], shape=[act.shape]),
            Signature(dtype=[np.float32], shape=[(1,)]),
            ActionSpace.CONTINUOUS,
            act.shape[0],
        )

    def _step_action(self, action: Any) -> np.ndarray:
        info = self._info
        a = np.asarray(action)
        if info.action_space == ActionSpace.DISCRETE:
            flat = a.reshape(-1)
            if flat.shape != (1,):
                raise ValueError(f"a discrete action must be one index, got shape {a.shape}")
            value = flat[0]
            if not (np.issubdtype(a.dtype, np.integer) or float(value).is_integer()):
                raise ValueError(f"action is {value!r}, expected an integer action index")
            index = int(value)
            if not 0 <= index < info.action_size:
                raise ValueError(f"action is {index}, expected an index in [0, {info.action_size})")
            return np.array([index], dtype=np.int64)
        flat = a.astype(np.float32, copy=False).reshape(-1)
        if flat.shape[0] != info.action_size:
            raise ValueError(f"action has {flat.shape[0]} dimensions, expected {info.action_size}")
        if not np.isfinite(flat).all():
            raise ValueError("action holds nan or inf")
        return flat

    def clip_episode(self, terminated: bool, final_observation: Optional[Observation] = None) -> None:
        """End the episode being written.

        ``terminated``: the episode reached a terminal state. Otherwise it was
        truncated; give ``final_observation`` (the observation returned with
        ``truncated=True``) and its last step becomes a usable transition.
        """
        final = None
        if final_observation is not None and not terminated:
            if isinstance(final_observation, Mapping):
                keys = self.dataset_info.observation_signature.keys
                if keys is None:
                    raise TypeError("final_observation is a dict, but the buffer holds array or tuple observations")
                final_observation = observation_from_dict(final_observation, keys, "final_observation")
                if len(final_observation) == 1:
                    final_observation = final_observation[0]
            processed = self._writer_preprocessor.process_observation(final_observation)
            final = checks.as_single_observation(processed, self.dataset_info.observation_signature, "final_observation")
        if self._store is not None and not self._write_at_termination:
            self._store.close_episode(bool(terminated), final)
            return
        pending = self._pending
        self._pending = None
        if not pending:
            return
        columns = [np.stack([o[k] for o in pending["obs"]]) for k in range(len(pending["obs"][0]))]
        episode = Episode(
            observations=columns[0] if len(columns) == 1 else columns,
            actions=np.stack(pending["actions"]),
            rewards=np.stack(pending["rewards"]),
            terminated=bool(terminated),
            final_observation=(final[0] if final is not None and len(final) == 1 else final),
            observation_keys=self.dataset_info.observation_signature.keys,
        )
        if self._store is not None:  # write_at_termination: the whole episode at once
            obs, actions, rewards, final_columns, behaviour = checks.episode_columns(episode, self._store)
            self._store.add_episode(obs, actions, rewards, bool(terminated), final_columns, behaviour)
            return
        for i in range(episode.transition_count):
            self._buffer.append(episode, i)

    def append_episode(
        self,
        episode: EpisodeBase,
        action_space: Optional[ActionSpace] = None,
        action_size: Optional[int] = None,
    ) -> None:
        """Append a whole episode (its arrays are copied into the buffer).

        The first episode of a buffer without signatures sets them; its
        actions are discrete when their dtype is integer (or when
        ``action_space`` says so), continuous otherwise."""
        if self._info is None:
            keys = getattr(episode, "observation_keys", None) or checks.observation_keys(
                episode.observations, "episode.observations"
            )
            observations = checks.as_observation_columns(episode.observations, "episode.observations", keys)
            n = observations[0].shape[0]
            if action_space is None:
                # an episode's dtype states its intent (one episode is too little
                # data to guess from values): integer actions are discrete
                dtype = np.asarray(episode.actions).dtype
                discrete = np.issubdtype(dtype, np.integer) or dtype == np.bool_
                action_space = ActionSpace.DISCRETE if discrete else ActionSpace.CONTINUOUS
            actions, space, size = checks.as_actions(episode.actions, n, action_space, action_size, "episode.actions")
            self._set_info(
                get_observation_signature(observations, keys),
                Signature(dtype=[actions.dtype], shape=[actions.shape[1:]]),
                Signature(dtype=[np.float32], shape=[(1,)]),
                space,
                size,
            )
        if self._store is not None:
            obs, actions, rewards, final, behaviour = checks.episode_columns(episode, self._store)
            self._check_episode_actions(actions)
            self._store.add_episode(obs, actions, rewards, bool(episode.terminated), final, behaviour)
        else:
            for i in range(episode.transition_count):
                self._buffer.append(episode, i)

    def _check_episode_actions(self, actions: np.ndarray) -> None:
        info = self._info
        if info.action_space == ActionSpace.DISCRETE and actions.size:
            too_big = actions >= info.action_size
            if too_big.any():
                i = checks.first_index(too_big)
                raise ValueError(
                    f"episode.actions[{i}] is {int(actions[i, 0])}, expected an index below "
                    f"action_size={info.action_size}"
                )

    # ------------------------------------------------------------ sampling
    def _require_transitions(self) -> int:
        total = self.transition_count
        if total == 0:
            raise ValueError("cannot sample from an empty buffer: it holds no transitions")
        return total

    def _user_items(self, n: int) -> list[tuple[EpisodeBase, int]]:
        """``n`` random ``(episode, index)`` pairs for a user's picker or
        slicer, under d3rlpy's contract: never the last step of an episode
        that did not terminate (even when offrl stores its final observation)."""
        total = self._store.d3rlpy_transition_count
        if total == 0:
            raise ValueError("cannot sample from this buffer: it holds no transitions a custom picker can use")
        episode_ids, rows = self._store.locate_d3rlpy_transitions(get_rng().integers(total, size=n))
        starts = self._store.episode_table()[0]
        return [
            (self._store.episode(int(p)), int(r - starts[p])) for p, r in zip(episode_ids, rows)
        ]

    def sample_transition(self) -> Transition:
        if self._user_picker and self._store is not None:
            episode, transition_index = self._user_items(1)[0]
            return self._transition_picker(episode, transition_index)
        total = self._require_transitions()
        index = int(get_rng().integers(total))
        episode, transition_index = self._buffer[index]
        return self._transition_picker(episode, transition_index)

    def sample_transition_batch(self, batch_size: int) -> TransitionMiniBatch:
        batch_size = as_positive_int(batch_size, "batch_size")
        total = self._require_transitions()
        info = self.dataset_info
        if self._affordable != (info, batch_size) and _check_sample_memory(info, batch_size, None):
            self._affordable = (info, batch_size)  # the next batch of this size needs no check
        indices = get_rng().integers(total, size=batch_size)
        if self._batch_picker:
            picker = self._transition_picker
            if type(picker) is BasicTransitionPicker:
                return picker.pick_transitions(self._store, indices)
            return picker.pick_batch(self._store, *self._store.locate_transitions(indices))
        picker = self._transition_picker
        if self._user_picker and self._store is not None:
            return TransitionMiniBatch.from_transitions(
                [picker(episode, index) for episode, index in self._user_items(batch_size)]
            )
        transitions = []
        for index in indices:
            episode, transition_index = self._buffer[int(index)]
            transitions.append(picker(episode, transition_index))
        return TransitionMiniBatch.from_transitions(transitions)

    def _sample_trajectory_ends(self, n: int):
        if self._store is not None:
            steps = self._store.step_count
            if steps == 0:
                raise ValueError("cannot sample from an empty buffer: it holds no steps")
            return self._store.locate_steps(get_rng().integers(steps, size=n))
        total = self._require_transitions()
        return None, get_rng().integers(total, size=n)

    def sample_trajectory(self, length: int) -> PartialTrajectory:
        length = as_positive_int(length, "length")
        if self._user_slicer and self._store is not None:
            episode, index = self._user_items(1)[0]
            return self._trajectory_slicer(episode, index, length)
        episode_ids, rows = self._sample_trajectory_ends(1)
        if episode_ids is None:
            episode, index = self._buffer[int(rows[0])]
        else:
            position = int(episode_ids[0])
            episode = self._store.episode(position)
            index = int(rows[0] - self._store.episode_table()[0][position])
        return self._trajectory_slicer(episode, index, length)

    def sample_trajectory_batch(self, batch_size: int, length: int) -> TrajectoryMiniBatch:
        batch_size = as_positive_int(batch_size, "batch_size")
        length = as_positive_int(length, "length")
        try:
            info = self.dataset_info
        except ValueError:  # empty: sampling below says so
            info = None
        if info is not None:
            _check_sample_memory(info, batch_size, length)
        if self._user_slicer and self._store is not None:
            return TrajectoryMiniBatch.from_partial_trajectories(
                [self._trajectory_slicer(e, i, length) for e, i in self._user_items(batch_size)]
            )
        episode_ids, rows = self._sample_trajectory_ends(batch_size)
        if self._batch_slicer:
            return self._trajectory_slicer.slice_batch(self._store, episode_ids, rows, length)
        slicer = self._trajectory_slicer
        trajectories = []
        if episode_ids is None:
            for index in rows:
                episode, step = self._buffer[int(index)]
                trajectories.append(slicer(episode, step, length))
        else:
            starts = self._store.episode_table()[0]
            for position, row in zip(episode_ids, rows):
                episode = self._store.episode(int(position))
                trajectories.append(slicer(episode, int(row - starts[position]), length))
        return TrajectoryMiniBatch.from_partial_trajectories(trajectories)

    # ------------------------------------------------------------- arrays
    def to_arrays(self) -> dict:
        """The steps as arrays: ``observations`` (an array, a list for tuple
        observations, a dict by key in stored order for dict observations),
        ``actions``, ``rewards``, ``terminals`` and
        ``timeouts`` (0/1 per step, MDPDataset's convention),
        ``behaviour_probabilities`` (``(n,)`` float64, or None), and
        ``episode_starts`` / ``episode_ends`` (row offsets). Views when the
        buffer holds no final observations, copies otherwise."""
        if self._store is None:
            raise TypeError("to_arrays needs a columnar buffer (InfiniteBuffer or FIFOBuffer)")
        store = self._store
        rows = store.step_rows()
        starts, ends, terminated, _ = store.episode_table()
        sizes = ends - starts
        new_ends = np.cumsum(sizes)
        new_starts = new_ends - sizes
        terminals = np.zeros(int(sizes.sum()), dtype=np.float32)
        timeouts = np.zeros_like(terminals)
        if sizes.size:
            terminals[new_ends[terminated] - 1] = 1.0
            timeouts[new_ends[~terminated] - 1] = 1.0
        observations = [o[rows] for o in store.observations]
        behaviour = store.behaviour_probabilities
        return {
            "observations": store.observation_view(observations),
            "actions": store.actions[rows],
            "rewards": store.rewards[rows],
            "terminals": terminals,
            "timeouts": timeouts,
            "behaviour_probabilities": None if behaviour is None else behaviour[rows],
            "episode_starts": new_starts,
            "episode_ends": new_ends,
        }

    def compute_returns(self) -> np.ndarray:
        if self._store is None:
            return super().compute_returns()
        store = self._store
        starts, ends, _, _ = store.episode_table()
        if starts.size == 0:
            return np.zeros(0, dtype=np.float64)
        prefix = store.reward_prefix_sums()
        return prefix[ends - 1] - prefix[starts] + store.rewards[starts, 0]

    def summary(self) -> dict:
        if self._store is None:
            return super().summary()
        info = self.dataset_info
        starts, ends, terminated, _ = self._store.episode_table()
        return summary_dict(
            info, self.compute_returns(), ends - starts, int(terminated.sum()), self.transition_count
        )

    # ----------------------------------------------------------------- io
    def dump(self, f: PathOrFile, compression: Optional[str] = None) -> None:
        """Write the buffer to HDF5 (``f``: a path or a binary file object).

        A path is written through a temporary file renamed into place, so a
        crash never leaves a half-written file."""
        from .io import dump_episodes, dump_store

        if self._store is not None:
            dump_store(self._store, self.dataset_info, f, compression=compression)
        else:
            dump_episodes(self.episodes, self.dataset_info, f, compression=compression)

    @classmethod
    def load(
        cls,
        f: PathOrFile,
        buffer: Optional[BufferProtocol] = None,
        episode_cls: Any = Episode,
        transition_picker: Optional[TransitionPickerProtocol] = None,
        trajectory_slicer: Optional[TrajectorySlicerProtocol] = None,
        writer_preprocessor: Optional[WriterPreprocessProtocol] = None,
        in_memory: bool = True,
        *,
        max_expansion: Optional[float] = DEFAULT_MAX_EXPANSION,
    ) -> "ReplayBuffer":
        """Read a buffer written by :meth:`dump` into ``buffer``
        (a new :class:`InfiniteBuffer` by default). ``f`` may also be a disk
        dataset directory (``offrl.dataset.DiskDatasetWriter``); with
        ``in_memory=False`` it is sampled in place, never loaded whole.
        ``episode_cls`` is d3rlpy's argument: episodes are always
        :class:`Episode` views here, so only that class is accepted.
        ``max_expansion``: an HDF5 file whose compressed arrays would expand
        to more than this many times the bytes it stores is refused before
        reading (None: no bound; see SECURITY.md)."""
        from .disk import is_disk_dataset, open_disk_dataset, read_disk_dataset
        from .io import read_dataset_file

        if episode_cls is not Episode:
            raise ValueError(f"episode_cls must be offrl.dataset.Episode (the class the store's episodes are), "
                             f"got {episode_cls!r}")

        if not in_memory:
            if buffer is not None and (type(buffer) is not InfiniteBuffer or buffer.episode_count):
                raise ValueError(
                    "in_memory=False keeps the data on disk in a read-only store: pass buffer=None or an empty "
                    f"InfiniteBuffer(), got {type(buffer).__name__} (a FIFO buffer cannot drop rows from a file)"
                )
            if not is_disk_dataset(f):
                raise ValueError(
                    f"{f} is not a disk dataset directory; in_memory=False reads a directory written by "
                    "DiskDatasetWriter or dump_disk_dataset (convert an HDF5 file with "
                    "dump_disk_dataset(ReplayBuffer.load(file), directory))"
                )
            store, space, size = open_disk_dataset(f)
            out = ReplayBuffer.__new__(cls)
            ReplayBuffer.__init__(out, store, transition_picker, trajectory_slicer, writer_preprocessor,
                                  action_space=space, action_size=size)
            return out
        data = read_disk_dataset(f) if is_disk_dataset(f) else read_dataset_file(f, max_expansion=max_expansion)
        buffer = InfiniteBuffer() if buffer is None else buffer
        out = ReplayBuffer.__new__(cls)
        components = dict(
            transition_picker=transition_picker,
            trajectory_slicer=trajectory_slicer,
            writer_preprocessor=writer_preprocessor,
            action_space=data["action_space"],
            action_size=data["action_size"],
        )
        if isinstance(buffer, ColumnStore):
            if buffer.episode_count:
                raise ValueError("load needs an empty buffer")
            buffer.set_columns(
                data["observations"], data["actions"], data["rewards"], data["episode_starts"],
                data["episode_ends"], data["episode_terminated"], data["episode_has_final"],
                data.get("behaviour_probabilities"), observation_keys=data.get("observation_keys"),
            )
            ReplayBuffer.__init__(out, buffer, **components)
            return out
        store = InfiniteBuffer()
        store.set_columns(
            data["observations"], data["actions"], data["rewards"], data["episode_starts"],
            data["episode_ends"], data["episode_terminated"], data["episode_has_final"],
            data.get("behaviour_probabilities"), observation_keys=data.get("observation_keys"),
        )
        ReplayBuffer.__init__(out, buffer, episodes=list(store.episodes), **components)
        return out

    @classmethod
    def from_episode_generator(
        cls, episode_generator: Iterable[EpisodeBase], buffer: BufferProtocol, **kwargs: Any
    ) -> "ReplayBuffer":
        """Build a buffer from an iterable of episodes."""
        out = ReplayBuffer.__new__(cls)
        ReplayBuffer.__init__(out, buffer, **kwargs)
        for episode in episode_generator:
            out.append_episode(episode)
        return out

    def _subset(self, episode_indices: np.ndarray) -> "ReplayBuffer":
        """A new buffer holding copies of the given live episodes, in order."""
        if self._store is None:
            episodes = [self.episodes[int(i)] for i in episode_indices]
            return ReplayBuffer(
                InfiniteBuffer(), self._transition_picker, self._trajectory_slicer,
                self._writer_preprocessor, episodes=episodes,
                action_space=self.action_space, action_size=self.action_size,
            )
        store = self._store
        from .disk import DiskStore, subset_view

        if isinstance(store, DiskStore):  # a view of the same files: nothing is loaded
            out = ReplayBuffer.__new__(type(self) if self.subsets_keep_type else ReplayBuffer)
            ReplayBuffer.__init__(
                out, subset_view(store, episode_indices), self._transition_picker, self._trajectory_slicer,
                self._writer_preprocessor, action_space=self.action_space, action_size=self.action_size,
            )
            return out
        new = store.copy_episodes(episode_indices)
        out = ReplayBuffer.__new__(type(self) if self.subsets_keep_type else ReplayBuffer)
        ReplayBuffer.__init__(
            out, new, self._transition_picker, self._trajectory_slicer, self._writer_preprocessor,
            action_space=self.action_space, action_size=self.action_size,
        )
        return out


def create_infinite_replay_buffer(
    episodes: Optional[Sequence[EpisodeBase]] = None,
    transition_picker: Optional[TransitionPickerProtocol] = None,
    trajectory_slicer: Optional[TrajectorySlicerProtocol] = None,
    writer_preprocessor: Optional[WriterPreprocessProtocol] = None,
    env: Any = None,
    write_at_termination: bool = False,
    **kwargs: Any,
) -> ReplayBuffer:
    """A :class:`ReplayBuffer` over an :class:`InfiniteBuffer` (``write_at_termination``
    and ``kwargs``: :class:`ReplayBuffer`'s)."""
    return ReplayBuffer(
        InfiniteBuffer(), transition_picker, trajectory_slicer, writer_preprocessor,
        episodes=episodes, env=env, write_at_termination=write_at_termination, **kwargs,
    )


def create_fifo_replay_buffer(
    limit: int,
    episodes: Optional[Sequence[EpisodeBase]] = None,
    transition_picker: Optional[TransitionPickerProtocol] = None,
    trajectory_slicer: Optional[TrajectorySlicerProtocol] = None,
    writer_preprocessor: Optional[WriterPreprocessProtocol] = None,
    env: Any = None,
    write_at_termination: bool = False,
    **kwargs: Any,
) -> ReplayBuffer:
    """A :class:`ReplayBuffer` over a :class:`FIFOBuffer` of ``limit`` transitions
    (``write_at_termination`` and ``kwargs``: :class:`ReplayBuffer`'s)."""
    return ReplayBuffer(
        FIFOBuffer(limit), transition_picker, trajectory_slicer, writer_preprocessor,
        episodes=episodes, env=env, write_at_termination=write_at_termination, **kwargs,
    )
