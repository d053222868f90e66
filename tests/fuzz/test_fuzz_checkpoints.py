"""Training checkpoints fed hostile content: the resume record's JSON text
replaced or one of its values changed, the random-state tensors replaced.
The contract: ``fit(..., resume_from=...)`` resumes, or raises ValueError /
TypeError naming the checkpoint file; never another exception, never code
run (the file is read with ``torch.load(weights_only=True)``)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from fuzz_budget import budget
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
    return torch.load(root / "run" / "checkpoint.d3", weights_only=True)


JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), st.text(max_size=6)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=8,
)
LOOP_KEYS = ["epoch", "total_step", "n_steps_per_epoch", "logging_steps", "transition_count", "window"]
RANDOM_KEYS = ["offrl_generator", "python_random", "numpy_global"]


def _resume(tmp_path, payload) -> None:
    path = tmp_path / "checkpoint.d3"
    torch.save(payload, path)
    try:
        _config().create().fit(_dataset(), 12, 3, show_progress=False, logger_adapter=NoopAdapterFactory(), resume_from=str(path))
    except (ValueError, TypeError) as e:
        assert str(path) in str(e), f"{type(e).__name__} does not name the file: {e}"


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
    record["loop"]["window"] = {"names": ["not_a_loss"], "sums": [1.0], "count": 1}
    path = tmp_path / "checkpoint.d3"
    torch.save({**checkpoint, "resume": json.dumps(record)}, path)
    with pytest.raises(ValueError, match=r"checkpoint.d3: the checkpoint's logging window holds \['not_a_loss'\], the algorithm reports \['loss'\]"):
        _config().create().fit(_dataset(), 12, 3, show_progress=False, logger_adapter=NoopAdapterFactory(), resume_from=str(path),
                               logging_strategy="steps", logging_steps=2)
