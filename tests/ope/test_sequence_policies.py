"""A sequence policy (the Decision Transformer family) judged on logged data:
the batched replay of each episode's history equals stepping the stateful
wrapper, and the importance-sampling family and policy selection take it."""

from __future__ import annotations

import math
from typing import List

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import offrl
from offrl.algos import (
    DecisionTransformerConfig,
    DiscreteCQLConfig,
    DiscreteDecisionTransformerConfig,
    GreedyTransformerActionSampler,
    IQLConfig,
    SoftmaxTransformerActionSampler,
    TACRConfig,
)
from offrl.constants import PositionEncodingType
from offrl.dataset import MDPDataset
from offrl.logging import NoopAdapterFactory
from offrl.models import VectorEncoderFactory
from offrl.ope import SequencePolicy, estimate_policy_value, select_policies
from offrl.ope._logged import logged_data
from offrl.ope._policies import policy_probabilities, sample_policy_actions
from offrl.metrics.sequence import replay_outputs

QUIET = dict(logger_adapter=NoopAdapterFactory(), show_progress=False)


def tiny(discrete: bool, context_size: int = 3, position: PositionEncodingType = PositionEncodingType.SIMPLE,
         max_timestep: int = 30):
    """A built, untrained, dropout-free two-layer sequence model (3-d observations, 2 actions)."""
    cls = DiscreteDecisionTransformerConfig if discrete else DecisionTransformerConfig
    offrl.seed(0)
    algo = cls(encoder_factory=VectorEncoderFactory(hidden_units=[8]), num_layers=2, num_heads=2,
               context_size=context_size, max_timestep=max_timestep, position_encoding_type=position,
               attn_dropout=0.0, resid_dropout=0.0, embed_dropout=0.0, batch_size=4).create()
    algo.create_impl((3,), 2)
    return algo


def episodes(lengths: List[int], discrete: bool, seed: int = 0) -> MDPDataset:
    rng = np.random.default_rng(seed)
    n = int(sum(lengths))
    terminals = np.zeros(n, np.float32)
    terminals[np.cumsum(lengths) - 1] = 1.0
    actions = rng.integers(0, 2, size=n) if discrete else rng.uniform(-1, 1, size=(n, 2)).astype(np.float32)
    return MDPDataset(rng.normal(size=(n, 3)).astype(np.float32), actions, rng.normal(size=n).astype(np.float32),
                      terminals, action_size=2 if discrete else None)


def stepped_outputs(algo, data, target_return: float) -> np.ndarray:
    """The naive loop: the stateful wrapper stepped through every logged
    episode, fed the logged observations and rewards, its sampler recording
    the model's output and returning the logged action (so its context
    holds the logged actions, as the replay's does)."""
    outputs: List[np.ndarray] = []
    row = [0]

    def sampler(output: np.ndarray):
        outputs.append(np.asarray(output, dtype=np.float64))
        return data.actions[row[0]]

    for start, length in zip(data.starts, data.lengths):
        actor = algo.as_stateful_wrapper(target_return, sampler)
        for t in range(int(length)):
            row[0] = int(start) + t
            actor.predict(data.observations[row[0]], data.rewards[row[0] - 1] if t else 0.0)
    return np.stack(outputs)


@pytest.mark.parametrize("discrete", [False, True], ids=["continuous", "discrete"])
@pytest.mark.parametrize("position", list(PositionEncodingType), ids=lambda p: p.value)
def test_replay_equals_the_stateful_wrapper_step_by_step(discrete, position):
    algo = tiny(discrete, context_size=3, position=position)
    data = logged_data(episodes([1, 2, 3, 4, 9], discrete))  # shorter than, equal to and longer than the context
    replayed = replay_outputs(algo, data.observations, data.actions, data.rewards, data.lengths, 5.0)
    stepped = stepped_outputs(algo, data, 5.0)
    np.testing.assert_allclose(replayed, stepped, rtol=1e-5, atol=1e-6)
    if discrete:
        np.testing.assert_array_equal(replayed.argmax(axis=1), stepped.argmax(axis=1))


def test_tacr_replay_equals_its_stateful_wrapper():
    offrl.seed(0)
    algo = TACRConfig(actor_encoder_factory=VectorEncoderFactory(hidden_units=[8]),
                      critic_encoder_factory=VectorEncoderFactory(hidden_units=[8]), num_layers=2, num_heads=2,
                      context_size=3, max_timestep=30, attn_dropout=0.0, resid_dropout=0.0, embed_dropout=0.0).create()
    algo.create_impl((3,), 2)
    data = logged_data(episodes([2, 6], False))
    replayed = replay_outputs(algo, data.observations, data.actions, data.rewards, data.lengths, -1.5)
    np.testing.assert_allclose(replayed, stepped_outputs(algo, data, -1.5), rtol=1e-5, atol=1e-6)


@settings(max_examples=8, deadline=None)
@given(lengths=st.lists(st.integers(1, 9), min_size=1, max_size=4), context_size=st.integers(1, 5),
       target=st.floats(-20, 20), batch_size=st.integers(1, 7), discrete=st.booleans())
def test_replay_equals_the_stepped_wrapper_for_any_episodes_context_and_chunking(lengths, context_size, target,
                                                                                   batch_size, discrete):
    algo = tiny(discrete, context_size=context_size)
    data = logged_data(episodes(lengths, discrete, seed=len(lengths)))
    replayed = replay_outputs(algo, data.observations, data.actions, data.rewards, data.lengths, target,
                              batch_size=batch_size)
    np.testing.assert_allclose(replayed, stepped_outputs(algo, data, target), rtol=1e-5, atol=1e-5)


def test_the_context_holds_the_logged_actions_not_the_models_own():
    algo = tiny(True, context_size=4)
    data = logged_data(episodes([6], True))
    flipped = 1 - data.actions
    a = replay_outputs(algo, data.observations, data.actions, data.rewards, data.lengths, 3.0)
    b = replay_outputs(algo, data.observations, flipped, data.rewards, data.lengths, 3.0)
    np.testing.assert_array_equal(a[0], b[0])  # the first step has no earlier action
    assert np.abs(a[1:] - b[1:]).max(axis=1).min() > 0  # every later step sees the earlier logged actions


def test_softmax_policy_probabilities_are_the_replayed_softmax():
    algo = tiny(True)
    dataset = episodes([2, 5, 4], True)
    data = logged_data(dataset)
    logits = replay_outputs(algo, data.observations, data.actions, data.rewards, data.lengths, 4.0)
    policy = SequencePolicy(algo, target_return=4.0, action_sampler=SoftmaxTransformerActionSampler(temperature=0.5))
    got = policy_probabilities(policy, data)
    z = np.exp(2.0 * logits - (2.0 * logits).max(axis=1, keepdims=True))
    expected = z / z.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(got.all_actions, expected, rtol=1e-9)
    np.testing.assert_allclose(got.logged, expected[np.arange(data.n_steps), data.actions], rtol=1e-9)
    assert got.smoothing is None


def test_greedy_and_continuous_sequence_policies_are_smoothed_around_the_replayed_action():
    algo = tiny(True)
    data = logged_data(episodes([3, 6], True))
    greedy = replay_outputs(algo, data.observations, data.actions, data.rewards, data.lengths, 2.0).argmax(axis=1)
    got = policy_probabilities(SequencePolicy(algo, 2.0, GreedyTransformerActionSampler()), data, epsilon=0.2)
    np.testing.assert_allclose(got.logged, np.where(greedy == data.actions, 0.9, 0.1))
    assert "epsilon-greedy" in got.smoothing

    algo = tiny(False)
    data = logged_data(episodes([3, 6], False))
    action = replay_outputs(algo, data.observations, data.actions, data.rewards, data.lengths, 2.0)
    got = policy_probabilities(SequencePolicy(algo, 2.0), data, bandwidth=0.3)
    width = 0.3 * data.actions.std(axis=0)
    density = np.prod(np.exp(-0.5 * ((data.actions - action) / width) ** 2) / (width * math.sqrt(2 * math.pi)), axis=1)
    np.testing.assert_allclose(got.logged, density, rtol=1e-6)
    samples = sample_policy_actions(SequencePolicy(algo, 2.0), data, 4000, bandwidth=0.3, seed=1)
    np.testing.assert_allclose(samples.mean(axis=1), action, atol=4 * width.max() / math.sqrt(4000) * 3)


