"""Evaluators: exact values on hand-built episodes, the batched path
against a per-transition loop, use inside fit, and bad input."""

from __future__ import annotations

from unittest import mock

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from metric_stubs import column, discrete_episodes, hand_dataset, hand_episodes, linear_q, modulo_q

from offrl.algos import BCConfig, DiscreteRandomPolicyConfig, DQNConfig, IQLConfig, RandomPolicyConfig
from offrl.dataset import (
    BasicTransitionPicker,
    Episode,
    FrameStackTransitionPicker,
    MDPDataset,
    MultiStepTransitionPicker,
    create_fifo_replay_buffer,
    create_infinite_replay_buffer,
)
from offrl.logging import NoopAdapterFactory
from offrl.metrics import (
    AverageValueEstimationEvaluator,
    CompareContinuousActionDiffEvaluator,
    CompareDiscreteActionMatchEvaluator,
    ContinuousActionDiffEvaluator,
    DiscountedSumOfAdvantageEvaluator,
    DiscreteActionMatchEvaluator,
    EnvironmentEvaluator,
    EvaluatorProtocol,
    InitialStateValueEstimationEvaluator,
    SoftOPCEvaluator,
    TDErrorEvaluator,
)
from offrl.metrics.evaluators import discounted_suffix_sums
from offrl.models.encoders import VectorEncoderFactory
from offrl.preprocessing import MultiplyRewardScaler, StandardObservationScaler

# Hand values below use gamma = 0.5, Q(s, a) = s + 2a and pi(s) = s / 2, so
# Q(s, pi(s)) = 2s and the advantage Q(s, a) - Q(s, pi(s)) = 2a - s, on the
# episodes of metric_stubs.hand_episodes (s, a, r):
#   episode 1, terminal:  (1, 0.5, 1), (2, -1, 0), (3, 2, 2)
#   episode 2, timeout:   (4, 0, 1), (5, 1, 1), (6, 0, 0.5) [+ final s = 7]
# Without the final observation, episode 2's last step is not a transition.


