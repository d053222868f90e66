"""Behaviour-policy models: the calibrated classifier recovers a known
behaviour policy, the Gaussian recovers a known linear-Gaussian one, offrl
algorithms as behaviour models, and the estimated path of the estimators."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm
from sklearn.neighbors import KNeighborsRegressor
from sklearn.tree import DecisionTreeClassifier
from threadpoolctl import threadpool_limits

from offrl.algos import DiscreteBCConfig, DQNConfig
from offrl.dataset import MDPDataset
from offrl.ope._logged import logged_data
from offrl.ope._policies import policy_probabilities
from offrl.ope.behaviour import (
    AlgoBehaviourPolicy,
    ClassifierBehaviourPolicy,
    GaussianBehaviourPolicy,
    _features,
    estimate_behaviour_policy,
)
from offrl.ope.importance import estimate_policy_value
from tabular_mdp import make_mdp, sample_dataset, table_policy, true_value

MDP = make_mdp()
BEHAVIOUR = np.array([[0.5, 0.3, 0.2], [0.2, 0.4, 0.4], [0.3, 0.3, 0.4]])
TARGET = np.array([[0.2, 0.3, 0.5], [0.6, 0.2, 0.2], [0.1, 0.7, 0.2]])


@pytest.fixture(autouse=True, scope="module")
def one_blas_thread():
    with threadpool_limits(1, user_api="blas"):
        yield


@pytest.fixture(scope="module")
def logged():
    return sample_dataset(MDP, BEHAVIOUR, 1000, seed=21)


def every_state_and_step():
    states, steps = np.meshgrid(np.arange(MDP.n_states), np.arange(MDP.horizon), indexing="ij")
    return MDP.observations(states.ravel(), steps.ravel()), states.ravel()


def test_calibrated_classifier_recovers_the_behaviour_policy(logged):
    model = estimate_behaviour_policy(logged.dataset)
    assert isinstance(model, ClassifierBehaviourPolicy)
    assert model.description == "LogisticRegression (maximum-likelihood probabilities)"
    observations, states = every_state_and_step()
    probabilities = model.action_probabilities(observations)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0)
    # about 2,600 steps, ~290 per (state, step) cell: 0.06 is ~3 standard errors of a cell frequency
    assert np.abs(probabilities - BEHAVIOUR[states]).max() < 0.06
    actions = np.arange(len(states)) % MDP.n_actions
    np.testing.assert_array_equal(model.probabilities(observations, actions), probabilities[np.arange(len(states)), actions])


def test_unseen_actions_get_the_floor_probability():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 2))
    actions = rng.integers(0, 2, size=60)  # action 2 of 3 never logged
    model = ClassifierBehaviourPolicy(min_probability=0.01).fit(x, actions, action_size=3)
    probabilities = model.action_probabilities(x)
    assert probabilities.shape == (60, 3)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0)
    # the floor, after renormalising rows that were raised to it
    np.testing.assert_allclose(probabilities[:, 2], 0.01 / (1.0 + 0.01))


def test_one_logged_action_and_too_few_for_calibration():
    x = np.arange(10, dtype=np.float64).reshape(5, 2)
    constant = ClassifierBehaviourPolicy(min_probability=0.0).fit(x, np.full(5, 1), action_size=2)
    assert "constant" in constant.description
    np.testing.assert_array_equal(constant.action_probabilities(x), np.tile([0.0, 1.0], (5, 1)))
    rare = ClassifierBehaviourPolicy(calibration="sigmoid").fit(x, np.array([0, 0, 0, 0, 1]), action_size=2)
    assert "uncalibrated" in rare.description  # one example of action 1: no fold split possible


def test_any_scikit_learn_classifier_is_calibrated(logged):
    model = estimate_behaviour_policy(logged.dataset, classifier=DecisionTreeClassifier(max_depth=3, random_state=0))
    assert model.description == "DecisionTreeClassifier calibrated (isotonic, 3 folds)"
    observations, states = every_state_and_step()
    assert np.abs(model.action_probabilities(observations) - BEHAVIOUR[states]).max() < 0.1


@pytest.mark.slow
def test_estimated_behaviour_leaves_importance_sampling_nearly_unbiased():
    """Propensities fitted on the evaluated data: over 40 datasets the mean
    error of IS and PDIS stays within 3 standard errors of 0 (post-hoc
    sigmoid calibration of the same model failed this: see the module docstring)."""
    target = table_policy(MDP, TARGET)
    truth = true_value(MDP, TARGET, 0.9)
    errors = {"is": [], "pdis": []}
    for r in range(40):
        data = sample_dataset(MDP, BEHAVIOUR, 200, seed=700 + r).dataset
        model = estimate_behaviour_policy(data)
        for kind in errors:
            result = estimate_policy_value(target, data, kind, gamma=0.9, behaviour_policy=model, n_bootstrap=1)
            errors[kind].append(result.value - truth)
    for kind, e in errors.items():
        e = np.asarray(e)
        assert abs(e.mean()) < 3 * e.std() / np.sqrt(e.size), (kind, e.mean())


def linear_gaussian(n, seed):
    """a = W s + b + noise, noise std (0.3, 0.7) per dimension."""
    rng = np.random.default_rng(seed)
    s = rng.normal(size=(n, 3))
    w = np.array([[1.0, -0.5], [0.0, 2.0], [0.5, 0.5]])
    mean = s @ w + np.array([0.2, -1.0])
    return s, mean + rng.normal(size=(n, 2)) * np.array([0.3, 0.7]), mean


def test_gaussian_recovers_a_linear_gaussian_behaviour_policy():
    s, a, mean = linear_gaussian(4000, seed=0)
    model = GaussianBehaviourPolicy().fit(s, a)
    # least squares' prediction error is sigma * sqrt(4 / 4000) ~ 0.022 for the noisier dimension
    assert np.sqrt(np.mean((model.mean(s) - mean) ** 2, axis=0)).max() < 0.05
    np.testing.assert_allclose(model.std_, [0.3, 0.7], rtol=0.05)
    expected = norm.pdf(a, loc=model.mean(s), scale=model.std_).prod(axis=1)
    np.testing.assert_allclose(model.probabilities(s, a), expected, rtol=1e-10)
    assert "3-fold residuals" in model.description


def test_gaussian_std_comes_from_held_out_residuals():
    # a 1-nearest-neighbour mean fits the training actions exactly; held-out
    # residuals still see the noise, so the density is not overconfident
    s, a, _ = linear_gaussian(600, seed=1)
    model = GaussianBehaviourPolicy(KNeighborsRegressor(n_neighbors=1)).fit(s, a)
    np.testing.assert_allclose(model.mean(s), a)
    assert (model.std_ >= 0.9 * np.array([0.3, 0.7])).all()


def test_features_flatten_and_concatenate_tuple_observations():
    a = np.arange(6, dtype=np.float32).reshape(3, 2)
    b = np.arange(12, dtype=np.uint8).reshape(3, 1, 2, 2)
    np.testing.assert_array_equal(_features([a, b]), np.concatenate([a, b.reshape(3, 4)], axis=1))
    with pytest.raises(ValueError, match=r"observations\[1\] has 2 rows, observations\[0\] has 3"):
        _features([a, b[:2]])


def test_an_offrl_algorithm_as_the_behaviour_model(logged):
    algo = DiscreteBCConfig().create()
    algo.build_with_dataset(logged.dataset)
    model = AlgoBehaviourPolicy(algo)
    data = logged_data(logged.dataset)
    expected = policy_probabilities(algo, data).logged
    np.testing.assert_allclose(model.probabilities(data.observations, data.actions), expected, rtol=1e-5)
    result = estimate_policy_value(table_policy(MDP, TARGET), logged.dataset, "wis", behaviour_policy=algo, n_bootstrap=20)
    assert result.behaviour == "model: offrl DiscreteBC"
    dqn = DQNConfig().create()
    dqn.build_with_dataset(logged.dataset)
    with pytest.raises(ValueError, match="behaviour policy DQN is deterministic"):
        AlgoBehaviourPolicy(dqn).probabilities(data.observations, data.actions)
    with pytest.raises(ValueError, match="not built"):
        AlgoBehaviourPolicy(DiscreteBCConfig().create())


def test_a_fitted_model_is_reused_as_behaviour_policy(logged):
    target = table_policy(MDP, TARGET)
    automatic = estimate_policy_value(target, logged.dataset, "wpdis", gamma=0.9, n_bootstrap=50)
    model = estimate_behaviour_policy(logged.dataset)
    reused = estimate_policy_value(target, logged.dataset, "wpdis", gamma=0.9, n_bootstrap=50, behaviour_policy=model)
    assert automatic.behaviour == "estimated: " + model.description and automatic.behaviour_estimated
    assert reused.behaviour == "model: " + model.description and not reused.behaviour_estimated
    assert (automatic.value, automatic.lower, automatic.upper) == (reused.value, reused.lower, reused.upper)
    assert abs(automatic.value - true_value(MDP, TARGET, 0.9)) < 0.15


def test_estimated_gaussian_behaviour_in_a_continuous_bandit():
    rng = np.random.default_rng(2)
    s = rng.uniform(-1, 1, size=(3000, 1)).astype(np.float32)
    a = (0.5 * s + rng.normal(0.0, 0.6, size=(3000, 1))).astype(np.float32)
    dataset = MDPDataset(s, a, -((a[:, 0] - 0.3) ** 2), np.ones(3000))
    # target N(s, 0.3^2): E[-(a - 0.3)^2] = -(0.09 + E[(s - 0.3)^2]) = -(0.09 + 1/3 + 0.09)
    target = lambda x, actions: norm.pdf(actions[:, 0], np.asarray(x)[:, 0], 0.3)  # noqa: E731
    result = estimate_policy_value(target, dataset, "wis", n_bootstrap=100)
    assert result.behaviour.startswith("estimated: Gaussian: Ridge mean")
    assert abs(result.value - -(0.09 + 1.0 / 3.0 + 0.09)) < 0.05


def test_bad_input():
    with pytest.raises(ValueError, match="not fitted"):
        ClassifierBehaviourPolicy().action_probabilities(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="not fitted"):
        GaussianBehaviourPolicy().mean(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="actions has 3 rows, observations has 2"):
        ClassifierBehaviourPolicy().fit(np.zeros((2, 2)), np.array([0, 1, 1]))
    with pytest.raises(ValueError, match="non-negative integer action indices"):
        ClassifierBehaviourPolicy().fit(np.zeros((2, 2)), np.array([0.5, 1.0]))
    with pytest.raises(ValueError, match=r"indices in \[0, 2\)"):
        ClassifierBehaviourPolicy().fit(np.zeros((2, 2)), np.array([0, 2]), action_size=2)
    assert ClassifierBehaviourPolicy(calibration="sigmoid").fit(np.arange(12.0).reshape(6, 2), np.array([0, 1] * 3)).description \
        == "LogisticRegression calibrated (sigmoid, 3 folds)"
    with pytest.raises(ValueError, match="calibration must be"):
        ClassifierBehaviourPolicy(calibration="platt")
    with pytest.raises(ValueError, match="cv must be an int >= 2"):
        GaussianBehaviourPolicy(cv=1)
    model = GaussianBehaviourPolicy().fit(np.zeros((8, 1)), np.zeros((8, 2)))
    with pytest.raises(ValueError, match=r"actions must have shape \(8, 2\), got \(8, 3\)"):
        model.probabilities(np.zeros((8, 1)), np.zeros((8, 3)))
