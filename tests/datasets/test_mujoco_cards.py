"""The shipped locomotion behaviour policies against their cards.

On another CPU the float32 products of the behaviour policies round
differently and the simulation is chaotic, so a rebuilt dataset has other
episodes; what must hold is the policies' quality. Each check builds a short
version of a dataset on this machine and compares its mean episode return
with the mean of the full default build recorded in the card
(``offrl/datasets/behaviour/reference.json``): within 4 standard errors of the
short build's episodes, plus 2 % of the random-to-expert range (the stated
tolerance). ``hopper`` runs in the default suite; the others are ``slow``.
An environment whose policies a version does not ship is refused before any
work (checked with walker2d hidden, as it was before it shipped).
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

pytest.importorskip("mujoco", reason="the locomotion datasets need MuJoCo (pip install 'offrl[mujoco]')")

from offrl import _scores  # noqa: E402
from offrl.datasets import mujoco  # noqa: E402

FIGURES = _scores.reference_figures()
SHORT_STEPS = {"expert": 8_000, "medium": 8_000, "random": 4_000}


@pytest.fixture(autouse=True)
def four_environments(monkeypatch):
    """Four environments in lockstep (the recipe uses 16), so a short build
    holds whole 1,000-step episodes."""
    monkeypatch.setattr(mujoco, "N_BUILD_ENVS", 4)


def _check(name: str, n_steps: int) -> None:
    env = name.split("-", 1)[0]
    card = FIGURES["datasets"][name]["episode_return"]
    low, high = FIGURES["returns"][env]
    buffer = mujoco._build_buffer(env, _kind(name), n_steps, show_progress=False, n_jobs=1)
    # whole episodes only: the ones the step budget cut short have lower returns by construction
    returns = np.array([float(e.rewards.sum()) for e in buffer.episodes if e.terminated or len(e.rewards) == 1000])
    assert len(returns) >= 4, f"{name}: only {len(returns)} whole episodes in {n_steps} steps"
    tolerance = 4 * returns.std() / math.sqrt(len(returns)) + 0.02 * (high - low)
    assert abs(returns.mean() - card["mean"]) <= tolerance, (
        f"{name}: short build mean {returns.mean():.1f} over {len(returns)} episodes, card {card['mean']:.1f} "
        f"(tolerance {tolerance:.1f})"
    )


def test_the_behaviour_files_are_small_and_named_in_the_record():
    shipped = mujoco.shipped_environments()
    assert set(shipped) == {"hopper", "halfcheetah", "walker2d"}
    assert set(shipped) == set(FIGURES["returns"])  # every shipped environment has its reference returns
    for env in shipped:
        facts = mujoco.behaviour_facts(env)
        size = os.path.getsize(os.path.join(mujoco.BEHAVIOUR_DIRECTORY, f"{env}.safetensors"))
        assert size < 4_000_000
        from safetensors import safe_open

        with safe_open(os.path.join(mujoco.BEHAVIOUR_DIRECTORY, f"{env}.safetensors"), framework="np") as f:
            snapshots = {key.split(".", 1)[0] for key in f.keys()}
        assert snapshots == {facts["expert"], facts["medium"], *facts["replay"]}
        low, high = FIGURES["returns"][env]
        assert high > low


def test_an_environment_without_shipped_policies_is_refused_before_any_work(tmp_path, monkeypatch):
    assert set(mujoco.shipped_environments()) == {"hopper", "halfcheetah", "walker2d"}
    monkeypatch.setattr(mujoco, "shipped_environments", lambda: ("hopper", "halfcheetah"))
    with pytest.raises(ValueError, match=r"^walker2d-medium-v0: this version of offrl ships no behaviour policies for "
                                         r"walker2d .*; shipped: hopper, halfcheetah; "
                                         r"walker2d-random-v0 needs none$"):
        mujoco.get_mujoco("walker2d-medium-v0", n_steps=100, cache_dir=str(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_the_walker2d_expert_was_chosen_by_its_remeasured_return():
    facts = mujoco.behaviour_facts("walker2d")
    # an expert from a second run (mujoco_behaviour.py ship-expert) has its run's curve and re-measure
    run = facts.get("expert_run", facts)
    prefix = f"seed{run['seed']}_" if "expert_run" in facts else ""
    sampled = run["expert_rerank"]["sampled"]
    assert run["expert_rerank"]["episodes"] == 100 and len(sampled) == 6
    assert facts["expert"] == prefix + max(sampled, key=lambda name: sampled[name][0])
    curve = run["curve"]
    last_third = curve[len(curve) * 2 // 3:]
    best_by_curve = sorted(last_third, key=lambda r: r["sampled_mean"], reverse=True)[:6]
    assert set(sampled) == {r["name"] for r in best_by_curve}
    expert_curve = next(r["sampled_mean"] for r in curve if prefix + r["name"] == facts["expert"])
    # medium: the first snapshot of the first run that reached a third of the expert's curve value
    assert facts["medium"] == next(r["name"] for r in facts["curve"] if r["sampled_mean"] >= expert_curve / 3)


@pytest.mark.parametrize("kind", ["expert", "medium", "random"])
def test_hopper_short_builds_match_the_card(kind):
    _check(_scores.dataset_name("hopper", kind), SHORT_STEPS[kind])


def _kind(name: str) -> str:
    return name.split("-", 1)[1].rsplit("-", 1)[0]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(n for n in FIGURES["datasets"] if not n.startswith("hopper-")
                                        and _kind(n) in SHORT_STEPS))
def test_short_builds_match_the_card(name):
    _check(name, SHORT_STEPS[_kind(name)])