@pytest.mark.parametrize("discrete", [False, True], ids=["continuous", "discrete"])
def test_the_importance_sampling_family_takes_a_fitted_sequence_policy(discrete):
    dataset = episodes([5, 6, 4, 7], discrete)
    algo = tiny(discrete)
    algo.fit(dataset, n_steps=2, n_steps_per_epoch=2, **QUIET)
    policy = SequencePolicy(algo, target_return=3.0)
    mu = np.full(22, 0.5 if discrete else 0.25)
    for estimator in ("is", "wis", "pdis", "wpdis"):
        # a wide kernel: an untrained policy's kernel at 0.1 std gives the random logged actions no density
        result = estimate_policy_value(policy, dataset, estimator, behaviour_probabilities=mu, n_bootstrap=50,
                                       bandwidth=3.0)
        assert math.isfinite(result.value) and result.gamma == algo.gamma
        assert "target_return=3" in result.target


@pytest.mark.parametrize("discrete", [True, False], ids=["discrete_cql", "iql"])
def test_select_policies_ranks_a_decision_transformer_against_cql_or_iql(discrete):
    dataset = episodes([5, 6, 4, 7], discrete)
    dt = tiny(discrete)
    dt.fit(dataset, n_steps=2, n_steps_per_epoch=2, **QUIET)
    config = DiscreteCQLConfig if discrete else IQLConfig
    encoder = VectorEncoderFactory(hidden_units=[8])
    other = (config(encoder_factory=encoder, batch_size=4) if discrete else
             config(actor_encoder_factory=encoder, critic_encoder_factory=encoder, value_encoder_factory=encoder,
                    batch_size=4)).create()
    other.fit(dataset, n_steps=2, n_steps_per_epoch=2, **QUIET)
    selection = select_policies({"dt": SequencePolicy(dt, target_return=3.0), "other": other}, dataset,
                                behaviour_probabilities=np.full(22, 0.5 if discrete else 0.25), n_bootstrap=50,
                                bandwidth=3.0, greedy=not discrete)
    for label in selection.estimators:
        assert sorted(selection.ranks[label].values())[0] == 1
        assert set(selection.ranks[label]) == {"dt", "other"}
        assert all(math.isfinite(float(selection.results[label][name].value)) for name in ("dt", "other"))
    assert selection.top() in ("dt", "other")


@pytest.mark.parametrize("bad", [None, float("nan"), float("inf"), "3", True])
def test_a_missing_or_non_finite_target_return_is_refused_naming_it(bad):
    algo = tiny(True)
    with pytest.raises(ValueError, match="target_return"):
        SequencePolicy(algo, target_return=bad)


def test_a_bare_sequence_model_is_refused_by_the_estimators_naming_target_return():
    dataset = episodes([4, 4], True)
    algo = tiny(True)
    with pytest.raises(ValueError, match="target_return"):
        estimate_policy_value(algo, dataset, "wis", behaviour_probabilities=np.full(8, 0.5))
    with pytest.raises(ValueError, match="policy 'dt'.*target_return"):
        select_policies({"dt": algo}, dataset, behaviour_probabilities=np.full(8, 0.5))


