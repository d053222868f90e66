"""fit_online / collect: buffer contents and episode endings, the update
schedule, metrics, hooks, seeding, interruption safety, bad input, and
learning on tiny environments."""

from __future__ import annotations

import glob
import importlib
import os
import pkgutil

import numpy as np
import pytest

import offrl
import offrl.algos
from offrl.algos import (
    ConstantEpsilonGreedy,
    DiscreteRandomPolicyConfig,
    DQNConfig,
    LinearDecayEpsilonGreedy,
    LinearInterpolationHook,
    NormalNoise,
    RandomPolicyConfig,
    SACConfig,
    combine_callbacks,
    set_config,
    set_learning_rate,
)
from offrl.constants import ActionSpace
from offrl.dataset import (
    ReplayBuffer,
    create_fifo_replay_buffer,
    create_infinite_replay_buffer,
    create_prioritized_replay_buffer,
)
from offrl.logging import FileAdapterFactory, NoopAdapterFactory
from offrl.models import VectorEncoderFactory
from offrl.preprocessing import MinMaxActionScaler, StandardObservationScaler
from offrl.serialization import load_learnable, registered

from envs import ContinuousCorridor, Corridor, ScriptedEnv, scripted_episodes

NOOP = NoopAdapterFactory()
SCRIPT = [(3, "terminated"), (4, "truncated"), (1, "terminated"), (2, "truncated")]


def small_dqn(**kwargs) -> offrl.algos.DQN:
    params = dict(batch_size=8, encoder_factory=VectorEncoderFactory(hidden_units=[16]), learning_rate=1e-3)
    params.update(kwargs)
    return DQNConfig(**params).create()


def small_sac(**kwargs) -> offrl.algos.SAC:
    enc = VectorEncoderFactory(hidden_units=[32, 32])
    params = dict(batch_size=32, actor_encoder_factory=enc, critic_encoder_factory=enc)
    params.update(kwargs)
    return SACConfig(**params).create()


def fit_online(algo, env, **kwargs):
    kwargs.setdefault("logger_adapter", NOOP)
    kwargs.setdefault("show_progress", False)
    return algo.fit_online(env, **kwargs)


def _parts(observation):
    if isinstance(observation, dict):  # dict observations: the values in stored key order
        return list(observation.values())
    return list(observation) if isinstance(observation, (list, tuple)) else [observation]


def assert_buffer_holds(buffer, expected, tuple_obs=False):
    """Every episode of ``buffer`` equals the written-out one."""
    assert buffer.size() == len(expected)
    for i, (episode, want) in enumerate(zip(buffer.episodes, expected)):
        observations = _parts(episode.observations)
        np.testing.assert_array_equal(observations[0], want["observations"], err_msg=f"episode {i}")
        if tuple_obs:
            np.testing.assert_array_equal(observations[1], want["observations"][:, 1:], err_msg=f"episode {i}")
        np.testing.assert_array_equal(episode.rewards[:, 0], want["rewards"], err_msg=f"episode {i}")
        assert episode.terminated == want["terminated"], f"episode {i}"
        if want["final_observation"] is None:
            assert episode.final_observation is None, f"episode {i}"
        else:
            np.testing.assert_array_equal(_parts(episode.final_observation)[0], want["final_observation"])


# ------------------------------------------------------------- collect
@pytest.mark.parametrize("n_steps", [10, 9, 1])
@pytest.mark.parametrize("tuple_obs", [False, True])
def test_collect_writes_exactly_n_steps_with_episode_endings(n_steps, tuple_obs):
    # 10 ends right after an episode, 9 inside one, 1 after the first step
    env = ScriptedEnv(SCRIPT, tuple_obs=tuple_obs)
    algo = DiscreteRandomPolicyConfig().create()
    buffer = algo.collect(env, n_steps=n_steps, show_progress=False)
    assert buffer.transition_count == n_steps
    assert_buffer_holds(buffer, scripted_episodes(SCRIPT, n_steps), tuple_obs)


def test_collect_dict_observations_in_the_space_key_order():
    env = ScriptedEnv(SCRIPT, dict_obs=True)
    buffer = DiscreteRandomPolicyConfig().create().collect(env, n_steps=9, show_progress=False)
    assert all(list(e.observations) == ["position", "time"] for e in buffer.episodes)  # read back by key
    assert_buffer_holds(buffer, scripted_episodes(SCRIPT, 9), tuple_obs=True)  # ["position", "time"]


