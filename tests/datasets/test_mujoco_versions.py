"""Recipe versions of the locomotion datasets, and replacing a shipped
expert by one from a longer run (``datasets/mujoco_behaviour.py
ship-expert``): the replaced recipes get new names, the others keep their
names and their data.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

pytest.importorskip("mujoco", reason="the locomotion datasets need MuJoCo (pip install 'offrl[mujoco]')")

import offrl  # noqa: E402
from offrl import _scores  # noqa: E402
from offrl.datasets import mujoco  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def behaviour_script(monkeypatch):
    monkeypatch.syspath_prepend(os.path.join(REPO, "datasets"))
    import mujoco_behaviour

    return mujoco_behaviour


def _policy_tensors(seed: int, env: str = "hopper") -> dict:
    """An untrained SAC policy's weights (float32 numpy), seeded."""
    offrl.seed(seed)
    sac = offrl.algos.SACConfig().create()
    sac.build_with_env(mujoco.make_env(env))
    return {k: v.detach().numpy().copy() for k, v in sac.modules["policy"].state_dict().items()}


def _ship_first_run(directory: str) -> None:
    """What ``ship`` writes for a first run: medium step_20, expert step_40,
    replay step_10, with the training curve."""
    from safetensors.numpy import save_file

    tensors = {}
    for seed, name in enumerate(["step_0000010", "step_0000020", "step_0000040"]):
        tensors.update({f"{name}.{k}": v.astype(np.float16) for k, v in _policy_tensors(seed).items()})
    os.makedirs(directory, exist_ok=True)
    save_file(tensors, os.path.join(directory, "hopper.safetensors"))
    curve = [{"step": 10 * i, "name": f"step_{10 * i:07d}", "sampled_mean": m, "greedy_mean": m, "total_seconds": 5.0 * i}
             for i, m in ((1, 10.0), (2, 400.0), (3, 900.0), (4, 1100.0))]
    facts = {"env_id": "Hopper-v5", "seed": 101, "steps": 40, "train_seconds": 20.0, "expert": "step_0000040",
             "medium": "step_0000020", "replay": ["step_0000010"], "curve": curve,
             "expert_rerank": {"episodes": 100, "sampled": {"step_0000040": [1000.0, 50.0]}}}
    with open(os.path.join(directory, "hopper.json"), "w") as f:
        json.dump(facts, f)


def _second_run(work: str, seed: int) -> dict:
    """A work directory as ``train --seed`` leaves it: snapshots, the curve
    (its last third's best sampled return at step 60) and the state."""
    from safetensors.numpy import save_file

    directory = os.path.join(work, "hopper")
    os.makedirs(os.path.join(directory, "snapshots"))
    weights = {}
    with open(os.path.join(directory, "curve.jsonl"), "w") as f:
        for i, sampled in enumerate([100.0, 800.0, 1500.0, 2600.0, 3000.0, 2800.0], start=1):
            name = f"step_{10 * i:07d}"
            weights[name] = _policy_tensors(100 + i)
            save_file(weights[name], os.path.join(directory, "snapshots", name + ".safetensors"))
            f.write(json.dumps({"step": 10 * i, "name": name, "sampled_mean": sampled, "greedy_mean": sampled,
                                "total_seconds": 7.0 * i}) + "\n")
    with open(os.path.join(directory, "state.json"), "w") as f:
        json.dump({"steps": 60, "seconds": 42.0, "seed": seed}, f)
    return weights


