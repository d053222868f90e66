"""The fuzz suite's budget: a few examples per test in the default run (a
few seconds in all), a long campaign under ``pytest -m fuzz`` (the
conftest sets ``OFFRL_FUZZ_EXAMPLES``) or with that variable set by hand."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

LONG_CAMPAIGN_EXAMPLES = 1000


def budget(short: int) -> settings:
    """Hypothesis settings: ``short`` examples unless a long campaign is on."""
    long = os.environ.get("OFFRL_FUZZ_EXAMPLES")
    return settings(
        max_examples=int(long) if long else short,
        deadline=None,
        database=None if not long else settings.default.database,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                               HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )
