#!/usr/bin/env python
"""Same weights, same batches: does an offrl update compute what d3rlpy
2.8.1's does? A diagnostic for quality gaps between the libraries.

    D3RLPY_PYTHON=/path/to/venv/bin/python python benchmarks/equivalence.py [--only DDPG,TD3] [--updates 50]

For each algorithm (default config, Pendulum-like data: 3-dim observations,
1-dim actions in [-1, 1]) d3rlpy builds the algorithm in its own
interpreter, writes its initial weights, draws ``--updates`` batches with
its own sampler and records each update's losses and the final weights.
offrl then builds the same algorithm, loads d3rlpy's initial weights
(translated to offrl's layout: batched critic ensembles, ``(in, out)``
weights), runs the same batches and compares: the largest relative
difference of each loss over the updates, and of every final weight.

Random draws (SAC's policy samples, TD3's target noise) are seeded alike
before each update (``torch.manual_seed``) in both libraries; they match
only where both draw the same shapes in the same order, so for those
algorithms a difference can be the draws, not the maths (the report says
which losses depend on draws). A deterministic algorithm that differs
beyond float tolerance (~1e-5 relative after 50 updates) computes other
maths; one that matches has any learning-quality gap in its random streams
(initialisation, sampling), not in its update.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from typing import Dict, List, Optional

import numpy as np

from _harness import find_d3rlpy_python, quiet_d3rlpy, run_json, worker_main
from _specs import prepare_offrl

#: algorithm -> does its update draw random numbers (then a difference may be the draws)
ALGOS = {"DDPG": False, "TD3": True, "TD3PlusBC": True, "ReBRAC": True, "BC": False, "IQL": False, "SAC": True,
         "AWAC": True, "CRR": True, "CQL": True, "CalQL": True, "PRDC": True, "DQN": False, "DoubleDQN": False,
         "NFQ": False, "DiscreteCQL": False, "DiscreteBC": False, "DiscreteBCQ": False, "DiscreteSAC": True,
         "BCQ": True, "BEAR": True, "PLAS": True, "PLASWithPerturbation": True}
DISCRETE = {"DQN", "DoubleDQN", "NFQ", "DiscreteCQL", "DiscreteBC", "DiscreteBCQ", "DiscreteSAC"}
#: config changes in both libraries: warm-ups short enough that the updates compared include the RL part;
#: DiscreteBCQ without its logit penalty, which differs on purpose (docs/COMPATIBILITY.md: d3rlpy squares
#: log-probabilities), so that the rest of its update is compared; CQL and CalQL with a fixed multiplier
#: (alpha_learning_rate 0, as d3rlpy's reproduction scripts): offrl scales the conservative term by the
#: multiplier from before its step (the CQL authors' order), d3rlpy by the stepped one, a difference of one
#: Adam step (1e-4 relative at the default rate) that would hide everything else (docs/COMPATIBILITY.md)
CHANGES: Dict[str, Dict[str, float]] = {"PLAS": {"warmup_steps": 5}, "PLASWithPerturbation": {"warmup_steps": 5},
                                        "BEAR": {"warmup_steps": 5}, "DiscreteBCQ": {"beta": 0.0},
                                        "CQL": {"alpha_learning_rate": 0.0}, "CalQL": {"alpha_learning_rate": 0.0}}
#: offrl's buffers that d3rlpy has no counterpart of (left as offrl built them)
OFFRL_ONLY = {"candidate_noise", "candidate_latents"}
#: offrl module name -> d3rlpy's field of its Modules dataclass
MODULES = {"policy": "policy", "targ_policy": "targ_policy", "q_function": "q_funcs", "targ_q_function": "targ_q_funcs",
           "value_function": "value_func", "log_temp": "log_temp", "log_alpha": "log_alpha", "imitator": "imitator"}


def pendulum_like(n: int = 4000, seed: int = 0, discrete: bool = False) -> Dict[str, np.ndarray]:
    """Pendulum-like data, or CartPole-like with ``discrete`` (two actions)."""
    rng = np.random.default_rng(seed)
    terminals = np.zeros(n)
    terminals[97::211] = 1
    timeouts = np.zeros(n)
    timeouts[199::200] = 1
    timeouts[terminals == 1] = 0
    actions = rng.integers(0, 2, size=n) if discrete else rng.uniform(-1, 1, size=(n, 1)).astype(np.float32)
    return {"observations": rng.normal(size=(n, 4 if discrete else 3)).astype(np.float32), "actions": actions,
            "rewards": rng.normal(size=n).astype(np.float32), "terminals": terminals, "timeouts": timeouts}


FIELDS = ("observations", "actions", "rewards", "next_observations", "next_actions", "terminals", "intervals")


# ------------------------------------------------------------------ d3rlpy side
def d3rlpy_side(name: str, updates: int, out: str) -> dict:
    import d3rlpy
    import torch

    quiet_d3rlpy()
    torch.set_num_threads(1)
    d3rlpy.seed(0)
    discrete = name in DISCRETE
    data = pendulum_like(discrete=discrete)
    space = {"action_space": d3rlpy.ActionSpace.DISCRETE, "action_size": 2} if discrete else {}
    dataset = d3rlpy.dataset.MDPDataset(data["observations"], data["actions"], data["rewards"], data["terminals"],
                                        data["timeouts"], **space)
    algo = getattr(d3rlpy.algos, f"{name}Config")(**CHANGES.get(name, {})).create(device="cpu:0")
    algo.build_with_dataset(dataset)
    if name == "PRDC":  # d3rlpy fits its neighbour search in fit(), over (beta * s, a) of every transition
        picked = [dataset.transition_picker(episode, i) for episode in dataset.episodes
                  for i in range(episode.transition_count)]
        algo._nbsr.fit(np.concatenate([np.stack([t.observation for t in picked]) * algo.config.beta,
                                       np.stack([t.action for t in picked]).reshape(len(picked), -1)], axis=1))
    modules = algo.impl._modules

    def weights() -> Dict[str, np.ndarray]:
        found = {}
        for field in vars(modules):
            module = getattr(modules, field)
            if isinstance(module, torch.nn.Module):
                for key, value in module.state_dict().items():
                    found[f"{field}.{key}"] = value.detach().cpu().numpy().copy()
        return found

    np.savez(os.path.join(out, "init.npz"), **weights())
    batches, losses = {}, []
    for i in range(updates):
        batch = dataset.sample_transition_batch(algo.config.batch_size)
        for f in FIELDS:
            batches[f"{i}.{f}"] = np.asarray(getattr(batch, f))
        if name == "CalQL":  # each transition's remaining rewards, from which CalQL's returns-to-go come
            remaining = [np.asarray(t.rewards_to_go, dtype=np.float32).reshape(-1) for t in batch.transitions]
            batches[f"{i}.rewards_to_go"] = np.concatenate(remaining)
            batches[f"{i}.rewards_to_go_lengths"] = np.array([len(r) for r in remaining])
        torch.manual_seed(1000 + i)
        losses.append({k: float(v) for k, v in algo.update(batch).items()})
    np.savez(os.path.join(out, "batches.npz"), **batches)
    np.savez(os.path.join(out, "final.npz"), **weights())
    return {"losses": losses}


# ------------------------------------------------------------------ offrl side
def d3rlpy_key(key: str) -> str:
    """offrl's parameter name without the ensemble member -> d3rlpy's, for
    the layouts of these algorithms' networks."""
    module, rest = key.split(".", 1)
    if module == "vae":  # d3rlpy keeps the VAE's halves as two modules
        half, rest = rest.split(".", 1)
        module = f"vae_{half}"
    for ours, theirs in (("encoder.ensemble_encoder.encoder.mlp.layers", "_encoder._layers"),  # a shared encoder
                         ("encoder.encoder.mlp.layers", "_encoder._layers"), ("encoder.mlp.layers", "_encoder._layers"),
                         ("head.", "_fc."), ("fc.", "_fc."), ("mu.", "_mu."), ("logstd", "_logstd"),
                         ("log_value", "_parameter")):
        if rest.startswith(ours):
            rest = theirs + rest[len(ours):]
            break
    return f"{MODULES.get(module, module)}.{rest}"