def test_truncated_last_transition_bootstraps_terminated_does_not():
    env = ScriptedEnv([(2, "terminated"), (2, "truncated")])
    buffer = DiscreteRandomPolicyConfig().create().collect(env, n_steps=4, show_progress=False)
    picker = buffer.transition_picker
    terminated_last = picker(buffer.episodes[0], 1)
    truncated_last = picker(buffer.episodes[1], 1)
    assert terminated_last.terminal == 1.0
    assert truncated_last.terminal == 0.0
    np.testing.assert_array_equal(truncated_last.next_observation, [1.0, 2.0])  # the observation returned with truncated=True


def test_collect_appends_to_a_given_buffer_and_returns_it():
    env = ScriptedEnv(SCRIPT)
    buffer = create_fifo_replay_buffer(limit=1000, env=env)
    out = DiscreteRandomPolicyConfig().create().collect(env, buffer, n_steps=5, show_progress=False)
    assert out is buffer
    out = DiscreteRandomPolicyConfig().create().collect(env, buffer, n_steps=4, show_progress=False)
    assert buffer.transition_count == 9


def test_collect_deterministic_writes_greedy_actions():
    offrl.seed(3)
    env = Corridor(length=6, max_steps=7)
    algo = small_dqn()
    algo.build_with_env(env)
    buffer = algo.collect(env, deterministic=True, n_steps=30, show_progress=False)
    arrays = buffer.to_arrays()
    np.testing.assert_array_equal(arrays["actions"][:, 0], algo.predict(arrays["observations"]))


def test_collect_with_random_policy_and_action_scaler_covers_the_action_range():
    offrl.seed(0)
    env = ContinuousCorridor()
    env.action_space = __import__("gymnasium").spaces.Box(-2.0, 3.0, (1,), np.float32)
    algo = RandomPolicyConfig(action_scaler=MinMaxActionScaler()).create()
    buffer = algo.collect(env, n_steps=400, show_progress=False)
    actions = buffer.to_arrays()["actions"][:, 0]
    assert actions.min() >= -2.0 and actions.max() <= 3.0
    assert actions.min() < -1.5 and actions.max() > 2.5  # the scaler's range, not [-1, 1]


def test_collect_uses_the_explorer_with_one_based_steps():
    calls = []

    class Recorder:
        def sample(self, algo, x, step):
            calls.append((step, np.asarray(x).shape))
            return np.zeros(1, dtype=np.int64)

    DiscreteRandomPolicyConfig().create().collect(ScriptedEnv(SCRIPT), explorer=Recorder(), n_steps=5, show_progress=False)
    assert calls == [(s, (1, 2)) for s in range(1, 6)]


# ---------------------------------------------------------- fit_online
def naive_update_count(script, n_steps, batch_size, update_start_step, update_interval, n_updates):
    """Gradient steps fit_online must take, by walking the steps one by one."""
    closed, open_steps, e, t_in_episode = 0, 0, 0, 0
    count, ready = 0, False
    for t in range(1, n_steps + 1):
        length, _ = script[e % len(script)]
        t_in_episode += 1
        open_steps += 1
        if t_in_episode == length:  # the episode ends (terminated or truncated with a final observation)
            closed += open_steps
            open_steps, t_in_episode, e = 0, 0, e + 1
        transitions = closed + max(open_steps - 1, 0)
        if t > update_start_step and t % update_interval == 0:
            ready = ready or transitions > batch_size
            if ready:
                count += n_updates
    return count


@pytest.mark.parametrize(
    "update_start_step,update_interval,n_updates", [(0, 1, 1), (5, 3, 2), (30, 1, 1), (0, 7, 3)]
)
def test_update_schedule(update_start_step, update_interval, n_updates):
    env = ScriptedEnv(SCRIPT)
    algo = small_dqn(batch_size=6)
    fit_online(algo, env, n_steps=40, n_steps_per_epoch=15, update_start_step=update_start_step,
               update_interval=update_interval, n_updates=n_updates)
    assert algo.grad_step == naive_update_count(SCRIPT, 40, 6, update_start_step, update_interval, n_updates)


