"""Batched ensemble layers: ``E`` independent members computed in one op."""

from __future__ import annotations

import math
import os
from typing import Callable, Optional, Tuple

import torch
from torch import nn
import torch.nn.functional as F

from offrl._cpu import cpu_vendor

__all__ = ["float32_head", "narrow_inputs", "Linear", "linear", "linear_backward", "EnsembleLinear", "EnsembleLayerNorm", "EnsembleBatchNorm", "get_activation", "ACTIVATIONS", "onednn_linear_enabled", "onednn_pays", "ONEDNN_ENV_VAR"]

ACTIVATIONS = {
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "swish": nn.SiLU,
    "silu": nn.SiLU,
    "gelu": nn.GELU,
    "elu": nn.ELU,
    "leaky_relu": nn.LeakyReLU,
    "sigmoid": nn.Sigmoid,
    "mish": nn.Mish,
}


def get_activation(name: str) -> nn.Module:
    """A new activation module. ReLU works in place: it always follows a
    layer whose output nothing else reads, and its backward needs only its
    result, so this saves a copy of every hidden activation."""
    if name == "relu":
        return nn.ReLU(inplace=True)
    try:
        return ACTIVATIONS[name]()
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; expected one of {sorted(ACTIVATIONS)}") from None


# -- float32 matmuls on the CPU: oneDNN or torch's own kernels
#
# torch's dense float32 ``mm``/``bmm``/``baddbmm`` on the CPU call MKL's sgemm,
# which on AMD CPUs takes a generic path: about half the FLOP rate oneDNN
# (also bundled with torch, used by its inference kernels) reaches on the same
# core (measured 104 against 227 GFLOP/s of CPU time for a (7936, 256) x
# (256, 256) product on an AVX-512 EPYC). CQL pushes ~8,000 rows per critic
# through the ensemble each step, so its update is bound by these products.
# The same maths (one product per member, float32 accumulation; only the
# summation order inside a dot product differs) goes through
# ``torch.ops.mkldnn._linear_pointwise`` with a hand-written backward when the
# op exists, checked once against ``F.linear``; otherwise, and for TorchScript
# / tracing / ONNX export, the plain ``baddbmm`` path runs.
#
# On Intel CPUs MKL runs its own fast path and oneDNN's route costs more than
# it gains: its forward product is no faster than ``baddbmm``, and the
# per-member results are stacked and the backward's transposed operands
# copied (an Intel Xeon with AVX-512, 1 thread, 2 members x (7936, 256) x
# (256, 256): the weight gradient 34 against 21-22 ms, the input gradient 25
# against 18 ms; whole updates 1.05-1.54x faster through MKL on all 21 MLP
# algorithms, CQL 1.21x). So oneDNN is the default where torch's BLAS is MKL
# on a CPU that is not Intel's; ``OFFRL_ONEDNN=1`` / ``0`` chooses by hand and
# :func:`onednn_linear_enabled` switches it at run time.

#: ``OFFRL_ONEDNN=1`` routes wide float32 CPU products through oneDNN on any
#: CPU, ``0`` through torch's own kernels; unset: by the CPU (see above)
ONEDNN_ENV_VAR = "OFFRL_ONEDNN"

_NARROW = 32  # features below which a backward product goes to MKL
#: multiply-adds per product below which the plain path runs: oneDNN's call
#: costs ~12 us CPU before any arithmetic (its weights are not prepacked), so
#: it wins only from about 2**20 (measured on a 1-thread AMD EPYC: a (16, 256)
#: x (256, 256) product breaks even, (100, 256) x (256, 256) 1.8x faster,
#: (1, 256) x (256, 256) 3x slower, (100, 3) x (3, 256) 3x slower)
_MIN_PRODUCT = 1 << 20
_ONEDNN: dict = {"checked": False, "op": None, "enabled": None, "min_product": _MIN_PRODUCT}


def _onednn_op():
    """``torch.ops.mkldnn._linear_pointwise`` if present and correct here, else ``None``."""
    if not _ONEDNN["checked"]:
        if _ONEDNN["enabled"] is None:  # first: a bad OFFRL_ONEDNN raises at every call until mended
            _ONEDNN["enabled"] = onednn_pays()
        _ONEDNN["checked"] = True
        try:
            if torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise"):
                op = torch.ops.mkldnn._linear_pointwise
                gen = torch.Generator().manual_seed(0)
                # on the CPU whatever the default device is (a meta-device context would fail the check for good)
                x = torch.randn(5, 40, generator=gen, device="cpu")
                w = torch.randn(40, 7, generator=gen, device="cpu")
                b = torch.randn(7, generator=gen, device="cpu")
                got = op(x, w.t(), b, "none", [], "")
                if torch.allclose(got, torch.addmm(b, x, w), rtol=1e-4, atol=1e-5):
                    _ONEDNN["op"] = op
        except Exception:  # an op with another signature in another torch: keep the plain path
            _ONEDNN["op"] = None
    return _ONEDNN["op"]


