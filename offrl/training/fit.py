"""The offline training loop (``fit`` / ``fitter``).

Losses stay on the device: each step writes its losses into one row of a
preallocated tensor, which is read once per check interval (for the progress
bar and the NaN check) and summed into the epoch's metrics. A non-finite loss
stops training with the exact step and loss named, before anything is saved.

The weights are checked finite before each save (a loss is computed before
the update that may blow the weights up), so no snapshot with NaN or
infinite weights is ever written; after a :class:`NonFiniteLossError` the
algorithm is rolled back to its last finite state (the end of the last good
epoch, or the start of the run). At each epoch end of a run logged to files,
``checkpoint.d3`` records everything ``fit(..., resume_from=...)`` needs to
continue the run exactly (see :mod:`offrl.training.checkpoint`).
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import time
from typing import Any, Callable, Dict, Generator, List, Optional, Tuple

import numpy as np
import torch

from ..constants import LoggingStrategy
from ..dataset.disk import before_epoch
from ..logging import (FileAdapter, FileAdapterFactory, NoopAdapterFactory, create_logger_adapter, lock_log_directory,
                       truncate_metric_files)
from . import distributed
from .options import FitOptions
from .checkpoint import (CHECKPOINT_NAME, StateGuard, load_checkpoint, non_finite_weights, resolve_checkpoint,
                         save_checkpoint)

__all__ = [
    "fitter",
    "run",
    "end_epoch",
    "LossTracker",
    "CHECK_INTERVAL",
    "TrainStepResult",
    "NonFiniteLossError",
    "train_step",
    "check_priority_support",
]


class NonFiniteLossError(FloatingPointError):
    """A training loss or the weights became NaN or infinite. Raised before
    anything non-finite is saved; the algorithm is rolled back to its last
    finite state (the message says which)."""


@dataclasses.dataclass(frozen=True)
class TrainStepResult:
    """What one gradient step returns (see ``QLearningAlgoBase.training_step``).

    Attributes:
        metrics: losses and other figures as 0-dim tensors on the device.
        td_errors: ``(B,)`` per-sample absolute TD errors (detached), for
            algorithms that compute them; a prioritized buffer takes them
            as new priorities.
    """

    metrics: Dict[str, torch.Tensor]
    td_errors: Optional[torch.Tensor] = None

#: steps between reads of the loss buffer (progress bar, NaN check)
CHECK_INTERVAL = 100


class LossTracker:
    """Per-step losses kept on the device, read every ``interval`` steps."""

    def __init__(self, interval: int = CHECK_INTERVAL) -> None:
        self.interval = interval
        self.names: Optional[List[str]] = None
        self.buffer: Optional[torch.Tensor] = None
        self.rows = 0
        self.first_step = 0
        self.sums: Optional[np.ndarray] = None
        self.count = 0
        self.last: Dict[str, float] = {}

    def add(self, losses: Dict[str, torch.Tensor], step: int) -> None:
        if self.buffer is None:
            if self.names is None:
                self.names = list(losses)
            elif sorted(self.names) != sorted(losses):  # a window restored from a checkpoint
                raise ValueError(f"{self.source}: the checkpoint's logging window holds {sorted(self.names)}, "
                                 f"the algorithm reports {sorted(losses)}")
            first = next(iter(losses.values()))
            self.buffer = torch.empty((self.interval, len(self.names)), dtype=torch.float32, device=first.device)
            if self.sums is None:
                self.sums = np.zeros(len(self.names), dtype=np.float64)
        if self.rows == 0:
            self.first_step = step
        self.buffer[self.rows] = torch.stack([losses[n].detach().float() for n in self.names])
        self.rows += 1
        if self.rows == self.interval:
            self.flush()

    def flush(self) -> None:
        """Read the buffered losses (one device sync), check them, accumulate."""
        if self.rows == 0 or self.buffer is None:
            return
        values = self.buffer[: self.rows].cpu().numpy().astype(np.float64)
        finite = np.isfinite(values)
        if not finite.all():
            row, col = np.argwhere(~finite)[0]
            raise NonFiniteLossError(
                f"{self.names[col]} became {values[row, col]} at step {self.first_step + int(row)}; "
                "training stopped"
            )
        self.sums += values.sum(axis=0)
        self.count += self.rows
        self.last = {n: float(v) for n, v in zip(self.names, values.mean(axis=0))}
        self.rows = 0

    def partial(self) -> Optional[Dict[str, Any]]:
        """The sums not yet written (JSON values), for a checkpoint."""
        self.flush()
        if self.names is None:
            return None
        return {"names": list(self.names), "sums": [float(v) for v in self.sums], "count": int(self.count)}

    def load_partial(self, record: Dict[str, Any], source: str = "the checkpoint") -> None:
        """Continue from :meth:`partial`'s record (read from ``source``)."""
        self.source = source
        try:
            names, sums, count = list(record["names"]), [float(v) for v in record["sums"]], int(record["count"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"malformed logging window in the checkpoint: {e}") from None
        if len(names) != len(sums):
            raise ValueError("malformed logging window in the checkpoint: names and sums differ in length")
        self.names = names
        self.sums = np.asarray(sums, dtype=np.float64)
        self.count = count

    def epoch_metrics(self) -> Dict[str, float]:
        self.flush()
        if self.count == 0 or self.names is None:
            return {}
        metrics = {n: float(s / self.count) for n, s in zip(self.names, self.sums)}
        self.sums[:] = 0.0
        self.count = 0
        return metrics


def check_priority_support(algo: Any) -> None:
    """Raise when ``algo`` cannot train from a prioritized buffer (its loss
    takes no importance weights and it reports no TD errors)."""
    if not algo.supports_priorities:
        raise ValueError(
            f"{type(algo).__name__} does not support prioritized replay (its loss takes no importance "
            "weights): use a plain ReplayBuffer, or DQN, DoubleDQN or DiscreteCQL"
        )


def train_step(algo: Any, buffer: Any, batch_size: int, prioritized: bool) -> Tuple[TrainStepResult, float, float]:
    """The step ``fit`` and ``fit_online`` share: sample a batch from
    ``buffer``, run ``algo.training_step`` on it, and give a prioritized
    buffer the step's TD errors (one device-to-host copy of ``B`` floats).
    Returns the result and the seconds spent sampling and updating."""
    t0 = time.perf_counter()
    if algo.predicts_from_sequences:
        batch = buffer.sample_trajectory_batch(batch_size, algo.context_size)
    else:
        batch = buffer.sample_transition_batch(batch_size)
    t1 = time.perf_counter()
    result = algo.training_step(batch)
    if prioritized:
        if result.td_errors is None or batch.indices is None:
            check_priority_support(algo)
            raise ValueError("the batch carries no importance weights or indices: sample it from the prioritized buffer")
        buffer.update_priorities(batch.indices, result.td_errors)
    return result, t1 - t0, time.perf_counter() - t1


def _check_steps(n_steps: Any, n_steps_per_epoch: Any) -> None:
    for name, value in (("n_steps", n_steps), ("n_steps_per_epoch", n_steps_per_epoch)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


def experiment_directory_name(algo: Any, experiment_name: Optional[str], with_timestamp: bool) -> str:
    name = experiment_name or type(algo).__name__
    if with_timestamp:
        name += "_" + datetime.datetime.now().strftime("%Y%m%d%H%M%S%f")
    return name


def end_epoch(algo: Any, logger: Any, epoch: int, n_epochs: int, total_step: int,
              metrics: Dict[str, float], save_interval: int, epoch_callback: Optional[Callable[..., None]],
              guard: Optional[StateGuard] = None) -> None:
    """Log an epoch's metrics, check the weights are finite, save the model
    every ``save_interval`` epochs and after the last one, remember the
    state in ``guard``, then run ``epoch_callback(algo, epoch, total_step)``
    (shared by ``fit`` and ``fit_online``). Raises
    :class:`NonFiniteLossError` instead of saving non-finite weights."""
    write_metrics(logger, epoch, total_step, metrics)
    problem = non_finite_weights(algo)
    if problem is not None:
        raise NonFiniteLossError(f"{problem} at the end of epoch {epoch} (grad_step {algo.grad_step}); "
                                 "training stopped and no model was saved from this epoch")
    if epoch % save_interval == 0 or epoch == n_epochs:
        logger.save_model(total_step, algo)  # d3rlpy passes the step as save_model's `epoch`
    if guard is not None:
        guard.commit(epoch)
    if epoch_callback is not None:
        epoch_callback(algo, epoch, total_step)


def rolled_back(error: NonFiniteLossError, guard: Optional[StateGuard], precision: str = "float32") -> NonFiniteLossError:
    """``error`` with the algorithm restored from ``guard`` and the message
    saying so (snapshots written so far hold finite weights only), naming
    the update step's ``precision`` unless it is float32."""
    if precision != "float32" and "precision=" not in str(error):
        error = NonFiniteLossError(f"{error} (with precision={precision!r}; precision='float32' trains without bf16)")
    if guard is None:
        return error
    return NonFiniteLossError(f"{error}; {guard.restore()}. Model files saved before are intact "
                              "(every save is checked finite)")


def fitter(
    algo: Any,
    dataset: Any,
    n_steps: int,
    n_steps_per_epoch: int = 10000,
    experiment_name: Optional[str] = None,
    with_timestamp: bool = True,
    logger_adapter: Any = None,
    show_progress: bool = True,
    save_interval: int = 1,
    evaluators: Optional[Dict[str, Any]] = None,
    callback: Optional[Callable[[Any, int, int], None]] = None,
    epoch_callback: Optional[Callable[[Any, int, int], None]] = None,
    logging_steps: int = 500,
    logging_strategy: Any = LoggingStrategy.EPOCH,
    resume_from: Any = None,
) -> Generator[Tuple[int, Dict[str, float]], None, None]:
    """Train ``algo`` on ``dataset``; yield ``(epoch, metrics)`` per epoch.

    ``n_steps`` gradient steps in epochs of ``n_steps_per_epoch`` (the last
    epoch may be shorter). ``metrics`` holds the epoch means of the losses,
    timing figures and the evaluators' scores. ``callback(algo, epoch,
    total_step)`` runs after every step, ``epoch_callback`` after every
    epoch. Models are saved through the logger every ``save_interval``
    epochs and after the last one. With ``logging_strategy="steps"`` the
    losses' means are also written every ``logging_steps`` steps.

    With file logging, ``checkpoint.d3`` in the log directory is rewritten
    at each epoch end. ``resume_from`` (that file, or the log directory
    holding it) continues an interrupted run from its last checkpoint:
    weights, optimizer states, counters, random states and the logging
    window are restored. Without ``logger_adapter`` the run logs into the
    checkpoint's directory again: its metric CSVs are appended to (rows
    written after the checkpoint are dropped first). On the same device and
    thread count the result equals the uninterrupted run's. Give the same
    dataset, ``n_steps_per_epoch`` and logging options; ``n_steps`` may be
    larger than the first run's. A prioritized buffer's priorities are not
    part of the checkpoint (resume in the same process with the same buffer
    object to keep them).
    """
    return run(algo, dataset, FitOptions(
        n_steps=n_steps, n_steps_per_epoch=n_steps_per_epoch, experiment_name=experiment_name,
        with_timestamp=with_timestamp, logger_adapter=logger_adapter, show_progress=show_progress,
        save_interval=save_interval, evaluators=evaluators, callback=callback, epoch_callback=epoch_callback,
        logging_steps=logging_steps, logging_strategy=logging_strategy, resume_from=resume_from,
    ))


def run(algo: Any, dataset: Any, options: FitOptions) -> Generator[Tuple[int, Dict[str, float]], None, None]:
    """:func:`fitter` with its options gathered (what ``QLearningAlgoBase.fitter`` calls)."""
    _check_steps(options.n_steps, options.n_steps_per_epoch)
    save_interval, logging_steps = options.save_interval, options.logging_steps
    if isinstance(save_interval, bool) or not isinstance(save_interval, (int, np.integer)) or save_interval <= 0:
        raise ValueError(f"save_interval must be a positive int, got {save_interval!r}")
    if isinstance(logging_steps, bool) or not isinstance(logging_steps, (int, np.integer)) or logging_steps <= 0:
        raise ValueError(f"logging_steps must be a positive int, got {logging_steps!r}")
    strategy = LoggingStrategy.parse(options.logging_strategy)
    if not hasattr(dataset, "sample_transition_batch") or not hasattr(dataset, "dataset_info"):
        raise TypeError(f"dataset must be a ReplayBuffer or MDPDataset, got {type(dataset).__name__}")
    for name, evaluator in (options.evaluators or {}).items():
        if not callable(evaluator):
            raise TypeError(f"evaluator {name!r} is not callable")
    resume = resolve_checkpoint(options.resume_from) if options.resume_from is not None else None
    options = options.replace(
        n_steps=int(options.n_steps), n_steps_per_epoch=int(options.n_steps_per_epoch), save_interval=int(save_interval),
        evaluators=options.evaluators or {}, logging_strategy=strategy, logging_steps=int(logging_steps),
    )
    return _fit_generator(algo, dataset, options, resume)


def prepare_algorithm(algo: Any, dataset: Any) -> None:
    """Build ``algo`` for ``dataset`` or, when it is built, check that the
    dataset fits it and fit any scaler that has no statistics yet."""
    algo.check_action_space(dataset.dataset_info.action_space)
    if not algo.is_built:
        algo.build_with_dataset(dataset)
    else:
        algo.fit_scalers(dataset)
        algo.check_dataset(dataset)
    algo.check_training_fits(dataset)  # batch_size and activations against memory, before the first step


def write_metrics(logger: Any, epoch: int, step: int, metrics: Dict[str, float]) -> None:
    logger.before_write_metric(epoch, step)
    for name, value in metrics.items():
        logger.write_metric(epoch, step, name, value)
    logger.after_write_metric(epoch, step)


def _resume(algo: Any, dataset: Any, checkpoint: str, n_steps: int, n_steps_per_epoch: int,
            logging_steps: Optional[int]) -> Dict[str, Any]:
    """Load ``checkpoint`` into ``algo`` and check the run's options agree
    with it; returns its loop record."""
    loop = load_checkpoint(algo, checkpoint)
    try:
        saved = {k: loop[k] for k in ("epoch", "total_step", "n_steps_per_epoch", "logging_steps", "transition_count")}
    except (KeyError, TypeError) as e:
        raise ValueError(f"{checkpoint} has a malformed resume record: missing {e}") from None
    if saved["n_steps_per_epoch"] != n_steps_per_epoch:
        raise ValueError(f"n_steps_per_epoch={n_steps_per_epoch}, but {checkpoint} was written with "
                         f"n_steps_per_epoch={saved['n_steps_per_epoch']}: resume with the same value")
    if saved["logging_steps"] != logging_steps:
        raise ValueError(f"the logging options differ from the run {checkpoint} was written by "
                         f"(logging_steps {saved['logging_steps']} then, {logging_steps} now)")
    if saved["transition_count"] != int(dataset.transition_count):
        raise ValueError(f"the dataset has {int(dataset.transition_count)} transitions, the run {checkpoint} "
                         f"was written by had {saved['transition_count']}: resume on the same dataset")
    if saved["total_step"] > n_steps:
        raise ValueError(f"n_steps={n_steps} is below the {saved['total_step']} steps {checkpoint} already holds")
    if saved["total_step"] < n_steps and saved["total_step"] % n_steps_per_epoch:
        # the last epoch ended early: the run it was written by ended there, and its epochs cannot go on
        raise ValueError(f"{checkpoint} was written at the end of a run of {saved['total_step']} steps, inside epoch "
                         f"{saved['epoch']}: it cannot be continued to n_steps={n_steps}; start from its model instead")
    return loop


def _fit_generator(algo, dataset, options: FitOptions, resume):
    ddp = distributed.DDPContext() if algo.enable_ddp else None
    source = distributed.unwrap(dataset)
    prioritized = hasattr(source, "update_priorities")
    if prioritized:
        check_priority_support(algo)
        if ddp is not None:
            raise ValueError("enable_ddp=True: prioritized replay is not supported data-parallel (each rank would "
                             "keep its own priorities); use a plain ReplayBuffer")
    prepare_algorithm(algo, source)
    sampler = source
    if ddp is not None:  # every rank gets rank 0's weights and scalers; sampling from this rank's share
        ddp.attach(algo)
        sampler = ddp.sampler(dataset, algo)
        if not ddp.is_main:  # rank 0 alone logs, evaluates and saves
            options = options.replace(logger_adapter=NoopAdapterFactory(), evaluators={}, show_progress=False)
            resume = None if resume is None else (resume[0], None)
    try:
        yield from _fit_loop(algo, source, sampler, options, resume, prioritized)
    except BaseException as error:
        if ddp is not None and not isinstance(error, GeneratorExit):
            ddp.failed(error)
        raise


def _fit_loop(algo, dataset, sampler, options: FitOptions, resume, prioritized):
    n_steps, n_steps_per_epoch = options.n_steps, options.n_steps_per_epoch
    logging_steps = options.logging_steps if options.logging_strategy == LoggingStrategy.STEPS else None
    logger_adapter, show_progress, evaluators = options.logger_adapter, options.show_progress, options.evaluators
    callback = options.callback
    tracker = LossTracker()
    window = LossTracker() if logging_steps is not None else None
    total_step = 0
    first_epoch = 1
    if resume is not None:
        checkpoint, resume_dir = resume
        loop = _resume(algo, dataset, checkpoint, n_steps, n_steps_per_epoch, logging_steps)
        total_step = int(loop["total_step"])
        first_epoch = int(loop["epoch"]) + 1
        if window is not None and loop.get("window") is not None:
            window.load_partial(loop["window"], checkpoint)
    if resume is not None and resume[1] is not None and logger_adapter is None:
        logger = FileAdapter(resume[1])  # the run's own log directory, appended to
    else:
        factory = logger_adapter if logger_adapter is not None else FileAdapterFactory()
        logger = create_logger_adapter(factory, algo,
                                       experiment_directory_name(algo, options.experiment_name, options.with_timestamp),
                                       n_steps_per_epoch)
    logdir = getattr(logger, "logdir", None)
    run_lock = None
    try:
        if logdir is not None and os.path.isdir(logdir):
            # checkpoints go here: one run at a time (shared with the file adapter's own lock)
            run_lock = lock_log_directory(logdir)
            if resume is not None:
                truncate_metric_files(logdir, total_step)
        logger.write_params(algo.to_params())
    except BaseException:
        if run_lock is not None:
            run_lock.release()
        logger.close()
        raise

    batch_size = algo.batch_size
    n_epochs = (n_steps + n_steps_per_epoch - 1) // n_steps_per_epoch
    guard = StateGuard(algo, first_epoch - 1)
    try:
        for epoch in range(first_epoch, n_epochs + 1):
            before_epoch(dataset)
            steps = min(n_steps_per_epoch, n_steps - total_step)
            progress = None
            if show_progress:
                from tqdm.auto import tqdm

                progress = tqdm(total=steps, desc=f"Epoch {epoch}/{n_epochs}", leave=False, mininterval=0.5)
            sample_time = update_time = 0.0
            epoch_start = time.perf_counter()
            for i in range(steps):
                result, t_sample, t_update = train_step(algo, sampler, batch_size, prioritized)
                sample_time += t_sample
                update_time += t_update
                total_step += 1
                tracker.add(result.metrics, algo.grad_step)
                if window is not None:
                    window.add(result.metrics, algo.grad_step)
                    if total_step % logging_steps == 0:
                        write_metrics(logger, epoch, total_step, window.epoch_metrics())
                if progress is not None:
                    if tracker.rows == 0:
                        progress.set_postfix({k: f"{v:.4g}" for k, v in tracker.last.items()}, refresh=False)
                    progress.update(1)
                if callback is not None:
                    callback(algo, epoch, total_step)
            metrics = tracker.epoch_metrics()
            if progress is not None:
                progress.close()
            elapsed = time.perf_counter() - epoch_start
            metrics["time_sample_batch"] = sample_time / steps
            metrics["time_algorithm_update"] = update_time / steps
            metrics["time_step"] = elapsed / steps
            for name, evaluator in evaluators.items():
                metrics[name] = float(evaluator(algo, dataset))
            end_epoch(algo, logger, epoch, n_epochs, total_step, metrics, options.save_interval, options.epoch_callback, guard)
            if logdir is not None and os.path.isdir(logdir):
                loop = {"epoch": epoch, "total_step": total_step, "n_steps_per_epoch": n_steps_per_epoch,
                        "logging_steps": logging_steps, "transition_count": int(dataset.transition_count),
                        "window": window.partial() if window is not None else None}
                save_checkpoint(algo, os.path.join(logdir, CHECKPOINT_NAME), loop)
            yield epoch, metrics
    except NonFiniteLossError as error:
        raise rolled_back(error, guard, getattr(algo, "precision", "float32")) from None
    finally:
        if run_lock is not None:
            run_lock.release()
        logger.close()
