"""Model files and ``predict`` inputs fed hostile values. The contract:

* loading a model file returns an algorithm whose predictions on finite
  input are finite, or raises ValueError / TypeError naming the file; never
  another exception from a library, and nothing declared in the file is
  allocated before it is checked against the tensors the file holds (a
  declared size of 10**12 would end in MemoryError or a long stall here);
* ``predict`` / ``predict_value`` / ``sample_action`` return finite values
  for a batch of finite real numbers, or raise ValueError / TypeError
  naming the argument.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from fuzz_budget import budget
from offrl import load_learnable
from offrl._model_file import read_payload, write_payload
from offrl.algos import DQNConfig, SACConfig
from offrl.algos.inputs_check import FLOAT32_MAX
from offrl.models import VectorEncoderFactory
from offrl.preprocessing import MinMaxActionScaler, StandardObservationScaler

pytestmark = pytest.mark.fuzz


def _algo(kind: str):
    small = VectorEncoderFactory(hidden_units=[4])
    if kind == "dqn":
        config = DQNConfig(encoder_factory=small, observation_scaler=StandardObservationScaler(
            mean=np.array([0.5, -1.0, 2.0]), std=np.array([1.0, 2.0, 0.5])))
        algo = config.create()
        algo.create_impl((3,), 2)
    else:
        config = SACConfig(actor_encoder_factory=small, critic_encoder_factory=small,
                           observation_scaler=StandardObservationScaler(mean=np.zeros(3), std=np.ones(3)),
                           action_scaler=MinMaxActionScaler(minimum=-np.ones(2), maximum=np.ones(2)))
        algo = config.create()
        algo.create_impl((3,), 2)
    return algo


def _file_bytes(kind: str) -> bytes:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:  # built once at import, nothing left behind
        path = Path(tmp) / "model.d3"
        _algo(kind).save(path)
        return path.read_bytes()


VALID = {kind: _file_bytes(kind) for kind in ("dqn", "sac")}

#: hostile values for a config field, a shape or a state entry
def _writable(value) -> bool:
    """Whether the installed safetensors can write ``value`` (0.4.0, CI's
    minimum, cannot write complex tensors: such a file is made by hand in
    tests/test_serialization.py)."""
    from safetensors.torch import save

    if not isinstance(value, torch.Tensor):
        return True
    try:
        save({"x": value})
    except (KeyError, TypeError, ValueError):
        return False
    return True


VALUES = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([0, 1, 2, 10**7, 10**12, 2**62, -1, True, None, "3", 1.5, float("nan")]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.lists(st.sampled_from([1, 3, 0, -1, 10**6, 10**12, 2**40]), max_size=4),
    st.sampled_from([v for v in [
        torch.zeros(3), torch.zeros(3, dtype=torch.float64), torch.full((3,), float("nan")),
        torch.ones(3, dtype=torch.complex64), torch.tensor([1, 2, 3]), torch.zeros(0), torch.zeros(10**5),
        torch.tensor([0.0, 0.0, 0.0], dtype=torch.float64), torch.tensor([-1.0, 1.0, 1.0], dtype=torch.float64),
        {}, [], {"state": {}, "param_groups": []}, {"weight": torch.zeros(2)},
    ] if _writable(v)]),
)


def _paths(payload: dict, params: dict) -> list:
    """Every place a hostile value can go: (container, key) pairs."""
    out = []

    def walk(node, depth=0):
        if depth > 6:
            return
        if isinstance(node, dict):
            for key, value in node.items():
                out.append((node, key))
                walk(value, depth + 1)
        elif isinstance(node, list):
            for i, value in enumerate(node):
                out.append((node, i))
                walk(value, depth + 1)

    walk(params)
    for entry in ("modules", "optimizers", "scalers", "grad_step"):
        out.append((payload, entry))
        walk(payload[entry])
    return out


def _assert_load_contract(path, name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            algo = load_learnable(path)
        except (ValueError, TypeError) as e:
            assert name in str(e), f"{type(e).__name__} does not name {name}: {e}"
            return
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    actions = algo.predict(x)
    assert np.isfinite(np.asarray(actions, dtype=np.float64)).all()


@budget(40)
@given(kind=st.sampled_from(["dqn", "sac"]), pick=st.integers(0, 10**6), value=VALUES,
       delete=st.booleans())
def test_model_file_with_one_entry_replaced(tmp_path, kind, pick, value, delete):
    payload = _payload(tmp_path, kind)
    params = json.loads(payload["params"])
    container, key = (places := _paths(payload, params))[pick % len(places)]
    if delete and isinstance(container, dict):
        del container[key]
    else:
        if isinstance(value, torch.Tensor) and _in(params, container):
            value = value.tolist()  # the config record is JSON
        container[key] = value
    try:
        payload["params"] = json.dumps(params, allow_nan=True)
    except (TypeError, ValueError):
        return  # not representable as JSON: not a file anyone can write
    path = tmp_path / "mutated.d3"
    write_payload(payload, path)
    _assert_load_contract(path, "mutated.d3")


def _payload(tmp_path, kind: str) -> dict:
    path = tmp_path / "valid.d3"
    path.write_bytes(VALID[kind])
    return read_payload(path)


def _in(root, target) -> bool:
    if root is target:
        return True
    if isinstance(root, dict):
        return any(_in(v, target) for v in root.values())
    if isinstance(root, list):
        return any(_in(v, target) for v in root)
    return False


@budget(15)
@given(kind=st.sampled_from(["dqn", "sac"]), cut=st.floats(0, 1, exclude_max=True), flip=st.integers(0, 10**6))
def test_truncated_or_flipped_model_file(tmp_path, kind, cut, flip):
    data = bytearray(VALID[kind])
    if cut > 0.5:
        data = data[: int(cut * len(data))]
    else:
        data[flip % len(data)] ^= 0xFF
    path = tmp_path / "broken.d3"
    path.write_bytes(bytes(data))
    _assert_load_contract(path, "broken.d3")


@budget(10)
@given(data=st.binary(max_size=2048))
def test_random_bytes_as_model_file(tmp_path, data):
    path = tmp_path / "random.d3"
    path.write_bytes(data)
    _assert_load_contract(path, "random.d3")


# ------------------------------------------------------------------ the safetensors container (issue 28)


def _split(data: bytes):
    length = int.from_bytes(data[:8], "little")
    return json.loads(data[8:8 + length]), data[8 + length:]


def _join(header: dict, body: bytes, length=None) -> bytes:
    text = json.dumps(header, allow_nan=True).encode()
    return (len(text) if length is None else length).to_bytes(8, "little") + text + body


def _holds_tensor(value) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, dict):
        return any(_holds_tensor(v) for v in value.values())
    return isinstance(value, list) and any(_holds_tensor(v) for v in value)


HEADER_VALUES = st.one_of(
    VALUES.filter(lambda v: not _holds_tensor(v)),
    st.sampled_from(["F32", "F64", "F16", "BF16", "I64", "I32", "U8", "BOOL", "C64", "U64", "F8_E4M3", ""]),
    st.lists(st.integers(-(2**64), 2**64), max_size=4),
    st.lists(st.sampled_from([0, 1, 2, 3, 8, 10**6, 10**12, 2**63]), max_size=4),
)


@budget(40)
@given(kind=st.sampled_from(["dqn", "sac"]), pick=st.integers(0, 10**6),
       field=st.sampled_from(["dtype", "shape", "data_offsets", None]), value=HEADER_VALUES)
def test_header_entry_replaced(tmp_path, kind, pick, field, value):
    """One tensor's dtype, shape or byte range (or the whole entry)
    replaced: huge declared shapes, offsets that lie, other dtypes."""
    header, body = _split(VALID[kind])
    names = sorted(k for k in header if k != "__metadata__")
    name = names[pick % len(names)]
    if field is None:
        header[name] = value
    else:
        header[name][field] = value
    path = tmp_path / "header.d3"
    path.write_bytes(_join(header, body))
    _assert_load_contract(path, "header.d3")


@budget(30)
@given(kind=st.sampled_from(["dqn", "sac"]), delta=st.one_of(st.integers(-64, 64), st.sampled_from([2**20, 2**40, 2**63])),
       shift=st.integers(-300, 300), pick=st.integers(0, 10**6))
def test_header_length_and_offsets_shifted(tmp_path, kind, delta, shift, pick):
    """The 8-byte header length off by ``delta``, one tensor's byte range
    moved by ``shift`` (overlapping, leaving gaps, past the end)."""
    header, body = _split(VALID[kind])
    names = sorted(k for k in header if k != "__metadata__")
    begin, end = header[names[pick % len(names)]]["data_offsets"]
    header[names[pick % len(names)]]["data_offsets"] = [begin + shift, end + shift]
    text = json.dumps(header).encode()
    length = max(0, len(text) + delta) % 2**64
    path = tmp_path / "shifted.d3"
    path.write_bytes(_join(header, body, length))
    _assert_load_contract(path, "shifted.d3")


@budget(30)
@given(kind=st.sampled_from(["dqn", "sac"]), start=st.integers(0, 10**6), text=st.text(max_size=20))
def test_header_text_spliced(tmp_path, kind, start, text):
    """Arbitrary text spliced into the header JSON (the metadata record
    included), the length kept right."""
    header_bytes = json.dumps(_split(VALID[kind])[0]).encode()
    at = start % (len(header_bytes) + 1)
    spliced = header_bytes[:at] + text.encode("utf-8", "surrogatepass") + header_bytes[at:]
    path = tmp_path / "spliced.d3"
    path.write_bytes(len(spliced).to_bytes(8, "little") + spliced + _split(VALID[kind])[1])
    _assert_load_contract(path, "spliced.d3")


# ------------------------------------------------------------------ predict

ALGOS = {kind: _algo(kind) for kind in ("dqn", "sac")}

OBSERVATIONS = st.one_of(
    st.lists(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), min_size=3, max_size=3),
             min_size=0, max_size=4).map(np.array),
    st.lists(st.lists(st.integers(-(2**62), 2**62), min_size=3, max_size=3), min_size=1, max_size=3).map(np.array),
    st.lists(st.lists(st.complex_numbers(allow_nan=False, allow_infinity=False, max_magnitude=1e6), min_size=3, max_size=3),
             min_size=1, max_size=2).map(np.array),
    st.lists(st.lists(st.text(max_size=2), min_size=3, max_size=3), min_size=1, max_size=2).map(np.array),
    st.sampled_from([np.zeros((2, 4)), np.zeros(3), np.zeros((1, 3), dtype=object), np.array([[1e300, 0, 0]]),
                     np.zeros((0, 3)), np.zeros((1, 3), dtype=np.float16), torch.zeros(2, 3),
                     torch.full((1, 3), float("inf")), torch.ones(1, 3, dtype=torch.complex64), "abc", None,
                     [[1.0, 2.0], [3.0]], np.zeros((2, 3), dtype=bool)]),
)


@budget(60)
@given(kind=st.sampled_from(["dqn", "sac"]), call=st.sampled_from(["predict", "sample_action", "predict_value"]),
       x=OBSERVATIONS, action_seed=st.integers(0, 3))
def test_predict_inputs(kind, call, x, action_seed):
    algo = ALGOS[kind]
    rows = x.shape[0] if hasattr(x, "shape") and len(x.shape) else 1
    if kind == "dqn":
        action = [np.zeros(rows, dtype=np.int64), np.full(rows, 0.5), np.full(rows, np.nan), np.full(rows, 7)][action_seed]
    else:
        action = [np.zeros((rows, 2)), np.full((rows, 2), np.inf), np.full((rows, 2), 1e300),
                  np.zeros((rows, 2), dtype=complex)][action_seed]
    fn = {"predict": algo.predict, "sample_action": algo.sample_action,
          "predict_value": lambda obs: algo.predict_value(obs, action)}[call]
    try:
        out = fn(x)
    except (ValueError, TypeError) as e:
        assert "x" in str(e) or "action" in str(e), str(e)
        return
    values = np.asarray(x, dtype=np.float64)
    assert np.isfinite(values).all() and np.abs(values).max() <= FLOAT32_MAX, f"{call} answered for {x!r}"
    if np.abs(values).max() <= 1e6:  # larger inputs may overflow the network's float32 arithmetic
        assert np.isfinite(np.asarray(out, dtype=np.float64)).all()
