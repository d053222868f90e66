"""Run a policy exported by offrl (``algo.save_policy("policy.onnx")``) with
only numpy and onnxruntime: no torch, no offrl.

    python run_policy.py policy.onnx --csv observations.csv [--out actions.csv]
    python run_policy.py policy.onnx --stdin < observations.csv
    python run_policy.py policy.onnx --env Pendulum-v1 --episodes 5   (needs gymnasium)

CSV input: one observation per line, comma-separated floats (single-array
observations). Output: one action per line (an index for discrete policies).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Dict, List, Union

import numpy as np
import onnxruntime as ort


class Policy:
    """An exported policy: ``policy.act(observations) -> actions``."""

    def __init__(self, path: str, threads: int = 1) -> None:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.metadata = dict(self.session.get_modelmeta().custom_metadata_map)
        self.observation_shapes = json.loads(self.metadata.get("observation_shapes", "[]"))

    def act(self, observations: Union[List[np.ndarray], Dict[str, np.ndarray]]) -> np.ndarray:
        """``observations``: one batch array per input (batch axis first), or
        for a policy of dict observations a dict by key (its inputs are
        named by the keys)."""
        if isinstance(observations, dict):
            missing = [n for n in self.inputs if n not in observations]
            if missing:
                raise ValueError(f"the observation has no key {missing[0]!r}: this policy takes {self.inputs}")
            feed = {name: np.asarray(observations[name], dtype=np.float32) for name in self.inputs}
        else:
            feed = {name: np.asarray(o, dtype=np.float32) for name, o in zip(self.inputs, observations)}
        return self.session.run(None, feed)[0]  # one output: output_0 (older files: action)


def _rows(lines) -> np.ndarray:
    rows = [[float(v) for v in line.strip().split(",")] for line in lines if line.strip()]
    return np.asarray(rows, dtype=np.float32)


def run_rows(policy: Policy, rows: np.ndarray, out) -> None:
    if len(policy.inputs) != 1:
        sys.exit("CSV input needs a policy with one observation input; this one has " + ", ".join(policy.inputs))
    shape = policy.observation_shapes[0] if policy.observation_shapes else [rows.shape[1]]
    actions = policy.act([rows.reshape((rows.shape[0], *shape))])
    for action in actions:
        values = np.atleast_1d(action)
        out.write(",".join(str(v.item()) for v in values) + "\n")


def run_env(policy: Policy, env_id: str, episodes: int, seed: int) -> List[float]:
    import gymnasium

    env = gymnasium.make(env_id)
    returns = []
    for episode in range(episodes):
        observation, _ = env.reset(seed=seed + episode)
        total, done = 0.0, False
        while not done:
            if isinstance(observation, dict):  # fed by key name
                action = policy.act({k: np.asarray(v, dtype=np.float32)[None] for k, v in observation.items()})[0]
            else:
                parts = list(observation) if isinstance(observation, tuple) else [observation]
                action = policy.act([np.asarray(p, dtype=np.float32)[None] for p in parts])[0]
            if policy.metadata.get("action_space") == "discrete":
                action = int(action)
            observation, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
        print(f"episode {episode}: return {total:.2f}")
    print(f"mean return over {episodes} episodes: {np.mean(returns):.2f}")
    return returns


def main(argv: List[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Run an offrl-exported ONNX policy with numpy + onnxruntime only.")
    parser.add_argument("policy", help="path to policy.onnx")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--csv", help="observations, one per line")
    source.add_argument("--stdin", action="store_true", help="read observations (CSV lines) from standard input")
    source.add_argument("--env", help="a gymnasium environment id to run episodes in")
    parser.add_argument("--out", help="write actions here instead of standard output")
    parser.add_argument("--episodes", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    policy = Policy(args.policy, args.threads)
    if args.env:
        run_env(policy, args.env, args.episodes, args.seed)
        return
    if args.csv:
        with open(args.csv) as f:
            rows = _rows(f)
    else:
        rows = _rows(sys.stdin)
    if args.out:
        with open(args.out, "w") as out:
            run_rows(policy, rows, out)
    else:
        run_rows(policy, rows, sys.stdout)


if __name__ == "__main__":
    main()
