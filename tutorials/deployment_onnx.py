"""Deployment with ONNX: export a trained policy and run it without torch or offrl.

Run: python tutorials/deployment_onnx.py [--steps N] [--dataset-steps N] [--out DIR]

The machine that runs a policy (a robot's computer, a service behind an
API) should not need the training stack. ``algo.save_policy("policy.onnx")``
writes the greedy policy as one ONNX file that holds everything between a
raw observation and an action in the environment's units:

    raw observation -> observation scaler -> policy network -> action scaler (reversed) -> action

so the deployment side never re-implements the preprocessing (a classic
source of silent bugs). As the file is written it is loaded back with
onnxruntime and compared with ``algo.predict``; a mismatch is an error and
no file is left behind. The file also carries metadata (action space,
observation shapes, offrl version, algorithm).

This script trains TD3+BC with observation and action scalers on the
built-in Pendulum "expert" data (torques in [-2, 2] newton-metres), exports
it, and then runs the exported file the way a deployment would:

1. ``export/run_policy.py`` (numpy + onnxruntime only) turns a CSV of
   observations into a CSV of actions, in a separate Python process where
   importing torch or offrl fails, which proves the file stands alone;
2. the same runner drives Pendulum episodes, whose returns are compared
   with offrl's own rollouts of the trained algorithm;
3. the latency of one decision is measured with onnxruntime, TorchScript
   (``algo.save_policy("policy.pt")``) and ``algo.predict``.

On the deployment machine: ``pip install numpy onnxruntime`` and copy
``policy.onnx`` and ``export/run_policy.py``; or, in your own code::

    import onnxruntime, numpy as np
    session = onnxruntime.InferenceSession("policy.onnx")
    action = session.run(None, {"input_0": obs[None].astype(np.float32)})[0][0]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import time

import gymnasium
import numpy as np
import torch

import offrl
from offrl.algos import TD3PlusBCConfig
from offrl.dataset import MDPDataset
from offrl.datasets.builtin import build_dataset
from offrl.export import load_onnx_policy, load_torchscript_policy
from offrl.logging import NoopAdapterFactory
from offrl.metrics import rollout_returns
from offrl.preprocessing import MinMaxActionScaler, StandardObservationScaler

RUNNER = pathlib.Path(__file__).resolve().parents[1] / "export" / "run_policy.py"

# Runs export/run_policy.py with torch and offrl unimportable (a None entry
# in sys.modules makes `import torch` raise ImportError).
WITHOUT_TORCH = (
    "import runpy, sys; sys.modules['torch'] = sys.modules['offrl'] = None; "
    "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
)


def load_pendulum(dataset_steps: int | None, out_dir: str):
    """``(dataset, env)``: the built-in "pendulum-expert" dataset, or a
    smaller one built by the same recipe when ``dataset_steps`` is given."""
    if dataset_steps is None:
        return offrl.datasets.get_pendulum("expert")
    path = os.path.join(out_dir, f"pendulum-expert-{dataset_steps}.h5")
    build_dataset("pendulum-expert", path, n_steps=dataset_steps)
    return MDPDataset.load(path), gymnasium.make("Pendulum-v1")


def run_without_torch(script: str | os.PathLike, *args: str) -> subprocess.CompletedProcess:
    """``python script *args`` in a fresh process where torch and offrl cannot be imported."""
    result = subprocess.run([sys.executable, "-c", WITHOUT_TORCH, str(script), *args],
                            capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise RuntimeError(f"{os.path.basename(script)} failed:\n{result.stderr}")
    return result


def latency_us(act, observation: np.ndarray, repeats: int) -> float:
    """Median microseconds of one ``act(observation)`` call."""
    for _ in range(10):
        act(observation)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        act(observation)
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1e6)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10000, help="gradient steps of TD3+BC")
    parser.add_argument("--dataset-steps", type=int, default=None,
                        help="build a smaller dataset of this many steps (default: the built-in one)")
    parser.add_argument("--episodes", type=int, default=5, help="Pendulum episodes run by the exported policy")
    parser.add_argument("--latency-repeats", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (networks this small run as fast on one; the offrl command's default)")
    parser.add_argument("--out", default=os.path.join("tutorial_output", "deployment_onnx"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    offrl.seed(0)

    # Train a policy whose networks see standardised observations and
    # actions in [-1, 1]; Pendulum itself speaks torques in [-2, 2], the
    # range given to the action scaler (instead of fitting it to the log).
    dataset, env = load_pendulum(args.dataset_steps, args.out)
    algo = TD3PlusBCConfig(
        observation_scaler=StandardObservationScaler(),
        action_scaler=MinMaxActionScaler(minimum=env.action_space.low, maximum=env.action_space.high),
    ).create(device="cpu")
    algo.fit(dataset, n_steps=args.steps, n_steps_per_epoch=args.steps,
             logger_adapter=NoopAdapterFactory(), show_progress=False)

    # Export: ONNX for deployment, TorchScript for C++/libtorch users.
    onnx_path = os.path.join(args.out, "policy.onnx")
    torchscript_path = os.path.join(args.out, "policy.pt")
    algo.save_policy(onnx_path)
    algo.save_policy(torchscript_path)
    onnx_policy = load_onnx_policy(onnx_path, threads=1)
    print(f"wrote {onnx_path} ({os.path.getsize(onnx_path) / 1e3:.0f} kB), metadata:")
    for key, value in sorted(onnx_policy.metadata.items()):
        print(f"  {key}: {value}")

    # 1. CSV in, CSV out, in a process that cannot import torch or offrl.
    observations = np.concatenate([episode.observations for episode in dataset.episodes[:2]])
    observations_csv = os.path.join(args.out, "observations.csv")
    actions_csv = os.path.join(args.out, "actions.csv")
    np.savetxt(observations_csv, observations, delimiter=",", fmt="%.9g")
    run_without_torch(RUNNER, onnx_path, "--csv", observations_csv, "--out", actions_csv)
    deployed_actions = np.loadtxt(actions_csv, delimiter=",", ndmin=2)
    expected = algo.predict(observations)
    max_difference = float(np.abs(deployed_actions - expected).max())
    print(f"{len(observations)} actions from run_policy.py (no torch, no offrl) vs algo.predict: "
          f"largest difference {max_difference:.2e}; actions span [{deployed_actions.min():.2f}, "
          f"{deployed_actions.max():.2f}] (Pendulum's torque range is [-2, 2])")

    # 2. Episodes driven by the exported policy against offrl's rollouts.
    seed = 0
    result = run_without_torch(RUNNER, onnx_path, "--env", "Pendulum-v1", "--episodes", str(args.episodes),
                               "--seed", str(seed))
    deployed_returns = [float(line.split("return")[1]) for line in result.stdout.splitlines()
                        if line.startswith("episode ")]
    offrl_returns = []
    for episode in range(args.episodes):  # the runner seeds episode k with seed + k
        offrl_returns += rollout_returns(algo, env, n_trials=1, seed=seed + episode)
    print(f"mean return over {args.episodes} episodes: exported policy {np.mean(deployed_returns):.1f}, "
          f"algo.predict {np.mean(offrl_returns):.1f}; logged data {np.mean(dataset.compute_returns()):.1f}")

    # 3. Latency of one decision.
    one = observations[:1].astype(np.float32)
    torchscript_policy = load_torchscript_policy(torchscript_path)
    latencies = {
        "onnxruntime": latency_us(onnx_policy, one, args.latency_repeats),
        "torchscript": latency_us(torchscript_policy, one, args.latency_repeats),
        "algo.predict": latency_us(algo.predict, one, args.latency_repeats),
    }
    print("one decision: " + ", ".join(f"{name} {us:.0f} us" for name, us in latencies.items()))

    return {
        "algo": algo,
        "onnx_path": onnx_path,
        "torchscript_path": torchscript_path,
        "metadata": onnx_policy.metadata,
        "observations": observations,
        "deployed_actions": deployed_actions,
        "max_difference": max_difference,
        "deployed_returns": deployed_returns,
        "offrl_returns": offrl_returns,
        "latencies_us": latencies,
    }


if __name__ == "__main__":
    main()