class TestHandValues:
    def test_td_error(self):
        # Q(s,a), target r + 0.5 * 2s' (no bootstrap at the terminal step):
        # (2 - 3)^2 + (0 - 3)^2 + (7 - 2)^2 + (4 - 6)^2 + (7 - 7)^2 = 39
        assert TDErrorEvaluator()(linear_q(), hand_dataset()) == pytest.approx(39 / 5)

    def test_td_error_uses_final_observation_of_a_truncated_episode(self):
        # + episode 2's last step: (6 - (0.5 + 0.5 * 14))^2 = 2.25
        assert TDErrorEvaluator()(linear_q(), hand_dataset(final=True)) == pytest.approx(41.25 / 6)

    def test_td_error_scales_rewards_with_the_algorithms_reward_scaler(self):
        # rewards doubled: (2 - 4)^2 + (0 - 3)^2 + (7 - 4)^2 + (4 - 7)^2 + (7 - 8)^2 = 32
        algo = linear_q(reward_scaler=MultiplyRewardScaler(2.0))
        assert TDErrorEvaluator()(algo, hand_dataset()) == pytest.approx(32 / 5)

    def test_td_error_with_multi_step_picker_bootstraps_with_gamma_to_the_interval(self):
        # 2-step returns r_t + 0.5 r_{t+1}, bootstrap 0.25 * 2s_{t+2}:
        # ep 1: (2 - (1 + 0.25 * 6))^2 = 0.25; (0 - 1)^2 (terminal within 2) = 1; (7 - 2)^2 = 25
        # ep 2: (4 - (1.5 + 0.25 * 12))^2 = 0.25; last transition has 1 step: (7 - (1 + 6))^2 = 0
        dataset = hand_dataset(transition_picker=MultiStepTransitionPicker(2, 0.5))
        assert TDErrorEvaluator()(linear_q(), dataset) == pytest.approx(26.5 / 5)

    def test_td_error_with_tuple_observations(self):
        # observations (s, 10 s): Q(s, a) = 11 s + 2 a, Q(s, pi(s)) = 12 s
        # (12 - 13)^2 + (20 - 18)^2 + (37 - 2)^2 + (44 - 31)^2 + (57 - 37)^2 = 1799
        dataset = create_infinite_replay_buffer(episodes=[
            Episode([e.observations, e.observations * 10], e.actions, e.rewards, e.terminated) for e in hand_episodes()
        ])
        algo = linear_q(observation_shape=[(1,), (1,)])
        assert TDErrorEvaluator()(algo, dataset) == pytest.approx(1799 / 5)

    def test_td_error_on_a_fifo_buffer_that_dropped_the_oldest_step(self):
        # limit 4 of 5 transitions: episode 1 starts at s = 2: 9 + 25 + 4 + 0
        dataset = create_fifo_replay_buffer(4, episodes=hand_episodes())
        assert TDErrorEvaluator()(linear_q(), dataset) == pytest.approx(38 / 4)

    def test_discounted_sum_of_advantage(self):
        # ep 1: A = 0, -4, 1 -> sums -1.75, -3.5, 1; ep 2: A = -4, -3 -> sums -5.5, -3
        value = DiscountedSumOfAdvantageEvaluator()(linear_q(), hand_dataset())
        assert value == pytest.approx(-12.75 / 5)

    def test_discounted_sum_of_advantage_with_final_observation(self):
        # ep 2 now has A = -4, -3, -6 -> sums -7, -6, -6
        value = DiscountedSumOfAdvantageEvaluator()(linear_q(), hand_dataset(final=True))
        assert value == pytest.approx(-23.25 / 6)

    def test_average_value(self):
        assert AverageValueEstimationEvaluator()(linear_q(), hand_dataset()) == pytest.approx(2 * 15 / 5)
        assert AverageValueEstimationEvaluator()(linear_q(), hand_dataset(final=True)) == pytest.approx(2 * 21 / 6)

    def test_initial_state_value(self):
        # Q(s0, pi(s0)) = 2 and 8
        assert InitialStateValueEstimationEvaluator()(linear_q(), hand_dataset()) == pytest.approx(5.0)

    def test_soft_opc(self):
        # Q(s, a): ep 1 (return 3) 2, 0, 7; ep 2 (return 2.5) 4, 7
        assert SoftOPCEvaluator(3.0)(linear_q(), hand_dataset()) == pytest.approx(3.0 - 4.0)
        assert SoftOPCEvaluator(2.5)(linear_q(), hand_dataset()) == pytest.approx(0.0)

    def test_continuous_action_diff(self):
        # (a - s/2)^2: 0, 4, 0.25, 4, 2.25
        assert ContinuousActionDiffEvaluator()(linear_q(), hand_dataset()) == pytest.approx(10.5 / 5)

    def test_compare_continuous_action_diff_sums_over_action_dimensions(self):
        dataset = create_infinite_replay_buffer(episodes=[
            Episode(e.observations, np.repeat(e.actions, 2, axis=1), e.rewards, e.terminated) for e in hand_episodes()
        ])
        base = linear_q(offset=1.0, action_size=2)
        assert CompareContinuousActionDiffEvaluator(base)(linear_q(action_size=2), dataset) == pytest.approx(2.0)
        assert CompareContinuousActionDiffEvaluator(base)(base, dataset) == 0.0

    def test_discrete_action_match(self):
        # pi(s) = s mod 2 on s = 0..3 (a = 0, 1, 1, 1) and s = 4, 5 (a = 0, 0): 4 of 6 match
        dataset = create_infinite_replay_buffer(episodes=discrete_episodes())
        assert DiscreteActionMatchEvaluator()(modulo_q(), dataset) == pytest.approx(4 / 6)

    def test_compare_discrete_action_match(self):
        # s mod 2 against s mod 3 on s = 0..5: equal at s = 0, 1
        dataset = create_infinite_replay_buffer(episodes=discrete_episodes())
        base = modulo_q(action_size=3)
        assert CompareDiscreteActionMatchEvaluator(base)(modulo_q(), dataset) == pytest.approx(2 / 6)

    def test_discrete_td_error(self):
        # Q(s, a) = s (a + 1), pi(s) = s mod 2, gamma 0.5, rewards 0 except the terminal step's 1:
        # ep 1: s=0,a=0: 0 - 0.5 * Q(1, 1) = 0 - 1 -> 1; s=1,a=1: 2 - 0.5 * Q(2, 0) = 2 - 1 -> 1
        #   s=2,a=1: 4 - 0.5 * Q(3, 1) = 4 - 3 -> 1; s=3,a=1 terminal: 6 - 1 -> 25
        # ep 2: s=4,a=0: 4 - 0.5 * Q(5, 1) = 4 - 5 -> 1; s=5,a=0: 5 - 0.5 * Q(6, 0) = 5 - 3 -> 4
        dataset = create_infinite_replay_buffer(episodes=discrete_episodes())
        assert TDErrorEvaluator()(modulo_q(), dataset) == pytest.approx(33 / 6)


