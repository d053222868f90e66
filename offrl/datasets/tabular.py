"""Tables of logged decisions (a pandas DataFrame read from a web service's
log, a CSV or a Parquet file) as an :class:`MDPDataset`, in one call."""

from __future__ import annotations

import os
import re
from typing import Any, Optional, Sequence, Union

import numpy as np

from .. import _safety
from .._optional import optional_dependency
from ..constants import ActionSpace
from ..dataset import checks
from ..dataset.io import check_discrete_action_size
from ..dataset.compat import MDPDataset

__all__ = ["from_dataframe", "read_table"]

Columns = Union[str, Sequence[str]]


class _Rows:
    """Names rows the way a user finds them: position, and the index label
    when the frame's index is not simply 0..n-1."""

    def __init__(self, df: Any) -> None:
        index = df.index
        self._labels = None
        try:
            plain = bool((np.asarray(index) == np.arange(len(index))).all())
        except (TypeError, ValueError):
            plain = False
        if not plain:
            self._labels = index

    def __call__(self, position: int) -> str:
        if self._labels is None:
            return f"row {position}"
        return f"row {position} (index {_show(self._labels[position])})"


_FLOAT32_MAX = float(np.finfo(np.float32).max)
_PARQUET_SUFFIXES = (".parquet", ".pq")


def read_table(path: Union[str, os.PathLike]) -> Any:
    """A CSV file (UTF-8) or, by its ``.parquet`` / ``.pq`` suffix, a Parquet
    file as a pandas DataFrame; errors name the file. Only regular files are
    opened (a named pipe would block), and a Parquet file's declared size is
    checked against the memory available before it is read."""
    import pandas as pd

    name = _safety.check_regular_file(path, "table file")
    if name.lower().endswith(_PARQUET_SUFFIXES):
        with optional_dependency("reading Parquet files needs pyarrow: pip install 'offrl[minari]'"):
            import pyarrow.parquet as pq
        try:
            metadata = pq.ParquetFile(name).metadata
            declared = sum(
                metadata.row_group(g).column(c).total_uncompressed_size
                for g in range(metadata.num_row_groups) for c in range(metadata.num_columns)
            )
            _safety.check_declared_size(name, "the table", (max(declared, 0),), np.uint8)
            return pd.read_parquet(name, engine="pyarrow")
        except (OSError, ValueError, TypeError, KeyError) as e:
            if str(e).startswith(name):
                raise
            raise ValueError(f"{name} is not a readable Parquet file ({type(e).__name__}: {e})") from None
    try:
        return pd.read_csv(name, encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"{name} is not a UTF-8 CSV file: it holds the byte {e.object[e.start:e.start + 1]!r}, which "
            "is not text (is it a binary or Parquet file? give Parquet files a .parquet suffix)"
        ) from None
    except pd.errors.EmptyDataError:
        raise ValueError(f"{name} is empty: a CSV table needs a header row") from None
    except (pd.errors.ParserError, ValueError, OSError) as e:
        raise ValueError(f"{name} is not a readable CSV file ({type(e).__name__}: {e})") from None


def _show(value: Any) -> str:
    """A value as users write it (``0``, ``'u1'``), not numpy's ``np.int64(0)``."""
    return repr(value.item() if isinstance(value, np.generic) else value)