def onednn_pays(vendor: Optional[str] = None) -> bool:
    """Whether offrl's float32 CPU products go through oneDNN by default:
    ``OFFRL_ONEDNN`` if set (``1`` / ``0``), else unless torch's BLAS is MKL
    on an Intel CPU (``vendor``: the CPU's ``vendor_id``, read from
    ``/proc/cpuinfo`` when not given; unknown counts as not Intel, the
    choice offrl made before it looked)."""
    env = os.environ.get(ONEDNN_ENV_VAR, "").strip()
    if env:
        if env not in ("0", "1"):
            raise ValueError(f"{ONEDNN_ENV_VAR}={env!r}: expected 1 (oneDNN products) or 0 (torch's own)")
        return env == "1"
    vendor = cpu_vendor() if vendor is None else vendor
    return not (vendor == "GenuineIntel" and torch.backends.mkl.is_available())


def onednn_linear_enabled(enabled: bool = None) -> bool:  # type: ignore[assignment]
    """Whether :class:`EnsembleLinear` routes float32 CPU products through
    oneDNN (when available); with ``enabled`` given, switch it first (for
    benchmarks and tests comparing both paths)."""
    if enabled is not None:
        _onednn_op()  # the default first, so that it cannot replace the choice made here
        _ONEDNN["enabled"] = bool(enabled)
    return _onednn_op() is not None and bool(_ONEDNN["enabled"])


