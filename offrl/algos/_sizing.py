"""Memory a config needs, found before anything is allocated.

Config values that size networks (``n_critics``, ``hidden_units``, encoder
and embedding sizes, ``context_size``, ``max_timestep``...) and the
mini-batch (``batch_size``) are checked against the memory available on
the algorithm's device:

- before networks are built (``create_impl``): the algorithm is built on
  torch's ``meta`` device (shapes only, nothing allocated, no random number
  drawn), as a model file's declared sizes are checked, and its weights
  plus gradients and two optimizer moments (four copies) must fit;
- before the first training step (``fit``): one training step runs on the
  ``meta`` device with a mini-batch of ``batch_size`` rows shaped like the
  dataset's, and the peak of the tensors it keeps alive at once
  (activations saved for backward, gradients, optimizer state) must fit.

Either refusal is a ``ValueError`` naming the algorithm, the size fields
(those changed from their defaults first) and the bytes needed against the
bytes available. The estimate can miss: what it cannot run on the meta
device (a step that reads values) and a user's own update step (an
overridden ``update`` or ``_update``, never called on data it did not ask
for) are not checked.
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from typing import Any, Dict, Optional, Tuple

import torch

from .._safety import available_memory, format_bytes
from ..model_rules import SCALER_NAMES

__all__ = ["SIZE_FIELDS", "planned_state", "size_fields", "check_networks_fit", "training_step_bytes",
           "check_training_step_fits"]

#: config parameters that size networks or batches, named in size errors
SIZE_FIELDS = ("batch_size", "n_critics", "hidden_units", "feature_size", "n_quantiles", "n_greedy_quantiles",
               "embed_size", "n_action_samples", "latent_size", "num_heads", "num_layers", "context_size",
               "max_timestep", "filters", "n_neighbors", "n_steps")

#: weights, their gradients and an optimizer's two moments (Adam): what training keeps per weight
_COPIES = 4


def _flatten(value: Any, path: str, out: Dict[str, Any]) -> None:
    if isinstance(value, dict) and set(value) == {"kind", "type", "params"}:
        _flatten(value["params"], path, out)
    elif isinstance(value, dict):
        for key, item in value.items():
            _flatten(item, f"{path}.{key}" if path else str(key), out)
    else:
        out[path] = value


def size_fields(config: Any) -> str:
    """``"n_critics=10000000, encoder_factory.hidden_units=[256, 256], ..."``:
    the config's size parameters, those that differ from the defaults
    first (the likely cause of a size error)."""
    values: Dict[str, Any] = {}
    defaults: Dict[str, Any] = {}
    _flatten(config.to_dict(), "", values)
    try:
        _flatten(type(config)().to_dict(), "", defaults)
    except (TypeError, ValueError):  # a config without defaults for every field
        pass
    sized = [(k, v) for k, v in values.items() if k.rsplit(".", 1)[-1] in SIZE_FIELDS]
    sized.sort(key=lambda kv: kv[0] in defaults and defaults[kv[0]] == kv[1])  # changed ones first (stable)
    return ", ".join(f"{k}={v!r}"[:80] for k, v in sized)


def _device_memory(device: Any) -> Tuple[Optional[int], str]:
    """Bytes free on ``device`` (None when unknown) and what to call them."""
    device = torch.device(device) if device is not None and not isinstance(device, torch.device) else device
    if device is not None and device.type == "cuda" and torch.cuda.is_available():
        try:
            free, _ = torch.cuda.mem_get_info(device)
            return int(free), f"{device} has"
        except (RuntimeError, AssertionError, ValueError):
            return None, ""
    if device is None or device.type == "cpu":
        return available_memory(), "this machine has"
    return None, ""


def _probe(config: Any, evaluated: Any = None) -> Any:
    """``config``'s algorithm on the meta device (scalers left out: they
    hold numpy statistics and size no network)."""
    bare = dataclasses.replace(config, **{k: None for k in SCALER_NAMES if hasattr(config, k)})
    meta = torch.device("meta")
    if evaluated is not None:
        return bare.algorithm_class()(algo=evaluated, config=bare, device=meta)
    return bare.create(device=meta)


def planned_state(config: Any, observation_shape: Any, action_size: int, evaluated: Any = None) -> Dict[str, Any]:
    """What building ``config`` for these shapes would allocate, found by
    building it on torch's meta device (nothing allocated): module state
    shapes and dtypes by module, and optimizer names. ``evaluated``: the
    algorithm an FQE-like config evaluates."""
    with torch.device("meta"):
        probe = _probe(config, evaluated)
        probe.create_impl(observation_shape, action_size)
    modules = {
        key: {k: (tuple(v.shape), v.dtype) for k, v in module.state_dict().items()}
        for key, module in probe.modules.items()
    }
    return {"modules": modules, "optimizers": sorted(probe.optimizers)}


def _state_bytes(planned: Dict[str, Any]) -> Tuple[int, int]:
    numbers = nbytes = 0
    for module in planned["modules"].values():
        for shape, dtype in module.values():
            count = math.prod(shape)
            numbers += count
            nbytes += count * torch.empty((), dtype=dtype, device="meta").element_size()
    return numbers, nbytes


def check_networks_fit(algo: Any, observation_shape: Any, action_size: int) -> None:
    """Raise ``ValueError`` before ``algo`` builds networks for these shapes
    when their weights, gradients and optimizer moments would not fit in
    the memory free on its device."""
    free, where = _device_memory(getattr(algo, "device", None))
    if free is None:
        return
    config = algo.config
    evaluated = getattr(algo, "algo", None) if getattr(algo, "evaluates_algorithm", False) else None
    try:
        planned = planned_state(config, observation_shape, action_size, evaluated)
    except RuntimeError as e:
        if "overflow" in str(e).lower():  # a tensor of more than 2**63 bytes: torch cannot even describe it
            raise ValueError(
                f"{type(algo).__name__}: the config declares networks too large to address ({size_fields(config)}; "
                f"observation_shape={observation_shape}, action_size={action_size}): {str(e).splitlines()[0]}"
            ) from None
        return  # the real build raises the same error, or builds what the meta device cannot
    except Exception:  # noqa: BLE001 - the real build raises the same error, or builds what meta cannot
        return
    numbers, nbytes = _state_bytes(planned)
    need = nbytes * _COPIES
    if need > free:
        raise ValueError(
            f"{type(algo).__name__}: the config declares networks of {numbers:,} numbers ({size_fields(config)}; "
            f"observation_shape={observation_shape}, action_size={action_size}): {format_bytes(need)} with "
            f"gradients and optimizer state; {where} {format_bytes(free)} available. Lower the sizes above."
        )


class _PeakBytes(torch.utils._python_dispatch.TorchDispatchMode):
    """The peak bytes of tensors alive at once among those made while it is
    active (each storage counted once, released when its last tensor goes)."""

    def __init__(self) -> None:
        super().__init__()
        self.live = self.peak = 0
        self._seen: Dict[int, int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for value in torch.utils._pytree.tree_leaves(out):
            if isinstance(value, torch.Tensor):
                storage = value.untyped_storage()
                key = storage._cdata
                if key in self._seen:
                    continue
                size = int(storage.nbytes())
                self._seen[key] = size
                self.live += size
                self.peak = max(self.peak, self.live)
                weakref.finalize(storage, self._release, key)
        return out

    def _release(self, key: int) -> None:
        self.live -= self._seen.pop(key, 0)


def _template_batch(algo: Any, dataset: Any) -> Any:
    """A mini-batch of one row picked deterministically (no random number
    drawn) with the dataset's own picker or slicer."""
    episodes = dataset.episodes
    for episode in episodes[:16]:
        size = int(episode.size())
        if size < 2 and not episode.terminated:
            continue
        if getattr(algo, "predicts_from_sequences", False):
            from ..dataset.batch import TrajectoryMiniBatch

            window = dataset.trajectory_slicer(episode, size - 1, int(algo.context_size))
            return TrajectoryMiniBatch.from_partial_trajectories([window])
        from ..dataset.batch import TransitionMiniBatch

        return TransitionMiniBatch.from_transitions([dataset.transition_picker(episode, 0)])
    return None


