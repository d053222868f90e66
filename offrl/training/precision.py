"""``precision="bf16-mixed"``: the update step's products in bfloat16.

An algorithm config's ``precision`` (offrl's addition; d3rlpy trains in
float32 only) selects how the update step computes:

* ``"float32"`` (the default, d3rlpy's behaviour): everything float32.
* ``"bf16-mixed"``: the update step runs under
  ``torch.autocast(device, dtype=torch.bfloat16)``, so the matrix products
  of the hidden layers (forward and backward) run in bf16 with float32
  accumulation. Weights, optimizer state and gradients stay float32 (autocast
  casts a copy of each weight, kept until the next optimizer step:
  :class:`~offrl.optimizers.OptimizerWrapper` drops the copies after each
  step); the output layers of the
  shared networks (Q-values, state values, policy means and log-stds,
  logits; :func:`offrl.models.layers.float32_head`) run in float32, so
  targets, TD errors, log-probabilities, temperatures and every loss
  reduction are float32; on the CPU a layer with few inputs (the first
  layer reading an observation, at small batches) keeps float32 products
  too (:func:`offrl.models.layers.narrow_inputs`: bf16 is slower there).
  ``predict``, saved models and exported policies
  are float32 and unchanged: autocast is active only inside the step.

Autocast over an explicit cast in the shared layers was measured (a 2-critic
23-256-256-1 ensemble step, batch 256, one thread of an AVX-512-BF16 EPYC):
both about 1.9x float32; autocast needs no change to the layers, reaches a
user's custom encoder too, and caches each weight's cast between optimizer steps.

bf16 pays only on hardware with bf16 units: a CPU with AVX-512 BF16 or AMX
(the ``avx512_bf16`` / ``amx_bf16`` flags; ``bf16`` on ARM) or a CUDA GPU
of compute capability 8.0 or newer. Elsewhere bf16 is emulated and slower
than float32, so ``"bf16-mixed"`` warns once and trains in float32. The
check runs once per device kind; ``OFFRL_BF16=0`` in the environment or
:func:`set_bf16_available` (for tests) forces it.

Where an algorithm's step has its backward written out on the CPU
(:mod:`offrl.models.plain_mlp`: DQN, DoubleDQN, NFQ, DiscreteCQL,
DiscreteBCQ, FQE, DiscreteFQE, BC and DiscreteBC with plain ReLU MLPs;
DiscreteSAC's, DDPG's, TD3's, TD3PlusBC's, PRDC's, AWAC's, CRR's and SAC's
policy and critics; IQL's policy, critics and value function; the PLAS
family's latent policy (through the decoder; PLASWithPerturbation's
perturbation actor too) and critics; ReBRAC's critics, CQL's and CalQL's
policy), a
bf16-mixed step runs those passes too, their hidden products in bf16
(:func:`~offrl.models.plain_mlp.plain_products`: the same products as
autocast's, without autograd), and the rest of the step under autocast.
Below :data:`WRITTEN_OUT_FASTER_BELOW` rows (an algorithm's own measured
size where it has one: 64 for the DDPG family (the PLAS family's included),
IQL and CRR, 32 for AWAC, DiscreteSAC and SAC) the casts cost more than bf16's products save
and the float32 written-out step is the faster, so ``"bf16-mixed"`` warns
once and trains in float32 there.

On a CUDA GPU a step of small networks is bound by kernel launches, not by
arithmetic, and autocast adds launches (a cast of each weight and input):
where the step's largest layer product (rows x inputs x outputs, x members
of an ensemble) is under :data:`CUDA_BF16_PAYS_FROM` multiply-adds,
``"bf16-mixed"`` warns once and trains in float32 there too (d3rlpy's
default networks, 256 units at batch 256 or 1,024, are far under it).
Networks with layers whose cost their shapes do not tell (convolutions,
attention, a custom module's own weights) keep bf16 as asked.

A custom encoder (a module defined outside offrl and torch) is run once in
float32 and once under bf16 autocast on a small probe batch at the first
bf16 step; one that fails in bf16 (an exception, or non-finite outputs where
float32's are finite) runs in float32 inside the mixed step, with one
warning naming it.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import os
import platform
import types
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn

from offrl._cpu import CPUINFO, cpu_flags

__all__ = [
    "PRECISIONS",
    "ENV_VAR",
    "bf16_available",
    "set_bf16_available",
    "cpu_bf16_flags",
    "autocast",
    "effective_precision",
    "fall_back_custom_modules",
    "WRITTEN_OUT_FASTER_BELOW",
    "written_out_step_is_faster",
    "CUDA_BF16_PAYS_FROM",
    "largest_product",
    "products_too_small",
]

#: the values of a config's ``precision`` field
PRECISIONS = ("float32", "bf16-mixed")
#: ``OFFRL_BF16=0`` turns bf16 off everywhere (``1`` turns the hardware check off)
ENV_VAR = "OFFRL_BF16"

_CPU_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")
_AVAILABLE: Dict[str, bool] = {}  # device kind -> bf16 units found (checked once)
_FORCED: Dict[str, Optional[bool]] = {"value": None}
_WARNED: set = set()

#: rows per batch below which a written-out float32 step beats a bf16-mixed step (whose written-out passes run
#: their hidden products in bf16: ``offrl.models.plain_mlp.plain_products``) on the CPU; measured on a 1-thread
#: AVX-512-BF16 EPYC, bf16-mixed against the written-out float32 step, CPU time per update, since the narrow
#: first layers run float32 (``offrl.models.layers.narrow_inputs``): DQN 0.92x / 0.99x / 1.08x / 1.15x at 32 /
#: 64 / 100 / 128 rows, BC 0.91x / 0.99x / 1.05x / 1.15x, DiscreteCQL 0.96x / 1.14x at 64 / 100, DiscreteBCQ
#: 0.92x / 1.04x (before that rule: from 128 rows; an algorithm may measure its own size:
#: ``_written_out_faster_below`` of DiscreteSAC, CRR, AWAC, SAC, IQL and DDPG's family)
WRITTEN_OUT_FASTER_BELOW = 100


def cpu_bf16_flags(cpuinfo: str = CPUINFO) -> Tuple[str, ...]:
    """The bf16 flags the CPU reports (``avx512_bf16``, ``amx_bf16``, ARM's
    ``bf16``), from ``/proc/cpuinfo`` (empty where it is not readable: not
    Linux, or no such flags)."""
    present = cpu_flags(cpuinfo)
    return tuple(flag for flag in _CPU_FLAGS if flag in present)


def _detect(kind: str, device: torch.device) -> bool:
    if kind == "cpu":
        return bool(cpu_bf16_flags())
    if kind == "cuda":
        try:
            return torch.cuda.is_available() and torch.cuda.get_device_capability(device) >= (8, 0)
        except Exception:  # no driver, a bad index: no bf16 units to use
            return False
    return False  # mps, xpu, ...: not checked, float32


def set_bf16_available(value: Optional[bool]) -> None:
    """Force the hardware check's answer (``None``: detect again); also
    forgets which warnings were given. For tests and benchmarks."""
    _FORCED["value"] = None if value is None else bool(value)
    _AVAILABLE.clear()
    _WARNED.clear()


def bf16_available(device: Any) -> bool:
    """Whether ``device`` (a ``torch.device`` or its name) has bf16 units,
    checked once per device kind (forced by :func:`set_bf16_available`,
    then by ``OFFRL_BF16``)."""
    device = torch.device(device)
    if _FORCED["value"] is not None:
        return _FORCED["value"]
    env = os.environ.get(ENV_VAR, "").strip()
    if env == "0":
        return False
    if env == "1":
        return True
    kind = device.type
    if kind not in _AVAILABLE:
        _AVAILABLE[kind] = _detect(kind, device)
    return _AVAILABLE[kind]


def _warn_once(key: str, message: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=4)


def effective_precision(precision: str, device: Any) -> str:
    """The precision a step on ``device`` runs in: ``precision``, or
    ``"float32"`` (with one warning per process and device kind) for
    ``"bf16-mixed"`` without bf16 units."""
    if precision == "float32":
        return precision
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {list(PRECISIONS)}, got {precision!r}")
    device = torch.device(device)
    if device.type == "meta":  # the memory checks' probes: shapes only; the float32 step bounds bf16's memory
        return "float32"
    if bf16_available(device):
        return precision
    if _FORCED["value"] is False or os.environ.get(ENV_VAR, "").strip() == "0":
        why = "bf16 is turned off" + (f" ({ENV_VAR}=0)" if _FORCED["value"] is None else "")
    elif device.type == "cpu":
        why = f"this CPU ({platform.machine() or 'unknown'}) reports none of {list(_CPU_FLAGS)}"
    else:
        why = f"{device.type} device {device} has no bf16 units (CUDA needs compute capability 8.0+)"
    _warn_once(f"fallback:{device.type}", f"precision='bf16-mixed': {why}; training runs in float32 "
               "(bf16 would be emulated there, slower than float32)")
    return "float32"


def written_out_step_is_faster(precision: str, algorithm: str, batch_size: int, device: Any,
                               below: int = WRITTEN_OUT_FASTER_BELOW) -> bool:
    """Whether a bf16-mixed ``precision`` should run an algorithm's
    written-out float32 step instead (``batch_size`` under ``below``,
    :data:`WRITTEN_OUT_FASTER_BELOW` unless the algorithm measured another
    size, on the CPU; the caller knows the step can be written out); warns
    once per algorithm when it does."""
    if precision == "float32" or torch.device(device).type != "cpu" or batch_size >= below:
        return False
    _warn_once(f"written-out:{algorithm}", f"precision={precision!r}: {algorithm} at batch_size {batch_size} trains "
               f"in float32 with its backward written out, faster on the CPU than a bf16-mixed step below "
               f"{below} rows (see offrl.training.precision)")
    return True


#: multiply-adds of a step's largest layer product from which bf16 autocast pays on a CUDA GPU; measured on an
#: H200 (torch 2.11, a 23-h-h-1 MLP and Adam, bf16 autocast against float32, steps per second): h = 256: 0.69-0.83x
#: at 256-16,384 rows; h = 1,024: 0.74x at 4,096 rows (4.3e9 multiply-adds), 1.99x at 16,384 (1.7e10); h = 4,096:
#: 0.83x at 256 rows (4.3e9), 1.52x at 1,024 (1.7e10), 6.4x at 4,096. Every algorithm at its default networks
#: ran 0.67-0.94x float32's updates/s in bf16 there (benchmarks/README.md)
CUDA_BF16_PAYS_FROM = 2 ** 33
_ELEMENTWISE = (nn.LayerNorm, nn.GroupNorm, nn.modules.batchnorm._NormBase, nn.Embedding)


def largest_product(nets: nn.Module, rows: int) -> Optional[int]:
    """``rows`` times the largest ``inputs x outputs`` (times the members of
    an ensemble) over the linear layers of ``nets``: the step's largest
    product in multiply-adds. ``None`` where ``nets`` has no linear layer, or
    a layer with weights whose cost its shape does not tell (a convolution,
    a custom module's own matrices); normalisation, embedding and scalar
    parameters cost no products."""
    largest = 0
    for module in nets.modules():
        if isinstance(module, nn.Linear):
            largest = max(largest, module.in_features * module.out_features)
        elif isinstance(getattr(module, "in_features", None), int) and isinstance(getattr(module, "out_features", None), int):
            members = getattr(module, "ensemble_size", 1)
            largest = max(largest, module.in_features * module.out_features * (members if isinstance(members, int) else 1))
        elif not (isinstance(module, _ELEMENTWISE) or type(module).__name__ in ("EnsembleLayerNorm", "EnsembleBatchNorm")
                  or all(p.numel() == max(p.shape, default=1) for p in module.parameters(recurse=False))):
            return None  # a matrix of unknown use: a convolution, attention, a custom layer
    return largest * rows if largest else None


def products_too_small(precision: str, algorithm: str, product: Optional[int], device: Any) -> bool:
    """Whether a bf16-mixed ``precision`` on a CUDA ``device`` should train
    in float32: the step's largest product (:func:`largest_product`) is
    under :data:`CUDA_BF16_PAYS_FROM`, where bf16's extra casts cost more
    than its faster products save; warns once per algorithm when it does."""
    if precision == "float32" or torch.device(device).type != "cuda" or product is None or product >= CUDA_BF16_PAYS_FROM:
        return False
    _warn_once(f"small-products:{algorithm}", f"precision={precision!r}: {algorithm}'s largest product per step "
               f"({product:.2g} multiply-adds) is under {CUDA_BF16_PAYS_FROM:.2g}, where bf16 autocast pays on a GPU "
               "(below, its casts cost more launches than its products save); training runs in float32 "
               "(see offrl.training.precision)")
    return True


_CACHE_SAFE: Dict[str, bool] = {}


def _autocast_cache_safe(device_type: str) -> bool:
    """Whether autocast's weight cache keeps gradients on ``device_type``:
    a weight first cast inside ``torch.no_grad()`` (a target computed in the
    step) and used again with grad in the same region must still get its
    gradient. Older torch (2.5 here) reused the cast made without grad, so
    that weight silently got none; the fix came in a later release. Probed
    once per device type, by behaviour, not by version."""
    held = _CACHE_SAFE.get(device_type)
    if held is None:
        with torch.inference_mode(False), torch.enable_grad():
            try:
                weight = torch.ones(2, 2, device=device_type, requires_grad=True)
            except (RuntimeError, AssertionError):  # no such device here (a context built, never entered)
                return True  # torch's default
            x = torch.ones(1, 2, device=device_type)
            with torch.autocast(device_type, dtype=torch.bfloat16):
                with torch.no_grad():
                    torch.nn.functional.linear(x, weight)
                out = torch.nn.functional.linear(x, weight)
        held = _CACHE_SAFE[device_type] = out.requires_grad
    return held


def autocast(device: torch.device) -> Any:
    """The context a bf16-mixed step runs in on ``device`` (without autocast's
    weight cache where it would drop gradients: :func:`_autocast_cache_safe`)."""
    return torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=_autocast_cache_safe(device.type))


# ------------------------------------------------------- custom encoders
def _is_custom(module: nn.Module) -> bool:
    name = type(module).__module__ or ""
    return not (name == "offrl" or name.startswith(("offrl.", "torch.")))


def _finite(out: Any) -> bool:
    if isinstance(out, torch.Tensor):
        return bool(torch.isfinite(out.float()).all()) if out.is_floating_point() else True
    if isinstance(out, (list, tuple)):
        return all(_finite(o) for o in out)
    return True


def _probe(module: nn.Module, args: Sequence[Any], device: torch.device, mixed: bool) -> Tuple[bool, str]:
    """Run a copy of ``module`` on ``args`` (float32, or under bf16
    autocast): (worked and finite, what went wrong)."""
    trial = copy.deepcopy(module).eval()
    context = autocast(device) if mixed else contextlib.nullcontext()
    try:
        with torch.no_grad(), context:
            out = trial(*args)
    except Exception as error:  # whatever the module raises: it cannot run so
        return False, f"{type(error).__name__}: {str(error)[:200]}"
    if not _finite(out):
        return False, "non-finite outputs"
    return True, ""


def _n_inputs(module: nn.Module) -> int:
    try:
        params = inspect.signature(module.forward).parameters.values()
    except (TypeError, ValueError):
        return 1
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        return 1
    return sum(1 for p in params if p.default is p.empty)


def _float32_forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
    """A custom module's own forward, in float32 inside a bf16 step."""
    forward = type(self).forward
    kind = self._offrl_float32_device  # type: ignore[attr-defined]
    if not torch.is_autocast_enabled(kind):
        return forward(self, *args, **kwargs)
    cast = [a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
    with torch.autocast(kind, enabled=False):
        return forward(self, *cast, **kwargs)


def fall_back_custom_modules(nets: nn.Module, device: torch.device, inputs: Callable[[int], Optional[Sequence[Any]]],
                             owner: str) -> List[str]:
    """Probe each custom module of ``nets`` (outermost ones only) on
    ``inputs(n)`` (the probe arguments for a forward of ``n`` inputs, or
    ``None`` when there are none) and make those that fail in bf16 but work
    in float32 run in float32 (one warning naming them). Returns their names."""
    fallen: List[str] = []
    reasons: List[str] = []
    skip: Tuple[str, ...] = ()
    for name, module in nets.named_modules():
        if not name or (skip and name.startswith(skip)) or not _is_custom(module):
            continue
        skip = skip + (name + ".",)  # its children are its own business
        args = inputs(_n_inputs(module))
        if args is None or not _probe(module, args, device, mixed=False)[0]:
            continue  # not an encoder of these inputs: nothing known, left as it is
        works, why = _probe(module, args, device, mixed=True)
        if works:
            continue
        module._offrl_float32_device = device.type  # type: ignore[attr-defined]
        module.forward = types.MethodType(_float32_forward, module)  # type: ignore[method-assign]
        fallen.append(f"{name} ({type(module).__name__})")
        reasons.append(why)
    if fallen:
        warnings.warn(f"{owner}: precision='bf16-mixed': {', '.join(fallen)} cannot run in bf16 ({reasons[0]}); "
                      "these modules run in float32, the rest of the step in bf16", RuntimeWarning, stacklevel=4)
    return fallen
