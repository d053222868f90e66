"""Training checkpoints fed hostile content: the resume record's JSON text
replaced or one of its values changed, the random-state tensors replaced.
The contract: ``fit(..., resume_from=...)`` resumes, or raises ValueError /
TypeError naming the checkpoint file; never another exception, never code
run (the file is read without an unpickler)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from fuzz_budget import budget
from offrl._model_file import read_payload, write_payload
from offrl.algos import DQNConfig
from offrl.dataset import MDPDataset
from offrl.logging import FileAdapterFactory, NoopAdapterFactory
from offrl.models import VectorEncoderFactory

pytestmark = pytest.mark.fuzz


def _dataset() -> MDPDataset:
    rng = np.random.default_rng(0)
    n = 40
    return MDPDataset(rng.normal(size=(n, 3)).astype(np.float32), rng.integers(2, size=n),
                      rng.normal(size=n).astype(np.float32), (np.arange(n) % 10 == 9).astype(np.float32))


def _config() -> DQNConfig:
    return DQNConfig(batch_size=4, encoder_factory=VectorEncoderFactory(hidden_units=[4]))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    root = tmp_path_factory.mktemp("run")
    _config().create().fit(_dataset(), 6, 3, experiment_name="run", with_timestamp=False,
                           logger_adapter=FileAdapterFactory(str(root)), show_progress=False)
    return read_payload(root / "run" / "checkpoint.d3")


JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), st.text(max_size=6)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=8,
)
LOOP_KEYS = ["epoch", "total_step", "n_steps_per_epoch", "logging_steps", "transition_count", "window"]
RANDOM_KEYS = ["offrl_generator", "python_random", "numpy_global"]


def _resume(tmp_path, payload):
    """Resume a 12-step run from ``payload``: the resumed algorithm, or None
    when the checkpoint was refused with an error naming it. A resumed run
    makes every step the checkpoint had not made, and leaves every random
    generator drawable."""
    path = tmp_path / "checkpoint.d3"
    _write_checkpoint(payload, path)
    algo = _config().create()
    try:
        algo.fit(_dataset(), 12, 3, show_progress=False, logger_adapter=NoopAdapterFactory(), resume_from=str(path))
    except (ValueError, TypeError) as e:
        assert str(path) in str(e), f"{type(e).__name__} does not name the file: {e}"
        return None
    done = json.loads(payload["resume"])["loop"]["total_step"]
    assert algo.grad_step == payload["grad_step"] + 12 - done, "resume skipped steps"
    random.random(), random.gauss(0, 1), np.random.random(3), np.random.standard_normal(3), torch.rand(3)
    return algo


def _write_checkpoint(payload, path) -> None:
    write_payload(payload, path)


@budget(30)
@given(where=st.sampled_from(["loop", "random", "top"]), key=st.sampled_from(LOOP_KEYS + RANDOM_KEYS + ["version"]),
       value=JSON_VALUES)
def test_one_resume_value_replaced(tmp_path_factory, checkpoint, where, key, value):
    tmp_path = tmp_path_factory.mktemp("case")
    record = json.loads(checkpoint["resume"])
    target = record if where == "top" else record[where]
    target[key] = value
    _resume(tmp_path, {**checkpoint, "resume": json.dumps(record)})


@budget(20)
@given(text=st.one_of(st.text(max_size=40), st.just("[]"), st.just("{}"), st.just('{"version": 1}')))
def test_resume_record_replaced_by_any_text(tmp_path_factory, checkpoint, text):
    _resume(tmp_path_factory.mktemp("case"), {**checkpoint, "resume": text})


@budget(20)
@given(key=st.sampled_from(["torch_cpu", "numpy_global_keys", "torch_cuda_0"]),
       tensor=st.sampled_from([torch.zeros(0, dtype=torch.uint8), torch.ones(5), torch.zeros(624, dtype=torch.int64) - 1,
                               torch.full((5056,), 7, dtype=torch.uint8), torch.tensor(2**40)]))
def test_random_tensors_replaced(tmp_path_factory, checkpoint, key, tensor):
    tensors = {**checkpoint["random_tensors"], key: tensor}
    _resume(tmp_path_factory.mktemp("case"), {**checkpoint, "random_tensors": tensors})


def test_a_window_of_other_metrics_is_refused(tmp_path, checkpoint):
    record = json.loads(checkpoint["resume"])
    record["loop"]["logging_steps"] = 2
    record["loop"]["window"] = {"names": ["not_a_loss"], "sums": [1.0], "count": 0}
    path = tmp_path / "checkpoint.d3"
    write_payload({**checkpoint, "resume": json.dumps(record)}, path)
    with pytest.raises(ValueError, match=r"checkpoint.d3: the checkpoint's logging window holds \['not_a_loss'\], the algorithm reports \['loss'\]"):
        _config().create().fit(_dataset(), 12, 3, show_progress=False, logger_adapter=NoopAdapterFactory(), resume_from=str(path),
                               logging_strategy="steps", logging_steps=2)


# ------------------------------------------------ random states and counters (issue 28)

#: whole numbers around the edges of the fields' ranges, and what JSON can hold besides
EDGE_INTS = st.one_of(st.integers(-(2**130), 2**130), st.sampled_from([-5, -1, 0, 1, 2, 623, 624, 625, 2**31, 2**32 - 1,
                                                                      2**32, 2**63, 2**64, 2**128 - 1, 2**128, 10**8]))
FIELD_VALUES = st.one_of(EDGE_INTS, st.floats(allow_nan=True), st.booleans(), st.none(), st.text(max_size=4),
                         st.lists(EDGE_INTS, max_size=3))
RANDOM_FIELDS = [("numpy_global", "pos"), ("numpy_global", "has_gauss"), ("numpy_global", "cached"),
                 ("numpy_global", "kind"), ("python_random", 0), ("python_random", 2), ("python_words", 0),
                 ("python_words", 623), ("python_words", 624), ("offrl_generator", "has_uint32"),
                 ("offrl_generator", "uinteger"), ("offrl_state", "state"), ("offrl_state", "inc")]


@budget(40)
@given(field=st.sampled_from(RANDOM_FIELDS), value=FIELD_VALUES)
def test_one_random_state_field_replaced(tmp_path_factory, checkpoint, field, value):
    """A numpy position of 100,000,000 once made the next draw segfault."""
    record = json.loads(checkpoint["resume"])
    states = record["random"]
    section, key = field
    if section == "python_words":
        states["python_random"][1][key] = value
    elif section == "offrl_state":
        states["offrl_generator"]["state"][key] = value
    else:
        states[section][key] = value
    _resume(tmp_path_factory.mktemp("case"), {**checkpoint, "resume": json.dumps(record)})


@budget(25)
@given(keys=st.lists(EDGE_INTS.filter(lambda v: -(2**63) <= v < 2**63), min_size=0, max_size=700),
       offset=st.integers(0, 5055), byte=st.integers(0, 255), which=st.sampled_from(["keys", "torch"]))
def test_random_state_tensors_tampered(tmp_path_factory, checkpoint, keys, offset, byte, which):
    tensors = dict(checkpoint["random_tensors"])
    if which == "keys":
        tensors["numpy_global_keys"] = torch.tensor(keys, dtype=torch.int64)
    else:  # one byte of torch's generator state (its counters sit in the first 24)
        state = tensors["torch_cpu"].clone()
        state[offset % 24 if byte % 2 else offset] = byte
        tensors["torch_cpu"] = state
    _resume(tmp_path_factory.mktemp("case"), {**checkpoint, "random_tensors": tensors})


@budget(40)
@given(epoch=EDGE_INTS, total_step=EDGE_INTS, per_epoch=st.sampled_from([3, 1, 2, 6, 0, -3, 10**6]),
       grad_step=st.one_of(st.none(), st.integers(0, 20)), loop_grad_step=st.one_of(st.none(), EDGE_INTS))
def test_counters_tampered(tmp_path_factory, checkpoint, epoch, total_step, per_epoch, grad_step, loop_grad_step):
    """``epoch=10**6, total_step=0`` once made resume return [] silently:
    a checkpoint resumes and makes the remaining steps, or is refused."""
    record = json.loads(checkpoint["resume"])
    record["loop"].update(epoch=epoch, total_step=total_step, n_steps_per_epoch=per_epoch, grad_step=loop_grad_step)
    payload = {**checkpoint, "resume": json.dumps(record)}
    if grad_step is not None:
        payload["grad_step"] = grad_step
    _resume(tmp_path_factory.mktemp("case"), payload)
