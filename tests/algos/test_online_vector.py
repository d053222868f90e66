"""fit_online / collect / rollout_returns on vectorised environments
(gymnasium.vector in its three autoreset modes, or a list of envs; gymnasium
1.0's vector envs have only NEXT_STEP, so the SAME_STEP and DISABLED cases
run from gymnasium 1.1 on):
per-environment episodes equal to separate single-environment runs,
episode boundaries and final observations, the update schedule, logged
per-environment returns, evaluation, per-environment explorers and bad input."""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv

import offrl
from offrl.algos import (AdditiveOU, ConstantEpsilonGreedy, DiscreteRandomPolicyConfig, DQNConfig, NormalNoise,
                         SACConfig)
from offrl.training.online import collect as collect_fn
from offrl.dataset import create_fifo_replay_buffer, create_infinite_replay_buffer
from offrl.logging import NoopAdapterFactory
from offrl.metrics import EnvironmentEvaluator
from offrl.metrics.utility import rollout_returns
from offrl.models import VectorEncoderFactory

NOOP = NoopAdapterFactory()

# per environment: (length, ending) of its episodes, cycled; different per
# environment so that episodes end at different vector steps
SCRIPTS = [
    [(3, "terminated"), (2, "truncated")],
    [(1, "truncated"), (4, "terminated")],
    [(2, "terminated")],
    [(5, "truncated"), (1, "terminated"), (2, "truncated")],
]


class KnownEnds(gymnasium.Env):
    """Environment ``env_id`` runs episodes of scripted lengths and endings
    (``script``: ``(length, "terminated" | "truncated")``, cycled).
    Observation at step ``t`` of episode ``e``: ``[env_id, e, t, u]``, ``u``
    drawn from the env's seeded generator at each reset (so the seed shows
    in the data); the observation returned with the ending has
    ``t = length``. Reward of step ``t``: ``100 env_id + 10 e + t + 1``
    (actions are recorded, not used)."""

    def __init__(self, env_id: int = 0, script: Sequence[Tuple[int, str]] = ((3, "terminated"),),
                 continuous: bool = False, nan_at: Optional[int] = None, nan_reward_at: Optional[int] = None) -> None:
        self.env_id = env_id
        self.script = list(script)
        self.observation_space = spaces.Box(-np.inf, np.inf, (4,), np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (1,), np.float32) if continuous else spaces.Discrete(3)
        self.episode, self.t, self.u = -1, 0, 0.0
        self.nan_at = nan_at
        self.nan_reward_at = nan_reward_at
        self.steps = 0

    def _obs(self) -> np.ndarray:
        return np.array([self.env_id, self.episode, self.t, self.u], dtype=np.float32)

    def reset(self, *, seed: Optional[int] = None, options: Any = None):
        super().reset(seed=seed)
        self.episode += 1
        self.t = 0
        self.u = float(self.np_random.uniform())
        return self._obs(), {}

    def step(self, action):
        self.steps += 1
        length, ending = self.script[self.episode % len(self.script)]
        reward = 100.0 * self.env_id + 10.0 * self.episode + self.t + 1.0
        self.t += 1
        done = self.t >= length
        obs = self._obs()
        if self.nan_at is not None and self.steps == self.nan_at:
            obs[3] = np.nan
        if self.nan_reward_at is not None and self.steps == self.nan_reward_at:
            reward = float("nan")
        return obs, reward, done and ending == "terminated", done and ending == "truncated", {}


def make_fns(n: int, continuous: bool = False) -> List[Any]:
    return [lambda i=i: KnownEnds(i, SCRIPTS[i % len(SCRIPTS)], continuous) for i in range(n)]


# gymnasium 1.1 added the autoreset modes; 1.0's vector envs always autoreset NEXT_STEP
AutoresetMode = getattr(gymnasium.vector, "AutoresetMode", None)
MODES_ONLY_FROM_1_1 = pytest.mark.skipif(
    AutoresetMode is None, reason=f"gymnasium {gymnasium.__version__}'s vector envs autoreset NEXT_STEP only "
                                  "(SAME_STEP and DISABLED came in gymnasium 1.1)")