def test_ship_expert_replaces_only_the_expert_and_versions_its_recipes(behaviour_script, tmp_path, monkeypatch, capsys):
    from safetensors.numpy import load_file

    shipped = str(tmp_path / "behaviour")
    _ship_first_run(shipped)
    before = load_file(os.path.join(shipped, "hopper.safetensors"))
    weights = _second_run(str(tmp_path / "work"), seed=7)
    monkeypatch.setattr(behaviour_script, "SHIP_DIRECTORY", shipped)

    facts = behaviour_script.ship_expert("hopper", str(tmp_path / "work"))

    after = load_file(os.path.join(shipped, "hopper.safetensors"))
    # medium and replay: the same tensors, byte for byte; the old expert gone; the new one float16
    kept = {k: v for k, v in before.items() if k.split(".", 1)[0] in ("step_0000010", "step_0000020")}
    assert {k for k in after if not k.startswith("seed7_")} == set(kept)
    for key, value in kept.items():
        assert after[key].dtype == np.float16 and after[key].tobytes() == value.tobytes()
    assert {k.split(".", 1)[0] for k in after} == {"step_0000010", "step_0000020", "seed7_step_0000050"}
    for key, value in weights["step_0000050"].items():
        np.testing.assert_array_equal(after[f"seed7_step_0000050.{key}"], value.astype(np.float16))
    # the record: the new expert, its run, the next versions of the expert recipes, what it replaced
    with open(os.path.join(shipped, "hopper.json")) as f:
        assert json.load(f) == facts
    assert facts["expert"] == "seed7_step_0000050" and facts["medium"] == "step_0000020"
    assert facts["replay"] == ["step_0000010"] and len(facts["curve"]) == 4
    assert facts["recipe_versions"] == {"expert": "v1", "medium-expert": "v1"}
    assert facts["expert_run"]["seed"] == 7 and facts["expert_run"]["steps"] == 60
    assert [r["step"] for r in facts["expert_run"]["curve"]] == [10, 20, 30, 40, 50, 60]
    assert facts["superseded_experts"] == [{
        "expert": "step_0000040", "versions": {"expert": "v0", "medium-expert": "v0"},
        "expert_rerank": {"episodes": 100, "sampled": {"step_0000040": [1000.0, 50.0]}}}]
    assert "expert_rerank" not in facts
    out = capsys.readouterr().out
    assert "{'hopper-expert': 'v1', 'hopper-medium-expert': 'v1'}" in out
    # the stand-in medium (400) is not the first run's first snapshot to reach 3000 / 3: said
    assert ("warning: the first snapshot of the first run to reach a third of the new expert's 3000.0 is step_0000040, "
            "not the shipped medium step_0000020") in out

    # the library reads the new expert as the shipped one
    monkeypatch.setattr(mujoco, "BEHAVIOUR_DIRECTORY", shipped)
    policy = mujoco.load_behaviour_policy("hopper", "expert").modules["policy"].state_dict()
    for key, value in weights["step_0000050"].items():
        np.testing.assert_array_equal(policy[key].numpy(), value.astype(np.float16).astype(np.float32))

    # a second replacement from the same run has nothing to do; another run goes to v2
    with pytest.raises(SystemExit, match="seed7_step_0000050 is already shipped"):
        behaviour_script.ship_expert("hopper", str(tmp_path / "work"))
    _second_run(str(tmp_path / "work2"), seed=8)
    again = behaviour_script.ship_expert("hopper", str(tmp_path / "work2"))
    assert again["recipe_versions"] == {"expert": "v2", "medium-expert": "v2"}
    assert [s["expert"] for s in again["superseded_experts"]] == ["step_0000040", "seed7_step_0000050"]
    assert {k.split(".", 1)[0] for k in load_file(os.path.join(shipped, "hopper.safetensors"))} == {
        "step_0000010", "step_0000020", "seed8_step_0000050"}


def test_a_resumed_run_keeps_its_seed(behaviour_script, tmp_path):
    _second_run(str(tmp_path), seed=7)
    assert behaviour_script._run_seed("hopper", str(tmp_path / "hopper")) == 7
    # a run to resume (its files are only looked for: the seed is refused before anything is read)
    open(os.path.join(tmp_path, "hopper", "checkpoint.d3"), "w").close()
    open(os.path.join(tmp_path, "hopper", "buffer.h5"), "w").close()
    with pytest.raises(SystemExit, match="holds a run of seed 7, not 8: give another --work"):
        behaviour_script.train("hopper", 100, 10, str(tmp_path), seed=8)
    assert behaviour_script._run_seed("walker2d", str(tmp_path / "nothing")) == behaviour_script.SEEDS["walker2d"]


