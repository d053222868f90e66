"""Evaluators, FQE and the importance-sampling family on dict observations:
the same numbers as on the equivalent tuple dataset (sorted key order), and
an environment with a ``Dict`` observation space rolled out by key."""

from __future__ import annotations

import gymnasium
import numpy as np
from gymnasium import spaces

import offrl
from offrl.algos import DiscreteBCConfig, DQNConfig
from offrl.dataset import MDPDataset
from offrl.logging import NoopAdapterFactory
from offrl.metrics import (
    AverageValueEstimationEvaluator,
    DiscountedSumOfAdvantageEvaluator,
    DiscreteActionMatchEvaluator,
    EnvironmentEvaluator,
    InitialStateValueEstimationEvaluator,
    SoftOPCEvaluator,
    TDErrorEvaluator,
)
from offrl.ope import DiscreteFQE, DiscreteFQEConfig, estimate_policy_value


def _pair():
    rng = np.random.default_rng(0)
    n = 40
    obs = {"velocity": rng.normal(size=(n, 2)).astype(np.float32), "position": rng.normal(size=(n, 3)).astype(np.float32)}
    actions = rng.integers(0, 2, n)
    rewards = rng.normal(size=n).astype(np.float32)
    terminals = np.zeros(n)
    terminals[np.arange(9, n, 10)] = 1
    probs = np.full(n, 0.5)
    as_dict = MDPDataset(obs, actions, rewards, terminals, action_size=2, behaviour_probabilities=probs)
    as_tuple = MDPDataset([obs["position"], obs["velocity"]], actions, rewards, terminals, action_size=2,
                          behaviour_probabilities=probs)
    return as_dict, as_tuple


def _trained(dataset):
    offrl.seed(0)
    algo = DQNConfig(batch_size=8).create()
    algo.fit(dataset, n_steps=4, n_steps_per_epoch=4, logger_adapter=NoopAdapterFactory(), show_progress=False)
    return algo


def test_evaluators_and_estimators_match_the_tuple_dataset():
    as_dict, as_tuple = _pair()
    algo, reference = _trained(as_dict), _trained(as_tuple)
    evaluators = [TDErrorEvaluator(), AverageValueEstimationEvaluator(), DiscountedSumOfAdvantageEvaluator(),
                  InitialStateValueEstimationEvaluator(), SoftOPCEvaluator(return_threshold=0.0),
                  DiscreteActionMatchEvaluator()]
    for evaluator in evaluators:
        np.testing.assert_allclose(evaluator(algo, as_dict), evaluator(reference, as_tuple), rtol=1e-5, atol=1e-6)
    for estimator in ("is", "wis", "pdis", "wpdis"):
        a = estimate_policy_value(algo, as_dict, estimator, n_bootstrap=50)
        b = estimate_policy_value(reference, as_tuple, estimator, n_bootstrap=50)
        np.testing.assert_allclose(a.value, b.value, rtol=1e-5)


def test_fqe_on_dict_observations_matches_the_tuple_dataset():
    as_dict, as_tuple = _pair()
    values = []
    fqes = []
    for dataset in (as_dict, as_tuple):
        policy = DiscreteBCConfig(batch_size=8).create()
        offrl.seed(1)
        policy.build_with_dataset(dataset)
        fqe = DiscreteFQE(algo=policy, config=DiscreteFQEConfig(batch_size=8))
        offrl.seed(2)
        fqe.fit(dataset, n_steps=3, n_steps_per_epoch=3, logger_adapter=NoopAdapterFactory(), show_progress=False)
        x = dataset.to_arrays()["observations"]
        values.append(fqe.predict_value(x, policy.predict(x)))
        fqes.append((policy, fqe))
        if dataset is as_dict:
            assert list(x) == ["position", "velocity"]  # to_arrays gives the dict view
            by_key = {"velocity": x["velocity"], "position": x["position"]}  # any key order
            np.testing.assert_array_equal(fqe.predict_value(by_key, policy.predict(by_key)), values[0])
    np.testing.assert_allclose(values[0], values[1], rtol=1e-5, atol=1e-6)
    # the doubly robust estimators on the dict dataset, with its FQE as the model
    (policy, fqe), (reference_policy, reference_fqe) = fqes
    dr = estimate_policy_value(policy, as_dict, "dr", q_model=fqe, n_bootstrap=20)
    reference = estimate_policy_value(reference_policy, as_tuple, "dr", q_model=reference_fqe, n_bootstrap=20)
    np.testing.assert_allclose(dr.value, reference.value, rtol=1e-5)


