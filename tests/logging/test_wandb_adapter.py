"""W&B adapter, on the real wandb package in offline mode (no network): the
run file holds exactly the parameters and metrics a fit logged."""

from __future__ import annotations

import csv
import glob
import json
import struct
import time
from typing import Any, Dict, List

import numpy as np
import pytest

pytest.importorskip("wandb", reason="the wandb extra is not installed")

from offrl.algos import DiscreteBCConfig  # noqa: E402
from offrl.dataset import MDPDataset  # noqa: E402
from offrl.logging import CombineAdapterFactory, FileAdapterFactory, WanDBAdapter, WanDBAdapterFactory  # noqa: E402


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    # nothing may reach the network or the user's settings
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)


def _dataset() -> MDPDataset:
    rng = np.random.default_rng(0)
    n = 40
    return MDPDataset(rng.normal(size=(n, 3)).astype(np.float32), rng.integers(0, 2, size=n),
                      rng.normal(size=n).astype(np.float32), (np.arange(n) % 10 == 9).astype(np.float32))


def _records(run_file: str) -> List[Any]:
    """The protobuf records of a ``.wandb`` file (a LevelDB-style log of
    32 KiB blocks after a 7-byte header; records may span blocks)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = open(run_file, "rb").read()
    assert data[:4] == b":W&B"
    block, pos, pending, out = 32768, 7, b"", []
    while pos + 7 <= len(data):
        room = block - pos % block
        if room < 7:
            pos += room
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos: pos + 7])
        chunk = data[pos + 7: pos + 7 + length]
        pos += 7 + length
        if kind == 0:
            break
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            out.append(record)
    return out


def _complete_records(run_file: str, timeout_s: float = 60.0) -> List[Any]:
    """The records once the run's ``exit`` record is on disk (W&B's service
    process may still be writing the file when ``finish`` returns)."""
    deadline = time.monotonic() + timeout_s
    while True:
        records = _records(run_file)
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.2)


def _history(run_file: str) -> List[Dict[str, Any]]:
    rows = []
    for record in _complete_records(run_file):
        if record.WhichOneof("record_type") == "history":
            rows.append({".".join(item.nested_key) or item.key: json.loads(item.value_json) for item in record.history.item})
    return rows


def _config(run_file: str) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for record in _complete_records(run_file):
        if record.WhichOneof("record_type") == "config":
            for item in record.config.update:
                out[item.nested_key[0] if item.nested_key else item.key] = json.loads(item.value_json)
    return out


def _csv(path: str) -> List[tuple]:
    with open(path) as f:
        return [(int(e), int(s), float(v)) for e, s, v in csv.reader(f)]


def test_offline_run_holds_the_params_and_every_logged_metric(tmp_path):
    algo = DiscreteBCConfig(batch_size=8).create()
    files = FileAdapterFactory(str(tmp_path / "files"))
    wandb_factory = WanDBAdapterFactory(project="offrl-test", mode="offline", dir=str(tmp_path))
    algo.fit(_dataset(), n_steps=12, n_steps_per_epoch=4, experiment_name="bc", with_timestamp=False,
             logger_adapter=CombineAdapterFactory([files, wandb_factory]), show_progress=False)

    (run_file,) = glob.glob(str(tmp_path / "wandb" / "offline-run-*" / "run-*.wandb"))
    history = [row for row in _history(run_file) if "loss" in row]
    expected = _csv(str(tmp_path / "files" / "bc" / "loss.csv"))
    assert [(row["epoch"], row["_step"]) for row in history] == [(e, s) for e, s, _ in expected] == [(1, 4), (2, 8), (3, 12)]
    np.testing.assert_allclose([row["loss"] for row in history], [v for _, _, v in expected], rtol=1e-6)
    assert all("time_step" in row for row in history)
    config = _config(run_file)
    assert config["algorithm"] == "discrete_bc"
    assert config["config"]["params"]["batch_size"] == 8


def test_the_adapter_takes_d3rlpys_arguments_and_finishes_its_run(tmp_path):
    algo = DiscreteBCConfig(batch_size=8).create()
    algo.build_with_dataset(_dataset())
    adapter = WanDBAdapter(algo, "named", 10, "proj", mode="offline", dir=str(tmp_path))
    adapter.write_params({"a": 1})
    adapter.before_write_metric(1, 10)
    adapter.write_metric(1, 10, "x", 2.5)
    adapter.after_write_metric(1, 10)
    adapter.save_model(1, algo)  # not uploaded, as d3rlpy
    adapter.watch_model(1, 10)
    adapter.close()
    adapter.close()  # a second close is harmless
    (run_file,) = glob.glob(str(tmp_path / "wandb" / "offline-run-*" / "run-*.wandb"))
    rows = [row for row in _history(run_file) if "x" in row]
    assert rows == [{**rows[0], "x": 2.5, "epoch": 1, "_step": 10}]
    assert _config(run_file)["a"] == 1


def test_factory_refuses_arguments_it_sets_itself():
    with pytest.raises(TypeError, match="name is set by the factory"):
        WanDBAdapterFactory(project="p", name="x")
    with pytest.raises(TypeError, match="project must be a str"):
        WanDBAdapterFactory(project=3)
    assert repr(WanDBAdapterFactory("p", mode="offline")) == "WanDBAdapterFactory(project='p', mode='offline')"
