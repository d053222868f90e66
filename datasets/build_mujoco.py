"""Measure the locomotion reference returns, build the locomotion datasets and
write their cards.

    python datasets/build_mujoco.py references [ENV ...]   # random / expert returns, 100 episodes each
    python datasets/build_mujoco.py build [NAME ...]       # build at default size, write cards
    python datasets/build_mujoco.py cards [NAME ...]       # rewrite the cards of built datasets from their records

``references`` measures, for each environment whose behaviour policies are
shipped (``datasets/mujoco_behaviour.py ship``), the mean return of the
uniform random policy and of the expert policy acting as it does in the
expert dataset (sampling), over 100 episodes each, and writes them to
``offrl/datasets/behaviour/reference.json`` (the table
``get_normalized_score`` uses).
``build`` builds each dataset by its recipe (``offrl.datasets.mujoco``, the
function ``get_mujoco`` uses) into ``get_mujoco``'s cache, timing it and
measuring peak memory, records its SHA-256 and statistics in the same file and writes the card ``datasets/<name>.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
N_REFERENCE_EPISODES = 100


def _reference_state() -> dict:
    from offrl import _scores

    return _scores.reference_figures()


def _write_reference(state: dict) -> None:
    from offrl import _scores

    tmp = _scores.REFERENCE_FILE + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, _scores.REFERENCE_FILE)


def episode_returns(algo, env: str, n_episodes: int, seed: int, sample: bool = True, n_envs: int = 20) -> list:
    """Returns of ``n_episodes`` episodes, ``n_envs`` environments in
    lockstep (environment ``i``'s ``k``-th episode reset with seed
    ``seed + k * n_envs + i``), one batched policy call per step."""
    import numpy as np

    from offrl.datasets import mujoco

    envs = [mujoco.make_env(env) for _ in range(n_envs)]
    per_env = -(-n_episodes // n_envs)
    returns: list = []
    for k in range(per_env):
        observations = np.stack([e.reset(seed=seed + k * n_envs + i)[0] for i, e in enumerate(envs)]).astype(np.float32)
        totals = np.zeros(n_envs)
        live = np.ones(n_envs, bool)
        while live.any():
            rows = np.flatnonzero(live)
            actions = algo.sample_action(observations[rows]) if sample else algo.predict(observations[rows])
            for row, action in zip(rows, actions):
                observation, reward, terminated, truncated, _ = envs[row].step(action)
                observations[row] = observation
                totals[row] += reward
                if terminated or truncated:
                    live[row] = False
        returns.extend(totals.tolist())
    return returns[:n_episodes]


def references(envs: list) -> None:
    import numpy as np
    import torch

    import offrl
    from offrl.datasets import mujoco

    torch.set_num_threads(1)
    state = _reference_state()
    for env in envs:
        start = time.perf_counter()
        offrl.seed(7)
        random_returns = episode_returns(mujoco._uniform(env), env, N_REFERENCE_EPISODES, seed=70_000)
        offrl.seed(8)
        expert_returns = episode_returns(mujoco.load_behaviour_policy(env, "expert"), env, N_REFERENCE_EPISODES, seed=80_000)
        state["returns"][env] = [round(float(np.mean(random_returns)), 2), round(float(np.mean(expert_returns)), 2)]
        state["details"][env] = {
            name: {"mean": round(float(np.mean(r)), 2), "std": round(float(np.std(r)), 2), "min": round(float(np.min(r)), 2),
                   "max": round(float(np.max(r)), 2), "episodes": len(r)}
            for name, r in (("random", random_returns), ("expert", expert_returns))
        }
        print(f"{env}: random {np.mean(random_returns):.1f} ± {np.std(random_returns):.1f}, expert {np.mean(expert_returns):.1f} "
              f"± {np.std(expert_returns):.1f} ({time.perf_counter() - start:.0f} s)", flush=True)
    _write_reference(state)


def _stats(values) -> dict:
    import numpy as np

    values = np.asarray(values, dtype=np.float64)
    return {"mean": round(float(values.mean()), 2), "std": round(float(values.std()), 2),
            "min": round(float(values.min()), 2), "max": round(float(values.max()), 2)}


def _normalise(facts: dict, env: str, state: dict) -> None:
    """A dataset's mean return as a normalised score, by the recorded reference returns of ``env``."""
    if env in state["returns"]:
        low, high = state["returns"][env]
        facts["normalized_return_mean"] = round(100.0 * (facts["episode_return"]["mean"] - low) / (high - low), 2)