def test_other_bad_input_is_refused():
    with pytest.raises(TypeError, match="sequence model"):
        SequencePolicy(DiscreteCQLConfig().create(), target_return=1.0)
    with pytest.raises(TypeError, match="action_sampler"):
        SequencePolicy(tiny(True), 1.0, action_sampler=lambda logits: 0)
    with pytest.raises(ValueError, match="not built"):
        SequencePolicy(DecisionTransformerConfig().create(), 1.0)
    algo = tiny(False, max_timestep=4)
    data = logged_data(episodes([3, 6], False))
    with pytest.raises(ValueError, match="episode 1 has 6 steps.*max_timestep=4"):
        replay_outputs(algo, data.observations, data.actions, data.rewards, data.lengths, 1.0)
    with pytest.raises(ValueError, match="rewards has 8 rows"):
        replay_outputs(algo, data.observations, data.actions, data.rewards[:8], data.lengths, 1.0)
    with pytest.raises(ValueError, match="action_size=2, the dataset has 3"):
        policy_probabilities(SequencePolicy(tiny(True), 1.0), logged_data(MDPDataset(
            np.zeros((4, 3), np.float32), np.array([0, 1, 2, 0]), np.zeros(4, np.float32),
            np.array([0, 0, 0, 1], np.float32), action_size=3)))


# ------------------------------------------------------------ FQE of a sequence policy
def truncated_buffer(discrete: bool):
    """Three episodes: terminated (5 steps), truncated with a final
    observation (4 steps) and truncated without one (3 steps)."""
    from offrl.dataset import Episode, create_infinite_replay_buffer

    rng = np.random.default_rng(7)
    out = []
    for length, terminated, final in ((5, True, False), (4, False, True), (3, False, False)):
        actions = rng.integers(0, 2, size=(length, 1)) if discrete else rng.uniform(-1, 1, (length, 2)).astype(np.float32)
        out.append(Episode(observations=rng.normal(size=(length, 3)).astype(np.float32), actions=actions,
                           rewards=rng.normal(size=(length, 1)).astype(np.float32), terminated=terminated,
                           final_observation=rng.normal(size=3).astype(np.float32) if final else None))
    return create_infinite_replay_buffer(episodes=out, action_space=None)


def stepped_next_actions(algo, buffer, target_return: float) -> List[np.ndarray]:
    """Per transition, in order: the greedy action the stepped wrapper
    (logged actions in its context) takes at the transition's next
    observation (the final observation after a truncated episode's last step)."""
    discrete = algo.get_action_type().name == "DISCRETE"
    out: List[np.ndarray] = []
    for episode in buffer.episodes:
        observations = list(episode.observations)
        if episode.final_observation is not None:
            observations.append(episode.final_observation)
        greedy: List[np.ndarray] = []
        t = [0]

        def sampler(output, episode=episode):
            greedy.append(np.argmax(output) if discrete else np.asarray(output))
            logged = np.asarray(episode.actions[min(t[0], episode.size() - 1)])
            return logged.reshape(()) if discrete else logged

        actor = algo.as_stateful_wrapper(target_return, sampler)
        for k, observation in enumerate(observations):
            t[0] = k
            actor.predict(observation, float(episode.rewards[k - 1, 0]) if k else 0.0)
        n_transitions = episode.size() if (episode.terminated or episode.final_observation is not None) \
            else episode.size() - 1
        out.extend(greedy[k + 1] for k in range(n_transitions) if not (episode.terminated and k == episode.size() - 1))
    return out


@pytest.mark.parametrize("discrete", [False, True], ids=["continuous", "discrete"])
def test_fqe_batches_carry_the_next_action_replayed_at_the_next_history(discrete):
    from offrl.metrics.transitions import TransitionSet

    algo = tiny(discrete)
    buffer = truncated_buffer(discrete)
    policy = SequencePolicy(algo, 2.5)
    replayed = policy.replay_next_actions(buffer)
    assert replayed.buffer is buffer.buffer  # the same store, no copy
    batch = next(TransitionSet(replayed, replayed.transition_picker).batches())
    terminal = batch.terminals.reshape(-1) == 1
    logged = buffer.sample_transition_batch(2).next_actions  # the replayed ones keep the logged layout
    assert batch.next_actions.shape[1:] == logged.shape[1:] and batch.next_actions.dtype == logged.dtype
    expected = np.stack(stepped_next_actions(algo, buffer, 2.5))
    got = batch.next_actions[~terminal].reshape(expected.shape)
    if discrete:
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    policy.check_replayed(batch)
    with pytest.raises(ValueError, match="replay_next_actions"):
        policy.check_replayed(buffer.sample_transition_batch(4))


