"""How far an FQE estimate can be trusted: the per-epoch convergence
diagnostic of :meth:`offrl.algos.fqe.FQE.fit` (the settling rule, the
held-out Bellman residual, the share of the policy's actions off the data's
support), the estimate with its bootstrap interval, and the initial states
it is measured at; and the evaluators ``fit`` runs each epoch."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import numpy as np
import torch

from ..dataset.episode import retrieve_observation
from ..dataset.storage import ColumnStore

__all__ = [
    "CONVERGENCE_TOLERANCE",
    "CONVERGENCE_WINDOW",
    "OFF_SUPPORT_WARN",
    "RESIDUAL_GROWTH",
    "ConvergenceDiagnostic",
    "PolicyValueEstimate",
    "heldout_split",
    "initial_observations",
    "is_settled",
    "off_support_fraction",
    "projected_drift",
    "relative_change",
    "replay_convergence",
]


@dataclasses.dataclass(frozen=True)
class ConvergenceDiagnostic:
    """Whether an FQE run has settled, as measured at the end of each epoch
    of ``fit`` (see :meth:`FQE.fit`).

    Attributes:
        initial_values: ``V(s0) = Q(s0, pi(s0))`` averaged over the first
            observations of all the dataset's episodes: before training,
            then one per epoch.
        heldout_residuals: the Bellman residual of the current Q on the
            held-out episodes, one per epoch: the mean over their
            transitions of ``(Q(s, a) - r - gamma^k (1 - d) Q(s', pi(s')))^2``
            (FQE's reward units squared; in-sample when no episode was held
            out, see ``n_heldout_episodes``).
        value_change: the relative spread of ``V(s0)`` over the last
            ``window`` epochs, ``(max - min) / |mean|`` of the last
            ``window + 1`` values (of all of them while there are fewer;
            see :func:`relative_change`).
        heldout_residual: the last epoch's residual.
        n_heldout_episodes: episodes left out of training for the residual.
        window, tolerance: the settling rule (``converged``).
        steps: gradient steps when last measured.
        converged: the settling rule of :func:`is_settled`: ``2 * window``
            epochs measured; the spread of the last ``window + 1`` values
            of ``V(s0)`` (``value_change``) and the trend of the last
            ``2 * window + 1`` projected over ``window`` epochs
            (``value_drift``) both at most ``tolerance``; and the residual
            not climbing: the last one at most ``RESIDUAL_GROWTH`` times the
            smallest of the last ``window + 1`` (a climbing residual means
            the Q-function drifts, e.g. off the data at the policy's
            actions, even while ``V(s0)`` stands still). The trend test
            catches an estimate that creeps by a little under the tolerance
            per window, or pauses for a window in a long drift (measured on
            Pendulum CQL: under 3 % per 3 epochs, 12 % per 6; a 3-epoch
            spread-only rule stopped it 21 % from the truth).
        off_support: the share of checked states at which the policy's
            action lies off the data (see :func:`off_support_fraction`;
            about 0.05 for a policy that acts like the data); NaN where it
            is not measured (no held-out episodes, discrete actions, tuple
            or image observations, sequence policies). It looks at actions
            only: a policy that acts near the data but drives the system
            into states the data lacks reads low here (see the tutorial). Above ``OFF_SUPPORT_WARN`` FQE extrapolates
            at the policy's actions and a settled estimate can still be
            wrong: ``estimate_policy_value`` warns. It does not change
            ``converged``, which is about the regression settling.
        value_drift: the trend of ``V(s0)`` projected over the next
            ``window`` epochs, relative: the least-squares slope of the
            last ``2 * window + 1`` values (all of them while there are
            fewer; see :func:`projected_drift`).
    """

    initial_values: Tuple[float, ...]
    heldout_residuals: Tuple[float, ...]
    value_change: float
    heldout_residual: float
    n_heldout_episodes: int
    window: int
    tolerance: float
    steps: int
    converged: bool
    off_support: float = float("nan")
    value_drift: float = float("nan")


@dataclasses.dataclass(frozen=True)
class PolicyValueEstimate:
    """An estimate of a policy's value with a percentile-bootstrap interval.

    Attributes:
        value: mean of ``initial_values``.
        lower, upper: bounds of the ``confidence`` interval of the mean,
            from resampling episodes with replacement.
        initial_values: ``(n_episodes,)`` float64, the estimate per episode.
        confidence: the interval's coverage, e.g. 0.95.
        n_bootstrap: number of bootstrap resamples.
        converged: whether the FQE run that produced the estimate settled
            (its :class:`ConvergenceDiagnostic` says so); False when there
            is no record (an FQE loaded from a file, or built by hand).
        value_change: the diagnostic's relative change of ``V(s0)`` over
            its last epochs (NaN without a record).
        heldout_residual: the diagnostic's last Bellman residual on
            held-out episodes (NaN without a record).
        diagnostic: the whole :class:`ConvergenceDiagnostic`, or None.
        off_support: the diagnostic's share of held-out states at which
            the policy acts off the data (NaN where not measured).
    """

    value: float
    lower: float
    upper: float
    initial_values: np.ndarray = dataclasses.field(repr=False)
    confidence: float
    n_bootstrap: int
    converged: bool = False
    value_change: float = float("nan")
    heldout_residual: float = float("nan")
    diagnostic: Optional[ConvergenceDiagnostic] = dataclasses.field(default=None, repr=False)
    off_support: float = float("nan")

    def __float__(self) -> float:
        return float(self.value)


def heldout_split(n_episodes: int, fraction: float) -> Tuple[np.ndarray, np.ndarray]:
    """``(train, heldout)`` episode indices: episode ``i`` is held out when
    ``floor((i + 1) f) > floor(i f)`` for ``f = fraction``, i.e. every
    ``1/f``-th episode (0.1: episodes 9, 19, 29, ...). Deterministic and
    spread over the whole dataset; ``fraction = 0`` holds out nothing."""
    index = np.arange(int(n_episodes), dtype=np.int64)
    # the small offset keeps exact multiples (10 * 0.1) on the right side of floor
    held = np.floor((index + 1) * fraction + 1e-9) > np.floor(index * fraction + 1e-9)
    return index[~held], index[held]


def check_convergence_args(early_stopping: Any, holdout_fraction: Any, window: Any, tolerance: Any) -> None:
    if not isinstance(early_stopping, (bool, np.bool_)):
        raise ValueError(f"early_stopping must be True or False, got {early_stopping!r}")
    if (isinstance(holdout_fraction, bool) or not isinstance(holdout_fraction, (int, float, np.integer, np.floating))
            or not 0.0 <= float(holdout_fraction) < 1.0):
        raise ValueError(f"holdout_fraction must be a number in [0, 1), got {holdout_fraction!r}")
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
        raise ValueError(f"convergence_window must be a positive int (epochs), got {window!r}")
    if (isinstance(tolerance, bool) or not isinstance(tolerance, (int, float, np.integer, np.floating))
            or not 0.0 < float(tolerance) < np.inf):
        raise ValueError(f"convergence_tolerance must be a positive number, got {tolerance!r}")


def relative_change(values: Any, window: int) -> float:
    """``(max - min) / |mean|`` of the last ``window + 1`` of ``values``
    (all of them when there are fewer); NaN for fewer than 2 values or a
    zero mean."""
    values = np.asarray(values, dtype=np.float64)
    if values.shape[0] < 2:
        return float("nan")
    last = values[-(window + 1):]
    scale = abs(float(last.mean()))
    if scale == 0.0 or not np.isfinite(scale):
        return float("nan")
    return float((last.max() - last.min()) / scale)


def projected_drift(values: Any, window: int) -> float:
    """How far ``V(s0)``'s recent trend carries it over the next ``window``
    epochs, relative: ``|b| * window / |mean|`` with ``b`` the least-squares
    slope (per epoch) of the last ``2 * window + 1`` of ``values`` (of all
    of them when there are fewer) and ``mean`` their mean. NaN for fewer
    than 2 values or a zero mean.

    The trend looks back twice as far as the spread (:func:`relative_change`)
    so that a pause of one window in a long drift still shows the drift:
    on Pendulum CQL (benchmarks/README.md) ``V(s0)`` held within 3 % for 6
    epochs (9,000-14,000 updates, near -306) after drifting from -249 and
    before drifting on to -353; the slope over 11 epochs projects 10 %.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.shape[0] < 2 or window < 1:
        return float("nan")
    last = values[-(2 * window + 1):]
    scale = abs(float(last.mean()))
    if scale == 0.0 or not np.isfinite(scale):
        return float("nan")
    x = np.arange(last.shape[0], dtype=np.float64) - (last.shape[0] - 1) / 2.0
    slope = float(np.dot(x, last - last.mean()) / np.dot(x, x))
    return abs(slope) * window / scale


