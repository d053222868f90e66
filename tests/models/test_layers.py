"""EnsembleLinear: the oneDNN product path against a naive per-member loop."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from offrl.models import layers
from offrl.models.layers import EnsembleLinear


@pytest.fixture
def onednn_state():
    """Restores the switch; small products take the oneDNN path too (the
    size threshold off) so that the small hypothesis shapes exercise it."""
    before, threshold = layers._ONEDNN["enabled"], layers._ONEDNN["min_product"]
    layers._ONEDNN["min_product"] = 0
    yield
    layers._ONEDNN["enabled"] = before
    layers._ONEDNN["min_product"] = threshold


def _naive(layer: EnsembleLinear, x: torch.Tensor) -> torch.Tensor:
    """Member by member, ``x[e] @ W[e] + b[e]`` in float64."""
    w, b = layer.weight.double(), layer.bias.double()
    xs = [x.double()] * layer.ensemble_size if x.dim() == 2 else [x[e].double() for e in range(layer.ensemble_size)]
    return torch.stack([xs[e] @ w[e] + b[e, 0] for e in range(layer.ensemble_size)])


def _grads(layer: EnsembleLinear, x: torch.Tensor, upstream: torch.Tensor, onednn: bool):
    layers.onednn_linear_enabled(onednn)
    layer.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_(True)
    out = layer(x)
    out.backward(upstream)
    return out.detach(), x.grad, layer.weight.grad, layer.bias.grad


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])  # the fixture only restores a flag each example sets
@given(
    e=st.integers(1, 3), b=st.integers(1, 40), i=st.integers(1, 40), o=st.integers(1, 40),
    shared=st.booleans(), seed=st.integers(0, 2**16),
)
def test_onednn_path_matches_naive_loop_and_baddbmm(onednn_state, e, b, i, o, shared, seed):
    torch.manual_seed(seed)
    layer = EnsembleLinear(e, i, o)
    x = torch.randn(b, i) if shared else torch.randn(e, b, i)
    upstream = torch.randn(e, b, o)
    fast = _grads(layer, x, upstream, True)
    plain = _grads(layer, x, upstream, False)
    # forward against float64 member-by-member maths
    torch.testing.assert_close(fast[0].double(), _naive(layer, x), rtol=1e-5, atol=1e-5)
    # outputs and all gradients against the baddbmm path (float32, other summation order)
    for got, want in zip(fast, plain):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_broadcast_upstream_gradient(onednn_state):
    """A gradient from ``.sum()`` arrives as a stride-0 view: same result."""
    torch.manual_seed(0)
    layer = EnsembleLinear(2, 16, 8)
    x = torch.randn(2, 5, 16)
    results = []
    for flag in (True, False):
        layers.onednn_linear_enabled(flag)
        layer.zero_grad(set_to_none=True)
        layer(x).sum().backward()
        results.append((layer.weight.grad.clone(), layer.bias.grad.clone()))
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(results[0][1], torch.full((2, 1, 8), 5.0))


def test_no_grad_input_skips_input_gradient(onednn_state):
    layers.onednn_linear_enabled(True)
    layer = EnsembleLinear(2, 8, 4)
    x = torch.randn(3, 8)
    layer(x).sum().backward()
    assert layer.weight.grad is not None and x.grad is None


def test_float64_and_scripting_take_the_plain_path(onednn_state):
    layers.onednn_linear_enabled(True)
    layer = EnsembleLinear(2, 8, 4).double()
    x = torch.randn(3, 8, dtype=torch.float64)
    out = layer(x)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, _naive(layer, x))
    traced = torch.jit.trace(EnsembleLinear(2, 8, 4), torch.randn(3, 8))
    assert traced(torch.randn(3, 8)).shape == (2, 3, 4)


def test_switch_reports_state(onednn_state):
    assert layers.onednn_linear_enabled(False) is False
    available = layers._onednn_op() is not None
    assert layers.onednn_linear_enabled(True) is available


def test_the_default_product_path_follows_the_cpu_and_the_environment(monkeypatch):
    """oneDNN by default except where torch's BLAS is MKL on an Intel CPU
    (MKL's own fast path there); OFFRL_ONEDNN chooses by hand."""
    monkeypatch.delenv(layers.ONEDNN_ENV_VAR, raising=False)
    monkeypatch.setattr(torch.backends.mkl, "is_available", lambda: True)
    assert layers.onednn_pays("GenuineIntel") is False
    assert layers.onednn_pays("AuthenticAMD") is True
    assert layers.onednn_pays("") is True  # not reported (not Linux, ARM): as before the CPU was read
    monkeypatch.setattr(torch.backends.mkl, "is_available", lambda: False)
    assert layers.onednn_pays("GenuineIntel") is True
    for value, expected in (("1", True), ("0", False), (" 0 ", False)):
        monkeypatch.setenv(layers.ONEDNN_ENV_VAR, value)
        assert layers.onednn_pays("GenuineIntel") is expected and layers.onednn_pays("AuthenticAMD") is expected
    monkeypatch.setenv(layers.ONEDNN_ENV_VAR, "yes")
    with pytest.raises(ValueError, match="OFFRL_ONEDNN='yes': expected 1 .* or 0"):
        layers.onednn_pays()
    # the first product decides once, from the CPU's vendor; a choice made by hand first is kept
    monkeypatch.delenv(layers.ONEDNN_ENV_VAR)
    monkeypatch.setattr(torch.backends.mkl, "is_available", lambda: True)
    for vendor, expected in (("GenuineIntel", False), ("AuthenticAMD", True)):
        monkeypatch.setattr(layers, "cpu_vendor", lambda v=vendor: v)
        monkeypatch.setitem(layers._ONEDNN, "checked", False)
        monkeypatch.setitem(layers._ONEDNN, "enabled", None)
        available = layers._onednn_op() is not None
        assert layers.onednn_linear_enabled() is (expected and available)
        monkeypatch.setitem(layers._ONEDNN, "checked", False)
        monkeypatch.setitem(layers._ONEDNN, "enabled", None)
        assert layers.onednn_linear_enabled(not expected) is (not expected and available)
        assert layers.onednn_linear_enabled() is (not expected and available)
    monkeypatch.setitem(layers._ONEDNN, "checked", False)
    monkeypatch.setitem(layers._ONEDNN, "enabled", None)
    monkeypatch.setenv(layers.ONEDNN_ENV_VAR, "2")
    for _ in range(2):  # raised at every call until mended, never silently decided
        with pytest.raises(ValueError, match="OFFRL_ONEDNN"):
            layers.onednn_linear_enabled()


def test_the_cpu_description_is_the_first_processors(tmp_path):
    from offrl import _cpu

    path = tmp_path / "cpuinfo"
    path.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu avx512f\n\n"
                    "processor\t: 1\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu avx512_bf16\n")
    assert _cpu.cpu_vendor(str(path)) == "GenuineIntel"
    assert _cpu.cpu_flags(str(path)) == frozenset({"fpu", "avx512f"})
    path.write_text("processor\t: 0\nFeatures\t: fp asimd bf16\nCPU implementer\t: 0x41\n")  # ARM
    assert _cpu.cpu_vendor(str(path)) == "" and _cpu.cpu_flags(str(path)) == frozenset({"fp", "asimd", "bf16"})
    assert _cpu.cpuinfo(str(path))["cpu implementer"] == "0x41"
    assert _cpu.cpuinfo(str(tmp_path / "absent")) == {} and _cpu.cpu_vendor(str(tmp_path / "absent")) == ""


