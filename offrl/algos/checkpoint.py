"""Training checkpoints (``checkpoint.d3``) and the in-memory copy of the
last finite state that ``fit`` / ``fit_online`` roll back to.

A checkpoint is an offrl model file (JSON text and tensors only, read back
with ``torch.load(weights_only=True)``: loading one runs no code) with one
more record, ``resume``: the loop's counters, the random states (offrl's
generator, which replay buffers sample from; Python's ``random``; numpy's
global state; torch's CPU and CUDA generators) and the logging window, so
that ``fit(..., resume_from=...)`` continues a run exactly where its last
epoch ended.
"""

from __future__ import annotations

import json
import os
import random
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from .. import _random
from .._atomic import atomic_write
from ..serialization import MODEL_FORMAT, MODEL_FORMAT_VERSION, dumps, read_model_file

__all__ = ["CHECKPOINT_NAME", "StateGuard", "non_finite_weights", "save_checkpoint", "load_checkpoint",
           "resolve_checkpoint", "truncate_metric_files"]

#: the file name of the latest checkpoint in a log directory
CHECKPOINT_NAME = "checkpoint.d3"
RESUME_VERSION = 1


# ------------------------------------------------------------ finiteness
#: a weight tensor whose float32 sum of squares overflows (some ``|w|`` of
#: about 1e19 or more) has diverged: products with it overflow in the
#: forward pass, so a model holding it predicts NaN or inf
def non_finite_weights(algo: Any) -> Optional[str]:
    """``None`` when every floating weight tensor of ``algo`` is finite and
    has a finite float32 sum of squares and every optimizer state tensor is
    finite, else a description of the first that is not (one device sync
    for the whole check)."""
    state = algo.get_state()
    modules = state["modules"]
    names: List[Tuple[str, str]] = []
    flags = []
    for module_name, tensors in modules.items():
        for key, tensor in tensors.items():
            if torch.is_tensor(tensor) and (tensor.is_floating_point() or tensor.is_complex()):
                names.append((module_name, key))
                flags.append(torch.isfinite(tensor.detach().float().abs().square().sum()))
    optimizer_tensors = list(_float_tensors(state.get("optimizers", {}), "optimizer"))
    for _, tensor in optimizer_tensors:  # moment estimates: finite is enough (they may hold squares)
        flags.append(torch.isfinite(tensor.detach()).all())
    if not flags:
        return None
    finite = torch.stack(flags).cpu().numpy()
    if finite.all():
        return None
    first = int(np.argmin(finite))
    if first >= len(names):
        where, tensor = optimizer_tensors[first - len(names)]
        bad = tensor[~torch.isfinite(tensor)].flatten()[0].item()
        return f"{where} holds {bad}"
    module_name, key = names[first]
    tensor = modules[module_name][key].detach()
    if not torch.isfinite(tensor).all():
        bad = tensor[~torch.isfinite(tensor)].flatten()[0].item()
        return f"weight {key!r} of module {module_name!r} holds {bad}"
    return f"weight {key!r} of module {module_name!r} has diverged (largest |w| = {tensor.abs().max().item():.3g})"


def _float_tensors(value: Any, where: str):
    """``(where, tensor)`` for every floating tensor nested in ``value``."""
    if torch.is_tensor(value):
        if value.is_floating_point() or value.is_complex():
            yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _float_tensors(item, f"{where}[{key!r}]")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _float_tensors(item, f"{where}[{index}]")


def _clone(value: Any) -> Any:
    if torch.is_tensor(value):
        return value.detach().clone()
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clone(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_clone(v) for v in value)
    return value


class StateGuard:
    """A copy of the algorithm's state at its last finite point (the start
    of training, then each epoch end whose weights were checked finite), to
    roll the algorithm back after a :class:`NonFiniteLossError`."""

    def __init__(self, algo: Any, epoch: int = 0) -> None:
        self.algo = algo
        self.commit(epoch)

    def commit(self, epoch: int) -> None:
        """Remember the algorithm's current state as the last good one."""
        self.state = _clone(self.algo.get_state())
        self.epoch = epoch
        self.grad_step = int(self.algo.grad_step)

    def restore(self) -> str:
        """Load the last good state back; returns a sentence saying which."""
        self.algo.load_state(_clone(self.state), "the last finite state")
        when = f"the end of epoch {self.epoch}" if self.epoch > 0 else "the start of this training run"
        return f"{type(self.algo).__name__} was restored to its state at {when} (grad_step {self.grad_step})"


