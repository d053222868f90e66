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