class TestEpisodes:
    def test_given_episodes_are_scored_instead_of_the_dataset(self):
        # episode 1 alone: 1 + 9 + 25
        evaluator = TDErrorEvaluator(hand_episodes()[:1])
        assert evaluator(linear_q(), hand_dataset()) == pytest.approx(35 / 3)
        assert evaluator(linear_q(), None) == pytest.approx(35 / 3)

    def test_a_datasets_episode_sequence_is_used_in_place(self):
        dataset = hand_dataset()
        assert TDErrorEvaluator(dataset.episodes)(linear_q(), None) == pytest.approx(39 / 5)
        # a sequence, not a copy: episodes written later are scored too
        dataset.append_episode(Episode(column([1]), column([0]), column([0]), terminated=True))
        assert TDErrorEvaluator(dataset.episodes)(linear_q(), None) == pytest.approx((39 + 1) / 6)

    def test_user_picker_without_pick_batch_gives_the_same_values(self):
        class PerItemPicker:
            def __call__(self, episode, index):
                return BasicTransitionPicker()(episode, index)

        for final in (False, True):
            expected = TDErrorEvaluator()(linear_q(), hand_dataset(final))
            assert TDErrorEvaluator()(linear_q(), hand_dataset(final, transition_picker=PerItemPicker())) == expected

    def test_frame_stack_picker_observations_reach_the_algorithm(self):
        # observations (1,) stacked by 2 -> (2,) (older frame first): Q(s, pi(s)) = sum(s) + s[0]
        picker = FrameStackTransitionPicker(2)
        dataset = hand_dataset(transition_picker=picker)
        algo = linear_q(obs_dim=2)
        expected = [2 * (0.5 * obs[0]) + obs.sum() for obs in
                    (picker(e, t).observation for e in dataset.episodes for t in range(e.transition_count))]
        assert AverageValueEstimationEvaluator()(algo, dataset) == pytest.approx(np.mean(expected))


def _naive_metrics(algo, episodes, gamma):
    """d3rlpy's definitions, one transition at a time through the public API."""
    td, adv_sums, values, first, diffs, logged_q, returns = [], [], [], [], [], [], []
    for episode in episodes:
        advantages = []
        for t in range(episode.transition_count):
            s, a = episode.observations[t][None], episode.actions[t][None]
            terminal = episode.terminated and t == episode.size() - 1
            s_next = episode.next_observation(t)[None]
            q = algo.predict_value(s, a)[0]
            v = algo.predict_value(s, algo.predict(s))[0]
            v_next = algo.predict_value(s_next, algo.predict(s_next))[0]
            td.append((q - episode.rewards[t, 0] - gamma * (0.0 if terminal else v_next)) ** 2)
            advantages.append(q - v)
            values.append(v)
            logged_q.append(q)
            diffs.append(np.sum((a - algo.predict(s)) ** 2))
            if t == 0:
                first.append(v)
        running = 0.0
        for advantage in reversed(advantages):
            running = advantage + gamma * running
            adv_sums.append(running)
        returns += [episode.compute_return()] * episode.transition_count
    return {
        "td": np.mean(td), "adv": np.mean(adv_sums), "value": np.mean(values), "initial": np.mean(first),
        "diff": np.mean(diffs), "logged_q": np.array(logged_q), "returns": np.array(returns),
    }


def _random_episodes(layout, seed, obs_dim=2, action_dim=2):
    rng = np.random.default_rng(seed)
    episodes = []
    for size, kind in layout:
        episodes.append(Episode(
            rng.normal(size=(size, obs_dim)).astype(np.float32),
            rng.normal(size=(size, action_dim)).astype(np.float32),
            rng.normal(size=(size, 1)).astype(np.float32),
            terminated=kind == "terminal",
            final_observation=rng.normal(size=obs_dim).astype(np.float32) if kind == "final" else None,
        ))
    return episodes


