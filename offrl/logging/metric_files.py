"""The metric CSVs of a file-logged run (``<metric>.csv``, rows
``epoch,step,value``) as a resumed run finds them.

A run resumed from its checkpoint appends to its metric files after the rows
written after that checkpoint are dropped (:func:`truncate_metric_files`).
Files are rewritten atomically, and a metric file that is a symbolic link is
written through: the file it points to is updated and the link stays (a user
who linked a metric file elsewhere, to a dashboard's folder say, keeps
seeing it there).
"""

from __future__ import annotations

import os
from typing import Iterator, List, Tuple

from .._atomic import atomic_write

__all__ = ["truncate_metric_files", "metric_file_lines"]


def metric_file_lines(path: str) -> Iterator[Tuple[int, bytes]]:
    """``(line number from 1, raw line with its newline)`` of the file at
    ``path``, each checked to be UTF-8 text: a line that is not raises
    ``ValueError`` naming the file, the line and the byte."""
    with open(path, "rb") as f:
        for number, line in enumerate(f, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(
                    f"{path}, line {number}: byte 0x{line[e.start]:02x} at column {e.start + 1} is not UTF-8 text; "
                    "a metric file holds rows 'epoch,step,value' (remove or fix that line, then resume again)"
                ) from None
            yield number, line


def _row_step(line: bytes) -> int:
    """The step of a metric row ``epoch,step,value``; ValueError for any
    other line."""
    parts = line.split(b",")
    if len(parts) < 2:
        raise ValueError("not a metric row")
    return int(parts[1])


def _kept(line: bytes, step: int) -> bool:
    try:
        return _row_step(line) <= step
    except ValueError:
        return True  # not a metric row (a header, a user's note): leave it


def truncate_metric_files(logdir: str, step: int) -> List[str]:
    """Drop the rows of ``logdir``'s metric CSVs written after ``step``, so
    a run resumed from its checkpoint at ``step`` appends from there on.
    Lines that are not metric rows are kept; a last line without its
    newline (the torn end of an append that was interrupted) is dropped if
    it is a metric row, else given its newline. Links are written through,
    other files that are not regular files are skipped. A line that is not
    UTF-8 raises ``ValueError`` naming the file and the line, before that
    file is changed. Returns the paths rewritten."""
    rewritten: List[str] = []
    for name in sorted(os.listdir(logdir)):
        path = os.path.join(logdir, name)
        if not name.endswith(".csv") or not os.path.isfile(path):
            continue
        changed = False
        for _, line in metric_file_lines(path):
            if not _kept(line, step) or not line.endswith(b"\n"):
                changed = True  # read to the end anyway: every line is checked before any is written
        if not changed:
            continue

        def write(tmp: str, path: str = path) -> None:
            with open(tmp, "wb") as out:
                for _, line in metric_file_lines(path):
                    if line.endswith(b"\n"):
                        if _kept(line, step):
                            out.write(line)
                    elif not _is_metric_row(line):
                        out.write(line + b"\n")

        atomic_write(path, write, follow_symlinks=True)
        rewritten.append(path)
    return rewritten


def _is_metric_row(line: bytes) -> bool:
    try:
        _row_step(line)
    except ValueError:
        return False
    return True
