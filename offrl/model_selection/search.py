"""``OfflineSearch``: choose a config, a seed and a checkpoint without the environment.

The offline counterpart of scikit-learn's ``GridSearchCV``. A *trial* trains
one config (a grid point, or values drawn by an Optuna sampler) with one
seed on the training episodes; every epoch's checkpoint of every trial is a
*candidate*, scored on held-out episodes by an off-policy scorer
(:mod:`offrl.model_selection.scorers`). The search chooses the candidate
with the highest score, or the highest lower confidence bound
(``choose_by="lower"``), among the *reliable* candidates (FQE settled,
importance weights with enough effective samples); only when no candidate
is reliable does it choose an unreliable one, and it warns. With an
environment each candidate's true return is measured too and recorded in
``results_``, never used to choose: it tells how well the choice went.

Training is reproducible: each trial seeds offrl (:func:`offrl.seed`) with
its seed before creating the algorithm, and all scoring runs under
:func:`offrl._random.seeded`, which restores the random state after, so a
trial's checkpoints are those a plain ``fit`` with the same seed writes (on
the CPU). That is how the chosen checkpoint is rebuilt when its model file
is not at hand (another machine's worker trained it): trained again.

Parallel and distributed runs use Optuna's storage, not a scheduler of
offrl's: see :mod:`offrl.model_selection.study`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import math
import multiprocessing
import os
import pickle
import shutil
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np

from .._random import seed as seed_everything
from .._random import seeded
from ..algos import LearnableConfig, NonFiniteLossError
from ..logging import NoopAdapterFactory, create_logger_adapter
from .scorers import Score, Scorers, has_interval, resolve_scorers
from .space import SEED, SearchSpace
from .study import (UNUSED, no_experimental_notes, budget, enqueue_missing, fail_stale, open_storage, open_study,
                    unused_reason)

__all__ = ["OfflineSearch", "CANDIDATES", "MODEL"]

#: trial user attribute: the candidate rows (one per scored checkpoint)
CANDIDATES = "offrl_candidates"
#: trial user attribute: the trial's saved checkpoint (its best candidate so far)
MODEL = "offrl_model"
#: the seed scoring and environment rollouts run under (training's streams untouched)
SCORING_SEED = 0
CHOOSE_BY = ("estimate", "lower")


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def _seeds(seeds: Any) -> Tuple[int, ...]:
    if isinstance(seeds, (int, np.integer)) and not isinstance(seeds, bool):
        return tuple(range(_positive_int(seeds, "seeds")))
    if isinstance(seeds, (list, tuple, range)) and len(seeds) > 0:
        out = []
        for s in seeds:
            if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or not 0 <= s < 2**63:
                raise ValueError(f"seeds must be ints in [0, 2**63), got {s!r}")
            out.append(int(s))
        if len(set(out)) != len(out):
            raise ValueError(f"seeds must be distinct, got {out}")
        return tuple(out)
    raise ValueError(f"seeds must be a positive int (seeds 0..n-1) or a non-empty list of ints, got {seeds!r}")


def _ope_option_names() -> Tuple[str, ...]:
    from ..ope import estimate_policy_value

    taken = {"target", "dataset", "estimator", "q_model", "behaviour_policy", "ratio_model", "behaviour_probabilities"}
    return tuple(n for n in inspect.signature(estimate_policy_value).parameters if n not in taken)


def _n_test_episodes(n: int, test_size: Union[int, float]) -> int:
    return int(test_size) if isinstance(test_size, (int, np.integer)) else int(math.ceil(test_size * n))


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


# ------------------------------------------------------------- logging
class _CandidateAdapter:
    """The user's adapter for one trial, with the trial's search parameters
    added to what it records."""

    def __init__(self, inner: Any, extra: Dict[str, Any]) -> None:
        self._inner = inner
        self._extra = extra

    def write_params(self, params: Dict[str, Any]) -> None:
        self._inner.write_params({**params, "search": self._extra})

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _CandidateAdapterFactory:
    def __init__(self, inner: Any, name: str, extra: Dict[str, Any]) -> None:
        self._inner, self._name, self._extra = inner, name, extra

    def create(self, algo: Any, experiment_name: str, n_steps_per_epoch: int) -> Any:
        return _CandidateAdapter(create_logger_adapter(self._inner, algo, self._name, n_steps_per_epoch), self._extra)


# --------------------------------------------------------------- the job
@dataclasses.dataclass
class _Job:
    """Everything a worker process needs (picklable)."""

    space: SearchSpace
    scorer_specs: List[Tuple[str, Any]]
    select: str
    choose_by: str
    n_steps: int
    n_steps_per_epoch: int
    n_trials: int
    grid: Optional[List[Dict[str, Any]]]
    study_name: str
    storage: Any  # a URL, or a storage object (one process only)
    heartbeat_interval: int
    sampler: Any
    pruner: Any
    setup: Dict[str, Any]
    train: Any
    test: Any
    env: Any
    n_eval_episodes: int
    model_dir: str
    device: Any
    logger_adapter: Any
    fqe_config: Any
    fqe_steps: int
    fqe_steps_per_epoch: int
    ratio_config: Any
    ope_options: Dict[str, Any]
    threads: int = 1


def selection_key(row: Mapping[str, Any], select: str, choose_by: str) -> Tuple[bool, float]:
    """How candidates are ordered: reliable ones first, then by the
    selecting score's estimate (or lower bound); NaN lowest."""
    score = row["scores"][select]
    value = score["value"] if choose_by == "estimate" else score["lower"]
    return bool(score["reliable"]), float(value) if _finite(value) else -math.inf