LAYOUTS = st.lists(st.tuples(st.integers(1, 7), st.sampled_from(["terminal", "timeout", "final"])), min_size=1, max_size=6)


@settings(max_examples=40, deadline=None)
@given(layout=LAYOUTS, seed=st.integers(0, 2**16), gamma=st.sampled_from([0.0, 0.5, 0.9, 1.0]),
       chunk=st.integers(1, 9))
def test_batched_evaluators_match_a_per_transition_loop(layout, seed, gamma, chunk):
    episodes = _random_episodes(layout, seed)
    if sum(e.transition_count for e in episodes) == 0:
        return
    dataset = create_infinite_replay_buffer(episodes=episodes)
    algo = linear_q(gamma=gamma, action_size=2, obs_dim=2)
    expected = _naive_metrics(algo, dataset.episodes, gamma)
    threshold = float(np.median(expected["returns"]))
    success = expected["returns"] >= threshold
    with mock.patch("offrl.metrics.transitions.CHUNK_ROWS", chunk):
        assert TDErrorEvaluator()(algo, dataset) == pytest.approx(expected["td"], rel=1e-5, abs=1e-6)
        assert DiscountedSumOfAdvantageEvaluator()(algo, dataset) == pytest.approx(expected["adv"], rel=1e-5, abs=1e-6)
        assert AverageValueEstimationEvaluator()(algo, dataset) == pytest.approx(expected["value"], rel=1e-5, abs=1e-6)
        assert InitialStateValueEstimationEvaluator()(algo, dataset) == pytest.approx(expected["initial"], rel=1e-5, abs=1e-6)
        assert ContinuousActionDiffEvaluator()(algo, dataset) == pytest.approx(expected["diff"], rel=1e-5, abs=1e-6)
        soft_opc = expected["logged_q"][success].mean() - expected["logged_q"].mean()
        assert SoftOPCEvaluator(threshold)(algo, dataset) == pytest.approx(soft_opc, rel=1e-5, abs=1e-5)


def _random_dataset(discrete: bool, n: int = 40) -> MDPDataset:
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 2, size=n) if discrete else rng.uniform(-1, 1, size=(n, 2)).astype(np.float32)
    terminals = (np.arange(n) % 8 == 7).astype(np.float32)
    return MDPDataset(rng.normal(size=(n, 3)).astype(np.float32) * 2 + 1, actions, rng.normal(size=n), terminals)


def _small(config_class, **kwargs):
    encoder = VectorEncoderFactory(hidden_units=[16])
    if config_class is IQLConfig:
        kwargs.update(actor_encoder_factory=encoder, critic_encoder_factory=encoder, value_encoder_factory=encoder)
    else:
        kwargs.update(encoder_factory=encoder)
    return config_class(**kwargs).create()


@pytest.mark.parametrize("config_class, discrete", [(IQLConfig, False), (DQNConfig, True)])
def test_real_networks_with_scalers_match_a_per_transition_loop(config_class, discrete):
    dataset = _random_dataset(discrete)
    algo = _small(config_class, gamma=0.9, observation_scaler=StandardObservationScaler())
    algo.build_with_dataset(dataset)
    expected = _naive_metrics(algo, dataset.episodes, 0.9)
    with mock.patch("offrl.metrics.transitions.CHUNK_ROWS", 16):
        assert TDErrorEvaluator()(algo, dataset) == pytest.approx(expected["td"], rel=1e-4)
        assert DiscountedSumOfAdvantageEvaluator()(algo, dataset) == pytest.approx(expected["adv"], rel=1e-4, abs=1e-6)
        assert InitialStateValueEstimationEvaluator()(algo, dataset) == pytest.approx(expected["initial"], rel=1e-4)


