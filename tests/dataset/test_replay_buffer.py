"""ReplayBuffer: online writing, whole episodes, FIFO eviction, user
components (d3rlpy protocols), writer preprocessors, mixed buffers and
conversion of batches to torch."""

from __future__ import annotations

from fractions import Fraction
from typing import Sequence

import gymnasium
import numpy as np
import pytest
import torch
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import offrl
from offrl import ActionSpace
from offrl.dataset import (
    BufferProtocol,
    Episode,
    EpisodeBase,
    FIFOBuffer,
    FrameStackTransitionPicker,
    InfiniteBuffer,
    LastFrameWriterPreprocess,
    MDPDataset,
    MixedReplayBuffer,
    PartialTrajectory,
    ReplayBuffer,
    Signature,
    TrajectorySlicerProtocol,
    Transition,
    TransitionPickerProtocol,
    WriterPreprocessProtocol,
    create_fifo_replay_buffer,
    create_infinite_replay_buffer,
)

# ------------------------------------------------------------------ helpers


def _enumerate(rb):
    """Every transition of ``rb`` through BufferProtocol indexing + its picker."""
    return [rb.transition_picker(*rb.buffer[i]) for i in range(rb.transition_count)]


def _collect(env, rb, n_episodes, seed, *, give_final=True):
    """Run random episodes of ``env`` writing them into ``rb``; return the
    model: a list of episodes, each a dict of steps and how it ended."""
    model = []
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    for _ in range(n_episodes):
        ep = {"obs": [], "actions": [], "rewards": [], "terminated": False, "final": None}
        while True:
            action = env.action_space.sample()
            next_obs, reward, terminated, truncated, _ = env.step(action)
            rb.append(obs, action, reward)
            ep["obs"].append(np.asarray(obs, np.float32))
            ep["actions"].append(action)
            ep["rewards"].append(np.float32(reward))
            if terminated:
                rb.clip_episode(True)
                ep["terminated"] = True
                break
            if truncated:
                if give_final:
                    rb.clip_episode(False, next_obs)
                    ep["final"] = np.asarray(next_obs, np.float32)
                else:
                    rb.clip_episode(False)
                break
            obs = next_obs
        model.append(ep)
        obs, _ = env.reset()
    return model


def _model_transitions(model):
    """(obs, action, reward, next_obs, terminal) for each transition of the model."""
    out = []
    for ep in model:
        n = len(ep["obs"])
        for t in range(n):
            if t < n - 1:
                nxt, term = ep["obs"][t + 1], 0.0
            elif ep["terminated"]:
                nxt, term = np.zeros_like(ep["obs"][t]), 1.0
            elif ep["final"] is not None:
                nxt, term = ep["final"], 0.0
            else:
                continue
            out.append((ep["obs"][t], ep["actions"][t], ep["rewards"][t], nxt, term))
    return out


def _check_against_model(rb, model, discrete):
    expected = _model_transitions(model)
    assert rb.transition_count == len(expected)
    assert rb.size() == len(model)
    for episode, ep in zip(rb.episodes, model):
        np.testing.assert_array_equal(episode.observations, np.stack(ep["obs"]))
        if discrete:
            np.testing.assert_array_equal(episode.actions[:, 0], np.array(ep["actions"]))
        else:
            np.testing.assert_array_equal(episode.actions, np.stack(ep["actions"]).astype(np.float32))
        np.testing.assert_array_equal(episode.rewards[:, 0], np.array(ep["rewards"]))
        assert episode.terminated == ep["terminated"]
        if ep["final"] is None:
            assert episode.final_observation is None
        else:
            np.testing.assert_array_equal(episode.final_observation, ep["final"])
    for tr, (o, a, r, nxt, term) in zip(_enumerate(rb), expected):
        np.testing.assert_array_equal(tr.observation, o)
        np.testing.assert_array_equal(np.reshape(tr.action, -1), np.reshape(a, -1).astype(tr.action.dtype))
        assert tr.reward[0] == r
        np.testing.assert_array_equal(tr.next_observation, nxt)
        assert tr.terminal == term
    return expected


def _check_batch_against(rb, expected, batch_size=256, seed=0):
    """Every item of a sampled batch (fancy-indexing path) is one of ``expected``."""
    by_obs = {np.asarray(o).tobytes(): (o, a, r, nxt, term) for (o, a, r, nxt, term) in expected}
    offrl.seed(seed)
    batch = rb.sample_transition_batch(batch_size)
    assert len(batch) == batch_size
    seen = set()
    for k in range(batch_size):
        key = batch.observations[k].tobytes()
        assert key in by_obs
        seen.add(key)
        o, a, r, nxt, term = by_obs[key]
        np.testing.assert_array_equal(batch.next_observations[k], nxt)
        assert batch.terminals[k, 0] == term
        assert batch.rewards[k, 0] == r
        np.testing.assert_array_equal(batch.actions[k], np.reshape(a, -1).astype(batch.actions.dtype))
    return seen


# ------------------------------------------------------- online with envs


def test_cartpole_online_writing_terminated_episodes():
    env = gymnasium.make("CartPole-v1")
    rb = create_infinite_replay_buffer(env=env)
    info = rb.dataset_info
    assert info.action_space == ActionSpace.DISCRETE
    assert info.action_size == 2
    assert info.observation_signature == Signature(dtype=[np.float32], shape=[(4,)])
    assert info.action_signature == Signature(dtype=[np.int64], shape=[(1,)])
    model = _collect(env, rb, 5, seed=0)
    assert all(ep["terminated"] for ep in model)  # random CartPole falls within 500 steps
    expected = _check_against_model(rb, model, discrete=True)
    # terminated: every step is a transition, the last one terminal with zero next obs
    assert rb.transition_count == sum(len(ep["obs"]) for ep in model)
    for episode in rb.episodes:
        assert episode.transition_count == episode.size()
        last = rb.transition_picker(episode, episode.size() - 1)
        assert last.terminal == 1.0
        np.testing.assert_array_equal(last.next_observation, np.zeros(4, np.float32))
    seen = _check_batch_against(rb, expected, batch_size=512)
    assert len(seen) > 50
    env.close()


