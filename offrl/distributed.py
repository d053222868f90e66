"""d3rlpy's ``distributed`` module: process-group set-up for data-parallel
training under ``torchrun`` (see :mod:`offrl.training.distributed` for how
``create(device, enable_ddp=True)`` trains)."""

from __future__ import annotations

from .training.distributed import (LAUNCH_HINT, RankFailedError, destroy_process_group, global_batches,
                                init_process_group, shard)

__all__ = ["init_process_group", "destroy_process_group", "global_batches", "shard", "RankFailedError", "LAUNCH_HINT"]
