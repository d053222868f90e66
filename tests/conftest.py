"""Test-wide settings."""

import os

import torch
from hypothesis import settings

# The networks in the tests are small: one intra-op thread is as fast as two
# and does not thrash when the machine is shared, so timings stay steady.
torch.set_num_threads(1)

# CI replays the same examples every run (a failure found locally is kept as
# a plain test); local runs keep exploring new ones.
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")


# Tests write only under pytest's tmp_path: a run that leaves a log folder
# in the working directory (a fit without logger_adapter) fails the session,
# also where such a folder was there before (its new entries count).
_STRAY = ("offrl_logs", "d3rlpy_logs")


def _entries(name):
    return set(os.listdir(name)) if os.path.isdir(name) else None


_existing_stray = {name: _entries(name) for name in _STRAY}


def pytest_sessionfinish(session, exitstatus):
    created = []
    for name in _STRAY:
        now, before = _entries(name), _existing_stray[name]
        if now is not None and (before is None or now - before):
            created.append(name if before is None else f"{name}/{sorted(now - before)[0]}")
    if created:
        print(f"\ntests wrote {created} in the working directory {os.getcwd()}: "
              "pass logger_adapter (NoopAdapterFactory or FileAdapterFactory(tmp_path)) in the test that did")
        session.exitstatus = 1
