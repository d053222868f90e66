"""Importers that stream to a disk dataset (tables larger than memory).

:func:`from_dataframe_chunks` reads a table of logged steps chunk by chunk
(``pandas.read_csv(..., chunksize=...)``, ``pyarrow`` record batches turned
into DataFrames, any iterable of DataFrames), converts each chunk with
:func:`offrl.datasets.from_dataframe` (same columns, same checks) and
appends its complete episodes to a :class:`offrl.dataset.DiskDatasetWriter`;
only one chunk (plus the rows of the episode still open at its end) is in
memory at a time. ``load_d4rl_hdf5(..., to=...)`` is the D4RL-format
counterpart.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterable, Iterator, Optional, Union

import numpy as np

from ..constants import ActionSpace
from ..dataset.compat import MDPDataset

__all__ = ["from_dataframe_chunks", "closed_or_discarded"]

PathLike = Union[str, os.PathLike]


@contextlib.contextmanager
def closed_or_discarded(writer: Any) -> Iterator[Any]:
    """Around writing a disk dataset with ``writer`` (a
    :class:`~offrl.dataset.DiskDatasetWriter`): closed (moved into place) at
    the end, discarded on any error, one from ``close`` included."""
    try:
        yield writer
        writer.close()
    except BaseException:
        writer.abort()
        raise


def check_layout(layout: Optional[str], writes_to_disk: bool) -> str:
    """The disk layout a streaming importer writes at ``to``: ``layout``
    checked against :data:`offrl.dataset.disk.LAYOUTS` before anything is
    read or written (``None``: ``"rows"``, the writer's default). A layout
    without ``to`` means nothing (an in-memory read has no layout) and is
    refused."""
    from ..dataset.disk import LAYOUTS

    if layout is not None and not writes_to_disk:
        raise ValueError(
            f"layout={layout!r} is the layout of the disk dataset written at to=; "
            "pass to=<a new directory> as well, or leave layout out for an in-memory read"
        )
    if layout is None:
        return "rows"
    if not isinstance(layout, str) or layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    return layout


def _show(value: Any) -> str:
    return repr(value.item() if isinstance(value, np.generic) else value)


def from_dataframe_chunks(
    chunks: Iterable[Any],
    to: PathLike,
    episode_column: str,
    observation_columns: Any,
    action_columns: Any,
    reward_column: str,
    *,
    action_space: Optional[ActionSpace] = None,
    action_size: Optional[int] = None,
    transition_picker: Any = None,
    trajectory_slicer: Any = None,
    layout: str = "rows",
    **options: Any,
) -> MDPDataset:
    """Build a disk dataset at ``to`` from DataFrame chunks of one table.

    The rows of an episode must be contiguous in the table (they may span
    chunks); episodes are written in the order they end. A table sorted by
    ``episode_column`` gives exactly ``from_dataframe``'s dataset (which
    sorts episodes by id). ``options`` are ``from_dataframe``'s other
    arguments (``terminal_column``, ``timeout_column``, ``step_column``,
    ``behaviour_probability_column``). Returns the dataset opened with
    ``in_memory=False``; on any error the partial directory is removed.

    ``layout`` is the disk layout written (:class:`DiskDatasetWriter`'s):
    ``"rows"`` (the default: each step's fields in one record, one read per
    sampled transition) or ``"columns"`` (one file per field, schema
    version 1, readable by offrls before the rows layout). Both read back
    identically.

    Raises:
        ValueError naming the chunk and the episode when an episode's rows
        are not contiguous (it reappears after a later episode started),
        ``from_dataframe``'s errors prefixed with the chunk number, and
        a ``layout`` not in ``("rows", "columns")`` (before anything is
        written).
    """
    import pandas as pd

    from ..dataset.disk_writer import DiskDatasetWriter
    from .tabular import from_dataframe

    if isinstance(chunks, (str, os.PathLike)) or hasattr(chunks, "columns"):
        raise TypeError(
            "chunks must be an iterable of DataFrames (e.g. pandas.read_csv(path, chunksize=100_000)); "
            f"got {type(chunks).__name__}: for one table use from_dataframe"
        )
    layout = check_layout(layout, True)
    space = None if action_space is None else ActionSpace.parse(action_space)
    writer = DiskDatasetWriter(to, action_space=space, action_size=action_size, layout=layout)
    seen: set = set()
    state = {"space": space}

    def write(table: Any, where: str) -> None:
        ids = table[episode_column]
        present = set(ids.unique().tolist()) if not ids.isna().any() else set()
        again = present & seen
        if again:
            first = sorted(again, key=repr)[0]
            raise ValueError(
                f"{where}: episode {_show(first)} (column {episode_column!r}) has rows after another episode "
                "started: the rows of an episode must be contiguous (sort the table by episode first)"
            )
        try:
            dataset = from_dataframe(
                table, episode_column, observation_columns, action_columns, reward_column,
                action_space=state["space"], action_size=action_size, **options,
            )
        except (ValueError, TypeError) as e:
            raise type(e)(f"{where}: {e}") from None
        state["space"] = dataset.dataset_info.action_space
        for episode in dataset.episodes:
            writer.add_episode(episode)
        seen.update(present)

    with closed_or_discarded(writer):
        carry = None
        for i, chunk in enumerate(chunks):
            if not hasattr(chunk, "columns"):
                raise TypeError(f"chunk {i} is a {type(chunk).__name__}, expected a pandas DataFrame")
            table = chunk if carry is None else pd.concat([carry, chunk])
            if len(table) == 0:
                continue
            if episode_column not in table.columns:
                raise ValueError(f"chunk {i}: episode_column: column {episode_column!r} is not in the table")
            ids = table[episode_column]
            last = ids.iloc[-1]
            open_rows = (ids == last).to_numpy()
            carry = table[open_rows]  # the episode still open at the chunk's end
            if not open_rows.all():
                write(table[~open_rows], f"chunk {i}")
        if carry is not None and len(carry):
            write(carry, "the last chunk")
    return MDPDataset.load(to, transition_picker=transition_picker, trajectory_slicer=trajectory_slicer,
                           in_memory=False)
