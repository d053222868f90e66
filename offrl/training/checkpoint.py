"""Training checkpoints (``checkpoint.d3``) and the in-memory copy of the
last finite state that ``fit`` / ``fit_online`` roll back to.

A checkpoint is an offrl model file (offrl's JSON and tensors in one
safetensors file, read without an unpickler: loading one runs no code) with
one more record, ``resume``: the loop's counters, the random states (offrl's
generator, which replay buffers sample from; Python's ``random``; numpy's
global state; torch's CPU and CUDA generators) and the logging window, so
that ``fit(..., resume_from=...)`` continues a run exactly where its last
epoch ended.
"""

from __future__ import annotations

import json
import math
import os
import random
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import torch

from .. import _random
from .._model_file import write_payload
from .._safety import load_json
from ..serialization import model_payload, read_model_file

__all__ = ["CHECKPOINT_NAME", "StateGuard", "map_tensors", "non_finite_weights", "save_checkpoint", "load_checkpoint",
           "resolve_checkpoint"]

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
    finite, else a description of the first that is not (read where the
    tensors live, with one device sync for the whole check: no copy of the
    weights to the host, which on a GPU cost more than the epoch's updates
    for large networks)."""
    state = algo.state_on_device()
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


def map_tensors(value: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """``value`` (dicts, lists and tuples of tensors and plain values) with
    ``fn`` applied to every tensor."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, dict):
        return {k: map_tensors(v, fn) for k, v in value.items()}
    if isinstance(value, list):
        return [map_tensors(v, fn) for v in value]
    if isinstance(value, tuple):
        return tuple(map_tensors(v, fn) for v in value)
    return value