def test_fit_online_buffer_and_per_epoch_metrics():
    env = ScriptedEnv(SCRIPT)
    buffer = create_infinite_replay_buffer(env=env)
    results = fit_online(small_dqn(), env, buffer=buffer, n_steps=22, n_steps_per_epoch=10,
                         explorer=ConstantEpsilonGreedy(0.5))
    expected = scripted_episodes(SCRIPT, 22)
    assert buffer.transition_count == 22
    assert_buffer_holds(buffer, expected)
    assert [epoch for epoch, _ in results] == [1, 2, 3]
    # episodes by the step they end at: 3, 7, 8, 10 | 13, 17, 18, 20 | (the 9th is cut at 22: not counted)
    ends = np.cumsum([len(e["rewards"]) for e in expected])
    returns = np.array([e["rewards"].sum() for e in expected])
    lengths = np.array([len(e["rewards"]) for e in expected])
    for (epoch, metrics), (lo, hi) in zip(results[:2], [(0, 10), (10, 20)]):
        in_epoch = (ends > lo) & (ends <= hi)
        assert metrics["rollout_return"] == pytest.approx(returns[in_epoch].mean())
        assert metrics["rollout_episode_length"] == pytest.approx(lengths[in_epoch].mean())
        assert metrics["epsilon"] == 0.5
        assert "loss" in metrics and np.isfinite(metrics["loss"])
        for name in ("time_inference", "time_environment_step", "time_sample_batch", "time_algorithm_update", "time_step"):
            assert metrics[name] >= 0.0
    assert "rollout_return" not in results[2][1]  # no episode ended in the last epoch


def test_evaluation_metric_is_the_mean_greedy_return():
    env, eval_env = Corridor(length=4, max_steps=6), Corridor(length=4, max_steps=6)
    algo = small_dqn()
    results = fit_online(algo, env, n_steps=20, n_steps_per_epoch=10, eval_env=eval_env, eval_n_trials=3)
    # the Corridor is deterministic: a greedy episode returns 1 if the greedy policy reaches the end
    obs = np.eye(4, dtype=np.float32)
    for _, metrics in results:
        assert metrics["evaluation"] in (0.0, 1.0)
    position, reached = 0, False
    for _ in range(6):
        position = max(0, position + (1 if algo.predict(obs[position][None])[0] == 1 else -1))
        if position == 3:
            reached = True
            break
    assert results[-1][1]["evaluation"] == float(reached)


def test_random_steps_come_before_the_explorer():
    seen = []

    class Recorder:
        def sample(self, algo, x, step):
            seen.append(step)
            return np.ones(1, dtype=np.int64)

    fit_online(small_dqn(), ScriptedEnv(SCRIPT), explorer=Recorder(), n_steps=12, random_steps=5)
    assert seen == list(range(6, 13))


def test_explorer_reset_at_every_episode_start():
    resets = []

    class Recorder:
        def sample(self, algo, x, step):
            return np.zeros(1, dtype=np.int64)

        def reset(self):
            resets.append(True)

    env = ScriptedEnv(SCRIPT)
    fit_online(small_dqn(), env, explorer=Recorder(), n_steps=10)
    assert len(resets) == env.resets == 5  # 4 episodes end within 10 steps, plus the first reset


def test_callbacks_run_after_every_step_and_epoch():
    steps, epochs = [], []
    fit_online(small_dqn(), ScriptedEnv(SCRIPT), n_steps=7, n_steps_per_epoch=3,
               callback=lambda algo, epoch, step: steps.append((epoch, step)),
               epoch_callback=lambda algo, epoch, step: epochs.append((epoch, step)))
    assert steps == [(1, 1), (1, 2), (1, 3), (2, 4), (2, 5), (2, 6), (3, 7)]
    assert epochs == [(1, 3), (2, 6), (3, 7)]


