"""Selection metrics (SCOPE-RL's): each against a hand computation on small
fixed numbers, the rank correlations against scipy (or a plain loop when
scipy is absent), select_policies's metrics dict, missing thresholds, and
the plot of estimates against true values."""

from __future__ import annotations

import dataclasses
import math
from itertools import combinations

import numpy as np
import pytest

from offrl.ope.selection import SELECTION_METRICS, select_policies, selection_metrics

# four policies: estimates and true values
#   top-2 by estimate: policies 1 (3.0) and 2 (2.0), true values 2.0 and 1.0
ESTIMATES = [1.0, 3.0, 2.0, 0.0]
TRUTH = [2.5, 2.0, 1.0, -1.0]


def test_mse_and_relative_error_by_hand():
    m = selection_metrics(ESTIMATES, TRUTH, metrics=["mse", "relative_error"])
    # errors -1.5, 1, 1, 1
    assert m["mse"] == pytest.approx((2.25 + 1 + 1 + 1) / 4, rel=1e-12)
    assert m["relative_error"] == pytest.approx((1.5 / 2.5 + 1 / 2 + 1 / 1 + 1 / 1) / 4, rel=1e-12)


@pytest.mark.parametrize("k, regret", [(1, 0.5), (2, 0.5), (3, 0.0), (4, 0.0)])
def test_regret_at_k_by_hand(k, regret):
    # best true value 2.5 (policy 0) enters the top-k only at k = 3 (estimate 1.0)
    assert selection_metrics(ESTIMATES, TRUTH, k=k)["regret_at_k"] == pytest.approx(regret, abs=1e-12)


@pytest.mark.parametrize("threshold, type_i, type_ii", [
    (1.5, 1 / 2, 1 / 2),  # below: {2, 3}, policy 2 estimated 2.0 >= 1.5; at/above: {0, 1}, policy 0 estimated 1.0
    (2.2, 1 / 3, 1.0),  # below: {1, 2, 3}, policy 1 estimated 3.0; above: {0}, estimated 1.0
    (0.5, 0.0, 0.0),  # below: {3} estimated 0.0; above: {0, 1, 2} all estimated >= 0.5
    (3.0, 1 / 4, math.nan),  # every policy is below (policy 1 estimated 3.0 >= 3.0): no type II rate
])
def test_type_i_and_ii_error_rates_by_hand(threshold, type_i, type_ii):
    m = selection_metrics(ESTIMATES, TRUTH, threshold=threshold)
    assert m["type_i_error"] == pytest.approx(type_i, abs=1e-12)
    if math.isnan(type_ii):
        assert math.isnan(m["type_ii_error"])
    else:
        assert m["type_ii_error"] == pytest.approx(type_ii, abs=1e-12)


def test_sharpe_ratio_at_k_by_hand():
    # top-2 true values [2, 1]: best 2, population std 0.5; behaviour value 0.5
    assert selection_metrics(ESTIMATES, TRUTH, k=2, behaviour_value=0.5)["sharpe_ratio_at_k"] == pytest.approx(3.0)
    # top-3 true values [2, 1, 2.5]: best 2.5, std sqrt(((2 - 11/6)^2 + (1 - 11/6)^2 + (2.5 - 11/6)^2) / 3)
    mean = 11 / 6
    std = math.sqrt(((2 - mean) ** 2 + (1 - mean) ** 2 + (2.5 - mean) ** 2) / 3)
    assert selection_metrics(ESTIMATES, TRUTH, k=3, behaviour_value=0.0)["sharpe_ratio_at_k"] == pytest.approx(2.5 / std)
    # one policy: no spread, undefined
    assert math.isnan(selection_metrics(ESTIMATES, TRUTH, k=1, behaviour_value=0.0)["sharpe_ratio_at_k"])


def _naive_ranks(x):
    return np.array([1 + sum(other < value for other in x) for value in x], dtype=float)


def _naive_spearman(x, y):
    rx, ry = _naive_ranks(x), _naive_ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    return float((rx * ry).sum() / math.sqrt((rx**2).sum() * (ry**2).sum()))


def _naive_kendall(x, y):  # no ties
    pairs = list(combinations(range(len(x)), 2))
    s = sum(np.sign(x[i] - x[j]) * np.sign(y[i] - y[j]) for i, j in pairs)
    return float(s / len(pairs))


def test_rank_correlations_by_hand_and_against_a_reference():
    m = selection_metrics(ESTIMATES, TRUTH)
    # ranks of the estimates 2, 4, 3, 1 and of the truth 4, 3, 2, 1: sum d^2 = 6
    assert m["spearman"] == pytest.approx(1 - 6 * 6 / (4 * 15))
    # 4 concordant, 2 discordant pairs
    assert m["kendall"] == pytest.approx(2 / 6)
    rng = np.random.default_rng(0)
    for _ in range(20):
        x, y = rng.normal(size=7), rng.normal(size=7)
        got = selection_metrics(x, y, metrics=["spearman", "kendall"])
        try:
            from scipy.stats import kendalltau, spearmanr
        except ImportError:  # the naive loop is the reference then
            want = (_naive_spearman(x, y), _naive_kendall(x, y))
        else:
            want = (spearmanr(x, y)[0], kendalltau(x, y)[0])
            assert want == pytest.approx((_naive_spearman(x, y), _naive_kendall(x, y)), rel=1e-9)
        assert (got["spearman"], got["kendall"]) == pytest.approx(want, rel=1e-9)