# ------------------------------------------------------------ random states
def _random_states() -> Tuple[Dict[str, Any], Dict[str, torch.Tensor]]:
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    record = {
        "offrl_generator": _random.get_rng().bit_generator.state,
        "python_random": [version, list(internal), gauss],
        "numpy_global": {"kind": kind, "pos": int(pos), "has_gauss": int(has_gauss), "cached": float(cached)},
    }
    tensors = {
        "numpy_global_keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
        "torch_cpu": torch.random.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for i, state in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"torch_cuda_{i}"] = state
    return record, tensors


def _set_random_states(record: Dict[str, Any], tensors: Dict[str, torch.Tensor], source: str) -> None:
    try:
        generator = _random.get_rng()
        state = record["offrl_generator"]
        if state.get("bit_generator") != type(generator.bit_generator).__name__:
            raise ValueError(f"generator {state.get('bit_generator')!r}, this process uses "
                             f"{type(generator.bit_generator).__name__}")
        generator.bit_generator.state = state
        version, internal, gauss = record["python_random"]
        random.setstate((int(version), tuple(int(v) for v in internal), gauss))
        numpy_global = record["numpy_global"]
        keys = tensors["numpy_global_keys"].numpy().astype(np.uint32)
        np.random.set_state((numpy_global["kind"], keys, int(numpy_global["pos"]), int(numpy_global["has_gauss"]),
                             float(numpy_global["cached"])))
        torch.random.set_rng_state(tensors["torch_cpu"])
        cuda = [tensors[k] for k in sorted(k for k in tensors if k.startswith("torch_cuda_"))]
        if cuda and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(cuda)
    except Exception as e:  # numpy, random and torch raise many types for states that are not theirs
        raise ValueError(f"{source}: the random states in its resume record are malformed: "
                         f"{type(e).__name__}: {e}") from None


# ------------------------------------------------------------ files
def save_checkpoint(algo: Any, path: str, loop: Dict[str, Any]) -> None:
    """Write ``algo``'s model state, the loop's counters ``loop`` (JSON
    values) and the random states to ``path`` atomically."""
    record, tensors = _random_states()
    from .._version import __version__

    payload = {
        "format": MODEL_FORMAT,
        "format_version": MODEL_FORMAT_VERSION,
        "offrl_version": __version__,
        "params": dumps(algo.to_params()),
        **algo.get_state(),
        "resume": json.dumps({"version": RESUME_VERSION, "loop": loop, "random": record}),
        "random_tensors": tensors,
    }
    atomic_write(path, lambda tmp: torch.save(payload, tmp))


def resolve_checkpoint(resume_from: Any) -> Tuple[str, Optional[str]]:
    """``(checkpoint file, log directory or None)`` for ``resume_from``: a
    checkpoint file, a log directory holding ``checkpoint.d3``, or a run
    directory whose ``logs/`` holds it (``offrl fit --output-dir``)."""
    if not isinstance(resume_from, (str, os.PathLike)):
        raise TypeError(f"resume_from must be a path, got {type(resume_from).__name__}")
    path = os.fspath(resume_from)
    if os.path.isdir(path):
        for directory in (path, os.path.join(path, "logs")):
            candidate = os.path.join(directory, CHECKPOINT_NAME)
            if os.path.isfile(candidate):
                return candidate, directory
        raise FileNotFoundError(f"resume_from={path!r}: no {CHECKPOINT_NAME} in it (nor in its logs/): "
                                "checkpoints are written at each epoch end of a run logged to files")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"resume_from={path!r}: no such checkpoint file or log directory")
    return path, None