def test_the_cpu_vendor_without_proc_cpuinfo_comes_from_platform(tmp_path, monkeypatch):
    from offrl import _cpu

    monkeypatch.setattr(_cpu, "CPUINFO", str(tmp_path / "absent"))  # as on Windows
    for processor, vendor in (("Intel64 Family 6 Model 85 Stepping 7, GenuineIntel", "GenuineIntel"),
                              ("AMD64 Family 25 Model 1 Stepping 1, AuthenticAMD", "AuthenticAMD"),
                              ("i386", ""), ("", "")):
        monkeypatch.setattr(_cpu.platform, "processor", lambda p=processor: p)
        assert _cpu.cpu_vendor(_cpu.CPUINFO) == vendor


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lead=st.lists(st.integers(1, 5), min_size=1, max_size=2), i=st.integers(1, 48), o=st.integers(1, 48),
    bias=st.booleans(), seed=st.integers(0, 2**16),
)
def test_linear_onednn_path_matches_f_linear(onednn_state, lead, i, o, bias, seed):
    """layers.Linear (oneDNN) against F.linear: outputs and all gradients."""
    torch.manual_seed(seed)
    layer = layers.Linear(i, o, bias=bias)
    x = torch.randn(*lead, i)
    upstream = torch.randn(*lead, o)
    results = []
    for flag in (True, False):
        layers.onednn_linear_enabled(flag)
        layer.zero_grad(set_to_none=True)
        xx = x.clone().requires_grad_(True)
        out = layer(xx)
        out.backward(upstream)
        results.append((out.detach(), xx.grad, layer.weight.grad) + ((layer.bias.grad,) if bias else ()))
    want = x.double() @ layer.weight.double().t() + (layer.bias.double() if bias else 0.0)
    torch.testing.assert_close(results[0][0].double(), want, rtol=1e-5, atol=1e-5)
    for got, ref in zip(*results):
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        layers.onednn_linear_enabled(True)
        torch.testing.assert_close(layer(x), results[1][0], rtol=1e-5, atol=1e-5)


