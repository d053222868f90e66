"""Run a Decision Transformer exported by offrl (``dt.save_policy("dt.onnx")``)
with only numpy and onnxruntime: no torch, no offrl.

    python run_sequence_policy.py dt.onnx --target-return 300 --env Pendulum-v1 --episodes 5   (needs gymnasium)

The exported graph is one stateless step over a context window; this runner
keeps the episode's state, as offrl's ``StatefulTransformerWrapper`` does:
the last ``context_size`` observations, actions, returns-to-go and
timesteps. The return-to-go starts at ``--target-return`` and falls by each
reward received. Discrete policies output the greedy action index.
"""

from __future__ import annotations

import argparse
import json
from typing import Any, List, Optional, Sequence

import numpy as np
import onnxruntime as ort


class SequencePolicy:
    """An exported sequence policy acting one step at a time:
    ``reset()`` at the start of an episode, then ``act(observation, reward)``
    with the reward of the previous step (ignored at the first step)."""

    def __init__(self, path: str, target_return: float, threads: int = 1) -> None:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.metadata = dict(self.session.get_modelmeta().custom_metadata_map)
        if "context_size" not in self.metadata:
            raise ValueError(f"{path} is not an exported sequence policy (no context_size in its metadata)")
        self.context_size = int(self.metadata["context_size"])
        self.max_timestep = int(self.metadata["max_timestep"])
        self.discrete = self.metadata.get("action_space") == "discrete"
        self.action_size = int(self.metadata["action_size"])
        self.n_observations = len(self.inputs) - 3
        self.target_return = float(target_return)
        self.reset()

    def reset(self) -> None:
        """Start a new episode."""
        self.observations: List[List[np.ndarray]] = []
        self.actions: List[Any] = []
        self.returns_to_go: List[float] = []
        self.timesteps: List[int] = []
        self.timestep = 0
        self.return_to_go = self.target_return

    def act(self, observation: Any, reward: float) -> Any:
        """The action for ``observation`` (one step, no batch axis)."""
        if self.timestep > self.max_timestep:
            raise ValueError(f"timestep {self.timestep} is beyond the policy's max_timestep={self.max_timestep}")
        if self.timesteps:
            self.return_to_go -= float(reward)
        parts = list(observation) if isinstance(observation, (list, tuple)) else [observation]
        self.observations.append([np.asarray(p, dtype=np.float32) for p in parts])
        self.actions.append(0.0 if self.discrete else np.zeros(self.action_size, np.float32))
        self.returns_to_go.append(self.return_to_go)
        self.timesteps.append(self.timestep)
        if len(self.timesteps) > self.context_size:
            for history in (self.observations, self.actions, self.returns_to_go, self.timesteps):
                del history[0]
        feed = {name: np.stack([o[k] for o in self.observations])[None]
                for k, name in enumerate(self.inputs[: self.n_observations])}
        feed["actions"] = np.asarray(self.actions, dtype=np.float32)[None]
        feed["returns_to_go"] = np.asarray(self.returns_to_go, dtype=np.float32).reshape(1, -1, 1)
        feed["timesteps"] = np.asarray(self.timesteps, dtype=np.float32)[None]
        action = self.session.run(None, feed)[0][0]
        self.actions[-1] = float(action) if self.discrete else np.asarray(action, dtype=np.float32)
        self.timestep += 1
        return int(action) if self.discrete else action


def run_env(policy: SequencePolicy, env_id: str, episodes: int, seed: int) -> List[float]:
    import gymnasium

    env = gymnasium.make(env_id)
    returns = []
    for episode in range(episodes):
        policy.reset()
        observation, _ = env.reset(seed=seed + episode)
        reward, total, done = 0.0, 0.0, False
        while not done:
            action = policy.act(observation, reward)
            observation, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
        print(f"episode {episode}: return {total:.2f}")
    print(f"mean return over {episodes} episodes: {np.mean(returns):.2f}")
    return returns


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description="Run an offrl-exported sequence policy with numpy + onnxruntime only.")
    parser.add_argument("policy", help="path to dt.onnx")
    parser.add_argument("--target-return", type=float, required=True, help="the return to condition the policy on")
    parser.add_argument("--env", required=True, help="a gymnasium environment id to run episodes in")
    parser.add_argument("--episodes", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    policy = SequencePolicy(args.policy, args.target_return, args.threads)
    print(json.dumps({k: policy.metadata[k] for k in ("algorithm", "context_size", "action_space")}))
    run_env(policy, args.env, args.episodes, args.seed)


if __name__ == "__main__":
    main()
