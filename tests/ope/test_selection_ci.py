"""select_policies passes ``ci`` / ``value_range`` to every named estimator
(each entry equals the estimator run alone with them), refuses a missing or
malformed range before any work, and its table prints the selection
metrics that were computed."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from offrl.ope.importance import estimate_policy_value
from offrl.ope.selection import select_policies
from tabular_mdp import action_values, make_mdp, sample_dataset, table_policy, table_q

MDP = make_mdp()
GAMMA = 0.9
BEHAVIOUR = np.array([[0.5, 0.3, 0.2], [0.2, 0.4, 0.4], [0.3, 0.3, 0.4]])
TARGETS = {
    "uniform": np.full((3, 3), 1.0 / 3.0),
    "middling": np.array([[0.2, 0.3, 0.5], [0.6, 0.2, 0.2], [0.1, 0.7, 0.2]]),
}
RANGE = (-1000.0, 1000.0)  # bounds every per-episode term of these estimators on this data


@pytest.fixture(autouse=True, scope="module")
def one_blas_thread():
    with threadpool_limits(1, user_api="blas"):
        yield


@pytest.fixture(scope="module")
def logged():
    return sample_dataset(MDP, BEHAVIOUR, 300, seed=5)


def _ratio(x, a):
    """A fixed density ratio (the marginal estimators' input), 1.5 for action 0, else 0.75."""
    return np.where(np.asarray(a).reshape(-1) == 0, 1.5, 0.75)


@pytest.mark.parametrize("ci,value_range", [("hoeffding", RANGE), ("bernstein", RANGE), ("ttest", None)])
def test_every_named_estimator_gets_ci_and_value_range(logged, ci, value_range):
    policies = {name: table_policy(MDP, table) for name, table in TARGETS.items()}
    q_models = {name: table_q(MDP, action_values(MDP, table, GAMMA)[0]) for name, table in TARGETS.items()}
    selection = select_policies(
        policies, logged.dataset, ("wis", "pdis", "dr", "mis", "mdr"), q_models=q_models,
        ratio_model={name: _ratio for name in policies}, gamma=GAMMA,
        behaviour_probabilities=logged.behaviour_probabilities, ci=ci, value_range=value_range,
    )
    assert selection.ci == ci and selection.value_range == value_range
    for estimator, label in (("wis", "WIS"), ("pdis", "PDIS"), ("dr", "DR"), ("mis", "MIS"), ("mdr", "MDR")):
        for name, policy in policies.items():
            marginal = estimator in ("mis", "mdr")
            alone = estimate_policy_value(
                policy, logged.dataset, estimator, q_models[name] if estimator in ("dr", "mdr") else None,
                gamma=GAMMA, ci=ci, value_range=value_range, ratio_model=_ratio if marginal else None,
                behaviour_probabilities=None if marginal else logged.behaviour_probabilities,
            )
            got = selection.results[label][name]
            assert got.ci == ci and got.value_range == value_range
            assert (got.value, got.lower, got.upper) == (alone.value, alone.lower, alone.upper)
            assert got.lower < got.upper
    # the default stays the percentile bootstrap
    default = select_policies(policies, logged.dataset, ("wis",), gamma=GAMMA,
                              behaviour_probabilities=logged.behaviour_probabilities, n_bootstrap=50)
    assert default.ci == "bootstrap" and default.results["WIS"]["uniform"].ci == "bootstrap"
    assert "interval (bootstrap)" in default.table().splitlines()[0]


def test_a_range_too_narrow_names_the_episode(logged):
    policies = {"uniform": table_policy(MDP, TARGETS["uniform"])}
    with pytest.raises(ValueError, match=r"value_range=\(0, 0.001\) does not bound the terms: episode \d+"):
        select_policies(policies, logged.dataset, ("pdis",), gamma=GAMMA,
                        behaviour_probabilities=logged.behaviour_probabilities, ci="hoeffding",
                        value_range=(0.0, 0.001))


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(ci="hoeffding"), ValueError, r"ci='hoeffding' needs value_range=\(low, high\)"),
    (dict(ci="bernstein"), ValueError, r"ci='bernstein' needs value_range"),
    (dict(ci="wald"), ValueError, r"ci must be one of \['bootstrap', 'hoeffding', 'bernstein', 'ttest'\]"),
    (dict(ci="hoeffding", value_range=(1.0,)), TypeError, "value_range must be a pair of numbers"),
    (dict(ci="hoeffding", value_range="ab"), TypeError, "value_range must be a pair of numbers"),
    (dict(ci="hoeffding", value_range=(2.0, 1.0)), ValueError, "value_range must be finite numbers with low < high"),
    (dict(ci="hoeffding", value_range=(0.0, math.inf)), ValueError, "value_range must be finite numbers"),
])
def test_bad_ci_arguments_fail_before_any_estimate(kwargs, error, match):
    calls = []

    def spy(policy, dataset):
        calls.append(policy)
        return Fixed(1.0)

    with pytest.raises(error, match=match):
        select_policies({"a": "a"}, None, {"spy": spy}, **kwargs)
    assert calls == []


@dataclasses.dataclass
class Fixed:
    value: float
    lower: float = math.nan
    upper: float = math.nan


def test_table_prints_the_selection_metrics():
    estimates = {"a": 1.0, "b": 2.0, "c": 4.0, "d": 3.0}
    selection = select_policies(
        {n: n for n in estimates}, None, {"one_swap": lambda policy, dataset: Fixed(estimates[policy])},
        true_values={"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0}, k=2, threshold=2.5, behaviour_value=1.0,
    )
    lines = selection.table().splitlines()
    # mse (0 + 0 + 1 + 1) / 4; relative error (1/3 + 1/4) / 4; one adjacent swap: Spearman 0.8, Kendall 4/6;
    # top 2 by estimate {c, d} hold the best policy: regret 0; nothing crosses 2.5 wrongly; Sharpe (4 - 1) / 0.5
    assert lines[-1] == (
        "  one_swap metrics (k=2): mse 0.5, relative_error 0.1458, spearman 0.8, kendall 0.6667, regret_at_k 0, "
        "type_i_error 0, type_ii_error 0, sharpe_ratio_at_k 6"
    )
    assert lines[-2].startswith("one_swap: top pick 'c', regret 1,")
    # only the metrics asked for are printed
    fewer = select_policies(
        {n: n for n in estimates}, None, {"one_swap": lambda policy, dataset: Fixed(estimates[policy])},
        true_values={"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0}, metrics=["mse", "type_i_error"], threshold=2.5,
    )
    assert fewer.table().splitlines()[-1] == "  one_swap metrics (k=3): mse 0.5, type_i_error 0"
    # without true values there are no metrics and no metrics line
    bare = select_policies({n: n for n in estimates}, None, {"f": lambda policy, dataset: Fixed(estimates[policy])})
    assert bare.table().splitlines()[-1] == "f: top pick 'c'"