def test_linear_keeps_nn_linear_state_dict_keys():
    assert isinstance(layers.Linear(3, 2), torch.nn.Linear)
    assert set(layers.Linear(3, 2).state_dict()) == set(torch.nn.Linear(3, 2).state_dict()) == {"weight", "bias"}


def test_small_products_take_the_plain_path(monkeypatch):
    """Below ``min_product`` multiply-adds (per member) the oneDNN op is not
    called (its fixed cost outweighs the arithmetic); at or above it is."""
    if layers._onednn_op() is None:
        pytest.skip("oneDNN's _linear_pointwise is not available in this torch build")
    calls = []
    real = layers._ONEDNN["op"]
    monkeypatch.setitem(layers._ONEDNN, "op", lambda *a: calls.append(1) or real(*a))
    monkeypatch.setitem(layers._ONEDNN, "enabled", True)
    monkeypatch.setitem(layers._ONEDNN, "min_product", 8 * 4 * 3)
    linear, ensemble = layers.Linear(4, 3), EnsembleLinear(2, 4, 3)
    with torch.no_grad():
        linear(torch.randn(7, 4))
        ensemble(torch.randn(7, 4))
        assert calls == []
        linear(torch.randn(2, 4, 4))  # 8 rows
        assert calls == [1]
        ensemble(torch.randn(2, 8, 4))  # one call per member
        assert calls == [1, 1, 1]


@settings(max_examples=40, deadline=None)
@given(e=st.integers(1, 4), b=st.integers(1, 50), i=st.integers(1, 40), o=st.integers(1, 17), shared=st.booleans(),
       seed=st.integers(0, 2**16), wanted=st.sampled_from(["all", "no_input", "input_only"]))
