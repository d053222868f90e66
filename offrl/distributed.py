"""d3rlpy's ``distributed`` module: process-group set-up for data-parallel
training under ``torchrun`` (see :mod:`offrl.algos.distributed` for how
``create(device, enable_ddp=True)`` trains)."""

from __future__ import annotations

from .algos.distributed import (LAUNCH_HINT, RankFailedError, destroy_process_group, global_batches,
                                init_process_group, shard)

__all__ = ["init_process_group", "destroy_process_group", "global_batches", "shard", "RankFailedError", "LAUNCH_HINT"]
