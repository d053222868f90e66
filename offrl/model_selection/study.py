"""The Optuna study behind an offline search: its storage, its setup record,
the queue of grid points, the budget, stale trials.

Optuna does the scheduling: every worker (a process of ``n_jobs``, or an
``offrl search`` on another machine) opens the same study and asks it for
the next trial, so nothing here decides who runs what.

* **Storage.** None: Optuna's in-memory storage (one process). A URL: an
  ``RDBStorage`` (``sqlite:///search.db`` is a file next to the command; any
  database SQLAlchemy reaches works for a cluster) with Optuna's heartbeat:
  a running trial records a heartbeat every ``heartbeat_interval`` seconds,
  and a trial whose heartbeat is older than ``3 * heartbeat_interval`` (its
  worker was killed) is marked failed by the next worker that looks, and
  put back in the queue with the same parameters (Optuna's retry callback,
  at most :data:`MAX_RETRY` times). A URL that cannot be opened is a
  ``ValueError`` naming it and the reason.
* **Setup.** The first worker records what the search is (config, space,
  seeds, steps, scorers, split, dataset size) on the study; a worker whose
  search differs refuses to join, naming what differs.
* **Grid.** Every grid point is enqueued as a waiting trial (each at most
  once: a trial whose parameters equal those of a live trial with a lower
  number is closed unused, so a race between two workers enqueueing cannot
  train a point twice). A point whose trials all failed (an interrupted
  run) is enqueued again when a worker starts, up to :data:`MAX_RETRY`
  failures.
* **Budget.** Finished trials (complete or pruned) count; failed ones do
  not. A worker stops when the budget is spent and no trial runs
  elsewhere; while another worker's trial runs, it waits for it to finish
  or go stale (then it retries it).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import time
import warnings
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from .._optional import optional_dependency

__all__ = ["open_storage", "open_study", "MAX_RETRY", "UNUSED", "SETUP", "is_live", "budget", "enqueue_missing",
           "fail_stale", "unused_reason", "import_optuna", "trial_params", "no_experimental_notes"]

#: retries of a trial whose worker was killed (and re-enqueues of an interrupted grid point)
MAX_RETRY = 3
#: study user attribute holding the search's setup
SETUP = "offrl_setup"
#: trial user attribute of a trial closed without training (a duplicate or beyond the budget)
UNUSED = "offrl_unused"
#: how long a joining worker waits for the creator to record the setup
SETUP_WAIT_S = 60.0


def import_optuna() -> Any:
    """The ``optuna`` module (an ``ImportError`` saying how to install the search extra when it is missing)."""
    with optional_dependency("OfflineSearch needs optuna (and pandas): pip install 'offrl[search]'"):
        import optuna
    return optuna


@contextlib.contextmanager
def no_experimental_notes() -> Iterator[None]:
    """Without Optuna's warnings that the heartbeat and its retry callback
    are experimental (they have been since Optuna 2.8)."""
    from optuna.exceptions import ExperimentalWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        yield


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def open_storage(storage: Any, heartbeat_interval: int = 10) -> Any:
    """An Optuna storage from None (in memory), a database URL, or a storage object (as is)."""
    optuna = import_optuna()
    if storage is None:
        return optuna.storages.InMemoryStorage()
    if isinstance(storage, optuna.storages.BaseStorage):
        return storage
    if not isinstance(storage, str):
        raise TypeError(f"storage must be None, a database URL (e.g. 'sqlite:///search.db') or an Optuna storage, "
                        f"got {type(storage).__name__}")
    if "://" not in storage:
        raise ValueError(f"storage {storage!r} is not a database URL: expected e.g. 'sqlite:///search.db' "
                         "(a file next to the command) or 'postgresql://user@host/db'")
    engine_kwargs: Dict[str, Any] = {}
    if storage.startswith("sqlite"):
        path = storage.split(":///", 1)[1] if ":///" in storage else ""
        if path and path != ":memory:":
            directory = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(directory):
                raise ValueError(f"storage {storage!r} cannot be opened: the directory {directory} does not exist")
            if os.path.isdir(path):
                raise ValueError(f"storage {storage!r} cannot be opened: {path} is a directory, not a database file")
        engine_kwargs["connect_args"] = {"timeout": 60}  # several processes write to one file: wait for the lock
    callback_class = getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None) or \
        optuna.storages.RetryFailedTrialCallback
    parameters = inspect.signature(optuna.storages.RDBStorage).parameters
    callback_name = "heartbeat_stale_trial_callback" if "heartbeat_stale_trial_callback" in parameters \
        else "failed_trial_callback"
    with no_experimental_notes():
        kwargs = {"engine_kwargs": engine_kwargs, "heartbeat_interval": int(heartbeat_interval),
                  "grace_period": 3 * int(heartbeat_interval), callback_name: callback_class(max_retry=MAX_RETRY)}
    last: Optional[BaseException] = None
    for attempt in range(5):  # two workers creating the tables of a new file at once: retry
        try:
            with no_experimental_notes():
                rdb = optuna.storages.RDBStorage(storage, **kwargs)
            if storage.startswith("sqlite"):
                _immediate_transactions(rdb.engine)
            return rdb
        except Exception as e:  # SQLAlchemy's errors, a missing driver (ImportError), a malformed URL
            last = e
            if "locked" not in str(e) and "already exists" not in str(e):
                break
            time.sleep(0.5 * (attempt + 1))
    raise ValueError(f"storage {storage!r} cannot be opened: {_first_line(last)}") from last


def _immediate_transactions(engine: Any) -> None:
    """Make every transaction on the SQLite ``engine`` take the database's
    write lock when it begins (``BEGIN IMMEDIATE``).

    Python's sqlite3 driver begins a transaction only before the first
    write, so a read and the write that depends on it are not atomic: two
    workers could both read a waiting trial as waiting and both mark it
    running, Optuna's check-and-set in ``set_trial_state_values``. Both then
    train the same trial and the second fails writing its parameters (a
    UNIQUE constraint of ``trial_params``; seen with two processes on one
    file). With the lock taken at ``BEGIN``, the second worker's read waits
    for the first's commit and sees the trial running. Optuna's sessions are
    short, so the cost is the waiting of a few workers on one file."""
    from sqlalchemy import event

    @event.listens_for(engine, "connect")
    def _no_implicit_begin(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # the driver leaves transactions to the "begin" event below

    @event.listens_for(engine, "begin")
    def _begin_immediate(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    engine.dispose()  # connections opened before the listeners (the tables' creation) are not reused


def _normalised(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def _differences(stored: Dict[str, Any], mine: Dict[str, Any]) -> List[str]:
    out = []
    for key in sorted(set(stored) | set(mine)):
        a, b = stored.get(key), mine.get(key)
        if a == b:
            continue
        if key == "config" and isinstance(a, dict) and isinstance(b, dict):  # name the config fields
            pa, pb = a.get("params", {}), b.get("params", {})
            fields = sorted(f for f in set(pa) | set(pb) if pa.get(f) != pb.get(f))
            out.append(f"config ({', '.join(fields)})" if fields else "config")
        elif key in ("space", "scoring") and isinstance(a, dict) and isinstance(b, dict):
            fields = sorted(f for f in set(a) | set(b) if a.get(f) != b.get(f))
            out.append(f"{'search space' if key == 'space' else key} ({', '.join(fields)})")
        else:
            out.append(key)
    return out


def open_study(storage: Any, study_name: str, setup: Dict[str, Any], sampler: Any, pruner: Any,
               grid: Optional[Sequence[Dict[str, Any]]]) -> Any:
    """Create the study (recording ``setup`` and enqueueing ``grid``) or
    join it (checking its setup is ``setup``)."""
    optuna = import_optuna()
    setup = _normalised(setup)
    try:
        study = optuna.create_study(storage=storage, study_name=study_name, direction="maximize", sampler=sampler,
                                    pruner=pruner, load_if_exists=False)
        created = True
    except optuna.exceptions.DuplicatedStudyError:
        study = optuna.load_study(study_name=study_name, storage=storage, sampler=sampler, pruner=pruner)
        created = False
    if created:
        for params in grid or ():
            study.enqueue_trial(params)
        study.set_user_attr(SETUP, setup)
        return study
    deadline = time.monotonic() + SETUP_WAIT_S
    while SETUP not in study.user_attrs:
        if time.monotonic() > deadline:
            raise ValueError(f"the study {study_name!r} exists in the storage but holds no offrl search setup (made by "
                             "something else, or its creator was stopped while setting it up): give another study_name")
        time.sleep(0.5)
    stored = study.user_attrs[SETUP]
    if stored != setup:
        differ = _differences(stored, setup)
        raise ValueError(f"the study {study_name!r} in this storage was set up for another search ({', '.join(differ)} "
                         "differ): rerun with the same arguments to continue it, or give another study_name")
    return study


def is_live(trial: Any) -> bool:
    """Not failed and not closed unused."""
    from optuna.trial import TrialState

    return trial.state != TrialState.FAIL and UNUSED not in trial.user_attrs


def _key(params: Dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True)


def _fixed(trial: Any) -> Optional[Dict[str, Any]]:
    return trial.system_attrs.get("fixed_params")


def trial_params(trial: Any) -> Dict[str, Any]:
    """A trial's parameters: the grid point it was enqueued with, else what Optuna sampled."""
    return _fixed(trial) or trial.params