def test_narrow_heads_match_the_naive_loop_and_baddbmms_gradients(e, b, i, o, shared, seed, wanted):
    """A critic ensemble's value head (one output column: per-member 2-D
    products, _OneColumnEnsembleLinear) and a head of 2-15 columns
    (transposed batched products, _FewColumnsEnsembleLinear): values and
    gradients are the naive loop's and baddbmm's."""
    torch.manual_seed(seed)
    layer = EnsembleLinear(e, i, o)
    x = torch.randn(b, i) if shared else torch.randn(e, b, i)
    x.requires_grad_(wanted != "no_input")
    if wanted == "input_only":
        layer.requires_grad_(False)
    upstream = torch.randn(e, b, o)
    out = layer(x)
    torch.testing.assert_close(out.double(), _naive(layer, x.detach()), rtol=1e-5, atol=1e-5)
    grads = torch.autograd.grad((out * upstream).sum(), [t for t in (x, layer.weight, layer.bias) if t.requires_grad])
    expanded = x.unsqueeze(0).expand(e, b, i) if shared else x
    reference = torch.baddbmm(layer.bias, expanded, layer.weight)
    expected = torch.autograd.grad((reference * upstream).sum(), [t for t in (x, layer.weight, layer.bias) if t.requires_grad])
    for got, want in zip(grads, expected):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows", [1, 5])
def test_a_narrow_hidden_layer_takes_an_in_place_relu(rows):
    """A hidden layer of 2 units (the few-column path) followed by the
    encoder's in-place ReLU, with one row too (where the transposed result
    is contiguous as it is): its output is a tensor of its own, not a view."""
    layer = EnsembleLinear(2, 8, 2)
    x = torch.randn(2, rows, 8, requires_grad=True)
    out = torch.relu_(layer(x))
    out.sum().backward()
    assert x.grad is not None and layer.weight.grad.shape == (2, 8, 2)


@pytest.mark.parametrize("columns, path", [(1, "_OneColumnEnsembleLinear"), (3, "_FewColumnsEnsembleLinear"),
                                           (15, "_FewColumnsEnsembleLinear")])
def test_narrow_heads_take_their_path_on_the_cpu_in_float32_only(columns, path, monkeypatch):
    calls = []
    original = getattr(layers, path).apply
    monkeypatch.setattr(getattr(layers, path), "apply", lambda *a: calls.append(1) or original(*a))
    layer = EnsembleLinear(2, 8, columns)
    layer(torch.randn(2, 5, 8))
    assert calls == [1]
    layer.double()(torch.randn(2, 5, 8, dtype=torch.float64))  # float64: baddbmm
    with torch.autocast("cpu", dtype=torch.bfloat16):  # bf16-mixed: autocast's product (32 inputs: not narrow)
        EnsembleLinear(2, 32, columns)(torch.randn(2, 5, 32))
    EnsembleLinear(2, 8, 16)(torch.randn(2, 5, 8))  # 16 columns: baddbmm
    assert calls == [1]


def _fresh_onednn_check(monkeypatch):
    monkeypatch.setitem(layers._ONEDNN, "checked", False)
    monkeypatch.setitem(layers._ONEDNN, "op", None)


@pytest.mark.skipif(not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")),
                    reason="this torch build has no oneDNN pointwise linear")
def test_the_onednn_check_survives_a_meta_device_context_and_a_build(monkeypatch):
    """The op's one-off check ran inside the memory check's meta-device
    context (the first forward pass of a build) and failed there, which
    turned oneDNN off for the whole process."""
    _fresh_onednn_check(monkeypatch)
    with torch.device("meta"):
        assert layers._onednn_op() is not None
    _fresh_onednn_check(monkeypatch)
    with torch.device("meta"):  # a meta tensor must not reach the check at all
        assert not layers._use_onednn(torch.empty(4, 8), torch.empty(8, 8))
    assert not layers._ONEDNN["checked"]
    import numpy as np

    import offrl
    from offrl.dataset import MDPDataset

    rng = np.random.default_rng(0)
    dataset = MDPDataset(rng.normal(size=(64, 3)).astype(np.float32), rng.uniform(-1, 1, size=(64, 1)).astype(np.float32),
                         rng.normal(size=64).astype(np.float32), (np.arange(64) % 32 == 31).astype(np.float32))
    offrl.algos.SACConfig().create().build_with_dataset(dataset)
    assert layers._onednn_op() is not None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(members=st.integers(2, 3), rows=st.sampled_from([1, 7, 64, 300]), n_in=st.sampled_from([3, 40, 256]),
       n_out=st.sampled_from([1, 2, 6, 40, 256]), shared=st.booleans(), seed=st.integers(0, 2**16))
