"""Logging to MLflow (optional extra: ``pip install 'offrl[mlflow]'``).

One MLflow run per training run, in the MLflow experiment ``experiment``
(default ``"offrl"``), named after offrl's experiment name: the parameters
flattened to dotted keys (``config.params.alpha``), every metric at each
logging step (the run's total step: gradient steps offline, environment
steps online, as the x-axis; ``epoch`` logged beside them), and each saved
model (``model_<step>.d3``, the file ``algo.save`` writes) as an artifact
under ``models/``.

Where runs go: ``tracking_uri`` when given (``"http://host:5000"``,
``"sqlite:///path/mlflow.db"``, ``"databricks"``, any URI MLflow takes),
else ``$MLFLOW_TRACKING_URI`` when set, else a local directory ``root_dir``
(default ``mlruns``) holding an SQLite store ``mlflow.db`` and the
artifacts: ``mlflow ui --backend-store-uri sqlite:///mlruns/mlflow.db``
shows them. (MLflow 3 refuses its older plain-file store unless
``MLFLOW_ALLOW_FILE_STORE=true``, so the local default is SQLite.)

The adapter talks to the store through an ``MlflowClient`` of its own and
never touches MLflow's global active run, so several runs (the candidates
of :class:`offrl.model_selection.OfflineSearch`) can be logged from one
process, one after the other or from several processes.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

from .._optional import optional_dependency
from .base import split_create_arguments

__all__ = ["MLflowAdapter", "MLflowAdapterFactory", "flatten_params"]

#: what a params key may hold per MLflow (longer values are cut with a note)
_MAX_PARAM_LENGTH = 6000
_BATCH = 100


def _mlflow() -> Any:
    with optional_dependency("MLflowAdapterFactory needs the mlflow package: pip install 'offrl[mlflow]'"):
        import mlflow
    return mlflow


def flatten_params(params: Any, prefix: str = "") -> List[Tuple[str, str]]:
    """Nested dicts as ``(dotted.key, text)`` pairs (lists and scalars as
    their text), in order."""
    if isinstance(params, dict):
        out: List[Tuple[str, str]] = []
        for key, value in params.items():
            out.extend(flatten_params(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    text = "None" if params is None else str(params)
    if len(text) > _MAX_PARAM_LENGTH:
        text = text[: _MAX_PARAM_LENGTH - 20] + " ... (truncated)"
    return [(prefix or "value", text)]


def resolve_tracking_uri(tracking_uri: Optional[str], root_dir: str) -> str:
    """``tracking_uri``, else ``$MLFLOW_TRACKING_URI``, else SQLite in ``root_dir``."""
    if tracking_uri is not None:
        if not isinstance(tracking_uri, str) or not tracking_uri:
            raise TypeError(f"tracking_uri must be a non-empty str or None, got {tracking_uri!r}")
        return tracking_uri
    from_env = os.environ.get("MLFLOW_TRACKING_URI")
    if from_env:
        return from_env
    root = os.path.abspath(root_dir)
    os.makedirs(root, exist_ok=True)
    return "sqlite:///" + os.path.join(root, "mlflow.db")


class MLflowAdapter:
    """One MLflow run: ``MLflowAdapter(algo, experiment_name, n_steps_per_epoch,
    tracking_uri=None, experiment="offrl", root_dir="mlruns", log_models=True)``."""

    def __init__(self, algo: Any, experiment_name: str, n_steps_per_epoch: Optional[int] = None,
                 tracking_uri: Optional[str] = None, experiment: str = "offrl", root_dir: str = "mlruns",
                 log_models: bool = True) -> None:
        if not isinstance(experiment_name, str):
            raise TypeError(f"experiment_name must be a str, got {type(experiment_name).__name__}")
        mlflow = _mlflow()
        self.tracking_uri = resolve_tracking_uri(tracking_uri, root_dir)
        self.client = mlflow.MlflowClient(tracking_uri=self.tracking_uri)
        artifacts = None
        if tracking_uri is None and not os.environ.get("MLFLOW_TRACKING_URI"):
            artifacts = "file://" + os.path.join(os.path.abspath(root_dir), "artifacts")
        experiment_id = self._experiment_id(experiment, artifacts)
        tags = {"offrl.algorithm": type(algo).__name__} if algo is not None and not isinstance(algo, str) else {}
        self.run_id = self.client.create_run(experiment_id, run_name=experiment_name, tags=tags).info.run_id
        self.experiment_id = experiment_id
        self.log_models = bool(log_models)
        self._metrics: List[Any] = []
        self._closed = False

    def _experiment_id(self, name: str, artifacts: Optional[str]) -> str:
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return found.experiment_id
        try:
            return self.client.create_experiment(name, artifact_location=artifacts)
        except Exception:  # another process created it between the two calls
            found = self.client.get_experiment_by_name(name)
            if found is None:
                raise
            return found.experiment_id

    def write_params(self, params: Dict[str, Any]) -> None:
        """The parameters, flattened to dotted keys (MLflow keeps them as text)."""
        from mlflow.entities import Param

        pairs = flatten_params(params)
        for start in range(0, len(pairs), _BATCH):
            self.client.log_batch(self.run_id, params=[Param(k, v) for k, v in pairs[start: start + _BATCH]])

    def before_write_metric(self, epoch: int, step: int) -> None:
        self._metrics = []

    def write_metric(self, epoch: int, step: int, name: str, value: float) -> None:
        from mlflow.entities import Metric

        self._metrics.append(Metric(name, float(value), int(time.time() * 1000), int(step)))

    def after_write_metric(self, epoch: int, step: int) -> None:
        """The step's metrics (and ``epoch``) in one request."""
        from mlflow.entities import Metric

        if not self._metrics:
            return
        batch = self._metrics + [Metric("epoch", float(epoch), int(time.time() * 1000), int(step))]
        self._metrics = []
        for start in range(0, len(batch), _BATCH * 10):
            self.client.log_batch(self.run_id, metrics=batch[start: start + _BATCH * 10])

    def save_model(self, epoch: int, algo: Any) -> None:
        """``algo.save`` to ``models/model_<step>.d3`` among the run's artifacts."""
        if not self.log_models:
            return
        directory = tempfile.mkdtemp(prefix="offrl-mlflow-")
        try:
            path = os.path.join(directory, f"model_{algo.grad_step}.d3")
            algo.save(path)
            self.client.log_artifact(self.run_id, path, artifact_path="models")
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    def watch_model(self, epoch: int, step: int) -> None:
        """d3rlpy 2.8's gradient-watch hook (MLflow has no gradient watcher)."""

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._metrics:
                self.after_write_metric(0, int(self._metrics[-1].step))
            self.client.set_terminated(self.run_id, "FINISHED")