def test_cartpole_truncated_with_final_observation():
    env = gymnasium.make("CartPole-v1", max_episode_steps=6)
    rb = create_infinite_replay_buffer(env=env)
    model = _collect(env, rb, 4, seed=1)
    truncated = [ep for ep in model if not ep["terminated"]]
    assert truncated, "random CartPole should survive 6 steps in some episode"
    expected = _check_against_model(rb, model, discrete=True)
    for episode, ep in zip(rb.episodes, model):
        if ep["terminated"]:
            continue
        # the last step is a transition whose next observation is the final one
        assert episode.transition_count == episode.size() == 6
        last = rb.transition_picker(episode, 5)
        assert last.terminal == 0.0
        np.testing.assert_array_equal(last.next_observation, ep["final"])
    _check_batch_against(rb, expected)
    env.close()


def test_pendulum_online_writing_continuous():
    env = gymnasium.make("Pendulum-v1", max_episode_steps=20)
    rb = create_infinite_replay_buffer(env=env)
    info = rb.dataset_info
    assert info.action_space == ActionSpace.CONTINUOUS
    assert info.action_size == 1
    assert info.observation_signature == Signature(dtype=[np.float32], shape=[(3,)])
    assert info.action_signature == Signature(dtype=[np.float32], shape=[(1,)])
    model = _collect(env, rb, 3, seed=2)
    assert not any(ep["terminated"] for ep in model)
    expected = _check_against_model(rb, model, discrete=False)
    assert rb.transition_count == 60  # truncated with final obs: all 20 steps each
    assert [e.transition_count for e in rb.episodes] == [20, 20, 20]
    _check_batch_against(rb, expected)
    # trajectory windows: steps, timesteps and returns-to-go match the model
    offrl.seed(0)
    traj = rb.sample_trajectory_batch(8, 20)
    for b in range(8):
        end_t = int(traj.timesteps[b, -1])
        ep = next(e for e in model if np.array_equal(e["obs"][end_t], traj.observations[b, -1]))
        valid = traj.masks[b] == 1
        steps = np.arange(max(end_t - 19, 0), end_t + 1)
        assert int(valid.sum()) == len(steps)
        np.testing.assert_array_equal(traj.timesteps[b, valid], steps)
        np.testing.assert_array_equal(traj.observations[b, valid], np.stack(ep["obs"])[steps])
        rewards = np.array(ep["rewards"], np.float64)
        rtg = np.array([rewards[t:].sum() for t in steps])
        np.testing.assert_allclose(traj.returns_to_go[b, valid, 0], rtg, rtol=1e-5)
        assert not traj.observations[b, ~valid].any()
    env.close()


def test_pendulum_truncated_without_final_observation():
    env = gymnasium.make("Pendulum-v1", max_episode_steps=10)
    rb = create_infinite_replay_buffer(env=env)
    model = _collect(env, rb, 2, seed=3, give_final=False)
    _check_against_model(rb, model, discrete=False)
    assert rb.transition_count == 18
    assert all(e.final_observation is None for e in rb.episodes)
    env.close()


def test_final_observation_ignored_when_terminated():
    rb = create_infinite_replay_buffer(
        observation_signature=Signature(np.float32, (2,)), action_signature=Signature(np.float32, (1,))
    )
    for t in range(3):
        rb.append(np.array([t, t], np.float32), np.array([0.5], np.float32), 1.0)
    rb.clip_episode(True, np.array([9.0, 9.0], np.float32))
    (ep,) = rb.episodes
    assert ep.terminated is True and ep.final_observation is None
    last = _enumerate(rb)[-1]
    assert last.terminal == 1.0
    np.testing.assert_array_equal(last.next_observation, [0.0, 0.0])


def test_open_episode_last_step_is_not_a_transition_yet():
    rb = create_infinite_replay_buffer(
        observation_signature=Signature(np.float32, (1,)), action_signature=Signature(np.float32, (1,))
    )
    rb.append(np.array([0.0], np.float32), np.array([0.0], np.float32), 0.0)
    assert rb.transition_count == 0
    rb.append(np.array([1.0], np.float32), np.array([0.0], np.float32), 0.0)
    assert rb.transition_count == 1
    rb.clip_episode(False, np.array([2.0], np.float32))
    assert rb.transition_count == 2
    np.testing.assert_array_equal(_enumerate(rb)[1].next_observation, [2.0])


def test_online_writing_validates_steps():
    env = gymnasium.make("CartPole-v1")
    rb = create_infinite_replay_buffer(env=env)
    obs = np.zeros(4, np.float32)
    with pytest.raises(ValueError, match=r"action is 2, expected an index in \[0, 2\)"):
        rb.append(obs, 2, 0.0)
    with pytest.raises(ValueError, match="observation has shape"):
        rb.append(np.zeros(5, np.float32), 0, 0.0)
    with pytest.raises(ValueError, match="nan"):
        rb.append(np.array([0, np.nan, 0, 0], np.float32), 0, 0.0)
    with pytest.raises(ValueError, match="reward"):
        rb.append(obs, 0, np.nan)
    assert rb.transition_count == 0 and rb.size() == 0
    env.close()


# ----------------------------------------------------------- append_episode


