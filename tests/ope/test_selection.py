"""Offline policy selection: ranking policies with known values, rank
correlation and regret computed by hand, the printed table, and bad input."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from offrl.algos import DiscreteBCConfig
from offrl.algos.random_policy import DiscreteRandomPolicyConfig
from offrl.ope.importance import estimate_policy_value
from offrl.ope.selection import PolicySelection, select_policies
from tabular_mdp import action_values, make_mdp, sample_dataset, table_policy, table_q

MDP = make_mdp()
GAMMA = 0.9
BEHAVIOUR = np.array([[0.5, 0.3, 0.2], [0.2, 0.4, 0.4], [0.3, 0.3, 0.4]])


def softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


TABLES = {
    "good": softmax(4.0 * MDP.rewards),  # prefers high immediate rewards
    "uniform": np.full((MDP.n_states, MDP.n_actions), 1.0 / MDP.n_actions),
    "middling": np.array([[0.2, 0.3, 0.5], [0.6, 0.2, 0.2], [0.1, 0.7, 0.2]]),
    "bad": softmax(-4.0 * MDP.rewards),
}
EXACT = {name: action_values(MDP, table, GAMMA) for name, table in TABLES.items()}
TRUE_VALUES = {name: value for name, (_, value) in EXACT.items()}


@pytest.fixture(autouse=True, scope="module")
def one_blas_thread():
    with threadpool_limits(1, user_api="blas"):
        yield


@pytest.fixture(scope="module")
def logged():
    return sample_dataset(MDP, BEHAVIOUR, 2000, seed=31)


@pytest.fixture(scope="module")
def policies(logged):
    uniform = DiscreteRandomPolicyConfig().create()  # an offrl algorithm with the uniform table's probabilities
    uniform.build_with_dataset(logged.dataset)
    out = {name: table_policy(MDP, table) for name, table in TABLES.items()}
    out["uniform"] = uniform
    return out


def test_true_values_are_well_separated():
    values = sorted(TRUE_VALUES.values())
    assert min(np.diff(values)) > 0.15  # several standard errors of the estimates below


def test_estimators_rank_policies_with_known_values(logged, policies):
    selection = select_policies(
        policies, logged.dataset, ("wis", "wpdis", "dr"),
        q_models={name: table_q(MDP, q) for name, (q, _) in EXACT.items()},
        true_values=TRUE_VALUES, gamma=GAMMA, behaviour_probabilities=logged.behaviour_probabilities,
        n_bootstrap=200,
    )
    best_first = sorted(TRUE_VALUES, key=TRUE_VALUES.get, reverse=True)
    for estimator in ("WIS", "WPDIS", "DR"):
        assert sorted(selection.policies, key=selection.ranks[estimator].get) == best_first
        assert selection.spearman[estimator] == pytest.approx(1.0)
        assert selection.kendall[estimator] == pytest.approx(1.0)
        assert selection.regret[estimator] == 0.0
        assert selection.top(estimator) == "good"
    assert selection.top() == "good"
    # each entry is the estimator run on its own with the same inputs
    alone = estimate_policy_value(policies["middling"], logged.dataset, "wpdis", gamma=GAMMA,
                                  behaviour_probabilities=logged.behaviour_probabilities, n_bootstrap=200)
    got = selection.results["WPDIS"]["middling"]
    assert (got.value, got.lower, got.upper) == (alone.value, alone.lower, alone.upper)
    assert abs(selection.results["DR"]["uniform"].value - TRUE_VALUES["uniform"]) < 0.06


def test_behaviour_model_is_fitted_once_and_shared(logged, policies):
    selection = select_policies({k: policies[k] for k in ("good", "bad")}, logged.dataset, ["wis"], gamma=GAMMA,
                                n_bootstrap=50)
    labels = {selection.results["WIS"][name].behaviour for name in ("good", "bad")}
    assert len(labels) == 1 and labels.pop().startswith("estimated: ")
    assert selection.ranks["WIS"] == {"good": 1, "bad": 2}


@dataclasses.dataclass
class Fixed:
    value: float
    lower: float = math.nan
    upper: float = math.nan


def fixed(estimates):
    """A custom estimator returning given values: policies are their names."""
    return lambda policy, dataset: Fixed(estimates[policy])


def test_rank_correlation_and_regret_by_hand():
    names = {"a": "a", "b": "b", "c": "c", "d": "d"}
    truth = {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0}
    selection = select_policies(
        names, None,
        {"reversed": fixed({"a": 4.0, "b": 3.0, "c": 2.0, "d": 1.0}),
         "one_swap": fixed({"a": 1.0, "b": 2.0, "c": 4.0, "d": 3.0}),
         "ties": fixed({"a": 5.0, "b": 5.0, "c": math.nan, "d": 0.0})},
        true_values=truth,
    )
    assert selection.ranks["reversed"] == {"a": 1, "b": 2, "c": 3, "d": 4}
    assert selection.spearman["reversed"] == pytest.approx(-1.0)
    assert selection.kendall["reversed"] == pytest.approx(-1.0)
    assert selection.regret["reversed"] == 4.0 - 1.0
    # one adjacent swap among 4: Spearman 1 - 6 * 2 / (4 * 15) = 0.8; Kendall (5 - 1) / 6
    assert selection.spearman["one_swap"] == pytest.approx(0.8)
    assert selection.kendall["one_swap"] == pytest.approx(4 / 6)
    assert selection.top("one_swap") == "c" and selection.regret["one_swap"] == 1.0
    # ties share the better rank (the first listed is the top pick); an undefined estimate ranks last
    assert selection.ranks["ties"] == {"a": 1, "b": 1, "d": 3, "c": 4}
    assert selection.top("ties") == "a" and selection.regret["ties"] == 3.0
    # correlations use the defined estimates only: (a, b, d) tied, tied, last against truth (1, 2, 4)
    assert selection.spearman["ties"] == pytest.approx(-0.8660254037844387)


def test_table_and_rows(logged, policies):
    selection = select_policies(
        {k: policies[k] for k in ("bad", "good")}, logged.dataset, ("wis",), true_values=TRUE_VALUES,
        gamma=GAMMA, behaviour_probabilities=logged.behaviour_probabilities, n_bootstrap=50, confidence=0.9,
    )
    rows = selection.to_rows()
    assert [(r["policy"], r["rank"]) for r in rows] == [("good", 1), ("bad", 2)]
    assert rows[0]["true_value"] == TRUE_VALUES["good"] and rows[0]["reliable"] is True
    assert rows[0]["lower"] < rows[0]["value"] < rows[0]["upper"]
    text = str(selection)
    lines = text.splitlines()
    assert lines[0].split() == ["estimator", "rank", "policy", "value", "interval", "(bootstrap)", "reliable", "true",
                                "value"]
    assert lines[1].split()[:3] == ["WIS", "1", "good"] and lines[2].split()[:3] == ["WIS", "2", "bad"]
    assert lines[-2] == (
        f"WIS: top pick 'good', regret 0, Spearman {selection.spearman['WIS']:.3f}, "
        f"Kendall {selection.kendall['WIS']:.3f}"
    )
    assert lines[-1].startswith("  WIS metrics (k=2): mse ")
    assert isinstance(selection, PolicySelection)
    without_truth = select_policies({"x": "x", "y": "y"}, None, {"f": fixed({"x": 1.0, "y": 2.0})})
    assert without_truth.table().splitlines()[-1] == "f: top pick 'y'"
    assert without_truth.regret == {} and without_truth.true_values is None


def test_bad_input(logged, policies):
    data = logged.dataset
    two = {k: policies[k] for k in ("good", "bad")}
    with pytest.raises(ValueError, match="non-empty mapping"):
        select_policies({}, data)
    with pytest.raises(ValueError, match=r"missing for \['good', 'bad'\]"):
        select_policies(two, data, ("dr",), gamma=GAMMA)
    with pytest.raises(ValueError, match=r"true_values has no value for \['bad'\]"):
        select_policies(two, data, true_values={"good": 1.0}, gamma=GAMMA)
    with pytest.raises(ValueError, match="unknown estimator 'fqe'"):
        select_policies(two, data, ("fqe",), gamma=GAMMA)
    with pytest.raises(ValueError, match="estimators is empty"):
        select_policies(two, data, (), gamma=GAMMA)
    with pytest.raises(ValueError, match="policy 'new' DiscreteBC is not built"):
        select_policies({"new": DiscreteBCConfig().create()}, data, gamma=GAMMA)
    with pytest.raises(TypeError, match="policy names must be strings"):
        select_policies({1: policies["good"]}, data, gamma=GAMMA)
    slow, fast = DiscreteBCConfig(gamma=0.9).create(), DiscreteBCConfig(gamma=0.5).create()
    slow.build_with_dataset(data)
    fast.build_with_dataset(data)
    with pytest.raises(ValueError, match="different gammas"):
        select_policies({"slow": slow, "fast": fast}, data)
    with pytest.raises(TypeError, match="without a value attribute"):
        select_policies({"x": "x"}, None, {"f": lambda p, d: 1.0})