#: the largest ratio of the last held-out residual to the smallest of the window that counts as settled
RESIDUAL_GROWTH = 1.25

#: ``fit``'s default settling rule: epochs looked back over, largest relative spread and drift of ``V(s0)``
CONVERGENCE_WINDOW = 5
CONVERGENCE_TOLERANCE = 0.03


def is_settled(values: Any, residuals: Any, window: int = CONVERGENCE_WINDOW,
               tolerance: float = CONVERGENCE_TOLERANCE) -> bool:
    """The settling rule behind ``converged`` and ``fit(...,
    early_stopping=True)``, at the last epoch of a recorded run.

    ``values``: ``V(s0)`` before training, then one per epoch; ``residuals``:
    the held-out Bellman residual, one per epoch (None skips that check).
    Settled when at least ``2 * window`` epochs were measured, the last
    ``window + 1`` values' spread (:func:`relative_change`) and the trend
    of the last ``2 * window + 1`` projected over the next ``window``
    epochs (:func:`projected_drift`) are both at most ``tolerance``, and
    the last residual is at most ``RESIDUAL_GROWTH`` times the smallest of
    the last ``window + 1`` (it is not climbing).
    """
    values = np.asarray(values, dtype=np.float64)
    if values.shape[0] < 2 * window + 1:
        return False
    change = relative_change(values, window)
    drift = projected_drift(values, window)
    if not (np.isfinite(change) and np.isfinite(drift) and change <= tolerance and drift <= tolerance):
        return False
    if residuals is None:
        return True
    residuals = np.asarray(residuals, dtype=np.float64)
    if residuals.shape[0] != values.shape[0] - 1:
        raise ValueError(f"residuals: expected one per epoch ({values.shape[0] - 1}), got {residuals.shape[0]}")
    return bool(residuals[-1] <= RESIDUAL_GROWTH * residuals[-(window + 1):].min())