def test_append_episode_copies_arrays():
    rb = create_infinite_replay_buffer()
    obs = np.arange(12, dtype=np.float32).reshape(6, 2)
    acts = np.linspace(-1, 1, 6, dtype=np.float32)[:, None]
    rewards = np.arange(6, dtype=np.float32)
    rb.append_episode(Episode(obs, acts, rewards[:, None], terminated=True))
    final = np.array([100.0, 101.0], np.float32)
    rb.append_episode(Episode(obs + 50, acts, rewards[:, None], terminated=False, final_observation=final))
    rb.append_episode(Episode(obs + 200, acts, rewards[:, None], terminated=False))
    assert rb.size() == 3
    assert rb.transition_count == 6 + 6 + 5
    assert rb.action_space == ActionSpace.CONTINUOUS and rb.action_size == 1
    e0, e1, e2 = rb.episodes
    np.testing.assert_array_equal(e0.observations, obs)
    np.testing.assert_array_equal(e1.observations, obs + 50)
    np.testing.assert_array_equal(e1.final_observation, final)
    np.testing.assert_array_equal(e2.actions, acts)
    assert not np.shares_memory(e0.observations, obs)
    obs[0, 0] = -999.0  # the buffer holds a copy
    assert rb.episodes[0].observations[0, 0] == 0.0
    trs = _enumerate(rb)
    np.testing.assert_array_equal(trs[5].next_observation, [0.0, 0.0])
    assert trs[5].terminal == 1.0
    np.testing.assert_array_equal(trs[11].next_observation, final)
    np.testing.assert_array_equal(trs[-1].observation, obs[4] + 200)


def test_append_episode_discrete_with_env_checks_action_size():
    env = gymnasium.make("CartPole-v1")
    rb = create_infinite_replay_buffer(env=env)
    obs = np.zeros((4, 4), np.float32)
    rb.append_episode(Episode(obs, np.array([[0], [1], [1], [0]]), np.ones((4, 1), np.float32), True))
    assert rb.transition_count == 4
    with pytest.raises(ValueError, match=r"episode\.actions\[2\] is 2"):
        rb.append_episode(Episode(obs, np.array([[0], [1], [2], [0]]), np.ones((4, 1), np.float32), True))
    assert rb.transition_count == 4
    env.close()


def test_append_episode_while_writing_online_is_refused():
    rb = create_infinite_replay_buffer()
    rb.append(np.zeros(2, np.float32), np.zeros(1, np.float32), 0.0)
    with pytest.raises(ValueError, match="clip_episode"):
        rb.append_episode(Episode(np.zeros((2, 2), np.float32), np.zeros((2, 1), np.float32), np.zeros((2, 1)), True))


@pytest.mark.parametrize("n_episodes", [1, 2, 3, 5, 9])
def test_append_to_dataset_built_from_arrays(n_episodes):
    n = 4 * n_episodes
    obs = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    terminals = np.zeros(n)
    terminals[3::4] = 1
    ds = MDPDataset(obs, np.full((n, 1), 0.5, np.float32), np.ones(n), terminals)
    assert ds.size() == n_episodes
    ds.append_episode(Episode(-obs[:3], np.full((3, 1), 0.25, np.float32), np.ones((3, 1)), True))
    for t in range(2):
        ds.append(np.array([t, -100.0], np.float32), np.array([0.75], np.float32), 2.0)
    ds.clip_episode(True)
    assert ds.size() == n_episodes + 2
    assert ds.transition_count == n + 3 + 2
    np.testing.assert_array_equal(ds.episodes[-2].observations, -obs[:3])
    np.testing.assert_array_equal(ds.episodes[-1].observations, [[0.0, -100.0], [1.0, -100.0]])
    np.testing.assert_array_equal(ds.episodes[0].observations, obs[:4])


def test_buffer_built_from_episodes_argument():
    eps = [
        Episode(np.full((3, 2), k, np.float32), np.zeros((3, 1), np.float32), np.full((3, 1), k, np.float32), True)
        for k in range(4)
    ]
    rb = create_infinite_replay_buffer(episodes=eps)
    assert rb.size() == 4 and rb.transition_count == 12
    np.testing.assert_array_equal(rb.compute_returns(), [0.0, 3.0, 6.0, 9.0])


# ------------------------------------------------------------ FIFO eviction

SIG = dict(observation_signature=Signature(np.float32, (2,)), action_signature=Signature(np.float32, (1,)))


def _step_obs(ep_id, t):
    return np.array([ep_id, t], np.float32)


def _final_obs(ep_id):
    return np.array([ep_id, -1.0], np.float32)


class _Model:
    """Plain Python list model of what was written."""

    def __init__(self):
        self.episodes = []  # dicts: id, n, ending ('terminated' | 'final' | 'none' | 'open')

    def transitions(self):
        out = []
        for ep in self.episodes:
            n = ep["n"]
            for t in range(n):
                if t < n - 1:
                    out.append((ep["id"], t, _step_obs(ep["id"], t + 1), 0.0))
                elif ep["ending"] == "terminated":
                    out.append((ep["id"], t, np.zeros(2, np.float32), 1.0))
                elif ep["ending"] == "final":
                    out.append((ep["id"], t, _final_obs(ep["id"]), 0.0))
        return out


