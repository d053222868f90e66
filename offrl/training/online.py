"""Online training (``fit_online``) and data collection (``collect``) in a
gymnasium 1.x environment.

Each environment step writes ``(observation, action, reward)`` into the
replay buffer. An episode that ends with ``terminated=True`` is closed as
terminal (its last transition does not bootstrap); one that ends with
``truncated=True`` is closed with the observation the environment returned,
so its last transition bootstraps from that real final observation.

Randomness: the first ``env.reset`` and ``env.action_space`` (used for
``random_steps``) are seeded with a number drawn from offrl's generator,
explorers draw from it too, and each evaluation's first reset gets a seed
drawn from it, so after ``offrl.seed(n)`` a run is reproducible (later
resets continue the environment's own generator, as gymnasium intends).

If training stops early (an exception, a non-finite loss, Ctrl-C), the
episode being written is closed as truncated, so the buffer holds every step
taken so far and can be dumped; model files saved before stay intact (saves
are atomic, and weights are checked finite before each save). After a
``NonFiniteLossError`` the algorithm is rolled back to its state at the end
of the last good epoch (or the start of the run). When ``fit_online`` created the buffer itself, the exception
carries it as ``exception.offrl_buffer``.

Vectorised environments: ``env`` may be a ``gymnasium.vector`` environment
(``SyncVectorEnv``, ``AsyncVectorEnv``; autoreset mode NEXT_STEP, SAME_STEP
or DISABLED) or a list of environments with the same spaces (reset here as
soon as an episode ends). Each vector step makes one batched policy (or
explorer) call for all the environments; an explorer with ``sample_envs``
explores each environment independently (see ``offrl.training.explorers``).
Each environment's episode is kept apart and written into the buffer whole
when it ends, with the true final observation on truncation (NEXT_STEP: the
observation returned with the ending, and the reset step that follows
writes nothing; SAME_STEP: ``info["final_obs"]``); when the run stops the
open episodes are written truncated at their current observations.
``n_steps``, ``random_steps``, ``update_start_step`` and the epochs count
environment steps (transitions) of all environments together; an epoch
ends at the vector step that reaches its size, and the last vector step
writes only the transitions still needed (environments in index order), so
``n_steps`` is exact. Seeding: with ``seed=s`` (or ``s`` drawn from offrl's
generator), environment ``i`` is reset first with ``s + i``, its
random-step action space is a copy seeded ``s + i`` and its explorer draws
come from ``numpy.random.default_rng(s + i)``: environment ``i`` repeats a
one-environment vector run with ``seed=s + i`` step for step (a plain
single environment also with a deterministic policy), unless the explorer
depends on the step count (``LinearDecayEpsilonGreedy``: the step is the
count of all environments' steps). Per-environment
returns are logged as ``rollout_return_env_<i>``.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from .._random import get_rng
from .._vector_env import check_env as _check_env
from .._vector_env import is_vector_env, vector_spaces
from ..constants import ActionSpace, LoggingStrategy
from .explorers import check_explorer
from ..dataset.replay_buffer import create_fifo_replay_buffer, create_infinite_replay_buffer
from ..dataset.signature import signatures_from_env
from ..dataset.writer import BasicWriterPreprocess
from ..logging import FileAdapterFactory, create_logger_adapter
from ..metrics.utility import rollout_returns
from .checkpoint import StateGuard
from .options import FitOptions
from .rollouts import Rollout, VectorRollout
from .fit import (LossTracker, NonFiniteLossError, check_priority_support, end_epoch,
                       experiment_directory_name, rolled_back, train_step, write_metrics)

__all__ = ["fit_online", "run_online", "collect"]

#: metric names written per epoch besides the losses and timings
ROLLOUT_RETURN = "rollout_return"
ROLLOUT_LENGTH = "rollout_episode_length"
EVALUATION = "evaluation"


# ------------------------------------------------------------------ checks
def _check_int(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        bound = "a positive int" if minimum == 1 else f"an int >= {minimum}"
        raise ValueError(f"{name} must be {bound}, got {value!r}")
    return int(value)


def _check_seed(seed: Any) -> Optional[int]:
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be None or an int >= 0, got {seed!r}")
    return int(seed)


def _check_callable(value: Any, name: str) -> None:
    if value is not None and not callable(value):
        raise TypeError(f"{name} must be callable as {name}(algo, epoch, total_step), got {type(value).__name__}")


def _env_signature(env: Any, writer: Any = None):
    return signatures_from_env(env, writer if writer is not None else BasicWriterPreprocess())


def _shape_of(signature: Any) -> Any:
    shapes = [tuple(int(d) for d in s) for s in signature.shape]
    return shapes if len(shapes) > 1 else shapes[0]


def _prepare(algo: Any, env: Any, buffer: Any, explorer: Any, make_buffer: Callable[[], Any]) -> Tuple[Any, ActionSpace]:
    """Check the environment, explorer and buffer against the algorithm;
    build the algorithm for the environment if needed. Returns the buffer
    and the environment's action space."""
    _check_env(env)
    obs_sig, _, _, space, size = _env_signature(env)
    algo.check_action_space(space)
    check_explorer(explorer, space, type(algo).__name__)
    if callable(getattr(explorer, "bind_action_space", None)):
        explorer.bind_action_space(env.action_space)
    name = type(algo).__name__
    if not algo.is_built:
        algo.build_with_env(env)
    else:
        shape = _shape_of(obs_sig)
        if shape != algo.observation_shape:
            raise ValueError(f"the environment's observations have shape {shape}, {name} was built for {algo.observation_shape}")
        if size != algo.action_size:
            raise ValueError(
                f"the environment has {size} {'actions' if space == ActionSpace.DISCRETE else 'action dimensions'}, "
                f"{name} was built for action_size={algo.action_size}"
            )
        for scaler in (algo.observation_scaler, algo.action_scaler, algo.reward_scaler):
            if scaler is not None and not scaler.built:
                scaler.fit_with_env(env)
    for field, scaler in (("observation_scaler", algo.observation_scaler), ("action_scaler", algo.action_scaler),
                          ("reward_scaler", algo.reward_scaler)):
        if scaler is not None and not scaler.built:
            raise ValueError(
                f"{field} {type(scaler).__name__} is not fitted and cannot be fitted from the environment: "
                "give its statistics, or fit the algorithm on a dataset first"
            )
    if buffer is None:
        return make_buffer(), space
    for method in ("append", "clip_episode", "sample_transition_batch"):
        if not callable(getattr(buffer, method, None)):
            raise TypeError(f"buffer must be a replay buffer (e.g. create_fifo_replay_buffer(limit, env=env)); "
                            f"{type(buffer).__name__} has no {method}()")
    try:
        info = buffer.dataset_info
    except ValueError:  # an empty buffer without signatures takes the environment's
        return buffer, space
    if info.action_space != space or info.action_size != size:
        raise ValueError(
            f"the buffer holds {info.action_space.name.lower()} actions of size {info.action_size}, "
            f"the environment has {space.name.lower()} actions of size {size}"
        )
    writer = getattr(buffer, "writer_preprocessor", None)
    stored = _shape_of(_env_signature(env, writer)[0])
    if stored != _shape_of(info.observation_signature):
        raise ValueError(
            f"the buffer stores observations of shape {_shape_of(info.observation_signature)}, "
            f"the environment's are stored as {stored}"
        )
    return buffer, space


