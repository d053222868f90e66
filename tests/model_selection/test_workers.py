"""Several workers on one study: processes of n_jobs, a worker killed
mid-candidate (its trial failed, retried, counted once), an interrupted
search continued by running it again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

pytest.importorskip("optuna", reason="the search extra is not installed")
pytest.importorskip("pandas", reason="the search extra is not installed")

import optuna  # noqa: E402
from optuna.trial import TrialState  # noqa: E402

import offrl  # noqa: E402

from offrl.model_selection import OfflineSearch  # noqa: E402

from selection_bandit import bandit_dataset, learning_rate_score, tiny_dqn  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GRID = {"learning_rate": [1e-4, 1e-3, 3e-3]}


def _trained(study):
    """(params, state) of the trials that trained (unused ones left out)."""
    return [(json.dumps(t.params, sort_keys=True), t.state) for t in study.get_trials()
            if "offrl_unused" not in t.user_attrs and t.state != TrialState.WAITING]


def test_two_processes_run_every_grid_trial_exactly_once():
    # no storage and no output directory: an SQLite file in a temporary directory, copied to memory at the end
    search = OfflineSearch(tiny_dqn(), GRID, scorer=learning_rate_score, seeds=2, n_jobs=2, n_steps=2,
                           n_steps_per_epoch=1, test_size=0.25, show_progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # the chosen checkpoint is loaded, not trained again
        search.fit(bandit_dataset(40))
    complete = [p for p, state in _trained(search.study_) if state == TrialState.COMPLETE]
    assert sorted(complete) == sorted(json.dumps({"learning_rate": lr, "seed": s}, sort_keys=True)
                                      for lr in GRID["learning_rate"] for s in (0, 1))
    assert len(_trained(search.study_)) == 6  # nothing else trained (no failed or duplicate trial)
    assert len(search.results_) == 6 * 2
    assert search.best_params_["learning_rate"] == 3e-3
    # the checkpoint trained in a worker process is the one a plain fit with its seed gives
    offrl.seed(search.best_params_["seed"])
    plain = tiny_dqn(learning_rate=3e-3).create()
    plain.fit(search.train_dataset_, n_steps=search.best_step_, n_steps_per_epoch=1,
              logger_adapter=offrl.logging.NoopAdapterFactory(), show_progress=False)
    x = np.random.default_rng(5).normal(size=(64, 2)).astype(np.float32)
    np.testing.assert_array_equal(search.best_estimator_.predict(x), plain.predict(x))


WORKER = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, {here!r})
    from offrl.model_selection import OfflineSearch
    from selection_bandit import bandit_dataset, tiny_dqn

    CALLS = [0]

    def slow_score(algo, dataset):
        # with BLOCK set, the third checkpoint (the first of the second trial) never finishes scoring
        CALLS[0] += 1
        if os.environ.get("BLOCK") and CALLS[0] == 3:
            print("blocked", flush=True)
            time.sleep(600)
        if os.environ.get("INTERRUPT") and CALLS[0] == 3:
            raise KeyboardInterrupt
        return 1000.0 * algo.config.learning_rate

    search = OfflineSearch(tiny_dqn(), {{"learning_rate": [1e-4, 1e-3, 3e-3]}}, scorer=slow_score, n_steps=2,
                           n_steps_per_epoch=1, test_size=0.25, show_progress=False, heartbeat_interval=1,
                           storage={storage!r}, output_dir={out!r})
    search.fit(bandit_dataset(40))
    print("scored", CALLS[0], "chosen", search.best_params_, flush=True)
""")


def _worker(tmp_path, **env):
    script = tmp_path / "worker.py"
    script.write_text(WORKER.format(here=HERE, storage=f"sqlite:///{tmp_path}/study.db", out=str(tmp_path / "out")))
    environ = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **env}
    return subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=environ, cwd=tmp_path)


def _study(tmp_path):
    return optuna.load_study(study_name="offrl_search", storage=f"sqlite:///{tmp_path}/study.db")


def test_a_killed_workers_candidate_is_failed_retried_and_counted_once(tmp_path):
    first = _worker(tmp_path, BLOCK="1")
    line = first.stdout.readline()
    while line and "blocked" not in line:
        line = first.stdout.readline()
    assert "blocked" in line, first.communicate()[0]
    study = _study(tmp_path)
    finished = [t for t in study.get_trials() if t.state == TrialState.COMPLETE]
    assert [t.number for t in finished] == [0]
    before = finished[0].user_attrs["offrl_candidates"]
    running = [t for t in study.get_trials() if t.state == TrialState.RUNNING]
    assert [t.number for t in running] == [1]
    first.send_signal(signal.SIGKILL)  # mid-candidate: trial 1 is scoring its first checkpoint
    first.wait()
    first.stdout.close()

    second = _worker(tmp_path)
    output = second.communicate(timeout=600)[0]
    assert second.returncode == 0, output
    # the second worker trained trial 1's retry and trial 2: 2 trials x 2 checkpoints scored
    assert "scored 4 chosen {'learning_rate': 0.003, 'seed': 0}" in output
    study = _study(tmp_path)
    states = {t.number: t.state for t in study.get_trials()}
    assert states[1] == TrialState.FAIL  # the killed one
    retry = [t for t in study.get_trials() if t.system_attrs.get("failed_trial") == 1]
    assert len(retry) == 1 and retry[0].state == TrialState.COMPLETE
    assert retry[0].params == study.trials[1].params
    complete = [t for t in study.get_trials() if t.state == TrialState.COMPLETE]
    assert sorted(t.params["learning_rate"] for t in complete) == [1e-4, 1e-3, 3e-3]  # each point once
    # the finished trial was neither lost nor trained again
    assert next(t for t in complete if t.number == 0).user_attrs["offrl_candidates"] == before