def replay_convergence(values: Any, residuals: Any = None, window: int = CONVERGENCE_WINDOW,
                       tolerance: float = CONVERGENCE_TOLERANCE) -> np.ndarray:
    """The settling rule (:func:`is_settled`) applied offline to a recorded
    curve, epoch by epoch: ``(n_epochs,)`` bool, entry ``k`` whether the
    run had settled at the end of epoch ``k + 1``. ``values``: ``V(s0)``
    before training, then one per epoch (``ConvergenceDiagnostic.
    initial_values``, or ``[V0] + fqe_initial_value`` from the logs);
    ``residuals``: one per epoch (``heldout_residuals``) or None. With
    ``early_stopping`` a run stops at the first True; a changed rule can be
    judged on recorded curves without retraining (see
    ``benchmarks/fqe_convergence.py --replay``).
    """
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    if residuals is not None:
        residuals = np.asarray(residuals, dtype=np.float64).reshape(-1)
        if residuals.shape[0] != values.shape[0] - 1:
            raise ValueError(f"residuals: expected one per epoch ({values.shape[0] - 1}, values less the one "
                             f"before training), got {residuals.shape[0]}")
    check_convergence_args(False, 0.0, window, tolerance)
    return np.array([is_settled(values[:k + 1], None if residuals is None else residuals[:k], window, tolerance)
                     for k in range(1, values.shape[0])], dtype=bool)


#: the off-support share above which ``estimate_policy_value`` warns (a policy acting like the data gives about 0.05)
OFF_SUPPORT_WARN = 0.25