# -------------------------------------------------------------- stepping
def _attach_buffer(error: BaseException, buffer: Any) -> None:
    try:
        error.offrl_buffer = buffer  # type: ignore[attr-defined]
    except Exception:  # pragma: no cover - exceptions with __slots__
        pass


def _close_quietly(rollout: Any) -> None:
    """Close the open episode while another error propagates (that error wins)."""
    if rollout is None:
        return
    try:
        rollout.close()
    except Exception:  # pragma: no cover - the buffer itself is failing
        pass


def _progress(show: bool, total: int, desc: str):
    if not show:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, mininterval=0.5)


# ----------------------------------------------------------- fit_online
def fit_online(
    algo: Any,
    env: Any,
    buffer: Any = None,
    explorer: Any = None,
    n_steps: int = 1000000,
    n_steps_per_epoch: int = 10000,
    update_interval: int = 1,
    update_start_step: int = 0,
    random_steps: int = 0,
    eval_env: Any = None,
    eval_epsilon: float = 0.0,
    save_interval: int = 1,
    experiment_name: Optional[str] = None,
    with_timestamp: bool = True,
    logger_adapter: Any = None,
    show_progress: bool = True,
    callback: Optional[Callable[[Any, int, int], None]] = None,
    n_updates: int = 1,
    eval_n_trials: int = 10,
    epoch_callback: Optional[Callable[[Any, int, int], None]] = None,
    seed: Optional[int] = None,
    logging_steps: int = 500,
    logging_strategy: Any = LoggingStrategy.EPOCH,
) -> List[Tuple[int, Dict[str, float]]]:
    """Train ``algo`` while it acts in ``env``; returns ``[(epoch, metrics), ...]``.

    Each of the ``n_steps`` environment steps picks an action (uniformly
    from ``env.action_space`` for the first ``random_steps`` steps, then
    from ``explorer``, or ``algo.sample_action`` without one), steps the
    environment and writes the step into ``buffer`` (a FIFO buffer of
    1,000,000 transitions by default). Once more than ``update_start_step``
    steps are taken and the buffer holds more than ``batch_size``
    transitions, every ``update_interval``-th step runs ``n_updates``
    gradient steps on mini-batches sampled from the buffer.

    Every ``n_steps_per_epoch`` steps (and after the last) the epoch's
    metrics are logged: loss means, ``rollout_return`` and
    ``rollout_episode_length`` (means over the episodes that ended in the
    epoch), ``evaluation`` (mean return of ``eval_n_trials`` greedy episodes
    in ``eval_env`` with ``eval_epsilon``-greedy actions, when given) and
    timings; the model is saved through the logger every ``save_interval``
    epochs and after the last. ``callback(algo, epoch, total_step)`` runs
    after every environment step, ``epoch_callback`` after every epoch.
    With ``logging_strategy="steps"`` the losses' means since the last
    write are also written every ``logging_steps`` environment steps (for a
    vector env: at the vector step that reaches a multiple of it), as
    ``fit`` does; the returned list stays one entry per epoch.
    See the module docstring for episode endings, seeding and interruptions.

    ``env`` may be vectorised (a ``gymnasium.vector`` environment in any
    autoreset mode, or a list of environments with the same spaces): see
    the module docstring's "Vectorised environments"; ``update_interval``
    then counts vector steps, each of them can run ``n_updates`` updates,
    and ``callback`` runs after every vector step.
    ``seed`` (optional) seeds the first reset instead of a draw from offrl's
    generator.
    """
    return run_online(algo, env, buffer, explorer, FitOptions(
        n_steps=n_steps, n_steps_per_epoch=n_steps_per_epoch, update_interval=update_interval,
        update_start_step=update_start_step, random_steps=random_steps, eval_env=eval_env, eval_epsilon=eval_epsilon,
        save_interval=save_interval, experiment_name=experiment_name, with_timestamp=with_timestamp,
        logger_adapter=logger_adapter, show_progress=show_progress, callback=callback, n_updates=n_updates,
        eval_n_trials=eval_n_trials, epoch_callback=epoch_callback, seed=seed, logging_steps=logging_steps,
        logging_strategy=logging_strategy,
    ))