def _check_fifo(rb, model, limit):
    all_transitions = model.transitions()
    expected = all_transitions[-limit:] if limit < len(all_transitions) else all_transitions
    assert rb.transition_count == len(expected)
    got = []
    for i in range(rb.transition_count):
        episode, index = rb.buffer[i]
        tr = rb.transition_picker(episode, index)
        got.append(tr)
    assert len(got) == len(expected)
    for tr, (ep_id, t, nxt, term) in zip(got, expected):
        np.testing.assert_array_equal(tr.observation, _step_obs(ep_id, t))
        np.testing.assert_array_equal(tr.action, np.array([ep_id + t / 100.0], np.float32))
        assert tr.reward[0] == np.float32(10 * ep_id + t)
        np.testing.assert_array_equal(tr.next_observation, nxt)
        assert tr.terminal == term
    # episode boundaries: each live episode is the tail of one written episode
    by_id = {ep["id"]: ep for ep in model.episodes}
    ids = []
    for episode in rb.episodes:
        ep_id = int(episode.observations[0, 0])
        ids.append(ep_id)
        ep = by_id[ep_id]
        n = ep["n"]
        first = n - episode.size()
        assert first >= 0
        np.testing.assert_array_equal(
            episode.observations, np.stack([_step_obs(ep_id, t) for t in range(first, n)])
        )
        assert episode.terminated == (ep["ending"] == "terminated")
        if ep["ending"] == "final":
            np.testing.assert_array_equal(episode.final_observation, _final_obs(ep_id))
        else:
            assert episode.final_observation is None
    assert ids == sorted(set(ids))  # one live episode per written episode, in order
    ids_with_transitions = [int(e.observations[0, 0]) for e in rb.episodes if e.transition_count > 0]
    expected_ids = []
    for ep_id, *_ in expected:
        if not expected_ids or expected_ids[-1] != ep_id:
            expected_ids.append(ep_id)
    assert ids_with_transitions == expected_ids
    # the oldest live episode with transitions starts exactly at the oldest kept transition
    if expected:
        first_live = next(e for e in rb.episodes if e.transition_count > 0)
        assert first_live.observations[0, 1] == expected[0][1]


def _write_online(rb, model, ep_id, n, ending, limit):
    ep = {"id": ep_id, "n": 0, "ending": "open"}
    model.episodes.append(ep)
    for t in range(n):
        rb.append(_step_obs(ep_id, t), np.array([ep_id + t / 100.0], np.float32), 10 * ep_id + t)
        ep["n"] += 1
        _check_fifo(rb, model, limit)
    if ending == "open":
        return
    ep["ending"] = ending
    if ending == "terminated":
        rb.clip_episode(True)
    elif ending == "final":
        rb.clip_episode(False, _final_obs(ep_id))
    else:
        rb.clip_episode(False)
    _check_fifo(rb, model, limit)


def _write_whole(rb, model, ep_id, n, ending, limit):
    obs = np.stack([_step_obs(ep_id, t) for t in range(n)])
    acts = np.array([[ep_id + t / 100.0] for t in range(n)], np.float32)
    rewards = np.array([[10 * ep_id + t] for t in range(n)], np.float32)
    final = _final_obs(ep_id) if ending == "final" else None
    rb.append_episode(Episode(obs, acts, rewards, ending == "terminated", final))
    model.episodes.append({"id": ep_id, "n": n, "ending": ending})
    _check_fifo(rb, model, limit)


def test_fifo_keeps_newest_transitions_simple():
    limit = 5
    rb = create_fifo_replay_buffer(limit, **SIG)
    model = _Model()
    _write_online(rb, model, 0, 4, "terminated", limit)  # 4 transitions
    _write_online(rb, model, 1, 3, "none", limit)  # +2 -> drops 1 from ep 0
    assert rb.transition_count == 5
    assert [e.size() for e in rb.episodes] == [3, 3]
    _write_online(rb, model, 2, 3, "final", limit)  # +3 -> ep 0 gone, ep1 trimmed to 2 transitions
    assert [int(e.observations[0, 0]) for e in rb.episodes] == [1, 2]
    assert rb.transition_count == 5
    _write_whole(rb, model, 3, 8, "terminated", limit)  # longer than limit
    assert rb.size() == 1
    assert rb.episodes[0].size() == 5
    np.testing.assert_array_equal(rb.episodes[0].observations[:, 1], [3, 4, 5, 6, 7])


def test_fifo_open_episode_longer_than_limit():
    limit = 3
    rb = create_fifo_replay_buffer(limit, **SIG)
    model = _Model()
    _write_online(rb, model, 0, 12, "open", limit)
    assert rb.transition_count == 3
    assert rb.size() == 1
    rb.clip_episode(False, _final_obs(0))
    model.episodes[0]["ending"] = "final"
    _check_fifo(rb, model, limit)


def test_fifo_many_episodes_compact_storage():
    # enough rows to force the store to move/compact its arrays several times
    limit = 300
    rb = create_fifo_replay_buffer(limit, **SIG)
    model = _Model()
    rng = np.random.default_rng(0)
    endings = ["terminated", "final", "none"]
    for ep_id in range(120):
        n = int(rng.integers(1, 40))
        ending = endings[ep_id % 3]
        if ep_id % 2:
            _write_whole(rb, model, ep_id, n, ending, limit)
        else:
            ep = {"id": ep_id, "n": 0, "ending": "open"}
            model.episodes.append(ep)
            for t in range(n):
                rb.append(_step_obs(ep_id, t), np.array([ep_id + t / 100.0], np.float32), 10 * ep_id + t)
                ep["n"] += 1
            ep["ending"] = ending
            if ending == "terminated":
                rb.clip_episode(True)
            elif ending == "final":
                rb.clip_episode(False, _final_obs(ep_id))
            else:
                rb.clip_episode(False)
            _check_fifo(rb, model, limit)
    assert rb.transition_count == limit
    expected = model.transitions()[-limit:]
    offrl.seed(0)
    batch = rb.sample_transition_batch(1000)
    keys = {(ep_id, t): (nxt, term) for ep_id, t, nxt, term in expected}
    for k in range(1000):
        key = (int(batch.observations[k, 0]), int(batch.observations[k, 1]))
        assert key in keys
        nxt, term = keys[key]
        np.testing.assert_array_equal(batch.next_observations[k], nxt)
        assert batch.terminals[k, 0] == term


