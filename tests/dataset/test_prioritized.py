"""Prioritized replay: the sum tree against plain loops, proportional
sampling (chi-square), priority updates, importance weights and beta
annealing, FIFO eviction against a plain-list model, construction, IO."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

import offrl
from offrl.dataset import prioritized
from offrl.dataset import (
    BasicTransitionPicker,
    Episode,
    FIFOBuffer,
    InfiniteBuffer,
    MDPDataset,
    MixedReplayBuffer,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    Signature,
    SumTree,
    create_prioritized_replay_buffer,
)

# ------------------------------------------------------------------ sum tree

_leaf_values = st.integers(0, 20).map(float)  # integers: sums are exact


def _naive_find(values: np.ndarray, u: float) -> int:
    running = 0.0
    for i, v in enumerate(values):
        if running <= u < running + v:
            return i
        running += v
    raise AssertionError("u outside [0, total)")


def _check_inner_nodes(tree: SumTree) -> None:
    nodes = tree._nodes
    size = nodes.shape[0] // 2
    for k in range(1, size):
        assert nodes[k] == nodes[2 * k] + nodes[2 * k + 1]


@settings(max_examples=80, deadline=None)
@given(
    capacity=st.integers(1, 300),
    updates=st.lists(st.lists(st.tuples(st.integers(0, 299), _leaf_values), max_size=40), min_size=1, max_size=6),
    search_level=st.sampled_from([0, 1, 3, 10]),
)
def test_sum_tree_set_matches_sequential_loop(capacity, updates, search_level):
    tree = SumTree(capacity)
    model = np.zeros(capacity)
    for batch in updates:
        pairs = [(leaf % capacity, value) for leaf, value in batch]
        for leaf, value in pairs:  # sequential writes: the last one wins
            model[leaf] = value
        # few leaves: updated level by level below the search level, the levels above recomputed whole
        with mock.patch.object(prioritized, "_SEARCH_LEVEL", search_level):
            tree.set(np.array([p[0] for p in pairs], dtype=np.int64), np.array([p[1] for p in pairs]))
        np.testing.assert_array_equal(tree.leaves, model)
        assert tree.total == model.sum()
        _check_inner_nodes(tree)


@settings(max_examples=80, deadline=None)
@given(
    values=st.lists(_leaf_values, min_size=1, max_size=70),
    search_level=st.sampled_from([0, 1, 3, 10]),
    data=st.data(),
)
def test_sum_tree_find_matches_linear_scan(values, search_level, data):
    values = np.array(values)
    if values.sum() == 0:
        values[-1] = 1.0
    tree = SumTree(len(values))
    tree.set(np.arange(len(values)), values)
    edges = np.concatenate(([0.0], np.cumsum(values)[:-1]))  # exactly on boundaries too
    edges = edges[edges < values.sum()]
    draws = data.draw(st.lists(st.floats(0, values.sum(), exclude_max=True), max_size=20))
    prefix = np.concatenate((edges, np.array(draws, dtype=np.float64)))
    expected = [_naive_find(values, u) for u in prefix]
    # the top levels are searched in one step, the rest descended level by level
    with mock.patch.object(prioritized, "_SEARCH_LEVEL", search_level):
        np.testing.assert_array_equal(tree.find(prefix), expected)


@pytest.mark.parametrize("search_level", [0, 2, 10])
@pytest.mark.parametrize("capacity", [6, 5000])
def test_sum_tree_find_never_returns_an_empty_leaf(capacity, search_level):
    tree = SumTree(capacity)
    tree.set(np.array([1, 3]), np.array([2.0, 3.0]))
    with mock.patch.object(prioritized, "_SEARCH_LEVEL", search_level):
        # at or past the total (what rounding can produce): the last positive leaf
        np.testing.assert_array_equal(tree.find(np.array([5.0, 5.5, 1e9])), [3, 3, 3])
        np.testing.assert_array_equal(tree.find(np.array([0.0, 1.999, 2.0, 4.9])), [1, 1, 3, 3])
    with pytest.raises(ValueError, match="total is 0"):
        SumTree(3).find(np.array([0.0]))


def test_sum_tree_large_updates_rebuild_and_growth_keeps_leaves():
    rng = np.random.default_rng(0)
    values = rng.integers(0, 9, size=100).astype(float)
    tree = SumTree(100)
    tree.set(np.arange(100), values)  # many leaves: the full-rebuild path
    _check_inner_nodes(tree)
    tree.set(np.array([3, 3, 99]), np.array([5.0, 7.0, 1.0]))  # the per-level path
    values[3], values[99] = 7.0, 1.0
    tree.grow(300)
    assert tree.capacity == 300
    np.testing.assert_array_equal(tree.leaves[:100], values)
    np.testing.assert_array_equal(tree.leaves[100:], 0.0)
    assert tree.total == values.sum()
    _check_inner_nodes(tree)


def test_sum_tree_rejects_bad_input():
    tree = SumTree(4)
    with pytest.raises(IndexError, match=r"leaves\[1\] is 4, expected a leaf in \[0, 4\)"):
        tree.set(np.array([0, 4]), np.array([1.0, 1.0]))
    with pytest.raises(ValueError, match=r"values\[0\] is -1.0"):
        tree.set(np.array([0]), np.array([-1.0]))
    with pytest.raises(ValueError, match=r"values\[1\] is nan"):
        tree.set(np.array([0, 1]), np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match="capacity must be > 0"):
        SumTree(0)


# --------------------------------------------------------------- buffers


def _dataset(n: int = 40, episode: int = 10) -> MDPDataset:
    """Observation ``[i, -i]`` and reward ``i`` at step ``i``; terminal
    episodes of ``episode`` steps, so transition ``i`` is step ``i``."""
    obs = np.stack([np.arange(n), -np.arange(n)], axis=1).astype(np.float32)
    terminals = (np.arange(n) % episode == episode - 1).astype(np.float32)
    return MDPDataset(obs, np.arange(n) % 3, np.arange(n, dtype=np.float32), terminals, action_size=3)


def test_batches_carry_the_sampled_transitions_with_ids_and_weights():
    offrl.seed(0)
    buffer = PrioritizedReplayBuffer.from_dataset(_dataset())
    batch = buffer.sample_transition_batch(16)
    ids = batch.indices
    assert ids.dtype == np.int64 and ids.shape == (16,)
    assert batch.weights.dtype == np.float32 and batch.weights.shape == (16, 1)
    np.testing.assert_array_equal(batch.rewards[:, 0], ids)  # reward i is transition i
    np.testing.assert_array_equal(batch.observations, np.stack([ids, -ids], axis=1))
    np.testing.assert_array_equal(batch.actions[:, 0], ids % 3)
    np.testing.assert_array_equal(batch.terminals[:, 0], ids % 10 == 9)
    np.testing.assert_array_equal(batch.weights, 1.0)  # all priorities equal at first


def test_sampling_is_proportional_to_priority():
    offrl.seed(1)
    buffer = PrioritizedReplayBuffer.from_dataset(_dataset(20, 5), alpha=0.7, epsilon=0.5)
    errors = np.arange(20, dtype=np.float64) % 7
    buffer.update_priorities(np.arange(20), errors)
    priorities = (errors + 0.5) ** 0.7
    np.testing.assert_allclose(buffer.priorities, priorities)
    counts = np.zeros(20)
    for _ in range(200):
        batch = buffer.sample_transition_batch(64)
        counts += np.bincount(batch.indices, minlength=20)
        np.testing.assert_array_equal(batch.rewards[:, 0], batch.indices)
    expected = counts.sum() * priorities / priorities.sum()
    assert stats.chisquare(counts, expected).pvalue > 1e-3
    # a clearly different distribution (uniform) is rejected by the same test
    assert stats.chisquare(counts, np.full(20, counts.sum() / 20)).pvalue < 1e-6


def test_single_transition_sampling_follows_priorities():
    offrl.seed(2)
    buffer = PrioritizedReplayBuffer.from_dataset(_dataset(20, 5), alpha=1.0, epsilon=1e-6)
    errors = np.zeros(20)
    errors[[4, 13]] = 1.0  # nearly all the mass on two transitions
    buffer.update_priorities(np.arange(20), errors)
    rewards = {float(buffer.sample_transition().reward[0]) for _ in range(50)}
    assert rewards <= {4.0, 13.0}


def test_update_priorities_formula_repeats_and_max_priority():
    buffer = PrioritizedReplayBuffer.from_dataset(_dataset(), alpha=0.5, epsilon=0.25)
    buffer.update_priorities(np.array([3, 7, 3, 11, 3]), np.array([[1.0], [-2.0], [5.0], [0.0], [-0.75]]))
    expected = np.ones(40)
    expected[3] = (0.75 + 0.25) ** 0.5  # the last occurrence wins
    expected[7] = (2.0 + 0.25) ** 0.5
    expected[11] = 0.25**0.5
    np.testing.assert_allclose(buffer.priorities, expected)
    assert buffer.max_priority == pytest.approx((5.0 + 0.25) ** 0.5)  # running max over every value given
    buffer.update_priorities(torch.tensor([7]), torch.tensor([0.0]))  # torch input
    assert buffer.priorities[7] == pytest.approx(0.5)


def test_weights_and_beta_annealing():
    offrl.seed(3)
    buffer = PrioritizedReplayBuffer.from_dataset(_dataset(), beta_start=0.4, beta_steps=4)
    buffer.update_priorities(np.arange(40), np.arange(40) / 10.0)
    priorities = buffer.priorities
    betas = []
    for _ in range(6):
        beta = buffer.beta
        betas.append(beta)
        batch = buffer.sample_transition_batch(32)
        p = priorities[batch.indices]
        # w_i = (N P(i))^-beta / max_j w_j, computed from its definition
        w = (40 * p / priorities.sum()) ** (-beta)
        np.testing.assert_allclose(batch.weights[:, 0], w / w.max(), rtol=1e-6)
    np.testing.assert_allclose(betas, [0.4, 0.55, 0.7, 0.85, 1.0, 1.0])
    assert buffer.sampled_batches == 6


def test_batches_to_torch_and_through_preprocess():
    from offrl.algos import DQNConfig

    buffer = PrioritizedReplayBuffer.from_dataset(_dataset())
    buffer.update_priorities(np.arange(40), np.arange(40.0))
    batch = buffer.sample_transition_batch(8)
    torch_batch = batch.to_torch("cpu")
    assert torch_batch.weights.dtype == torch.float32 and torch_batch.weights.shape == (8, 1)
    np.testing.assert_array_equal(torch_batch.weights.numpy(), batch.weights)
    np.testing.assert_array_equal(torch_batch.indices.numpy(), batch.indices)
    algo = DQNConfig().create()
    algo.create_impl((2,), 3)
    processed = algo.preprocess_batch(torch_batch)
    assert processed.weights is torch_batch.weights and processed.indices is torch_batch.indices
    plain = ReplayBuffer(InfiniteBuffer(), episodes=_dataset().episodes).sample_transition_batch(4)
    assert plain.weights is None and plain.indices is None
    assert plain.to_torch().weights is None and plain.to_torch().indices is None


def test_custom_picker_goes_through_the_per_item_path():
    class PerItemPicker:
        def __call__(self, episode, index):
            return BasicTransitionPicker()(episode, index)

    offrl.seed(4)
    data = _dataset()
    buffer = PrioritizedReplayBuffer(InfiniteBuffer(), PerItemPicker(), episodes=data.episodes)
    batch = buffer.sample_transition_batch(12)
    np.testing.assert_array_equal(batch.rewards[:, 0], batch.indices)
    assert batch.weights.shape == (12, 1)


def test_mixed_buffer_of_a_prioritized_and_a_plain_buffer_drops_weights():
    data = _dataset()
    mixed = MixedReplayBuffer(PrioritizedReplayBuffer.from_dataset(data), ReplayBuffer(InfiniteBuffer(), episodes=data.episodes), 0.5)
    batch = mixed.sample_transition_batch(8)
    assert len(batch) == 8 and batch.weights is None and batch.indices is None


def test_evicted_ids_are_ignored_and_bad_updates_raise():
    buffer = create_prioritized_replay_buffer(
        5, observation_signature=Signature(dtype=[np.float32], shape=[(1,)]),
        action_signature=Signature(dtype=[np.int64], shape=[(1,)]), action_size=2,
    )
    for t in range(9):
        buffer.append(np.array([t], np.float32), 0, float(t))
    buffer.clip_episode(True)
    np.testing.assert_array_equal(buffer.transition_ids(), [4, 5, 6, 7, 8])
    buffer.update_priorities(np.array([0, 8]), np.array([3.0, 3.0]))  # id 0 was evicted
    np.testing.assert_allclose(buffer.priorities, [1, 1, 1, 1, (3.01) ** 0.6])
    with pytest.raises(ValueError, match=r"indices\[1\] is 9, expected a transition id in \[0, 9\)"):
        buffer.update_priorities(np.array([8, 9]), np.zeros(2))
    with pytest.raises(ValueError, match=r"td_errors\[1\] is nan"):
        buffer.update_priorities(np.array([7, 8]), np.array([0.0, np.nan]))
    with pytest.raises(ValueError, match=r"td_errors has shape \(3,\), expected \(2,\)"):
        buffer.update_priorities(np.array([7, 8]), np.zeros(3))
    with pytest.raises(TypeError, match="indices must be a 1-D integer array"):
        buffer.update_priorities(np.array([7.0, 8.0]), np.zeros(2))


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"alpha": 1.5}, ValueError, r"alpha must be in \[0, 1\], got 1.5"),
        ({"beta_start": -0.1}, ValueError, r"beta_start must be in \[0, 1\]"),
        ({"beta_steps": 0}, ValueError, "beta_steps must be > 0"),
        ({"epsilon": 0.0}, ValueError, "epsilon must be a finite number > 0"),
        ({"alpha": "high"}, TypeError, "alpha must be a number, got str"),
    ],
)
def test_bad_parameters_raise(kwargs, error, message):
    with pytest.raises(error, match=message):
        PrioritizedReplayBuffer(InfiniteBuffer(), **kwargs)


def test_construction_errors():
    class ListBuffer:
        def append(self, episode, index): ...
        episodes = []
        transition_count = 0
        def __len__(self): return 0
        def __getitem__(self, index): ...

    with pytest.raises(TypeError, match="needs an InfiniteBuffer or FIFOBuffer as buffer, got ListBuffer"):
        PrioritizedReplayBuffer(ListBuffer())
    with pytest.raises(TypeError, match="dataset must be a ReplayBuffer or MDPDataset"):
        PrioritizedReplayBuffer.from_dataset([1, 2])
    with pytest.raises(ValueError, match="cannot sample from an empty buffer"):
        PrioritizedReplayBuffer(InfiniteBuffer()).sample_transition_batch(2)


def test_from_dataset_shares_storage_and_detects_writes_behind_its_back():
    data = _dataset()
    buffer = PrioritizedReplayBuffer.from_dataset(data)
    assert buffer.buffer is data.buffer and buffer.transition_count == 40
    assert buffer.dataset_info == data.dataset_info
    data.append_episode(data.episodes[0])
    with pytest.raises(ValueError, match="written to directly"):
        buffer.sample_transition_batch(4)


def test_writes_through_the_buffer_and_growth_past_the_initial_tree():
    offrl.seed(5)
    buffer = PrioritizedReplayBuffer(InfiniteBuffer(), episodes=_dataset().episodes)
    buffer.update_priorities(np.arange(40), np.full(40, 3.0))  # max priority is now (3.01)^0.6
    n = 1500
    obs = np.stack([np.arange(n), -np.arange(n)], axis=1).astype(np.float32) + 1000
    buffer.append_episode(Episode(obs, np.zeros(n, np.int64), np.arange(n, dtype=np.float32) + 1000, terminated=True))
    assert buffer.transition_count == 1540
    expected = np.concatenate((np.full(40, 3.01**0.6), np.full(1500, 3.01**0.6)))
    np.testing.assert_allclose(buffer.priorities, expected)
    assert buffer._tree.total == pytest.approx(expected.sum())
    batch = buffer.sample_transition_batch(64)
    rewards = np.where(batch.indices < 40, batch.indices, batch.indices - 40 + 1000)
    np.testing.assert_array_equal(batch.rewards[:, 0], rewards)


def test_dump_and_load_keep_the_data_and_reset_priorities(tmp_path):
    buffer = PrioritizedReplayBuffer.from_dataset(_dataset(), alpha=0.3)
    buffer.update_priorities(np.arange(40), np.arange(40.0))
    path = tmp_path / "per.h5"
    buffer.dump(path)
    loaded = PrioritizedReplayBuffer.load(path, alpha=0.3, beta_steps=10)
    assert isinstance(loaded, PrioritizedReplayBuffer)
    assert loaded.alpha == 0.3 and loaded.beta_steps == 10
    np.testing.assert_array_equal(loaded.to_arrays()["rewards"], buffer.to_arrays()["rewards"])
    np.testing.assert_array_equal(loaded.priorities, np.ones(40))  # priorities are not saved
    fifo = PrioritizedReplayBuffer.load(path, FIFOBuffer(25))
    np.testing.assert_array_equal(fifo.transition_ids(), np.arange(25))
    batch = fifo.sample_transition_batch(10)  # the newest 25 transitions: rewards 15..39
    np.testing.assert_array_equal(batch.rewards[:, 0], batch.indices + 15)


def test_from_episode_generator_and_create_helper():
    data = _dataset()
    buffer = PrioritizedReplayBuffer.from_episode_generator(iter(data.episodes), FIFOBuffer(25), alpha=0.2)
    assert isinstance(buffer, PrioritizedReplayBuffer) and buffer.alpha == 0.2
    np.testing.assert_array_equal(buffer.transition_ids(), np.arange(15, 40))
    infinite = create_prioritized_replay_buffer(episodes=data.episodes, beta_start=0.5)
    assert isinstance(infinite.buffer, InfiniteBuffer) and infinite.beta == 0.5
    assert infinite.transition_count == 40


# ------------------------------------------------- FIFO against a list model


class _Model:
    """Plain-list model of a prioritized FIFO buffer: transitions in write
    order as ``[id, reward, priority]``, the newest ``limit`` kept."""

    def __init__(self, limit):
        self.limit = limit
        self.transitions = []
        self.open = []  # rewards of the open episode's steps
        self.next_id = 0
        self.max_priority = 1.0

    def _add(self, reward):
        self.transitions.append([self.next_id, reward, self.max_priority])
        self.next_id += 1
        if self.limit is not None and len(self.transitions) > self.limit:
            del self.transitions[: len(self.transitions) - self.limit]

    def append(self, reward):
        if self.open:  # the previous step now has a next observation
            self._add(self.open[-1])
        self.open.append(reward)

    def clip(self, terminated, final):
        if self.open and (terminated or final):
            self._add(self.open[-1])
        self.open = []

    def episode(self, rewards, terminated, final):
        for r in rewards[:-1]:
            self._add(r)
        if terminated or final:
            self._add(rewards[-1])


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 4)),
        st.tuples(st.just("clip"), st.sampled_from(["terminal", "final", "none"])),
        st.tuples(st.just("episode"), st.integers(1, 9), st.sampled_from(["terminal", "final", "none"])),
        st.tuples(st.just("update"), st.integers(0, 2**31 - 1)),
    ),
    max_size=25,
)


@settings(max_examples=80, deadline=None)
@given(limit=st.one_of(st.none(), st.integers(1, 12)), ops=_ops)
def test_priorities_follow_transitions_through_fifo_eviction(limit, ops):
    signature = dict(
        observation_signature=Signature(dtype=[np.float32], shape=[(1,)]),
        action_signature=Signature(dtype=[np.int64], shape=[(1,)]),
        action_size=2,
    )
    buffer = create_prioritized_replay_buffer(limit, alpha=1.0, epsilon=0.5, **signature)
    model = _Model(limit)
    step = 0
    for op in ops:
        if op[0] == "append":
            for _ in range(op[1]):
                buffer.append(np.array([step], np.float32), 0, float(step))
                model.append(step)
                step += 1
        elif op[0] == "clip":
            if not buffer.buffer.has_open_episode:
                continue
            final = np.array([-1.0], np.float32) if op[1] == "final" else None
            buffer.clip_episode(op[1] == "terminal", final)
            model.clip(op[1] == "terminal", op[1] == "final")
        elif op[0] == "episode":
            if buffer.buffer.has_open_episode:
                continue
            n, end = op[1], op[2]
            rewards = np.arange(step, step + n, dtype=np.float32)
            buffer.append_episode(Episode(
                rewards[:, None], np.zeros(n, np.int64), rewards, terminated=end == "terminal",
                final_observation=np.array([-1.0], np.float32) if end == "final" else None,
            ))
            model.episode(list(range(step, step + n)), end == "terminal", end == "final")
            step += n
        elif model.transitions:  # update a few live ids with random errors
            rng = np.random.default_rng(op[1])
            chosen = rng.choice(len(model.transitions), size=min(3, len(model.transitions)))
            ids = np.array([model.transitions[i][0] for i in chosen], dtype=np.int64)
            errors = rng.integers(0, 5, size=ids.shape[0]).astype(np.float64)
            buffer.update_priorities(ids, errors)
            for i, e in zip(chosen, errors):
                model.transitions[i][2] = e + 0.5
                model.max_priority = max(model.max_priority, e + 0.5)
        ids = np.array([t[0] for t in model.transitions], dtype=np.int64)
        np.testing.assert_array_equal(buffer.transition_ids(), ids)
        np.testing.assert_allclose(buffer.priorities, [t[2] for t in model.transitions])
        # evicted transitions hold no priority mass
        assert buffer._tree.total == pytest.approx(sum(t[2] for t in model.transitions))
        if model.transitions:
            batch = buffer.sample_transition_batch(8)
            by_id = {t[0]: t[1] for t in model.transitions}
            np.testing.assert_array_equal(batch.rewards[:, 0], [by_id[i] for i in batch.indices])
