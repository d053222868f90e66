"""TensorBoard adapter: the event file holds exactly the scalars a fit logged."""

from __future__ import annotations

import csv
import glob
import json
import os
import textwrap

import numpy as np
import pytest

pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

from offrl.algos import DiscreteBCConfig  # noqa: E402
from offrl.dataset import MDPDataset  # noqa: E402
from offrl.logging import CombineAdapterFactory, FileAdapterFactory, TensorboardAdapterFactory  # noqa: E402


def _dataset() -> MDPDataset:
    rng = np.random.default_rng(0)
    n = 40
    return MDPDataset(
        rng.normal(size=(n, 3)).astype(np.float32),
        rng.integers(0, 2, size=n),
        rng.normal(size=n).astype(np.float32),
        (np.arange(n) % 10 == 9).astype(np.float32),
    )


def _events(logdir: str) -> EventAccumulator:
    acc = EventAccumulator(logdir, size_guidance={"tensors": 0})
    acc.Reload()
    return acc


def test_event_file_holds_the_same_scalars_as_the_csv_logs(tmp_path):
    algo = DiscreteBCConfig(batch_size=8).create()
    factory = CombineAdapterFactory([
        FileAdapterFactory(str(tmp_path / "files")),
        TensorboardAdapterFactory(str(tmp_path / "tb")),
    ])
    results = algo.fit(_dataset(), n_steps=6, n_steps_per_epoch=2, experiment_name="run", with_timestamp=False,
                       logger_adapter=factory, show_progress=False)

    logdir = str(tmp_path / "tb" / "runs" / "run")
    assert glob.glob(os.path.join(logdir, "events.out.tfevents.*"))
    acc = _events(logdir)
    tags = set(acc.Tags()["scalars"])
    assert {f"metrics/{name}" for name in results[0][1]} | {"epoch"} == tags

    for name in results[0][1]:
        events = acc.Scalars(f"metrics/{name}")
        with open(tmp_path / "files" / "run" / f"{name}.csv") as f:
            rows = [(int(e), int(s), float(v)) for e, s, v in csv.reader(f)]
        assert [e.step for e in events] == [s for _, s, _ in rows] == [2, 4, 6]
        # TensorBoard stores float32: equal to the CSV's float64 at float32 precision
        np.testing.assert_array_equal(np.float32([e.value for e in events]), np.float32([v for _, _, v in rows]))
        np.testing.assert_array_equal(np.float32([e.value for e in events]), np.float32([m[name] for _, m in results]))
    assert [e.value for e in acc.Scalars("epoch")] == [1.0, 2.0, 3.0]
    text = acc.Tensors("params/text_summary")[0].tensor_proto.string_val[0].decode()
    assert json.loads(textwrap.dedent(text)) == json.loads(json.dumps(algo.to_params()))


def test_missing_tensorboard_gives_an_install_hint(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name.startswith("torch.utils.tensorboard"):
            raise ImportError("no tensorboard")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(ImportError, match=r"pip install 'offrl\[tensorboard\]'"):
        TensorboardAdapterFactory("unused")
