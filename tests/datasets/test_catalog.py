"""offrl.datasets.get_dataset / get_d4rl / get_atari: d3rlpy's names."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

import offrl
from offrl.datasets import catalog


def _write_d4rl(path, n=40, obs_dim=11, act_dim=3):
    rng = np.random.default_rng(0)
    terminals = np.zeros(n, bool)
    terminals[19] = True
    timeouts = np.zeros(n, bool)
    timeouts[-1] = True
    with h5py.File(path, "w") as f:
        f["observations"] = rng.standard_normal((n, obs_dim)).astype(np.float32)
        f["actions"] = rng.uniform(-1, 1, (n, act_dim)).astype(np.float32)
        f["rewards"] = rng.standard_normal(n).astype(np.float32)
        f["terminals"] = terminals
        f["timeouts"] = timeouts


def test_get_d4rl_without_the_file_names_the_local_build(tmp_path, monkeypatch):
    monkeypatch.setenv("OFFRL_DATA_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("D4RL_DATASET_DIR", str(tmp_path / "d4rl"))
    with pytest.raises(FileNotFoundError, match=r"does not download.*get_mujoco\('hopper-medium-replay-v0'\)"):
        offrl.datasets.get_d4rl("hopper-medium-replay-v2")
    with pytest.raises(FileNotFoundError, match="no local build of this dataset"):
        offrl.datasets.get_d4rl("antmaze-umaze-v2")
    # get_dataset routes D4RL's names to get_d4rl, as d3rlpy does (never to offrl's own builds)
    with pytest.raises(FileNotFoundError, match=r"get_mujoco\('walker2d-medium-v0'\)"):
        offrl.datasets.get_dataset("walker2d-medium-v0")


def test_get_d4rl_reads_a_file_from_each_place(tmp_path, monkeypatch):
    pytest.importorskip("mujoco", reason="the environment returned with the data is a MuJoCo task")
    monkeypatch.setenv("OFFRL_DATA_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("D4RL_DATASET_DIR", str(tmp_path / "d4rl"))
    (tmp_path / "d4rl").mkdir()
    _write_d4rl(tmp_path / "d4rl" / "hopper_medium_replay-v2.hdf5")
    dataset, env = offrl.datasets.get_d4rl("hopper-medium-replay-v2", max_episode_steps=500)
    assert len(dataset.episodes) == 2 and sum(len(e.rewards) for e in dataset.episodes) == 40
    assert [e.terminated for e in dataset.episodes] == [True, False]
    assert env.spec.id == "Hopper-v5" and env.spec.max_episode_steps == 500
    (tmp_path / "cache" / "d4rl").mkdir(parents=True)
    _write_d4rl(tmp_path / "cache" / "d4rl" / "halfcheetah-expert-v2.hdf5", obs_dim=17, act_dim=6)
    dataset, env = offrl.datasets.get_dataset("halfcheetah-expert-v2")
    assert dataset.episodes[0].observations.shape == (20, 17) and env.spec.id == "HalfCheetah-v5"
    path = tmp_path / "maze2d-umaze-v1.hdf5"
    _write_d4rl(path, obs_dim=4, act_dim=2)
    with pytest.warns(UserWarning, match="no environment for D4RL's 'maze2d' family"):
        dataset, env = offrl.datasets.get_d4rl(str(path))
    assert env is None and len(dataset.episodes) == 2


def test_get_atari_says_why_it_is_not_provided():
    with pytest.raises(NotImplementedError, match="does not download datasets, and Atari's DQN-replay data"):
        offrl.datasets.get_atari("breakout-mixed-v0")
    with pytest.raises(NotImplementedError, match="get_atari_transitions"):
        offrl.datasets.get_atari_transitions("breakout")
    with pytest.raises(NotImplementedError):
        offrl.datasets.get_dataset("breakout-expert-v0")


def test_get_dataset_names():
    with pytest.raises(ValueError, match="unknown dataset 'cartpole'; known datasets: cartpole-expert"):
        offrl.datasets.get_dataset("cartpole")
    with pytest.raises(TypeError, match="must be a str"):
        offrl.datasets.get_dataset(None)
    assert catalog._local_equivalent("hopper_medium_expert-v2.hdf5") == "hopper-medium-expert-v0"
    assert catalog._local_equivalent("ant-medium-v2") is None