class MLflowAdapterFactory:
    """One MLflow run per experiment (see the module docstring for where runs go).

    Args:
        tracking_uri: any MLflow tracking URI; None: ``$MLFLOW_TRACKING_URI``,
            else SQLite in ``root_dir``.
        experiment: the MLflow experiment the runs belong to.
        root_dir: the local directory of the default store and its artifacts.
        log_models: upload each saved model as an artifact.
    """

    def __init__(self, tracking_uri: Optional[str] = None, experiment: str = "offrl", root_dir: str = "mlruns",
                 log_models: bool = True) -> None:
        _mlflow()  # fail at construction, not when training starts
        if tracking_uri is not None and (not isinstance(tracking_uri, str) or not tracking_uri):
            raise TypeError(f"tracking_uri must be a non-empty str or None, got {tracking_uri!r}")
        if not isinstance(experiment, str) or not experiment:
            raise TypeError(f"experiment must be a non-empty str, got {experiment!r}")
        self.tracking_uri = tracking_uri
        self.experiment = experiment
        self.root_dir = os.fspath(root_dir)
        self.log_models = bool(log_models)

    def create(self, algo: Any, experiment_name: Optional[str] = None, n_steps_per_epoch: Optional[int] = None) -> MLflowAdapter:
        """``create(algo, experiment_name, n_steps_per_epoch)`` (d3rlpy 2.7+) or ``create(experiment_name)``."""
        name = split_create_arguments(algo, experiment_name)
        return MLflowAdapter(None if isinstance(algo, str) else algo, name, n_steps_per_epoch, self.tracking_uri,
                             self.experiment, self.root_dir, self.log_models)

    def __repr__(self) -> str:
        return (f"MLflowAdapterFactory(tracking_uri={self.tracking_uri!r}, experiment={self.experiment!r}, "
                f"root_dir={self.root_dir!r})")