class _DictEnv(gymnasium.Env):
    """Ten steps; reward 1 when the action matches the sign of ``velocity[0]``."""

    observation_space = spaces.Dict({"velocity": spaces.Box(-1, 1, (2,), np.float32),
                                     "position": spaces.Box(-5, 5, (3,), np.float32)})
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self._observation(), {}

    def _observation(self):
        self._last = {"velocity": self.np_random.uniform(-1, 1, 2).astype(np.float32),
                      "position": self.np_random.uniform(-5, 5, 3).astype(np.float32)}
        return self._last

    def step(self, action):
        reward = float(int(action) == int(self._last["velocity"][0] > 0))
        self._t += 1
        return self._observation(), reward, False, self._t >= 10, {}


def test_environment_evaluator_rolls_out_a_dict_env():
    as_dict, _ = _pair()
    algo = _trained(as_dict)
    score = EnvironmentEvaluator(_DictEnv(), n_trials=2)(algo, as_dict)
    assert 0.0 <= score <= 10.0
    # the evaluator's actions are the algorithm's on the same dicts
    env = _DictEnv()
    observation, _ = env.reset(seed=0)
    batch = {k: v[None] for k, v in observation.items()}
    assert algo.predict(batch).shape == (1,)


def test_online_collect_into_a_dict_buffer():
    algo = DQNConfig(batch_size=4).create()
    buffer = offrl.dataset.create_infinite_replay_buffer(env=_DictEnv())
    algo.build_with_env(_DictEnv())
    assert algo.observation_keys == ("position", "velocity")
    algo.collect(_DictEnv(), buffer, n_steps=25, show_progress=False)
    assert buffer.transition_count >= 20
    assert buffer.dataset_info.observation_signature.keys == ("position", "velocity")
    batch = buffer.sample_transition_batch(4)
    assert {k: o.shape for k, o in batch.observations.items()} == {"position": (4, 3), "velocity": (4, 2)}
    assert list(batch.next_observations) == ["position", "velocity"]


def test_rollout_passes_dicts_to_predict_by_key():
    from offrl.metrics import rollout_returns

    seen = []

    class ByKey:
        def predict(self, x):
            seen.append(sorted(x))  # a dict reaches predict
            return np.array([int(x["velocity"][0, 0] > 0)])

    returns = rollout_returns(ByKey(), _DictEnv(), n_trials=1)
    assert returns == [10.0]  # the policy reads the right key: every step rewarded
    assert seen[0] == ["position", "velocity"]


def test_collect_stores_an_unsorted_dict_space_by_key():
    class Unsorted(gymnasium.Env):
        # a sequence of pairs keeps its order in every gymnasium (1.0 sorts an OrderedDict's keys, later ones keep them)
        observation_space = spaces.Dict([("z", spaces.Box(-1, 1, (3,), np.float32)),
                                         ("a", spaces.Box(-1, 1, (2,), np.float32))])
        action_space = spaces.Discrete(2)

        def __init__(self):
            self.seen = []

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return self._observation(), {}

        def _observation(self):
            obs = {"z": np.full(3, len(self.seen), np.float32), "a": -np.full(2, len(self.seen), np.float32)}
            self.seen.append(obs)
            return obs

        def step(self, action):
            return self._observation(), 0.0, False, len(self.seen) > 4, {}

    env = Unsorted()
    assert list(env.observation_space.spaces) == ["z", "a"]
    algo = DQNConfig(batch_size=4).create()
    algo.build_with_env(env)
    buffer = offrl.dataset.create_infinite_replay_buffer(env=env)
    algo.collect(env, buffer, n_steps=4, show_progress=False)
    stored = buffer.to_arrays()["observations"]
    assert list(stored) == ["a", "z"]  # the stored (sorted) key order, whatever the space's
    a, z = stored["a"], stored["z"]
    np.testing.assert_array_equal(a, np.stack([o["a"] for o in env.seen[:4]]))
    np.testing.assert_array_equal(z, np.stack([o["z"] for o in env.seen[:4]]))
