"""Locomotion datasets (offrl.datasets.mujoco) and normalised scores.

The recipes' machinery runs here on a stand-in behaviour file (untrained SAC
policies saved the way ``datasets/mujoco_behaviour.py ship`` saves them), so
these tests do not depend on the shipped policies; the shipped ones are
checked against their cards in ``test_mujoco_cards.py``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("mujoco", reason="the locomotion datasets need MuJoCo (pip install 'offrl[mujoco]')")

import offrl  # noqa: E402
from offrl import _scores  # noqa: E402
from offrl.datasets import mujoco  # noqa: E402

SNAPSHOTS = ["step_0010000", "step_0020000", "step_0030000"]


def _write_behaviour(directory, env="hopper"):
    """Untrained SAC policies (seeded differently) saved as float16
    safetensors under snapshot names, with the facts file ``ship`` writes."""
    import torch
    from safetensors.torch import save_file

    tensors = {}
    for i, name in enumerate(SNAPSHOTS):
        offrl.seed(i)
        sac = offrl.algos.SACConfig().create()
        sac.build_with_env(mujoco.make_env(env))
        for key, value in sac.modules["policy"].state_dict().items():
            tensors[f"{name}.{key}"] = value.to(torch.float16).contiguous()
    os.makedirs(directory, exist_ok=True)
    save_file(tensors, os.path.join(directory, f"{env}.safetensors"))
    facts = {"env_id": mujoco.ENV_IDS[env], "expert": SNAPSHOTS[2], "medium": SNAPSHOTS[1], "replay": SNAPSHOTS[:1]}
    with open(os.path.join(directory, f"{env}.json"), "w") as f:
        json.dump(facts, f)


@pytest.fixture
def behaviour(tmp_path, monkeypatch):
    directory = str(tmp_path / "behaviour")
    _write_behaviour(directory)
    monkeypatch.setattr(mujoco, "BEHAVIOUR_DIRECTORY", directory)
    monkeypatch.setattr(mujoco, "N_BUILD_ENVS", 4)
    return directory


def _arrays(buffer):
    return [(np.asarray(e.observations), np.asarray(e.actions), np.asarray(e.rewards), bool(e.terminated))
            for e in buffer.episodes]


def test_names_and_unknown_names():
    names = mujoco.mujoco_dataset_names()
    assert len(names) == 15 and "hopper-medium-replay-v0" in names and "walker2d-medium-expert-v0" in names
    with pytest.raises(ValueError, match=r"unknown locomotion dataset 'hopper-medium-v2' \(recipe version v0 is the one"):
        offrl.datasets.get_mujoco("hopper-medium-v2")
    with pytest.raises(ValueError, match="known: hopper-random-v0, hopper-medium-v0"):
        offrl.datasets.get_mujoco("ant-medium-v0")
    with pytest.raises(TypeError, match="dataset name must be a str"):
        offrl.datasets.get_mujoco(3)


def test_shipped_policy_is_read_without_pickle(behaviour, monkeypatch):
    import pickle

    import torch

    def refuse(*args, **kwargs):
        raise AssertionError("unpickling")

    monkeypatch.setattr(torch, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    algo = mujoco.load_behaviour_policy("hopper", "medium")
    state = algo.modules["policy"].state_dict()
    from safetensors.torch import load_file

    saved = load_file(os.path.join(behaviour, "hopper.safetensors"))
    for key, value in state.items():
        assert torch.equal(value, saved[f"{SNAPSHOTS[1]}.{key}"].float())
    with pytest.raises(ValueError, match="holds no snapshot 'step_9'"):
        mujoco.load_behaviour_policy("hopper", "step_9")


def test_a_build_has_exactly_n_steps_and_keeps_terminals_and_timeouts_apart(behaviour):
    buffer = mujoco._build_buffer("hopper", "random", 700, show_progress=False, n_jobs=1)
    assert buffer.transition_count == 700
    episodes = buffer.episodes
    terminated = [e for e in episodes if e.terminated]
    truncated = [e for e in episodes if not e.terminated]
    # uniform random actions make the hopper fall well before 1,000 steps
    assert terminated and all(len(e.rewards) < 1000 for e in terminated)
    # the episodes still open when the budget ran out end as timeouts, one per environment
    assert 1 <= len(truncated) <= mujoco.N_BUILD_ENVS
    actions = np.concatenate([np.asarray(e.actions) for e in episodes])
    assert actions.shape == (700, 3) and actions.min() >= -1.0 and actions.max() <= 1.0


def test_shards_give_the_same_bytes_in_one_process_or_several(behaviour, monkeypatch, tmp_path):
    monkeypatch.setattr(mujoco, "SHARD_STEPS", 200)
    assert len(mujoco._shards("hopper", "medium", 500)) == 3
    one = mujoco._build_buffer("hopper", "medium", 500, show_progress=False, n_jobs=1)
    two = mujoco._build_buffer("hopper", "medium", 500, show_progress=False, n_jobs=2)
    one.dump(str(tmp_path / "one.h5"))
    two.dump(str(tmp_path / "two.h5"))
    assert (tmp_path / "one.h5").read_bytes() == (tmp_path / "two.h5").read_bytes()
    assert one.transition_count == 500


def test_medium_replay_replays_uniform_steps_then_the_snapshots_in_order(behaviour, monkeypatch):
    plan = mujoco._replay_plan("hopper", None)
    assert plan == [(None, 10_000), (SNAPSHOTS[0], 10_000)]
    assert mujoco.default_steps("hopper-medium-replay-v0") == 20_000
    assert mujoco._replay_plan("hopper", 301) == [(None, 150), (SNAPSHOTS[0], 151)]
    calls = []
    real = mujoco._collect_shard

    def spy(env, policy, n_steps, seed):
        calls.append((policy, n_steps))
        return real(env, policy, n_steps, seed)

    monkeypatch.setattr(mujoco, "_collect_shard", spy)
    buffer = mujoco._build_buffer("hopper", "medium-replay", 301, show_progress=False, n_jobs=1)
    assert calls == [(None, 150), (SNAPSHOTS[0], 151)]
    assert buffer.transition_count == 301


def test_medium_expert_is_medium_then_expert(behaviour):
    both = mujoco._build_buffer("hopper", "medium-expert", 400, show_progress=False, n_jobs=1)
    # medium-expert's halves use the medium and expert recipes' own seeds: at the
    # default sizes (1M each) it is exactly the two datasets one after the other
    assert [s[0] for s in mujoco._shards("hopper", "medium-expert", 2_000_000)] == ["medium"] * 4 + ["expert"] * 4
    assert mujoco._shards("hopper", "medium-expert", 2_000_000)[:4] == mujoco._shards("hopper", "medium", 1_000_000)
    assert mujoco._shards("hopper", "medium-expert", 2_000_000)[4:] == mujoco._shards("hopper", "expert", 1_000_000)
    medium = mujoco._build_buffer("hopper", "medium", 200, show_progress=False, n_jobs=1)
    first = _arrays(both)[: len(medium.episodes)]
    for (o1, a1, r1, t1), (o2, a2, r2, t2) in zip(first, _arrays(medium)):
        np.testing.assert_array_equal(o1, o2)
        np.testing.assert_array_equal(a1, a2)
        assert t1 == t2
    assert both.transition_count == 400


def test_cache_is_checked_and_rebuilt(behaviour, tmp_path):
    cache = str(tmp_path / "cache")
    dataset, env = offrl.datasets.get_mujoco("hopper-random-v0", cache_dir=cache, n_steps=300, show_progress=False)
    assert dataset.transition_count == 300 and env.spec.id == "Hopper-v5"
    path = mujoco.cache_path("hopper-random-v0", 300, cache)
    assert path.endswith("hopper-random-v0-300steps.h5") and os.path.exists(path + ".sha256")
    original = open(path, "rb").read()
    with open(path, "r+b") as f:  # truncated by a crash or a bad copy
        f.truncate(len(original) // 2)
    with pytest.warns(UserWarning, match="does not match its checksum"):
        again, _ = offrl.datasets.get_mujoco("hopper-random-v0", cache_dir=cache, n_steps=300, show_progress=False)
    assert open(path, "rb").read() == original  # same machine, same seed: same bytes
    assert again.transition_count == 300


def test_a_killed_build_leaves_no_file_under_the_final_name(behaviour, tmp_path):
    cache = tmp_path / "cache"
    script = textwrap.dedent(f"""
        import offrl.datasets.mujoco as m
        m.BEHAVIOUR_DIRECTORY = {behaviour!r}
        m.N_BUILD_ENVS = 4
        print("started", flush=True)
        m.get_mujoco("hopper-random-v0", cache_dir={str(cache)!r}, n_steps=200_000, show_progress=False)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "started"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    final = mujoco.cache_path("hopper-random-v0", 200_000, str(cache))
    assert not os.path.exists(final) and not os.path.exists(final + ".sha256")