def test_same_seed_same_run():
    def run():
        offrl.seed(11)
        env = Corridor(length=5, max_steps=8)
        algo = small_dqn()
        buffer = create_infinite_replay_buffer(env=env)
        fit_online(algo, env, buffer=buffer, explorer=LinearDecayEpsilonGreedy(1.0, 0.1, 50), n_steps=60,
                   random_steps=5)
        return buffer.to_arrays(), algo.predict_value(np.eye(5, dtype=np.float32), np.ones(5, dtype=np.int64))

    (a, qa), (b, qb) = run(), run()
    for key in ("observations", "actions", "rewards", "terminals", "timeouts"):
        np.testing.assert_array_equal(a[key], b[key])
    np.testing.assert_array_equal(qa, qb)


def test_models_saved_every_save_interval_and_after_the_last_epoch(tmp_path):
    algo = small_dqn()
    fit_online(algo, ScriptedEnv(SCRIPT), n_steps=50, n_steps_per_epoch=10, save_interval=2,
               logger_adapter=FileAdapterFactory(str(tmp_path)), experiment_name="run", with_timestamp=False)
    files = sorted(os.path.basename(f) for f in glob.glob(str(tmp_path / "run" / "model_*.d3")))
    # saved after epochs 2, 4 and 5, named by grad_step
    assert len(files) == 3
    for name in ("rollout_return.csv", "loss.csv", "params.json"):
        assert (tmp_path / "run" / name).exists()
    rows = (tmp_path / "run" / "loss.csv").read_text().strip().splitlines()
    assert [r.split(",")[:2] for r in rows] == [[str(e), str(10 * e)] for e in range(1, 6)]


# --------------------------------------------------- interruption safety
class Stop(Exception):
    pass


@pytest.mark.parametrize("error", [KeyboardInterrupt, Stop])
def test_interrupt_keeps_saved_models_and_buffer(tmp_path, error):
    env = ScriptedEnv(SCRIPT)
    buffer = create_infinite_replay_buffer(env=env)
    algo = small_dqn()
    saved = {}

    def on_epoch(algo, epoch, step):
        saved[epoch] = algo.predict_value(np.array([[0.0, 1.0]], dtype=np.float32), np.array([1]))

    def stop_at_25(algo, epoch, step):
        if step == 25:
            raise error()

    with pytest.raises(error) as info:
        fit_online(algo, env, buffer=buffer, n_steps=100, n_steps_per_epoch=10, callback=stop_at_25,
                   epoch_callback=on_epoch, logger_adapter=FileAdapterFactory(str(tmp_path)),
                   experiment_name="run", with_timestamp=False)
    assert info.value.offrl_buffer is buffer
    # 25 steps written; the open episode (step 25 is inside episode 6) is closed as truncated
    assert buffer.transition_count == 25
    assert_buffer_holds(buffer, scripted_episodes(SCRIPT, 25))
    # the buffer can be dumped and read back
    path = tmp_path / "buffer.h5"
    buffer.dump(str(path))
    loaded = ReplayBuffer.load(str(path))
    assert_buffer_holds(loaded, scripted_episodes(SCRIPT, 25))
    # the model saved after epoch 2 is intact
    files = sorted(glob.glob(str(tmp_path / "run" / "model_*.d3")), key=os.path.getmtime)
    assert len(files) == 2
    restored = load_learnable(files[-1])
    np.testing.assert_array_equal(
        restored.predict_value(np.array([[0.0, 1.0]], dtype=np.float32), np.array([1])), saved[2]
    )


def test_exception_carries_the_internal_buffer():
    env = ScriptedEnv(SCRIPT, raise_at=12)
    with pytest.raises(RuntimeError, match="scripted failure") as info:
        fit_online(small_dqn(), env, n_steps=30)
    buffer = info.value.offrl_buffer
    assert buffer.transition_count == 11
    assert_buffer_holds(buffer, scripted_episodes(SCRIPT, 11))


@pytest.mark.parametrize("tuple_obs", [False, True])
def test_nan_observation_is_a_clear_error_and_keeps_earlier_steps(tuple_obs):
    env = ScriptedEnv(SCRIPT, tuple_obs=tuple_obs, nan_at=6)
    buffer = create_infinite_replay_buffer(env=env)
    where = r"observation\[0\]\[0\] is nan" if tuple_obs else r"observation\[1\] is nan"
    with pytest.raises(ValueError, match=rf"non-finite observation at step 6 \(episode 1, step 3 of the episode\): {where}"):
        DiscreteRandomPolicyConfig().create().collect(env, buffer, n_steps=20, show_progress=False)
    assert buffer.transition_count == 5
    assert_buffer_holds(buffer, scripted_episodes(SCRIPT, 5), tuple_obs)