class _Worker:
    """Runs trials of the job's study until its budget is spent."""

    def __init__(self, job: _Job, storage: Any, study: Any) -> None:
        self.job = job
        self.storage = storage
        self.study = study
        self.scorers = Scorers(job.scorer_specs, job.test, fqe_config=job.fqe_config, fqe_steps=job.fqe_steps,
                               fqe_steps_per_epoch=job.fqe_steps_per_epoch, ratio_config=job.ratio_config,
                               ope_options=job.ope_options, device=job.device)
        self.env = _make_env(job.env)

    def run(self, progress: Optional[Callable[[int], None]] = None) -> None:
        job = self.job
        while True:
            fail_stale(self.study, self.storage)
            if job.grid is not None:
                enqueue_missing(self.study, job.grid)
            finished, running, waiting = budget(self.study)
            if progress is not None:
                progress(finished)
            has_work = waiting > 0 if job.grid is not None else (waiting > 0 or finished + running < job.n_trials)
            if has_work:
                with no_experimental_notes():  # Optuna's own heartbeat calls
                    self.study.optimize(self.objective, n_trials=1, catch=(), gc_after_trial=False)
            elif running > 0:  # another worker's last trials: wait for them to finish, or to go stale and be retried
                time.sleep(min(2.0, float(job.heartbeat_interval)))
            else:
                return

    # ------------------------------------------------------------ a trial
    def objective(self, trial: Any) -> float:
        import optuna

        job = self.job
        labels = job.space.suggest(trial)
        reason = unused_reason(self.study, trial.number, labels, job.grid is not None, job.n_trials)
        if reason is not None:
            trial.set_user_attr(UNUSED, reason)
            return float("nan")  # closed as failed: never counted, never a candidate
        params = job.space.decode(labels)
        config = job.space.config_for(params)
        trial.set_user_attr(CANDIDATES, [])
        rows: List[Dict[str, Any]] = []
        try:
            rows = self._train(trial, config, params)
        except NonFiniteLossError as error:
            trial.set_user_attr("offrl_diverged", str(error).splitlines()[0])
            raise optuna.TrialPruned(f"training diverged: {error}") from None
        values = [selection_key(r, job.select, job.choose_by)[1] for r in rows]
        best = max(values) if values else -math.inf
        return best if math.isfinite(best) else -math.inf

    def _train(self, trial: Any, config: Any, params: Dict[str, Any]) -> List[Dict[str, Any]]:
        import optuna

        job = self.job
        seed_everything(params[SEED])
        algo = config.create(device=job.device)
        timing = {"scoring": 0.0, "body": 0.0}
        cache: Dict[str, Any] = {}

        def score(algo: Any, _dataset: Any) -> float:  # the first evaluator: scores everything once per epoch
            start = time.perf_counter()
            with seeded(SCORING_SEED):
                scores = self.scorers.score(algo)
                scored = time.perf_counter()
                true = self._true_returns(algo) if self.env is not None else None
            end = time.perf_counter()
            timing["scoring"] += end - start
            cache.update(scores=scores, true=true, seconds=scored - start, truth_seconds=end - scored)
            return scores[job.select].value

        evaluators: Dict[str, Any] = {f"score_{job.select}": score}
        for label, _ in job.scorer_specs:
            if label != job.select:
                evaluators[f"score_{label}"] = lambda algo, dataset, label=label: cache["scores"][label].value
        if self.env is not None:
            evaluators["true_return"] = lambda algo, dataset: cache["true"][0]
        adapter = NoopAdapterFactory()
        if job.logger_adapter is not None:
            extra = {"study": job.study_name, "trial": trial.number, **{k: _shown(v) for k, v in params.items()}}
            adapter = _CandidateAdapterFactory(job.logger_adapter, f"{job.study_name}_trial{trial.number}", extra)
        rows: List[Dict[str, Any]] = []
        best_key: Optional[Tuple[bool, float]] = None
        start = time.perf_counter()
        generator = algo.fitter(job.train, job.n_steps, job.n_steps_per_epoch, experiment_name=job.study_name,
                                with_timestamp=False, logger_adapter=adapter, show_progress=False,
                                evaluators=evaluators)
        pruned = False
        try:
            for epoch, metrics in generator:
                body = time.perf_counter()
                row = self._row(epoch, metrics, cache, body - start - timing["scoring"] - timing["body"])
                rows.append(row)
                trial.set_user_attr(CANDIDATES, rows)
                key = selection_key(row, job.select, job.choose_by)
                if best_key is None or key > best_key:
                    best_key = key
                    name = f"trial_{trial.number}.d3"
                    algo.save(os.path.join(job.model_dir, name))
                    trial.set_user_attr(MODEL, {"epoch": epoch, "file": name})
                if math.isfinite(key[1]):
                    trial.report(key[1], epoch)
                timing["body"] += time.perf_counter() - body
                if trial.should_prune():
                    pruned = True
                    break
        finally:
            generator.close()
        if pruned:
            raise optuna.TrialPruned(f"pruned after epoch {rows[-1]['epoch']}")
        return rows

    def _row(self, epoch: int, metrics: Dict[str, float], cache: Dict[str, Any], train_time: float) -> Dict[str, Any]:
        job = self.job
        scores: Dict[str, Score] = cache["scores"]
        row: Dict[str, Any] = {
            "epoch": int(epoch),
            "step": int(min(epoch * job.n_steps_per_epoch, job.n_steps)),
            "train_time": float(train_time),
            "score_time": float(cache["seconds"]),
            "scores": {label: {"value": float(s.value), "lower": float(s.lower), "upper": float(s.upper),
                               "reliable": bool(s.reliable), **s.details} for label, s in scores.items()},
            "metrics": {k: float(v) for k, v in metrics.items()
                        if not k.startswith(("time_", "score_")) and k != "true_return"},
        }
        if cache.get("true") is not None:
            row["true_return"], row["true_value"] = cache["true"]
            row["truth_time"] = float(cache["truth_seconds"])
        return row

    def _true_returns(self, algo: Any) -> Tuple[float, float]:
        """Mean undiscounted return and mean discounted return (the
        algorithm's gamma: the figure the estimates estimate) of the greedy
        policy over the same seeded episodes."""
        from ..metrics import rollout_returns

        n = self.job.n_eval_episodes
        undiscounted = rollout_returns(algo, self.env, n_trials=n, seed=SCORING_SEED)
        discounted = rollout_returns(algo, self.env, n_trials=n, seed=SCORING_SEED, gamma=float(algo.gamma))
        return float(np.mean(undiscounted)), float(np.mean(discounted))