def build(names: list, n_steps: int | None = None) -> None:
    from offrl.dataset import ReplayBuffer
    from offrl.datasets import mujoco

    state = _reference_state()
    for name in names:
        # into get_mujoco's cache, so later get_mujoco calls load it
        path = mujoco.cache_path(name, n_steps)
        start = time.perf_counter()
        checksum = mujoco.build_mujoco_dataset(name, path, n_steps=n_steps, show_progress=True)
        seconds = time.perf_counter() - start
        peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
        dataset = ReplayBuffer.load(path)
        episodes = dataset.episodes
        returns = [float(e.rewards.sum()) for e in episodes]
        lengths = [len(e.rewards) for e in episodes]
        env = name.split("-", 1)[0]
        facts = {
            "steps": int(sum(lengths)), "sha256": checksum, "episodes": len(episodes),
            "terminated_episodes": int(sum(e.terminated for e in episodes)),
            "episode_return": _stats(returns), "episode_length": _stats(lengths),
            "file_bytes": os.path.getsize(path), "build_seconds": round(seconds, 1), "peak_rss_mb": round(peak / 1024, 1),
            "cpus": os.cpu_count(),
        }
        _normalise(facts, env, state)
        state["datasets"][name] = facts
        _write_reference(state)
        write_card(name, facts)
        print(f"{name}: {facts['steps']} steps, {facts['episodes']} episodes, return {facts['episode_return']['mean']:.1f}, "
              f"{seconds:.0f} s, peak {facts['peak_rss_mb']:.0f} MB", flush=True)


RECIPES = {
    "random": "uniform random actions in [-1, 1]",
    "medium": "the medium SAC snapshot (the first whose sampled return reached a third of the expert's), acting stochastically",
    "expert": "the expert SAC snapshot (the best sampled return of the last third of training), acting stochastically",
    "medium-replay": "SAC's replay buffer up to medium, replayed: 10,000 uniform random steps (SAC's warm-up), then each "
                     "training snapshot acting stochastically for the 10,000 environment steps that followed it",
    "medium-expert": "the medium dataset followed by the expert dataset (the same episodes, byte for byte)",
}