class _OneDnnEnsembleLinear(torch.autograd.Function):
    """``out[e] = x[e] @ weight[e] + bias[e]`` for each member ``e`` with
    oneDNN products; ``x`` ``(E, B, in)`` (any strides), ``weight``
    ``(E, in, out)``, ``bias`` ``(E, 1, out)``."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        op = _ONEDNN["op"]
        ctx.save_for_backward(x, weight)
        return torch.stack([op(x[e], weight[e].t(), bias[e, 0], "none", [], "") for e in range(weight.shape[0])])

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        x, weight = ctx.saved_tensors
        return _onednn_ensemble_grads(grad, x, weight, *ctx.needs_input_grad)


def _onednn_ensemble_grads(grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, need_x: bool, need_w: bool,
                           need_b: bool):
    """:class:`_OneDnnEnsembleLinear`'s gradients ``(grad_x, grad_w, grad_b)``
    (None where not needed)."""
    op = _ONEDNN["op"]
    grad = grad.contiguous()  # a broadcast gradient (from a sum) would take oneDNN's slow strided path
    members = range(weight.shape[0])
    grad_x = grad_w = grad_b = None
    # oneDNN wins on wide products; for a narrow side (a value head's one
    # output, the first layer's few inputs) MKL's gemm/gemv is faster
    narrow = min(weight.shape[1], weight.shape[2]) < _NARROW
    if need_x:  # grad[e] @ weight[e].T
        if weight.shape[2] == 1:  # an outer product: no sum, exactly the product's value
            grad_x = grad * weight.transpose(1, 2)
        elif weight.shape[2] < _NARROW:
            grad_x = torch.bmm(grad, weight.transpose(1, 2))
        else:
            grad_x = torch.stack([op(grad[e], weight[e], None, "none", [], "") for e in members])
    if need_w:  # x[e].T @ grad[e]
        if weight.shape[2] < min(weight.shape[1], _NARROW):  # few outputs: (grad[e].T x[e]).T, as for a head below
            grad_w = torch.stack([torch.mm(grad[e].t(), x[e]).t() for e in members])
        elif narrow:
            grad_w = torch.stack([torch.mm(x[e].t(), grad[e]) for e in members])
        else:
            grad_w = torch.stack([op(x[e].t(), grad[e].t(), None, "none", [], "") for e in members])
    if need_b:
        grad_b = grad.sum(dim=1, keepdim=True)
    return grad_x, grad_w, grad_b


class _OneColumnEnsembleLinear(torch.autograd.Function):
    """``out[e] = x[e] @ weight[e] + bias[e]`` for ``weight`` ``(E, in, 1)``
    (a critic ensemble's value head), ``x`` ``(E, B, in)``: on the CPU a
    batched product with one output column takes a slow path of MKL's
    ``bmm`` / ``baddbmm`` (2 x 256 rows x 256 x 1: 141 us forward, 113 and
    147 us for the two backward products, against 22 us for a 2-D ``addmm``
    per member and 8 us for the outer product ``grad_x``), so each member's
    product is a 2-D one, the same sums."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(x, weight)
        return torch.stack([torch.addmm(bias[e, 0], x[e], weight[e]) for e in range(weight.shape[0])])

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        x, weight = ctx.saved_tensors
        return _one_column_grads(grad, x, weight, *ctx.needs_input_grad)


def _one_column_grads(grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, need_x: bool, need_w: bool,
                      need_b: bool):
    """:class:`_OneColumnEnsembleLinear`'s gradients (None where not needed)."""
    grad_x = grad_w = grad_b = None
    if need_x:  # an outer product: no sum, exactly the product's value
        grad_x = grad * weight.transpose(1, 2)
    if need_w:
        grad_w = torch.stack([torch.mm(x[e].t(), grad[e]) for e in range(weight.shape[0])])
    if need_b:
        grad_b = grad.sum(dim=1, keepdim=True)
    return grad_x, grad_w, grad_b


#: output columns below which a batched float32 CPU product takes MKL's slow
#: narrow path (:class:`_FewColumnsEnsembleLinear`)
_FEW_COLUMNS = 16


class _FewColumnsEnsembleLinear(torch.autograd.Function):
    """``out[e] = x[e] @ weight[e] + bias[e]`` for ``weight`` ``(E, in, A)``
    with ``2 <= A < 16`` output columns (a discrete critic ensemble's head)
    on the CPU in float32: MKL's ``baddbmm`` / ``bmm`` take a slow path when
    the product's result has that few columns (two members, 256 inputs, 2
    columns, 64 rows: 40 us forward and 41 us for the weights' gradient;
    256 rows: 153 and 157 us), while the transposed products, whose results
    have ``A`` rows instead, are fast (10 and ~12 us; 24 and ~20 us): the
    same sums, ``out`` computed as ``(bias^T + weight^T x^T)^T``."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(x, weight)
        return _few_columns_forward(x, weight, bias)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        x, weight = ctx.saved_tensors
        return _few_columns_grads(grad, x, weight, *ctx.needs_input_grad)


def _few_columns_forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """:class:`_FewColumnsEnsembleLinear`'s output, a new contiguous ``(E, B, A)``
    tensor (never a view: an in-place ReLU may follow, also where one row
    makes the transposed result contiguous already)."""
    out = torch.baddbmm(bias.transpose(1, 2), weight.transpose(1, 2).contiguous(), x.transpose(1, 2))
    return out.transpose(1, 2).clone(memory_format=torch.contiguous_format)


def _few_columns_grads(grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, need_x: bool, need_w: bool,
                       need_b: bool):
    """:class:`_FewColumnsEnsembleLinear`'s gradients (None where not needed):
    ``grad_x`` by ``bmm`` (fast: its result has ``in`` columns), the
    weights' as ``(grad^T x)^T``."""
    grad_x = torch.bmm(grad, weight.transpose(1, 2)) if need_x else None
    grad_w = torch.bmm(grad.transpose(1, 2), x).transpose(1, 2).contiguous() if need_w else None
    grad_b = grad.sum(dim=1, keepdim=True) if need_b else None
    return grad_x, grad_w, grad_b


#: ``torch.compiler.is_exporting`` where torch has it (torch 2.5 does not: there the compile and ONNX-export tests
#: above it stand alone, and the export tests pass on it)
_IS_EXPORTING: Callable[[], bool] = getattr(torch.compiler, "is_exporting", None) or (lambda: False)


def _onnx_exporting() -> bool:
    """``torch.onnx.is_in_onnx_export()`` without its per-call imports (8 us)."""
    flags = _ONEDNN.get("onnx_flags")
    if flags is None:
        try:
            from torch.onnx._internal.exporter import _flags
            from torch.onnx._internal.torchscript_exporter._globals import GLOBALS

            flags = _ONEDNN["onnx_flags"] = (_flags, GLOBALS)
        except Exception:  # another torch layout: ask the public function
            return torch.onnx.is_in_onnx_export()
    return bool(flags[1].in_onnx_export or flags[0]._is_onnx_exporting)


def _use_onednn(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """The oneDNN path: float32 on the CPU, eager mode (not scripted, traced,
    compiled, exported). Called before any size test: under export that
    test would guard on a symbolic batch size."""
    # the cheap tests first: a meta tensor (the memory check's probe) must not reach the op's check
    return _eager_cpu_float32(x, weight) and _onednn_op() is not None and _ONEDNN["enabled"]


def _eager_cpu_float32(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """float32 on the CPU outside autocast, in eager mode (not scripted,
    traced, compiled, exported): where offrl picks its own product kernels."""
    return (
        x.is_cpu
        and x.dtype == torch.float32
        and weight.dtype == torch.float32
        and not torch.is_autocast_enabled("cpu")  # bf16-mixed: autocast's bf16 products instead
        and not torch.jit.is_scripting()
        and torch._C._get_tracing_state() is None
        and not torch.compiler.is_compiling()
        and not _IS_EXPORTING()
        and not _onnx_exporting()
    )


class _OneDnnLinear(torch.autograd.Function):
    """``x @ weight.T + bias`` (``nn.Linear``'s layout) with oneDNN products;
    ``x`` ``(N, in)``."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _ONEDNN["op"](x, weight, bias, "none", [], "")

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        op = _ONEDNN["op"]
        x, weight = ctx.saved_tensors
        grad = grad.contiguous()
        narrow = min(weight.shape) < _NARROW
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:  # grad @ weight
            grad_x = torch.mm(grad, weight) if narrow else op(grad, weight.t(), None, "none", [], "")
        if ctx.needs_input_grad[1]:  # grad.T @ x
            grad_w = torch.mm(grad.t(), x) if narrow else op(grad.t(), x.t(), None, "none", [], "")
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = grad.sum(dim=0)
        return grad_x, grad_w, grad_b


#: under CPU autocast (``precision="bf16-mixed"``), a product with fewer
#: inputs than ``min_inputs`` and at most ``max_elements`` input elements
#: (rows x inputs, per member) runs in float32 (:func:`narrow_inputs`);
#: ``min_inputs`` 0 turns the rule off
_BF16: dict = {"min_inputs": 32, "max_elements": 4096}


def narrow_inputs(rows: int, in_features: int) -> bool:
    """Whether a product of ``rows`` rows over ``in_features`` inputs stays
    float32 in a bf16-mixed step on the CPU (under autocast, and in the
    written-out passes of :mod:`offrl.models.plain_mlp`). bf16's gain is in
    a wide product's multiply-adds; a first layer reading a 3-17 feature
    observation has few to shrink, and on a small batch its bf16 product
    costs more than float32's and the casts of its input. Measured on a
    1-thread AVX-512 BF16 EPYC, torch 2.13, a two-member ensemble's layer to
    256 units with its ReLU, in us, float32 (its output then cast) against
    bf16: 4 inputs, 64 rows 15 / 35, 256 rows 46 / 64, 1,024 rows 183 / 183,
    4,096 rows 746 / 671; 17 inputs, 64 rows 23 / 38, 256 rows 77 / 81,
    1,024 rows 286 / 244 (at 25,600 rows, BEAR's candidate actions, bf16
    is 2.8x faster: float32's output is four times the memory traffic)."""
    return in_features < _BF16["min_inputs"] and rows * in_features <= _BF16["max_elements"]


def _cpu_autocast_narrow(x: torch.Tensor, in_features: int) -> bool:
    """A product under CPU autocast that :func:`narrow_inputs` keeps in float32
    (autocast first: it is off under tracing and export, where the size test
    would read a traced size)."""
    return torch.is_autocast_enabled("cpu") and x.is_cpu and narrow_inputs(x.numel() // max(in_features, 1), in_features)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` with :class:`Linear`'s product path
    (for slices of a layer's weights, as the attention's key and value
    projections at inference)."""
    if _cpu_autocast_narrow(x, weight.shape[1]):
        with torch.autocast("cpu", enabled=False):
            return linear(x.float(), weight, bias)
    if not _use_onednn(x, weight) or x.numel() * weight.shape[0] < _ONEDNN["min_product"]:
        return F.linear(x, weight, bias)
    flat = x.reshape(-1, x.shape[-1])
    if torch.is_grad_enabled():
        out = _OneDnnLinear.apply(flat, weight, bias)
    else:
        out = _ONEDNN["op"](flat, weight, bias, "none", [], "")
    # a 2-D input's output as is: an in-place activation on a view of it would make autograd copy slices
    return out if x.dim() == 2 else out.view(*x.shape[:-1], weight.shape[0])


def linear_backward(grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, input_grad: bool = True,
                    weight_grad: bool = True):
    """The gradients of ``linear(x, weight, bias)`` for 2-D ``x`` ``(N, in)``
    given the output's ``grad`` ``(N, out)``: ``(grad_x or None, grad_weight,
    grad_bias)`` (the last two None without ``weight_grad``), by the products
    :func:`linear`'s own backward uses (oneDNN for wide float32 CPU products,
    else torch's), for code that writes a network's backward out instead of
    recording an autograd graph."""
    wide = min(weight.shape) >= _NARROW and _use_onednn(x, weight) and x.shape[0] * weight.numel() >= _ONEDNN["min_product"]
    grad = grad.contiguous()
    grad_x = None
    if input_grad:
        if wide:
            grad_x = _ONEDNN["op"](grad, weight.t(), None, "none", [], "")
        elif weight.shape[0] == 1:  # an outer product: no sum, exactly the product's value
            grad_x = grad * weight
        else:
            grad_x = torch.mm(grad, weight)
    if not weight_grad:
        return grad_x, None, None
    if wide:
        grad_w = _ONEDNN["op"](grad.t(), x.t(), None, "none", [], "")
    elif weight.shape[1] < min(weight.shape[0], _NARROW):
        # few inputs (a first layer): (x.T grad).T, 2-4x faster than grad.T x from 256 rows (225 x 4 inputs on an
        # AMD EPYC: 11 against 48 us; Intel Xeon, 1,024 x 4 -> 256: 40 against 143 us)
        grad_w = torch.mm(x.t(), grad).t().contiguous()
    else:  # grad.T x, in the weight's layout as autograd computes it: for a head (64 rows, 256 inputs, 2 outputs:
        # 5 against 25 us) and for wide layers, where the transposed route's copy costs 1.2-2.3x through MKL on an
        # Intel Xeon (100 x 256 -> 256: 122 against 213 us; 100 x 750 -> 750: 1.66 against 2.61 ms)
        grad_w = torch.mm(grad.t(), x)
    return grad_x, grad_w, grad.sum(dim=0)


def float32_head(layer: Callable[[torch.Tensor], torch.Tensor], features: torch.Tensor) -> torch.Tensor:
    """``layer(features)`` computed in float32: the output layer of a shared
    network (Q-values, state values, a policy's mean, log-std or logits).
    In a ``precision="bf16-mixed"`` step (under autocast, see
    :mod:`offrl.training.precision`) the hidden layers' products run in bf16
    but this small product runs in float32 on the upcast features, so the
    values a target, a TD error or a log-probability is computed from keep
    float32's 24-bit mantissa (a bf16 Q-value of 100 would be rounded to a
    multiple of 0.5). Outside autocast: ``layer(features)``."""
    kind = features.device.type
    try:
        enabled = torch.is_autocast_enabled(kind)
    except RuntimeError:  # a device autocast does not know: the meta device of the size checks
        enabled = False
    if not enabled:
        return layer(features)
    with torch.autocast(kind, enabled=False):
        return layer(features.float())


class Linear(nn.Linear):
    """``nn.Linear`` (same parameters, same state-dict keys) whose float32
    CPU products go through oneDNN in eager mode (see the note above
    :func:`onednn_linear_enabled`); inputs ``(..., in)``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return linear(x, self.weight, self.bias)


class EnsembleLinear(nn.Module):
    """``E`` linear layers with weights ``(E, in, out)``.

    Input ``(B, in)`` (shared by all members) or ``(E, B, in)``; output
    ``(E, B, out)``. Each member is initialised like ``nn.Linear``.
    """

    def __init__(self, ensemble_size: int, in_features: int, out_features: int) -> None:
        super().__init__()
        self.ensemble_size = ensemble_size
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(torch.empty(ensemble_size, in_features, out_features))
        self.bias = nn.Parameter(torch.empty(ensemble_size, 1, out_features))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.in_features) if self.in_features > 0 else 0.0
        # kaiming_uniform(a=sqrt(5)) on an (out, in) matrix gives this bound too
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # the sizes as Python ints: under tracing (export) the weight's shape would be traced values
        return ensemble_linear(x, self.weight, self.bias, (self.ensemble_size, self.in_features, self.out_features))

    def extra_repr(self) -> str:
        return f"ensemble_size={self.ensemble_size}, in_features={self.in_features}, out_features={self.out_features}"


def _onednn_sized(x: torch.Tensor, weight: torch.Tensor) -> bool:
    return _use_onednn(x, weight) and x.shape[-2] * weight.shape[1] * weight.shape[2] >= _ONEDNN["min_product"]


def ensemble_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                    sizes: Optional[Tuple[int, int, int]] = None) -> torch.Tensor:
    """:class:`EnsembleLinear`'s output for ``weight`` ``(E, in, out)``,
    ``bias`` ``(E, 1, out)`` and input ``(B, in)`` (shared) or ``(E, B, in)``:
    oneDNN products per member for wide float32 CPU products, per-member 2-D
    products for one output column, transposed batched products for 2-15
    columns, else one ``baddbmm``. ``sizes``:
    ``(E, in, out)`` as Python ints (else read from ``weight``)."""
    ensemble_size, in_features, out_features = sizes if sizes is not None else weight.shape
    if _cpu_autocast_narrow(x[0] if x.dim() == 3 else x, in_features):
        with torch.autocast("cpu", enabled=False):
            return ensemble_linear(x.float(), weight, bias, sizes)
    if _onednn_sized(x, weight):
        if x.dim() == 2:
            x = x.unsqueeze(0).expand(ensemble_size, x.shape[0], x.shape[1])
        if torch.is_grad_enabled():
            return _OneDnnEnsembleLinear.apply(x, weight, bias)
        op = _ONEDNN["op"]  # inference (targets, acting): no autograd node to record
        return torch.stack([op(x[e], weight[e].t(), bias[e, 0], "none", [], "") for e in range(ensemble_size)])
    if ensemble_size == 1:  # one member: a plain fused addmm (views, whose backward is free)
        flat = x if x.dim() == 2 else x.view(x.shape[1], x.shape[2])
        return torch.addmm(bias.view(out_features), flat, weight.view(in_features, out_features)).unsqueeze(0)
    if x.dim() == 2:  # shared input: a broadcast view, then one fused batched matmul + bias
        x = x.unsqueeze(0).expand(ensemble_size, x.shape[0], x.shape[1])
    if out_features < _FEW_COLUMNS and _eager_cpu_float32(x, weight):  # a head: see the classes
        if out_features == 1:
            return _OneColumnEnsembleLinear.apply(x, weight, bias)
        if torch.is_grad_enabled():
            return _FewColumnsEnsembleLinear.apply(x, weight, bias)
        return _few_columns_forward(x, weight, bias)
    return torch.baddbmm(bias, x, weight)


def ensemble_linear_backward(grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, input_grad: bool = True):
    """The gradients of :func:`ensemble_linear` (``E >= 2`` members) given
    the output's ``grad`` ``(E, B, out)``: ``(grad_x or None, grad_weight,
    grad_bias)`` by the products its own backward uses (for code that writes
    a network's backward out, as :func:`linear_backward` for one layer);
    ``grad_x`` is ``(E, B, in)`` also for a shared 2-D ``x``."""
    if x.dim() == 2:
        x = x.unsqueeze(0).expand(weight.shape[0], x.shape[0], x.shape[1])
    if _onednn_sized(x, weight):
        return _onednn_ensemble_grads(grad, x, weight, input_grad, True, True)
    if weight.shape[2] < _FEW_COLUMNS and _eager_cpu_float32(x, weight):
        few = _one_column_grads if weight.shape[2] == 1 else _few_columns_grads
        return few(grad, x, weight, input_grad, True, True)
    # baddbmm's backward (autograd's products)
    grad_x = torch.bmm(grad, weight.transpose(1, 2)) if input_grad else None
    return grad_x, torch.bmm(x.transpose(1, 2), grad), grad.sum(dim=1, keepdim=True)


class EnsembleLayerNorm(nn.Module):
    """Layer norm over the last axis with per-member affine parameters."""

    def __init__(self, ensemble_size: int, features: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.features = features
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(ensemble_size, 1, features))
        self.bias = nn.Parameter(torch.zeros(ensemble_size, 1, features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (self.features,), eps=self.eps) * self.weight + self.bias


class EnsembleBatchNorm(nn.Module):
    """Batch norm per member: ``(E, B, F)`` normalised over ``B``."""

    def __init__(self, ensemble_size: int, features: int) -> None:
        super().__init__()
        self.ensemble_size = ensemble_size
        self.features = features
        self.norm = nn.BatchNorm1d(ensemble_size * features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e, b, f = x.shape
        y = self.norm(x.transpose(0, 1).reshape(b, e * f))
        return y.reshape(b, e, f).transpose(0, 1)