def off_support_fraction(observations: np.ndarray, logged_actions: np.ndarray, policy_actions: np.ndarray,
                         reference_observations: np.ndarray, reference_actions: np.ndarray,
                         quantile: float = 0.95, chunk: int = 256) -> float:
    """The share of the query states ``observations`` at which the policy's
    action lies farther from the reference data than the logged action
    usually does.

    Every ``(s, a)`` pair is standardised with the reference pairs' mean and
    standard deviation per column (a constant column is left unscaled), and
    ``d(s, a)`` is its Euclidean distance to the nearest reference pair. The
    threshold is the ``quantile`` of ``d(s_i, a_logged_i)`` over the query
    rows (which must not be in the reference: held-out episodes), and the
    result is the share of rows with ``d(s_i, pi(s_i)) > threshold``. A
    policy whose actions are distributed like the logged ones gives about
    ``1 - quantile``; one acting where the data never acts (e.g. at torque
    limits the behaviour policy rarely used) gives much more: there FQE's
    Q-function extrapolates and its estimate can be wrong however well the
    regression has settled. Arrays are ``(n, dims)`` (actions may be
    ``(n,)``); all float.
    """
    def pairs(obs: np.ndarray, act: np.ndarray, name: str) -> np.ndarray:
        obs = np.asarray(obs, dtype=np.float64)
        act = np.asarray(act, dtype=np.float64)
        obs = obs.reshape(obs.shape[0], -1)
        act = act.reshape(act.shape[0], -1)
        if obs.shape[0] != act.shape[0]:
            raise ValueError(f"{name}: {obs.shape[0]} observations but {act.shape[0]} actions")
        return np.concatenate([obs, act], axis=1)

    if not 0.0 < float(quantile) < 1.0:
        raise ValueError(f"quantile must be in (0, 1), got {quantile!r}")
    reference = pairs(reference_observations, reference_actions, "reference")
    logged = pairs(observations, logged_actions, "logged_actions")
    acting = pairs(observations, policy_actions, "policy_actions")
    if reference.shape[0] == 0 or logged.shape[0] == 0:
        raise ValueError("off_support_fraction needs at least one query row and one reference row")
    if not reference.shape[1] == logged.shape[1] == acting.shape[1]:
        raise ValueError(f"(observation, action) widths differ: reference {reference.shape[1]}, logged "
                         f"{logged.shape[1]}, policy {acting.shape[1]}")
    mean = reference.mean(axis=0)
    scale = reference.std(axis=0)
    scale[scale == 0.0] = 1.0
    ref = torch.as_tensor((reference - mean) / scale)

    def nearest(x: np.ndarray) -> np.ndarray:
        z = torch.as_tensor((x - mean) / scale)
        return np.concatenate([torch.cdist(z[i:i + chunk], ref).min(dim=1).values.numpy()
                               for i in range(0, z.shape[0], chunk)])

    threshold = np.quantile(nearest(logged), float(quantile))
    return float(np.mean(nearest(acting) > threshold))


class ConvergenceMonitor:
    """Measures the diagnostic once per epoch through ``fit``'s evaluator
    path (the first of its evaluator entries measures, the others report),
    so the figures are logged with the epoch's other metrics."""

    names = ("fqe_initial_value", "fqe_value_change", "fqe_value_drift", "fqe_heldout_residual")

    def __init__(self, fqe: Any, initial: Any, residual: Callable[..., float], n_heldout: int, window: int,
                 tolerance: float, support: Optional[Callable[[], float]] = None) -> None:
        self.fqe = fqe
        self.support = support
        self.off_support = float("nan")
        self.initial = initial
        self.residual = residual
        self.n_heldout = n_heldout
        self.window = window
        self.tolerance = tolerance
        self.values: List[float] = []
        self.residuals: List[float] = []

    def initial_value(self) -> float:
        fqe = self.fqe
        count = int(self.initial[0].shape[0] if isinstance(self.initial, list) else self.initial.shape[0])
        values = np.concatenate([fqe.predict_state_value(slice_observations(self.initial, s, s + 4096))
                                 for s in range(0, count, 4096)])
        return float(values.mean())

    def start(self) -> None:
        """Record ``V(s0)`` before the first update (the change's baseline)."""
        self.values = [self.initial_value()]
        if self.support is not None:  # the policy and the data are fixed: measured once
            self.off_support = float(self.support())

    def measure(self) -> ConvergenceDiagnostic:
        fqe = self.fqe
        self.values.append(self.initial_value())
        self.residuals.append(float(self.residual(fqe)))
        change = relative_change(self.values, self.window)
        drift = projected_drift(self.values, self.window)
        settled = is_settled(self.values, self.residuals, self.window, self.tolerance)
        diagnostic = ConvergenceDiagnostic(
            tuple(self.values), tuple(self.residuals), change, self.residuals[-1], self.n_heldout, self.window,
            self.tolerance, int(fqe.grad_step), settled, self.off_support, drift,
        )
        fqe._convergence = diagnostic
        return diagnostic

    def evaluators(self) -> Dict[str, Callable[..., float]]:
        def initial_value(algo: Any, dataset: Any) -> float:
            return self.measure().initial_values[-1]

        def value_change(algo: Any, dataset: Any) -> float:
            return self.fqe._convergence.value_change

        def value_drift(algo: Any, dataset: Any) -> float:
            return self.fqe._convergence.value_drift

        def heldout_residual(algo: Any, dataset: Any) -> float:
            return self.fqe._convergence.heldout_residual

        return dict(zip(self.names, (initial_value, value_change, value_drift, heldout_residual)))