_ops = st.lists(
    st.tuples(
        st.integers(1, 9),
        st.sampled_from(["terminated", "final", "none"]),
        st.booleans(),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=150, deadline=None, database=None, phases=[Phase.generate, Phase.shrink],
          report_multiple_bugs=False)
@given(limit=st.integers(1, 12), ops=_ops, open_tail=st.integers(0, 6))
def test_fifo_matches_list_model(limit, ops, open_tail):
    rb = create_fifo_replay_buffer(limit, **SIG)
    model = _Model()
    for ep_id, (n, ending, online) in enumerate(ops):
        if online:
            _write_online(rb, model, ep_id, n, ending, limit)
        else:
            _write_whole(rb, model, ep_id, n, ending, limit)
    if open_tail:
        _write_online(rb, model, len(ops), open_tail, "open", limit)


def test_fifo_limit_validation():
    with pytest.raises(ValueError, match="limit must be > 0"):
        FIFOBuffer(0)
    with pytest.raises(TypeError, match="limit must be an int"):
        FIFOBuffer(2.5)


# ------------------------------------------------- user protocol components


class ListBuffer:
    """A user Buffer: a plain Python list of (episode, index)."""

    def __init__(self) -> None:
        self._transitions: list = []
        self._episodes: list = []

    def append(self, episode: EpisodeBase, index: int) -> None:
        self._transitions.append((episode, index))
        if not self._episodes or self._episodes[-1] is not episode:
            self._episodes.append(episode)

    @property
    def episodes(self) -> Sequence[EpisodeBase]:
        return self._episodes

    @property
    def transition_count(self) -> int:
        return len(self._transitions)

    def __len__(self) -> int:
        return len(self._transitions)

    def __getitem__(self, index: int):
        return self._transitions[index]


class RewardTimesTenPicker:
    """A user TransitionPicker (no batch method)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, episode: EpisodeBase, index: int) -> Transition:
        self.calls += 1
        obs = episode.observations[index]
        last = index == episode.size() - 1
        nxt = np.zeros_like(obs) if last else episode.observations[index + 1]
        return Transition(
            observation=obs,
            action=episode.actions[index],
            reward=episode.rewards[index] * 10,
            next_observation=nxt,
            next_action=episode.actions[min(index + 1, episode.size() - 1)],
            terminal=float(last and episode.terminated),
            interval=1,
        )


class FirstStepsSlicer:
    """A user TrajectorySlicer: always the episode's first ``size`` steps."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, episode: EpisodeBase, end_index: int, size: int) -> PartialTrajectory:
        self.calls += 1
        obs = episode.observations[:size]
        n = obs.shape[0]
        return PartialTrajectory(
            observations=obs,
            actions=episode.actions[:size],
            rewards=episode.rewards[:size],
            returns_to_go=np.zeros((n, 1), np.float32),
            terminals=np.zeros((n, 1), np.float32),
            timesteps=np.arange(n),
            masks=np.ones(n, np.float32),
            length=size,
        )


class ScaleWriter:
    """A user WriterPreprocess: doubles observations, adds 1 to rewards."""

    def process_observation(self, observation):
        return np.asarray(observation, np.float32) * 2

    def process_action(self, action):
        return action

    def process_reward(self, reward):
        return np.float32(reward) + 1


def test_user_components_satisfy_protocols():
    assert isinstance(ListBuffer(), BufferProtocol)
    assert isinstance(RewardTimesTenPicker(), TransitionPickerProtocol)
    assert isinstance(FirstStepsSlicer(), TrajectorySlicerProtocol)
    assert isinstance(ScaleWriter(), WriterPreprocessProtocol)


def test_user_buffer_online_with_env():
    env = gymnasium.make("Pendulum-v1", max_episode_steps=8)
    user = ListBuffer()
    rb = ReplayBuffer(user, env=env)
    model = _collect(env, rb, 3, seed=4)
    # the user's buffer got every (episode, index) of every transition
    assert user.transition_count == 24
    assert [idx for _, idx in user._transitions] == list(range(8)) * 3
    expected = _check_against_model(rb, model, discrete=False)
    offrl.seed(0)
    batch = rb.sample_transition_batch(64)
    by_obs = {o.tobytes(): (nxt, term) for o, _, _, nxt, term in expected}
    for k in range(64):
        nxt, term = by_obs[batch.observations[k].tobytes()]
        np.testing.assert_array_equal(batch.next_observations[k], nxt)
    tr = rb.sample_transition()
    assert tr.observation.tobytes() in by_obs
    traj = rb.sample_trajectory_batch(4, 3)
    assert traj.observations.shape == (4, 3, 3)
    env.close()


def test_user_buffer_with_append_episode_and_discrete():
    user = ListBuffer()
    rb = ReplayBuffer(user)
    obs = np.arange(10, dtype=np.float32).reshape(5, 2)
    rb.append_episode(Episode(obs, np.array([[0], [2], [1], [2], [0]]), np.ones((5, 1), np.float32), True))
    rb.append_episode(Episode(obs + 10, np.array([[1], [1], [0], [0], [1]]), np.ones((5, 1), np.float32), False))
    assert rb.action_space == ActionSpace.DISCRETE and rb.action_size == 3
    assert user.transition_count == 9
    assert rb.size() == 2
    trs = _enumerate(rb)
    assert trs[4].terminal == 1.0
    np.testing.assert_array_equal(trs[8].next_observation, obs[4] + 10)


def test_user_picker_and_slicer_on_columnar_buffer():
    picker, slicer = RewardTimesTenPicker(), FirstStepsSlicer()
    obs = np.arange(20, dtype=np.float32).reshape(10, 2)
    ds = MDPDataset(obs, np.zeros((10, 1), np.float32), np.arange(10, dtype=np.float32),
                    np.r_[np.zeros(4), 1, np.zeros(4), 1], transition_picker=picker, trajectory_slicer=slicer)
    offrl.seed(0)
    batch = ds.sample_transition_batch(32)
    assert picker.calls == 32
    rows = (batch.observations[:, 0] // 2).astype(int)
    np.testing.assert_array_equal(batch.rewards[:, 0], rows * 10.0)
    tr = ds.sample_transition()
    assert picker.calls == 33
    assert tr.reward[0] == (tr.observation[0] // 2) * 10
    traj = ds.sample_trajectory_batch(6, 2)
    assert slicer.calls == 6
    for b in range(6):
        first = traj.observations[b, 0]
        assert first[0] in (0.0, 10.0)  # first step of episode 0 or 1
        np.testing.assert_array_equal(traj.observations[b, 1], first + 2)
    single = ds.sample_trajectory(3)
    assert slicer.calls == 7 and single.length == 3


def test_user_writer_preprocess():
    env = gymnasium.make("Pendulum-v1", max_episode_steps=5)
    rb = create_infinite_replay_buffer(env=env, writer_preprocessor=ScaleWriter())
    model = _collect(env, rb, 1, seed=5)
    (episode,) = rb.episodes
    np.testing.assert_allclose(episode.observations, np.stack(model[0]["obs"]) * 2, rtol=0, atol=0)
    np.testing.assert_array_equal(episode.rewards[:, 0], np.array(model[0]["rewards"]) + 1)
    np.testing.assert_array_equal(episode.final_observation, model[0]["final"] * 2)
    env.close()


class _FrameStackEnv(gymnasium.Env):
    """Tiny env with frame-stacked observations (4 frames of 1x2x2)."""

    def __init__(self, n_frames=4, horizon=7):
        self.observation_space = gymnasium.spaces.Box(0, 255, (n_frames, 2, 2), np.uint8)
        self.action_space = gymnasium.spaces.Discrete(3)
        self.n_frames, self.horizon = n_frames, horizon

    def _frame(self, t):
        return np.full((1, 2, 2), t + 1, np.uint8)

    def _stack(self):
        frames = [self._frame(k) if k >= 0 else np.zeros((1, 2, 2), np.uint8)
                  for k in range(self.t - self.n_frames + 1, self.t + 1)]
        return np.concatenate(frames)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._stack(), {}

    def step(self, action):
        self.t += 1
        return self._stack(), 1.0, self.t >= self.horizon, False, {}


def _frame_stack_buffer():
    env = _FrameStackEnv()
    rb = create_infinite_replay_buffer(
        env=env, writer_preprocessor=LastFrameWriterPreprocess(), transition_picker=FrameStackTransitionPicker(4)
    )
    stacks = []
    obs, _ = env.reset()
    while True:
        stacks.append(obs)
        nxt, r, term, trunc, _ = env.step(0)
        rb.append(obs, 0, r)
        if term:
            rb.clip_episode(True)
            return rb, stacks
        obs = nxt


def test_last_frame_writer_stores_only_last_channel():
    rb, stacks = _frame_stack_buffer()
    assert rb.dataset_info.observation_signature == Signature(dtype=[np.uint8], shape=[(1, 2, 2)])
    (episode,) = rb.episodes
    assert episode.observations.shape == (7, 1, 2, 2)
    np.testing.assert_array_equal(episode.observations[:, 0, 0, 0], np.arange(1, 8))
    for t, stack in enumerate(stacks):
        np.testing.assert_array_equal(episode.observations[t], stack[-1:])
    # the per-item picker rebuilds the original stacks
    for t in range(7):
        tr = rb.transition_picker(episode, t)
        np.testing.assert_array_equal(tr.observation, stacks[t])
        if t < 6:
            np.testing.assert_array_equal(tr.next_observation, stacks[t + 1])
        else:
            assert tr.terminal == 1.0 and not tr.next_observation.any()


def test_last_frame_writer_with_frame_stack_batch_rebuilds_stacks():
    rb, stacks = _frame_stack_buffer()
    offrl.seed(0)
    batch = rb.sample_transition_batch(40)
    assert batch.terminals.sum() > 0  # the terminal step (t = 6) is in the batch
    for k in range(40):
        # step t's newest frame holds t + 1; the terminal step is t = 6
        t = 6 if batch.terminals[k, 0] == 1.0 else int(batch.observations[k, -1, 0, 0]) - 1
        np.testing.assert_array_equal(batch.observations[k], stacks[t])
        if t + 1 < len(stacks):
            np.testing.assert_array_equal(batch.next_observations[k], stacks[t + 1])
        else:
            assert not batch.next_observations[k].any()


def test_last_frame_writer_on_tuple_observation():
    w = LastFrameWriterPreprocess()
    a, b = np.arange(12).reshape(3, 2, 2), np.arange(6).reshape(3, 2)
    out = w.process_observation((a, b))
    np.testing.assert_array_equal(out[0], a[-1:])
    np.testing.assert_array_equal(out[1], b[-1:])


# ------------------------------------------------------------ MixedReplayBuffer


def _marked_dataset(sign, n=200):
    obs = np.abs(np.random.default_rng(int(sign > 0)).standard_normal((n, 3))).astype(np.float32) + 0.1
    obs *= sign
    terminals = np.zeros(n)
    terminals[49::50] = 1
    return MDPDataset(obs, np.zeros((n, 2), np.float32), np.full(n, sign, np.float32), terminals)


@pytest.mark.parametrize("ratio,batch,secondary", [(0.25, 64, 16), (0.5, 10, 5), (0.0, 32, 0), (1.0, 32, 32),
                                                   (0.1, 100, 10), (0.3, 10, 3)])
def test_mixed_batch_composition_exact(ratio, batch, secondary):
    mixed = MixedReplayBuffer(_marked_dataset(1.0), _marked_dataset(-1.0), ratio)
    offrl.seed(0)
    for _ in range(5):
        b = mixed.sample_transition_batch(batch)
        assert len(b) == batch
        from_secondary = b.observations[:, 0] < 0
        assert int(from_secondary.sum()) == secondary
        np.testing.assert_array_equal(b.rewards[from_secondary, 0], -1.0)
        np.testing.assert_array_equal(b.rewards[~from_secondary, 0], 1.0)
    traj = mixed.sample_trajectory_batch(batch, 3)
    assert int((traj.observations[:, -1, 0] < 0).sum()) == secondary


@pytest.mark.parametrize("ratio,batch", [("0.8", 10), ("0.9", 10), ("0.55", 100), ("0.8", 100)])
def test_mixed_batch_composition_exact_when_ratio_times_batch_is_whole(ratio, batch):
    """ratio * batch is a whole number: exactly that many come from the secondary.

    (``int((1 - r) * B)`` loses one to float rounding here: 0.8 / 10 gives 9.)"""
    secondary = int(Fraction(ratio) * batch)
    mixed = MixedReplayBuffer(_marked_dataset(1.0), _marked_dataset(-1.0), float(ratio))
    offrl.seed(0)
    b = mixed.sample_transition_batch(batch)
    assert int((b.observations[:, 0] < 0).sum()) == secondary


def test_mixed_single_sample_ratio_statistically():
    mixed = MixedReplayBuffer(_marked_dataset(1.0), _marked_dataset(-1.0), 0.25)
    offrl.seed(123)
    n = 4000
    hits = sum(mixed.sample_transition().observation[0] < 0 for _ in range(n))
    mean, sd = n * 0.25, np.sqrt(n * 0.25 * 0.75)
    assert abs(hits - mean) < 5 * sd  # ~ +-137
    offrl.seed(123)
    traj_hits = sum(mixed.sample_trajectory(2).observations[-1, 0] < 0 for _ in range(1000))
    assert abs(traj_hits - 250) < 5 * np.sqrt(1000 * 0.25 * 0.75)


def test_mixed_writes_go_to_primary_and_counts():
    primary = create_infinite_replay_buffer(**SIG)
    secondary = create_infinite_replay_buffer(
        episodes=[Episode(np.ones((4, 2), np.float32), np.full((4, 1), 0.5, np.float32), np.zeros((4, 1)), True)]
    )
    mixed = MixedReplayBuffer(primary, secondary, 0.5)
    for t in range(3):
        mixed.append(np.array([t, 0], np.float32), np.array([0.0], np.float32), 0.0)
    mixed.clip_episode(True)
    assert primary.transition_count == 3 and secondary.transition_count == 4
    assert mixed.transition_count == 7
    assert len(mixed.episodes) == 2


def test_mixed_rejects_bad_ratio_and_mismatched_data():
    a = _marked_dataset(1.0)
    with pytest.raises(ValueError, match="secondary_mix_ratio"):
        MixedReplayBuffer(a, a, 1.5)
    other = MDPDataset(np.zeros((4, 5), np.float32), np.zeros((4, 2), np.float32), np.zeros(4), np.zeros(4))
    with pytest.raises(ValueError, match="different data"):
        MixedReplayBuffer(a, other, 0.5)


# ------------------------------------------------------------------ to_torch


def test_transition_batch_to_torch_same_values_and_dtypes():
    # discrete data built from arrays (independent of online writing)
    env = gymnasium.make("CartPole-v1")
    env.action_space.seed(0)
    obs, _ = env.reset(seed=0)
    observations, actions, rewards, terminals = [], [], [], []
    for _ in range(2):
        while True:
            action = env.action_space.sample()
            next_obs, reward, terminated, truncated, _ = env.step(action)
            observations.append(obs)
            actions.append(action)
            rewards.append(reward)
            terminals.append(float(terminated))
            obs = next_obs
            if terminated or truncated:
                obs, _ = env.reset()
                break
    rb = MDPDataset(np.stack(observations), np.array(actions), np.array(rewards), np.array(terminals))
    assert rb.action_space == ActionSpace.DISCRETE
    batch = rb.sample_transition_batch(16)
    tb = batch.to_torch("cpu")
    expected_dtypes = {
        "observations": torch.float32,
        "actions": torch.int64,
        "rewards": torch.float32,
        "next_observations": torch.float32,
        "next_actions": torch.int64,
        "terminals": torch.float32,
        "intervals": torch.float32,
    }
    for name, dtype in expected_dtypes.items():
        t, a = getattr(tb, name), getattr(batch, name)
        assert isinstance(t, torch.Tensor)
        assert t.dtype == dtype
        assert tuple(t.shape) == a.shape
        np.testing.assert_array_equal(t.numpy(), a)
    assert len(tb) == 16
    env.close()


def test_tuple_and_trajectory_batches_to_torch():
    n = 12
    img = (np.arange(n * 4) % 200).astype(np.uint8).reshape(n, 1, 2, 2)
    vec = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    ds = MDPDataset([img, vec], np.linspace(0, 1, n * 2, dtype=np.float32).reshape(n, 2),
                    np.arange(n, dtype=np.float32), np.r_[np.zeros(5), 1, np.zeros(6)])
    batch = ds.sample_transition_batch(8)
    tb = batch.to_torch()
    assert [t.dtype for t in tb.observations] == [torch.uint8, torch.float32]
    for t, a in zip(tb.observations + tb.next_observations, batch.observations + batch.next_observations):
        np.testing.assert_array_equal(t.numpy(), a)
    assert tb.actions.dtype == torch.float32
    np.testing.assert_array_equal(tb.actions.numpy(), batch.actions)
    traj = ds.sample_trajectory_batch(5, 4)
    tt = traj.to_torch("cpu")
    assert tt.length == 4
    assert tt.timesteps.dtype == torch.int64 and tt.masks.dtype == torch.float32
    assert tt.returns_to_go.dtype == torch.float32
    for name in ("actions", "rewards", "returns_to_go", "terminals", "timesteps", "masks"):
        np.testing.assert_array_equal(getattr(tt, name).numpy(), getattr(traj, name))
    for t, a in zip(tt.observations, traj.observations):
        assert t.dtype == (torch.uint8 if a.dtype == np.uint8 else torch.float32)
        np.testing.assert_array_equal(t.numpy(), a)


def test_infinite_buffer_repr_and_buffer_types():
    rb = create_infinite_replay_buffer(**SIG)
    assert isinstance(rb.buffer, InfiniteBuffer)
    assert "InfiniteBuffer(episodes=0, transitions=0)" == repr(rb.buffer)
    fifo = create_fifo_replay_buffer(7, **SIG)
    assert isinstance(fifo.buffer, FIFOBuffer) and fifo.buffer.limit == 7


def test_from_episode_generator_holds_every_episode_in_order():
    from offrl.dataset import Episode, FIFOBuffer, ReplayBuffer

    def generate():
        for k in range(4):
            n = k + 2
            yield Episode(
                observations=np.full((n, 2), k, dtype=np.float32),
                actions=np.full((n, 1), 0.5 * k, dtype=np.float32),
                rewards=np.arange(n, dtype=np.float32)[:, None],
                terminated=k % 2 == 0,
            )

    rb = ReplayBuffer.from_episode_generator(generate(), FIFOBuffer(100))
    assert rb.size() == 4
    assert [e.size() for e in rb.episodes] == [2, 3, 4, 5]
    assert [bool(e.terminated) for e in rb.episodes] == [True, False, True, False]
    for k, e in enumerate(rb.episodes):
        np.testing.assert_array_equal(e.observations, np.full((k + 2, 2), k, dtype=np.float32))
    assert rb.transition_count == 2 + 2 + 4 + 4


# ----------------------------------------------- d3rlpy 2.8.1's writer arguments
def _steps(buffer, env, seed: int, n_episodes: int) -> list:
    """Write ``n_episodes`` random episodes; the transition count seen after every step."""
    counts = []
    env.action_space.seed(seed)
    for e in range(n_episodes):
        obs, _ = env.reset(seed=seed + e)
        while True:
            action = env.action_space.sample()
            nxt, reward, terminated, truncated, _ = env.step(action)
            buffer.append(obs, action, reward)
            counts.append(buffer.transition_count)
            obs = nxt
            if terminated or truncated:
                buffer.clip_episode(terminated, None if terminated else nxt)
                counts.append(buffer.transition_count)
                break
    return counts


@pytest.mark.parametrize("make", [create_infinite_replay_buffer, lambda **k: create_fifo_replay_buffer(10_000, **k)])
def test_write_at_termination_stores_whole_episodes_with_the_same_content(make):
    env = gymnasium.make("Pendulum-v1", max_episode_steps=7)
    eager = make(env=env)
    held = make(env=env, write_at_termination=True, cache_size=16)
    eager_counts = _steps(eager, env, 3, 3)
    held_counts = _steps(held, env, 3, 3)
    # nothing of an episode is visible before it is clipped; then the whole episode is
    assert held_counts == [0] * 7 + [7] + [7] * 7 + [14] + [14] * 7 + [21]
    assert eager_counts[:7] == [0, 1, 2, 3, 4, 5, 6]  # the open episode's steps before the last
    assert eager.transition_count == held.transition_count == 21
    for a, b in zip(eager.episodes, held.episodes):
        np.testing.assert_array_equal(a.observations, b.observations)
        np.testing.assert_array_equal(a.actions, b.actions)
        np.testing.assert_array_equal(a.rewards, b.rewards)
        assert a.terminated == b.terminated
        np.testing.assert_array_equal(a.final_observation, b.final_observation)


def test_writer_arguments_are_checked_and_load_takes_episode_cls(tmp_path):
    with pytest.raises(ValueError, match="cache_size must be a positive int, got 0"):
        ReplayBuffer(InfiniteBuffer(), cache_size=0)
    with pytest.raises(TypeError, match="write_at_termination must be a bool"):
        ReplayBuffer(InfiniteBuffer(), write_at_termination="yes")
    dataset = MDPDataset(np.arange(8, dtype=np.float32).reshape(4, 2), np.zeros((4, 1), np.float32),
                         np.ones(4, np.float32), np.array([0, 0, 0, 1]))
    path = str(tmp_path / "d.h5")
    dataset.dump(path)
    # d3rlpy 2.8.1's order: (f, buffer, episode_cls, transition_picker, ...)
    again = ReplayBuffer.load(path, InfiniteBuffer(), Episode)
    np.testing.assert_array_equal(again.episodes[0].observations, dataset.episodes[0].observations)
    with pytest.raises(ValueError, match="episode_cls must be offrl.dataset.Episode"):
        ReplayBuffer.load(path, InfiniteBuffer(), PartialTrajectory)
