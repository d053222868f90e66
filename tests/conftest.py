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
# in the working directory (a fit without logger_adapter) fails the session.
_STRAY = ("offrl_logs", "d3rlpy_logs")
_existing_stray = {name for name in _STRAY if os.path.exists(name)}


def pytest_sessionfinish(session, exitstatus):
    created = [name for name in _STRAY if os.path.exists(name) and name not in _existing_stray]
    if created:
        print(f"\ntests wrote {created} in the working directory {os.getcwd()}: "
              "pass logger_adapter (NoopAdapterFactory or FileAdapterFactory(tmp_path)) in the test that did")
        session.exitstatus = 1