def run_online(algo: Any, env: Any, buffer: Any, explorer: Any, options: FitOptions) -> List[Tuple[int, Dict[str, float]]]:
    """:func:`fit_online` with its options gathered (what ``QLearningAlgoBase.fit_online`` calls)."""
    o = options
    n_steps, n_steps_per_epoch, update_interval, n_updates = o.n_steps, o.n_steps_per_epoch, o.update_interval, o.n_updates
    update_start_step, random_steps, eval_env, eval_epsilon = o.update_start_step, o.random_steps, o.eval_env, o.eval_epsilon
    save_interval, eval_n_trials, logging_steps, logging_strategy = o.save_interval, o.eval_n_trials, o.logging_steps, o.logging_strategy
    experiment_name, with_timestamp, logger_adapter, show_progress = o.experiment_name, o.with_timestamp, o.logger_adapter, o.show_progress
    callback, epoch_callback, seed = o.callback, o.epoch_callback, o.seed
    if not algo.is_trainable:
        raise RuntimeError(f"{type(algo).__name__} cannot be trained; use collect to gather data with it")
    n_steps = _check_int(n_steps, "n_steps", 1)
    n_steps_per_epoch = _check_int(n_steps_per_epoch, "n_steps_per_epoch", 1)
    update_interval = _check_int(update_interval, "update_interval", 1)
    n_updates = _check_int(n_updates, "n_updates", 1)
    update_start_step = _check_int(update_start_step, "update_start_step", 0)
    random_steps = _check_int(random_steps, "random_steps", 0)
    save_interval = _check_int(save_interval, "save_interval", 1)
    eval_n_trials = _check_int(eval_n_trials, "eval_n_trials", 1)
    logging_steps = _check_int(logging_steps, "logging_steps", 1)
    step_logging = LoggingStrategy.parse(logging_strategy) == LoggingStrategy.STEPS
    if update_start_step >= n_steps:
        raise ValueError(
            f"update_start_step={update_start_step} is not below n_steps={n_steps}: no update would happen "
            "(use collect to gather data without training)"
        )
    if isinstance(eval_epsilon, bool) or not isinstance(eval_epsilon, (int, float, np.integer, np.floating)) or not 0.0 <= eval_epsilon <= 1.0:
        raise ValueError(f"eval_epsilon must be a number in [0, 1], got {eval_epsilon!r}")
    _check_callable(callback, "callback")
    _check_callable(epoch_callback, "epoch_callback")
    seed = _check_seed(seed)
    eval_spaces = None
    if eval_env is not None:
        if is_vector_env(eval_env):
            eval_spaces = vector_spaces(eval_env, "eval_env")
        else:
            _check_env(eval_env, "eval_env")
            eval_spaces = eval_env
    vector = is_vector_env(env)
    spaces = vector_spaces(env) if vector else env
    if vector:
        n_envs = len(env) if isinstance(env, (list, tuple)) else int(env.num_envs)
        if n_steps_per_epoch < n_envs:
            raise ValueError(f"n_steps_per_epoch={n_steps_per_epoch} is below the number of environments ({n_envs}): "
                             "an epoch must hold at least one step of every environment")

    def default_buffer():
        return create_fifo_replay_buffer(limit=1000000, env=spaces)

    buffer, _ = _prepare(algo, spaces, buffer, explorer, default_buffer)
    if eval_spaces is not None:
        eval_space = _env_signature(eval_spaces)
        env_space = _env_signature(spaces)
        if _shape_of(eval_space[0]) != _shape_of(env_space[0]) or eval_space[3:] != env_space[3:]:
            raise ValueError("eval_env's observation and action spaces must match env's")

    factory = logger_adapter if logger_adapter is not None else FileAdapterFactory()
    logger = create_logger_adapter(factory, algo, experiment_directory_name(algo, experiment_name or f"{type(algo).__name__}_online", with_timestamp),
                                   n_steps_per_epoch)
    logger.write_params(algo.to_params())

    prioritized = hasattr(buffer, "update_priorities")
    if prioritized:
        check_priority_support(algo)
    batch_size = algo.batch_size
    n_epochs = (n_steps + n_steps_per_epoch - 1) // n_steps_per_epoch
    tracker = LossTracker()
    window = LossTracker() if step_logging else None
    results: List[Tuple[int, Dict[str, float]]] = []
    progress = None
    rollout: Any = None
    updates_ready = False
    total_step = 0
    vector_step = 0
    guard = StateGuard(algo)
    try:
        if vector:
            rollout = VectorRollout(algo, env, spaces, buffer, explorer, False, random_steps, seed)
        else:
            rollout = Rollout(algo, env, buffer, explorer, False, random_steps, seed)
        progress = _progress(show_progress, n_steps, f"{type(algo).__name__} online")
        for epoch in range(1, n_epochs + 1):
            epoch_end = min(epoch * n_steps_per_epoch, n_steps)
            first_step = total_step
            rollout.time_inference = rollout.time_environment = 0.0
            sample_time = update_time = 0.0
            epoch_start = time.perf_counter()
            while total_step < epoch_end:
                if vector:  # an epoch ends at the vector step that reaches its last environment step
                    written = rollout.step(total_step, n_steps - total_step)
                    total_step += written
                    vector_step += 1
                    update_now = vector_step % update_interval == 0
                else:
                    written = 1
                    total_step += 1
                    rollout.step(total_step)
                    update_now = total_step % update_interval == 0
                if total_step > update_start_step and update_now:
                    if not updates_ready:
                        # transition counts only grow (a FIFO buffer stays at its limit)
                        updates_ready = buffer.transition_count > batch_size
                    if updates_ready:
                        for _ in range(n_updates):
                            result, t_sample, t_update = train_step(algo, buffer, batch_size, prioritized)
                            update_time += t_update
                            sample_time += t_sample
                            tracker.add(result.metrics, algo.grad_step)
                            if window is not None:
                                window.add(result.metrics, algo.grad_step)
                if window is not None and total_step // logging_steps > (total_step - written) // logging_steps:
                    step_metrics = window.epoch_metrics()
                    if step_metrics:
                        write_metrics(logger, epoch, total_step, step_metrics)
                if progress is not None:
                    if tracker.rows == 0 and tracker.last:
                        progress.set_postfix({k: f"{v:.4g}" for k, v in tracker.last.items()}, refresh=False)
                    progress.update(written)
                if callback is not None:
                    callback(algo, epoch, total_step)
            steps = total_step - first_step
            elapsed = time.perf_counter() - epoch_start
            metrics = tracker.epoch_metrics()
            if rollout.finished:
                returns, lengths = [e[0] for e in rollout.finished], [e[1] for e in rollout.finished]
                metrics[ROLLOUT_RETURN] = float(np.mean(returns))
                metrics[ROLLOUT_LENGTH] = float(np.mean(lengths))
                if vector:  # per environment: rollout_return_env_0, ...
                    for i in sorted({e[2] for e in rollout.finished}):
                        metrics[f"{ROLLOUT_RETURN}_env_{i}"] = float(np.mean([e[0] for e in rollout.finished if e[2] == i]))
                rollout.finished.clear()
            compute_epsilon = getattr(explorer, "compute_epsilon", None)
            if callable(compute_epsilon):
                metrics["epsilon"] = float(compute_epsilon(total_step))
            metrics["time_inference"] = rollout.time_inference / steps
            metrics["time_environment_step"] = rollout.time_environment / steps
            metrics["time_sample_batch"] = sample_time / steps
            metrics["time_algorithm_update"] = update_time / steps
            metrics["time_step"] = elapsed / steps
            if eval_env is not None:
                seed = int(get_rng().integers(2**31 - 1))
                metrics[EVALUATION] = float(np.mean(rollout_returns(algo, eval_env, eval_n_trials, float(eval_epsilon), seed)))
            end_epoch(algo, logger, epoch, n_epochs, total_step, metrics, save_interval, epoch_callback, guard)
            results.append((epoch, metrics))
    except NonFiniteLossError as error:
        restored = rolled_back(error, guard, getattr(algo, "precision", "float32"))
        _attach_buffer(restored, buffer)
        _close_quietly(rollout)
        raise restored from None
    except BaseException as error:
        _attach_buffer(error, buffer)
        _close_quietly(rollout)
        raise
    finally:
        if progress is not None:
            progress.close()
        logger.close()
    rollout.close()
    return results