def bootstrap_interval(values: np.ndarray, confidence: float, n_bootstrap: int, seed: Any) -> Tuple[float, float]:
    """Percentile interval of the mean of ``values`` over ``n_bootstrap``
    resamples, drawn in chunks of at most ~1e6 indices."""
    rng = np.random.default_rng(seed)
    n = values.shape[0]
    means = np.empty(n_bootstrap, dtype=np.float64)
    chunk = max(1, 1_000_000 // n)
    for start in range(0, n_bootstrap, chunk):
        stop = min(start + chunk, n_bootstrap)
        means[start:stop] = values[rng.integers(0, n, size=(stop - start, n))].mean(axis=1)
    alpha = (1.0 - confidence) / 2.0
    lower, upper = np.quantile(means, [alpha, 1.0 - alpha])
    return float(lower), float(upper)


def ensemble_bootstrap_interval(member_values: np.ndarray, confidence: float, n_bootstrap: int,
                                seed: Any) -> Tuple[float, float]:
    """Percentile interval of the mean of ``member_values`` ``(K, n)`` (K
    ensemble members' values at n episodes' initial states) over
    ``n_bootstrap`` resamples that draw the episodes with replacement (as
    :func:`bootstrap_interval`) and, independently, the K members with
    replacement: the interval then holds the estimator's own run-to-run
    spread as well as the episodes'. One member: :func:`bootstrap_interval`."""
    k, n = member_values.shape
    if k == 1:
        return bootstrap_interval(member_values[0], confidence, n_bootstrap, seed)
    rng = np.random.default_rng(seed)
    means = np.empty(n_bootstrap, dtype=np.float64)
    chunk = max(1, 1_000_000 // (n * k))
    for start in range(0, n_bootstrap, chunk):
        stop = min(start + chunk, n_bootstrap)
        episodes = rng.integers(0, n, size=(stop - start, n))
        members = rng.integers(0, k, size=(stop - start, k))
        per_member = member_values[:, episodes].mean(axis=2).T  # (resamples, K): each member's mean
        means[start:stop] = np.take_along_axis(per_member, members, axis=1).mean(axis=1)
    alpha = (1.0 - confidence) / 2.0
    lower, upper = np.quantile(means, [alpha, 1.0 - alpha])
    return float(lower), float(upper)


def initial_observations(episodes: Any) -> Union[np.ndarray, List[np.ndarray]]:
    """The first observation of every episode, stacked: ``(n_episodes,
    *obs_shape)``, or a list of such arrays for tuple observations.

    ``episodes``: a ReplayBuffer / MDPDataset (its episodes) or a sequence
    of episodes.
    """
    store = getattr(episodes, "_store", None)
    if isinstance(store, ColumnStore) and store.is_initialized:
        # one gather per observation column instead of a view per episode
        starts = store.episode_table()[0]
        if starts.shape[0] == 0:
            raise ValueError("the dataset has no episodes")
        columns = [column[starts] for column in store.observations]
        return columns[0] if len(columns) == 1 else columns
    sequence = getattr(episodes, "episodes", episodes)
    try:
        count = len(sequence)
    except TypeError:
        raise TypeError(f"episodes must be a dataset or a sequence of episodes, got {type(episodes).__name__}") from None
    if count == 0:
        raise ValueError("episodes is empty: the policy value needs at least one episode")
    firsts = []
    for i, episode in enumerate(sequence):
        observations = getattr(episode, "observations", None)
        if observations is None:
            raise TypeError(f"episodes[{i}] is a {type(episode).__name__}, not an episode")
        if int(episode.size()) == 0:
            raise ValueError(f"episodes[{i}] has no steps")
        firsts.append(retrieve_observation(observations, 0))
    if isinstance(firsts[0], (list, tuple)):
        return [np.stack([f[k] for f in firsts]) for k in range(len(firsts[0]))]
    return np.stack(firsts)


def slice_observations(x: Any, start: int, stop: int) -> Any:
    return [a[start:stop] for a in x] if isinstance(x, list) else x[start:stop]


def not_settled_message(name: str, diagnostic: Optional[ConvergenceDiagnostic]) -> str:
    advice = (f"train longer (a larger n_steps with fit(..., early_stopping=True, n_steps_per_epoch=1000)) "
              f"or use {name}Config.recommended() (measured within 10 % in 20,000 updates on the CartPole and "
              f"Pendulum cases, but not always settled there: read the diagnostic's values before trusting the "
              f"estimate)")
    if diagnostic is None:
        return (f"{name} has no convergence record (it was not fitted in this session): the estimate may not "
                f"have settled; {advice}")
    if len(diagnostic.initial_values) < 2 * diagnostic.window + 1 or not np.isfinite(diagnostic.value_change):
        return (f"{name}'s estimate may not have settled: {len(diagnostic.initial_values) - 1} epoch(s) measured, "
                f"the check needs {2 * diagnostic.window} (use shorter epochs); {advice}")
    drift = f"; its trend projects {100 * diagnostic.value_drift:.1f}% over the next {diagnostic.window} epochs"
    residuals = diagnostic.heldout_residuals[-(diagnostic.window + 1):]
    climbing = ("; the held-out Bellman residual is climbing" if residuals
                and residuals[-1] > RESIDUAL_GROWTH * min(residuals) else "")
    return (f"{name}'s estimate has not settled: V(s0) spread by {100 * diagnostic.value_change:.1f}% over the "
            f"last {diagnostic.window} epochs{drift} (tolerance {100 * diagnostic.tolerance:.1f}% each){climbing}; "
            f"{advice}")


def merge_scorers(evaluators: Optional[Dict[str, Any]], scorers: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """``fit``'s evaluators, given under either name (``scorers`` is d3rlpy's older one)."""
    if scorers is None:
        return evaluators
    if evaluators is not None:
        raise ValueError("give evaluators or scorers (its older name), not both")
    return scorers


class FixedSplit:
    """A one-split scikit-learn-style splitter for :func:`split_episodes`."""

    def __init__(self, train: np.ndarray, test: np.ndarray) -> None:
        self.train, self.test = train, test

    def split(self, index: Any) -> Any:
        yield self.train, self.test


def split_heldout_episodes(dataset: Any, fraction: float) -> Tuple[Any, Any]:
    """``(train, heldout)`` datasets by :func:`heldout_split`'s episodes;
    ``(dataset, None)`` when nothing is held out (``fraction = 0``, too few
    episodes, no held-out transition, or not a columnar ReplayBuffer)."""
    from ..dataset.replay_buffer import ReplayBuffer
    from ..dataset.split import split_episodes

    if fraction > 0.0 and isinstance(dataset, ReplayBuffer):
        train_idx, held_idx = heldout_split(dataset.size(), fraction)
        if held_idx.shape[0] > 0 and train_idx.shape[0] > 0:
            train, heldout = next(split_episodes(dataset, FixedSplit(train_idx, held_idx)))
            if heldout.transition_count > 0:
                return train, heldout
    return dataset, None


def on_dataset(evaluator: Any, dataset: Any) -> Any:
    """``evaluator`` called with ``dataset`` whatever ``fit`` trains on."""
    if not callable(evaluator):
        return evaluator  # fit's own check names it

    def score(algo: Any, _train: Any) -> float:
        return evaluator(algo, dataset)

    return score
