"""Transition pickers against a plain reference implementation.

Every property test builds a dataset from a random episode layout, computes
every transition with an obviously-correct loop written here (from the
documented semantics, not from the library's per-item ``__call__``), and
compares it with the vectorised ``pick_batch`` over *all* transitions and
with the per-item ``__call__`` on the buffer's episode views.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import offrl
from offrl.dataset import (
    BasicTransitionPicker,
    Episode,
    FIFOBuffer,
    FrameStackTransitionPicker,
    InfiniteBuffer,
    MDPDataset,
    MultiStepTransitionPicker,
    ReplayBuffer,
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

def all_transitions(source):
    return [(e, t) for e, ep in enumerate(source) for t in range(ep.n_transitions)]


def zeros_like_obs(obs):
    return [np.zeros_like(o) for o in obs]


def ref_basic(ep: RefEpisode, t: int) -> dict:
    n = ep.size
    obs = [c[t] for c in ep.obs]
    if t + 1 < n:
        nxt, terminal = [c[t + 1] for c in ep.obs], 0.0
    elif ep.terminated:
        nxt, terminal = zeros_like_obs(obs), 1.0
    else:
        assert ep.final is not None
        nxt, terminal = list(ep.final), 0.0
    next_action = ep.actions[t + 1] if t + 1 < n else np.zeros_like(ep.actions[0])
    return dict(
        obs=obs, action=ep.actions[t], reward=np.float64(ep.rewards[t]), next_obs=nxt,
        next_action=next_action, terminal=terminal, interval=1,
    )


def ref_multistep(ep: RefEpisode, t: int, n_steps: int, gamma: float) -> dict:
    n = ep.size
    last = n if (ep.terminated or ep.final is not None) else n - 1
    next_index = min(t + n_steps, last)
    interval = next_index - t
    reward = 0.0
    for k in range(interval):
        reward += gamma**k * float(ep.rewards[t + k])
    terminal = ep.terminated and next_index == n
    obs = [c[t] for c in ep.obs]
    if terminal:
        nxt = zeros_like_obs(obs)
    elif next_index < n:
        nxt = [c[next_index] for c in ep.obs]
    else:
        nxt = list(ep.final)
    next_action = ep.actions[next_index] if next_index < n else np.zeros_like(ep.actions[0])
    return dict(
        obs=obs, action=ep.actions[t], reward=reward, next_obs=nxt, next_action=next_action,
        terminal=float(terminal), interval=interval,
    )


def _frame(ep: RefEpisode, k: int, i: int) -> np.ndarray:
    """Frame ``i`` of observation element ``k``: zeros before the episode,
    the final observation right after its last step."""
    column = ep.obs[k]
    if i < 0:
        return np.zeros_like(column[0])
    if i < ep.size:
        return column[i]
    assert i == ep.size and ep.final is not None
    return ep.final[k]


def ref_frame_stack(ep: RefEpisode, t: int, n_frames: int) -> dict:
    n = ep.size
    terminal = ep.terminated and t == n - 1
    obs, nxt = [], []
    for k in range(len(ep.obs)):
        obs.append(np.concatenate([_frame(ep, k, i) for i in range(t - n_frames + 1, t + 1)], axis=0))
        if terminal:
            nxt.append(np.zeros_like(obs[-1]))
        else:
            nxt.append(np.concatenate([_frame(ep, k, i) for i in range(t - n_frames + 2, t + 2)], axis=0))
    next_action = ep.actions[t + 1] if t + 1 < n else np.zeros_like(ep.actions[0])
    return dict(
        obs=obs, action=ep.actions[t], reward=np.float64(ep.rewards[t]), next_obs=nxt,
        next_action=next_action, terminal=float(terminal), interval=1,
    )


def reference(picker, ep, t):
    if isinstance(picker, MultiStepTransitionPicker):
        return ref_multistep(ep, t, picker.n_steps, picker.gamma)
    if isinstance(picker, FrameStackTransitionPicker):
        return ref_frame_stack(ep, t, picker.n_frames)
    return ref_basic(ep, t)


# --------------------------------------------------------------------------
# comparisons
# --------------------------------------------------------------------------
def assert_batch_matches(batch, refs, source, where=""):
    """``batch`` (a TransitionMiniBatch) equals the list of reference dicts."""
    B = len(refs)
    obs_cols, next_cols = cols(batch.observations), cols(batch.next_observations)
    n_elems = len(source[0].obs)
    assert len(obs_cols) == n_elems and len(next_cols) == n_elems
    assert isinstance(batch.observations, np.ndarray) == (n_elems == 1)
    for k in range(n_elems):
        dtype = source[0].obs[k].dtype
        expected = np.stack([r["obs"][k] for r in refs])
        expected_next = np.stack([r["next_obs"][k] for r in refs])
        assert obs_cols[k].dtype == dtype and next_cols[k].dtype == dtype, where
        np.testing.assert_array_equal(obs_cols[k], expected, err_msg=f"observations[{k}] {where}")
        np.testing.assert_array_equal(next_cols[k], expected_next, err_msg=f"next_observations[{k}] {where}")
    assert batch.actions.dtype == source[0].actions.dtype
    assert batch.next_actions.dtype == source[0].actions.dtype
    np.testing.assert_array_equal(batch.actions, np.stack([r["action"] for r in refs]), err_msg=where)
    np.testing.assert_array_equal(batch.next_actions, np.stack([r["next_action"] for r in refs]), err_msg=where)
    for name in ("rewards", "terminals", "intervals"):
        array = getattr(batch, name)
        assert array.shape == (B, 1), (name, array.shape)
        assert array.dtype == np.float32, (name, array.dtype)
    np.testing.assert_allclose(
        batch.rewards[:, 0], np.array([r["reward"] for r in refs]), rtol=1e-5, atol=1e-6, err_msg=where
    )
    np.testing.assert_array_equal(batch.terminals[:, 0], np.array([r["terminal"] for r in refs]), err_msg=where)
    np.testing.assert_array_equal(batch.intervals[:, 0], np.array([r["interval"] for r in refs]), err_msg=where)
    assert len(batch) == B


def assert_transition_matches(tr, ref, where=""):
    obs, nxt = cols(tr.observation), cols(tr.next_observation)
    assert len(obs) == len(ref["obs"]) and len(nxt) == len(ref["next_obs"]), where
    for k in range(len(obs)):
        assert obs[k].dtype == ref["obs"][k].dtype, where
        assert nxt[k].dtype == ref["next_obs"][k].dtype, where
        np.testing.assert_array_equal(obs[k], ref["obs"][k], err_msg=f"observation {where}")
        np.testing.assert_array_equal(nxt[k], ref["next_obs"][k], err_msg=f"next_observation {where}")
    np.testing.assert_array_equal(np.asarray(tr.action), ref["action"], err_msg=where)
    np.testing.assert_array_equal(np.asarray(tr.next_action), ref["next_action"], err_msg=where)
    assert np.asarray(tr.reward).shape == (1,), where
    np.testing.assert_allclose(np.asarray(tr.reward)[0], ref["reward"], rtol=1e-5, atol=1e-6, err_msg=where)
    assert float(tr.terminal) == ref["terminal"], where
    assert int(tr.interval) == ref["interval"], where


def check_picker_against_reference(rb, picker, source):
    """pick_batch over all transitions, per-item __call__ on every transition,
    and sample_transition_batch, all against the reference."""
    store = rb.buffer
    expected = all_transitions(source)
    assert rb.transition_count == len(expected) == store.transition_count
    assert store.step_count == sum(e.size for e in source)
    assert len(rb.episodes) == len(source)
    if not expected:
        return
    episode_ids, rows = store.locate_transitions(np.arange(len(expected)))
    starts = store.episode_table()[0]
    np.testing.assert_array_equal(episode_ids, [e for e, _ in expected])
    np.testing.assert_array_equal(rows - starts[episode_ids], [t for _, t in expected])
    refs = [reference(picker, source[e], t) for e, t in expected]
    assert_batch_matches(picker.pick_batch(store, episode_ids, rows), refs, source, "(pick_batch, all)")

    # reversed / repeated order: the batch follows the given order
    order = np.concatenate([np.arange(len(expected))[::-1], [0, 0]])
    assert_batch_matches(
        picker.pick_batch(store, episode_ids[order], rows[order]), [refs[i] for i in order], source,
        "(pick_batch, permuted)",
    )

    # per-item __call__ on the buffer's episode views
    views = list(rb.episodes)
    for (e, t), ref in zip(expected, refs):
        assert_transition_matches(picker(views[e], t), ref, f"(__call__ episode {e} step {t})")
    for e, ep in enumerate(source):
        with pytest.raises(IndexError):
            picker(views[e], ep.n_transitions)

    if type(picker) is BasicTransitionPicker:  # the transition-table path gives the same batches
        all_ids = np.arange(len(expected))
        store.transition_table()  # the first call at a version only notes it
        assert store.transition_table() is not None
        for ids in (all_ids, order):
            assert_same_batch(picker.pick_transitions(store, ids), picker.pick_batch(store, episode_ids[ids], rows[ids]))

    # the replay buffer's sampling path: every sampled item is a reference transition
    check_sampled_batch(rb, picker, source, expected, refs)


def assert_same_batch(got, want):
    for name, value in _batch_arrays(want).items():
        other = _batch_arrays(got)[name]
        assert other.dtype == value.dtype and other.shape == value.shape, name
        np.testing.assert_array_equal(other, value, err_msg=name)
    assert len(got.rewards_to_go) == len(want.rewards_to_go)
    for i in range(len(want.rewards_to_go)):
        np.testing.assert_array_equal(got.rewards_to_go[i], want.rewards_to_go[i], err_msg=f"rewards_to_go[{i}]")


def check_sampled_batch(rb, picker, source, expected, refs, batch_size=64):
    by_id = {float(source[e].obs[-1][t, 0]): ref for (e, t), ref in zip(expected, refs)}
    offrl.seed(1234)  # reproducible under hypothesis
    batch = rb.sample_transition_batch(batch_size)
    ids = cols(batch.observations)[-1][:, 0]
    if isinstance(picker, FrameStackTransitionPicker):
        # the newest frame is the last VECTOR_DIM entries of the stacked vector
        ids = cols(batch.observations)[-1][:, -VECTOR_DIM]
    sampled = []
    for i in ids:
        assert float(i) in by_id, f"sampled a row that is not a transition: id {i}"
        sampled.append(by_id[float(i)])
    assert_batch_matches(batch, sampled, source, "(sample_transition_batch)")
    # sampled again with the same seed: the second call at an unchanged version may take the
    # buffer's cached per-transition table (the basic picker); the batch is the same
    offrl.seed(1234)
    assert_same_batch(rb.sample_transition_batch(batch_size), batch)


# --------------------------------------------------------------------------
# strategies
# --------------------------------------------------------------------------
@pytest.mark.parametrize("build", BUILDS)
@SETTINGS
@given(data=st.data())
def test_basic_picker_matches_reference(build, data):
    spec = data.draw(datasets(build), label="spec")
    picker = BasicTransitionPicker()
    source, rb = build_from(spec, transition_picker=picker)
    check_picker_against_reference(rb, picker, source)


@pytest.mark.parametrize("build", BUILDS)
@SETTINGS
@given(
    data=st.data(),
    n_steps=st.integers(1, 7),
    gamma=st.sampled_from([0.0, 0.5, 0.9, 0.99, 1.0]),
)
def test_multistep_picker_matches_reference(build, data, n_steps, gamma):
    spec = data.draw(datasets(build), label="spec")
    picker = MultiStepTransitionPicker(n_steps, gamma)
    source, rb = build_from(spec, transition_picker=picker)
    check_picker_against_reference(rb, picker, source)


@pytest.mark.parametrize("build", BUILDS)
@SETTINGS
@given(data=st.data(), n_frames=st.integers(1, 4))
def test_frame_stack_picker_matches_reference(build, data, n_frames):
    spec = data.draw(datasets(build), label="spec")
    picker = FrameStackTransitionPicker(n_frames)
    source, rb = build_from(spec, transition_picker=picker)
    check_picker_against_reference(rb, picker, source)


@SETTINGS
@given(spec=datasets("columns"))
def test_multistep_and_frame_stack_of_one_equal_basic(spec):
    source, rb = build_from(spec, transition_picker=None)
    store = rb.buffer
    total = store.transition_count
    if total == 0:
        return
    episode_ids, rows = store.locate_transitions(np.arange(total))
    a = BasicTransitionPicker().pick_batch(store, episode_ids, rows)
    b = MultiStepTransitionPicker(1, 0.7).pick_batch(store, episode_ids, rows)
    c = FrameStackTransitionPicker(1).pick_batch(store, episode_ids, rows)
    for other in (b, c):
        for name in ("actions", "rewards", "next_actions", "terminals", "intervals"):
            np.testing.assert_array_equal(getattr(a, name), getattr(other, name), err_msg=name)
        for x, y in zip(cols(a.observations), cols(other.observations)):
            np.testing.assert_array_equal(x, y)
        for x, y in zip(cols(a.next_observations), cols(other.next_observations)):
            np.testing.assert_array_equal(x, y)


def _batch_arrays(batch):
    out = {}
    for field in dataclasses.fields(batch):
        value = getattr(batch, field.name)
        if isinstance(value, list):
            for k, v in enumerate(value):
                out[f"{field.name}[{k}]"] = v
        elif isinstance(value, np.ndarray):
            out[field.name] = value
    return out


@pytest.mark.parametrize(
    "picker",
    [BasicTransitionPicker(), MultiStepTransitionPicker(3, 0.9), FrameStackTransitionPicker(1), FrameStackTransitionPicker(3)],
    ids=repr,
)
@SETTINGS
@given(spec=datasets("columns"))
def test_pick_batch_arrays_are_independent(picker, spec):
    """Writing into one array of a batch (e.g. in-place normalisation) must
    neither change another array of the batch nor the stored data."""
    source, rb = build_from(spec, transition_picker=picker)
    store = rb.buffer
    total = store.transition_count
    if total == 0:
        return
    episode_ids, rows = store.locate_transitions(np.arange(total))
    arrays = _batch_arrays(picker.pick_batch(store, episode_ids, rows))
    stored = {f"store.observations[{k}]": c for k, c in enumerate(store.observations)}
    stored.update({"store.actions": store.actions, "store.rewards": store.rewards})
    names = sorted(arrays)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert not np.shares_memory(arrays[a], arrays[b]), f"batch.{a} and batch.{b} share memory"
        for b, column in stored.items():
            assert not np.shares_memory(arrays[a], column), f"batch.{a} is a view of {b}"


class PerItemOnly:
    """A user picker: only ``__call__`` (the replay buffer's per-item path)."""

    def __init__(self, inner):
        self.inner = inner

    def __call__(self, episode, index):
        return self.inner(episode, index)


@pytest.mark.parametrize(
    "picker",
    [BasicTransitionPicker(), MultiStepTransitionPicker(2, 0.5), FrameStackTransitionPicker(2)],
    ids=repr,
)
@SETTINGS
@given(spec=datasets("columns"))
def test_sample_transition_batch_per_item_path_matches_reference(picker, spec):
    source, rb = build_from(spec, transition_picker=PerItemOnly(picker))
    # a user picker sees d3rlpy's transitions only: never the last step of an
    # episode that did not terminate, even where offrl keeps its final observation
    expected = [(e, t) for e, t in all_transitions(source) if source[e].terminated or t < source[e].size - 1]
    if not expected:
        with pytest.raises(ValueError):
            rb.sample_transition_batch(4)
        return
    refs = [reference(picker, source[e], t) for e, t in expected]
    check_sampled_batch(rb, picker, source, expected, refs, batch_size=16)


PICKERS = st.one_of(
    st.just(BasicTransitionPicker()),
    st.builds(MultiStepTransitionPicker, st.integers(1, 5), st.sampled_from([0.5, 0.99])),
    st.builds(FrameStackTransitionPicker, st.integers(1, 4)),
)


@pytest.mark.parametrize("build", ["create_fifo_replay_buffer", "set_columns", "online"])
@SETTINGS
@given(spec=datasets("replay"), limit=st.integers(1, 40), picker=PICKERS)
def test_fifo_buffer_pickers_match_reference_on_trimmed_episodes(build, spec, limit, picker):
    source = make_source(spec["layout"], spec["obs_kind"], spec["act_kind"], spec["seed"])
    kw = {"action_size": N_DISCRETE} if spec["act_kind"] == "discrete" else {}
    if build == "create_fifo_replay_buffer":
        rb = create_fifo_replay_buffer(
            limit, episodes=[to_episode(e) for e in source], transition_picker=picker, **kw
        )
    else:
        mode = "columns" if build == "set_columns" else "online"
        rb = build_buffer(source, spec["obs_kind"], spec["act_kind"], mode, transition_picker=picker, store=FIFOBuffer(limit))
    views = check_fifo_against_source(rb, source, limit)
    # the reference is built from the buffer's (trimmed) episode views
    check_picker_against_reference(rb, picker, views)

@pytest.mark.parametrize("kind", ["infinite", "fifo"])
def test_pick_batch_after_storage_growth_and_compaction(kind):
    """Enough online writing to grow the columns and the episode table
    several times (and, for a FIFO buffer, to compact them)."""
    rng = np.random.default_rng(5)
    kinds = ["terminated", "truncated", "final"]
    layout = [(int(rng.integers(1, 40)), kinds[int(rng.integers(3))]) for _ in range(150)]
    source = make_source(layout, "tuple", "continuous", seed=11)
    store = InfiniteBuffer() if kind == "infinite" else FIFOBuffer(300)
    picker = MultiStepTransitionPicker(3, 0.9)
    rb = build_buffer(source, "tuple", "continuous", "online", transition_picker=picker, store=store)
    if kind == "fifo":
        live = check_fifo_against_source(rb, source, 300)
    else:
        live = source
    check_picker_against_reference(rb, picker, live)


# --------------------------------------------------------------------------
# exact values on hand-built data
# --------------------------------------------------------------------------
def _tiny(next_observations: bool, build: str = "mdp", picker=None):
    # episode 0: steps 0-2, terminal at 2; episode 1: steps 3-5, timeout at 5;
    # episode 2: step 6, unflagged end of log (truncated, one step)
    obs = (np.arange(14, dtype=np.float32).reshape(7, 2) + 1.0)
    actions = np.arange(7, dtype=np.float32)[:, None] * 0.5 + 0.25
    rewards = np.arange(7, dtype=np.float32) + 10.0
    terminals = np.array([0, 0, 1, 0, 0, 0, 0])
    timeouts = np.array([0, 0, 0, 0, 0, 1, 0])
    if build == "mdp":
        kw = {"next_observations": obs + 100.0} if next_observations else {}
        ds = MDPDataset(obs, actions, rewards, terminals, timeouts, transition_picker=picker, **kw)
    else:
        episodes = [
            Episode(obs[a:b], actions[a:b], rewards[a:b, None], terminated=term,
                    final_observation=obs[b - 1] + 100.0 if (next_observations and not term) else None)
            for a, b, term in [(0, 3, True), (3, 6, False), (6, 7, False)]
        ]
        ds = ReplayBuffer(InfiniteBuffer(), transition_picker=picker, episodes=episodes)
    return obs, actions, rewards, ds


def _pick(rb, picker, indices):
    store = rb.buffer
    episode_ids, rows = store.locate_transitions(np.asarray(indices))
    return picker.pick_batch(store, episode_ids, rows)


@pytest.mark.parametrize(
    "next_observations, expected",
    [
        # no final observations stored: rows 0-6, episode 1 loses its last step, episode 2 has none
        (False, dict(rows=[0, 1, 2, 3, 4], next_rows=[1, 2, 2, 4, 5],
                     ends=[3, 3, 3, 6, 6], terminal=[0, 0, 1, 0, 0], next_valid=[1, 1, 0, 1, 1])),
        # final observations in rows 6 and 8 (after episodes 1 and 2)
        (True, dict(rows=[0, 1, 2, 3, 4, 5, 7], next_rows=[1, 2, 2, 4, 5, 6, 8],
                    ends=[3, 3, 3, 6, 6, 6, 8], terminal=[0, 0, 1, 0, 0, 0, 0], next_valid=[1, 1, 0, 1, 1, 0, 0])),
    ],
)
def test_transition_table_exact_values(next_observations, expected):
    _, _, _, ds = _tiny(next_observations=next_observations)
    store = ds.buffer
    assert store.transition_table() is None  # the first call at a version only notes it
    table = store.transition_table()
    assert store.transition_table() is table  # cached while the data is unchanged
    for name in ("rows", "next_rows", "ends"):
        np.testing.assert_array_equal(getattr(table, name), expected[name], err_msg=name)
    np.testing.assert_array_equal(table.terminals, np.array(expected["terminal"], np.float32)[:, None])
    np.testing.assert_array_equal(table.next_valid, np.array(expected["next_valid"], bool))


def test_transition_table_not_built_while_written_between_samples():
    """Online training appends between batches: the table would be rebuilt
    per batch, so none is built; it is once the data stays unchanged."""
    rb = create_fifo_replay_buffer(limit=1000)
    rng = np.random.default_rng(0)
    for step in range(60):
        rb.append(rng.normal(size=3).astype(np.float32), rng.normal(size=2).astype(np.float32), 1.0)
        if step % 10 == 9:
            rb.clip_episode(terminated=True)
        if step >= 10:
            rb.sample_transition_batch(4)
            assert rb.buffer._table_cache is None
    rb.sample_transition_batch(4)
    rb.sample_transition_batch(4)
    assert rb.buffer._table_cache is not None and rb.buffer._table_cache[1] is not None


def test_transition_table_built_after_calls_that_pay_for_it():
    """A table of N transitions is built once more than N // 256 calls found
    the data unchanged (at least one); a change starts the count again."""
    n = 1000  # one episode of 1001 steps, terminated: 1001 transitions, 1001 // 256 == 3
    ds = MDPDataset(np.zeros((n + 1, 2), np.float32), np.zeros((n + 1, 1), np.float32), np.zeros(n + 1, np.float32),
                    np.eye(1, n + 1, n).ravel())
    store = ds.buffer
    assert store.transition_count == n + 1
    assert [store.transition_table() is None for _ in range(5)] == [True] * 4 + [False]
    rb = create_fifo_replay_buffer(limit=10_000, episodes=list(ds.episodes))
    calls = [rb.buffer.transition_table() is None for _ in range(4)]
    rb.append(np.zeros(2, np.float32), np.zeros(1, np.float32), 0.0)  # a change: counted again from one
    calls += [rb.buffer.transition_table() is None for _ in range(5)]
    assert calls == [True] * 8 + [False]


def test_table_path_samples_data_written_in_place_through_episode_views():
    """The table holds rows, not values: actions, rewards and observations
    changed in place through an episode's views are sampled as changed."""
    _, _, _, ds = _tiny(next_observations=True)
    store = ds.buffer
    store.transition_table()
    assert store.transition_table() is not None
    for episode in ds.episodes:
        episode.actions[:] *= -3.0
        episode.rewards[:] += 7.0
        episode.observations[:] *= 2.0
    ids = np.arange(store.transition_count)
    assert_same_batch(BasicTransitionPicker().pick_transitions(store, ids),
                      BasicTransitionPicker().pick_batch(store, *store.locate_transitions(ids)))
    batch = BasicTransitionPicker().pick_transitions(store, ids)
    np.testing.assert_array_equal(batch.next_actions[:2, 0], (np.array([1, 2]) * 0.5 + 0.25) * -3.0)
    np.testing.assert_array_equal(batch.rewards[:2, 0], np.array([10.0, 11.0]) + 7.0)


def test_transition_table_is_not_copied_or_pickled():
    import copy
    import pickle

    _, _, _, ds = _tiny(next_observations=True)
    ds.buffer.transition_table()
    assert ds.buffer.transition_table() is not None
    for other in (copy.deepcopy(ds), pickle.loads(pickle.dumps(ds))):
        assert other.buffer._table_cache is None
        offrl.seed(4)
        got = other.sample_transition_batch(6)
        offrl.seed(4)
        assert_same_batch(got, ds.sample_transition_batch(6))


def test_transition_table_refused_by_size_and_by_a_custom_locator(monkeypatch):
    _, _, _, ds = _tiny(next_observations=False)
    store = ds.buffer
    monkeypatch.setattr(type(store), "_TABLE_FLOOR_BYTES", 0)  # 5 transitions * 29 bytes > a quarter of 7 rows' columns
    store.transition_table()
    assert store.transition_table() is None

    class Counting(InfiniteBuffer):
        def locate_transitions(self, indices):
            return super().locate_transitions(indices)

    _, _, _, rb = _tiny(next_observations=False, build="episodes")
    custom = ReplayBuffer(Counting(), episodes=list(rb.episodes))
    custom.buffer.transition_table()
    assert custom.buffer.transition_table() is None
    offrl.seed(3)
    got = custom.sample_transition_batch(8)
    offrl.seed(3)
    assert_same_batch(rb.sample_transition_batch(8), got)


@pytest.mark.parametrize("build", ["mdp", "episodes"])
def test_exact_rows_terminal_and_timeout_with_next_observations(build):
    obs, actions, rewards, ds = _tiny(next_observations=True, build=build)
    assert ds.transition_count == 7
    assert [e.size() for e in ds.episodes] == [3, 3, 1]
    assert [e.terminated for e in ds.episodes] == [True, False, False]
    b = _pick(ds, BasicTransitionPicker(), [0, 1, 2, 3, 5, 6])
    # plain rows equal the source rows
    np.testing.assert_array_equal(b.observations, obs[[0, 1, 2, 3, 5, 6]])
    np.testing.assert_array_equal(b.actions, actions[[0, 1, 2, 3, 5, 6]])
    np.testing.assert_array_equal(b.rewards[:, 0], rewards[[0, 1, 2, 3, 5, 6]])
    np.testing.assert_array_equal(b.next_observations[0], obs[1])
    np.testing.assert_array_equal(b.next_observations[1], obs[2])
    np.testing.assert_array_equal(b.next_actions[0], actions[1])
    # the terminal step: zeros, terminal = 1, next action zeros
    np.testing.assert_array_equal(b.next_observations[2], np.zeros(2, np.float32))
    np.testing.assert_array_equal(b.next_actions[2], np.zeros(1, np.float32))
    np.testing.assert_array_equal(b.terminals[:, 0], [0, 0, 1, 0, 0, 0])
    # the next episode starts fresh at step 3
    np.testing.assert_array_equal(b.next_observations[3], obs[4])
    # timeout steps keep the real next observation from next_observations
    np.testing.assert_array_equal(b.next_observations[4], obs[5] + 100.0)
    np.testing.assert_array_equal(b.next_observations[5], obs[6] + 100.0)
    np.testing.assert_array_equal(b.next_actions[4], np.zeros(1, np.float32))
    np.testing.assert_array_equal(b.intervals[:, 0], np.ones(6))
    # the per-item path agrees
    tr = BasicTransitionPicker()(ds.episodes[1], 2)
    np.testing.assert_array_equal(tr.next_observation, obs[5] + 100.0)
    assert tr.terminal == 0.0
    tr = BasicTransitionPicker()(ds.episodes[0], 2)
    np.testing.assert_array_equal(tr.next_observation, np.zeros(2, np.float32))
    assert tr.terminal == 1.0


@pytest.mark.parametrize("build", ["mdp", "episodes"])
def test_exact_timeout_without_next_observations_is_not_a_transition(build):
    obs, actions, rewards, ds = _tiny(next_observations=False, build=build)
    # episode 1 (3 steps) gives 2 transitions, the one-step episode 2 gives none
    assert ds.transition_count == 5
    assert [e.transition_count for e in ds.episodes] == [3, 2, 0]
    b = _pick(ds, BasicTransitionPicker(), np.arange(5))
    np.testing.assert_array_equal(b.observations, obs[[0, 1, 2, 3, 4]])
    np.testing.assert_array_equal(b.next_observations, np.stack([obs[1], obs[2], np.zeros(2), obs[4], obs[5]]))
    np.testing.assert_array_equal(b.terminals[:, 0], [0, 0, 1, 0, 0])
    with pytest.raises(IndexError):
        BasicTransitionPicker()(ds.episodes[1], 2)
    with pytest.raises(IndexError):
        BasicTransitionPicker()(ds.episodes[2], 0)
    # sampling never returns the timeout step 5 or step 6
    offrl.seed(0)
    batch = ds.sample_transition_batch(500)
    seen = {tuple(r) for r in batch.observations.tolist()}
    assert seen == {tuple(obs[i].tolist()) for i in range(5)}


def _five_step(terminated: bool, final: bool, picker):
    """One 5-step episode: terminal, or timeout with/without next_observations."""
    obs = np.arange(1, 11, dtype=np.float32).reshape(5, 2)
    flags = np.array([0, 0, 0, 0, 1])
    next_obs = np.full((5, 2), 99.0, np.float32)
    next_obs[4] = [-7.0, -8.0]
    rb = MDPDataset(
        obs,
        np.arange(5, dtype=np.float32)[:, None] + 0.5,
        np.array([1.0, 2.0, 3.0, 4.0, 5.0], dtype=np.float32),
        terminals=flags if terminated else np.zeros(5),
        timeouts=np.zeros(5) if terminated else flags,
        transition_picker=picker,
        next_observations=next_obs if final else None,
    )
    return obs, rb


@pytest.mark.parametrize(
    "terminated, final, expected",
    [
        # (reward, next obs row or "zeros"/"final", terminal, interval) per step, n=3, gamma=0.5
        (True, False, [(2.75, 3, 0, 3), (4.5, 4, 0, 3), (6.25, "zeros", 1, 3), (6.5, "zeros", 1, 2), (5.0, "zeros", 1, 1)]),
        (False, False, [(2.75, 3, 0, 3), (4.5, 4, 0, 3), (5.0, 4, 0, 2), (4.0, 4, 0, 1)]),
        (False, True, [(2.75, 3, 0, 3), (4.5, 4, 0, 3), (6.25, "final", 0, 3), (6.5, "final", 0, 2), (5.0, "final", 0, 1)]),
    ],
)
def test_exact_multistep_returns_on_five_step_episode(terminated, final, expected):
    picker = MultiStepTransitionPicker(3, 0.5)
    obs, rb = _five_step(terminated, final, picker)
    assert rb.transition_count == len(expected)
    b = _pick(rb, picker, np.arange(len(expected)))
    items = [picker(rb.episodes[0], t) for t in range(len(expected))]
    for t, (reward, nxt, terminal, interval) in enumerate(expected):
        if nxt == "zeros":
            next_obs = np.zeros(2, np.float32)
        elif nxt == "final":
            next_obs = np.array([-7.0, -8.0], np.float32)
        else:
            next_obs = obs[nxt]
        next_action = np.array([nxt + 0.5], np.float32) if isinstance(nxt, int) else np.zeros(1, np.float32)
        for got_reward, got_next, got_terminal, got_interval, got_next_action in (
            (b.rewards[t, 0], b.next_observations[t], b.terminals[t, 0], b.intervals[t, 0], b.next_actions[t]),
            (items[t].reward[0], items[t].next_observation, items[t].terminal, items[t].interval, items[t].next_action),
        ):
            assert got_reward == pytest.approx(reward, rel=1e-6), t
            np.testing.assert_array_equal(got_next, next_obs, err_msg=str(t))
            assert got_terminal == terminal, t
            assert got_interval == interval, t
            np.testing.assert_array_equal(got_next_action, next_action, err_msg=str(t))
        np.testing.assert_array_equal(b.observations[t], obs[t])


def test_exact_frame_stack_pads_before_episode_start():
    picker = FrameStackTransitionPicker(3)
    # two episodes of 2 and 3 steps; frames are (1, 2) so stacks are (3, 2)
    frames = np.arange(1, 11, dtype=np.float32).reshape(5, 1, 2)
    ds = MDPDataset(frames, np.zeros((5, 1), np.float32), np.ones(5), [0, 1, 0, 0, 1], transition_picker=picker)
    b = _pick(ds, picker, np.arange(5))
    z = np.zeros((1, 2), np.float32)
    f = [frames[i] for i in range(5)]
    expected_obs = [
        np.concatenate([z, z, f[0]]),
        np.concatenate([z, f[0], f[1]]),
        np.concatenate([z, z, f[2]]),  # the second episode does not see the first one's frames
        np.concatenate([z, f[2], f[3]]),
        np.concatenate([f[2], f[3], f[4]]),
    ]
    expected_next = [
        np.concatenate([z, f[0], f[1]]),
        np.zeros((3, 2), np.float32),  # terminal
        np.concatenate([z, f[2], f[3]]),
        np.concatenate([f[2], f[3], f[4]]),
        np.zeros((3, 2), np.float32),  # terminal
    ]
    np.testing.assert_array_equal(b.observations, np.stack(expected_obs))
    np.testing.assert_array_equal(b.next_observations, np.stack(expected_next))
    np.testing.assert_array_equal(b.terminals[:, 0], [0, 1, 0, 0, 1])


@pytest.mark.parametrize("build", ["create_fifo_replay_buffer", "set_columns"])
def test_exact_fifo_trimmed_front_pads_frame_stack_with_zeros(build):
    picker = FrameStackTransitionPicker(3)
    frames = np.arange(1, 13, dtype=np.float32).reshape(6, 1, 2)
    actions = np.full((6, 1), 0.5, np.float32)
    rewards = np.ones((6, 1), np.float32)
    # 6 transitions written, keep the newest 4: the first two steps of the first episode go
    if build == "create_fifo_replay_buffer":
        ep_a = Episode(frames[:4], actions[:4], rewards[:4], terminated=True)
        ep_b = Episode(frames[4:], actions[4:], rewards[4:], terminated=True)
        rb = create_fifo_replay_buffer(4, episodes=[ep_a, ep_b], transition_picker=picker)
    else:
        store = FIFOBuffer(4)
        store.set_columns(
            [frames], actions, rewards, np.array([0, 4]), np.array([4, 6]),
            np.array([True, True]), np.array([False, False]),
        )
        rb = ReplayBuffer(store, transition_picker=picker)
    assert rb.transition_count == 4
    views = list(rb.episodes)
    assert [v.size() for v in views] == [2, 2]
    np.testing.assert_array_equal(views[0].observations, frames[2:4])
    b = _pick(rb, picker, np.arange(4))
    z = np.zeros((1, 2), np.float32)
    np.testing.assert_array_equal(b.observations[0], np.concatenate([z, z, frames[2]]))
    np.testing.assert_array_equal(b.observations[1], np.concatenate([z, frames[2], frames[3]]))
    np.testing.assert_array_equal(b.next_observations[0], np.concatenate([z, frames[2], frames[3]]))
    np.testing.assert_array_equal(b.next_observations[1], np.zeros((3, 2), np.float32))
    np.testing.assert_array_equal(b.observations[2], np.concatenate([z, z, frames[4]]))
    tr = picker(views[0], 0)
    np.testing.assert_array_equal(tr.observation, np.concatenate([z, z, frames[2]]))
    # sampling also respects the trimmed start
    offrl.seed(1)
    batch = rb.sample_transition_batch(200)
    assert not np.isin(batch.observations, frames[:2].reshape(-1)).any()


# --------------------------------------------------------------------------
# sampling distribution
# --------------------------------------------------------------------------
def test_sample_transition_batch_is_uniform_over_transitions():
    layout = [(1, "terminated"), (5, "truncated"), (3, "final"), (1, "truncated"), (7, "terminated"),
              (2, "final"), (4, "truncated"), (1, "final"), (6, "terminated")]
    source = make_source(layout, "vector", "continuous", seed=3)
    rb = build_buffer(source, "vector", "continuous", "columns")
    transitions = all_transitions(source)
    T = len(transitions)
    assert rb.transition_count == T
    ids = {float(source[e].obs[0][t, 0]): i for i, (e, t) in enumerate(transitions)}
    offrl.seed(0)
    counts = np.zeros(T)
    n_batches, batch_size = 100, 512
    for _ in range(n_batches):
        batch = rb.sample_transition_batch(batch_size)
        for value in batch.observations[:, 0]:
            assert float(value) in ids, f"sampled id {value} is not a transition"
            counts[ids[float(value)]] += 1
    n = n_batches * batch_size
    expected = n / T
    chi2 = float(np.sum((counts - expected) ** 2 / expected))
    df = T - 1
    assert chi2 < df + 6 * np.sqrt(2 * df), (chi2, df, counts)
    assert counts.min() > 0.8 * expected and counts.max() < 1.2 * expected

    # the per-item path (sample_transition) covers the same set
    offrl.seed(0)
    seen = {float(rb.sample_transition().observation[0]) for _ in range(2000)}
    assert seen == set(ids)