def _lookup(d3: dict, key: str) -> np.ndarray:
    if key in d3:
        return d3[key]
    if key.startswith("policy."):  # d3rlpy's BC names its policy ``imitator``
        return d3["imitator." + key[len("policy."):]]
    raise KeyError(key)


def translate(offrl_state: dict, d3: dict) -> dict:
    """d3rlpy's weights in offrl's layout (``offrl_state`` gives the shapes)."""
    import torch

    state = {}
    for key, ours in offrl_state.items():
        if key.split(".", 1)[0] in OFFRL_ONLY:
            state[key] = ours.clone()
            continue
        base = d3rlpy_key(key)
        if base.split(".", 1)[0] in ("q_funcs", "targ_q_funcs"):
            field, rest = base.split(".", 1)
            members = [d3[f"{field}.{e}.{rest}"] for e in range(ours.shape[0] if ours.dim() == 3 else 1)]
            if ours.dim() == 3:  # batched ensemble: (E, in, out) weights, (E, 1, out) biases
                value = np.stack([m.T if m.ndim == 2 else m[None, :] for m in members])
            else:
                value = members[0]
        else:
            value = _lookup(d3, base)
        state[key] = torch.from_numpy(np.asarray(value, dtype=np.float32).reshape(tuple(ours.shape)).copy())
    return state


