"""Learning curves from the CSV logs written by :class:`~offrl.logging.FileAdapter`,
and off-policy estimates against true values (:func:`plot_selection`).

Each ``<metric>.csv`` holds rows ``epoch,step,value``. matplotlib is an
optional extra (``pip install 'offrl[plot]'``); figures are drawn with the
non-interactive Agg backend when they are saved.
"""

from __future__ import annotations

import glob
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ._atomic import atomic_write
from ._optional import optional_dependency

__all__ = [
    "MetricLog",
    "read_metric_csv",
    "moving_average",
    "metric_stats",
    "plot_curves",
    "plot_all",
    "plot_selection",
    "require_matplotlib",
]


class MetricLog:
    """One metric's log: ``epochs``, ``steps`` (int64) and ``values`` (float64), shape ``(n,)``."""

    def __init__(self, path: str, epochs: np.ndarray, steps: np.ndarray, values: np.ndarray) -> None:
        self.path = path
        self.epochs = epochs
        self.steps = steps
        self.values = values

    @property
    def name(self) -> str:
        return os.path.splitext(os.path.basename(self.path))[0]


def read_metric_csv(path: str) -> MetricLog:
    """Read an ``epoch,step,value`` CSV; a missing, empty or malformed file
    raises ``ValueError`` naming the file (and the line)."""
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such metric file")
    epochs: List[int] = []
    steps: List[int] = []
    values: List[float] = []
    with open(path, "rb") as f:
        raw = f.read()
    nul = raw.find(b"\0")
    if nul >= 0:
        raise ValueError(f"{path}: not a metric CSV (binary content: a NUL byte at offset {nul})")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not a metric CSV (binary content: undecodable byte at offset {e.start})") from None
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.strip()
        if not line:
            continue
        parts = line.split(",")
        try:
            if len(parts) != 3:
                raise ValueError
            epochs.append(int(parts[0]))
            steps.append(int(parts[1]))
            values.append(float(parts[2]))
        except ValueError:
            raise ValueError(f"{path}, line {number}: expected 'epoch,step,value', got {line[:60]!r}") from None
    if not values:
        raise ValueError(f"{path}: the file holds no rows")
    return MetricLog(path, np.asarray(epochs, dtype=np.int64), np.asarray(steps, dtype=np.int64), np.asarray(values, dtype=np.float64))


