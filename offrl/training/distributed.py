"""Data-parallel training under ``torchrun`` (``create(device, enable_ddp=True)``).

Start the script with ``torchrun --nproc_per_node=N script.py`` (or
``offrl fit ... --nproc N``). The default process group is initialised
from torchrun's environment (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``) when
the algorithm is created, unless the script initialised one itself: gloo
on CPU, NCCL on CUDA (each rank on ``cuda:LOCAL_RANK`` when the device
asks for CUDA).

**How gradients are shared.** Every rank holds the same networks (rank
0's initial weights are broadcast once they are built). Before each
optimizer step the gradients of that optimizer's parameters are averaged
over the ranks with one flat all-reduce, then the step runs (gradient
clipping included, so it clips the averaged gradient as one process
would). The networks are not wrapped in ``DistributedDataParallel``:
offrl's algorithms run several forward passes and several optimizers per
step (critic, actor, temperature), call networks held as attributes, and
leave some parameters without gradients in some steps, which DDP's
one-forward/one-backward reducer does not cover. Averaging at the
optimizer step works the same for every algorithm through the base
class's optimizers, and the saved weights carry no ``module.`` prefix: a
model saved under torchrun loads in a single process.

**What each rank samples.** By default the dataset's episodes are split by
rank (episode ``i`` goes to rank ``i % N``) and each rank samples
``batch_size`` transitions per step from its shard with its own generator
(seeded from rank 0's offrl generator and the rank), so a step sees
``N * batch_size`` transitions. :func:`global_batches` ``(dataset)``
instead makes every rank draw the same global batch of ``batch_size`` from
the whole dataset (every rank must call ``offrl.seed(n)`` with the same
``n``: checked) and train on its ``batch_size / N`` rows: the result then
matches one process trained on the same data order.

**Memory.** To never hold the whole dataset, write it once as a disk
dataset (``offrl.dataset.dump_disk_dataset`` or ``DiskDatasetWriter``) and
have every rank open it in place, ``ReplayBuffer.load(directory,
in_memory=False)``: the rank's shard is then a view over the same
memory-mapped files (only its episode table is new; nothing is copied) and
a rank reads only the rows it samples, which the page cache shares between
the ranks of a machine. An in-memory dataset passed to ``fit`` was loaded
by the user on every rank; ``fit`` samples from a copy of the rank's shard
(``1/N`` of it) and does not touch the rest after fitting the scalers. To
hold only a shard in memory, pass :func:`shard` ``(dataset)`` (and ``del``
the full one): the scalers are then fitted on rank 0's shard and broadcast,
so every rank scales identically (give fitted scalers for whole-dataset
statistics).

**Logging and saving.** Rank 0 alone logs, evaluates and saves (the other
ranks log nothing); evaluation must take less than the collective timeout.

**Faults.** Collectives time out after ``OFFRL_DDP_TIMEOUT`` seconds (300
by default). When a rank fails, the others stop with
:class:`RankFailedError` naming it (a rank that raised records its error
in the rendezvous store; one killed outright is found by its process id
on the same machine). Models are written atomically, so no half-written
model is left behind. A process group offrl created is destroyed at exit,
after a barrier with the other ranks unless this rank failed (a gloo group
left to interpreter teardown sometimes aborted the process).
"""

from __future__ import annotations

import atexit
import dataclasses
import datetime
import hashlib
import os
import socket
import sys
from typing import Any, List, Sequence


import numpy as np
import torch

from .. import _random

__all__ = [
    "LAUNCH_HINT",
    "RankFailedError",
    "DDPContext",
    "in_torchrun",
    "ensure_process_group",
    "init_process_group",
    "destroy_process_group",
    "global_batches",
    "shard",
    "GlobalBatches",
    "Shard",
]

LAUNCH_HINT = ("start the script with `torchrun --nproc_per_node=N script.py` (or `offrl fit ... --nproc N`), "
               "which sets RANK, WORLD_SIZE and MASTER_ADDR; offrl then initialises the process group")

#: environment variable: seconds a collective waits for the other ranks
TIMEOUT_ENV = "OFFRL_DDP_TIMEOUT"
DEFAULT_TIMEOUT_S = 300.0


#: a collective failed or this rank recorded an error: no barrier at exit
_FAILED = False


class RankFailedError(RuntimeError):
    """Another rank failed (raised, was killed or stopped answering)."""