def test_ensemble_linear_backward_equals_the_layers_autograd(members, rows, n_in, n_out, shared, seed):
    """The written-out steps' gradients of an ensemble layer (plain_mlp) are
    its module's own: each product path (oneDNN, one column, few columns,
    baddbmm), for
    a shared 2-D input and per-member inputs."""
    gen = torch.Generator().manual_seed(seed)
    layer = EnsembleLinear(members, n_in, n_out)
    x = torch.randn(*(() if shared else (members,)), rows, n_in, generator=gen, requires_grad=True)
    grad = torch.randn(members, rows, n_out, generator=gen)
    out = layer(x)
    expected = torch.autograd.grad(out, [x, layer.weight, layer.bias], grad)
    with torch.no_grad():
        torch.testing.assert_close(layers.ensemble_linear(x, layer.weight, layer.bias), out)
        grad_x, grad_w, grad_b = layers.ensemble_linear_backward(grad, x, layer.weight)
    torch.testing.assert_close(grad_w, expected[1], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grad_b, expected[2], rtol=1e-5, atol=1e-5)
    # per member (E, B, in); a shared input's gradient is their sum over the members
    torch.testing.assert_close(grad_x.sum(dim=0) if shared else grad_x, expected[0], rtol=1e-5, atol=1e-5)
    assert layers.ensemble_linear_backward(grad, x, layer.weight, input_grad=False)[0] is None


@pytest.mark.parametrize("ensemble", [False, True])
def test_narrow_products_stay_float32_under_cpu_autocast(ensemble, monkeypatch):
    """Under CPU autocast a layer with fewer than 32 inputs on at most 4,096
    input elements computes what it computes outside autocast, bit for bit;
    a wider one, or the same one on more rows, runs in bf16; with the rule
    off (``min_inputs`` 0) the narrow one runs in bf16 too."""
    torch.manual_seed(0)

    def make(n_in):
        return EnsembleLinear(2, n_in, 16) if ensemble else layers.Linear(n_in, 16)

    narrow, wide = make(5), make(32)
    x5, x32 = torch.randn(7, 5), torch.randn(7, 32)
    expected = narrow(x5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, got_wide = narrow(x5), wide(x32)
    assert got.dtype == torch.float32 and torch.equal(got, expected)
    assert got_wide.dtype == torch.bfloat16
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert narrow(torch.randn(820, 5)).dtype == torch.bfloat16  # 4,100 input elements
        assert narrow(torch.randn(819, 5)).dtype == torch.float32
    assert layers.narrow_inputs(1, 31) and not layers.narrow_inputs(1, 32)
    assert layers.narrow_inputs(1024, 4) and not layers.narrow_inputs(1025, 4)
    monkeypatch.setitem(layers._BF16, "min_inputs", 0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert narrow(x5).dtype == torch.bfloat16


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 80), n_in=st.sampled_from([1, 3, 17, 64, 256]), n_out=st.sampled_from([1, 2, 6, 15, 40, 256]),
       seed=st.integers(0, 2**16))
def test_linear_backward_equals_f_linears_autograd(rows, n_in, n_out, seed):
    """The written-out gradients of one layer (plain_mlp) are F.linear's, for
    few inputs, few outputs (a head: grad.T x) and wide layers alike."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, n_in, generator=gen, requires_grad=True)
    weight = torch.randn(n_out, n_in, generator=gen, requires_grad=True)
    bias = torch.randn(n_out, generator=gen, requires_grad=True)
    grad = torch.randn(rows, n_out, generator=gen)
    expected = torch.autograd.grad(torch.nn.functional.linear(x, weight, bias), [x, weight, bias], grad)
    with torch.no_grad():
        got = layers.linear_backward(grad, x, weight)
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.is_contiguous()
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)  # sums of up to 256 unit-normal products: ~16