def test_an_interrupted_search_continues_when_run_again(tmp_path):
    first = _worker(tmp_path, INTERRUPT="1")
    output = first.communicate(timeout=600)[0]
    assert first.returncode != 0 and "KeyboardInterrupt" in output
    study = _study(tmp_path)
    assert [t.state for t in study.get_trials()][:2] == [TrialState.COMPLETE, TrialState.FAIL]
    before = study.trials[0].user_attrs["offrl_candidates"]

    second = _worker(tmp_path)
    output = second.communicate(timeout=600)[0]
    assert second.returncode == 0, output
    assert "scored 4 " in output  # trials 1 (again) and 2, two checkpoints each; trial 0 kept
    study = _study(tmp_path)
    complete = [t for t in study.get_trials() if t.state == TrialState.COMPLETE]
    assert sorted(t.params["learning_rate"] for t in complete) == [1e-4, 1e-3, 3e-3]
    assert complete[0].number == 0 and complete[0].user_attrs["offrl_candidates"] == before

    # a third run (here, in this process: the same search) finds nothing left to do and trains nothing
    calls = []

    def slow_score(algo, dataset):  # the worker script's scorer, by name
        calls.append(1)
        return 1000.0 * algo.config.learning_rate

    slow_score.__qualname__ = "slow_score"
    third = OfflineSearch(tiny_dqn(), GRID, scorer=slow_score, n_steps=2, n_steps_per_epoch=1, test_size=0.25,
                          show_progress=False, heartbeat_interval=1, storage=f"sqlite:///{tmp_path}/study.db",
                          output_dir=str(tmp_path / "out"))
    third.fit(bandit_dataset(40))
    assert calls == [] and len(third.results_) == 6 and third.best_params_ == {"learning_rate": 3e-3, "seed": 0}


def test_a_worker_with_another_search_refuses_to_join(tmp_path):
    storage = f"sqlite:///{tmp_path}/study.db"
    OfflineSearch(tiny_dqn(), {"learning_rate": [1e-3]}, scorer=learning_rate_score, n_steps=1, test_size=0.25,
                  show_progress=False, storage=storage).fit(bandit_dataset(40))
    other = OfflineSearch(tiny_dqn(), {"learning_rate": [1e-3], "gamma": [0.9]}, scorer=learning_rate_score,
                          n_steps=1, test_size=0.25, show_progress=False, storage=storage)
    with pytest.raises(ValueError, match=r"set up for another search \(search space \(gamma\) differ\)"):
        other.fit(bandit_dataset(40))
    other = OfflineSearch(tiny_dqn(batch_size=16), {"learning_rate": [1e-3]}, scorer=learning_rate_score,
                          n_steps=1, test_size=0.25, show_progress=False, storage=storage)
    with pytest.raises(ValueError, match=r"config \(batch_size\)"):
        other.fit(bandit_dataset(40))


def test_a_continued_search_must_score_as_the_study_did(tmp_path):
    # candidates scored by another FQE (or ratio model, or estimator options) must not be mixed into one ranking
    storage = f"sqlite:///{tmp_path}/study.db"
    common = dict(n_steps=1, n_steps_per_epoch=1, test_size=0.25, show_progress=False, storage=storage,
                  fqe_steps=2, fqe_steps_per_epoch=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # two FQE updates settle nothing: the unreliable-choice warning
        OfflineSearch(tiny_dqn(), {}, scorer="fqe", **common).fit(bandit_dataset(40))
        # the same arguments continue it
        OfflineSearch(tiny_dqn(), {}, scorer="fqe", **common).fit(bandit_dataset(40))
    one_member = offrl.ope.DiscreteFQEConfig.recommended()
    for change, named in ((dict(fqe_config=one_member), r"scoring \(fqe\)"),
                          (dict(fqe_steps=3), r"scoring \(fqe\)"),
                          (dict(ope_options={"n_bootstrap": 10}), r"scoring \(ope_options\)"),
                          (dict(choose_by="estimate"), r"choose_by differ\)")):
        other = OfflineSearch(tiny_dqn(), {}, scorer="fqe", **{**common, **change})
        with pytest.raises(ValueError, match=r"set up for another search \(.*" + named):
            other.fit(bandit_dataset(40))


def test_a_sqlite_transaction_takes_the_write_lock_when_it_begins(tmp_path):
    # Optuna marks a waiting trial running by reading its state, then writing it: atomic only if the
    # read already holds the lock. Without BEGIN IMMEDIATE, a read-only transaction holds no lock and a
    # second worker could pop the same trial (two processes failed on trial_params' UNIQUE constraint).
    import sqlite3

    from offrl.model_selection.study import open_storage

    path = tmp_path / "search.db"
    storage = open_storage(f"sqlite:///{path}")
    other = sqlite3.connect(str(path), timeout=0, isolation_level=None)
    with storage.engine.connect() as connection:
        with connection.begin():
            connection.exec_driver_sql("SELECT count(*) FROM trials").fetchall()  # a read, no write
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("BEGIN IMMEDIATE")
    other.execute("BEGIN IMMEDIATE")  # free once the transaction ended
    other.execute("ROLLBACK")
    other.close()