def kinds(*names: str) -> List[Any]:
    """Parameters for ``vector_env`` kinds, the SAME_STEP and DISABLED ones
    marked to run only where gymnasium has them."""
    return [pytest.param(k, marks=MODES_ONLY_FROM_1_1) if k.endswith(("-same", "-disabled")) else k for k in names]


def vector_env(kind: str, n: int, continuous: bool = False) -> Any:
    fns = make_fns(n, continuous)
    if kind == "list":
        return [fn() for fn in fns]
    cls, _, m = kind.partition("-")
    if AutoresetMode is None:  # gymnasium 1.0: NEXT_STEP, no autoreset_mode argument
        if m != "next":
            raise ValueError(f"gymnasium {gymnasium.__version__} has no {m} autoreset mode")
        kwargs = {}
    else:
        mode = {"next": AutoresetMode.NEXT_STEP, "same": AutoresetMode.SAME_STEP, "disabled": AutoresetMode.DISABLED}
        kwargs = {"autoreset_mode": mode[m]}
    if cls == "async":
        return AsyncVectorEnv(fns, context="fork", **kwargs)
    return SyncVectorEnv(fns, **kwargs)


KINDS = kinds("list", "sync-next", "sync-same", "sync-disabled")


def small_dqn() -> offrl.algos.DQN:
    return DQNConfig(batch_size=8, encoder_factory=VectorEncoderFactory(hidden_units=[16])).create()


def small_sac() -> offrl.algos.SAC:
    enc = VectorEncoderFactory(hidden_units=[16])
    return SACConfig(batch_size=8, actor_encoder_factory=enc, critic_encoder_factory=enc).create()


def episodes_by_env(buffer) -> dict:
    """``{env_id: [episode, ...]}`` in the order each environment wrote them."""
    out: dict = {}
    for episode in buffer.episodes:
        out.setdefault(int(episode.observations[0, 0]), []).append(episode)
    return out


def assert_same_episodes(got, want, where: str) -> None:
    assert len(got) == len(want), where
    for k, (a, b) in enumerate(zip(got, want)):
        msg = f"{where}, episode {k}"
        np.testing.assert_array_equal(a.observations, b.observations, err_msg=msg)
        np.testing.assert_array_equal(a.actions, b.actions, err_msg=msg)
        np.testing.assert_array_equal(a.rewards, b.rewards, err_msg=msg)
        assert a.terminated == b.terminated, msg
        if b.final_observation is None:
            assert a.final_observation is None, msg
        else:
            np.testing.assert_array_equal(a.final_observation, b.final_observation, err_msg=msg)


def expected_episodes(env_id: int, script, n_transitions: int, us: Sequence[float]) -> List[dict]:
    """What environment ``env_id`` writes in ``n_transitions`` transitions,
    written out plainly (``us``: its reset draws, one per episode)."""
    episodes, e, done = [], 0, 0
    while done < n_transitions:
        length, ending = script[e % len(script)]
        steps = min(length, n_transitions - done)
        cut = steps < length
        terminated = ending == "terminated" and not cut
        obs = np.array([[env_id, e, t, us[e]] for t in range(steps)], dtype=np.float32)
        episodes.append({
            "observations": obs,
            "rewards": np.array([100.0 * env_id + 10.0 * e + t + 1.0 for t in range(steps)], dtype=np.float32),
            "terminated": terminated,
            "final_observation": None if terminated else np.array([env_id, e, steps, us[e]], dtype=np.float32),
        })
        done += steps
        e += 1
    return episodes


def reset_draws(seed: int, n: int) -> List[float]:
    """``u`` of the first ``n`` resets of a KnownEnds reset first with ``seed``."""
    env = KnownEnds()
    draws = [float(np.float32(env.reset(seed=seed)[0][3]))]
    for _ in range(n - 1):
        draws.append(float(np.float32(env.reset()[0][3])))
    return draws