def _rewards_to_go(batches: dict, i: int, cls: type):
    """Batch ``i``'s remaining rewards as recorded on d3rlpy's side (CalQL), else None."""
    if f"{i}.rewards_to_go" not in batches:
        return None
    ends = np.cumsum(batches[f"{i}.rewards_to_go_lengths"])
    return cls.from_arrays(np.split(batches[f"{i}.rewards_to_go"], ends[:-1]))


def offrl_side(name: str, directory: str, d3_losses: List[dict]) -> dict:
    import torch

    import offrl
    from offrl.dataset import MDPDataset, TransitionMiniBatch
    from offrl.dataset.batch import RewardsToGo

    torch.set_num_threads(1)
    discrete = name in DISCRETE
    data = pendulum_like(discrete=discrete)
    dataset = MDPDataset(data["observations"], data["actions"], data["rewards"], data["terminals"], data["timeouts"],
                         action_size=2 if discrete else None)
    algo = getattr(offrl.algos, f"{name}Config")(**CHANGES.get(name, {})).create(device="cpu")
    algo.build_with_dataset(dataset)
    if name == "PRDC":
        prepare_offrl(name, algo, dataset)
    with np.load(os.path.join(directory, "init.npz")) as saved:
        init = dict(saved)
    algo.modules.load_state_dict(translate(algo.modules.state_dict(), init), strict=True)
    with np.load(os.path.join(directory, "batches.npz")) as saved:
        batches = dict(saved)
    losses = []
    for i in range(len(d3_losses)):
        arrays = {f: batches[f"{i}.{f}"] for f in FIELDS}
        batch = TransitionMiniBatch(observations=arrays["observations"], actions=arrays["actions"],
                                    rewards=arrays["rewards"], next_observations=arrays["next_observations"],
                                    next_actions=arrays["next_actions"], terminals=arrays["terminals"],
                                    intervals=arrays["intervals"], rewards_to_go=_rewards_to_go(batches, i, RewardsToGo))
        torch.manual_seed(1000 + i)
        losses.append(algo.update(batch))
    worst_loss: Dict[str, float] = {}
    for ours, theirs in zip(losses, d3_losses):  # the losses both report at a step (TD3's actor every other step)
        for key in set(ours) & set(theirs):
            difference = abs(ours[key] - theirs[key]) / (abs(theirs[key]) + 1e-6)
            worst_loss[key] = max(worst_loss.get(key, 0.0), float(difference))
    reported_d3 = set().union(*d3_losses)
    reported_ours = set().union(*losses)
    with np.load(os.path.join(directory, "final.npz")) as saved:
        final = translate(algo.modules.state_dict(), dict(saved))
    worst_weight = max(float((algo.modules.state_dict()[k] - v).abs().max() / (v.abs().max() + 1e-12))
                       for k, v in final.items())
    return {"losses": worst_loss, "weights": worst_weight,
            "only_d3rlpy": sorted(reported_d3 - reported_ours), "only_offrl": sorted(reported_ours - reported_d3)}


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(ALGOS), help=f"comma-separated, of {','.join(ALGOS)}")
    parser.add_argument("--updates", type=int, default=50)
    parser.add_argument("--d3rlpy-python", default=None)
    parser.add_argument("--backend", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--job", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.backend == "d3rlpy":  # worker in d3rlpy's interpreter: print its result as JSON
        job = json.loads(args.job)
        return worker_main(lambda: d3rlpy_side(job["name"], job["updates"], job["out"]))
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in ALGOS]
    if unknown:
        parser.error(f"--only: unknown {unknown}; expected some of {list(ALGOS)}")
    python = find_d3rlpy_python(args.d3rlpy_python)
    if not python:
        parser.error("needs d3rlpy 2.8.1: --d3rlpy-python or $D3RLPY_PYTHON")
    print(f"{args.updates} updates from d3rlpy's initial weights on d3rlpy's batches; largest relative difference "
          "of each loss over the updates, and of the final weights")
    for name in names:
        with tempfile.TemporaryDirectory() as directory:
            result, note = run_json(python, __file__, ["--backend", "d3rlpy", "--job",
                                                       json.dumps({"name": name, "updates": args.updates, "out": directory})])
            if result is None:
                print(f"{name}: d3rlpy side failed: {note.strip().splitlines()[-1] if note.strip() else note}")
                continue
            try:
                compared = offrl_side(name, directory, result["losses"])
            except (KeyError, RuntimeError, ValueError) as error:
                print(f"{name}: cannot map d3rlpy's weights onto offrl's ({type(error).__name__}: {error})")
                continue
        losses = ", ".join(f"{k} {v:.1e}" for k, v in sorted(compared["losses"].items()))
        draws = " (draws random numbers: a difference may be the draws)" if ALGOS[name] else ""
        print(f"{name}: {losses}; final weights {compared['weights']:.1e}{draws}"
              + (f"; losses only d3rlpy reports: {compared['only_d3rlpy']}" if compared["only_d3rlpy"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
