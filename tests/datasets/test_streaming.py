"""``from_dataframe_chunks``: a table streamed chunk by chunk to a disk
dataset in either layout equals ``from_dataframe``'s in-memory read row for
row; a bad ``layout`` is refused before anything is written."""

from __future__ import annotations

import re

import numpy as np
import pytest

from disk_rows import assert_layout, assert_same_rows
from offrl.dataset import DiskStore
from offrl.datasets import from_dataframe, from_dataframe_chunks

pd = pytest.importorskip("pandas", reason="from_dataframe needs pandas")

COLUMNS = ("episode", ["x0", "x1"], "a", "r")
OPTIONS = dict(terminal_column="done", step_column="t", behaviour_probability_column="p")


def _table(discrete: bool, n_episodes: int = 6):
    rng = np.random.default_rng(5)
    rows = []
    for e in range(n_episodes):
        n = int(rng.integers(2, 8))
        for t in range(n):
            rows.append({
                "episode": e, "t": t, "x0": rng.normal(), "x1": rng.normal(),
                "a": int(rng.integers(0, 3)) if discrete else rng.uniform(-1, 1),
                "r": rng.normal(), "done": int(e % 2 == 0 and t == n - 1), "p": rng.uniform(0.2, 1),
            })
    return pd.DataFrame(rows)


def _chunks(df, size):
    return (df.iloc[i : i + size] for i in range(0, len(df), size))


@pytest.mark.parametrize("layout", ["rows", "columns"])
@pytest.mark.parametrize("discrete", [True, False])
@pytest.mark.parametrize("chunk", [1, 5, 1000])
def test_either_layout_equals_from_dataframe_row_for_row(tmp_path, layout, discrete, chunk):
    df = _table(discrete)
    memory = from_dataframe(df, *COLUMNS, **OPTIONS)
    disk = from_dataframe_chunks(_chunks(df, chunk), tmp_path / "out", *COLUMNS, layout=layout, **OPTIONS)
    assert_layout(tmp_path / "out", layout)
    assert isinstance(disk.buffer, DiskStore) and disk.dataset_info == memory.dataset_info
    assert_same_rows(memory, disk)
    expected, found = memory.to_arrays(), disk.to_arrays()
    for key in expected:
        np.testing.assert_array_equal(expected[key], found[key], err_msg=key)


def test_the_rows_layout_is_the_default(tmp_path):
    from_dataframe_chunks(_chunks(_table(False), 4), tmp_path / "out", *COLUMNS, **OPTIONS)
    assert_layout(tmp_path / "out", "rows")


@pytest.mark.parametrize("layout", ["Rows", "column", "", 0])
def test_an_unknown_layout_is_refused_before_anything_is_read_or_written(tmp_path, layout):
    read = []

    def chunks():
        read.append(1)
        yield _table(False)

    with pytest.raises(ValueError, match=re.escape(f"layout must be one of ('columns', 'rows'), got {layout!r}")):
        from_dataframe_chunks(chunks(), tmp_path / "out", *COLUMNS, layout=layout, **OPTIONS)
    assert read == [] and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("layout", ["rows", "columns"])
def test_a_bad_row_in_a_late_chunk_leaves_nothing_in_either_layout(tmp_path, layout):
    df = _table(False)
    df.loc[len(df) - 2, "r"] = np.nan
    with pytest.raises(ValueError, match=r"reward column 'r' is nan"):
        from_dataframe_chunks(_chunks(df, 5), tmp_path / "out", *COLUMNS, layout=layout, **OPTIONS)
    assert list(tmp_path.iterdir()) == []


def test_scattered_episodes_and_bad_rows_are_refused_and_leave_nothing(tmp_path):
    df = _table(False)
    scattered = [df[df.episode == 0], df[df.episode == 1], df[df.episode == 0].assign(t=lambda d: d.t + 100)]
    with pytest.raises(ValueError, match=r"the last chunk: episode 0 .* contiguous"):
        from_dataframe_chunks(scattered, tmp_path / "a", "episode", ["x0", "x1"], "a", "r", step_column="t")
    bad = df.copy()
    bad.loc[3, "r"] = np.nan
    with pytest.raises(ValueError, match=r"chunk [01]: reward column 'r' is nan in row 3"):
        from_dataframe_chunks(_chunks(bad, 6), tmp_path / "b", "episode", ["x0", "x1"], "a", "r")
    assert list(tmp_path.iterdir()) == []
