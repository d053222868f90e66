"""Pytest plugin for .ci/cpu_variants.sh: run the tests with the number of
torch intra-op threads in ``OFFRL_TEST_THREADS``.

tests/conftest.py pins one thread when it is imported; this hook runs after
every conftest is loaded, so the variant's thread count wins. Different
thread counts split reductions differently, which is what the variant run
is for: tolerances that only hold for one split show up.
"""

from __future__ import annotations

import os

import pytest


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """Set the thread count once collection (and every conftest) is done."""
    value = os.environ.get("OFFRL_TEST_THREADS")
    if not value:
        return
    import torch

    threads = int(value)
    if threads < 1:
        raise ValueError(f"OFFRL_TEST_THREADS must be a positive integer, got {value!r}")
    torch.set_num_threads(threads)