def test_missing_mujoco_names_the_extra(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_mujoco(name, *args, **kwargs):
        if name == "mujoco":
            raise ImportError("No module named 'mujoco'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_mujoco)
    with pytest.raises(ImportError, match=r"pip install 'offrl\[mujoco\]'"):
        offrl.datasets.get_mujoco("hopper-medium-v0")


def test_normalized_score_is_d4rls_formula(monkeypatch):
    monkeypatch.setitem(_scores.REFERENCE_RETURNS, "hopper", (-20.0, 3180.0))
    assert offrl.datasets.get_normalized_score("hopper-medium-v0", 1580.0) == pytest.approx(50.0)
    assert offrl.datasets.get_normalized_score("Hopper-v5", -20.0) == 0.0
    np.testing.assert_allclose(offrl.datasets.get_normalized_score("hopper", [3180.0, 780.0]), [100.0, 25.0])
    with pytest.raises(ValueError, match="no reference returns for 'ant'"):
        offrl.datasets.get_normalized_score("ant", 1.0)
    with pytest.raises(ValueError, match="returns must be finite"):
        offrl.datasets.get_normalized_score("hopper", [1.0, float("nan")])
    with pytest.raises(TypeError, match="returns must be a number or an array of numbers"):
        offrl.datasets.get_normalized_score("hopper", "high")