def write_card(name: str, facts: dict) -> None:
    from offrl import _scores
    from offrl.datasets import mujoco

    env, kind = mujoco._parse(name)
    behaviour = mujoco.behaviour_facts(env)
    weights = os.path.join(mujoco.BEHAVIOUR_DIRECTORY, f"{env}.safetensors")
    reference = _reference_state()
    low, high = reference["returns"].get(env, (float("nan"), float("nan")))
    curve = behaviour.get("curve", [])
    rows = "\n".join(f"| {r['step']:,} | {r['sampled_mean']:.1f} | {r['greedy_mean']:.1f} |" for r in curve)
    r = facts["episode_return"]
    expert = reference.get("details", {}).get(env, {}).get("expert")
    spread = (f"; the expert's {expert['episodes']} episodes: std {expert['std']:.1f}, min {expert['min']:.1f}, "
              f"max {expert['max']:.1f}" if expert else "")
    run = behaviour.get("expert_run")  # the expert from a second, longer run (mujoco_behaviour.py ship-expert)
    rerank = (run or behaviour).get("expert_rerank")
    if rerank:
        spread += (f"; expert chosen among {len(rerank['sampled'])} snapshots by {rerank['episodes']} sampled "
                   "episodes each (" + ", ".join(f"`{k}` {v[0]:.0f} ± {v[1]:.0f}" for k, v in rerank["sampled"].items())
                   + ")")
    expert_run = ""
    if run:
        expert_run = (f", from a second run (seed {run['seed']}, {run['steps']:,} environment steps in "
                      f"{run['train_seconds'] / 3600:.1f} h) that replaced the first run's expert "
                      f"`{behaviour['superseded_experts'][-1]['expert']}`")
        if kind in ("expert", "medium-expert"):
            run_rows = "\n".join(f"| {r['step']:,} | {r['sampled_mean']:.1f} | {r['greedy_mean']:.1f} |" for r in run["curve"])
            rows += ("\n\nThe expert's run (seed " + str(run["seed"]) + "):\n\n| environment steps | sampled return | "
                     "greedy return |\n|---|---|---|\n" + run_rows)
    text = f"""# {name}

`offrl.datasets.get_mujoco("{name}")`: {_scores.ENV_IDS[env]} (gymnasium, MuJoCo), built locally by D4RL's
"{kind}" recipe (Fu et al., 2020). Not D4RL's file: D4RL's tasks were MuJoCo 1.5 `-v2` environments and
its behaviour policies its own; this is the same recipe on gymnasium's v5 task with policies trained by
offrl (`datasets/mujoco_behaviour.py`), so scores compare libraries on this data, not with D4RL's tables.

| | |
|---|---|
| behaviour | {RECIPES[kind]} |
| steps | {facts['steps']:,} (default size) |
| episodes | {facts['episodes']:,} ({facts['terminated_episodes']:,} terminated by the environment, the rest cut by the 1,000-step limit or the step budget: `timeouts`) |
| episode return | mean {r['mean']:.1f}, std {r['std']:.1f}, min {r['min']:.1f}, max {r['max']:.1f} |
| normalised return | {facts.get('normalized_return_mean', float('nan')):.1f} (random {low:.1f} = 0, expert {high:.1f} = 100; {N_REFERENCE_EPISODES} episodes each{spread}) |
| episode length | mean {facts['episode_length']['mean']:.0f}, min {facts['episode_length']['min']:.0f}, max {facts['episode_length']['max']:.0f} |
| file | {facts['file_bytes'] / 1e6:.1f} MB HDF5, SHA-256 `{facts['sha256']}` |
| build | {facts['build_seconds']:.0f} s, peak memory {facts['peak_rss_mb']:.0f} MB, on the {facts['cpus']}-CPU development machine |
| behaviour policies | `offrl/datasets/behaviour/{env}.safetensors` ({os.path.getsize(weights) / 1e6:.2f} MB, float16: the medium, expert and replay snapshots; read with safetensors, no pickle) |
| behaviour training | offrl SAC, default config, 4 vector environments, {behaviour['steps']:,} environment steps in {behaviour['train_seconds'] / 3600:.1f} h on a shared 2-core machine; medium = `{behaviour['medium']}`, expert = `{behaviour['expert']}`{expert_run} |

Reproducibility: the same machine, torch build and seed give the same bytes (the SHA-256 above). On
another CPU the policy's float32 products can round differently and the simulation is chaotic, so the
episodes differ; their statistics agree: `tests/datasets/test_mujoco_cards.py` builds short versions and
checks the mean return against this card's within a stated tolerance.

Behaviour policy's training curve (5 evaluation episodes per point):

| environment steps | sampled return | greedy return |
|---|---|---|
{rows}
"""
    path = os.path.join(HERE, f"{name}.md")
    with open(path + ".tmp", "w") as f:  # then renamed: a killed run leaves every card whole
        f.write(text)
    os.replace(path + ".tmp", path)


def cards(names: list) -> None:
    """Rewrite the cards of built datasets from their records, each
    normalised return from the current reference returns (a new expert moves
    every card of its environment); with no names, every recorded dataset,
    and a recorded dataset this version no longer builds (its recipe
    superseded: ``mujoco_behaviour.py ship-expert``) leaves the record and
    its card is removed."""
    from offrl import _scores

    state = _reference_state()
    recorded = state["datasets"]
    if not names:
        for name in sorted(set(recorded) - set(_scores.mujoco_dataset_names())):
            del recorded[name]
            card = os.path.join(HERE, f"{name}.md")
            if os.path.exists(card):
                os.remove(card)
            print(f"{name}: superseded, removed from the record and its card deleted")
    for name in names or sorted(recorded):
        facts = recorded[name]
        _normalise(facts, name.split("-", 1)[0], state)
        write_card(name, facts)
    _write_reference(state)


def main(argv: list | None = None) -> None:
    from offrl import _scores

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["references", "build", "cards"])
    parser.add_argument("names", nargs="*")
    args = parser.parse_args(argv)
    if args.command == "references":
        references(args.names or list(_scores.ENV_IDS))
    elif args.command == "cards":
        cards(args.names)
    else:
        names = args.names or _scores.mujoco_dataset_names()
        if len(names) == 1:
            build(names)
        else:  # one process per dataset, so each card's peak memory is that build's own
            import subprocess

            for name in names:
                subprocess.run([sys.executable, os.path.abspath(__file__), "build", name], check=True)


if __name__ == "__main__":
    sys.path.insert(0, REPO)
    main()
