"""Getting started: fit a policy on logged data, evaluate it, save, load and export it.

Run: python tutorials/getting_started.py [--steps N] [--dataset-steps N] [--out DIR]

Offline reinforcement learning learns a policy from decisions someone else
already logged, without acting in the real system while it learns. This
script walks through the whole loop on CartPole-v1 (push a cart left or
right to keep a pole upright; +1 reward per step, at most 500 steps):

1. **Data.** ``offrl.datasets.get_cartpole("medium")`` returns a logged
   dataset and the environment it came from. The "medium" data was logged
   by a decent controller that took a random action half of the time, so
   its episodes last about 200 steps on average: the logging policy is far
   from perfect.
2. **Split by episode.** ``train_test_split`` keeps whole episodes together,
   so the held-out episodes are runs the algorithm has never seen.
3. **Fit.** ``DiscreteCQLConfig().create()`` makes Conservative Q-Learning
   for discrete actions, with d3rlpy's defaults. ``fit`` runs gradient steps
   in epochs and returns ``[(epoch, metrics), ...]``; the evaluators given to
   it score the algorithm after every epoch (here the TD error on the
   held-out episodes, and the return of the greedy policy in the
   environment). Logs go to ``<out>/logs``: ``params.json``, one CSV per
   metric and a model snapshot per epoch.
4. **Evaluate.** Roll the greedy policy out in the environment and compare
   its return with the return of the logged episodes. (With a real system
   you usually cannot roll out: see ``off_policy_evaluation.py``.)
5. **Save and load.** ``algo.save("model.d3")`` writes the config, the
   networks and the fitted scalers to one file (JSON and tensors, no
   pickle); ``offrl.load_learnable`` rebuilds the algorithm from it, with
   identical predictions.
6. **Export.** ``algo.save_policy("policy.onnx")`` writes the greedy policy
   as an ONNX graph (checked against ``predict`` as it is written), which
   runs with onnxruntime alone: see ``deployment_onnx.py``.

The full run builds the built-in dataset on first use (cached afterwards)
and takes a minute or two on two CPU cores. ``--dataset-steps N`` builds a
smaller dataset of the same recipe into ``--out`` instead (for quick runs).
"""

from __future__ import annotations

import argparse
import os

import gymnasium
import numpy as np
import torch

import offrl
from offrl.algos import DiscreteCQLConfig
from offrl.dataset import MDPDataset, train_test_split
from offrl.datasets.builtin import build_dataset
from offrl.export import load_onnx_policy
from offrl.logging import FileAdapterFactory
from offrl.metrics import EnvironmentEvaluator, TDErrorEvaluator, rollout_returns


def load_cartpole(dataset_steps: int | None, out_dir: str):
    """``(dataset, env)``: the built-in "cartpole-medium" dataset, or a
    smaller one built by the same recipe when ``dataset_steps`` is given."""
    if dataset_steps is None:
        return offrl.datasets.get_cartpole("medium")
    path = os.path.join(out_dir, f"cartpole-medium-{dataset_steps}.h5")
    build_dataset("cartpole-medium", path, n_steps=dataset_steps)
    return MDPDataset.load(path), gymnasium.make("CartPole-v1")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5000, help="gradient steps of DiscreteCQL")
    parser.add_argument("--steps-per-epoch", type=int, default=1000)
    parser.add_argument("--dataset-steps", type=int, default=None,
                        help="build a smaller dataset of this many steps (default: the built-in one)")
    parser.add_argument("--eval-episodes", type=int, default=10, help="episodes per evaluation in the environment")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (networks this small run as fast on one; the offrl command's default)")
    parser.add_argument("--out", default=os.path.join("tutorial_output", "getting_started"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    offrl.seed(0)

    # 1. Data: logged episodes and the environment they came from.
    dataset, env = load_cartpole(args.dataset_steps, args.out)
    print(dataset)

    # 2. Hold out a fifth of the episodes (whole episodes, never cut).
    train, test = train_test_split(dataset, test_size=0.2, random_state=0)
    print(f"{train.size()} training episodes, {test.size()} held-out episodes")

    # 3. Fit. The evaluators run after every epoch.
    algo = DiscreteCQLConfig().create(device="cpu")
    results = algo.fit(
        train,
        n_steps=args.steps,
        n_steps_per_epoch=args.steps_per_epoch,
        evaluators={
            "td_error": TDErrorEvaluator(episodes=test.episodes),
            "environment": EnvironmentEvaluator(env, n_trials=args.eval_episodes),
        },
        logger_adapter=FileAdapterFactory(root_dir=os.path.join(args.out, "logs")),
        experiment_name="DiscreteCQL",
        with_timestamp=False,
        show_progress=False,
    )
    for epoch, metrics in results:
        print(f"epoch {epoch}: loss {metrics['loss']:.4f}, held-out TD error {metrics['td_error']:.4f}, "
              f"return {metrics['environment']:.1f}")

    # 4. Evaluate: the greedy policy against the policy that logged the data.
    returns = rollout_returns(algo, env, n_trials=args.eval_episodes, seed=0)
    logged_return = float(np.mean(dataset.compute_returns()))
    print(f"greedy policy: mean return {np.mean(returns):.1f} over {len(returns)} episodes; "
          f"logged episodes: {logged_return:.1f}")

    # 5. Save, load, and check the loaded model acts the same.
    model_path = os.path.join(args.out, "discrete_cql.d3")
    algo.save(model_path)
    loaded = offrl.load_learnable(model_path)
    observations = np.concatenate([episode.observations for episode in test.episodes])
    same_actions = bool(np.array_equal(loaded.predict(observations), algo.predict(observations)))
    same_values = bool(np.array_equal(
        loaded.predict_value(observations, algo.predict(observations)),
        algo.predict_value(observations, algo.predict(observations)),
    ))
    print(f"saved to {model_path}; loaded model gives the same actions: {same_actions}, same Q-values: {same_values}")

    # 6. Export the greedy policy to ONNX and run it with onnxruntime.
    onnx_path = os.path.join(args.out, "policy.onnx")
    algo.save_policy(onnx_path)
    exported = load_onnx_policy(onnx_path)
    onnx_actions = exported(observations)
    onnx_matches = bool(np.array_equal(onnx_actions, algo.predict(observations)))
    print(f"exported to {onnx_path}; onnxruntime gives the same actions on {len(observations)} "
          f"held-out observations: {onnx_matches}")

    return {
        "algo": algo,
        "loaded": loaded,
        "results": results,
        "returns": returns,
        "logged_return": logged_return,
        "test_observations": observations,
        "model_path": model_path,
        "onnx_path": onnx_path,
        "log_dir": os.path.join(args.out, "logs", "DiscreteCQL"),
        "same_actions": same_actions,
        "same_values": same_values,
        "onnx_matches": onnx_matches,
    }


if __name__ == "__main__":
    main()
