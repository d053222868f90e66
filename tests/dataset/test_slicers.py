"""Trajectory slicers against a plain reference implementation.

Every property test builds a dataset from a random episode layout, computes
the window ending at *every* step with an obviously-correct loop written
here (from the documented semantics, not from the library's per-item
``__call__``), and compares it with the vectorised ``slice_batch`` and with
the per-item ``__call__`` on the buffer's episode views.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import offrl
from offrl.dataset import (
    BasicTrajectorySlicer,
    Episode,
    FIFOBuffer,
    FrameStackTrajectorySlicer,
    InfiniteBuffer,
    MDPDataset,
    ReplayBuffer,
    TrajectoryMiniBatch,
    create_fifo_replay_buffer,
)
from dataset_layouts import (
    SETTINGS,
    VECTOR_DIM,
    N_DISCRETE,
    RefEpisode,
    cols,
    make_source,
    to_episode,
    build_buffer,
    BUILDS,
    datasets,
    build_from,
    check_fifo_against_source,
)

def all_steps(source):
    return [(e, t) for e, ep in enumerate(source) for t in range(ep.size)]


def _frame(ep: RefEpisode, k: int, i: int) -> np.ndarray:
    column = ep.obs[k]
    return column[i] if i >= 0 else np.zeros_like(column[0])


def ref_window(ep: RefEpisode, end: int, length: int, n_frames: Optional[int] = None) -> dict:
    """The window of ``length`` steps ending at step ``end``, front-padded."""
    first = max(0, end - length + 1)
    steps = list(range(first, end + 1))
    pad = length - len(steps)
    obs = []
    for k in range(len(ep.obs)):
        column = ep.obs[k]
        items = []
        for t in steps:
            if n_frames is None:
                items.append(column[t])
            else:
                items.append(np.concatenate([_frame(ep, k, i) for i in range(t - n_frames + 1, t + 1)], axis=0))
        items = [np.zeros_like(items[0])] * pad + items
        obs.append(np.stack(items))
    actions = np.stack([np.zeros_like(ep.actions[0])] * pad + [ep.actions[t] for t in steps])
    rewards = [0.0] * pad + [float(ep.rewards[t]) for t in steps]
    returns_to_go = [0.0] * pad + [sum(float(r) for r in ep.rewards[t:]) for t in steps]
    terminals = [0.0] * length
    if ep.terminated and end == ep.size - 1:
        terminals[-1] = 1.0
    return dict(
        obs=obs,
        actions=actions,
        rewards=np.array(rewards)[:, None],
        returns_to_go=np.array(returns_to_go)[:, None],
        terminals=np.array(terminals)[:, None],
        timesteps=np.array([0] * pad + steps),
        masks=np.array([0.0] * pad + [1.0] * len(steps)),
    )


def reference(slicer, ep, end, length):
    n_frames = slicer.n_frames if isinstance(slicer, FrameStackTrajectorySlicer) else None
    return ref_window(ep, end, length, n_frames)


# --------------------------------------------------------------------------
# comparisons
# --------------------------------------------------------------------------
def assert_window_matches(got: dict, ref: dict, source, length, where="", lead=()):
    """``got``: the fields of one window (``lead == ()``) or of a batch of
    windows (``lead == (B,)``); ``ref``: the reference, same layout."""
    obs = cols(got["observations"])
    assert len(obs) == len(ref["obs"]), where
    for k in range(len(obs)):
        assert obs[k].dtype == source[0].obs[k].dtype, (where, k, obs[k].dtype)
        np.testing.assert_array_equal(obs[k], ref["obs"][k], err_msg=f"observations[{k}] {where}")
    assert got["actions"].dtype == source[0].actions.dtype, where
    np.testing.assert_array_equal(got["actions"], ref["actions"], err_msg=f"actions {where}")
    for name in ("rewards", "returns_to_go", "terminals"):
        assert got[name].shape == lead + (length, 1), (where, name, got[name].shape)
        assert got[name].dtype == np.float32, (where, name, got[name].dtype)
    np.testing.assert_array_equal(got["rewards"], ref["rewards"].astype(np.float32), err_msg=f"rewards {where}")
    np.testing.assert_allclose(got["returns_to_go"], ref["returns_to_go"], rtol=1e-5, atol=1e-5,
                               err_msg=f"returns_to_go {where}")
    np.testing.assert_array_equal(got["terminals"], ref["terminals"], err_msg=f"terminals {where}")
    assert got["timesteps"].shape == lead + (length,) and got["timesteps"].dtype == np.int64, where
    np.testing.assert_array_equal(got["timesteps"], ref["timesteps"], err_msg=f"timesteps {where}")
    assert got["masks"].shape == lead + (length,) and got["masks"].dtype == np.float32, where
    np.testing.assert_array_equal(got["masks"], ref["masks"], err_msg=f"masks {where}")


def stack_refs(refs) -> dict:
    out = {name: np.stack([r[name] for r in refs]) for name in refs[0] if name != "obs"}
    out["obs"] = [np.stack([r["obs"][k] for r in refs]) for k in range(len(refs[0]["obs"]))]
    return out


def assert_batch_matches(batch: TrajectoryMiniBatch, refs, source, length, where=""):
    """The whole batch against the list of reference windows (batch row i is
    window i; a mismatch message gives the row as its first index)."""
    assert batch.length == length and len(batch) == len(refs), where
    got = {name: getattr(batch, name) for name in FIELDS}
    got["observations"] = batch.observations
    assert isinstance(batch.observations, np.ndarray) == (len(source[0].obs) == 1), where
    assert_window_matches(got, stack_refs(refs), source, length, where, lead=(len(refs),))


FIELDS = ("actions", "rewards", "returns_to_go", "terminals", "timesteps", "masks")


def trajectory_item(tr) -> dict:
    item = {name: np.asarray(getattr(tr, name)) for name in FIELDS}
    item["observations"] = tr.observations
    return item


def end_step_ids(batch: TrajectoryMiniBatch, slicer) -> np.ndarray:
    """The unique id (vector column 0) of the last step of each window."""
    vec = cols(batch.observations)[-1][:, -1]
    return vec[:, -VECTOR_DIM] if isinstance(slicer, FrameStackTrajectorySlicer) else vec[:, 0]


def check_slicer_against_reference(rb, slicer, source, length):
    store = rb.buffer
    steps = all_steps(source)
    assert store.step_count == len(steps)
    assert len(rb.episodes) == len(source)
    episode_ids, rows = store.locate_steps(np.arange(len(steps)))
    starts = store.episode_table()[0]
    np.testing.assert_array_equal(episode_ids, [e for e, _ in steps])
    np.testing.assert_array_equal(rows - starts[episode_ids], [t for _, t in steps])
    refs = [reference(slicer, source[e], t, length) for e, t in steps]

    batch = slicer.slice_batch(store, episode_ids, rows, length)
    assert_batch_matches(batch, refs, source, length, "(slice_batch over all steps; row i is all_steps(source)[i])")

    # the batch follows the given order, repeats included
    order = np.concatenate([np.arange(len(steps))[::-1], [0, 0]])
    permuted = slicer.slice_batch(store, episode_ids[order], rows[order], length)
    assert_batch_matches(permuted, [refs[j] for j in order], source, length, "(slice_batch, permuted)")

    # per-item __call__ on the buffer's episode views
    views = list(rb.episodes)
    for (e, t), ref in zip(steps, refs):
        tr = slicer(views[e], t, length)
        assert tr.length == length and len(tr) == length
        assert_window_matches(trajectory_item(tr), ref, source, length, f"(__call__ episode {e} end {t})")
    for e, ep in enumerate(source):
        with pytest.raises(IndexError):
            slicer(views[e], ep.size, length)

    # the replay buffer's sampling paths: each window is the reference one for its end step
    by_id = {float(source[e].obs[-1][t, 0]): ref for (e, t), ref in zip(steps, refs)}
    offrl.seed(1234)  # reproducible under hypothesis
    sampled = rb.sample_trajectory_batch(32, length)
    assert sampled.length == length
    ids = end_step_ids(sampled, slicer)
    unknown = [float(v) for v in ids if float(v) not in by_id]
    assert not unknown, f"windows end at unknown step ids {unknown}"
    assert_batch_matches(sampled, [by_id[float(v)] for v in ids], source, length, "(sample_trajectory_batch)")
    tr = rb.sample_trajectory(length)
    newest = cols(tr.observations)[-1][-1]
    value = newest[-VECTOR_DIM] if isinstance(slicer, FrameStackTrajectorySlicer) else newest[0]
    assert_window_matches(trajectory_item(tr), by_id[float(value)], source, length, "(sample_trajectory)")


# --------------------------------------------------------------------------
# property tests
# --------------------------------------------------------------------------
@pytest.mark.parametrize("build", BUILDS)
@SETTINGS
@given(data=st.data(), length=st.integers(1, 8))
def test_basic_slicer_matches_reference(build, data, length):
    spec = data.draw(datasets(build), label="spec")
    slicer = BasicTrajectorySlicer()
    source, rb = build_from(spec, trajectory_slicer=slicer)
    check_slicer_against_reference(rb, slicer, source, length)


@pytest.mark.parametrize("build", BUILDS)
@SETTINGS
@given(data=st.data(), length=st.integers(1, 8), n_frames=st.integers(1, 4))
def test_frame_stack_slicer_matches_reference(build, data, length, n_frames):
    spec = data.draw(datasets(build), label="spec")
    slicer = FrameStackTrajectorySlicer(n_frames)
    source, rb = build_from(spec, trajectory_slicer=slicer)
    check_slicer_against_reference(rb, slicer, source, length)


@SETTINGS
@given(spec=datasets("columns"), length=st.integers(1, 8))
def test_frame_stack_slicer_of_one_frame_equals_basic(spec, length):
    source, rb = build_from(spec, trajectory_slicer=None)
    store = rb.buffer
    episode_ids, rows = store.locate_steps(np.arange(store.step_count))
    a = BasicTrajectorySlicer().slice_batch(store, episode_ids, rows, length)
    b = FrameStackTrajectorySlicer(1).slice_batch(store, episode_ids, rows, length)
    for name in FIELDS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    for x, y in zip(cols(a.observations), cols(b.observations)):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize(
    "slicer", [BasicTrajectorySlicer(), FrameStackTrajectorySlicer(1), FrameStackTrajectorySlicer(3)], ids=repr
)
@SETTINGS
@given(spec=datasets("columns"), length=st.integers(1, 5))
def test_slice_batch_arrays_are_independent(slicer, spec, length):
    """Writing into one array of a batch must neither change another array
    of the batch nor the stored data."""
    source, rb = build_from(spec, trajectory_slicer=slicer)
    store = rb.buffer
    episode_ids, rows = store.locate_steps(np.arange(store.step_count))
    batch = slicer.slice_batch(store, episode_ids, rows, length)
    arrays = {name: getattr(batch, name) for name in FIELDS}
    arrays.update({f"observations[{k}]": o for k, o in enumerate(cols(batch.observations))})
    stored = {f"store.observations[{k}]": c for k, c in enumerate(store.observations)}
    stored.update({"store.actions": store.actions, "store.rewards": store.rewards})
    names = sorted(arrays)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert not np.shares_memory(arrays[a], arrays[b]), f"batch.{a} and batch.{b} share memory"
        for b, column in stored.items():
            assert not np.shares_memory(arrays[a], column), f"batch.{a} is a view of {b}"


class PerItemOnly:
    """A user slicer: only ``__call__`` (the replay buffer's per-item path)."""

    def __init__(self, inner):
        self.inner = inner

    def __call__(self, episode, end_index, size):
        return self.inner(episode, end_index, size)


@pytest.mark.parametrize("slicer", [BasicTrajectorySlicer(), FrameStackTrajectorySlicer(2)], ids=repr)
@SETTINGS
@given(spec=datasets("columns"), length=st.integers(1, 6))
def test_sample_trajectory_batch_per_item_path_matches_reference(slicer, spec, length):
    source, rb = build_from(spec, trajectory_slicer=PerItemOnly(slicer))
    # a user slicer ends windows at d3rlpy's transitions only: never at the last
    # step of an episode that did not terminate
    steps = [(e, t) for e, t in all_steps(source) if source[e].terminated or t < source[e].size - 1]
    if not steps:
        with pytest.raises(ValueError):
            rb.sample_trajectory_batch(16, length)
        return
    by_id = {float(source[e].obs[-1][t, 0]): reference(slicer, source[e], t, length) for e, t in steps}
    offrl.seed(1234)
    batch = rb.sample_trajectory_batch(16, length)
    ids = end_step_ids(batch, slicer)
    unknown = [float(v) for v in ids if float(v) not in by_id]
    assert not unknown, f"windows end at unknown step ids {unknown}"
    assert_batch_matches(batch, [by_id[float(v)] for v in ids], source, length, "(per-item path)")


SLICERS = st.one_of(
    st.just(BasicTrajectorySlicer()),
    st.builds(FrameStackTrajectorySlicer, st.integers(1, 4)),
)


@pytest.mark.parametrize("build", ["create_fifo_replay_buffer", "set_columns", "online"])
@SETTINGS
@given(spec=datasets("replay"), limit=st.integers(1, 40), slicer=SLICERS, length=st.integers(1, 8))
def test_fifo_buffer_slicers_match_reference_on_trimmed_episodes(build, spec, limit, slicer, length):
    source = make_source(spec["layout"], spec["obs_kind"], spec["act_kind"], spec["seed"])
    kw = {"action_size": N_DISCRETE} if spec["act_kind"] == "discrete" else {}
    if build == "create_fifo_replay_buffer":
        rb = create_fifo_replay_buffer(
            limit, episodes=[to_episode(e) for e in source], trajectory_slicer=slicer, **kw
        )
    else:
        mode = "columns" if build == "set_columns" else "online"
        rb = build_buffer(source, spec["obs_kind"], spec["act_kind"], mode, trajectory_slicer=slicer, store=FIFOBuffer(limit))
    views = check_fifo_against_source(rb, source, limit)
    # the reference is built from the buffer's (trimmed) episode views
    check_slicer_against_reference(rb, slicer, views, length)


@pytest.mark.parametrize("kind", ["infinite", "fifo"])
def test_slice_batch_after_storage_growth_and_compaction(kind):
    """Enough online writing to grow the columns and the episode table
    several times (and, for a FIFO buffer, to compact them)."""
    rng = np.random.default_rng(5)
    kinds = ["terminated", "truncated", "final"]
    layout = [(int(rng.integers(1, 40)), kinds[int(rng.integers(3))]) for _ in range(150)]
    source = make_source(layout, "tuple", "continuous", seed=11)
    store = InfiniteBuffer() if kind == "infinite" else FIFOBuffer(300)
    slicer = BasicTrajectorySlicer()
    rb = build_buffer(source, "tuple", "continuous", "online", trajectory_slicer=slicer, store=store)
    if kind == "fifo":
        live = check_fifo_against_source(rb, source, 300)
    else:
        live = source
    check_slicer_against_reference(rb, slicer, live, 6)


# --------------------------------------------------------------------------
# exact values on hand-built data
# --------------------------------------------------------------------------
def _dataset(slicer=None):
    # episode 0: 3 steps, terminal; episode 1: 4 steps, timeout
    obs = np.arange(1, 15, dtype=np.float32).reshape(7, 2)
    actions = np.arange(7, dtype=np.float32)[:, None] + 0.5
    rewards = np.array([1.0, 2.0, 3.0, 10.0, 20.0, 30.0, 40.0], dtype=np.float32)
    ds = MDPDataset(obs, actions, rewards, [0, 0, 1, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 1], trajectory_slicer=slicer)
    return obs, actions, rewards, ds


def _slice(rb, slicer, step_indices, length):
    store = rb.buffer
    episode_ids, rows = store.locate_steps(np.asarray(step_indices))
    return slicer.slice_batch(store, episode_ids, rows, length)


def test_exact_window_with_front_padding_and_terminal():
    obs, actions, rewards, ds = _dataset()
    slicer = BasicTrajectorySlicer()
    b = _slice(ds, slicer, [1, 2], 5)  # steps 1 and 2 of episode 0
    z = np.zeros(2, np.float32)
    np.testing.assert_array_equal(b.observations[0], np.stack([z, z, z, obs[0], obs[1]]))
    np.testing.assert_array_equal(b.observations[1], np.stack([z, z, obs[0], obs[1], obs[2]]))
    np.testing.assert_array_equal(b.actions[1, :, 0], [0, 0, 0.5, 1.5, 2.5])
    np.testing.assert_array_equal(b.rewards[1, :, 0], [0, 0, 1, 2, 3])
    np.testing.assert_allclose(b.returns_to_go[0, :, 0], [0, 0, 0, 6, 5])
    np.testing.assert_allclose(b.returns_to_go[1, :, 0], [0, 0, 6, 5, 3])
    np.testing.assert_array_equal(b.masks, [[0, 0, 0, 1, 1], [0, 0, 1, 1, 1]])
    np.testing.assert_array_equal(b.timesteps, [[0, 0, 0, 0, 1], [0, 0, 0, 1, 2]])
    # only the terminal step, in the last position, is flagged
    np.testing.assert_array_equal(b.terminals[:, :, 0], [[0, 0, 0, 0, 0], [0, 0, 0, 0, 1]])
    tr = slicer(ds.episodes[0], 2, 5)
    np.testing.assert_array_equal(tr.terminals[:, 0], [0, 0, 0, 0, 1])
    np.testing.assert_allclose(tr.returns_to_go[:, 0], [0, 0, 6, 5, 3])


def test_exact_window_inside_a_truncated_episode():
    obs, actions, rewards, ds = _dataset()
    slicer = BasicTrajectorySlicer()
    # step index 5 is step 2 of episode 1; step index 6 its (timeout) last step
    b = _slice(ds, slicer, [5, 6], 2)
    np.testing.assert_array_equal(b.observations[0], obs[4:6])
    np.testing.assert_array_equal(b.observations[1], obs[5:7])
    np.testing.assert_array_equal(b.timesteps, [[1, 2], [2, 3]])
    np.testing.assert_array_equal(b.masks, np.ones((2, 2)))
    np.testing.assert_allclose(b.returns_to_go[:, :, 0], [[90, 70], [70, 40]])
    # a timeout is not a terminal
    np.testing.assert_array_equal(b.terminals, np.zeros((2, 2, 1)))
    # the window never reaches back into the previous episode
    b = _slice(ds, slicer, [3], 4)
    np.testing.assert_array_equal(b.observations[0], np.stack([np.zeros(2), np.zeros(2), np.zeros(2), obs[3]]))
    np.testing.assert_allclose(b.returns_to_go[0, :, 0], [0, 0, 0, 100])


@pytest.mark.parametrize("with_final", [False, True])
def test_exact_returns_to_go_ignore_the_final_observation_row(with_final):
    obs = np.arange(1, 9, dtype=np.float32).reshape(4, 2)
    kw = {"next_observations": obs + 50.0} if with_final else {}
    ds = MDPDataset(obs, np.zeros((4, 2), np.float32), np.array([1.0, 2.0, 4.0, 8.0]), [0, 1, 0, 0], [0, 0, 0, 1], **kw)
    b = _slice(ds, BasicTrajectorySlicer(), np.arange(4), 3)
    np.testing.assert_allclose(b.returns_to_go[:, -1, 0], [3, 2, 12, 8])
    np.testing.assert_allclose(b.returns_to_go[3, :, 0], [0, 12, 8])
    np.testing.assert_array_equal(b.observations[3], np.stack([np.zeros(2), obs[2], obs[3]]))


def test_exact_frame_stack_slicer():
    slicer = FrameStackTrajectorySlicer(2)
    frames = np.arange(1, 11, dtype=np.float32).reshape(5, 1, 2)
    ds = MDPDataset(frames, np.full((5, 1), 0.5, np.float32), np.ones(5), [0, 1, 0, 0, 1], trajectory_slicer=slicer)
    b = _slice(ds, slicer, [1, 4], 3)
    z = np.zeros((1, 2), np.float32)
    f = list(frames)
    assert b.observations.shape == (2, 3, 2, 2)
    np.testing.assert_array_equal(b.observations[0], np.stack([
        np.concatenate([z, z]), np.concatenate([z, f[0]]), np.concatenate([f[0], f[1]]),
    ]))
    # the second episode's first frame is stacked with zeros, not with the first episode's frames
    np.testing.assert_array_equal(b.observations[1], np.stack([
        np.concatenate([z, f[2]]), np.concatenate([f[2], f[3]]), np.concatenate([f[3], f[4]]),
    ]))
    np.testing.assert_array_equal(b.masks, [[0, 1, 1], [1, 1, 1]])
    tr = slicer(ds.episodes[1], 2, 3)
    np.testing.assert_array_equal(tr.observations, b.observations[1])


@pytest.mark.parametrize("build", ["create_fifo_replay_buffer", "set_columns"])
def test_exact_fifo_trimmed_episode_window(build):
    slicer = FrameStackTrajectorySlicer(2)
    frames = np.arange(1, 13, dtype=np.float32).reshape(6, 1, 2)
    actions = np.full((6, 1), 0.5, np.float32)
    rewards = np.arange(1, 7, dtype=np.float32)[:, None]
    # 6 transitions written, keep the newest 4: the first two steps of the first episode go
    if build == "create_fifo_replay_buffer":
        episodes = [
            Episode(frames[:4], actions[:4], rewards[:4], terminated=True),
            Episode(frames[4:], actions[4:], rewards[4:], terminated=True),
        ]
        rb = create_fifo_replay_buffer(4, episodes=episodes, trajectory_slicer=slicer)
    else:
        store = FIFOBuffer(4)
        store.set_columns(
            [frames], actions, rewards, np.array([0, 4]), np.array([4, 6]),
            np.array([True, True]), np.array([False, False]),
        )
        rb = ReplayBuffer(store, trajectory_slicer=slicer)
    assert rb.buffer.step_count == 4
    b = _slice(rb, slicer, [1], 4)  # the last step of the trimmed episode
    z = np.zeros((1, 2), np.float32)
    np.testing.assert_array_equal(b.observations[0], np.stack([
        np.concatenate([z, z]), np.concatenate([z, z]),
        np.concatenate([z, frames[2]]), np.concatenate([frames[2], frames[3]]),
    ]))
    np.testing.assert_array_equal(b.masks[0], [0, 0, 1, 1])
    np.testing.assert_array_equal(b.timesteps[0], [0, 0, 0, 1])
    np.testing.assert_allclose(b.returns_to_go[0, :, 0], [0, 0, 7, 4])
    np.testing.assert_array_equal(b.terminals[0, :, 0], [0, 0, 0, 1])
    tr = slicer(rb.episodes[0], 1, 4)
    np.testing.assert_array_equal(tr.observations, b.observations[0])


# --------------------------------------------------------------------------
# sampling distribution
# --------------------------------------------------------------------------
def test_sample_trajectory_batch_is_uniform_over_steps():
    layout = [(1, "terminated"), (5, "truncated"), (3, "final"), (1, "truncated"), (7, "terminated"),
              (2, "final"), (4, "truncated"), (1, "final"), (6, "terminated")]
    source = make_source(layout, "vector", "continuous", seed=3)
    rb = build_buffer(source, "vector", "continuous", "columns")
    steps = all_steps(source)
    S = len(steps)
    ids = {float(source[e].obs[0][t, 0]): i for i, (e, t) in enumerate(steps)}
    offrl.seed(0)
    counts = np.zeros(S)
    n_batches, batch_size = 100, 512
    for _ in range(n_batches):
        batch = rb.sample_trajectory_batch(batch_size, 3)
        for value in batch.observations[:, -1, 0]:
            assert float(value) in ids, f"window ends at an unknown step id {value}"
            counts[ids[float(value)]] += 1
    n = n_batches * batch_size
    expected = n / S
    chi2 = float(np.sum((counts - expected) ** 2 / expected))
    df = S - 1
    assert chi2 < df + 6 * np.sqrt(2 * df), (chi2, df, counts)
    assert counts.min() > 0.8 * expected and counts.max() < 1.2 * expected
    # the last steps of truncated episodes without a final observation are window ends too
    last_truncated = [ids[float(ep.obs[0][-1, 0])] for ep in source if not ep.terminated and ep.final is None]
    assert (counts[last_truncated] > 0).all()

    offrl.seed(0)
    seen = {float(rb.sample_trajectory(2).observations[-1, 0]) for _ in range(2000)}
    assert seen == set(ids)
