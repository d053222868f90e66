import math

import numpy as np
import pytest

TINY = ["--learners", "120", "--steps", "30", "--fqe-steps", "30", "--n-bootstrap", "50", "--true-learners", "200"]


def discounted_returns(dataset, gamma):
    return np.array([np.sum(gamma ** np.arange(len(ep.rewards)) * ep.rewards[:, 0].astype(np.float64))
                     for ep in dataset.episodes])


def test_estimates_rankings_and_the_logging_policy_check(tutorial, tmp_path):
    module = tutorial("off_policy_evaluation")
    result = module.main(TINY + ["--out", str(tmp_path)])
    dataset = result["dataset"]

    # the log records the logging policy's probability of each action; every episode ends terminal
    arrays = dataset.to_arrays()
    probabilities = module.logging_policy(arrays["observations"])
    np.testing.assert_array_equal(dataset.behaviour_probabilities,
                                  probabilities[np.arange(len(probabilities)), arrays["actions"][:, 0]])
    assert dataset.size() == 120 and all(ep.terminated for ep in dataset.episodes)

    # evaluated on its own log, the logging policy has all weights 1: WIS is the mean discounted return
    itself = result["itself"]
    assert itself.effective_sample_size == pytest.approx(120.0) and itself.reliable
    np.testing.assert_allclose(itself.episode_weights, 1.0)
    expected = discounted_returns(dataset, module.GAMMA).mean()
    assert itself.value == pytest.approx(expected, rel=1e-9)
    assert result["logged_value"] == pytest.approx(expected, rel=1e-6)

    selection = result["selection"]
    names = list(result["policies"])
    assert selection.estimators == ("FQE", "WIS", "WPDIS", "DR") and list(selection.policies) == names
    for estimator in selection.estimators:
        for name in names:
            r = selection.results[estimator][name]
            assert math.isfinite(r.value) and r.lower <= r.value <= r.upper, (estimator, name)
        assert sorted(selection.ranks[estimator].values())[0] == 1
        assert selection.regret[estimator] >= 0.0
    for estimator in ("WIS", "WPDIS", "DR"):
        for name in names:
            r = selection.results[estimator][name]
            assert 0.0 < r.effective_sample_size <= 120.0 and r.behaviour == "logged"
    # FQE's value is the mean of its Q at the episodes' first states, under the greedy policy
    for name, fqe in result["fqes"].items():
        first = np.stack([ep.observations[0] for ep in dataset.episodes])
        values = fqe.predict_value(first, result["policies"][name].predict(first))
        assert selection.results["FQE"][name].value == pytest.approx(values.mean(), rel=1e-5)
    assert selection.true_values == result["true_values"]
    assert set(result["coverage"]) == set(selection.estimators)


@pytest.mark.slow
def test_full_size_reading(tutorial, tmp_path):
    result = tutorial("off_policy_evaluation").main(["--out", str(tmp_path)])
    selection, truth = result["selection"], result["true_values"]
    # where IS claims reliability, its interval holds the true value
    reliable = [(e, n) for e in ("WIS", "WPDIS") for n in truth if selection.results[e][n].reliable]
    assert reliable
    for estimator, name in reliable:
        r = selection.results[estimator][name]
        assert r.lower <= truth[name] <= r.upper, (estimator, name, r, truth[name])
    # the candidates that depart from the log have a small effective sample size
    best = max(truth, key=truth.get)
    assert selection.results["WIS"][best].effective_sample_size < 20
    # FQE ranks the candidates well here
    assert selection.spearman["FQE"] > 0.5