@pytest.mark.parametrize("discrete", [False, True], ids=["continuous", "discrete"])
def test_fqe_evaluates_a_sequence_policy_and_feeds_doubly_robust(discrete, tmp_path):
    from offrl.metrics import TDErrorEvaluator
    from offrl.ope import FQE, DiscreteFQE, DiscreteFQEConfig, FQEConfig

    dataset = episodes([5, 6, 4, 7, 5], discrete)
    algo = tiny(discrete)
    algo.fit(dataset, n_steps=2, n_steps_per_epoch=2, **QUIET)
    policy = SequencePolicy(algo, target_return=3.0)
    fqe_cls, config_cls = (DiscreteFQE, DiscreteFQEConfig) if discrete else (FQE, FQEConfig)
    fqe = fqe_cls(algo=policy, config=config_cls(encoder_factory=VectorEncoderFactory(hidden_units=[8]),
                                                 batch_size=8))
    results = fqe.fit(dataset, n_steps=6, n_steps_per_epoch=3, **QUIET)
    assert math.isfinite(results[-1][1]["loss"]) and math.isfinite(results[-1][1]["fqe_heldout_residual"])
    with pytest.warns(UserWarning, match="settled"):
        estimate = fqe.estimate_policy_value(dataset, n_bootstrap=20)
    # V(s0) is Q at the first-step action: the stateful wrapper's first action from s0 alone
    first = np.stack([e.observations[0] for e in dataset.episodes])
    actions = []
    for observation in first:
        output = algo.predict(offrl.algos.TransformerInput(
            observation[None], np.zeros((1,), np.int64) if discrete else np.zeros((1, 2), np.float32),
            np.zeros((1, 1), np.float32), np.full((1, 1), 3.0, np.float32), np.zeros(1, np.int64)))
        actions.append(np.argmax(output) if discrete else output)
    np.testing.assert_allclose(estimate.initial_values, fqe.predict_value(first, np.stack(actions)), rtol=1e-5)
    # the TD error bootstraps with the replayed next action, as by hand
    data = logged_data(dataset)
    table = replay_outputs(algo, data.observations, data.actions, data.rewards, data.lengths, 3.0)
    greedy = table.argmax(axis=1) if discrete else table.astype(np.float32)
    rows = np.arange(data.n_steps)
    last = np.isin(rows, np.cumsum(data.lengths) - 1)
    nxt = np.minimum(rows + 1, data.n_steps - 1)
    q = fqe.predict_value(data.observations, data.actions)
    next_q = fqe.predict_value(data.observations[nxt], greedy[nxt])
    expected = np.mean((q - data.rewards - algo.gamma * np.where(last, 0.0, next_q)) ** 2)
    assert TDErrorEvaluator()(fqe, dataset) == pytest.approx(expected, rel=1e-4)
    mu = np.full(data.n_steps, 0.5 if discrete else 0.25)
    result = estimate_policy_value(policy, dataset, "wdr", q_model=fqe, behaviour_probabilities=mu, bandwidth=3.0,
                                   n_bootstrap=20)
    assert math.isfinite(result.value)
    with pytest.raises(ValueError, match="replay_next_actions"):
        fqe.update(dataset.sample_transition_batch(4))
    fqe.save(tmp_path / "fqe.d3")  # saved and loaded back with the same SequencePolicy
    loaded = fqe_cls.load(tmp_path / "fqe.d3", algo=policy)
    np.testing.assert_array_equal(loaded.predict_value(first, np.stack(actions)), fqe.predict_value(first, np.stack(actions)))