def enqueue_missing(study: Any, grid: Sequence[Dict[str, Any]]) -> int:
    """Enqueue the grid points that have no live trial (those whose trials
    failed, at most :data:`MAX_RETRY` times each); returns how many."""
    trials = study.get_trials(deepcopy=False)
    live = {_key(trial_params(t)) for t in trials if is_live(t)}
    failures: Dict[str, int] = {}
    from optuna.trial import TrialState

    for t in trials:
        if t.state == TrialState.FAIL and UNUSED not in t.user_attrs:
            failures[_key(trial_params(t))] = failures.get(_key(trial_params(t)), 0) + 1
    added = 0
    for params in grid:
        key = _key(params)
        if key not in live and failures.get(key, 0) <= MAX_RETRY:
            study.enqueue_trial(params)
            added += 1
    return added


def budget(study: Any) -> Tuple[int, int, int]:
    """``(finished, running, waiting)`` trials, unused ones left out."""
    from optuna.trial import TrialState

    finished = running = waiting = 0
    for t in study.get_trials(deepcopy=False):
        if UNUSED in t.user_attrs:
            continue
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED):
            finished += 1
        elif t.state == TrialState.RUNNING:
            running += 1
        elif t.state == TrialState.WAITING:
            waiting += 1
    return finished, running, waiting


def fail_stale(study: Any, storage: Any) -> None:
    """Mark trials of killed workers failed (and re-enqueue them), when
    ``storage`` (the study's) keeps heartbeats."""
    from optuna.storages import fail_stale_trials

    interval = getattr(storage, "get_heartbeat_interval", lambda: None)()
    if interval:
        with no_experimental_notes():
            fail_stale_trials(study)


def unused_reason(study: Any, number: int, params: Dict[str, Any], grid: bool, n_trials: int) -> Optional[str]:
    """Why the trial ``number`` (parameters ``params``) must not train, or None."""
    trials = study.get_trials(deepcopy=False)
    me = next(t for t in trials if t.number == number)
    if grid and _fixed(me) is None:
        return "the grid was used up when this trial started (another worker took the last point)"
    key = _key(params)
    for t in trials:
        if t.number < number and is_live(t) and _key(trial_params(t)) == key:
            return f"trial {t.number} has the same parameters"
    if not grid:
        from optuna.trial import TrialState

        others = sum(1 for t in trials if t.number != number and UNUSED not in t.user_attrs
                     and t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING))
        if others >= n_trials:
            return f"the budget of {n_trials} trials was spent when this trial started"
    return None