def test_an_undefined_estimate_ranks_last_and_is_never_deemed_safe():
    m = selection_metrics([math.nan, 3.0, 2.0, 0.0], TRUTH, k=1, threshold=1.5)
    assert m["regret_at_k"] == pytest.approx(0.5)  # top-1 is policy 1
    assert m["type_ii_error"] == pytest.approx(1 / 2)  # policy 0 (true 2.5) is rejected: its estimate is NaN
    assert math.isnan(m["mse"])


def test_default_metrics_leave_out_those_without_their_argument():
    assert list(selection_metrics(ESTIMATES, TRUTH)) == [
        "mse", "relative_error", "spearman", "kendall", "regret_at_k"]
    full = selection_metrics(ESTIMATES, TRUTH, threshold=1.0, behaviour_value=0.0, k=2)
    assert list(full) == list(SELECTION_METRICS)


@pytest.mark.parametrize("kwargs, match", [
    (dict(metrics=["type_i_error"]), "threshold"),
    (dict(metrics=["type_ii_error", "mse"]), "threshold"),
    (dict(metrics=["sharpe_ratio_at_k"]), "behaviour_value"),
    (dict(metrics=["regret"]), "unknown metrics"),
    (dict(k=0), "k must be"),
    (dict(k=5), r"k must be an int in \[1, 4\]"),
    (dict(threshold=math.nan), "threshold"),
])
def test_bad_metric_arguments_name_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        selection_metrics(ESTIMATES, TRUTH, **kwargs)


def test_mismatched_or_non_finite_true_values():
    with pytest.raises(ValueError, match="one of each per policy"):
        selection_metrics([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match=r"true_values\[1\] is nan"):
        selection_metrics([1.0, 2.0], [1.0, math.nan])


# ------------------------------------------------------------------ select_policies
@dataclasses.dataclass
class Fixed:
    value: float
    lower: float
    upper: float


def _fixed_estimator(values):
    return lambda policy, dataset: Fixed(values[policy.name], values[policy.name] - 0.5, values[policy.name] + 0.5)


@dataclasses.dataclass
class Named:
    name: str

    def __call__(self, observations):  # a target policy (never called by a custom estimator)
        raise AssertionError("not used")


POLICIES = {name: Named(name) for name in "abcd"}
TRUE = dict(zip("abcd", TRUTH))


def test_select_policies_reports_the_metrics_per_estimator():
    selection = select_policies(
        POLICIES, dataset=None, estimators={"fixed": _fixed_estimator(dict(zip("abcd", ESTIMATES))),
                                            "exact": _fixed_estimator(TRUE)},
        true_values=TRUE, k=2, threshold=1.5, behaviour_value=0.5,
    )
    fixed = selection.metrics["fixed"]
    assert fixed == pytest.approx(selection_metrics(ESTIMATES, TRUTH, k=2, threshold=1.5, behaviour_value=0.5))
    assert fixed["regret_at_k"] == pytest.approx(0.5) and fixed["sharpe_ratio_at_k"] == pytest.approx(3.0)
    exact = selection.metrics["exact"]
    assert exact["mse"] == 0.0 and exact["regret_at_k"] == 0.0 and exact["spearman"] == pytest.approx(1.0)
    assert exact["type_i_error"] == 0.0 and exact["type_ii_error"] == 0.0
    # today's fields are unchanged
    assert selection.regret["fixed"] == pytest.approx(0.5) and selection.top("fixed") == "b"
    assert selection.spearman["fixed"] == pytest.approx(fixed["spearman"])
    assert (selection.k, selection.threshold, selection.behaviour_value) == (2, 1.5, 0.5)


def test_select_policies_default_k_and_missing_threshold():
    estimators = {"fixed": _fixed_estimator(dict(zip("abcd", ESTIMATES)))}
    selection = select_policies(POLICIES, None, estimators, true_values=TRUE)
    assert selection.k == 3 and "type_i_error" not in selection.metrics["fixed"]
    assert selection.metrics["fixed"]["regret_at_k"] == 0.0
    with pytest.raises(ValueError, match="threshold"):
        select_policies(POLICIES, None, estimators, true_values=TRUE, metrics=["type_i_error"])
    with pytest.raises(ValueError, match="need true_values"):
        select_policies(POLICIES, None, estimators, threshold=1.0)
    assert select_policies(POLICIES, None, estimators).metrics == {}


def test_plot_of_estimates_against_true_values(tmp_path):
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    from matplotlib.collections import PathCollection
    from matplotlib.image import imread

    from offrl.plotting import plot_selection

    selection = select_policies(POLICIES, None, {"fixed": _fixed_estimator(dict(zip("abcd", ESTIMATES)))},
                                true_values=TRUE)
    path = tmp_path / "selection.png"
    fig = plot_selection(selection, save=str(path))
    ax = fig.axes[0]
    points = np.concatenate([c.get_offsets() for c in ax.collections if isinstance(c, PathCollection)])
    assert sorted(map(tuple, points)) == sorted(zip(TRUTH, ESTIMATES))
    image = imread(str(path))
    assert image.ndim == 3 and image.shape[0] > 100
    with pytest.raises(ValueError, match="true values"):
        plot_selection(select_policies(POLICIES, None, {"fixed": _fixed_estimator(TRUE)}))
