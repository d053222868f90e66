"""Decision Transformer family: losses of one update reproduced by hand from
the same weights on a hand-built 2-window batch, the discrete token
learning-rate schedule, the stateful wrapper against explicitly built
contexts, the action samplers, save / load, bad input, evaluation in an
environment during ``fit`` and (slow) return-conditioned behaviour."""

from __future__ import annotations

import copy
import json
import math
from typing import Any, Optional

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium import spaces

import offrl
from offrl.algos import (
    DecisionTransformerConfig,
    DiscreteDecisionTransformerConfig,
    GreedyTransformerActionSampler,
    IdentityTransformerActionSampler,
    SoftmaxTransformerActionSampler,
    TACRConfig,
    TransformerInput,
)
from offrl.algos.decision_transformer import token_learning_rate_factor
from offrl.constants import PositionEncodingType
from offrl.dataset import MDPDataset, TrajectoryMiniBatch
from offrl.logging import FileAdapterFactory, NoopAdapterFactory
from offrl.models import SGDFactory, VectorEncoderFactory

QUIET = dict(logger_adapter=NoopAdapterFactory(), show_progress=False)
NO_DROPOUT = dict(attn_dropout=0.0, resid_dropout=0.0, embed_dropout=0.0)


def _small(config_cls, **kwargs):
    """A small, dropout-free config (hand computations need determinism)."""
    encoder = "actor_encoder_factory" if config_cls is TACRConfig else "encoder_factory"
    extra = {} if config_cls is TACRConfig else {"learning_rate": 1.0, "optim_factory": SGDFactory()}
    kwargs = {encoder: VectorEncoderFactory(hidden_units=[8]), "num_layers": 1, "num_heads": 2, "context_size": 3,
              "max_timestep": 10, **NO_DROPOUT, **extra, **kwargs}
    return config_cls(**kwargs)


def _hand_batch(discrete: bool) -> TrajectoryMiniBatch:
    """Two windows of 3 steps; the second is front-padded by one step (an
    episode that had only two steps so far)."""
    obs = np.array([[[0.1, 0.2, -0.3], [0.3, -0.1, 0.0], [-0.5, 0.4, 0.2]],
                    [[0.0, 0.0, 0.0], [0.0, 1.0, -1.0], [0.6, -0.3, 0.1]]], dtype=np.float32)
    if discrete:
        actions = np.array([[[1], [0], [2]], [[0], [2], [1]]], dtype=np.int64)
    else:
        actions = np.array([[[0.5, -0.2], [-0.9, 0.1], [0.0, 0.7]], [[0.0, 0.0], [0.3, 0.3], [-0.4, 0.8]]],
                           dtype=np.float32)
    rewards = np.array([[[1.0], [0.0], [-1.0]], [[0.0], [0.5], [2.0]]], dtype=np.float32)
    rtg = np.array([[[3.0], [2.0], [2.0]], [[0.0], [2.5], [2.0]]], dtype=np.float32)
    terminals = np.array([[[0.0], [0.0], [0.0]], [[0.0], [0.0], [1.0]]], dtype=np.float32)
    return TrajectoryMiniBatch(observations=obs, actions=actions, rewards=rewards, returns_to_go=rtg,
                               terminals=terminals, timesteps=np.array([[4, 5, 6], [0, 0, 1]]),
                               masks=np.array([[1.0, 1.0, 1.0], [0.0, 1.0, 1.0]], dtype=np.float32), length=3)


def _inputs(batch: TrajectoryMiniBatch):
    obs, rtg = torch.from_numpy(batch.observations), torch.from_numpy(batch.returns_to_go)
    actions = torch.from_numpy(batch.actions)
    return obs, (actions if actions.dtype == torch.int64 else actions.float()), rtg, torch.from_numpy(batch.timesteps)


def _valid_steps(batch: TrajectoryMiniBatch):
    return [(b, t) for b in range(2) for t in range(3) if batch.masks[b, t] == 1.0]