def _widen(value: Any, rows: int) -> Any:
    """``value`` with its leading (batch) dimension set to ``rows``, on the meta device."""
    if isinstance(value, torch.Tensor) and value.dim() > 0:
        return torch.empty((rows,) + tuple(value.shape[1:]), dtype=value.dtype, device="meta")
    if isinstance(value, list):
        return [_widen(v, rows) for v in value]
    if isinstance(value, tuple):
        return tuple(_widen(v, rows) for v in value)
    return value


def training_step_bytes(algo: Any, dataset: Any, batch_size: Optional[int] = None) -> Optional[int]:
    """Peak bytes one training step of ``algo``'s config holds at once
    (activations kept for backward, gradients, optimizer moments) on a
    mini-batch of ``batch_size`` rows shaped like ``dataset``'s, found on
    the meta device; None when the step cannot run there."""
    rows = int(batch_size if batch_size is not None else algo.batch_size)
    try:
        template = _template_batch(algo, dataset)
        if template is None:
            return None
        evaluated = getattr(algo, "algo", None) if getattr(algo, "evaluates_algorithm", False) else None
        config = dataclasses.replace(algo.config, batch_size=rows)
        with torch.device("meta"):
            probe = _probe(config, evaluated)
            probe.create_impl(algo.observation_shape, algo.action_size)
        if probe._update_overridden() or not getattr(type(probe)._update, "__module__", "").startswith("offrl."):
            return None  # a user's own update step is the user's code: not run on data it never asked for
        small = probe.preprocess_batch(template)
        batch = dataclasses.replace(small, **{f.name: _widen(getattr(small, f.name), rows)
                                              for f in dataclasses.fields(small) if f.name != "indices"})
        with _PeakBytes() as peak:
            probe.training_step(batch)
        return peak.peak
    except Exception:  # noqa: BLE001 - a step that cannot run on the meta device is not estimated
        return None


def check_training_step_fits(algo: Any, dataset: Any) -> None:
    """Raise ``ValueError`` before training when one step at the config's
    ``batch_size`` would need more memory than is free on ``algo``'s device."""
    free, where = _device_memory(getattr(algo, "device", None))
    if free is None:
        return
    need = training_step_bytes(algo, dataset)
    if need is not None and need > free:
        raise ValueError(
            f"{type(algo).__name__}: one training step needs about {format_bytes(need)} (activations, gradients "
            f"and optimizer state at {size_fields(algo.config)}); {where} {format_bytes(free)} available. "
            "Lower batch_size or the sizes above."
        )