def _column_list(value: Columns, role: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    try:
        names = list(value)
    except TypeError:
        raise TypeError(f"{role} must be a column name or a list of column names, got {type(value).__name__}") from None
    if not names:
        raise ValueError(f"{role} is empty")
    return names


def _numeric(df: Any, names: list[str], role: str, rows: _Rows) -> np.ndarray:
    """``df[names]`` as a numeric ``(n, len(names))`` array; NaN/inf raise naming the row."""
    arrays = []
    for name in names:
        column = df[name]
        values = column.to_numpy()
        if values.dtype == object or not (np.issubdtype(values.dtype, np.number) or values.dtype == np.bool_):
            try:
                values = column.to_numpy(dtype=np.float64)
            except (TypeError, ValueError):
                raise TypeError(
                    f"{role} column {name!r} must be numeric, got dtype {column.dtype} "
                    "(map labels to numbers first, e.g. df[col].astype('category').cat.codes)"
                ) from None
        if values.dtype.kind == "c":
            raise TypeError(f"{role} column {name!r} holds complex numbers (dtype {values.dtype}), expected real numbers")
        if np.issubdtype(values.dtype, np.floating):
            bad = ~np.isfinite(values)
            if bad.any():
                i = int(np.argmax(bad))
                kind = "nan" if np.isnan(values[i]) else "inf"
                raise ValueError(f"{role} column {name!r} is {kind} in {rows(i)}")
            if role != "behaviour probability" and values.dtype.itemsize > 4:
                bad = np.abs(values) > _FLOAT32_MAX  # would be stored as inf in float32
                if bad.any():
                    i = int(np.argmax(bad))
                    raise ValueError(
                        f"{role} column {name!r} is {_show(values[i])} in {rows(i)}, outside float32's range"
                    )
        arrays.append(values)
    if len(arrays) == 1:
        return arrays[0][:, None]
    dtype = np.result_type(*arrays)
    return np.stack([a.astype(dtype, copy=False) for a in arrays], axis=1)


def _row_error(error: Exception, label: str, rows: _Rows) -> Exception:
    """A ``name[i] is ...`` error from the array checks, restated for row ``i``."""
    match = re.match(r"^\w+\[(\d+)\] is (.*)$", str(error))
    if not match:
        return type(error)(f"{label}: {error}")
    value, _, rest = match.group(2).partition(", ")
    return type(error)(f"{label} is {value} in {rows(int(match.group(1)))}" + (f", {rest}" if rest else ""))


def _flags(df: Any, name: Optional[str], role: str, rows: _Rows, n: int) -> np.ndarray:
    if name is None:
        return np.zeros(n, dtype=bool)
    values = _numeric(df, [name], role, rows)[:, 0]
    i = checks.first_non_flag(values)
    if i is not None:
        raise ValueError(f"{role} column {name!r} is {_show(values[i])} in {rows(i)}, expected 0 or 1")
    return values.astype(bool)


def from_dataframe(
    df: Any,
    episode_column: str,
    observation_columns: Union[Columns, Sequence[Sequence[str]]],
    action_columns: Columns,
    reward_column: str,
    terminal_column: Optional[str] = None,
    timeout_column: Optional[str] = None,
    step_column: Optional[str] = None,
    behaviour_probability_column: Optional[str] = None,
    action_space: Optional[ActionSpace] = None,
    action_size: Optional[int] = None,
    transition_picker: Any = None,
    trajectory_slicer: Any = None,
) -> MDPDataset:
    """An :class:`MDPDataset` from a table with one row per logged step.

    Rows may come in any order: they are grouped by ``episode_column``
    (episodes in sorted order of their ids) and, within an episode, ordered by
    ``step_column`` (any sortable values: step numbers, timestamps) or, without
    one, kept in table order.

    Args:
        df: a pandas DataFrame (``pip install 'offrl[tabular]'``), or the
            path of a CSV (UTF-8) or Parquet (``.parquet``) file, read with
            :func:`read_table`.
        episode_column: the episode (session, user, trajectory) id.
        observation_columns: the observation's columns; a list of lists makes
            tuple observations (one element per inner list).
        action_columns: one column of action indices (discrete) or the
            columns of a continuous action.
        reward_column: the reward of each step.
        terminal_column: 0/1, set on the last step of an episode that ended in
            a terminal state. Episodes without it are truncated.
        timeout_column: 0/1, set on the last step of an episode cut short
            (optional: every non-terminal episode is truncated anyway).
        step_column: orders the steps of an episode; duplicates raise.
        behaviour_probability_column: the logged probability (density for
            continuous actions) of each action under the logging policy,
            kept as ``dataset.behaviour_probabilities`` for off-policy
            evaluation.
        action_space, action_size: override the inferred ones.

    Raises:
        ValueError / TypeError naming the column and the row: a missing
        column, non-numeric or NaN values, duplicate steps, a terminal or
        timeout flag on a step that is not the last of its episode, a step
        flagged both terminal and timeout.
    """
    if isinstance(df, (str, os.PathLike)):
        source = os.fspath(df)
        try:
            return from_dataframe(
                read_table(df), episode_column, observation_columns, action_columns, reward_column,
                terminal_column, timeout_column, step_column, behaviour_probability_column, action_space,
                action_size, transition_picker, trajectory_slicer,
            )
        except (ValueError, TypeError) as e:
            if str(e).startswith(source):
                raise
            raise type(e)(f"{source}: {e}") from None
    if not (hasattr(df, "columns") and hasattr(df, "index") and hasattr(df, "iloc")):
        raise TypeError(f"df must be a pandas DataFrame or the path of a CSV / Parquet file, got {type(df).__name__}")
    import pandas as pd

    if isinstance(observation_columns, str):
        obs_groups = [[observation_columns]]
        is_tuple = False
    else:
        items = list(observation_columns)
        is_tuple = bool(items) and all(not isinstance(i, str) for i in items)
        obs_groups = [_column_list(g, "observation_columns") for g in items] if is_tuple else [
            _column_list(items, "observation_columns")
        ]
    action_names = _column_list(action_columns, "action_columns")
    roles = [("episode_column", episode_column), ("reward_column", reward_column)]
    roles += [("observation_columns", c) for g in obs_groups for c in g]
    roles += [("action_columns", c) for c in action_names]
    roles += [
        (role, c) for role, c in (
            ("terminal_column", terminal_column), ("timeout_column", timeout_column),
            ("step_column", step_column), ("behaviour_probability_column", behaviour_probability_column),
        ) if c is not None
    ]
    for role, column in roles:
        if column not in df.columns:
            shown = list(df.columns)[:20]
            raise ValueError(f"{role}: column {column!r} is not in the table (its columns: {shown})")
    n = len(df)
    if n == 0:
        raise ValueError("the table has no rows")
    rows = _Rows(df)

    episode_ids = df[episode_column]
    missing = episode_ids.isna().to_numpy()
    if missing.any():
        raise ValueError(f"episode column {episode_column!r} is empty in {rows(int(np.argmax(missing)))}")
    try:
        codes, uniques = pd.factorize(episode_ids, sort=True)
    except TypeError:  # ids of mixed, unorderable types
        codes, uniques = pd.factorize(episode_ids, sort=False)

    if step_column is not None:
        steps = df[step_column]
        missing = steps.isna().to_numpy()
        if missing.any():
            raise ValueError(f"step column {step_column!r} is empty in {rows(int(np.argmax(missing)))}")
        try:
            step_keys, _ = pd.factorize(steps, sort=True)  # ranks: works for numbers, timestamps, strings
        except TypeError:
            raise TypeError(f"step column {step_column!r} holds values that cannot be ordered") from None
        order = np.lexsort((step_keys, codes))
        same = (codes[order][1:] == codes[order][:-1]) & (step_keys[order][1:] == step_keys[order][:-1])
        if same.any():
            k = int(np.argmax(same))
            a, b = sorted((int(order[k]), int(order[k + 1])))
            raise ValueError(
                f"{rows(a)} and {rows(b)} both hold step {_show(steps.iloc[a])} of episode "
                f"{_show(uniques[codes[a]])} (column {step_column!r}): each step must be logged once"
            )
    else:
        order = np.argsort(codes, kind="stable")

    rewards = _numeric(df, [reward_column], "reward", rows)[:, 0]
    observations = [_numeric(df, g, "observation", rows) for g in obs_groups]
    raw_actions = _numeric(df, action_names, "action", rows)
    try:
        _, space, size = checks.as_actions(
            raw_actions, n, None if action_space is None else ActionSpace.parse(action_space), action_size,
            name="actions",
        )
        if space == ActionSpace.DISCRETE:
            check_discrete_action_size(size, "", raw_actions)
    except (ValueError, TypeError) as e:
        label = f"action column {action_names[0]!r}" if len(action_names) == 1 else f"action columns {action_names}"
        raise _row_error(e, label, rows) from None
    terminal = _flags(df, terminal_column, "terminal", rows, n)
    timeout = _flags(df, timeout_column, "timeout", rows, n)
    both = terminal & timeout
    if both.any():
        i = int(np.argmax(both))
        raise ValueError(f"{rows(i)} is flagged both terminal ({terminal_column!r}) and timeout ({timeout_column!r})")

    behaviour = None
    if behaviour_probability_column is not None:
        values = _numeric(df, [behaviour_probability_column], "behaviour probability", rows)[:, 0]
        try:
            behaviour = checks.as_behaviour_probabilities(values, n, space)
        except ValueError as e:
            raise _row_error(e, f"behaviour probability column {behaviour_probability_column!r}", rows) from None

    # episode boundaries in sorted order; flags must sit on the last step
    sorted_codes = codes[order]
    last = np.ones(n, dtype=bool)
    last[:-1] = sorted_codes[1:] != sorted_codes[:-1]
    for role, column, flags in (("terminal", terminal_column, terminal), ("timeout", timeout_column, timeout)):
        early = flags[order] & ~last
        if early.any():
            k = int(np.argmax(early))
            i = int(order[k])
            remaining = int(np.argmax(last[k:]))
            hint = "" if step_column is not None else " (rows are kept in table order: give step_column to sort them)"
            raise ValueError(
                f"{rows(i)} sets {role} column {column!r} but episode {_show(uniques[codes[i]])} goes on for "
                f"{remaining} more step(s){hint}"
            )
    terminals = terminal[order] & last
    timeouts = last & ~terminals

    try:
        return MDPDataset(
            [o[order] for o in observations] if is_tuple else observations[0][order],
            raw_actions[order],
            rewards[order],
            terminals,
            timeouts,
            transition_picker=transition_picker,
            trajectory_slicer=trajectory_slicer,
            action_space=space,
            action_size=size,
            behaviour_probabilities=None if behaviour is None else behaviour[order],
        )
    except (ValueError, TypeError) as e:  # pragma: no cover - inputs were checked row by row above
        raise type(e)(f"from_dataframe: {e}") from None
