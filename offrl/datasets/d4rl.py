"""D4RL-format HDF5 files (the layout of D4RL's dataset files and of files
written to match it).

A file holds step-aligned datasets at its root: ``observations`` ``(N, ...)``,
``actions`` ``(N, action_dim)``, ``rewards`` ``(N,)``, ``terminals`` ``(N,)``
and ``timeouts`` ``(N,)`` (0/1 flags), optionally ``next_observations``
``(N, ...)``, per-step ``infos/*`` (e.g. ``infos/qpos``,
``infos/action_log_probs``) and ``metadata/*`` (e.g. ``metadata/algorithm``).
"""

from __future__ import annotations

import contextlib
import os
import warnings
from typing import Any, Dict, Iterator, Optional, Tuple, Union

import numpy as np

from .. import _safety
from ..constants import ActionSpace
from ..dataset import checks
from ..dataset.io import MAX_DISCRETE_ACTION_SIZE, check_discrete_action_size, describe_h5_sizes
from ..dataset.compat import MDPDataset
from ._build import dataset_from_rows, episode_layout
from .streaming import check_layout, closed_or_discarded

__all__ = ["load_d4rl_hdf5", "describe_d4rl_hdf5", "D4RL_REQUIRED_KEYS"]

D4RL_REQUIRED_KEYS = ("observations", "actions", "rewards", "terminals", "timeouts")
_LOG_PROBS = "infos/action_log_probs"

PathLike = Union[str, os.PathLike]


