"""Test-wide settings."""

import torch

# The networks in the tests are small: one intra-op thread is as fast as two
# and does not thrash when the machine is shared, so timings stay steady.
torch.set_num_threads(1)