# --------------------------------------------------- episodes and seeding
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n_steps", [37, 40])
def test_boundaries_and_final_observations_are_exact(kind, n_steps):
    # 4 environments ending episodes at different steps; n_steps = 37 cuts the last vector step
    env = vector_env(kind, 4)
    buffer = collect_fn(DiscreteRandomPolicyConfig().create(), env, n_steps=n_steps, show_progress=False, seed=5)
    assert buffer.transition_count == n_steps
    per_env = episodes_by_env(buffer)
    assert sorted(per_env) == [0, 1, 2, 3]
    for i, got in per_env.items():
        n_i = sum(len(e.rewards) for e in got)
        want = expected_episodes(i, SCRIPTS[i], n_i, reset_draws(5 + i, len(got)))
        assert len(got) == len(want), f"environment {i}"
        for k, (a, b) in enumerate(zip(got, want)):
            msg = f"environment {i}, episode {k}"
            np.testing.assert_array_equal(a.observations, b["observations"], err_msg=msg)
            np.testing.assert_array_equal(a.rewards[:, 0], b["rewards"], err_msg=msg)
            assert a.terminated == b["terminated"], msg
            if b["final_observation"] is None:
                assert a.final_observation is None, msg
            else:  # the real next observation, never the reset one
                np.testing.assert_array_equal(a.final_observation, b["final_observation"], err_msg=msg)
    # the environments' transitions: 10 vector steps of 4 (NEXT_STEP: less, its reset steps write nothing)
    counts = [sum(len(e.rewards) for e in per_env[i]) for i in range(4)]
    if kind != "sync-next" and n_steps == 40:
        assert counts == [10, 10, 10, 10]
    if n_steps == 37 and kind != "sync-next":
        assert counts == [10, 9, 9, 9]  # the last vector step writes environment 0's transition only


def test_next_step_reset_steps_write_nothing():
    # environment 2 ends every 2 steps: in NEXT_STEP mode every third vector step only resets it
    env = vector_env("sync-next", 3)
    buffer = collect_fn(DiscreteRandomPolicyConfig().create(), env, n_steps=26, show_progress=False, seed=1)
    per_env = episodes_by_env(buffer)
    # 12 vector steps write 9 + 9 + 8 transitions: each environment's reset steps write nothing
    assert sum(len(e.rewards) for e in per_env[2]) == 8
    assert [len(e.rewards) for e in per_env[2]] == [2, 2, 2, 2]
    for episode in per_env[2]:
        np.testing.assert_array_equal(episode.observations[:, 2], [0, 1])  # never a step from a reset observation


@pytest.mark.parametrize("kind", kinds("list", "sync-next", "sync-same"))
def test_vector_collect_equals_separate_runs_with_an_explorer(kind):
    n = 3
    algo = small_dqn()
    algo.build_with_env(KnownEnds())
    explorer = ConstantEpsilonGreedy(0.5)
    buffer = collect_fn(algo, vector_env(kind, n), explorer=explorer, n_steps=45, show_progress=False, seed=100)
    per_env = episodes_by_env(buffer)
    for i in range(n):
        n_i = sum(len(e.rewards) for e in per_env[i])
        # environment i alone (a one-environment vector) with seed 100 + i
        alone = collect_fn(algo, [make_fns(n)[i]()], explorer=explorer, n_steps=n_i, show_progress=False, seed=100 + i)
        assert_same_episodes(per_env[i], alone.episodes, f"environment {i}")
    actions = buffer.to_arrays()["actions"][:, 0]
    assert len(np.unique(actions)) == 3  # the explorer did explore