def _collect(group: Any, prefix: str, max_expansion: Optional[float] = _safety.DEFAULT_MAX_EXPANSION) -> dict:
    """Every dataset under ``group`` by its path relative to it (sizes and
    the expansion of compressed ones checked before the first read)."""
    nodes: list = []

    def visit(name: str, node: Any) -> None:
        if hasattr(node, "shape") and node.shape is not None:
            _safety.check_declared_size(f"{group.file.filename}: {prefix}/{name}", "the dataset", node.shape, node.dtype)
            nodes.append((name, node))

    if prefix in group:
        if not isinstance(group.get(prefix, getlink=True), __import__("h5py").HardLink):
            raise ValueError(f"{group.file.filename}: {prefix} is a link; offrl reads only data stored in the file itself")
        group[prefix].visititems(visit)
    _safety.check_expansion(f"{group.file.filename}: {prefix}/", [(f"{prefix}/{k}", n) for k, n in nodes],
                            max_expansion)
    out: dict = {}
    for name, node in nodes:
        value = node[()]
        if isinstance(value, bytes):  # metadata text; bytes that are not UTF-8 are kept readable
            value = value.decode("utf-8", errors="replace")
        out[name] = value
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
    checks.check_float32(observations, "observations")
    rewards = checks.as_rewards(data["rewards"], n)
    actions, space, size = checks.as_actions(
        data["actions"], n, None if action_space is None else ActionSpace.parse(action_space), action_size
    )
    if space == ActionSpace.DISCRETE:
        check_discrete_action_size(size, "", actions)
    if behaviour is not None:
        behaviour = checks.as_behaviour_probabilities(behaviour, n, space)

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
        checks.check_float32(next_observations[ends[has_final] - 1], "next_observations")
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
    to: Optional[PathLike] = None,
    chunk_rows: int = 1 << 20,
    layout: Optional[str] = None,
    max_expansion: Optional[float] = _safety.DEFAULT_MAX_EXPANSION,
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
        to: a new directory: stream the file there as a disk dataset
            (:class:`offrl.dataset.DiskDatasetWriter`), reading about
            ``chunk_rows`` rows at a time, and return it opened with
            ``in_memory=False``: a file larger than memory imports in
            bounded memory (only the per-step flags are read whole).
        layout: with ``to``, the disk layout written
            (:class:`offrl.dataset.DiskDatasetWriter`'s): ``"rows"`` (what
            ``None``, the default, writes: each step's fields in one
            record, one read per sampled transition) or ``"columns"`` (one
            file per field, schema version 1, readable by offrls before the
            rows layout). Both read back identically. Without ``to`` it is
            refused (an in-memory read has no layout).
        max_expansion: a file whose compressed arrays would expand to more
            than this many times the bytes it stores for them is refused
            before anything is read (None: no bound; see SECURITY.md).

    Raises:
        ValueError naming the file and the key: not HDF5, a required key
        missing, lengths that differ, NaN / inf values, bad flags; and a
        ``layout`` not in ``("rows", "columns")`` or given without ``to``
        (before the file is opened).
    """
    layout = check_layout(layout, to is not None)
    _safety.check_max_expansion(max_expansion)
    with _open_d4rl(path) as (name, f, nodes):
        keys = list(nodes)
        if to is not None:  # streamed in bounded memory; decompressing still takes time
            _safety.check_expansion(name, nodes.items(), max_expansion)
            dataset = _stream(name, nodes, to, int(chunk_rows), action_space, action_size,
                              transition_picker, trajectory_slicer, layout)
            if return_extras:
                try:
                    return dataset, {"infos": _collect(f, "infos", max_expansion),
                                     "metadata": _collect(f, "metadata", max_expansion)}
                except (OSError, TypeError) as e:
                    raise ValueError(f"{name}: infos/ or metadata/ cannot be read ({e})") from None
            return dataset
        committed = 0
        for key in keys:  # every declared size checked before the first read
            committed += _safety.check_declared_size(name, key, nodes[key].shape, nodes[key].dtype, committed)
        _safety.check_expansion(name, nodes.items(), max_expansion)
        data = {k: _safety.read_h5_dataset(f, k, name) for k in keys}
        next_observations = data.pop("next_observations", None)
        log_probs = data.pop(_LOG_PROBS, None)
        try:
            extras = None
            if return_extras:
                extras = {"infos": _collect(f, "infos", max_expansion), "metadata": _collect(f, "metadata", max_expansion)}
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


def describe_d4rl_hdf5(path: PathLike) -> dict:
    """What a D4RL-format file holds, from its metadata only (no array is
    read, so a file that would expand to gigabytes is described at once):
    step count, per-step dtypes and shapes, the optional datasets present,
    and the size in memory against the size on disk. Episodes are counted
    from the per-step flags when the file is loaded."""
    import h5py

    with _open_d4rl(path) as (name, f, nodes):
        extras: list = []
        for prefix in ("infos", "metadata"):
            if prefix in f and isinstance(f.get(prefix, getlink=True), h5py.HardLink):
                f[prefix].visititems(lambda k, node, p=prefix: extras.append(f"{p}/{k}") if hasattr(node, "shape") else None)
        observations, actions = nodes["observations"], nodes["actions"]
        discrete = actions.dtype.kind in "iu"
        return {
            "format": "D4RL-format HDF5",
            "episodes": "counted from terminals and timeouts when loaded",
            "steps": int(observations.shape[0]) if observations.shape else 0,
            "observation_signature": f"{observations.dtype.name}{tuple(observations.shape[1:])}",
            "action_signature": f"{actions.dtype.name}{tuple(actions.shape[1:])}",
            "action_space": "discrete" if discrete else "continuous",
            "action_size": "the largest action + 1 (read on load)" if discrete else int(np.prod(actions.shape[1:])),
            "next_observations": "next_observations" in nodes,
            "behaviour_probabilities": _LOG_PROBS in nodes,
            "extras": ", ".join(extras[:20]) + (f" ... ({len(extras)} in all)" if len(extras) > 20 else "") or "none",
            "size": describe_h5_sizes(nodes.items()),
        }


@contextlib.contextmanager
def _open_d4rl(path: PathLike) -> Iterator[Tuple[str, Any, Dict[str, Any]]]:
    """A D4RL-format HDF5 file, open: its name, the h5py file and its checked
    datasets by key (the required ones, then ``next_observations`` and the
    behaviour log-probabilities where present), no array read yet."""
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
        yield name, f, {k: _safety.checked_h5_dataset(f, k, name) for k in keys}


def _read_rows(node: Any, name: str, key: str, a: int, b: int) -> np.ndarray:
    try:
        return node[a:b]
    except (OSError, ValueError, TypeError) as e:
        raise ValueError(f"{name}: {key} cannot be read, the file is corrupt or truncated ({e})") from None


def _flags(node: Any, name: str, key: str, n: int) -> np.ndarray:
    """A 0/1 flag per step as bool, read whole (one byte a step)."""
    if node.shape not in ((n,), (n, 1)):
        raise ValueError(f"{name}: {key} has shape {node.shape}, expected ({n},): one 0/1 flag per step")
    flags = _safety.read_h5_dataset(node.parent, key, name).reshape(n)
    if flags.dtype != np.bool_:
        i = checks.first_non_flag(flags)
        if i is not None:
            raise ValueError(f"{name}: {key}[{i}] is {flags[i].item()!r}, expected 0 or 1")
    return flags.astype(bool)


def _stream(
    name: str, nodes: dict, to: PathLike, chunk_rows: int, action_space: Any, action_size: Optional[int],
    transition_picker: Any, trajectory_slicer: Any, layout: str = "rows",
) -> MDPDataset:
    """``load_d4rl_hdf5(..., to=...)``: episodes written to a disk dataset a
    chunk of rows at a time, with the in-memory import's checks."""
    from ..dataset.disk_writer import DiskDatasetWriter
    from ..dataset.episode import Episode

    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    obs_node = nodes["observations"]
    if len(obs_node.shape) < 1 or obs_node.shape[0] == 0:
        raise ValueError(f"{name}: the file holds no steps")
    n = int(obs_node.shape[0])
    for key in ("actions", "rewards"):
        rows = nodes[key].shape[0] if len(nodes[key].shape) else 0
        if rows != n:
            raise ValueError(f"{name}: {key} has {rows} rows, observations has {n}")
    next_node = nodes.get("next_observations")
    if next_node is not None and next_node.shape != obs_node.shape:
        raise ValueError(f"{name}: next_observations has shape {next_node.shape}, observations has {obs_node.shape}")
    terminals = _flags(nodes["terminals"], name, "terminals", n)
    timeouts = _flags(nodes["timeouts"], name, "timeouts", n) & ~terminals
    log_node = nodes.get(_LOG_PROBS)
    keep_behaviour = log_node is not None
    if log_node is not None:
        if log_node.shape not in ((n,), (n, 1)):
            raise ValueError(f"{name}: {_LOG_PROBS} has shape {log_node.shape}, expected ({n},)")
        for a in range(0, n, chunk_rows):  # decided over the whole column first, as in memory
            with np.errstate(over="ignore", under="ignore"):
                values = np.exp(np.asarray(_read_rows(log_node, name, _LOG_PROBS, a, a + chunk_rows), np.float64))
            if not (np.isfinite(values).all() and (values > 0).all()):
                warnings.warn(
                    f"{name}: {_LOG_PROBS} has values whose exp is 0, inf or nan; behaviour probabilities are not kept"
                )
                keep_behaviour = False
                break
    ends = np.flatnonzero(terminals | timeouts) + 1
    if ends.size == 0 or ends[-1] != n:
        ends = np.append(ends, n)
    starts = np.concatenate(([0], ends[:-1]))
    if action_space is None:
        dtype = nodes["actions"].dtype
        action_space = ActionSpace.DISCRETE if np.issubdtype(dtype, np.integer) else ActionSpace.CONTINUOUS
    discrete = ActionSpace.parse(action_space) == ActionSpace.DISCRETE
    writer = DiskDatasetWriter(to, action_space=action_space, action_size=action_size, layout=layout)
    with closed_or_discarded(writer):
        first = 0
        while first < starts.shape[0]:
            a = int(starts[first])
            last = int(np.searchsorted(ends, a + chunk_rows, side="right"))  # episodes that fit the chunk
            last = max(last, first + 1)
            b = int(ends[last - 1])
            chunk = {k: _read_rows(nodes[k], name, k, a, b) for k in ("observations", "actions", "rewards")}
            if discrete and np.any(np.asarray(chunk["actions"]) >= MAX_DISCRETE_ACTION_SIZE):  # nan: refused later
                check_discrete_action_size(MAX_DISCRETE_ACTION_SIZE + 1, name, chunk["actions"], first_row=a)
            nxt = None if next_node is None else _read_rows(next_node, name, "next_observations", a, b)
            logp = None if not keep_behaviour else np.asarray(_read_rows(log_node, name, _LOG_PROBS, a, b), np.float64)
            for e in range(first, last):
                s, t = int(starts[e]) - a, int(ends[e]) - a
                terminated = bool(terminals[a + t - 1])
                obs = chunk["observations"][s:t]
                final = None if nxt is None or terminated else nxt[t - 1]
                if obs.ndim == 1:
                    obs = obs[:, None]
                    final = None if final is None else np.atleast_1d(final)
                behaviour = None
                if logp is not None:
                    with np.errstate(over="ignore", under="ignore"):
                        behaviour = np.exp(logp[s:t].reshape(-1))
                try:
                    writer.add_episode(Episode(
                        observations=obs, actions=chunk["actions"][s:t], rewards=chunk["rewards"][s:t],
                        terminated=terminated, final_observation=final, behaviour_probabilities=behaviour,
                    ))
                except (ValueError, TypeError) as err:
                    raise type(err)(f"{name}: steps {a + s}..{a + t - 1}: {err}") from None
            first = last
    return MDPDataset.load(to, transition_picker=transition_picker, trajectory_slicer=trajectory_slicer,
                           in_memory=False)
