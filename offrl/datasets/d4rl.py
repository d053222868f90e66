"""D4RL-format HDF5 files (the layout of D4RL's dataset files and of files
written to match it).

A file holds step-aligned datasets at its root: ``observations`` ``(N, ...)``,
``actions`` ``(N, action_dim)``, ``rewards`` ``(N,)``, ``terminals`` ``(N,)``
and ``timeouts`` ``(N,)`` (0/1 flags), optionally ``next_observations``
``(N, ...)``, per-step ``infos/*`` (e.g. ``infos/qpos``,
``infos/action_log_probs``) and ``metadata/*`` (e.g. ``metadata/algorithm``).
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Optional, Union

import numpy as np

from .. import _safety
from ..constants import ActionSpace
from ..dataset import _checks
from ..dataset.replay_buffer import MDPDataset
from ._build import dataset_from_rows, episode_layout

__all__ = ["load_d4rl_hdf5", "D4RL_REQUIRED_KEYS"]

D4RL_REQUIRED_KEYS = ("observations", "actions", "rewards", "terminals", "timeouts")
_LOG_PROBS = "infos/action_log_probs"

PathLike = Union[str, os.PathLike]


def _collect(group: Any, prefix: str) -> dict:
    """Every dataset under ``group`` by its path relative to it."""
    out: dict = {}

    def visit(name: str, node: Any) -> None:
        if hasattr(node, "shape"):
            where = f"{group.file.filename}: {prefix}/{name}"
            if node.shape is None:
                return
            _safety.check_declared_size(where, "the dataset", node.shape, node.dtype)
            value = node[()]
            if isinstance(value, bytes):
                value = value.decode()
            out[name] = value

    if prefix in group:
        if not isinstance(group.get(prefix, getlink=True), __import__("h5py").HardLink):
            raise ValueError(f"{group.file.filename}: {prefix} is a link; offrl reads only data stored in the file itself")
        group[prefix].visititems(visit)
    return out


def _build(
    data: dict, terminals: np.ndarray, timeouts: np.ndarray, next_observations: Optional[np.ndarray],
    behaviour: Optional[np.ndarray], action_space: Any, action_size: Optional[int],
    transition_picker: Any, trajectory_slicer: Any,
) -> MDPDataset:
    """The dataset laid out straight from the file's arrays: each array is
    copied at most once (MDPDataset's general path copies, then inserts the
    final observations)."""
    observations = data["observations"]
    n = observations.shape[0]
    if n == 0:
        raise ValueError("the file holds no steps")
    if observations.ndim == 1:
        observations = observations[:, None]
    _checks.check_float32(observations, "observations")
    rewards = _checks.as_rewards(data["rewards"], n)
    actions, space, size = _checks.as_actions(
        data["actions"], n, None if action_space is None else ActionSpace.parse(action_space), action_size
    )
    if behaviour is not None:
        behaviour = _checks.as_behaviour_probabilities(behaviour, n, space)

    ends = np.flatnonzero(terminals | timeouts) + 1
    if ends.size == 0 or ends[-1] != n:
        ends = np.append(ends, n)
    starts = np.concatenate(([0], ends[:-1]))
    terminated = terminals[ends - 1]
    if next_observations is None:
        has_final = np.zeros(ends.shape[0], dtype=bool)
    else:
        if next_observations.ndim == 1:
            next_observations = next_observations[:, None]
        has_final = ~terminated
        _checks.check_float32(next_observations[ends[has_final] - 1], "next_observations")
    row_starts, row_ends, step_rows = episode_layout(ends - starts, has_final)

    def spread(steps: np.ndarray, finals: Optional[np.ndarray]) -> np.ndarray:
        if not has_final.any():
            return steps
        out = np.zeros((int(row_ends[-1] + has_final[-1]),) + steps.shape[1:], dtype=steps.dtype)
        out[step_rows] = steps
        if finals is not None:
            out[row_ends[has_final]] = finals
        return out

    finals = None if next_observations is None else next_observations[ends[has_final] - 1]
    if np.issubdtype(observations.dtype, np.floating) and observations.dtype != np.float32:
        observations = observations.astype(np.float32)
    obs_rows = spread(observations, None if finals is None else finals.astype(observations.dtype, copy=False))
    rows_behaviour = None
    if behaviour is not None:
        rows_behaviour = spread(behaviour, np.ones(int(has_final.sum())))
    return dataset_from_rows(
        [obs_rows], spread(actions, None), spread(rewards, None), row_starts, row_ends, terminated, has_final,
        space, size, transition_picker, trajectory_slicer, rows_behaviour,
    )


def load_d4rl_hdf5(
    path: PathLike,
    transition_picker: Any = None,
    trajectory_slicer: Any = None,
    action_space: Optional[ActionSpace] = None,
    action_size: Optional[int] = None,
    return_extras: bool = False,
) -> Union[MDPDataset, tuple[MDPDataset, dict]]:
    """Read a D4RL-format HDF5 file into an :class:`MDPDataset`.

    Episodes end at a step whose ``terminals`` (terminal state) or
    ``timeouts`` (cut by a time limit) flag is set; a step with both is
    terminal. A file that ends mid-episode keeps that last stretch as a
    truncated episode. With ``next_observations``, every truncated episode
    keeps the observation after its last step, so that step stays a
    transition. ``infos/action_log_probs``, when present, gives the logged
    behaviour probabilities (``exp`` of it; densities for continuous actions).

    Args:
        path: the ``.hdf5`` file.
        transition_picker, trajectory_slicer: for the returned dataset.
        action_space, action_size: override the inferred ones.
        return_extras: also return ``{"infos": {...}, "metadata": {...}}``
            (every dataset under ``infos/`` and ``metadata/`` by name).

    Raises:
        ValueError naming the file and the key: not HDF5, a required key
        missing, lengths that differ, NaN / inf values, bad flags.
    """
    import h5py

    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or a path, got {type(path).__name__}")
    name = _safety.check_regular_file(path, "D4RL-format HDF5 file")  # a named pipe would block forever
    try:
        f = h5py.File(name, "r")
    except (OSError, ValueError) as e:
        raise ValueError(f"{name} is not a readable HDF5 file: {e}") from None
    with f:
        missing = [k for k in D4RL_REQUIRED_KEYS if k not in f or not hasattr(f[k], "shape")]
        if missing:
            raise ValueError(
                f"{name} is not a D4RL-format file: it has no {', '.join(repr(k) for k in missing)} "
                f"dataset (a D4RL file holds {', '.join(D4RL_REQUIRED_KEYS)}; found {sorted(f.keys())})"
            )
        keys = list(D4RL_REQUIRED_KEYS) + [k for k in ("next_observations", _LOG_PROBS) if k in f]
        nodes = {k: _safety.checked_h5_dataset(f, k, name) for k in keys}
        committed = 0
        for key in keys:  # every declared size checked before the first read
            committed += _safety.check_declared_size(name, key, nodes[key].shape, nodes[key].dtype, committed)
        data = {k: _safety.read_h5_dataset(f, k, name) for k in keys}
        next_observations = data.pop("next_observations", None)
        log_probs = data.pop(_LOG_PROBS, None)
        try:
            extras = {"infos": _collect(f, "infos"), "metadata": _collect(f, "metadata")} if return_extras else None
        except (OSError, TypeError) as e:
            raise ValueError(f"{name}: infos/ or metadata/ cannot be read ({e})") from None

    n = data["observations"].shape[0] if data["observations"].ndim else 0
    for key in D4RL_REQUIRED_KEYS[1:]:
        rows = data[key].shape[0] if data[key].ndim else 0
        if rows != n:
            raise ValueError(f"{name}: {key} has {rows} rows, observations has {n}")
    if next_observations is not None and next_observations.shape != data["observations"].shape:
        raise ValueError(
            f"{name}: next_observations has shape {next_observations.shape}, "
            f"observations has {data['observations'].shape}"
        )

    terminals = data["terminals"]
    timeouts = data["timeouts"]
    for key, flags in (("terminals", terminals), ("timeouts", timeouts)):
        if flags.ndim != 1 and not (flags.ndim == 2 and flags.shape[1] == 1):
            raise ValueError(f"{name}: {key} has shape {flags.shape}, expected ({n},): one 0/1 flag per step")
        if flags.dtype != np.bool_:
            flags = flags.reshape(n)
            bad = (flags != 0) & (flags != 1)
            if bad.any():
                i = int(np.argmax(bad))
                raise ValueError(f"{name}: {key}[{i}] is {flags[i].item()!r}, expected 0 or 1")
    terminals = np.asarray(terminals).reshape(n).astype(bool)
    timeouts = np.asarray(timeouts).reshape(n).astype(bool) & ~terminals

    behaviour = None
    if log_probs is not None:
        if log_probs.ndim != 1 and not (log_probs.ndim == 2 and log_probs.shape[1] == 1):
            raise ValueError(f"{name}: {_LOG_PROBS} has shape {log_probs.shape}, expected ({n},)")
        log_probs = np.asarray(log_probs, dtype=np.float64).reshape(-1)
        if log_probs.shape[0] != n:
            raise ValueError(f"{name}: {_LOG_PROBS} has {log_probs.shape[0]} rows, observations has {n}")
        with np.errstate(over="ignore", under="ignore"):
            behaviour = np.exp(log_probs)
        if not (np.isfinite(behaviour).all() and (behaviour > 0).all()):
            warnings.warn(
                f"{name}: {_LOG_PROBS} has values whose exp is 0, inf or nan; behaviour probabilities are not kept"
            )
            behaviour = None

    try:
        dataset = _build(data, terminals, timeouts, next_observations, behaviour, action_space, action_size,
                         transition_picker, trajectory_slicer)
    except (ValueError, TypeError) as e:
        raise type(e)(f"{name}: {e}") from None
    if return_extras:
        return dataset, extras
    return dataset