# -------------------------------------------------------------- collect
def collect(
    algo: Any,
    env: Any,
    buffer: Any = None,
    explorer: Any = None,
    deterministic: bool = False,
    n_steps: int = 1000000,
    show_progress: bool = True,
    seed: Optional[int] = None,
) -> Any:
    """Act in ``env`` for ``n_steps`` steps and write them into ``buffer``
    (a new unbounded buffer by default); returns the buffer.

    Actions come from ``algo.predict`` with ``deterministic=True``, else
    from ``explorer`` when given, else from ``algo.sample_action``. The
    episode still running at the end is closed as truncated with its current
    observation as final observation, so an empty buffer ends up holding
    exactly ``n_steps`` transitions. Random policies collect too (random
    datasets, D4RL style); a trained algorithm makes "medium"/"expert"
    datasets and ``fit_online``'s buffer a "replay" one.

    ``env`` may be vectorised (see the module docstring): ``n_steps`` then
    counts the steps of all environments together and still ends exactly.
    ``seed`` (optional) seeds the first reset instead of a draw from offrl's
    generator.
    """
    n_steps = _check_int(n_steps, "n_steps", 1)
    if not isinstance(deterministic, (bool, np.bool_)):
        raise TypeError(f"deterministic must be a bool, got {type(deterministic).__name__}")
    if deterministic and explorer is not None:
        raise ValueError("give either deterministic=True (greedy actions) or an explorer, not both")
    seed = _check_seed(seed)
    vector = is_vector_env(env)
    spaces = vector_spaces(env) if vector else env

    def default_buffer():
        return create_infinite_replay_buffer(env=spaces)

    buffer, _ = _prepare(algo, spaces, buffer, explorer, default_buffer)
    rollout: Any = None
    progress = None
    try:
        progress = _progress(show_progress, n_steps, f"{type(algo).__name__} collect")
        if vector:
            rollout = VectorRollout(algo, env, spaces, buffer, explorer, bool(deterministic), 0, seed)
            total_step = 0
            while total_step < n_steps:
                written = rollout.step(total_step, n_steps - total_step)
                total_step += written
                if progress is not None:
                    progress.update(written)
        else:
            rollout = Rollout(algo, env, buffer, explorer, bool(deterministic), 0, seed)
            for total_step in range(1, n_steps + 1):
                rollout.step(total_step)
                if progress is not None:
                    progress.update(1)
    except BaseException as error:
        _attach_buffer(error, buffer)
        _close_quietly(rollout)
        raise
    finally:
        if progress is not None:
            progress.close()
    rollout.close()
    return buffer
