"""Comparisons shared by the streaming-importer tests (``to=``): a disk
dataset written by an importer against the in-memory read of the same
source."""

from __future__ import annotations

import json

import numpy as np


def assert_same_rows(memory, disk):
    """Every stored column, row for row (final-observation rows included),
    the episode table and the dataset info of the two datasets are equal."""
    from offrl.dataset import DiskStore

    a, b = memory.buffer, disk.buffer
    assert isinstance(b, DiskStore) and not isinstance(a, DiskStore)
    assert type(disk) is type(memory) and disk.dataset_info == memory.dataset_info
    assert disk.transition_count == memory.transition_count
    rows_a, rows_b = slice(a.head, a.tail), slice(b.head, b.tail)
    assert len(a.observations) == len(b.observations)
    for x, y in zip(a.observations, b.observations):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(x[rows_a], y[rows_b])
    for name in ("actions", "rewards"):
        x, y = getattr(a, name)[rows_a], getattr(b, name)[rows_b]
        assert x.dtype == y.dtype, name
        np.testing.assert_array_equal(x, y, err_msg=name)
    if a.behaviour_probabilities is None:
        assert b.behaviour_probabilities is None
    else:
        np.testing.assert_array_equal(a.behaviour_probabilities[rows_a], b.behaviour_probabilities[rows_b])
    for x, y in zip(a.episode_table(), b.episode_table()):
        np.testing.assert_array_equal(x - (a.head if x.dtype.kind == "i" else 0),
                                      y - (b.head if y.dtype.kind == "i" else 0))


def assert_layout(path, layout):
    """The disk dataset at ``path`` was written in ``layout``: its manifest
    says so and it holds the record file (rows) or no record file (columns)."""
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest.get("layout", "columns") == layout
    assert ((path / "records.bin").exists()) == (layout == "rows")
