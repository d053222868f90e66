"""HDF5 files of replay buffers and datasets.

Layout (schema version 1): root attributes ``format = "offrl.dataset"``,
``schema_version``, ``offrl_version``, ``action_space``, ``action_size``,
``n_observation_columns``; datasets ``observations_<k>`` (one per tuple
element), ``actions``, ``rewards`` (rows, including one final-observation row
after each truncated episode that has one), and the episode table
``episode_starts``, ``episode_ends``, ``episode_terminated``,
``episode_has_final``. Files hold arrays only; nothing in them is executed.

Schema 1.1 (root attribute ``schema_minor_version = 1``) adds the optional
dataset ``behaviour_probabilities`` (float64, one per row; NaN where a step
has none). Readers accept any 1.x file: a 1.0 file (no minor attribute) loads
without behaviour probabilities, and a 1.0 reader ignores the extra dataset.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from typing import Any, BinaryIO, Iterator, Optional, Sequence, Union

import numpy as np

from .._version import __version__
from ..constants import ActionSpace
from . import _checks
from .episode import EpisodeBase

__all__ = ["FORMAT", "SCHEMA_VERSION", "SCHEMA_MINOR_VERSION", "dump_store", "dump_episodes", "read_dataset_file"]

FORMAT = "offrl.dataset"
SCHEMA_VERSION = 1
SCHEMA_MINOR_VERSION = 1

PathOrFile = Union[str, os.PathLike, BinaryIO]


def _file_name(f: Any) -> str:
    if isinstance(f, (str, os.PathLike)):
        return os.fspath(f)
    return str(getattr(f, "name", f"<{type(f).__name__}>"))


@contextlib.contextmanager
def _atomic_h5(f: PathOrFile) -> Iterator[Any]:
    """An h5py file for writing whose content reaches ``f`` only when complete.

    A path is written as a temporary file in the same directory and renamed
    into place; a file object receives the finished bytes in one write.
    """
    import h5py

    if isinstance(f, (str, os.PathLike)):
        path = os.fspath(f)
        directory = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(prefix=".offrl-", suffix=".h5.tmp", dir=directory)
        os.close(fd)
        try:
            with h5py.File(tmp, "w") as h5:
                yield h5
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.remove(tmp)
            raise
    else:
        memory = io.BytesIO()
        with h5py.File(memory, "w") as h5:
            yield h5
        f.write(memory.getbuffer())
        if hasattr(f, "flush"):
            f.flush()


def _write(
    f: PathOrFile,
    observations: Sequence[np.ndarray],
    actions: np.ndarray,
    rewards: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    terminated: np.ndarray,
    has_final: np.ndarray,
    info: Any,
    compression: Optional[str],
    behaviour_probabilities: Optional[np.ndarray] = None,
) -> None:
    with _atomic_h5(f) as h5:
        h5.attrs["format"] = FORMAT
        h5.attrs["schema_version"] = SCHEMA_VERSION
        h5.attrs["schema_minor_version"] = SCHEMA_MINOR_VERSION
        h5.attrs["offrl_version"] = __version__
        h5.attrs["action_space"] = info.action_space.name.lower()
        h5.attrs["action_size"] = int(info.action_size)
        h5.attrs["n_observation_columns"] = len(observations)
        for k, column in enumerate(observations):
            h5.create_dataset(f"observations_{k}", data=column, compression=compression)
        h5.create_dataset("actions", data=actions, compression=compression)
        h5.create_dataset("rewards", data=rewards, compression=compression)
        h5.create_dataset("episode_starts", data=np.asarray(starts, dtype=np.int64))
        h5.create_dataset("episode_ends", data=np.asarray(ends, dtype=np.int64))
        h5.create_dataset("episode_terminated", data=np.asarray(terminated, dtype=bool))
        h5.create_dataset("episode_has_final", data=np.asarray(has_final, dtype=bool))
        if behaviour_probabilities is not None:
            h5.create_dataset(
                "behaviour_probabilities",
                data=np.asarray(behaviour_probabilities, dtype=np.float64),
                compression=compression,
            )


def dump_store(store: Any, info: Any, f: PathOrFile, compression: Optional[str] = None) -> None:
    """Write the live rows and episodes of a columnar store."""
    head, tail = store.head, store.tail
    starts, ends, terminated, has_final = store.episode_table()
    behaviour = store.behaviour_probabilities
    _write(
        f,
        [o[head:tail] for o in store.observations],
        store.actions[head:tail],
        store.rewards[head:tail],
        starts - head,
        ends - head,
        terminated,
        has_final,
        info,
        compression,
        None if behaviour is None else behaviour[head:tail],
    )


def dump_episodes(episodes: Sequence[EpisodeBase], info: Any, f: PathOrFile, compression: Optional[str] = None) -> None:
    """Write episodes from any buffer (user buffers, mixed buffers)."""
    from .storage import InfiniteBuffer

    store = InfiniteBuffer()
    for episode in episodes:
        obs, actions, rewards, final, behaviour = _checks.episode_columns(episode, store)
        if not store.is_initialized:
            from .episode import get_observation_signature
            from .signature import Signature

            store.initialize(
                get_observation_signature(obs),
                Signature(dtype=[actions.dtype], shape=[actions.shape[1:]]),
                Signature(dtype=[np.float32], shape=[(1,)]),
            )
        store.add_episode(obs, actions, rewards, bool(episode.terminated), final, behaviour)
    if not store.is_initialized:
        raise ValueError("cannot dump a buffer with no episodes")
    dump_store(store, info, f, compression)


def read_dataset_file(f: PathOrFile) -> dict:
    """Read and check a file written by ``dump``.

    Raises ``ValueError`` naming the file when it is not an offrl dataset,
    is truncated or corrupt, or has an unknown schema version.
    """
    import h5py

    name = _file_name(f)
    try:
        h5 = h5py.File(f, "r")
    except (OSError, ValueError) as e:
        raise ValueError(f"{name} is not an offrl dataset file: it is not HDF5 or it is truncated ({e})") from None
    try:
        with h5:
            attrs = dict(h5.attrs)
            if attrs.get("format") != FORMAT:
                raise ValueError(
                    f"{name} is not an offrl dataset file: its 'format' attribute is "
                    f"{attrs.get('format')!r}, expected {FORMAT!r}"
                )
            version = int(attrs.get("schema_version", -1))
            if version != SCHEMA_VERSION:
                raise ValueError(
                    f"{name} has dataset schema version {version}; this offrl "
                    f"({__version__}) reads version {SCHEMA_VERSION}.x"
                )
            n_columns = int(attrs["n_observation_columns"])
            keys = [f"observations_{k}" for k in range(n_columns)] + [
                "actions", "rewards", "episode_starts", "episode_ends",
                "episode_terminated", "episode_has_final",
            ]
            missing = [k for k in keys if k not in h5]
            if missing:
                raise ValueError(f"{name} is not a complete offrl dataset file: it is missing {missing}")
            data = {k: h5[k][()] for k in keys}
            if "behaviour_probabilities" in h5:
                data["behaviour_probabilities"] = h5["behaviour_probabilities"][()]
    except ValueError:
        raise
    except (OSError, KeyError, TypeError) as e:
        raise ValueError(f"{name} is corrupt or truncated: {e}") from None
    try:
        action_space = ActionSpace.parse(str(attrs["action_space"]))
        action_size = int(attrs["action_size"])
    except (KeyError, ValueError) as e:
        raise ValueError(f"{name} has a bad action space record: {e}") from None
    data["observations"] = [data.pop(f"observations_{k}") for k in range(n_columns)]
    _check_layout(name, data, action_space, action_size)
    data["action_space"] = action_space
    data["action_size"] = action_size
    return data


def _check_layout(name: str, data: dict, action_space: ActionSpace, action_size: int) -> None:
    rows = data["actions"].shape[0]
    for k, column in enumerate(data["observations"]):
        if column.shape[0] != rows:
            raise ValueError(f"{name} is corrupt: observations_{k} has {column.shape[0]} rows, actions has {rows}")
        _checks.check_finite(column, f"{name}: observations_{k}")
    if data["rewards"].shape != (rows, 1):
        raise ValueError(f"{name} is corrupt: rewards has shape {data['rewards'].shape}, expected ({rows}, 1)")
    _checks.check_finite(data["rewards"], f"{name}: rewards")
    _checks.check_finite(data["actions"], f"{name}: actions")
    behaviour = data.get("behaviour_probabilities")
    if behaviour is not None:
        if behaviour.shape != (rows,) or not np.issubdtype(behaviour.dtype, np.floating):
            raise ValueError(
                f"{name} is corrupt: behaviour_probabilities has shape {behaviour.shape} "
                f"and dtype {behaviour.dtype}, expected ({rows},) floats"
            )
        bad = ~(behaviour > 0) & ~np.isnan(behaviour)  # NaN marks a step without one
        bad |= np.isinf(behaviour)
        if bad.any():
            i = _checks.first_index(bad)
            raise ValueError(f"{name} is corrupt: behaviour_probabilities[{i}] is {float(behaviour[i])}, expected > 0")
    starts, ends = data["episode_starts"], data["episode_ends"]
    terminated, has_final = data["episode_terminated"], data["episode_has_final"]
    n = starts.shape[0]
    if n == 0:
        raise ValueError(f"{name} holds no episodes")
    if not (ends.shape == terminated.shape == has_final.shape == (n,)):
        raise ValueError(f"{name} is corrupt: the episode table columns have different lengths")
    spans_end = ends + has_final
    if (
        starts[0] != 0
        or np.any(ends <= starts)
        or np.any(starts[1:] != spans_end[:-1])
        or spans_end[-1] != rows
        or np.any(terminated & has_final)
    ):
        raise ValueError(f"{name} is corrupt: its episode table does not match its {rows} rows")
    actions = data["actions"]
    if action_space == ActionSpace.DISCRETE:
        if actions.ndim != 2 or actions.shape[1] != 1 or not np.issubdtype(actions.dtype, np.integer):
            raise ValueError(f"{name} is corrupt: discrete actions must be (n, 1) integers")
        bad = (actions < 0) | (actions >= action_size)
        bad[spans_end[has_final] - 1] = False  # final rows carry a placeholder action
        if bad.any():
            i = _checks.first_index(bad)
            raise ValueError(f"{name} is corrupt: actions[{i}] is {int(actions[i, 0])}, outside [0, {action_size})")
    elif actions.ndim != 2 or actions.shape[1] != action_size:
        raise ValueError(f"{name} is corrupt: continuous actions have shape {actions.shape}, expected (n, {action_size})")