def in_torchrun() -> bool:
    """Whether this process was started by torchrun (or an equivalent launcher)."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR"))


def _timeout() -> datetime.timedelta:
    raw = os.environ.get(TIMEOUT_ENV, str(DEFAULT_TIMEOUT_S))
    try:
        seconds = float(raw)
    except ValueError:
        raise ValueError(f"{TIMEOUT_ENV} must be a number of seconds, got {raw!r}") from None
    if not seconds > 0:
        raise ValueError(f"{TIMEOUT_ENV} must be > 0 seconds, got {raw!r}")
    return datetime.timedelta(seconds=seconds)


def init_process_group(backend: str) -> int:
    """d3rlpy's ``init_process_group(backend)``: initialise the default group
    from torchrun's environment (with offrl's collective timeout); returns
    this process's rank."""
    import torch.distributed as dist

    if not isinstance(backend, str) or backend not in ("gloo", "nccl", "mpi"):
        raise ValueError(f"backend must be 'gloo', 'nccl' or 'mpi', got {backend!r}")
    if not dist.is_initialized():
        if not in_torchrun():
            raise ValueError(f"no torch.distributed environment: {LAUNCH_HINT}")
        dist.init_process_group(backend, timeout=_timeout())
        # a group left to interpreter teardown can abort the process ("terminate called without an active
        # exception") after training finished: the group offrl created is destroyed at exit
        atexit.register(_destroy_at_exit)
    _register()
    return dist.get_rank()


def destroy_process_group() -> None:
    """Tear down the default process group (no-op when there is none)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def _destroy_at_exit() -> None:
    """Wait for the other ranks (so no rank tears down a connection another
    still uses), then destroy the group; failures at exit are ignored."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        try:
            # after a failure (recorded, or an uncaught exception ending the script) the others may never arrive
            if not _FAILED and getattr(sys, "last_value", None) is None:
                dist.barrier()
        except Exception:  # noqa: BLE001 - another rank already failed: destroy anyway
            pass
        dist.destroy_process_group()


def ensure_process_group(device: torch.device) -> None:
    """Make sure the default process group exists: use the script's own, or
    initialise one from torchrun's environment (gloo on CPU, NCCL on CUDA).
    Raises ``ValueError`` with the launch command outside torchrun."""
    import torch.distributed as dist

    if not dist.is_available():
        raise ValueError("enable_ddp=True: this torch build has no torch.distributed")
    if dist.is_initialized():
        _register()
        return
    if not in_torchrun():
        raise ValueError(f"enable_ddp=True needs a torch.distributed process group: {LAUNCH_HINT}")
    init_process_group("nccl" if device.type == "cuda" else "gloo")


def ddp_device(device: torch.device) -> torch.device:
    """Under torchrun, a CUDA device without an index becomes ``cuda:LOCAL_RANK``."""
    if device.type == "cuda" and "LOCAL_RANK" in os.environ and device.index in (None, 0):
        return torch.device(f"cuda:{int(os.environ['LOCAL_RANK'])}")
    return device


# ----------------------------------------------------------------- faults
def _store() -> Any:
    try:
        from torch.distributed.distributed_c10d import _get_default_store

        return _get_default_store()
    except Exception:  # noqa: BLE001 - no store: faults are reported without names
        return None


def _register() -> None:
    """Record this rank's host and pid in the rendezvous store (for naming
    a rank that was killed)."""
    import torch.distributed as dist

    store = _store()
    if store is not None:
        try:
            store.set(f"offrl/pid/{dist.get_rank()}", f"{socket.gethostname()} {os.getpid()}")
        except Exception:  # noqa: BLE001 - best effort
            pass


def record_failure(error: BaseException) -> None:
    """Tell the other ranks (through the store) that this rank failed."""
    import torch.distributed as dist

    global _FAILED
    _FAILED = True
    if not (dist.is_available() and dist.is_initialized()):
        return
    store = _store()
    if store is not None:
        try:
            store.set(f"offrl/failed/{dist.get_rank()}", f"{type(error).__name__}: {error}"[:500])
        except Exception:  # noqa: BLE001 - the store may be gone with rank 0
            pass


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # an exited child its parent has not reaped yet is a zombie
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def describe_failed_ranks() -> str:
    """Which other ranks failed, as far as the store tells."""
    import torch.distributed as dist

    me, world = dist.get_rank(), dist.get_world_size()
    store = _store()
    if store is None:
        return "an unknown rank"
    found: List[str] = []
    try:
        store.set_timeout(datetime.timedelta(seconds=5))
        for r in range(world):
            if r == me:
                continue
            key = f"offrl/failed/{r}"
            if store.check([key]):
                found.append(f"rank {r} ({store.get(key).decode(errors='replace')})")
                continue
            pkey = f"offrl/pid/{r}"
            if store.check([pkey]):
                host, pid = store.get(pkey).decode().rsplit(" ", 1)
                if host == socket.gethostname() and not _pid_alive(int(pid)):
                    found.append(f"rank {r} (process {pid} is no longer running)")
    except Exception:  # noqa: BLE001 - the store lives with rank 0 outside torchrun
        return "rank 0 (the rendezvous store it hosts stopped answering)" if me != 0 else "an unknown rank"
    return ", ".join(found) if found else "an unknown rank (it stopped answering)"


