"""Shared by the picker and slicer property tests: random episode layouts
as plain per-episode arrays (the ground truth), and the four ways of
building the same data into a buffer."""

from __future__ import annotations

import dataclasses
from typing import List, Optional

import numpy as np
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

from offrl.dataset import Episode, InfiniteBuffer, MDPDataset, ReplayBuffer, Signature

SETTINGS = settings(
    max_examples=50,
    deadline=None,
    database=None,
    report_multiple_bugs=False,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


IMAGE_SHAPE = (2, 2, 3)  # (C, H, W) uint8


VECTOR_DIM = 3


ACTION_DIM = 2


N_DISCRETE = 4


@dataclasses.dataclass
class RefEpisode:
    obs: List[np.ndarray]  # one (n, ...) array per observation element
    actions: np.ndarray  # (n, A)
    rewards: np.ndarray  # (n,) float32
    terminated: bool
    final: Optional[List[np.ndarray]]  # one array per element, or None

    @property
    def size(self) -> int:
        return int(self.actions.shape[0])

    @property
    def n_transitions(self) -> int:
        if self.terminated or self.final is not None:
            return self.size
        return self.size - 1


def cols(observation) -> List[np.ndarray]:
    """A plain or tuple observation (batch) as a list of arrays."""
    if isinstance(observation, (list, tuple)):
        return [np.asarray(o) for o in observation]
    return [np.asarray(observation)]


def make_source(layout, obs_kind, act_kind, seed, id_offset=0) -> List[RefEpisode]:
    """Random episodes. ``layout``: list of (size, kind) with kind in
    terminated / truncated / final. Column 0 of the vector observation is a
    unique step id (>= 1) so that a sampled row can be identified."""
    rng = np.random.default_rng(seed)
    episodes = []
    step_id = id_offset
    for size, kind in layout:
        vec = rng.uniform(0.5, 1.5, size=(size, VECTOR_DIM)).astype(np.float32)
        vec *= rng.choice([-1.0, 1.0], size=vec.shape).astype(np.float32)
        vec[:, 0] = np.arange(step_id + 1, step_id + size + 1, dtype=np.float32)
        step_id += size
        obs = [vec]
        if obs_kind == "tuple":
            img = rng.integers(1, 256, size=(size,) + IMAGE_SHAPE).astype(np.uint8)
            obs = [img, vec]
        if act_kind == "discrete":
            actions = rng.integers(0, N_DISCRETE, size=(size, 1)).astype(np.int64)
        else:
            actions = rng.normal(size=(size, ACTION_DIM)).astype(np.float32)
        rewards = rng.normal(size=size).astype(np.float32)
        final = None
        if kind == "final":
            fvec = rng.uniform(2.0, 3.0, size=VECTOR_DIM).astype(np.float32)
            fvec[0] = -float(step_id)  # distinct from every step id
            final = [fvec]
            if obs_kind == "tuple":
                final = [rng.integers(1, 256, size=IMAGE_SHAPE).astype(np.uint8), fvec]
        episodes.append(RefEpisode(obs, actions, rewards, kind == "terminated", final))
    return episodes


def _unwrap(columns):
    return columns[0] if len(columns) == 1 else list(columns)


def to_episode(ref: RefEpisode) -> Episode:
    return Episode(
        observations=_unwrap([c.copy() for c in ref.obs]),
        actions=ref.actions.copy(),
        rewards=ref.rewards[:, None].copy(),
        terminated=ref.terminated,
        final_observation=None if ref.final is None else _unwrap([f.copy() for f in ref.final]),
    )


def from_view(view) -> RefEpisode:
    """A RefEpisode copied from a buffer's episode view (FIFO tests)."""
    final = getattr(view, "final_observation", None)
    return RefEpisode(
        obs=[np.array(c) for c in cols(view.observations)],
        actions=np.array(view.actions),
        rewards=np.array(view.rewards)[:, 0],
        terminated=bool(view.terminated),
        final=None if final is None else [np.array(f) for f in cols(final)],
    )


def observation_signature(obs_kind):
    if obs_kind == "tuple":
        return Signature(dtype=[np.uint8, np.float32], shape=[IMAGE_SHAPE, (VECTOR_DIM,)])
    return Signature(dtype=[np.float32], shape=[(VECTOR_DIM,)])


def store_columns(source):
    """The source episodes laid out as ColumnStore columns (a final
    observation is one extra row after its episode's steps). The extra rows
    hold non-zero action/reward garbage: nothing may read them."""
    obs = [[] for _ in source[0].obs]
    actions, rewards, starts, ends = [], [], [], []
    row = 0
    for e in source:
        starts.append(row)
        ends.append(row + e.size)
        for k in range(len(obs)):
            obs[k].append(e.obs[k])
        actions.append(e.actions)
        rewards.append(e.rewards)
        row += e.size
        if e.final is not None:
            for k in range(len(obs)):
                obs[k].append(e.final[k][None])
            actions.append(np.full((1,) + e.actions.shape[1:], 3, dtype=e.actions.dtype))
            rewards.append(np.array([1000.0], dtype=np.float32))
            row += 1
    return (
        [np.concatenate(o) for o in obs],
        np.concatenate(actions),
        np.concatenate(rewards)[:, None],
        np.array(starts, dtype=np.int64),
        np.array(ends, dtype=np.int64),
        np.array([e.terminated for e in source]),
        np.array([e.final is not None for e in source]),
    )


def build_buffer(source, obs_kind, act_kind, build, mdp_flag_last=True, rng_seed=0, store=None, **components):
    """The same episodes as an MDPDataset, a ReplayBuffer over columns given
    with ``set_columns``, a ReplayBuffer of Episodes or a ReplayBuffer written
    step by step. ``components``: ``transition_picker=`` / ``trajectory_slicer=``."""
    kw = {"action_size": N_DISCRETE} if act_kind == "discrete" else {}
    if build == "columns":
        store = InfiniteBuffer() if store is None else store
        store.set_columns(*store_columns(source))
        return ReplayBuffer(store, **components, **kw)
    if build == "replay":
        return ReplayBuffer(
            InfiniteBuffer() if store is None else store, **components,
            episodes=[to_episode(e) for e in source], **kw
        )
    if build == "online":
        if act_kind == "discrete":
            act_sig = Signature(dtype=[np.int64], shape=[(1,)])
        else:
            act_sig = Signature(dtype=[np.float32], shape=[(ACTION_DIM,)])
        rb = ReplayBuffer(
            InfiniteBuffer() if store is None else store,
            **components,
            observation_signature=observation_signature(obs_kind),
            action_signature=act_sig,
            **kw,
        )
        for e in source:
            for t in range(e.size):
                rb.append(_unwrap([c[t] for c in e.obs]), e.actions[t], e.rewards[t])
            rb.clip_episode(e.terminated, None if e.final is None else _unwrap(e.final))
        return rb
    assert build == "mdp"
    finals = [e.final is not None for e in source if not e.terminated]
    assert all(finals) or not any(finals), "MDPDataset gives finals to all truncated episodes or none"
    with_next = any(finals)
    obs = [np.concatenate([e.obs[k] for e in source]) for k in range(len(source[0].obs))]
    n = obs[0].shape[0]
    terminals = np.zeros(n, dtype=np.float32)
    timeouts = np.zeros(n, dtype=np.float32)
    rng = np.random.default_rng(rng_seed)
    next_obs = [rng.uniform(-9, 9, size=o.shape).astype(o.dtype) for o in obs]  # garbage except finals
    end = 0
    for i, e in enumerate(source):
        end += e.size
        if e.terminated:
            terminals[end - 1] = 1
        else:
            if i < len(source) - 1 or mdp_flag_last:
                timeouts[end - 1] = 1
            if with_next:
                for k in range(len(obs)):
                    next_obs[k][end - 1] = e.final[k]
    actions = np.concatenate([e.actions for e in source])
    if act_kind == "discrete":
        actions = actions[:, 0]
    return MDPDataset(
        _unwrap(obs),
        actions,
        np.concatenate([e.rewards for e in source]),
        terminals,
        timeouts,
        **components,
        next_observations=_unwrap(next_obs) if with_next else None,
        **kw,
    )


EPISODE_LAYOUT = st.tuples(st.integers(1, 6), st.sampled_from(["terminated", "truncated", "final"]))

# how a dataset is built: MDPDataset from arrays; set_columns on an
# InfiniteBuffer; ReplayBuffer(InfiniteBuffer(), episodes=[Episode...]);
# online writing with append/clip_episode


BUILDS = ["mdp", "columns", "replay", "online"]


@st.composite
def datasets(draw, build):
    layout = draw(st.lists(EPISODE_LAYOUT, min_size=1, max_size=6))
    if build == "mdp":
        # MDPDataset's next_observations gives finals to all truncated episodes, or none
        with_next = draw(st.booleans())
        layout = [(n, k if k == "terminated" else ("final" if with_next else "truncated")) for n, k in layout]
    obs_kind = draw(st.sampled_from(["vector", "tuple"]))
    act_kind = draw(st.sampled_from(["discrete", "continuous"]))
    seed = draw(st.integers(0, 2**32 - 1))
    flag_last = draw(st.booleans())
    return dict(layout=layout, obs_kind=obs_kind, act_kind=act_kind, build=build, seed=seed, flag_last=flag_last)


def build_from(spec, **components):
    source = make_source(spec["layout"], spec["obs_kind"], spec["act_kind"], spec["seed"])
    rb = build_buffer(
        source, spec["obs_kind"], spec["act_kind"], spec["build"], **components,
        mdp_flag_last=spec["flag_last"], rng_seed=spec["seed"],
    )
    return source, rb


def check_fifo_against_source(rb, source, limit):
    """The live episodes are the newest source episodes, only the oldest one
    trimmed at the front, holding exactly min(limit, written) transitions.
    Returns the live episodes (copied from the buffer's views)."""
    written = sum(e.n_transitions for e in source)
    assert rb.transition_count == min(limit, written)
    views = [from_view(v) for v in rb.episodes]
    m = len(views)
    assert 1 <= m <= len(source)
    tail = source[len(source) - m:]
    for i, (view, src) in enumerate(zip(views, tail)):
        assert view.terminated == src.terminated
        assert (view.final is None) == (src.final is None)
        if view.final is not None:
            for a, b in zip(view.final, src.final):
                np.testing.assert_array_equal(a, b)
        trimmed = src.size - view.size
        assert trimmed >= 0 and (i == 0 or trimmed == 0), (i, trimmed)
        for a, b in zip(view.obs, src.obs):
            np.testing.assert_array_equal(a, b[trimmed:])
        np.testing.assert_array_equal(view.actions, src.actions[trimmed:])
        np.testing.assert_array_equal(view.rewards, src.rewards[trimmed:])
    dropped = sum(e.n_transitions for e in source[: len(source) - m]) + (tail[0].size - views[0].size)
    assert dropped == written - rb.transition_count
    return views