def _unpadded_outputs(model, batch: TrajectoryMiniBatch):
    """``{(b, t): output}`` at every unpadded step, each window run alone
    without its front padding (what the paper's attention mask means: the
    padding is invisible to the real steps)."""
    obs, actions, rtg, steps = _inputs(batch)
    outputs = {}
    for b in range(batch.masks.shape[0]):
        pad = int((batch.masks[b] == 0).sum())
        out = model(obs[b:b + 1, pad:], actions[b:b + 1, pad:], rtg[b:b + 1, pad:], steps[b:b + 1, pad:])[0]
        outputs.update({(b, pad + i): out[i] for i in range(out.shape[0])})
    return outputs


# ------------------------------------------------------------ hand-computed losses
def test_decision_transformer_loss_and_gradient_by_hand():
    offrl.seed(0)
    algo = _small(DecisionTransformerConfig).create()
    algo.create_impl((3,), 2)
    before = copy.deepcopy(algo.modules["transformer"])
    batch = _hand_batch(False)
    actions = _inputs(batch)[1]
    predicted = _unpadded_outputs(before, batch)
    terms = [sum((predicted[b, t][j] - actions[b, t, j]) ** 2 for j in range(2)) / 2 for b, t in _valid_steps(batch)]
    expected = sum(terms) / len(terms)
    expected.backward()
    losses = algo.update(batch)
    assert losses["loss"] == pytest.approx(float(expected.detach()), rel=1e-5)
    # SGD with learning rate 1: every weight moved by minus the hand loss's gradient
    for (name, old), new in zip(before.named_parameters(), algo.modules["transformer"].parameters()):
        grad = old.grad if old.grad is not None else torch.zeros_like(old)
        torch.testing.assert_close(new.detach(), (old - grad).detach(), rtol=1e-5, atol=1e-6, msg=name)


