"""MLflow adapter, on the real mlflow package with a local store: the run
holds the flattened parameters, every metric at its step and each saved
model as an artifact that loads back."""

from __future__ import annotations

import csv
import os

import numpy as np
import pytest

pytest.importorskip("mlflow", reason="the mlflow extra is not installed")

import offrl  # noqa: E402
from offrl.algos import DiscreteBCConfig  # noqa: E402
from offrl.dataset import MDPDataset  # noqa: E402
from offrl.logging import CombineAdapterFactory, FileAdapterFactory, MLflowAdapterFactory  # noqa: E402
from offrl.logging.mlflow_adapter import flatten_params, resolve_tracking_uri  # noqa: E402


def _dataset() -> MDPDataset:
    rng = np.random.default_rng(0)
    n = 40
    return MDPDataset(rng.normal(size=(n, 3)).astype(np.float32), rng.integers(0, 2, size=n),
                      rng.normal(size=n).astype(np.float32), (np.arange(n) % 10 == 9).astype(np.float32))


def _csv(path: str):
    with open(path) as f:
        return [(int(e), int(s), float(v)) for e, s, v in csv.reader(f)]


def test_local_store_holds_params_metrics_and_models(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)  # the default store is ./mlruns
    algo = DiscreteBCConfig(batch_size=8).create()
    files = FileAdapterFactory(str(tmp_path / "files"))
    factory = MLflowAdapterFactory(experiment="offrl-test")
    algo.fit(_dataset(), n_steps=12, n_steps_per_epoch=4, experiment_name="bc", with_timestamp=False,
             logger_adapter=CombineAdapterFactory([files, factory]), show_progress=False, save_interval=2)
    assert os.path.isfile(tmp_path / "mlruns" / "mlflow.db")

    import mlflow

    client = mlflow.MlflowClient(tracking_uri="sqlite:///" + str(tmp_path / "mlruns" / "mlflow.db"))
    experiment = client.get_experiment_by_name("offrl-test")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "bc" and run.info.status == "FINISHED"
    assert run.data.params["config.params.batch_size"] == "8"
    assert run.data.params["algorithm"] == "discrete_bc"
    history = client.get_metric_history(run.info.run_id, "loss")
    expected = _csv(str(tmp_path / "files" / "bc" / "loss.csv"))
    assert sorted((m.step, m.value) for m in history) == [(s, pytest.approx(v)) for _, s, v in expected]
    assert sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, "epoch")) == [(4, 1), (8, 2), (12, 3)]

    # saved at epochs 2 and 3 (save_interval=2, and the last): the artifacts load back to the trained policy
    names = sorted(a.path for a in client.list_artifacts(run.info.run_id, "models"))
    assert names == ["models/model_12.d3", "models/model_8.d3"]
    local = client.download_artifacts(run.info.run_id, "models/model_12.d3", str(tmp_path / "download"))
    loaded = offrl.load_learnable(local)
    x = np.random.default_rng(1).normal(size=(5, 3)).astype(np.float32)
    np.testing.assert_array_equal(loaded.predict(x), algo.predict(x))


def test_any_tracking_uri_and_no_model_upload(tmp_path):
    uri = "sqlite:///" + str(tmp_path / "elsewhere.db")
    algo = DiscreteBCConfig(batch_size=8).create()
    algo.fit(_dataset(), n_steps=4, n_steps_per_epoch=4, experiment_name="run", with_timestamp=False,
             logger_adapter=MLflowAdapterFactory(tracking_uri=uri, log_models=False), show_progress=False)
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("offrl").experiment_id])
    assert client.list_artifacts(run.info.run_id) == []
    assert [m.step for m in client.get_metric_history(run.info.run_id, "loss")] == [4]


def test_helpers_and_bad_arguments(tmp_path, monkeypatch):
    assert flatten_params({"a": {"b": 1, "c": [1, 2]}, "d": None}) == [("a.b", "1"), ("a.c", "[1, 2]"), ("d", "None")]
    long = flatten_params({"x": "y" * 10000})[0][1]
    assert len(long) <= 6000 and long.endswith("(truncated)")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///from-env.db")
    assert resolve_tracking_uri(None, str(tmp_path)) == "sqlite:///from-env.db"
    assert resolve_tracking_uri("http://host:5000", str(tmp_path)) == "http://host:5000"
    with pytest.raises(TypeError, match="tracking_uri must be"):
        MLflowAdapterFactory(tracking_uri="")
    with pytest.raises(TypeError, match="experiment must be"):
        MLflowAdapterFactory(experiment=3)


def test_a_search_logs_each_trial_as_a_run(tmp_path):
    pytest.importorskip("optuna", reason="the search extra is not installed")
    from offrl.model_selection import OfflineSearch
    from offrl.models import VectorEncoderFactory

    uri = "sqlite:///" + str(tmp_path / "runs.db")
    rng = np.random.default_rng(0)
    n = 40
    observations = rng.normal(size=(n, 2)).astype(np.float32)
    actions = rng.integers(0, 2, size=n)
    dataset = MDPDataset(observations, actions, (actions == (observations[:, 0] > 0)).astype(np.float32),
                         np.ones(n, np.float32), behaviour_probabilities=np.full(n, 0.5))
    search = OfflineSearch(DiscreteBCConfig(batch_size=8, encoder_factory=VectorEncoderFactory([8])),
                           {"learning_rate": [1e-4, 1e-3]}, scorer="wis", n_steps=4, n_steps_per_epoch=2,
                           test_size=0.25, show_progress=False,
                           logger_adapter=MLflowAdapterFactory(tracking_uri=uri, log_models=False))
    search.fit(dataset)
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("offrl").experiment_id])
    assert sorted(r.info.run_name for r in runs) == ["offrl_search_trial0", "offrl_search_trial1"]
    for run in runs:
        trial = int(run.info.run_name[-1])
        assert run.data.params["search.trial"] == str(trial)
        assert run.data.params["search.learning_rate"] == str([1e-4, 1e-3][trial])
        logged = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, "score_wis"))
        rows = search.results_[search.results_["trial"] == trial].sort_values("step")
        assert logged == list(zip(rows["step"], rows["wis"]))