def test_evaluators_inside_fit_land_in_the_epoch_metrics():
    class MeanReward(EvaluatorProtocol):
        def __call__(self, algo, dataset) -> float:
            return float(np.mean(dataset.to_arrays()["rewards"]))

    dataset = _random_dataset(discrete=True)
    algo = _small(DQNConfig, batch_size=8)
    evaluators = {"td_error": TDErrorEvaluator(), "match": DiscreteActionMatchEvaluator(), "reward": MeanReward()}
    results = algo.fit(dataset, n_steps=4, n_steps_per_epoch=2, logger_adapter=NoopAdapterFactory(),
                       show_progress=False, evaluators=evaluators)
    assert [epoch for epoch, _ in results] == [1, 2]
    last = results[-1][1]
    assert last["td_error"] == pytest.approx(TDErrorEvaluator()(algo, dataset))
    assert last["match"] == pytest.approx(DiscreteActionMatchEvaluator()(algo, dataset))
    assert last["reward"] == pytest.approx(float(np.mean(dataset.to_arrays()["rewards"])))


class StepEnv(gym.Env):
    """4 steps; observation [t]; reward 1 when the action is t mod 2."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        reward = float(int(action) == self.t % 2)
        self.t += 1
        return np.array([self.t], np.float32), reward, False, self.t == 4, {}


def test_environment_evaluator_mean_return():
    assert EnvironmentEvaluator(StepEnv(), n_trials=3)(modulo_q()) == 4.0
    assert EnvironmentEvaluator(StepEnv(), n_trials=2)(modulo_q(offset=1), None) == 0.0


def test_every_evaluator_is_an_evaluator_protocol():
    evaluators = [TDErrorEvaluator(), SoftOPCEvaluator(1.0), EnvironmentEvaluator(StepEnv()),
                  CompareDiscreteActionMatchEvaluator(modulo_q())]
    assert all(isinstance(e, EvaluatorProtocol) for e in evaluators)
    assert not isinstance(object(), EvaluatorProtocol)


class TestBadInput:
    def test_unbuilt_algorithm(self):
        algo = IQLConfig().create()
        with pytest.raises(ValueError, match=r"TDErrorEvaluator: algo \(IQL\) is not built"):
            TDErrorEvaluator()(algo, hand_dataset())
        with pytest.raises(ValueError, match=r"base_algo \(IQL\) is not built"):
            CompareContinuousActionDiffEvaluator(algo)(linear_q(), hand_dataset())

    @pytest.mark.parametrize("config", [BCConfig(), RandomPolicyConfig()])
    def test_value_metric_on_a_policy_without_q_function(self, config):
        algo = config.create()
        algo.build_with_dataset(hand_dataset())
        for evaluator in (TDErrorEvaluator(), AverageValueEstimationEvaluator(), SoftOPCEvaluator(0.0),
                          InitialStateValueEstimationEvaluator(), DiscountedSumOfAdvantageEvaluator()):
            with pytest.raises(ValueError, match=r"needs a Q-function .* has none"):
                evaluator(algo, hand_dataset())
        assert ContinuousActionDiffEvaluator()(algo, hand_dataset()) >= 0.0

    def test_action_metric_of_the_wrong_kind(self):
        discrete = create_infinite_replay_buffer(episodes=discrete_episodes())
        with pytest.raises(ValueError, match="ContinuousActionDiffEvaluator is for continuous actions.*discrete"):
            ContinuousActionDiffEvaluator()(modulo_q(), discrete)
        with pytest.raises(ValueError, match="DiscreteActionMatchEvaluator is for discrete actions.*continuous"):
            DiscreteActionMatchEvaluator()(linear_q(), hand_dataset())
        with pytest.raises(ValueError, match="is for discrete actions, and base_algo"):
            CompareDiscreteActionMatchEvaluator(linear_q())(modulo_q(), discrete)
        random_policy = DiscreteRandomPolicyConfig().create()
        random_policy.build_with_dataset(discrete)
        with pytest.raises(ValueError, match="is for continuous actions"):
            ContinuousActionDiffEvaluator()(random_policy, discrete)

    def test_episodes_of_the_other_action_space(self):
        with pytest.raises(ValueError, match="the episodes have discrete actions, and LinearQ acts in a continuous"):
            TDErrorEvaluator(discrete_episodes())(linear_q(), None)

    def test_empty_episodes(self):
        with pytest.raises(ValueError, match="episodes is empty"):
            TDErrorEvaluator([])
        # one truncated step without a final observation: no transition
        dataset = MDPDataset(np.ones((1, 1), np.float32), np.zeros((1, 1), np.float32), np.zeros(1), np.zeros(1))
        with pytest.raises(ValueError, match="the dataset has no transitions"):
            AverageValueEstimationEvaluator()(linear_q(), dataset)
        with pytest.raises(ValueError, match="the episodes it was given have no transitions"):
            AverageValueEstimationEvaluator(dataset.episodes)(linear_q(), None)

    def test_no_dataset_and_no_episodes(self):
        with pytest.raises(ValueError, match="was given no episodes"):
            TDErrorEvaluator()(linear_q(), None)

    def test_episodes_of_the_wrong_type(self):
        with pytest.raises(TypeError, match=r"episodes\[1\] must be an episode"):
            TDErrorEvaluator([hand_episodes()[0], np.zeros(3)])
        with pytest.raises(TypeError, match="pass dataset.episodes"):
            TDErrorEvaluator(hand_dataset())
        with pytest.raises(TypeError, match="dataset must be a ReplayBuffer"):
            TDErrorEvaluator()(linear_q(), np.zeros(3))

    def test_soft_opc_threshold(self):
        with pytest.raises(ValueError, match="return_threshold must be a finite number"):
            SoftOPCEvaluator(float("nan"))
        # no episode reaches the threshold: NaN, as d3rlpy 2.8.1 (not an error)
        assert np.isnan(SoftOPCEvaluator(10)(linear_q(), hand_dataset()))

    def test_environment_evaluator_arguments(self):
        with pytest.raises(ValueError, match="n_trials must be a positive int"):
            EnvironmentEvaluator(StepEnv(), n_trials=0)
        with pytest.raises(ValueError, match=r"epsilon must be a number in \[0, 1\]"):
            EnvironmentEvaluator(StepEnv(), epsilon=1.5)
        with pytest.raises(TypeError, match="env must be a gymnasium environment"):
            EnvironmentEvaluator(hand_dataset())
        with pytest.raises(ValueError, match="is not built"):
            EnvironmentEvaluator(StepEnv())(DQNConfig().create())

    def test_base_algo_without_predict(self):
        with pytest.raises(TypeError, match="base_algo must be an algorithm with predict"):
            CompareDiscreteActionMatchEvaluator(object())


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(1, 40), min_size=1, max_size=6), gamma=st.floats(0.0, 1.0),
       seed=st.integers(0, 2**16))
def test_discounted_suffix_sums_match_a_backward_loop(lengths, gamma, seed):
    values = np.random.default_rng(seed).normal(size=sum(lengths))
    last = np.zeros(values.shape[0], dtype=bool)
    last[np.cumsum(lengths) - 1] = True
    expected = np.empty_like(values)
    running = 0.0
    for t in reversed(range(values.shape[0])):
        running = values[t] + (0.0 if last[t] else gamma * running)
        expected[t] = running
    np.testing.assert_allclose(discounted_suffix_sums(values, gamma, last), expected, rtol=1e-12, atol=1e-12)


def test_environment_evaluator_reports_the_normalised_score(monkeypatch):
    """``normalize`` turns the mean return into D4RL's normalised score with
    the recorded reference returns; an unknown name fails at construction."""
    import gymnasium

    import offrl
    from offrl import _scores

    monkeypatch.setitem(_scores.REFERENCE_RETURNS, "hopper", (10.0, 210.0))
    env = gymnasium.make("CartPole-v1")  # any environment: the score is computed from its returns
    algo = offrl.algos.DiscreteRandomPolicyConfig().create()
    algo.build_with_env(env)
    offrl.seed(0)
    env.reset(seed=0)
    raw = offrl.metrics.EnvironmentEvaluator(env, n_trials=3)(algo)
    offrl.seed(0)
    env.reset(seed=0)
    score = offrl.metrics.EnvironmentEvaluator(env, n_trials=3, normalize="hopper-medium-v0")(algo)
    assert score == pytest.approx(100.0 * (raw - 10.0) / 200.0)
    with pytest.raises(ValueError, match="no reference returns for 'pong'"):
        offrl.metrics.EnvironmentEvaluator(env, normalize="pong")
