"""``pytest -m fuzz`` selects only this suite and raises its budget to a long
campaign; the default run (``-m 'not slow'``) keeps a few examples per test."""

from __future__ import annotations

import os

from fuzz_budget import LONG_CAMPAIGN_EXAMPLES


def pytest_configure(config) -> None:
    markexpr = config.getoption("markexpr", "") or ""
    if "fuzz" in markexpr and "not fuzz" not in markexpr:
        os.environ.setdefault("OFFRL_FUZZ_EXAMPLES", str(LONG_CAMPAIGN_EXAMPLES))