@pytest.mark.parametrize("kind", kinds("list", "sync-same"))
def test_vector_collect_equals_plain_single_env_runs_when_deterministic(kind):
    n = 3
    algo = small_dqn()
    algo.build_with_env(KnownEnds())
    buffer = collect_fn(algo, vector_env(kind, n), deterministic=True, n_steps=30, show_progress=False, seed=7)
    per_env = episodes_by_env(buffer)
    for i in range(n):
        n_i = sum(len(e.rewards) for e in per_env[i])
        alone = collect_fn(algo, make_fns(n)[i](), deterministic=True, n_steps=n_i, show_progress=False, seed=7 + i)
        assert_same_episodes(per_env[i], alone.episodes, f"environment {i}")


@pytest.mark.parametrize("kind", kinds("sync-next", "sync-same"))
def test_random_steps_per_environment_match_separate_runs(kind):
    n = 2
    algo = small_sac()
    env = vector_env(kind, n, continuous=True)
    buffer = create_infinite_replay_buffer(env=KnownEnds(continuous=True))
    offrl.training.online.fit_online(algo, env, buffer=buffer, n_steps=20, n_steps_per_epoch=20, random_steps=20,
                                  update_start_step=19, logger_adapter=NOOP, show_progress=False, seed=3)
    per_env = episodes_by_env(buffer)
    written = [sum(len(e.actions) for e in per_env[i]) for i in range(n)]
    assert sum(written) == 20
    if kind == "sync-same":
        assert written == [10, 10]
    for i in range(n):  # environment i's actions are its own generator's first draws (none spent on reset steps)
        space = KnownEnds(continuous=True).action_space
        space.seed(3 + i)
        want = np.stack([space.sample() for _ in range(written[i])])
        got = np.concatenate([e.actions for e in per_env[i]])
        np.testing.assert_array_equal(got, want)


def test_async_vector_env_collects_like_sync():
    sync = collect_fn(DiscreteRandomPolicyConfig().create(), vector_env("sync-next", 2), n_steps=20,
                      show_progress=False, seed=9)
    env = vector_env("async-next", 2)
    try:
        asyn = collect_fn(DiscreteRandomPolicyConfig().create(), env, n_steps=20, show_progress=False, seed=9)
    finally:
        env.close()
    a, b = episodes_by_env(sync), episodes_by_env(asyn)
    for i in range(2):
        assert [len(e.rewards) for e in a[i]] == [len(e.rewards) for e in b[i]]
        for x, y in zip(a[i], b[i]):
            np.testing.assert_array_equal(x.observations, y.observations)


