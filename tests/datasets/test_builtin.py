"""Built-in datasets: built by recipe, deterministic, cached behind a
checksum, and matching their cards."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import warnings

import numpy as np
import pytest

from offrl.dataset import MDPDataset
from offrl.datasets import builtin
from offrl.datasets.builtin import (
    RECIPES,
    CartPoleController,
    PendulumController,
    build_dataset,
    cache_directory,
    dataset_names,
    get_cartpole,
    get_dataset,
    get_pendulum,
)

CARDS = os.path.join(os.path.dirname(__file__), "..", "..", "datasets")
TRAINED = {"cartpole-replay", "pendulum-replay"}  # recipes that train a network


def _sha(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _card_facts(name: str) -> dict:
    text = open(os.path.join(CARDS, f"{name}.md")).read()
    return json.loads(re.search(r"```json\n(.*?)\n```", text, re.S).group(1))


@pytest.fixture
def small_recipes(monkeypatch):
    """Every recipe at 600 steps (same policies and seeds)."""
    monkeypatch.setattr(builtin, "RECIPES", {n: dataclasses.replace(r, n_steps=600) for n, r in RECIPES.items()})


def test_known_names_and_unknown_name_lists_them():
    assert dataset_names() == sorted(
        f"{env}-{kind}" for env in ("cartpole", "pendulum") for kind in ("random", "replay", "medium", "expert")
    )
    with pytest.raises(ValueError, match=r"unknown dataset 'cartpole-v0'; known datasets: cartpole-expert, cartpole-medium"):
        get_dataset("cartpole-v0")
    with pytest.raises(ValueError, match=r"unknown dataset_type 'bad' for cartpole; known: expert, medium, random, replay"):
        get_cartpole("bad")
    with pytest.raises(TypeError, match="dataset name must be a str"):
        get_dataset(3)


def test_cache_directory_follows_the_environment_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("OFFRL_DATA_DIR", str(tmp_path / "here"))
    assert cache_directory() == str(tmp_path / "here")
    assert cache_directory(str(tmp_path / "given")) == str(tmp_path / "given")
    monkeypatch.delenv("OFFRL_DATA_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_directory() == os.path.join(str(tmp_path / "xdg"), "offrl", "datasets")


@pytest.mark.parametrize("name", sorted(set(RECIPES) - TRAINED))
def test_a_rebuild_gives_the_identical_file(name, tmp_path):
    first = build_dataset(name, str(tmp_path / "a.h5"), n_steps=500)
    second = build_dataset(name, str(tmp_path / "b.h5"), n_steps=500)
    assert first == second == _sha(tmp_path / "a.h5")
    assert open(tmp_path / "a.h5.sha256").read().split()[0] == first
    dataset = MDPDataset.load(str(tmp_path / "a.h5"))
    assert dataset.transition_count == 500


def test_get_dataset_builds_once_then_loads_from_the_cache(small_recipes, tmp_path, monkeypatch):
    calls = []
    real = builtin.build_dataset
    monkeypatch.setattr(builtin, "build_dataset", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    dataset, env = get_cartpole("random", cache_dir=str(tmp_path))
    assert env.spec.id == "CartPole-v1" and dataset.transition_count == 600
    assert dataset.dataset_info.action_size == 2
    again, _ = get_dataset("cartpole-random", cache_dir=str(tmp_path))
    assert calls == ["cartpole-random"]
    np.testing.assert_array_equal(again.to_arrays()["observations"], dataset.to_arrays()["observations"])
    dataset, env = get_pendulum("random", cache_dir=str(tmp_path))
    assert env.spec.id == "Pendulum-v1" and dataset.dataset_info.action_size == 1


def test_a_corrupted_cache_file_is_detected_and_rebuilt(small_recipes, tmp_path):
    get_dataset("pendulum-random", cache_dir=str(tmp_path))
    path = tmp_path / "pendulum-random.h5"
    good = _sha(path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match="does not match its checksum"):
        dataset, _ = get_dataset("pendulum-random", cache_dir=str(tmp_path))
    assert _sha(path) == good and dataset.transition_count == 600
    # a truncated file too
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.warns(UserWarning, match="does not match its checksum"):
        get_dataset("pendulum-random", cache_dir=str(tmp_path))
    assert _sha(path) == good
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]


def test_scripted_controllers_are_what_their_docstrings_say():
    cart = CartPoleController()
    cart.create_impl((4,), 2)
    x = np.array([[0.0, 0.0, 0.05, 0.0], [0.0, 0.0, -0.05, 0.0], [0.0, 0.0, 0.01, -0.1], [1.0, 0.0, 0.0, 0.0]], np.float32)
    np.testing.assert_array_equal(cart.predict(x), [1, 0, 0, 1])
    pend = PendulumController()
    pend.create_impl((3,), 1)
    angle = np.array([0.1, 0.0, np.pi, np.pi / 2])
    velocity = np.array([0.0, 1.0, 1.0, -1.0])
    obs = np.stack([np.cos(angle), np.sin(angle), velocity], axis=1).astype(np.float32)
    energy = 0.5 * velocity**2 + 15 * (np.cos(angle) - 1)
    expected = np.where(
        (np.cos(angle) > 0.9) & (np.abs(energy) < 8), -12 * angle - 2.5 * velocity, 2 * np.sign(-velocity * energy)
    ).clip(-2, 2)
    np.testing.assert_allclose(pend.predict(obs)[:, 0], expected, rtol=1e-5, atol=1e-5)


def test_expert_beats_medium_beats_random(small_recipes, tmp_path):
    returns = {}
    for kind in ("random", "medium", "expert"):
        dataset, _ = get_cartpole(kind, cache_dir=str(tmp_path))
        returns[kind] = dataset.compute_returns()[:-1].mean()  # the last episode is cut by the step budget
    assert returns["random"] < returns["medium"] < returns["expert"]


def test_cartpole_random_matches_its_card(tmp_path):
    facts = _card_facts("cartpole-random")
    path = tmp_path / "cartpole-random.h5"
    checksum = build_dataset("cartpole-random", str(path))
    dataset = MDPDataset.load(str(path))
    assert checksum == facts["sha256"] == RECIPES["cartpole-random"].reference_sha256
    assert dataset.transition_count == facts["steps"] and len(dataset.episodes) == facts["episodes"]
    assert dataset.compute_returns().mean() == pytest.approx(facts["episode_return"]["mean"], abs=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(RECIPES) - builtin.SHIPPED))
def test_every_dataset_matches_its_card(name, tmp_path):
    """Recipes rebuilt here give their card's data. The shipped replay
    datasets are not rebuilt: online learning over 50,000 steps amplifies
    last-bit differences of another CPU's kernels into other episodes (which
    is why they are shipped); their files are checked against the card by
    test_shipped_files_are_copied_not_rebuilt."""
    facts = _card_facts(name)
    path = tmp_path / f"{name}.h5"
    checksum = build_dataset(name, str(path))
    dataset = MDPDataset.load(str(path))
    returns = dataset.compute_returns()
    assert dataset.transition_count == facts["steps"]
    assert len(dataset.episodes) == facts["episodes"]
    for key in ("mean", "std", "min", "max"):
        assert float(getattr(np, key)(returns)) == pytest.approx(facts["episode_return"][key], abs=1e-3)
    assert checksum == facts["sha256"]
    assert build_dataset(name, str(tmp_path / "again.h5")) == checksum


@pytest.mark.parametrize("name", sorted(builtin.SHIPPED))
def test_shipped_files_are_copied_not_rebuilt(name, tmp_path, monkeypatch):
    monkeypatch.setattr(builtin, "build_dataset", lambda *a, **k: pytest.fail("the shipped file should be used"))
    dataset, env = get_dataset(name, cache_dir=str(tmp_path))
    facts = _card_facts(name)
    assert _sha(tmp_path / f"{name}.h5") == facts["sha256"] == RECIPES[name].reference_sha256
    assert dataset.transition_count == facts["steps"] and env.spec.id == RECIPES[name].env_id
    assert len(dataset.episodes) == facts["episodes"]
    for key in ("mean", "std", "min", "max"):
        assert float(getattr(np, key)(dataset.compute_returns())) == pytest.approx(facts["episode_return"][key], abs=1e-3)
    # learning happened while the data was collected: the last episodes beat the first ones
    returns = dataset.compute_returns()
    assert returns[-10:].mean() > returns[:10].mean()


def test_a_shipped_file_that_does_not_match_is_not_used(tmp_path, monkeypatch):
    fake = tmp_path / "prebuilt"
    fake.mkdir()
    (fake / "cartpole-replay.h5").write_bytes(b"not the dataset")
    monkeypatch.setattr(builtin, "PREBUILT_DIRECTORY", str(fake))
    built = []
    monkeypatch.setattr(builtin, "build_dataset", lambda name, path, n_steps=None: built.append(name) or
                        build_dataset("cartpole-random", path, n_steps=50))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        get_dataset("cartpole-replay", cache_dir=str(tmp_path / "cache"))
    messages = [str(w.message) for w in caught]
    assert any("the shipped" in m and "does not match its reference checksum" in m for m in messages)
    # the stand-in build is not the reference build either, and says so
    assert any("was rebuilt with checksum" in m for m in messages)
    assert built == ["cartpole-replay"]


def test_d3rlpys_arguments_reach_the_dataset_and_the_env(small_recipes, tmp_path):
    from offrl.dataset import BasicTrajectorySlicer, MultiStepTransitionPicker

    picker, slicer = MultiStepTransitionPicker(n_steps=3, gamma=0.9), BasicTrajectorySlicer()
    # d3rlpy 2.8.1's positional order: dataset_type, transition_picker, trajectory_slicer, render_mode
    dataset, env = get_cartpole("random", picker, slicer, "rgb_array", cache_dir=str(tmp_path))
    assert dataset.transition_picker is picker and dataset.trajectory_slicer is slicer
    assert env.render_mode == "rgb_array"
    same, same_env = get_dataset("cartpole-random", picker, slicer, "rgb_array", cache_dir=str(tmp_path))
    assert same.transition_picker is picker and same_env.render_mode == "rgb_array"
    default, plain_env = get_pendulum("random", cache_dir=str(tmp_path))
    assert plain_env.render_mode is None
    assert type(default.transition_picker).__name__ == "BasicTransitionPicker"
    # the picker is used when sampling: a 3-step return on a cartpole episode (reward 1 per step)
    batch = dataset.sample_transition_batch(64)
    # (not those 1-2 steps before the end of the episode the step budget cut, whose return is shorter)
    long = (batch.terminals[:, 0] == 0) & (np.asarray(batch.intervals).reshape(-1) == 3)
    np.testing.assert_allclose(batch.rewards[long, 0], 1 + 0.9 + 0.81, rtol=1e-6)