def _collective_failed(what: str, error: BaseException) -> RankFailedError:
    import torch.distributed as dist

    global _FAILED
    _FAILED = True
    return RankFailedError(
        f"rank {dist.get_rank()}: {what} failed because {describe_failed_ranks()} failed or stopped answering "
        f"within the {_timeout().total_seconds():g} s collective timeout ({TIMEOUT_ENV}); training stopped "
        f"and nothing more was saved. Cause: {type(error).__name__}: {str(error)[:300]}"
    )


# ----------------------------------------------------------------- tensors
def _flat_all_reduce_mean(tensors: Sequence[torch.Tensor], what: str) -> None:
    import torch.distributed as dist

    if not tensors:
        return
    flat = torch.cat([t.reshape(-1) for t in tensors])
    try:
        dist.all_reduce(flat)
    except Exception as e:  # noqa: BLE001 - gloo/NCCL raise several types
        raise _collective_failed(what, e) from e
    flat /= dist.get_world_size()
    offset = 0
    for t in tensors:
        n = t.numel()
        t.copy_(flat[offset:offset + n].view_as(t))
        offset += n


def _broadcast(tensors: Sequence[torch.Tensor], what: str) -> None:
    import torch.distributed as dist

    tensors = [t for t in tensors if t.numel()]
    if not tensors:
        return
    flat = torch.cat([t.detach().reshape(-1).to(torch.float64) for t in tensors])
    try:
        dist.broadcast(flat, src=0)
    except Exception as e:  # noqa: BLE001
        raise _collective_failed(what, e) from e
    offset = 0
    with torch.no_grad():
        for t in tensors:
            n = t.numel()
            t.copy_(flat[offset:offset + n].view_as(t).to(t.dtype))
            offset += n


def _state_tensors(module: torch.nn.Module) -> List[torch.Tensor]:
    return [t for t in list(module.parameters()) + list(module.buffers()) if t.is_floating_point() or t.dtype in (
        torch.int64, torch.int32, torch.bool)]


class _AveragedStep:
    """An optimizer wrapper's ``step`` preceded by averaging its gradients."""

    def __init__(self, wrapper: Any, name: str) -> None:
        self.wrapper = wrapper
        self.name = name
        self.step = type(wrapper).step.__get__(wrapper)

    def __call__(self) -> None:
        grads = [p.grad for group in self.wrapper.optim.param_groups for p in group["params"] if p.grad is not None]
        _flat_all_reduce_mean(grads, f"averaging the gradients of {self.name}")
        self.step()


# ------------------------------------------------------------- sampling
@dataclasses.dataclass
class GlobalBatches:
    """A dataset whose global batches every rank draws identically (see
    :func:`global_batches`)."""

    dataset: Any

    def __getattr__(self, name: str) -> Any:
        return getattr(self.dataset, name)


@dataclasses.dataclass
class Shard:
    """This rank's shard of a dataset (see :func:`shard`)."""

    dataset: Any
    rank: int
    world_size: int

    def __getattr__(self, name: str) -> Any:
        return getattr(self.dataset, name)


def global_batches(dataset: Any) -> GlobalBatches:
    """Mark ``dataset`` so that under ``enable_ddp`` every rank draws the same
    global batch of ``batch_size`` transitions from the whole dataset and
    trains on rank ``r``'s ``batch_size / N`` rows (``batch_size`` must be
    divisible by ``N``; every rank must have called ``offrl.seed(n)`` with
    the same ``n``). The result equals one process's on the same data order.
    Transition batches only; without ``enable_ddp`` it is the dataset."""
    if not hasattr(dataset, "sample_transition_batch"):
        raise TypeError(f"dataset must be a ReplayBuffer or MDPDataset, got {type(dataset).__name__}")
    return GlobalBatches(dataset)


def _shard_indices(n_episodes: int, rank: int, world: int) -> np.ndarray:
    if n_episodes < world:
        raise ValueError(f"the dataset has {n_episodes} episodes, fewer than the {world} ranks: each rank needs "
                         "at least one episode (use global_batches(dataset), or fewer ranks)")
    return np.arange(rank, n_episodes, world, dtype=np.int64)