# ------------------------------------------------------------ bad input
def test_env_spaces_must_match_a_built_algorithm():
    algo = small_dqn()
    algo.build_with_env(Corridor(length=5))
    with pytest.raises(ValueError, match=r"observations have shape \(6,\), DQN was built for \(5,\)"):
        fit_online(algo, Corridor(length=6), n_steps=10)
    env = Corridor(length=5)
    env.action_space = __import__("gymnasium").spaces.Discrete(3)
    with pytest.raises(ValueError, match="3 actions, DQN was built for action_size=2"):
        fit_online(algo, env, n_steps=10)


def test_action_space_kind_must_suit_the_algorithm():
    with pytest.raises(ValueError, match="DQN learns discrete actions"):
        fit_online(small_dqn(), ContinuousCorridor(), n_steps=10)
    with pytest.raises(ValueError, match="SAC learns continuous actions"):
        fit_online(small_sac(), Corridor(), n_steps=10)


def test_explorer_must_suit_the_action_space():
    with pytest.raises(ValueError, match="ConstantEpsilonGreedy explores discrete actions, but SAC acts in a continuous"):
        fit_online(small_sac(), ContinuousCorridor(), explorer=ConstantEpsilonGreedy(0.1), n_steps=10)
    with pytest.raises(ValueError, match="NormalNoise explores continuous actions, but DQN acts in a discrete"):
        fit_online(small_dqn(), Corridor(), explorer=NormalNoise(), n_steps=10)
    with pytest.raises(TypeError, match=r"sample\(algo, x, step\)"):
        fit_online(small_dqn(), Corridor(), explorer=object(), n_steps=10)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(n_steps=10, update_start_step=10), "update_start_step=10 is not below n_steps=10"),
        (dict(n_steps=10, update_start_step=50), "update_start_step=50 is not below n_steps=10"),
        (dict(n_steps=0), "n_steps must be a positive int, got 0"),
        (dict(n_steps=10, n_steps_per_epoch=2.5), "n_steps_per_epoch must be a positive int"),
        (dict(n_steps=10, update_interval=0), "update_interval must be a positive int"),
        (dict(n_steps=10, n_updates=0), "n_updates must be a positive int"),
        (dict(n_steps=10, random_steps=-1), "random_steps must be an int >= 0"),
        (dict(n_steps=10, save_interval=0), "save_interval must be a positive int"),
        (dict(n_steps=10, eval_epsilon=1.5), r"eval_epsilon must be a number in \[0, 1\]"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        fit_online(small_dqn(), Corridor(), **kwargs)


def test_bad_objects():
    with pytest.raises(TypeError, match="env must be a gymnasium environment"):
        fit_online(small_dqn(), object(), n_steps=10)
    with pytest.raises(TypeError, match="callback must be callable"):
        fit_online(small_dqn(), Corridor(), n_steps=10, callback=3)
    with pytest.raises(TypeError, match="buffer must be a replay buffer"):
        fit_online(small_dqn(), Corridor(), buffer=[], n_steps=10)
    with pytest.raises(ValueError, match="eval_env's observation and action spaces must match"):
        fit_online(small_dqn(), Corridor(length=5), eval_env=Corridor(length=4), n_steps=10)
    with pytest.raises(TypeError, match="deterministic must be a bool"):
        DiscreteRandomPolicyConfig().create().collect(Corridor(), deterministic="yes", n_steps=3)
    with pytest.raises(ValueError, match="either deterministic=True"):
        small_dqn().collect(Corridor(), deterministic=True, explorer=ConstantEpsilonGreedy(0.1), n_steps=3)


def test_buffer_must_match_the_env():
    other = create_infinite_replay_buffer(env=Corridor(length=5))
    env = Corridor(length=5)
    env.action_space = __import__("gymnasium").spaces.Discrete(3)
    with pytest.raises(ValueError, match="buffer holds discrete actions of size 2, the environment has discrete actions of size 3"):
        fit_online(small_dqn(), env, buffer=other, n_steps=10)
    with pytest.raises(ValueError, match=r"buffer stores observations of shape \(5,\), the environment's are stored as \(4,\)"):
        fit_online(small_dqn(), Corridor(length=4), buffer=other, n_steps=10)


def test_random_policies_collect_but_do_not_fit_online():
    with pytest.raises(RuntimeError, match="cannot be trained; use collect"):
        fit_online(DiscreteRandomPolicyConfig().create(), Corridor(), n_steps=10)


def test_scaler_that_cannot_be_fitted_from_the_env_is_reported():
    algo = small_dqn(observation_scaler=StandardObservationScaler())
    with pytest.raises(ValueError, match="StandardObservationScaler cannot be fitted from an environment"):
        fit_online(algo, Corridor(), n_steps=10)


# ------------------------------------------------- every algorithm online
for _module in pkgutil.iter_modules(offrl.algos.__path__):
    importlib.import_module(f"offrl.algos.{_module.name}")

#: the algorithms of offrl.algos that learn online (off-policy evaluators such as FQE live elsewhere;
#: sequence models train offline only, as in d3rlpy)
TRAINABLE = {
    name: cls for name, cls in sorted(registered("algorithm").items())
    if cls.__module__.startswith("offrl.algos.") and cls.algorithm_class().is_trainable and not cls.algorithm_class().evaluates_algorithm
    and not cls.algorithm_class().predicts_from_sequences
}
ONLINE_CASES = [
    (name, discrete)
    for name, cls in TRAINABLE.items()
    for discrete in ([False, True] if cls.algorithm_class()._action_type == ActionSpace.BOTH
                     else [cls.algorithm_class()._action_type == ActionSpace.DISCRETE])
]


@pytest.mark.parametrize("name,discrete", ONLINE_CASES, ids=[f"{n}-{'discrete' if d else 'continuous'}" for n, d in ONLINE_CASES])
def test_every_trainable_algorithm_runs_online(name, discrete):
    offrl.seed(0)
    env = Corridor(length=4, max_steps=5) if discrete else ContinuousCorridor(max_steps=5)
    algo = TRAINABLE[name](batch_size=4).create()
    results = fit_online(algo, env, n_steps=12, n_steps_per_epoch=6)
    assert [e for e, _ in results] == [1, 2]
    assert algo.grad_step > 0
    for _, metrics in results:
        assert all(np.isfinite(v) for v in metrics.values())


# ----------------------------------------------------------------- hooks
def test_linear_interpolation_hook_values():
    hook = LinearInterpolationHook(100, 1.0, 0.1, lambda algo, step, value: None)
    assert hook.value(0) == 1.0
    assert hook.value(25) == pytest.approx(0.775)
    assert hook.value(50) == pytest.approx(0.55)
    assert hook.value(100) == pytest.approx(0.1)
    assert hook.value(1000) == pytest.approx(0.1)


def test_learning_rate_schedule_during_fit_online():
    algo = small_dqn()
    seen = []

    def read_lr(algo, epoch, step):
        seen.append((step, algo.optimizers["optim"].optim.param_groups[0]["lr"]))

    hook = LinearInterpolationHook(10, 1e-3, 1e-4, set_learning_rate())
    fit_online(algo, Corridor(), n_steps=15, callback=combine_callbacks(hook, None, read_lr))
    for step, lr in seen:
        assert lr == pytest.approx(1e-3 + (1e-4 - 1e-3) * min(step, 10) / 10)


def test_config_schedule_changes_a_copy_of_the_config_and_works_offline(dataset_factory):
    config = DQNConfig(batch_size=8, encoder_factory=VectorEncoderFactory(hidden_units=[8]), gamma=0.99)
    algo = config.create()
    gammas = []
    hook = combine_callbacks(
        LinearInterpolationHook(4, 0.99, 0.5, set_config("gamma")),
        lambda algo, epoch, step: gammas.append(algo.config.gamma),
    )
    algo.fit(dataset_factory("vector", True), n_steps=6, n_steps_per_epoch=6, logger_adapter=NOOP,
             show_progress=False, callback=hook)
    assert gammas == pytest.approx([0.99 - 0.49 * min(s, 4) / 4 for s in range(1, 7)])
    assert config.gamma == 0.99  # the user's config object is untouched
    with pytest.raises(ValueError, match=r"gamma must be in \[0, 1\]"):
        set_config("gamma")(algo, 0, 1.5)
    with pytest.raises(ValueError, match="has no field 'nope'"):
        set_config("nope")(algo, 0, 1.0)
    with pytest.raises(ValueError, match="has no optimizer 'critic_optim'"):
        set_learning_rate("critic_optim")(algo, 0, 1.0)


def test_hook_arguments_are_checked():
    with pytest.raises(ValueError, match="total_steps must be a positive int"):
        LinearInterpolationHook(0, 1.0, 0.0, set_config("gamma"))
    with pytest.raises(ValueError, match="stop_value must be a finite number"):
        LinearInterpolationHook(10, 1.0, float("nan"), set_config("gamma"))
    with pytest.raises(TypeError, match="setter must be callable"):
        LinearInterpolationHook(10, 1.0, 0.0, "gamma")
    with pytest.raises(TypeError, match=r"callbacks\[1\] is not callable"):
        combine_callbacks(None, 3)


# -------------------------------------------------------------- learning
def greedy_moves_right(algo, length):
    return algo.predict(np.eye(length, dtype=np.float32)[: length - 1]).tolist() == [1] * (length - 1)


def test_dqn_online_smoke_learns_a_short_corridor():
    offrl.seed(0)
    env = Corridor(length=4, max_steps=10)
    algo = small_dqn(batch_size=16, target_update_interval=20, gamma=0.9)
    fit_online(algo, env, explorer=LinearDecayEpsilonGreedy(1.0, 0.1, 200), n_steps=400, update_start_step=50)
    assert greedy_moves_right(algo, 4)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dqn_online_learns_the_corridor(seed):
    offrl.seed(seed)
    env, eval_env = Corridor(length=8, max_steps=30), Corridor(length=8, max_steps=30)
    algo = small_dqn(batch_size=32, target_update_interval=100, gamma=0.95)
    results = fit_online(algo, env, explorer=LinearDecayEpsilonGreedy(1.0, 0.05, 1500), n_steps=3000,
                         n_steps_per_epoch=1000, eval_env=eval_env, eval_n_trials=1)
    assert greedy_moves_right(algo, 8)
    assert results[-1][1]["evaluation"] == 1.0


def test_sac_online_smoke_prefers_moving_right():
    offrl.seed(0)
    algo = small_sac(gamma=0.9, initial_temperature=0.1)
    fit_online(algo, ContinuousCorridor(max_steps=10), n_steps=300, update_start_step=50)
    positions = np.linspace(0.0, 0.95, 20, dtype=np.float32)[:, None]
    assert (algo.predict(positions)[:, 0] > 0.5).all()


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sac_online_learns_the_continuous_corridor(seed):
    offrl.seed(seed)
    algo = small_sac(gamma=0.9, initial_temperature=0.1)
    results = fit_online(algo, ContinuousCorridor(max_steps=10), n_steps=1000, n_steps_per_epoch=500,
                         update_start_step=50, eval_env=ContinuousCorridor(max_steps=10), eval_n_trials=1)
    positions = np.linspace(0.0, 0.95, 20, dtype=np.float32)[:, None]
    assert (algo.predict(positions)[:, 0] > 0.8).all()
    # optimal: four steps of +0.25, return 1 (distance) + 1 (goal)
    assert results[-1][1]["evaluation"] == pytest.approx(2.0, abs=1e-5)


# ------------------------------------------------------ prioritized replay
def test_fit_online_feeds_td_errors_to_a_prioritized_buffer():
    offrl.seed(0)
    env = Corridor(length=4, max_steps=6)
    buffer = create_prioritized_replay_buffer(limit=1000, env=env)
    algo = small_dqn()
    fit_online(algo, env, buffer=buffer, n_steps=40)
    assert buffer.sampled_batches == algo.grad_step > 0
    priorities = buffer.priorities
    assert priorities.shape == (40,)
    assert len(np.unique(priorities)) > 5  # set from TD errors, not all the initial 1.0


def test_prioritized_buffer_needs_an_algorithm_that_supports_it():
    env = ContinuousCorridor()
    with pytest.raises(ValueError, match="SAC does not support prioritized replay"):
        fit_online(small_sac(), env, buffer=create_prioritized_replay_buffer(limit=100, env=env), n_steps=10)