def _host_copy(value: Any, pinned: Optional[Dict[int, torch.Tensor]] = None) -> Any:
    """A copy of ``value``'s tensors on the CPU (one copy, from any device).
    With ``pinned`` (a dict this function fills and reuses), tensors on a
    GPU are copied asynchronously into page-locked buffers kept there from
    one call to the next (one sync at the end): an order of magnitude
    faster than copies to pageable memory for large networks. The returned
    tensors are those buffers: the next call with the same ``pinned``
    overwrites them."""
    if pinned is None:
        return map_tensors(value, lambda t: t.detach().to("cpu", copy=True))
    copied: List[torch.device] = []  # the devices of the tensors copied so far, in order: a buffer's key is its index

    def copy(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.device.type != "cuda":
            return tensor.detach().to("cpu", copy=True)
        key = len(copied)
        buffer = pinned.get(key)
        if buffer is None or buffer.shape != tensor.shape or buffer.dtype != tensor.dtype:
            buffer = pinned[key] = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
        buffer.copy_(tensor.detach(), non_blocking=True)
        copied.append(tensor.device)
        return buffer

    out = map_tensors(value, copy)
    for device in set(copied):
        torch.cuda.synchronize(device)
    return out


class StateGuard:
    """A copy of the algorithm's state at its last finite point (the start
    of training, then each epoch end whose weights were checked finite), to
    roll the algorithm back after a :class:`NonFiniteLossError`."""

    def __init__(self, algo: Any, epoch: int = 0) -> None:
        self.algo = algo
        self._pinned: Dict[int, torch.Tensor] = {}  # reused host buffers for a model on a GPU
        self.commit(epoch)

    def commit(self, epoch: int) -> None:
        """Remember the algorithm's current state as the last good one (a
        copy in host memory)."""
        self.state = _host_copy(self.algo.state_on_device(), self._pinned)
        self.epoch = epoch
        self.grad_step = int(self.algo.grad_step)

    def restore(self) -> str:
        """Load the last good state back; returns a sentence saying which."""
        self.algo.load_state(_host_copy(self.state), "the last finite state")
        when = f"the end of epoch {self.epoch}" if self.epoch > 0 else "the start of this training run"
        return f"{type(self.algo).__name__} was restored to its state at {when} (grad_step {self.grad_step})"


# ------------------------------------------------------------ random states
#: Mersenne Twister state length (numpy's legacy global generator, Python's ``random``)
MT_STATE_N = 624


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


class _Malformed(ValueError):
    """A random state that is not what offrl wrote (the message names the field)."""


def _int_in(value: Any, low: int, high: int, field: str) -> int:
    """``value`` as an int in ``[low, high]`` (a bool or float is refused)."""
    if not _whole(value) or not low <= value <= high:
        raise _Malformed(f"{field} is {value!r:.60}; expected an int in [{low}, {high}]")
    return value


def _checked_generator_state(state: Any, generator: np.random.Generator) -> Dict[str, Any]:
    """offrl's generator state: the structure of this process's bit
    generator's state, whole numbers in the ranges its C struct holds
    (128-bit state words, a 32-bit buffer, 0/1 flags), accepted by a
    scratch bit generator of the same kind."""
    template = generator.bit_generator.state

    def check(value: Any, like: Any, field: str) -> None:
        if isinstance(like, dict):
            if not isinstance(value, dict) or set(value) != set(like):
                got = sorted(map(str, value)) if isinstance(value, dict) else type(value).__name__
                raise _Malformed(f"{field} is {got}; expected the keys {sorted(like)}")
            for key in like:
                check(value[key], like[key], f"{field}.{key}")
        elif isinstance(like, str):
            if value != like:
                raise _Malformed(f"{field} is {value!r:.60}; this process uses {like!r}")
        elif _whole(like):
            top = 1 if field.endswith(("has_uint32", "has_gauss")) else (
                2**32 - 1 if field.endswith("uinteger") else 2**128 - 1)
            _int_in(value, 0, top, field)
        else:  # a state holding arrays (not the PCG64 offrl uses) cannot come from JSON
            raise _Malformed(f"{field} cannot be restored from a checkpoint ({type(like).__name__})")

    check(state, template, "offrl_generator")
    scratch = type(generator.bit_generator)()
    try:
        scratch.state = state
    except (ValueError, TypeError, OverflowError) as e:
        raise _Malformed(f"offrl_generator is refused by numpy: {e}") from None
    return state


def _checked_python_state(state: Any) -> tuple:
    """Python ``random``'s state: ``[3, 625 words, gauss]``: 624 32-bit
    Mersenne Twister words, a position in [0, 624], None or a finite float."""
    if not isinstance(state, list) or len(state) != 3:
        raise _Malformed(f"python_random is {type(state).__name__}; expected [version, 625 ints, gauss]")
    version, internal, gauss = state
    if not _whole(version) or version != 3:
        raise _Malformed(f"python_random version is {version!r:.60}; expected 3")
    if not isinstance(internal, list) or len(internal) != MT_STATE_N + 1:
        size = len(internal) if isinstance(internal, list) else type(internal).__name__
        raise _Malformed(f"python_random holds {size} state words; expected {MT_STATE_N + 1}")
    for i, word in enumerate(internal[:MT_STATE_N]):
        _int_in(word, 0, 2**32 - 1, f"python_random[1][{i}]")
    _int_in(internal[MT_STATE_N], 0, MT_STATE_N, f"python_random position (python_random[1][{MT_STATE_N}])")
    if gauss is not None and not (isinstance(gauss, float) and math.isfinite(gauss)):
        raise _Malformed(f"python_random gauss is {gauss!r:.60}; expected None or a finite float")
    result = (3, tuple(internal), gauss)
    random.Random().setstate(result)  # a scratch generator: a state Python refuses fails here, not later
    return result


def _checked_numpy_state(record: Any, keys: Any) -> tuple:
    """numpy's legacy global state: MT19937, 624 32-bit key words, a
    position in [0, 624] (a position outside it makes the next draw read
    outside the key array), a 0/1 gauss flag and a finite cached gaussian."""
    expected = {"kind", "pos", "has_gauss", "cached"}
    if not isinstance(record, dict) or set(record) != expected:
        got = sorted(map(str, record)) if isinstance(record, dict) else type(record).__name__
        raise _Malformed(f"numpy_global is {got}; expected the keys {sorted(expected)}")
    if record["kind"] != "MT19937":
        raise _Malformed(f"numpy_global kind is {record['kind']!r:.60}; expected 'MT19937'")
    pos = _int_in(record["pos"], 0, MT_STATE_N, "numpy_global pos")
    has_gauss = _int_in(record["has_gauss"], 0, 1, "numpy_global has_gauss")
    cached = record["cached"]
    if not isinstance(cached, float) or not math.isfinite(cached):
        raise _Malformed(f"numpy_global cached is {cached!r:.60}; expected a finite float")
    if not torch.is_tensor(keys) or keys.dtype != torch.int64 or tuple(keys.shape) != (MT_STATE_N,):
        what = f"{keys.dtype} of shape {tuple(keys.shape)}" if torch.is_tensor(keys) else type(keys).__name__
        raise _Malformed(f"numpy_global_keys is {what}; expected int64 of shape ({MT_STATE_N},)")
    if bool(((keys < 0) | (keys >= 2**32)).any()):
        raise _Malformed("numpy_global_keys holds values outside [0, 2**32)")
    return ("MT19937", keys.numpy().astype(np.uint32), pos, has_gauss, cached)


def _checked_torch_state(state: Any, field: str, like: torch.Tensor, scratch: Any) -> torch.Tensor:
    """A torch generator state: a uint8 tensor of this process's state
    size, accepted by a scratch generator (torch checks the Mersenne
    Twister's position fields there, not on the global one)."""
    if not torch.is_tensor(state) or state.dtype != torch.uint8 or tuple(state.shape) != tuple(like.shape):
        what = f"{state.dtype} of shape {tuple(state.shape)}" if torch.is_tensor(state) else type(state).__name__
        raise _Malformed(f"{field} is {what}; expected uint8 of shape {tuple(like.shape)}")
    if scratch is not None:
        try:
            scratch.set_state(state)
        except (RuntimeError, ValueError, TypeError) as e:
            raise _Malformed(f"{field} is refused by torch: {str(e).strip().splitlines()[0] if str(e).strip() else e}") from None
    return state


def _checked_random_states(record: Any, tensors: Any, source: str) -> Callable[[], None]:
    """Check every random state of a resume record (``record``: the JSON
    part, ``tensors``: the state tensors) before any is set; returns the
    function that sets them all. Raises ``ValueError`` naming ``source``
    and the field."""
    try:
        if not isinstance(record, dict) or set(record) != {"offrl_generator", "python_random", "numpy_global"}:
            got = sorted(map(str, record)) if isinstance(record, dict) else type(record).__name__
            raise _Malformed(f"the record is {got}; expected offrl_generator, python_random and numpy_global")
        if not isinstance(tensors, dict):
            raise _Malformed(f"random_tensors is a {type(tensors).__name__}; expected named tensors")
        cuda_names = sorted(k for k in tensors if isinstance(k, str) and k.startswith("torch_cuda_"))
        unknown = sorted(map(str, set(tensors) - {"numpy_global_keys", "torch_cpu"} - set(cuda_names)))
        missing = sorted({"numpy_global_keys", "torch_cpu"} - set(tensors))
        if unknown or missing:
            raise _Malformed(f"random_tensors has {'unknown ' + str(unknown) if unknown else ''}"
                             f"{' and ' if unknown and missing else ''}{'no ' + str(missing) if missing else ''}")
        generator = _random.get_rng()
        generator_state = _checked_generator_state(record["offrl_generator"], generator)
        python_state = _checked_python_state(record["python_random"])
        numpy_state = _checked_numpy_state(record["numpy_global"], tensors["numpy_global_keys"])
        torch_state = _checked_torch_state(tensors["torch_cpu"], "torch_cpu", torch.random.get_rng_state(),
                                           torch.Generator())
        cuda_states = []
        use_cuda = bool(cuda_names) and torch.cuda.is_available()
        if use_cuda:
            count = torch.cuda.device_count()
            expected_names = [f"torch_cuda_{i}" for i in range(len(cuda_names))]
            if cuda_names != sorted(expected_names) or len(cuda_names) > count:
                raise _Malformed(f"random_tensors has CUDA states {cuda_names}; this process has {count} CUDA devices")
            for i in range(len(cuda_names)):
                cuda_states.append(_checked_torch_state(tensors[f"torch_cuda_{i}"], f"torch_cuda_{i}",
                                                        torch.cuda.get_rng_state(i), None))
    except _Malformed as e:
        raise ValueError(f"{source}: the random states in its resume record are malformed: {e}") from None

    def restore() -> None:
        generator.bit_generator.state = generator_state
        random.setstate(python_state)
        np.random.set_state(numpy_state)
        torch.random.set_rng_state(torch_state)
        if cuda_states:
            for i, state in enumerate(cuda_states):
                torch.cuda.set_rng_state(state, i)

    return restore


# ------------------------------------------------------------ files
def save_checkpoint(algo: Any, path: str, loop: Dict[str, Any]) -> None:
    """Write ``algo``'s model state, the loop's counters ``loop`` (JSON
    values, with the model's grad_step) and the random states to ``path``
    atomically."""
    record, tensors = _random_states()
    loop = {**loop, "grad_step": int(algo.grad_step)}  # checked against the model's on resume
    payload = {
        **model_payload(algo),
        "resume": json.dumps({"version": RESUME_VERSION, "loop": loop, "random": record}),
        "random_tensors": tensors,
    }
    write_payload(payload, path)


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
    returns the loop record saved with it. Everything (the counters, the
    random states, the model state) is checked before anything is set."""
    payload = read_model_file(path)
    if "resume" not in payload:
        raise ValueError(f"{path} is a model file without a resume record; resume from the run's "
                         f"{CHECKPOINT_NAME} (or its log directory)")
    saved_type = payload["params"].get("algorithm")
    if saved_type != algo.config.get_type():
        raise ValueError(f"{path} holds a {saved_type!r} checkpoint, not {algo.config.get_type()!r}")
    try:
        resume = load_json(payload["resume"], f"{path}: its resume record")
    except ValueError as e:  # the parser's own errors (an int of more digits than Python converts) name no file
        raise ValueError(str(e) if str(e).startswith(str(path)) else f"{path}: its resume record: {e}") from None
    if not isinstance(resume, dict) or not {"version", "loop", "random"} <= set(resume):
        raise ValueError(f"{path} has a malformed resume record: expected an object with 'version', 'loop' and 'random'")
    loop, random_record, version = resume["loop"], resume["random"], resume["version"]
    if isinstance(version, bool) or version != RESUME_VERSION:
        raise ValueError(f"{path} has resume record version {version!r}; this offrl reads {RESUME_VERSION}")
    _check_loop(loop, path, payload["grad_step"])
    restore_random_states = _checked_random_states(random_record, payload.get("random_tensors"), path)
    algo.load_state(payload, path)
    restore_random_states()
    return loop


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_loop(loop: Any, path: str, grad_step: int) -> None:
    """Refuse a loop record whose counters are not what ``fit`` wrote at an
    epoch end (or disagree with each other or with the model's
    ``grad_step``), naming the file and the fields."""
    if not isinstance(loop, dict):
        raise ValueError(f"{path}: the loop record of its resume record is not an object")
    bounds = {"epoch": 1, "total_step": 1, "n_steps_per_epoch": 1, "transition_count": 0}
    for key, minimum in bounds.items():
        value = loop.get(key)
        if not _whole(value) or value < minimum:
            raise ValueError(f"{path}: resume record field {key!r} is {value!r:.60}, expected an int >= {minimum}")
    epoch, total_step, per_epoch = loop["epoch"], loop["total_step"], loop["n_steps_per_epoch"]
    # a checkpoint is written at the end of epoch `epoch`, after 1 to n_steps_per_epoch steps of it
    if not (epoch - 1) * per_epoch < total_step <= epoch * per_epoch:
        raise ValueError(f"{path}: resume record fields disagree: 'total_step' {total_step} is not within epoch "
                         f"'epoch' {epoch} of 'n_steps_per_epoch' {per_epoch} (expected {(epoch - 1) * per_epoch + 1} "
                         f"to {epoch * per_epoch})")
    saved_grad_step = loop.get("grad_step")
    if saved_grad_step is not None and saved_grad_step != grad_step:
        raise ValueError(f"{path}: resume record field 'grad_step' is {saved_grad_step!r:.60}, but the model it holds "
                         f"has grad_step {grad_step}")
    if grad_step < total_step:
        raise ValueError(f"{path}: resume record field 'total_step' is {total_step}, but the model it holds has made "
                         f"only {grad_step} updates (grad_step): a run makes one per step")
    logging_steps = loop.get("logging_steps")
    if logging_steps is not None and (not _whole(logging_steps) or logging_steps < 1):
        raise ValueError(f"{path}: resume record field 'logging_steps' is {logging_steps!r:.60}, expected None or an int >= 1")
    window = loop.get("window")
    if window is None:
        return
    if logging_steps is None:
        raise ValueError(f"{path}: resume record field 'window' is set, but 'logging_steps' is None (a logging "
                         f"window is kept only when logging every logging_steps steps)")
    names, sums, count = (window.get(k) for k in ("names", "sums", "count")) if isinstance(window, dict) else (None,) * 3
    if (not isinstance(names, list) or not all(isinstance(n, str) for n in names) or not isinstance(sums, list)
            or len(sums) != len(names) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in sums)
            or not _whole(count) or count < 0):
        raise ValueError(f"{path}: resume record field 'window' is malformed (expected names, sums of the same "
                         f"length and a count)")
    if count != total_step % logging_steps:
        raise ValueError(f"{path}: resume record fields disagree: the window holds {count} steps, but "
                         f"'total_step' {total_step} with 'logging_steps' {logging_steps} leaves "
                         f"{total_step % logging_steps} since the last row")