def load_checkpoint(algo: Any, path: str) -> Dict[str, Any]:
    """Load the checkpoint at ``path`` into the built ``algo`` (weights,
    optimizer states, scalers, grad_step) and restore the random states;
    returns the loop record saved with it."""
    payload = read_model_file(path)
    if "resume" not in payload:
        raise ValueError(f"{path} is a model file without a resume record; resume from the run's "
                         f"{CHECKPOINT_NAME} (or its log directory)")
    saved_type = payload["params"].get("algorithm")
    if saved_type != algo.config.get_type():
        raise ValueError(f"{path} holds a {saved_type!r} checkpoint, not {algo.config.get_type()!r}")
    try:
        resume = json.loads(payload["resume"])
        loop = resume["loop"]
        random_record = resume["random"]
        version = resume["version"]
    except (TypeError, KeyError, json.JSONDecodeError) as e:
        raise ValueError(f"{path} has a malformed resume record: {type(e).__name__}: {e}") from None
    if isinstance(version, bool) or version != RESUME_VERSION:
        raise ValueError(f"{path} has resume record version {version!r}; this offrl reads {RESUME_VERSION}")
    if not isinstance(random_record, dict):
        raise ValueError(f"{path}: the random states in its resume record are malformed: not an object")
    _check_loop(loop, path)
    tensors = payload.get("random_tensors")
    if not isinstance(tensors, dict) or not all(torch.is_tensor(t) for t in tensors.values()):
        raise ValueError(f"{path} has no random-state tensors in its resume record")
    algo.load_state(payload, path)
    _set_random_states(random_record, tensors, path)
    return loop


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_loop(loop: Any, path: str) -> None:
    """Refuse a loop record whose counters are not what ``fit`` wrote,
    naming the file and the field."""
    if not isinstance(loop, dict):
        raise ValueError(f"{path}: the loop record of its resume record is not an object")
    bounds = {"epoch": 0, "total_step": 0, "n_steps_per_epoch": 1, "transition_count": 0}
    for key, minimum in bounds.items():
        value = loop.get(key)
        if not _whole(value) or value < minimum:
            raise ValueError(f"{path}: resume record field {key!r} is {value!r}, expected an int >= {minimum}")
    if loop["total_step"] > loop["epoch"] * loop["n_steps_per_epoch"]:
        raise ValueError(f"{path}: resume record says {loop['total_step']} steps in {loop['epoch']} epochs of "
                         f"{loop['n_steps_per_epoch']}: inconsistent")
    logging_steps = loop.get("logging_steps")
    if logging_steps is not None and (not _whole(logging_steps) or logging_steps < 1):
        raise ValueError(f"{path}: resume record field 'logging_steps' is {logging_steps!r}, expected None or an int >= 1")
    window = loop.get("window")
    if window is None:
        return
    names, sums, count = (window.get(k) for k in ("names", "sums", "count")) if isinstance(window, dict) else (None,) * 3
    if (not isinstance(names, list) or not all(isinstance(n, str) for n in names) or not isinstance(sums, list)
            or len(sums) != len(names) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in sums)
            or not _whole(count) or count < 0):
        raise ValueError(f"{path}: resume record field 'window' is malformed (expected names, sums of the same "
                         f"length and a count)")


def truncate_metric_files(logdir: str, step: int) -> None:
    """Drop the rows of ``logdir``'s metric CSVs (``epoch,step,value``)
    written after ``step``: a resumed run appends from its checkpoint on."""
    for name in sorted(os.listdir(logdir)):
        path = os.path.join(logdir, name)
        if not name.endswith(".csv") or not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
        kept = []
        for line in lines:
            parts = line.split(",")
            try:
                row_step = int(parts[1])
            except (IndexError, ValueError):
                kept.append(line)  # not a metric row: leave it
                continue
            if row_step <= step:
                kept.append(line)
        if len(kept) != len(lines):
            text = "".join(kept)

            def write(tmp: str, text: str = text) -> None:
                with open(tmp, "w", encoding="utf-8") as f:
                    f.write(text)

            atomic_write(path, write)