def test_a_new_recipe_version_renames_only_its_datasets(monkeypatch):
    monkeypatch.setattr(_scores, "RECIPE_VERSIONS", {"hopper-expert": "v1", "hopper-medium-expert": "v1"})
    names = mujoco.mujoco_dataset_names()
    assert "hopper-expert-v1" in names and "hopper-medium-expert-v1" in names and "hopper-medium-v0" in names
    assert "hopper-expert-v0" not in names and "walker2d-expert-v0" in names and len(names) == 15
    assert mujoco._parse("hopper-medium-expert-v1") == ("hopper", "medium-expert")
    # the superseded name is refused, naming the one offrl builds now; nothing is built under it
    with pytest.raises(ValueError, match=r"'hopper-expert-v0' \(recipe version v1 is the one offrl builds: hopper-expert-v1\)"):
        offrl.datasets.get_mujoco("hopper-expert-v0")
    assert _scores.environment_of("hopper-expert-v1") == "hopper"
    with pytest.raises(ValueError, match="no reference returns for 'hopper-expert-v0'"):
        _scores.environment_of("hopper-expert-v0")
    from offrl.datasets import catalog

    assert catalog._local_equivalent("hopper_expert-v2.hdf5") == "hopper-expert-v1"
    assert catalog._local_equivalent("hopper_medium-v2.hdf5") == "hopper-medium-v0"


def test_the_versions_offrl_builds_are_the_shipped_records():
    """``RECIPE_VERSIONS`` (what offrl names its datasets) and each shipped
    behaviour record's ``recipe_versions`` (what ``ship-expert`` wrote) agree,
    and a replaced expert's record says which run it came from."""
    for env in mujoco.shipped_environments():
        facts = mujoco.behaviour_facts(env)
        recorded = facts.get("recipe_versions", {})
        for kind in _scores.KINDS:
            assert _scores.dataset_name(env, kind) == f"{env}-{kind}-{recorded.get(kind, 'v0')}"
        if recorded:
            assert facts["expert"].startswith(f"seed{facts['expert_run']['seed']}_")
            assert len(facts["superseded_experts"]) == max(int(recorded[k][1:]) for k in recorded)
    assert set(_scores.RECIPE_VERSIONS) <= {f"{env}-{kind}" for env in mujoco.shipped_environments() for kind in _scores.KINDS}



def test_cards_follow_new_references_and_drop_superseded_datasets(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(os.path.join(REPO, "datasets"))
    import build_mujoco

    state = _scores.reference_figures()
    state["returns"]["hopper"] = [0.0, 2000.0]  # a new expert's reference
    state["datasets"]["hopper-expert-v9"] = dict(state["datasets"]["hopper-expert-v0"])  # a superseded recipe
    reference = tmp_path / "reference.json"
    reference.write_text(json.dumps(state))
    monkeypatch.setattr(_scores, "REFERENCE_FILE", str(reference))
    monkeypatch.setattr(build_mujoco, "HERE", str(tmp_path))
    (tmp_path / "hopper-expert-v9.md").write_text("old card")

    build_mujoco.cards([])

    after = json.loads(reference.read_text())
    assert "hopper-expert-v9" not in after["datasets"] and not (tmp_path / "hopper-expert-v9.md").exists()
    assert set(after["datasets"]) == set(state["datasets"]) - {"hopper-expert-v9"}
    medium = after["datasets"]["hopper-medium-v0"]
    assert medium["normalized_return_mean"] == round(100.0 * medium["episode_return"]["mean"] / 2000.0, 2)
    card = (tmp_path / "hopper-medium-v0.md").read_text()
    assert f"| normalised return | {medium['normalized_return_mean']:.1f} (random 0.0 = 0, expert 2000.0 = 100;" in card
    # another environment's figures are untouched
    assert after["datasets"]["walker2d-medium-v0"] == state["datasets"]["walker2d-medium-v0"]