def moving_average(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing mean over the last ``window`` values (fewer at the start):
    ``out[i] = mean(values[max(0, i - window + 1): i + 1])``; ``window=1``
    returns the values."""
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
        raise ValueError(f"window must be an int >= 1, got {window!r}")
    values = np.asarray(values, dtype=np.float64)
    cumulative = np.concatenate([[0.0], np.cumsum(values)])
    index = np.arange(1, len(values) + 1)
    start = np.maximum(0, index - window)
    return (cumulative[index] - cumulative[start]) / (index - start)


def metric_stats(log: MetricLog) -> Dict[str, float]:
    """Last epoch and step, and max / min / mean / std of the values."""
    return {
        "epoch": int(log.epochs[-1]),
        "step": int(log.steps[-1]),
        "last": float(log.values[-1]),
        "max": float(log.values.max()),
        "min": float(log.values.min()),
        "mean": float(log.values.mean()),
        "std": float(log.values.std()),
    }


def require_matplotlib(save: Optional[str]) -> Any:
    """``matplotlib.pyplot`` (Agg backend when saving to a file)."""
    with optional_dependency("plotting needs matplotlib: pip install 'offrl[plot]'"):
        import matplotlib
    if save:
        matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _check_limits(name: str, limits: Optional[Sequence[float]]) -> Optional[Tuple[float, float]]:
    if limits is None:
        return None
    if len(limits) != 2 or not all(np.isfinite(limits)) or limits[0] >= limits[1]:
        raise ValueError(f"{name} must be two finite numbers LOW HIGH with LOW < HIGH, got {list(limits)}")
    return float(limits[0]), float(limits[1])


def plot_curves(
    paths: Sequence[str],
    window: int = 1,
    show_steps: bool = False,
    show_max: bool = False,
    labels: Optional[Sequence[str]] = None,
    xlim: Optional[Sequence[float]] = None,
    ylim: Optional[Sequence[float]] = None,
    title: Optional[str] = None,
    ylabel: str = "value",
    save: Optional[str] = None,
) -> Any:
    """Plot one curve per metric CSV on shared axes; returns the figure.

    ``window``: trailing moving-average window; ``show_steps``: steps
    instead of epochs on the x-axis; ``show_max``: a dashed line at the
    highest raw value over all curves; ``labels``: one per path (default:
    ``<run dir>/<metric>``). Saved to ``save`` when given (PNG, PDF, SVG by
    the extension), shown otherwise.
    """
    if not paths:
        raise ValueError("give at least one metric CSV file")
    if labels is not None and len(labels) != len(paths):
        raise ValueError(f"--label was given {len(labels)} times for {len(paths)} files; give one label per file")
    xlim_pair = _check_limits("xlim", xlim)
    ylim_pair = _check_limits("ylim", ylim)
    logs = [read_metric_csv(p) for p in paths]
    moving_average(logs[0].values, window)  # validates window before drawing
    plt = require_matplotlib(save)
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, log in enumerate(logs):
        x = log.steps if show_steps else log.epochs
        label = labels[i] if labels is not None else "/".join(os.path.normpath(log.path).split(os.sep)[-2:])
        ax.plot(x, moving_average(log.values, window), label=label)
    if show_max:
        low = min(int((lg.steps if show_steps else lg.epochs).min()) for lg in logs)
        high = max(int((lg.steps if show_steps else lg.epochs).max()) for lg in logs)
        top = max(float(lg.values.max()) for lg in logs)
        ax.plot([low, high], [top, top], color="black", linestyle="dashed", label=f"max {top:.4g}")
    ax.set_xlabel("steps" if show_steps else "epochs")
    ax.set_ylabel(ylabel)
    if xlim_pair:
        ax.set_xlim(*xlim_pair)
    if ylim_pair:
        ax.set_ylim(*ylim_pair)
    _finish_axes(plt, fig, ax, title, save)
    return fig


def plot_all(logdir: str, window: int = 1, title: Optional[str] = None, save: Optional[str] = None) -> Any:
    """Every metric CSV of one run directory in a grid of plots; returns the figure."""
    if not os.path.isdir(logdir):
        raise ValueError(f"{logdir}: no such log directory")
    paths = sorted(glob.glob(os.path.join(logdir, "*.csv")))
    if not paths:
        raise ValueError(f"{logdir}: the directory holds no metric CSV files")
    logs = [read_metric_csv(p) for p in paths]
    moving_average(logs[0].values, window)
    plt = require_matplotlib(save)
    n_cols = int(np.ceil(np.sqrt(len(logs))))
    n_rows = int(np.ceil(len(logs) / n_cols))
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(4 * n_cols, 3 * n_rows), squeeze=False)
    for ax in axes.ravel()[len(logs):]:
        ax.axis("off")
    for ax, log in zip(axes.ravel(), logs):
        ax.plot(log.epochs, moving_average(log.values, window))
        ax.set_title(log.name)
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    _finish(plt, fig, save)
    return fig


def plot_selection(
    selection: Any,
    estimators: Optional[Sequence[str]] = None,
    title: Optional[str] = None,
    save: Optional[str] = None,
) -> Any:
    """Each policy's estimate (with its interval, where it has one) against
    its true value, one colour per estimator, and the line ``estimate =
    true value``; returns the figure.

    ``selection``: a :class:`~offrl.ope.PolicySelection` made with
    ``true_values``; ``estimators``: labels to draw (default: all). Saved to
    ``save`` when given (format by the extension), shown otherwise.
    """
    if getattr(selection, "true_values", None) is None:
        raise ValueError("plot_selection needs a PolicySelection made with true_values= (it plots estimates against true values)")
    labels = list(selection.estimators if estimators is None else estimators)
    unknown = [label for label in labels if label not in selection.results]
    if unknown:
        raise ValueError(f"estimators {unknown} are not in the selection (it has {list(selection.estimators)})")
    plt = require_matplotlib(save)
    fig, ax = plt.subplots(figsize=(6, 5))
    truth = np.array([selection.true_values[p] for p in selection.policies], dtype=np.float64)
    everything = [truth]
    for label in labels:
        results = [selection.results[label][p] for p in selection.policies]
        values = np.array([float(r.value) for r in results])
        lower = np.array([float(getattr(r, "lower", np.nan)) for r in results])
        upper = np.array([float(getattr(r, "upper", np.nan)) for r in results])
        points = ax.scatter(truth, values, label=label, zorder=3)
        has_interval = np.isfinite(lower) & np.isfinite(upper) & np.isfinite(values)
        if has_interval.any():
            ax.errorbar(
                truth[has_interval], values[has_interval],
                yerr=[values[has_interval] - lower[has_interval], upper[has_interval] - values[has_interval]],
                fmt="none", ecolor=points.get_facecolor()[0], alpha=0.6, capsize=3,
            )
        everything += [values, lower, upper]
    for name, x in zip(selection.policies, truth):
        ax.annotate(name, (x, x), textcoords="offset points", xytext=(4, -10), fontsize=8, color="gray")
    finite = np.concatenate(everything)
    finite = finite[np.isfinite(finite)]
    low, high = float(finite.min()), float(finite.max())
    ax.plot([low, high], [low, high], color="black", linestyle="dashed", linewidth=1, label="estimate = true value")
    ax.set_xlabel("true value")
    ax.set_ylabel("estimate")
    _finish_axes(plt, fig, ax, title, save)
    return fig


def read_params(logdir: str) -> Optional[Dict[str, Any]]:
    """The run's ``params.json``, or ``None`` when it has none."""
    path = os.path.join(logdir, "params.json")
    if not os.path.isfile(path):
        return None
    from ._safety import load_json

    with open(path, "rb") as f:
        params = load_json(f.read(), path)
    return params if isinstance(params, dict) else None


def _finish_axes(plt: Any, fig: Any, ax: Any, title: Optional[str], save: Optional[str]) -> None:
    """Title (if any), legend and grid of a one-plot figure, then :func:`_finish`."""
    if title:
        ax.set_title(title)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    _finish(plt, fig, save)


def _finish(plt: Any, fig: Any, save: Optional[str]) -> None:
    if save:
        directory = os.path.dirname(os.path.abspath(save))
        os.makedirs(directory, exist_ok=True)
        ext = os.path.splitext(save)[1].lstrip(".").lower()
        try:
            atomic_write(save, lambda tmp: fig.savefig(tmp, dpi=100, format=ext or "png"))
        finally:
            plt.close(fig)
    else:
        plt.show()
