"""d3rlpy docs, "API Reference / Logging", run with ``import offrl``: the file
logger, the combined file + TensorBoard logger, and a user's own
LoggerAdapter / LoggerAdapterFactory.

Changes other than the import (marked ``# docs:``): sizes; the docs' adapter
uses ``json``, ``Dict``, ``Any`` and ``default_json_encoder`` without
importing them (``default=str`` here).
"""

from __future__ import annotations

import csv
import json
from typing import Any, Dict

import pytest

import offrl


def test_file_adapter_factory(cartpole, workdir) -> None:
    dataset, _ = cartpole
    dqn = offrl.algos.DQNConfig().create()
    dqn.fit(
        dataset=dataset,
        n_steps=4,  # docs: 100000
        n_steps_per_epoch=2,
        # set FileAdapterFactory to save metrics as CSV files
        logger_adapter=offrl.logging.FileAdapterFactory(root_dir="d3rlpy_logs"),
        show_progress=False,
    )
    (run,) = list((workdir / "d3rlpy_logs").iterdir())
    assert run.name.startswith("DQN_")
    # one CSV per metric, one row per epoch: epoch, step, value
    rows = list(csv.reader(open(run / "loss.csv")))
    assert [(int(r[0]), int(r[1])) for r in rows] == [(1, 2), (2, 4)]
    assert json.loads((run / "params.json").read_text())
    # the model is saved each epoch (save_interval=1)
    assert sorted(p.name for p in run.glob("model_*.d3")) == ["model_2.d3", "model_4.d3"]
    assert isinstance(offrl.load_learnable(str(run / "model_4.d3")), type(dqn))


def test_combine_adapter_factory_with_tensorboard(cartpole, workdir) -> None:
    pytest.importorskip("tensorboard", reason="the TensorBoard logger needs the tensorboard package")
    dataset, _ = cartpole
    dqn = offrl.algos.DQNConfig().create()
    # combine FileAdapterFactory and TensorboardAdapterFactory
    logger_adapter = offrl.logging.CombineAdapterFactory([
        offrl.logging.FileAdapterFactory(root_dir="d3rlpy_logs"),
        offrl.logging.TensorboardAdapterFactory(root_dir="tensorboard_logs"),
    ])
    dqn.fit(dataset=dataset, n_steps=2, n_steps_per_epoch=2, logger_adapter=logger_adapter, show_progress=False)
    assert list((workdir / "d3rlpy_logs").glob("*/loss.csv"))
    assert list((workdir / "tensorboard_logs").rglob("events.out.tfevents.*"))


class CustomAdapter(offrl.logging.LoggerAdapter):
    def write_params(self, params: Dict[str, Any]) -> None:
        # save dictionary as json file
        with open("params.json", "w") as f:
            f.write(json.dumps(params, default=str, indent=2))  # docs: default=default_json_encoder

    def before_write_metric(self, epoch: int, step: int) -> None:
        pass

    def write_metric(self, epoch: int, step: int, name: str, value: float) -> None:
        with open(f"{name}.csv", "a") as f:
            print(f"{epoch},{step},{value}", file=f)

    def after_write_metric(self, epoch: int, step: int) -> None:
        pass

    def save_model(self, epoch: int, algo: Any) -> None:
        algo.save(f"model_{epoch}.d3")

    def close(self) -> None:
        pass


class CustomAdapterFactory(offrl.logging.LoggerAdapterFactory):
    """The docs' (d3rlpy <= 2.6) factory: ``create(experiment_name)``."""

    def create(self, experiment_name: str) -> offrl.logging.FileAdapter:
        return CustomAdapter()


class CustomAdapterFactory281(offrl.logging.LoggerAdapterFactory):
    """The same factory written to d3rlpy 2.7+'s signature."""

    def create(self, algo: Any, experiment_name: str, n_steps_per_epoch: int) -> offrl.logging.LoggerAdapter:
        self.seen = (type(algo).__name__, experiment_name, n_steps_per_epoch)
        return CustomAdapter()


@pytest.mark.parametrize("factory", [CustomAdapterFactory, CustomAdapterFactory281])
def test_custom_logger_adapter(factory, cartpole, workdir) -> None:
    dataset, _ = cartpole
    dqn = offrl.algos.DQNConfig().create()
    adapter_factory = factory()
    dqn.fit(dataset, n_steps=4, n_steps_per_epoch=2, logger_adapter=adapter_factory,
            experiment_name="custom", show_progress=False)
    assert json.loads((workdir / "params.json").read_text())
    lines = (workdir / "loss.csv").read_text().splitlines()
    assert [tuple(line.split(",")[:2]) for line in lines] == [("1", "2"), ("2", "4")]
    assert (workdir / "model_2.d3").exists() and (workdir / "model_4.d3").exists()
    if factory is CustomAdapterFactory281:
        name, experiment, per_epoch = adapter_factory.seen
        assert name == "DQN" and experiment.startswith("custom") and per_epoch == 2


def test_noop_adapter_factory_writes_nothing(cartpole, workdir) -> None:
    dataset, _ = cartpole
    dqn = offrl.algos.DQNConfig().create()
    dqn.fit(dataset, n_steps=2, n_steps_per_epoch=2, logger_adapter=offrl.logging.NoopAdapterFactory(),
            show_progress=False)
    assert list(workdir.iterdir()) == []


@pytest.mark.parametrize(
    "name",
    ["LoggerAdapter", "FileAdapter", "TensorboardAdapter", "NoopAdapter", "CombineAdapter",
     "LoggerAdapterFactory", "FileAdapterFactory", "TensorboardAdapterFactory", "NoopAdapterFactory",
     "CombineAdapterFactory"],
)
def test_documented_logging_names(name) -> None:
    assert isinstance(getattr(offrl.logging, name), type)