@pytest.mark.parametrize("kind", kinds("sync-next", "sync-same"))
def test_dict_observations_in_a_vector_env(kind):
    from envs import ScriptedEnv, scripted_episodes

    script = [(3, "terminated"), (2, "truncated")]
    env = SyncVectorEnv([lambda: ScriptedEnv(script, dict_obs=True) for _ in range(2)],
                        **({} if kind == "sync-next" else {"autoreset_mode": AutoresetMode.SAME_STEP}))
    buffer = collect_fn(DiscreteRandomPolicyConfig().create(), env, n_steps=10, show_progress=False)
    want = scripted_episodes(script, 5)  # each environment's 5 transitions
    assert buffer.size() == 4
    for k, episode in enumerate(buffer.episodes):  # env 0 and env 1 end their episodes at the same vector steps
        assert list(episode.observations) == ["position", "time"]  # the Dict space's (sorted) key order
        position, time_ = episode.observations["position"], episode.observations["time"]
        np.testing.assert_array_equal(position, want[k // 2]["observations"])
        np.testing.assert_array_equal(time_[:, 0], want[k // 2]["observations"][:, 1])
        assert episode.terminated == want[k // 2]["terminated"]
        if not episode.terminated:
            np.testing.assert_array_equal(episode.final_observation["position"], want[k // 2]["final_observation"])
            np.testing.assert_array_equal(episode.final_observation["time"], want[k // 2]["final_observation"][1:])


# ------------------------------------------------------------- fit_online
@pytest.mark.parametrize("kind", ["list", "sync-next"])
def test_fit_online_trains_dqn_and_logs_per_environment_returns(kind):
    offrl.seed(0)
    algo = small_dqn()
    env = vector_env(kind, 3)
    buffer = create_infinite_replay_buffer(env=KnownEnds())
    results = offrl.training.online.fit_online(algo, env, buffer=buffer, explorer=ConstantEpsilonGreedy(0.3), n_steps=60,
                                            n_steps_per_epoch=30, logger_adapter=NOOP, show_progress=False,
                                            eval_env=vector_env(kind, 2), eval_n_trials=3)
    assert buffer.transition_count == 60
    assert algo.grad_step > 0
    assert [e for e, _ in results] == [1, 2]
    for _, metrics in results:
        for i in range(3):  # every environment ends episodes within 30 steps
            assert np.isfinite(metrics[f"rollout_return_env_{i}"])
        assert np.isfinite(metrics["evaluation"])


def test_per_environment_returns_are_exact_per_epoch():
    env = vector_env("list", 2)  # env 0: (3 terminated, 2 truncated), env 1: (1 truncated, 4 terminated)
    algo = small_dqn()
    results = offrl.training.online.fit_online(algo, env, n_steps=20, n_steps_per_epoch=10, logger_adapter=NOOP,
                                            show_progress=False)
    # 5 vector steps an epoch. env 0 ends at its steps 3, 5 | 8, 10; env 1 at 1, 5 | 6, 10
    r = lambda i, e, length: sum(100 * i + 10 * e + t + 1 for t in range(length))  # noqa: E731
    m1, m2 = results[0][1], results[1][1]
    assert m1["rollout_return_env_0"] == pytest.approx(np.mean([r(0, 0, 3), r(0, 1, 2)]))
    assert m1["rollout_return_env_1"] == pytest.approx(np.mean([r(1, 0, 1), r(1, 1, 4)]))
    assert m2["rollout_return_env_0"] == pytest.approx(np.mean([r(0, 2, 3), r(0, 3, 2)]))
    assert m2["rollout_return_env_1"] == pytest.approx(np.mean([r(1, 2, 1), r(1, 3, 4)]))
    assert m1["rollout_return"] == pytest.approx(np.mean([r(0, 0, 3), r(0, 1, 2), r(1, 0, 1), r(1, 1, 4)]))


@pytest.mark.parametrize("update_interval,n_updates,update_start_step", [(1, 1, 0), (2, 3, 0), (1, 2, 12)])
def test_update_schedule_counts_vector_steps(update_interval, n_updates, update_start_step):
    env = vector_env("list", 4)
    buffer = create_infinite_replay_buffer(env=KnownEnds())
    collect_fn(DiscreteRandomPolicyConfig().create(), [KnownEnds()], buffer=buffer, n_steps=30, show_progress=False)
    algo = small_dqn()  # the buffer holds more than a batch: every scheduled vector step updates
    offrl.training.online.fit_online(algo, env, buffer=buffer, n_steps=40, n_steps_per_epoch=20,
                                  update_interval=update_interval, n_updates=n_updates,
                                  update_start_step=update_start_step, logger_adapter=NOOP, show_progress=False)
    # 10 vector steps of 4 transitions each; after vector step v, 4 v transitions
    want = sum(n_updates for v in range(1, 11) if 4 * v > update_start_step and v % update_interval == 0)
    assert algo.grad_step == want


@pytest.mark.parametrize("kind", kinds("sync-next", "sync-same"))
def test_fit_online_trains_sac_with_per_environment_noise(kind):
    offrl.seed(1)
    algo = small_sac()
    env = vector_env(kind, 3, continuous=True)
    results = offrl.training.online.fit_online(algo, env, explorer=NormalNoise(std=0.2), n_steps=45, n_steps_per_epoch=45,
                                            logger_adapter=NOOP, show_progress=False)
    assert algo.grad_step > 0
    assert all(np.isfinite(v) for v in results[0][1].values())


# -------------------------------------------------------------- explorers
class StubAlgo:
    action_size = 1

    def __init__(self):
        self.action_scaler = None

    def predict(self, x):
        return np.zeros((len(x), 1), dtype=np.float32)


def test_additive_ou_keeps_one_process_per_environment():
    explorer = AdditiveOU(mu=0.0, theta=0.5, sigma=0.1, start_with_mu=True, low=-10.0, high=10.0)
    algo = StubAlgo()
    x = np.zeros((2, 4), dtype=np.float32)
    gens = [np.random.default_rng(0), np.random.default_rng(1)]
    first = explorer.sample_envs(algo, x, 1, [0, 1], gens)
    np.testing.assert_array_equal(first, 0.0)  # start_with_mu
    second = explorer.sample_envs(algo, x, 2, [0, 1], gens)
    ref = [np.random.default_rng(0), np.random.default_rng(1)]
    want = [0.1 * ref[k].standard_normal(1) for k in range(2)]  # z1 = z0 + theta (mu - z0) + sigma eps, z0 = 0
    np.testing.assert_allclose(second[:, 0], [w[0] for w in want], rtol=1e-5)
    explorer.reset_env(1)  # environment 1 starts an episode: only its process restarts
    third = explorer.sample_envs(algo, x, 3, [0, 1], gens)
    assert third[1, 0] == 0.0
    z = want[0][0] + 0.5 * (0.0 - want[0][0]) + 0.1 * ref[0].standard_normal(1)[0]
    np.testing.assert_allclose(third[0, 0], z, rtol=1e-5)


def test_epsilon_greedy_draws_per_environment_generator():
    algo = small_dqn()
    algo.build_with_env(KnownEnds())
    x = np.zeros((3, 4), dtype=np.float32)
    explorer = ConstantEpsilonGreedy(1.0)
    got = explorer.sample_envs(algo, x, 1, [0, 1, 2], [np.random.default_rng(s) for s in (4, 5, 6)])
    want = []
    for s in (4, 5, 6):
        g = np.random.default_rng(s)
        g.random()
        want.append(g.integers(3))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kind", KINDS)
def test_explorer_reset_env_at_every_episode_start(kind):
    calls = []

    class Recorder:
        def __init__(self):
            self.step = 0

        def sample(self, algo, x, step):
            self.step = step
            return np.zeros(len(x), dtype=np.int64)

        def reset_env(self, index):
            calls.append((index, self.step))

    env = vector_env(kind, 3)
    buffer = collect_fn(DiscreteRandomPolicyConfig().create(), env, explorer=Recorder(), n_steps=30,
                        show_progress=False)
    per_env = episodes_by_env(buffer)
    for i in range(3):
        ended = sum(1 for e in per_env[i] if e.terminated or e.final_observation is not None) - 1  # the last is cut
        starts = [c for c in calls if c[0] == i]
        # the first reset, then one per ended episode (NEXT_STEP: at its reset step, still before its next action)
        assert ended + 1 <= len(starts) <= len(per_env[i]) + 1
        assert starts[0] == (i, 0)


def test_normal_noise_and_boltzmann_draw_per_environment_generator():
    algo = StubAlgo()
    x = np.zeros((2, 4), dtype=np.float32)
    got = NormalNoise(mean=0.0, std=0.3, low=-5.0, high=5.0).sample_envs(
        algo, x, 1, [0, 1], [np.random.default_rng(s) for s in (1, 2)])
    want = [np.random.default_rng(s).normal(0.0, 0.3, size=(1,))[0] for s in (1, 2)]
    np.testing.assert_allclose(got[:, 0], want, rtol=1e-5)

    class Valued:
        action_size = 3

        def predict_value(self, x, action):
            return np.asarray(action, dtype=np.float64)  # Q(s, a) = a

    from offrl.algos import Boltzmann

    explorer = Boltzmann(temperature=1.0)
    got = explorer.sample_envs(Valued(), x, 1, [0, 1], [np.random.default_rng(s) for s in (3, 4)])
    cdf = np.cumsum(explorer.probabilities(np.arange(3.0)))
    want = [int(np.searchsorted(cdf, np.random.default_rng(s).random(), side="right")) for s in (3, 4)]
    np.testing.assert_array_equal(got, want)


# ------------------------------------------------------------- evaluation
@pytest.mark.parametrize("kind", KINDS)
def test_rollout_returns_split_trials_across_environments(kind):
    env = vector_env(kind, 3)
    algo = small_dqn()
    algo.build_with_env(KnownEnds())
    returns = rollout_returns(algo, env, n_trials=7, seed=0)
    # environment i runs trials i, i + 3, ...: env 0 runs 3 episodes, envs 1 and 2 run 2
    r = lambda i, e: sum(100 * i + 10 * e + t + 1 for t in range(SCRIPTS[i][e % len(SCRIPTS[i])][0]))  # noqa: E731
    want = [r(k % 3, k // 3) for k in range(7)]
    assert returns == want
    assert EnvironmentEvaluator(vector_env(kind, 3), n_trials=7)(algo) == pytest.approx(np.mean(want))


def test_rollout_returns_vector_discount_and_epsilon():
    env = vector_env("list", 2)
    algo = small_dqn()
    algo.build_with_env(KnownEnds())
    returns = rollout_returns(algo, env, n_trials=2, gamma=0.5, epsilon=0.5, seed=1)
    want = [1 + 0.5 * 2 + 0.25 * 3, 101.0]
    assert returns == pytest.approx(want)


# -------------------------------------------------------------- bad input
def test_autoreset_mode_is_read_by_value_and_defaults_to_next_step():
    from offrl._vector_env import autoreset_mode

    # gymnasium's own vector env: NEXT_STEP by default (1.0 states no mode in its metadata at all)
    assert autoreset_mode(vector_env("sync-next", 2)) == "next"

    class Declared:
        def __init__(self, mode):
            self.metadata = {} if mode is None else {"autoreset_mode": mode}

    assert autoreset_mode(Declared(None)) == "next"
    assert [autoreset_mode(Declared(v)) for v in ("NextStep", "SameStep", "Disabled")] == ["next", "same", "disabled"]
    if AutoresetMode is not None:
        assert [autoreset_mode(Declared(m)) for m in AutoresetMode] == ["next", "same", "disabled"]
    for bad in ("next", "Sometimes", 3, ["NextStep"]):
        with pytest.raises(ValueError, match=r"autoreset_mode.*NextStep, SameStep, Disabled"):
            autoreset_mode(Declared(bad))


def test_list_of_envs_with_different_spaces_names_the_index():
    envs = [KnownEnds(0), KnownEnds(1), KnownEnds(2, continuous=True)]
    with pytest.raises(ValueError, match=r"env\[2\]\.action_space"):
        collect_fn(DiscreteRandomPolicyConfig().create(), envs, n_steps=5, show_progress=False)
    envs[2] = KnownEnds(2)
    envs[2].observation_space = spaces.Box(-np.inf, np.inf, (5,), np.float32)
    with pytest.raises(ValueError, match=r"env\[2\]\.observation_space"):
        small_dqn().fit_online(envs, n_steps=5, n_steps_per_epoch=5, logger_adapter=NOOP, show_progress=False)
    with pytest.raises(ValueError, match="empty list"):
        collect_fn(DiscreteRandomPolicyConfig().create(), [], n_steps=5, show_progress=False)
    with pytest.raises(TypeError, match=r"env\[1\]"):
        collect_fn(DiscreteRandomPolicyConfig().create(), [KnownEnds(), object()], n_steps=5, show_progress=False)


def test_action_batch_of_the_wrong_size_names_the_environment():
    class Short:
        def sample(self, algo, x, step):
            return np.zeros(len(x) - 1, dtype=np.int64)

    with pytest.raises(ValueError, match=r"2 actions for the 3 environments.*environment 2 has none"):
        collect_fn(DiscreteRandomPolicyConfig().create(), vector_env("list", 3), explorer=Short(), n_steps=6,
                   show_progress=False)

    class WrongShape:
        def sample(self, algo, x, step):
            return np.zeros((len(x), 2), dtype=np.float32)

    with pytest.raises(ValueError, match=r"action for environment 0 has shape \(2,\), expected \(1,\)"):
        collect_fn(small_sac(), vector_env("list", 2, continuous=True), explorer=WrongShape(), n_steps=4,
                   show_progress=False)


def test_out_of_range_action_is_reported_by_the_buffer():
    class Wild:
        def sample(self, algo, x, step):
            return np.full(len(x), 5, dtype=np.int64)

    with pytest.raises(ValueError, match=r"action is 5, expected an index in \[0, 3\)"):
        collect_fn(DiscreteRandomPolicyConfig().create(), vector_env("list", 2), explorer=Wild(), n_steps=10,
                   show_progress=False)


def test_non_finite_observation_names_the_environment():
    envs = [KnownEnds(0, SCRIPTS[0]), KnownEnds(1, SCRIPTS[1], nan_at=3)]
    with pytest.raises(ValueError, match="environment 1 returned a non-finite observation"):
        collect_fn(DiscreteRandomPolicyConfig().create(), envs, n_steps=20, show_progress=False)


def test_bad_reward_names_the_environment_and_keeps_the_earlier_steps():
    envs = [KnownEnds(0, SCRIPTS[0]), KnownEnds(1, SCRIPTS[1], nan_reward_at=3)]
    with pytest.raises(ValueError, match=r"reward nan at step 6 \(environment 1, episode 1, step 2") as info:
        collect_fn(DiscreteRandomPolicyConfig().create(), envs, n_steps=20, show_progress=False)
    buffer = info.value.offrl_buffer
    assert buffer.transition_count == 4  # two whole vector steps; nothing of the failing one
    per_env = episodes_by_env(buffer)
    np.testing.assert_array_equal(per_env[0][0].final_observation[:3], [0, 0, 2])  # env 0 cut after its 2nd step
    assert [len(e.rewards) for e in per_env[1]] == [1, 1]


def test_sequence_models_are_evaluated_in_one_environment():
    from offrl.metrics.utility import evaluate_transformer_with_environment

    class Actor:
        def reset(self):
            pass

        def predict(self, observation, reward):
            return 0

    with pytest.raises(ValueError, match="one environment at a time"):
        evaluate_transformer_with_environment(Actor(), vector_env("list", 2), n_trials=2)
    with pytest.raises(TypeError, match="a gymnasium.vector env or a list"):
        EnvironmentEvaluator(object())


def test_epoch_smaller_than_the_vector_and_bad_seed():
    with pytest.raises(ValueError, match="n_steps_per_epoch=2 is below the number of environments"):
        small_dqn().fit_online(vector_env("list", 3), n_steps=10, n_steps_per_epoch=2, logger_adapter=NOOP,
                               show_progress=False)
    with pytest.raises(ValueError, match="seed must be"):
        collect_fn(DiscreteRandomPolicyConfig().create(), vector_env("list", 2), n_steps=4, show_progress=False, seed=-1)


@pytest.mark.parametrize("kind", kinds("sync-next", "sync-same"))
def test_fifo_buffer_and_vector_env_spaces_build_the_algorithm(kind):
    algo = small_dqn()
    env = vector_env(kind, 2)
    buffer = create_fifo_replay_buffer(limit=50, env=KnownEnds())
    offrl.training.online.fit_online(algo, env, buffer=buffer, n_steps=30, n_steps_per_epoch=30, logger_adapter=NOOP,
                                  show_progress=False)
    assert algo.observation_shape == (4,) and algo.action_size == 3
    assert buffer.transition_count == 30