def _shown(value: Any) -> Any:
    """A parameter as tracker params and tables show it."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "to_dict"):
        return value.to_dict()
    return repr(value)


def _make_env(env: Any) -> Any:
    if env is None or not isinstance(env, str):
        return env
    import gymnasium

    return gymnasium.make(env)


def _worker_main(job_bytes: bytes) -> None:
    """A worker process of ``n_jobs``: opens the study and runs trials."""
    import optuna
    import torch

    job: _Job = pickle.loads(job_bytes)
    torch.set_num_threads(job.threads)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if job.sampler is not None:
        job.sampler.reseed_rng()  # each process draws its own candidates
    storage = open_storage(job.storage, job.heartbeat_interval)
    study = open_study(storage, job.study_name, job.setup, job.sampler, job.pruner, job.grid)
    _Worker(job, storage, study).run()


@contextlib.contextmanager
def _quiet_optuna() -> Any:
    import optuna

    before = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(before)


# ------------------------------------------------------------ the search
class OfflineSearch:
    """Offline search over configs, seeds and checkpoints, scored by off-policy evaluation.

    Args:
        config: the algorithm config (an :class:`offrl.algos.LearnableConfig`);
            fields the space does not name keep its values.
        search_space: field name -> list of values or Optuna distribution
            (:mod:`offrl.model_selection.space`); ``{}`` searches seeds and
            checkpoints only.
        scorer: a name from :data:`~offrl.model_selection.SCORERS`, a
            callable ``(algo, test_dataset) -> score``, or a list or dict
            (label -> scorer) of them; every one is computed for every
            candidate.
        seeds: training seeds: an int ``n`` (seeds ``0 .. n-1``) or a list.
        n_steps: gradient steps per trial.
        n_steps_per_epoch: steps between checkpoints (each one a candidate).
        n_trials: trials to run (a trial: one config with one seed). For a
            grid, default every point (a smaller number runs that many points
            in a seeded random order); for distributions, required. It may
            grow between runs of the same search to extend a study.
        choose_by: ``"estimate"`` or ``"lower"`` (the lower confidence bound,
            pessimistic); None (default): ``"lower"`` when the selecting scorer
            is a named one with an interval (FQE, the IS and marginal families).
        select: the label of the scorer that chooses (default: the first).
        test_size: held-out episodes, a fraction or a count (as
            :func:`offrl.dataset.train_test_split`).
        random_state: seed of the split and of the default samplers.
        storage: None (in memory; an SQLite file in ``output_dir`` when
            ``n_jobs > 1``), an Optuna database URL (``"sqlite:///search.db"``,
            ``"postgresql://..."``) shared by every worker, or an Optuna storage.
        study_name: the study in the storage (rerunning the same search with
            the same storage and name continues it).
        n_jobs: worker processes on this machine (each runs whole trials).
        refit: retrain the chosen config and seed on all episodes, for the
            chosen checkpoint's number of steps, as ``best_estimator_``.
        sampler: an Optuna sampler for distributions (default
            ``TPESampler(seed=random_state)``).
        pruner: an Optuna pruner (default none), fed each checkpoint's
            selecting score (``trial.report(score, epoch)``).
        n_eval_episodes: environment episodes per candidate when ``fit``
            gets an environment.
        fqe_config, fqe_steps, fqe_steps_per_epoch: the FQE of the
            ``"fqe"``, ``"dr"``, ``"wdr"`` and ``"mdr"`` scorers (default
            ``recommended()``, with early stopping; see
            :func:`~offrl.model_selection.scorers.default_fqe_config`).
        ratio_config: the DualDICE ratio of ``"mis"`` / ``"wmis"`` / ``"mdr"``
            (a :class:`offrl.ope.DensityRatioConfig`; default its defaults).
        ope_options: keyword arguments of
            :func:`offrl.ope.estimate_policy_value` (``clip``, ``ci``,
            ``value_range``, ``confidence``, ``n_bootstrap``,
            ``min_effective_sample_size``, ...) for every estimator; FQE uses
            ``n_bootstrap`` and ``seed``.
        logger_adapter: a logger adapter factory (``WanDBAdapterFactory``,
            ``MLflowAdapterFactory``, ``FileAdapterFactory``,
            ``CombineAdapterFactory``...): each trial is logged as a run
            named ``<study_name>_trial<N>``, with its scores per epoch.
        output_dir: where each trial's best checkpoint is saved (default: a
            temporary directory removed after ``fit``).
        device: where algorithms train (``"cpu"``, ``"cuda:0"``).
        heartbeat_interval: seconds between a running trial's heartbeats in
            a database storage; a trial silent for three intervals (its worker
            was killed) is failed and retried.
        show_progress: a progress bar of finished trials.

    Attributes (after :meth:`fit`):
        results_: a pandas DataFrame, one row per candidate (see :meth:`fit`).
        best_index_: the row of the chosen candidate.
        best_params_: its searched fields and ``seed``.
        best_config_: the config trained for it.
        best_epoch_, best_step_: its checkpoint.
        best_score_: its selecting score (estimate or lower bound).
        best_estimator_: the chosen checkpoint's algorithm (retrained on all
            episodes with ``refit=True``).
        study_: the Optuna study.
        train_dataset_, test_dataset_: the split.
        refit_time_: seconds of the refit (0 without).
    """

    def __init__(self, config: Any, search_space: Mapping[str, Any], scorer: Any = "fqe", *, seeds: Any = 1,
                 n_steps: int = 10000, n_steps_per_epoch: int = 1000, n_trials: Optional[int] = None,
                 choose_by: Optional[str] = None, select: Optional[str] = None, test_size: Union[int, float] = 0.2,
                 random_state: int = 0, storage: Any = None, study_name: str = "offrl_search", n_jobs: int = 1,
                 refit: bool = False, sampler: Any = None, pruner: Any = None, n_eval_episodes: int = 10,
                 fqe_config: Any = None, fqe_steps: int = 10000, fqe_steps_per_epoch: int = 1000,
                 ratio_config: Any = None, ope_options: Optional[Mapping[str, Any]] = None,
                 logger_adapter: Any = None, output_dir: Optional[str] = None, device: Any = "cpu",
                 heartbeat_interval: int = 10, show_progress: bool = True) -> None:
        if not isinstance(config, LearnableConfig):
            raise TypeError(f"config must be an algorithm config (e.g. DiscreteCQLConfig()), got {type(config).__name__}")
        if not config.algorithm_class().is_trainable:
            raise ValueError(f"{type(config).__name__} only acts and cannot be trained: nothing to search")
        self.config = config
        self.seeds = _seeds(seeds)
        self.space = SearchSpace(config, search_space, self.seeds)
        self.search_space = search_space
        self.scorers = resolve_scorers(scorer)
        labels = [label for label, _ in self.scorers]
        self.select = labels[0] if select is None else select
        if self.select not in labels:
            raise ValueError(f"select must be one of the scorer labels {labels}, got {select!r}")
        selecting = dict(self.scorers)[self.select]
        if choose_by is None:
            choose_by = "lower" if has_interval(selecting) else "estimate"
        if choose_by not in CHOOSE_BY:
            raise ValueError(f"choose_by must be one of {list(CHOOSE_BY)} or None, got {choose_by!r}")
        if choose_by == "lower" and has_interval(selecting) is False:
            raise ValueError(f"choose_by='lower' needs a scorer with a confidence interval, and {self.select!r} has "
                             "none: use 'fqe' or an importance-sampling estimator, or choose_by='estimate'")
        self.choose_by = choose_by
        self.n_steps = _positive_int(n_steps, "n_steps")
        self.n_steps_per_epoch = min(_positive_int(n_steps_per_epoch, "n_steps_per_epoch"), self.n_steps)
        if n_trials is None:
            if not self.space.is_grid:
                raise ValueError("n_trials is required when the search space has distributions (how many to draw)")
            n_trials = len(self.space)
        self.n_trials = _positive_int(n_trials, "n_trials")
        if self.space.is_grid and self.n_trials > len(self.space):
            raise ValueError(f"n_trials={self.n_trials}, but the grid has {len(self.space)} trials "
                             f"({len(self.space) // len(self.seeds)} configs x {len(self.seeds)} seeds)")
        if isinstance(test_size, bool) or not isinstance(test_size, (int, float, np.integer, np.floating)) or \
                (isinstance(test_size, (float, np.floating)) and not 0.0 < test_size < 1.0) or \
                (isinstance(test_size, (int, np.integer)) and test_size < 1):
            raise ValueError(f"test_size must be a fraction in (0, 1) or a number of episodes >= 1, got {test_size!r}")
        self.test_size = test_size.item() if isinstance(test_size, np.generic) else test_size
        if isinstance(random_state, bool) or not isinstance(random_state, (int, np.integer)):
            raise ValueError(f"random_state must be an int, got {random_state!r}")
        self.random_state = int(random_state)
        if not isinstance(study_name, str) or not study_name:
            raise ValueError(f"study_name must be a non-empty str, got {study_name!r}")
        self.study_name = study_name
        self.n_jobs = _positive_int(n_jobs, "n_jobs")
        self.storage = storage
        if self.n_jobs > 1 and storage is not None and not isinstance(storage, str) and \
                not isinstance(getattr(storage, "url", None), str):
            raise ValueError("n_jobs > 1 needs a storage every process can open: None (an SQLite file in output_dir) "
                             "or a database URL, not an in-memory storage")
        self.refit = bool(refit)
        self.sampler = sampler
        self.pruner = pruner
        self.n_eval_episodes = _positive_int(n_eval_episodes, "n_eval_episodes")
        self.fqe_config = fqe_config
        self.fqe_steps = _positive_int(fqe_steps, "fqe_steps")
        self.fqe_steps_per_epoch = _positive_int(fqe_steps_per_epoch, "fqe_steps_per_epoch")
        if fqe_config is not None:
            from ..ope import FQEConfig

            if not isinstance(fqe_config, FQEConfig):
                raise TypeError(f"fqe_config must be an FQEConfig or DiscreteFQEConfig, got {type(fqe_config).__name__}")
        self.ratio_config = ratio_config
        self.ope_options = dict(ope_options or {})
        allowed = _ope_option_names()
        unknown = sorted(set(self.ope_options) - set(allowed))
        if unknown:
            raise ValueError(f"ope_options has {unknown}, which estimate_policy_value does not take; "
                             f"valid: {', '.join(allowed)}")
        if logger_adapter is not None and not callable(getattr(logger_adapter, "create", None)):
            raise TypeError(f"logger_adapter must be a logger adapter factory (with create), got {type(logger_adapter).__name__}")
        self.logger_adapter = logger_adapter
        self.output_dir = output_dir
        self.device = device
        self.heartbeat_interval = _positive_int(heartbeat_interval, "heartbeat_interval")
        self.show_progress = bool(show_progress)

    # ------------------------------------------------------------ helpers
    def _setup(self, dataset: Any, test: Any) -> Dict[str, Any]:
        scoring = Scorers(self.scorers, test, fqe_config=self.fqe_config, fqe_steps=self.fqe_steps,
                          fqe_steps_per_epoch=self.fqe_steps_per_epoch, ratio_config=self.ratio_config,
                          ope_options=self.ope_options).setup()
        return {
            "algorithm": self.config.get_type(), "config": self.config.to_dict(), "space": self.space.describe(),
            "scorers": [[label, spec if isinstance(spec, str) else f"callable {getattr(spec, '__qualname__', type(spec).__name__)}"]
                        for label, spec in self.scorers],
            "select": self.select, "choose_by": self.choose_by, "n_steps": self.n_steps,
            "n_steps_per_epoch": self.n_steps_per_epoch, "test_size": self.test_size,
            "random_state": self.random_state,
            "dataset": {"episodes": int(dataset.size()), "transitions": int(dataset.transition_count)},
            "scoring": scoring,
        }

    def _grid(self) -> Optional[List[Dict[str, Any]]]:
        if not self.space.is_grid:
            return None
        points = self.space.grid()
        if self.n_trials < len(points):
            order = np.random.default_rng(self.random_state).permutation(len(points))[: self.n_trials]
            points = [points[i] for i in sorted(order)]
        return points

    def _split(self, dataset: Any) -> Tuple[Any, Any]:
        from ..dataset import ReplayBuffer, train_test_split

        if not isinstance(dataset, ReplayBuffer):
            raise TypeError(f"dataset must be a ReplayBuffer or MDPDataset, got {type(dataset).__name__}")
        n = int(dataset.size())
        held = _n_test_episodes(n, self.test_size)
        if held < 1 or n - held < 1:
            raise ValueError(f"the dataset has {n} episodes, and test_size={self.test_size!r} asks to hold out {held}: "
                             "at least one episode must be held out and one left to train on")
        return train_test_split(dataset, test_size=self.test_size, random_state=self.random_state)

    def _job(self, train: Any, test: Any, env: Any, storage: Any, model_dir: str, setup: Dict[str, Any],
             sampler: Any, pruner: Any, threads: int) -> _Job:
        return _Job(self.space, self.scorers, self.select, self.choose_by, self.n_steps, self.n_steps_per_epoch,
                    self.n_trials, self._grid(), self.study_name, storage, self.heartbeat_interval, sampler, pruner,
                    setup, train, test, env, self.n_eval_episodes, model_dir, self.device, self.logger_adapter,
                    self.fqe_config, self.fqe_steps, self.fqe_steps_per_epoch, self.ratio_config, self.ope_options,
                    threads)

    # ---------------------------------------------------------------- fit
    def fit(self, dataset: Any, env: Any = None) -> "OfflineSearch":
        """Run the search on ``dataset`` (split into training and held-out
        episodes) and choose a candidate.

        ``env`` (a gymnasium environment or its id), when given, is used
        only to measure each candidate's true return for ``results_``.

        ``results_`` has one row per candidate: ``trial``, ``state``
        (``complete`` / ``pruned``), ``seed``, ``epoch``, ``step``,
        ``param_<field>`` for each searched field, for each scorer label
        ``<label>``, ``<label>_lower``, ``<label>_upper``,
        ``<label>_reliable`` (and what the scorer adds: ``_converged``,
        ``_effective_sample_size``, ``_warnings``...), ``reliable`` and
        ``converged`` (of the selecting score; ``converged`` None without
        FQE), ``train_time`` (seconds of training up to this checkpoint,
        scoring excluded), ``score_time`` (seconds of scoring this
        checkpoint), ``train_<loss>`` (the epoch's mean losses),
        ``true_return`` and ``true_value`` (discounted) and ``truth_time``
        (seconds of the rollouts) with an environment, ``rank`` (1 =
        chosen) and ``chosen``.
        """
        from .study import import_optuna

        optuna = import_optuna()
        import pandas  # noqa: F401  (fail before training when missing)
        import torch

        train, test = self._split(dataset)
        if env is not None and self.n_jobs > 1 and not isinstance(env, str):
            try:
                pickle.dumps(env)
            except Exception as e:
                raise ValueError(f"env cannot be sent to worker processes ({e}): give its gymnasium id (a str) "
                                 "or use n_jobs=1") from None
        temporary = self.output_dir is None
        output = tempfile.mkdtemp(prefix="offrl-search-") if temporary else os.path.abspath(self.output_dir)
        model_dir = os.path.join(output, "models")
        os.makedirs(model_dir, exist_ok=True)
        try:
            storage_arg = self.storage
            if storage_arg is None and self.n_jobs > 1:
                storage_arg = "sqlite:///" + os.path.join(output, "study.db")
            storage = open_storage(storage_arg, self.heartbeat_interval)
            sampler = self.sampler
            if sampler is None:
                sampler = optuna.samplers.TPESampler(seed=self.random_state) if not self.space.is_grid \
                    else optuna.samplers.RandomSampler(seed=self.random_state)
            pruner = self.pruner if self.pruner is not None else optuna.pruners.NopPruner()
            setup = self._setup(dataset, test)
            with _quiet_optuna():
                study = open_study(storage, self.study_name, setup, sampler, pruner, self._grid())
                if self.n_jobs == 1 and any(t.state.is_finished() for t in study.get_trials(deepcopy=False)):
                    sampler.reseed_rng()  # a continued study: not the first run's draws again
                threads = max(1, torch.get_num_threads() // self.n_jobs)
                url = storage_arg if isinstance(storage_arg, str) else getattr(storage_arg, "url", storage_arg)
                job = self._job(train, test, env, url if self.n_jobs > 1 else storage, model_dir, setup, sampler,
                                pruner, threads)
                with _progress(self.n_trials, self.show_progress) as progress:
                    if self.n_jobs == 1:
                        _Worker(job, storage, study).run(progress)
                    else:
                        self._run_processes(job, study, progress)
                    progress(budget(study)[0])
            self.study_ = study
            if temporary and isinstance(storage_arg, str) and self.storage is None:  # its file goes with output_dir
                memory = optuna.storages.InMemoryStorage()
                optuna.copy_study(from_study_name=self.study_name, from_storage=storage, to_storage=memory)
                self.study_ = optuna.load_study(study_name=self.study_name, storage=memory)
            self.train_dataset_, self.test_dataset_ = train, test
            self._choose(study, model_dir, dataset, train)
        finally:
            if temporary:
                shutil.rmtree(output, ignore_errors=True)
        return self

    def _run_processes(self, job: _Job, study: Any, progress: Callable[[int], None]) -> None:
        try:
            payload = pickle.dumps(job)
        except Exception as e:
            raise ValueError(f"n_jobs={self.n_jobs} sends the search to worker processes, and part of it cannot be "
                             f"pickled ({e}): define callable scorers at module level, or use n_jobs=1") from None
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=self.n_jobs, mp_context=context) as pool:
            futures = [pool.submit(_worker_main, payload) for _ in range(self.n_jobs)]
            try:
                while not all(f.done() for f in futures):
                    progress(budget(study)[0])
                    time.sleep(1.0)
            except BaseException:
                for f in futures:
                    f.cancel()
                raise
            for f in futures:
                f.result()  # a worker's error, raised here

    # ------------------------------------------------------------ results
    def _choose(self, study: Any, model_dir: str, dataset: Any, train: Any) -> None:
        table, rows = collect(study, self.space, self.select, self.choose_by)
        if not rows:
            raise ValueError(f"the study {self.study_name!r} holds no finished candidate (every trial failed or "
                             "was pruned before its first checkpoint)")
        self.results_ = table
        best = int(np.flatnonzero(table["chosen"].to_numpy())[0])
        self.best_index_ = best
        chosen = rows[best]
        if not chosen["scores"][self.select]["reliable"]:
            warnings.warn(f"no candidate's {self.select} estimate is reliable (see results_: reliable, "
                          f"{self.select}_warnings); the chosen one is the best unreliable estimate", UserWarning,
                          stacklevel=3)
        params = dict(chosen["params"])
        self.best_params_ = params
        self.best_config_ = self.space.config_for(params)
        self.best_epoch_ = int(chosen["epoch"])
        self.best_step_ = int(chosen["step"])
        self.best_score_ = selection_key(chosen, self.select, self.choose_by)[1]
        self.refit_time_ = 0.0
        if self.refit:
            start = time.perf_counter()
            self.best_estimator_ = self._train_again(dataset, params, self.best_step_)
            self.refit_time_ = time.perf_counter() - start
            return
        trial = next(t for t in study.get_trials(deepcopy=False) if t.number == chosen["trial"])
        saved = trial.user_attrs.get(MODEL) or {}
        path = os.path.join(model_dir, str(saved.get("file", "")))
        if saved.get("epoch") == self.best_epoch_ and os.path.isfile(path):
            from ..serialization import load_learnable

            self.best_estimator_ = load_learnable(path, device=self.device)
        else:
            warnings.warn(f"the chosen checkpoint's model file is not here ({path}; another worker trained it): "
                          f"training it again (seed {params[SEED]}, {self.best_step_} steps)", UserWarning, stacklevel=3)
            self.best_estimator_ = self._train_again(train, params, self.best_step_)

    def _train_again(self, dataset: Any, params: Dict[str, Any], n_steps: int) -> Any:
        seed_everything(params[SEED])
        algo = self.space.config_for(params).create(device=self.device)
        algo.fit(dataset, n_steps=n_steps, n_steps_per_epoch=self.n_steps_per_epoch,
                 logger_adapter=NoopAdapterFactory(), show_progress=False)
        return algo

    def leaderboard(self, n: int = 10) -> str:
        """The ``n`` best candidates as a plain-text table."""
        from .report import leaderboard

        self._require_fitted()
        return leaderboard(self, n)

    def write_report(self, path: str) -> str:
        """A self-contained HTML report (learning curves, estimates with
        intervals, the chosen candidate, estimated against true); returns ``path``."""
        from .report import write_html_report

        self._require_fitted()
        return write_html_report(self, path)

    def _require_fitted(self) -> None:
        if not hasattr(self, "results_"):
            raise ValueError("the search has not run: call fit(dataset) first")

    def __repr__(self) -> str:
        return (f"OfflineSearch({type(self.config).__name__}(), {list(self.space.keys)}, scorer="
                f"{[label for label, _ in self.scorers]}, seeds={list(self.seeds)}, n_trials={self.n_trials})")


def collect(study: Any, space: SearchSpace, select: str, choose_by: str) -> Tuple[Any, List[Dict[str, Any]]]:
    """``(results table, candidate rows)`` of every finished trial of
    ``study``, ordered by trial and epoch, ranked (rank 1 is chosen)."""
    import pandas as pd
    from optuna.trial import TrialState

    from .study import trial_params

    rows: List[Dict[str, Any]] = []
    for t in sorted(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)),
                    key=lambda t: t.number):
        if UNUSED in t.user_attrs:
            continue
        params = space.decode(trial_params(t))
        for candidate in t.user_attrs.get(CANDIDATES, []):
            rows.append({**candidate, "trial": t.number, "state": t.state.name.lower(), "params": params})
    keys = [selection_key(r, select, choose_by) for r in rows]
    order = sorted(range(len(rows)), key=lambda i: (not keys[i][0], -keys[i][1], rows[i]["trial"], rows[i]["epoch"]))
    rank = np.empty(len(rows), dtype=np.int64)
    rank[order] = np.arange(1, len(rows) + 1)
    records = []
    for i, r in enumerate(rows):
        record: Dict[str, Any] = {"trial": r["trial"], "state": r["state"], "seed": r["params"][SEED],
                                  "epoch": r["epoch"], "step": r["step"]}
        for key in space.keys:
            record[f"param_{key}"] = r["params"][key]
        for label, score in r["scores"].items():
            record[label] = score["value"]
            for name, value in score.items():
                if name != "value":
                    record[f"{label}_{name}"] = value
        record["reliable"] = bool(r["scores"][select]["reliable"])
        fqe = [s for s in r["scores"].values() if "converged" in s]
        record["converged"] = bool(fqe[0]["converged"]) if fqe else None
        record["train_time"] = r["train_time"]
        record["score_time"] = r["score_time"]
        for name, value in r.get("metrics", {}).items():
            record[f"train_{name}"] = value
        if "true_return" in r:
            record["true_return"] = r["true_return"]
            record["true_value"] = r["true_value"]
            record["truth_time"] = r.get("truth_time", math.nan)
        record["rank"] = int(rank[i])
        record["chosen"] = bool(rank[i] == 1)
        records.append(record)
    return pd.DataFrame.from_records(records), rows


class _ProgressBar:
    def __init__(self, total: int, enabled: bool) -> None:
        self.bar = None
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc="trials", unit="trial")

    def __call__(self, finished: int) -> None:
        if self.bar is not None and finished > self.bar.n:
            self.bar.update(min(finished, self.bar.total) - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


@contextlib.contextmanager
def _progress(total: int, enabled: bool) -> Any:
    bar = _ProgressBar(total, enabled)
    try:
        yield bar
    finally:
        bar.close()