def shard(dataset: Any) -> Shard:
    """This rank's shard of ``dataset`` (episodes ``rank, rank + N, ...``) as
    a new buffer, so the full dataset can be released before ``fit`` (of a
    disk dataset opened with ``in_memory=False``: a view of its files)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError(f"shard() needs a torch.distributed process group: {LAUNCH_HINT}")
    rank, world = dist.get_rank(), dist.get_world_size()
    if isinstance(dataset, Shard):
        return dataset
    indices = _shard_indices(len(dataset.episodes), rank, world)
    return Shard(dataset._subset(indices), rank, world)


_using = _random.using_rng


def _slice_rows(batch: Any, start: int, stop: int) -> Any:
    def cut(value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, dict):  # dict observations
            return {key: v[start:stop] for key, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(v[start:stop] for v in value)
        return value[start:stop]

    fields = {f.name: cut(getattr(batch, f.name)) for f in dataclasses.fields(batch) if f.name != "rewards_to_go"}
    return dataclasses.replace(batch, rewards_to_go=None, **fields)


class _RankSampler:
    """What ``fit`` samples from on one rank: its shard with its own
    generator, or its rows of a global batch."""

    def __init__(self, dataset: Any, algo: Any, rank: int, world: int) -> None:
        self.rank, self.world = rank, world
        self.global_mode = isinstance(dataset, GlobalBatches)
        source = dataset.dataset if isinstance(dataset, (GlobalBatches, Shard)) else dataset
        self.dataset_info = source.dataset_info
        self.transition_count = source.transition_count
        if self.global_mode:
            if algo.predicts_from_sequences or algo.need_returns_to_go:
                raise ValueError(f"global_batches: {type(algo).__name__} needs trajectory windows or returns-to-go, "
                                 "which global batches do not slice; pass the dataset itself (sharded sampling)")
            if algo.batch_size % world:
                raise ValueError(f"global_batches: batch_size={algo.batch_size} is not divisible by the {world} ranks")
            self.source = source
            self.rng = None
        else:
            self.source = source if isinstance(dataset, Shard) else source._subset(
                _shard_indices(len(source.episodes), rank, world))
            seed = _broadcast_seed()
            self.rng = np.random.default_rng([seed, rank])

    def sample_transition_batch(self, batch_size: int) -> Any:
        if self.global_mode:
            per = batch_size // self.world
            batch = self.source.sample_transition_batch(batch_size)
            return _slice_rows(batch, self.rank * per, (self.rank + 1) * per)
        with _using(self.rng):
            return self.source.sample_transition_batch(batch_size)

    def sample_trajectory_batch(self, batch_size: int, length: int) -> Any:
        with _using(self.rng):
            return self.source.sample_trajectory_batch(batch_size, length)


def _broadcast_seed() -> int:
    import torch.distributed as dist

    value = torch.tensor([int(_random.get_rng().integers(2**62))], dtype=torch.int64)
    try:
        dist.broadcast(value, src=0)
    except Exception as e:  # noqa: BLE001
        raise _collective_failed("sharing the sampling seed", e) from e
    return int(value.item())


def _check_same_rng() -> None:
    import torch.distributed as dist

    state = repr(_random.get_rng().bit_generator.state).encode()
    mine = torch.tensor([int.from_bytes(hashlib.sha256(state).digest()[:7], "little")], dtype=torch.int64)
    gathered = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    try:
        dist.all_gather(gathered, mine)
    except Exception as e:  # noqa: BLE001
        raise _collective_failed("checking the random state", e) from e
    differ = [r for r, g in enumerate(gathered) if int(g.item()) != int(gathered[0].item())]
    if differ:
        raise ValueError(f"global_batches: rank(s) {differ} have another offrl random state than rank 0: call "
                         "offrl.seed(n) with the same n on every rank before fit")


# --------------------------------------------------------------- context
class DDPContext:
    """The data-parallel state of one algorithm in ``fit``."""

    def __init__(self) -> None:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise ValueError(f"enable_ddp=True but there is no torch.distributed process group: {LAUNCH_HINT}")
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def attach(self, algo: Any) -> None:
        """Give every rank rank 0's weights and scaler statistics, and make
        each optimizer average its gradients over the ranks before stepping
        (once per built network set)."""
        tensors: List[torch.Tensor] = []
        for module in algo.modules.values():
            tensors.extend(_state_tensors(module))
        for scaler in (algo.observation_scaler, algo.action_scaler, algo.reward_scaler):
            if isinstance(scaler, torch.nn.Module):
                tensors.extend(_state_tensors(scaler))
        _broadcast(tensors, "sharing rank 0's initial weights")
        for name, wrapper in algo.optimizers.items():
            if not isinstance(vars(wrapper).get("step"), _AveragedStep):
                wrapper.step = _AveragedStep(wrapper, name)

    def sampler(self, dataset: Any, algo: Any) -> _RankSampler:
        sampler = _RankSampler(dataset, algo, self.rank, self.world_size)
        if sampler.global_mode:
            _check_same_rng()
        return sampler

    def failed(self, error: BaseException) -> None:
        """Record that this rank stopped with ``error``."""
        if not isinstance(error, RankFailedError):
            record_failure(error)


def unwrap(dataset: Any) -> Any:
    """The dataset behind :func:`global_batches` / :func:`shard` markers."""
    return dataset.dataset if isinstance(dataset, (GlobalBatches, Shard)) else dataset