def test_discrete_decision_transformer_cross_entropy_and_token_schedule():
    offrl.seed(0)
    config = _small(DiscreteDecisionTransformerConfig, learning_rate=0.5, warmup_tokens=10, final_tokens=30,
                    optim_factory=SGDFactory())
    algo = config.create()
    algo.create_impl((3,), 3)
    before = copy.deepcopy(algo.modules["transformer"])
    batch = _hand_batch(True)
    actions = _inputs(batch)[1]
    with torch.no_grad():
        logits = _unpadded_outputs(before, batch)
    terms = []
    for b, t in _valid_steps(batch):
        row = [float(v) for v in logits[b, t]]
        log_total = math.log(sum(math.exp(v) for v in row))
        terms.append(log_total - row[int(actions[b, t, 0])])
    losses = algo.update(batch)
    assert losses["loss"] == pytest.approx(sum(terms) / len(terms), rel=1e-5)
    # 5 unpadded steps of 10 warm-up tokens: half the learning rate
    assert losses["learning_rate"] == pytest.approx(0.25)
    assert algo.optimizers["optim"].optim.param_groups[0]["lr"] == pytest.approx(0.25)
    assert int(algo.modules["token_counter"].tokens) == 5
    for _ in range(3):
        losses = algo.update(batch)
    # 20 tokens: the cosine decay is half-way from 10 to 30
    assert losses["learning_rate"] == pytest.approx(0.5 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    # the count is part of the state: a loaded copy continues from it
    fresh = config.create()
    fresh.create_impl((3,), 3)
    fresh.load_state(algo.get_state())
    fresh.update(batch)
    assert int(fresh.modules["token_counter"].tokens) == 25


def test_token_learning_rate_factor():
    assert token_learning_rate_factor(0, 100, 1000) == 0.0
    assert token_learning_rate_factor(50, 100, 1000) == pytest.approx(0.5)
    assert token_learning_rate_factor(100, 100, 1000) == pytest.approx(1.0)
    assert token_learning_rate_factor(550, 100, 1000) == pytest.approx(0.5)
    assert token_learning_rate_factor(1000, 100, 1000) == pytest.approx(0.1)  # floor of 10%
    assert token_learning_rate_factor(10**9, 100, 1000) == pytest.approx(0.1)


def test_tacr_losses_by_hand():
    offrl.seed(0)
    config = _small(TACRConfig, critic_encoder_factory=VectorEncoderFactory(hidden_units=[8]),
                    target_smoothing_sigma=0.0, gamma=0.9, alpha=2.0, tau=0.5)
    algo = config.create()
    algo.create_impl((3,), 2)
    with torch.no_grad():  # a target that differs from the critics shows which one is used where
        for p in algo.modules["targ_q_function"].parameters():
            p.add_(0.1 * torch.randn_like(p))
    actor, q_before = copy.deepcopy(algo.modules["transformer"]), copy.deepcopy(algo.modules["q_function"])
    target_before = copy.deepcopy(algo.modules["targ_q_function"])
    batch = _hand_batch(False)
    obs, actions = _inputs(batch)[:2]
    with torch.no_grad():
        predicted = _unpadded_outputs(actor, batch)
    pairs = [(b, t) for b in range(2) for t in range(2) if batch.masks[b, t] == 1 and batch.masks[b, t + 1] == 1]
    critic = 0.0
    with torch.no_grad():
        for b, t in pairs:
            target_values = target_before.expected(obs[b, t + 1][None], predicted[b, t + 1][None])[:, 0, 0]
            y = float(batch.rewards[b, t, 0]) + 0.9 * (1 - float(batch.terminals[b, t, 0])) * float(target_values.min())
            values = q_before.expected(obs[b, t][None], actions[b, t][None])[:, 0, 0]
            critic += sum(float(v - y) ** 2 for v in values) / len(pairs)
    losses = algo.update(batch)
    assert losses["critic_loss"] == pytest.approx(critic, rel=1e-5)
    # the actor step uses the critics after their step
    q_after = algo.modules["q_function"]
    with torch.no_grad():
        q_first = {(b, t): float(q_after.expected(obs[b, t][None], predicted[b, t][None])[0, 0, 0])
                   for b, t in _valid_steps(batch)}
        lam = 2.0 / (sum(abs(v) for v in q_first.values()) / len(q_first))
        actor_terms = [-lam * q_first[b, t] + float(((predicted[b, t] - actions[b, t]) ** 2).mean())
                       for b, t in _valid_steps(batch)]
    assert losses["actor_loss"] == pytest.approx(sum(actor_terms) / len(actor_terms), rel=1e-5)
    # targets moved half-way to the critics
    for old, new, online in zip(target_before.parameters(), algo.modules["targ_q_function"].parameters(),
                                q_after.parameters()):
        torch.testing.assert_close(new, 0.5 * old + 0.5 * online.detach(), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------ stateful wrapper
def _built(config, observation_size: int = 3, action_size: int = 2):
    offrl.seed(0)
    algo = config.create()
    algo.create_impl((observation_size,), action_size)
    return algo


def test_wrapper_acts_like_predict_on_the_explicit_context():
    algo = _built(_small(DecisionTransformerConfig, context_size=3, max_timestep=20))
    rng = np.random.default_rng(0)
    observations = rng.normal(size=(6, 3)).astype(np.float32)
    rewards = [0.0, 1.0, -0.5, 2.0, 0.25, 1.0]  # reward passed with observation k is that of step k - 1
    actor = algo.as_stateful_wrapper(target_return=10.0)
    history_actions, rtg = [], []
    for k in range(6):
        action = actor.predict(observations[k], rewards[k])
        rtg.append(10.0 - sum(rewards[1:k + 1]))
        start = max(0, k - 2)
        context = TransformerInput(
            observations=observations[start:k + 1],
            actions=np.stack(history_actions[start:k] + [np.zeros(2, np.float32)]),
            rewards=np.zeros((k + 1 - start, 1), np.float32),
            returns_to_go=np.array(rtg[start:k + 1], np.float32)[:, None],
            timesteps=np.arange(start, k + 1))
        np.testing.assert_allclose(action, algo.predict(context), rtol=1e-5, atol=1e-6)
        assert action.shape == (2,) and action.dtype == np.float32
        history_actions.append(action)
        kept = actor.context()
        assert kept.length == min(k + 1, 3)
        np.testing.assert_array_equal(kept.timesteps, np.arange(start, k + 1))
        np.testing.assert_allclose(kept.returns_to_go[:, 0], rtg[start:k + 1])
    actor.reset()
    again = actor.predict(observations[0], 123.0)  # the first reward of an episode is ignored
    np.testing.assert_allclose(again, history_actions[0], rtol=1e-6)


def test_wrapper_refuses_timesteps_beyond_max_timestep():
    algo = _built(_small(DecisionTransformerConfig, max_timestep=3))
    actor = algo.as_stateful_wrapper(target_return=1.0)
    for _ in range(4):  # timesteps 0..3
        actor.predict(np.zeros(3, np.float32), 0.0)
    with pytest.raises(ValueError, match="max_timestep=3"):
        actor.predict(np.zeros(3, np.float32), 0.0)


def test_discrete_wrapper_samples_by_default_and_feeds_back_indices():
    from offrl.algos import StatefulTransformerWrapper

    algo = _built(_small(DiscreteDecisionTransformerConfig), action_size=3)
    default = algo.as_stateful_wrapper(target_return=5.0)
    assert isinstance(default, StatefulTransformerWrapper)
    assert isinstance(default.action_sampler, SoftmaxTransformerActionSampler)  # d3rlpy's default
    actor = algo.as_stateful_wrapper(target_return=5.0, action_sampler=GreedyTransformerActionSampler())
    obs = np.random.default_rng(1).normal(size=(4, 3)).astype(np.float32)
    chosen = []
    for k in range(4):
        action = actor.predict(obs[k], 1.0)
        assert isinstance(action, int) and 0 <= action < 3
        assert action == int(np.argmax(algo.predict(actor.context())))
        chosen.append(action)
    np.testing.assert_array_equal(actor.context().actions[:-1], chosen[-3:-1])


@pytest.mark.parametrize("discrete,position", [(False, PositionEncodingType.SIMPLE), (True, PositionEncodingType.SIMPLE),
                                               (True, PositionEncodingType.GLOBAL)])
@pytest.mark.parametrize("num_layers", [1, 2])
def test_wrapper_context_buffers_match_explicit_contexts_over_long_episodes(discrete, position, num_layers):
    """The wrapper keeps its context in sliding tensor buffers (moved to the
    front every context_size steps) and, with the SIMPLE position encoding,
    each token's embedding and first-block products, computed once: over 3
    windows' worth of steps, across a reset, with observation and reward
    scalers, each action equals ``predict`` on the explicit context; a bad
    observation changes nothing."""
    from offrl.preprocessing import MultiplyRewardScaler, StandardObservationScaler

    config_cls = DiscreteDecisionTransformerConfig if discrete else DecisionTransformerConfig
    config = _small(config_cls, context_size=4, max_timestep=30, position_encoding_type=position,
                    num_layers=num_layers,
                    observation_scaler=StandardObservationScaler(mean=[0.5, -1.0, 2.0], std=[2.0, 0.5, 1.5]),
                    reward_scaler=MultiplyRewardScaler(0.1))
    algo = _built(config, action_size=3)
    sampler = GreedyTransformerActionSampler() if discrete else None
    actor = algo.as_stateful_wrapper(target_return=7.0, action_sampler=sampler)
    rng = np.random.default_rng(3)
    for episode_length in (13, 6):
        for k in range(episode_length):
            action = actor.predict(rng.normal(size=3).astype(np.float32), float(rng.normal()))
            assert (actor._ring["tokens"] is not None) == (position == PositionEncodingType.SIMPLE)
            expected = algo.predict(actor.context())
            if discrete:
                assert action == int(np.argmax(expected))
            else:
                np.testing.assert_allclose(action, expected, rtol=1e-5, atol=1e-6)
            assert actor.context().length == min(k + 1, 4)
        before = actor.context()
        with pytest.raises(ValueError, match="x"):
            actor.predict(np.array([0.0, np.nan, 0.0], np.float32), 0.0)
        after = actor.context()
        np.testing.assert_array_equal(after.timesteps, before.timesteps)
        np.testing.assert_array_equal(after.returns_to_go, before.returns_to_go)
        actor.reset()


def test_wrapper_predicts_in_eval_mode_and_restores_training_mode():
    """With dropout, the wrapper's steps run every module in eval mode (the
    flags are set from a cached module list) and leave them training."""
    algo = _built(_small(DecisionTransformerConfig, attn_dropout=0.5, resid_dropout=0.5, embed_dropout=0.5))
    observations = np.random.default_rng(4).normal(size=(5, 3)).astype(np.float32)
    first, second = algo.as_stateful_wrapper(2.0), algo.as_stateful_wrapper(2.0)
    for k in range(5):
        np.testing.assert_array_equal(first.predict(observations[k], 0.5), second.predict(observations[k], 0.5))
        np.testing.assert_array_equal(first.context().timesteps, np.arange(max(0, k - 2), k + 1))
    modules = list(algo.modules.modules())
    assert len(modules) > 10 and all(m.training for m in modules)


def test_wrapper_bad_arguments():
    algo = _built(_small(DecisionTransformerConfig))
    with pytest.raises(ValueError, match="target_return"):
        algo.as_stateful_wrapper(target_return=float("nan"))
    with pytest.raises(TypeError, match="action_sampler"):
        algo.as_stateful_wrapper(1.0, action_sampler="greedy")
    actor = algo.as_stateful_wrapper(1.0)
    with pytest.raises(ValueError, match="reward"):
        actor.predict(np.zeros(3, np.float32), float("inf"))
    with pytest.raises(RuntimeError, match="no networks"):
        DecisionTransformerConfig().create().as_stateful_wrapper(1.0)


# ------------------------------------------------------------ samplers
def test_samplers():
    logits = np.array([0.5, 2.0, -1.0])
    assert GreedyTransformerActionSampler()(logits) == 1
    assert IdentityTransformerActionSampler()(logits) is logits
    offrl.seed(3)
    sampler = SoftmaxTransformerActionSampler(temperature=2.0)
    draws = np.array([sampler(logits) for _ in range(20000)])
    probs = np.exp(logits / 2.0) / np.exp(logits / 2.0).sum()
    np.testing.assert_allclose(np.bincount(draws, minlength=3) / len(draws), probs, atol=0.015)
    offrl.seed(3)
    assert [sampler(logits) for _ in range(50)] == list(draws[:50])  # offrl.seed fixes the draws
    cold = SoftmaxTransformerActionSampler(temperature=1e-3)
    assert {cold(logits) for _ in range(100)} == {1}
    with pytest.raises(ValueError, match="temperature"):
        SoftmaxTransformerActionSampler(temperature=0.0)


# ------------------------------------------------------------ bad input
def _context(length: int, **changes: Any) -> TransformerInput:
    fields = dict(observations=np.zeros((length, 3), np.float32), actions=np.zeros((length, 2), np.float32),
                  rewards=np.zeros((length, 1), np.float32), returns_to_go=np.ones((length, 1), np.float32),
                  timesteps=np.arange(length))
    fields.update(changes)
    return TransformerInput(**fields)


def test_predict_bad_input():
    algo = _built(_small(DecisionTransformerConfig, context_size=3, max_timestep=10))
    assert algo.predict(_context(2)).shape == (2,)
    with pytest.raises(ValueError, match="returns_to_go has 3 steps, actions has 2"):
        algo.predict(_context(2, returns_to_go=np.ones((3, 1), np.float32)))
    with pytest.raises(ValueError, match="observations has 1 steps"):
        algo.predict(_context(2, observations=np.zeros((1, 3), np.float32)))
    with pytest.raises(ValueError, match="context_size=3"):
        algo.predict(_context(4))
    with pytest.raises(ValueError, match="max_timestep=10"):
        algo.predict(_context(2, timesteps=np.array([10, 11])))
    with pytest.raises(ValueError, match="returns_to_go"):
        algo.predict(_context(2, returns_to_go=np.array([[1.0], [np.nan]], np.float32)))
    with pytest.raises(ValueError, match=r"actions must have shape \(2, 2\)"):
        algo.predict(_context(2, actions=np.zeros((2, 3), np.float32)))
    with pytest.raises(TypeError, match="TransformerInput"):
        algo.predict(np.zeros((1, 3), np.float32))
    with pytest.raises(NotImplementedError, match="as_stateful_wrapper"):
        algo.sample_action(np.zeros((1, 3), np.float32))
    with pytest.raises(NotImplementedError, match="offline only"):
        algo.fit_online(SignEnv())


def test_discrete_predict_refuses_out_of_range_actions():
    algo = _built(_small(DiscreteDecisionTransformerConfig), action_size=3)
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        algo.predict(_context(2, actions=np.array([0, 3])))


@pytest.mark.parametrize("config_cls,field,value,error", [
    (DecisionTransformerConfig, "context_size", 0, ValueError),
    (DecisionTransformerConfig, "max_timestep", -1, ValueError),
    (DecisionTransformerConfig, "attn_dropout", 1.0, ValueError),
    (DecisionTransformerConfig, "activation_type", "sigmoidish", ValueError),
    (DecisionTransformerConfig, "position_encoding_type", "local", ValueError),
    (DecisionTransformerConfig, "position_encoding_type", 3, TypeError),
    (DiscreteDecisionTransformerConfig, "warmup_tokens", 0, ValueError),
    (DiscreteDecisionTransformerConfig, "embed_activation_type", "x", ValueError),
    (TACRConfig, "tau", 0.0, ValueError),
    (TACRConfig, "n_critics", 0, ValueError),
])
def test_bad_config_values_name_the_field(config_cls, field, value, error):
    with pytest.raises(error, match=field):
        config_cls(**{field: value})


def test_final_tokens_must_exceed_warmup_tokens():
    with pytest.raises(ValueError, match="final_tokens"):
        DiscreteDecisionTransformerConfig(warmup_tokens=100, final_tokens=100)


def test_position_encoding_by_name_and_json_round_trip():
    config = DecisionTransformerConfig(position_encoding_type="global")
    assert config.position_encoding_type is PositionEncodingType.GLOBAL
    data = config.to_dict()
    assert data["params"]["position_encoding_type"] == "global"
    assert type(config).from_dict(data).position_encoding_type is PositionEncodingType.GLOBAL
    assert json.loads(config.serialize())["position_encoding_type"] == "global"


def _episodes_dataset(lengths, discrete: bool = False, seed: int = 0) -> MDPDataset:
    rng = np.random.default_rng(seed)
    n = sum(lengths)
    terminals = np.zeros(n, np.float32)
    terminals[np.cumsum(lengths) - 1] = 1.0
    actions = rng.integers(0, 2, size=n) if discrete else rng.uniform(-1, 1, size=(n, 2)).astype(np.float32)
    return MDPDataset(rng.normal(size=(n, 3)).astype(np.float32), actions, rng.normal(size=n).astype(np.float32),
                      terminals, action_size=2 if discrete else None)


def test_fit_refuses_episodes_longer_than_max_timestep_and_eval_env_without_target():
    algo = _small(DecisionTransformerConfig, max_timestep=5, batch_size=4).create()
    with pytest.raises(ValueError, match="max_timestep=5"):
        algo.fit(_episodes_dataset([20, 20]), n_steps=3, **QUIET)
    with pytest.raises(ValueError, match="eval_target_return"):
        _small(DecisionTransformerConfig).create().fit(_episodes_dataset([4, 4]), n_steps=1,
                                                        eval_env=gymnasium.make("Pendulum-v1"), **QUIET)


def test_an_empty_dataset_is_refused():
    from offrl.dataset import InfiniteBuffer, ReplayBuffer

    with pytest.raises(ValueError, match="no episodes"):
        _small(DecisionTransformerConfig).create().fit(ReplayBuffer(InfiniteBuffer()), n_steps=1, **QUIET)


def test_short_episodes_are_padded_and_train():
    algo = _small(DecisionTransformerConfig, context_size=5, batch_size=8).create()
    results = algo.fit(_episodes_dataset([1, 2, 3]), n_steps=2, n_steps_per_epoch=2, **QUIET)
    assert np.isfinite(results[-1][1]["loss"])


# ------------------------------------------------------------ save / load, from_json
@pytest.mark.parametrize("config_cls", [DecisionTransformerConfig, DiscreteDecisionTransformerConfig, TACRConfig])
def test_save_load_and_from_json(config_cls, tmp_path):
    discrete = config_cls is DiscreteDecisionTransformerConfig
    dataset = _episodes_dataset([6, 7, 5], discrete=discrete)
    offrl.seed(0)
    kwargs = {} if config_cls is TACRConfig else {"learning_rate": 1e-3, "optim_factory": offrl.models.AdamFactory()}
    algo = _small(config_cls, batch_size=4, **kwargs).create()
    algo.fit(dataset, n_steps=3, n_steps_per_epoch=3, logger_adapter=FileAdapterFactory(str(tmp_path / "logs")),
             show_progress=False, experiment_name="dt", with_timestamp=False)
    path = tmp_path / "dt.d3"
    algo.save(path)
    loaded = offrl.load_learnable(path)
    assert type(loaded) is type(algo) and loaded.grad_step == 3
    context = _context(3, actions=np.array([0, 1, 1]) if discrete else np.zeros((3, 2), np.float32))
    np.testing.assert_array_equal(loaded.predict(context), algo.predict(context))
    if discrete:
        assert int(loaded.modules["token_counter"].tokens) == int(algo.modules["token_counter"].tokens) > 0
    rebuilt = type(algo).from_json(str(tmp_path / "logs" / "dt" / "params.json"))
    assert rebuilt.config.to_dict() == algo.config.to_dict()


def test_registry_resolves_the_family():
    from offrl.algos.registry import resolve_algorithm

    for name in ("decision_transformer", "discrete_decision_transformer", "tacr"):
        assert resolve_algorithm(name) is not None


# ------------------------------------------------------------ evaluation during fit
class SignEnv(gymnasium.Env):
    """Episodes of ``length`` steps, observation ``[t / length]``; reward 1
    for a positive action (action 1 when discrete), else 0."""

    def __init__(self, length: int = 5, discrete: bool = False) -> None:
        self.length, self.discrete, self.t = length, discrete, 0
        self.observation_space = spaces.Box(0.0, 1.0, (1,), np.float32)
        self.action_space = spaces.Discrete(2) if discrete else spaces.Box(-1.0, 1.0, (1,), np.float32)

    def _obs(self) -> np.ndarray:
        return np.array([self.t / self.length], np.float32)

    def reset(self, *, seed: Optional[int] = None, options: Any = None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        good = int(action) == 1 if self.discrete else float(np.asarray(action).reshape(-1)[0]) > 0
        self.t += 1
        return self._obs(), float(good), self.t >= self.length, False, {}


def _sign_dataset(discrete: bool, n_episodes: int = 40, length: int = 5) -> MDPDataset:
    """Half the episodes act well throughout (return ``length``), half badly (return 0)."""
    observations, actions, rewards = [], [], []
    for e in range(n_episodes):
        good = e % 2 == 0
        for t in range(length):
            observations.append([t / length])
            actions.append((1 if good else 0) if discrete else [0.8 if good else -0.8])
            rewards.append(1.0 if good else 0.0)
    terminals = np.zeros(len(rewards), np.float32)
    terminals[length - 1::length] = 1.0
    return MDPDataset(np.asarray(observations, np.float32), np.asarray(actions) if discrete else
                      np.asarray(actions, np.float32), np.asarray(rewards, np.float32), terminals,
                      action_size=2 if discrete else None)


def test_fit_evaluates_in_the_environment_at_the_target_return():
    offrl.seed(0)
    algo = _small(DecisionTransformerConfig, batch_size=4, max_timestep=10).create()
    results = algo.fit(_sign_dataset(False, n_episodes=4), n_steps=2, n_steps_per_epoch=1, eval_env=SignEnv(),
                       eval_target_return=5.0, **QUIET)
    for _, metrics in results:
        assert 0.0 <= metrics["environment"] <= 5.0
        assert metrics["environment"] == int(metrics["environment"])


def _learned_returns(discrete: bool, n_steps: int) -> tuple:
    offrl.seed(0)
    cls = DiscreteDecisionTransformerConfig if discrete else DecisionTransformerConfig
    extra = {"warmup_tokens": 100, "final_tokens": 100000} if discrete else {}
    config = cls(batch_size=32, context_size=5, max_timestep=10, learning_rate=1e-3, num_heads=1, num_layers=1,
                 encoder_factory=VectorEncoderFactory(hidden_units=[32]), **NO_DROPOUT, **extra)
    algo = config.create()
    algo.fit(_sign_dataset(discrete), n_steps=n_steps, n_steps_per_epoch=n_steps, **QUIET)
    env = SignEnv(discrete=discrete)
    sampler = GreedyTransformerActionSampler() if discrete else None
    return tuple(offrl.metrics.evaluate_transformer_with_environment(algo.as_stateful_wrapper(target, sampler), env,
                                                                     n_trials=2)
                 for target in (5.0, 0.0))


@pytest.mark.slow
@pytest.mark.parametrize("discrete", [False, True])
def test_return_conditioning_selects_the_behaviour(discrete):
    """Conditioned on the best logged return the policy imitates the good
    behaviour; conditioned on 0, the bad one."""
    high, low = _learned_returns(discrete, n_steps=300)
    assert high == 5.0
    assert low == 0.0


# ------------------------------------------------------------ export
@pytest.mark.parametrize("ext", [".pt", ".onnx"])
def test_exported_step_matches_predict_at_every_context_length(ext, tmp_path):
    from offrl.export import load_onnx_policy, load_torchscript_policy

    algo = _built(_small(DecisionTransformerConfig, context_size=4, max_timestep=50,
                         position_encoding_type=PositionEncodingType.GLOBAL))
    path = tmp_path / f"dt{ext}"
    algo.save_policy(path)
    policy = (load_torchscript_policy if ext == ".pt" else load_onnx_policy)(path)
    assert json.loads(policy.metadata["inputs"]) == ["input_0", "actions", "returns_to_go", "timesteps"]
    assert policy.metadata["context_size"] == "4"
    rng = np.random.default_rng(0)
    for length in range(1, 5):
        context = _context(length, observations=rng.normal(size=(length, 3)).astype(np.float32),
                           actions=rng.uniform(-1, 1, size=(length, 2)).astype(np.float32),
                           returns_to_go=rng.normal(size=(length, 1)).astype(np.float32),
                           timesteps=np.arange(length) + 7)
        got = policy(context.observations[None], context.actions[None], context.returns_to_go[None],
                     context.timesteps[None].astype(np.float32))
        assert got.shape == (1, 2)
        np.testing.assert_allclose(got[0], algo.predict(context), rtol=1e-5, atol=1e-5)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"dt{ext}"]


def test_export_refuses_other_extensions(tmp_path):
    algo = _built(_small(DecisionTransformerConfig))
    with pytest.raises(ValueError, match=".onnx"):
        algo.save_policy(tmp_path / "dt.zip")
    assert list(tmp_path.iterdir()) == []


def test_environment_evaluator_runs_a_sequence_model_at_a_target_return():
    """d3rlpy issue 406: its evaluators do not apply to Decision Transformers."""
    from offrl.metrics import EnvironmentEvaluator

    offrl.seed(0)
    algo = _small(DecisionTransformerConfig, max_timestep=10).create()
    algo.create_impl((1,), 1)
    env = SignEnv()
    score = EnvironmentEvaluator(env, n_trials=2, target_return=5.0)(algo)
    expected = offrl.metrics.evaluate_transformer_with_environment(algo.as_stateful_wrapper(5.0), env, 2)
    assert score == expected and 0.0 <= score <= 5.0
    with pytest.raises(ValueError, match="target_return"):
        EnvironmentEvaluator(env, n_trials=1)(algo)
    results = algo.fit(_sign_dataset(False, n_episodes=4), n_steps=1, n_steps_per_epoch=1,
                       evaluators={"env": EnvironmentEvaluator(env, n_trials=1, target_return=5.0)}, **QUIET)
    assert 0.0 <= results[0][1]["env"] <= 5.0


def test_cli_auto_evaluators_leave_out_what_does_not_apply_to_sequence_models():
    from offrl.cli import build_evaluators

    algo = _built(_small(DecisionTransformerConfig))
    assert build_evaluators(["auto"], algo, _episodes_dataset([4, 4]).episodes, None) == {}


@pytest.mark.parametrize("config_cls", [DecisionTransformerConfig, DiscreteDecisionTransformerConfig, TACRConfig])
def test_the_wrapper_keeps_step_tokens_for_the_built_in_predictors_only(config_cls):
    algo = _built(_small(config_cls, position_encoding_type=PositionEncodingType.SIMPLE))
    transformer = algo.modules["transformer"]
    assert algo.as_stateful_wrapper(target_return=1.0)._caches_tokens(transformer)  # SIMPLE encoding, built-in path

    class Overriding(type(algo)):  # a subclass with its own prediction: the whole context is embedded each step
        def _predict_sequence(self, observations, actions, returns_to_go, timesteps):
            return super()._predict_sequence(observations, actions, returns_to_go, timesteps)

    algo.__class__ = Overriding
    assert not algo.as_stateful_wrapper(target_return=1.0)._caches_tokens(transformer)
    # GLOBAL encoding (the discrete model's default) embeds a token by its place in the window: never kept
    by_place = _built(_small(config_cls, position_encoding_type=PositionEncodingType.GLOBAL))
    assert not by_place.as_stateful_wrapper(target_return=1.0)._caches_tokens(by_place.modules["transformer"])
