"""Preprocessing: observation, action and reward scalers.

Run: python tutorials/preprocessing.py [--steps N] [--dataset-steps N] [--out DIR]

Neural networks learn best from inputs of order one and produce outputs in
a fixed range, while logged data comes in whatever units the sensors and
actuators use. offrl's scalers bridge the two. A scaler is chosen in the
config (``observation_scaler=``, ``action_scaler=``, ``reward_scaler=``),
fitted on the dataset when ``fit`` starts (the config's own scaler object is
left untouched: the fitted copy lives on the algorithm), saved with the
model, and exported inside the ONNX / TorchScript policy, so the deployed
policy takes raw observations and returns actions in the environment's
units.

Three experiments:

1. **Observations.** The CartPole log is recorded in engineering units:
   cart position in millimetres, velocity in mm/s, pole angle in degrees.
   Inputs in the hundreds push a fresh network's units far into their
   range, and behaviour cloning (DiscreteBC) trains erratically; with a
   ``StandardObservationScaler`` (``(x - mean) / std`` per dimension, fitted
   on the data) it learns the logged controller at once. The script prints
   the held-out action agreement and the return of both after every epoch.
2. **Actions.** Continuous policies end in ``tanh``: their raw output is in
   [-1, 1]. A heating controller logs its valve opening in percent
   (0-100). Without an action scaler, behaviour cloning (BC) can never
   open the valve more than 1 %; with a ``MinMaxActionScaler`` (the log's
   range mapped to [-1, 1] for the network, and back for ``predict``) it
   reproduces the controller to within its noise.
3. **Rewards.** Reward scalers change what the Q-functions learn (so
   ``predict_value`` comes out in scaled units) but not what the policy
   sees. Printed: what each scaler does to the CartPole rewards, including
   a trap: CartPole pays 1 at every step, so ``StandardRewardScaler``
   turns every reward into 0 and wipes out the signal, while
   ``ReturnBasedRewardScaler`` divides by the spread of episode returns.

Finally the fitted statistics are checked to survive ``save`` /
``load_learnable`` and to be inside the exported ONNX policy, which is fed
observations in millimetres and degrees.
"""

from __future__ import annotations

import argparse
import os

import gymnasium
import numpy as np
import torch

import offrl
from offrl.algos import BCConfig, DiscreteBCConfig
from offrl.dataset import MDPDataset, train_test_split
from offrl.datasets.builtin import build_dataset
from offrl.export import load_onnx_policy
from offrl.logging import NoopAdapterFactory
from offrl.metrics import DiscreteActionMatchEvaluator, rollout_returns
from offrl.preprocessing import (
    ClipRewardScaler,
    MinMaxActionScaler,
    MultiplyRewardScaler,
    ReturnBasedRewardScaler,
    StandardObservationScaler,
    StandardRewardScaler,
)

# CartPole's state (m, m/s, rad, rad/s) in the log's units (mm, mm/s, deg, deg/s)
UNITS = np.array([1000.0, 1000.0, 180.0 / np.pi, 180.0 / np.pi], dtype=np.float32)


def load_cartpole(dataset_steps: int | None, out_dir: str):
    """``(dataset, env)``: the built-in "cartpole-medium" dataset, or a
    smaller one built by the same recipe when ``dataset_steps`` is given."""
    if dataset_steps is None:
        return offrl.datasets.get_cartpole("medium")
    path = os.path.join(out_dir, f"cartpole-medium-{dataset_steps}.h5")
    build_dataset("cartpole-medium", path, n_steps=dataset_steps)
    return MDPDataset.load(path), gymnasium.make("CartPole-v1")


def in_engineering_units(dataset, env):
    """The CartPole dataset and environment with observations in mm and degrees."""
    arrays = dataset.to_arrays()
    logged = MDPDataset(arrays["observations"] * UNITS, arrays["actions"], arrays["rewards"],
                        arrays["terminals"], arrays["timeouts"])
    space = gymnasium.spaces.Box(-np.inf, np.inf, shape=(4,), dtype=np.float32)
    return logged, gymnasium.wrappers.TransformObservation(env, lambda o: (o * UNITS).astype(np.float32), space)


def valve_log(days: int, seed: int = 0) -> MDPDataset:
    """A heating controller's log, one step every 15 minutes: observations
    (temperature error in degrees C, outside temperature in degrees C),
    action the valve opening in percent (0-100), one episode per day."""
    rng = np.random.default_rng(seed)
    steps = days * 96
    error = rng.normal(0.0, 2.0, size=steps)
    outside = rng.uniform(-10.0, 20.0, size=steps)
    opening = np.clip(45.0 + 10.0 * error - 1.5 * outside + rng.normal(0.0, 2.0, size=steps), 0.0, 100.0)
    day_end = (np.arange(steps) % 96 == 95).astype(np.float32)
    return MDPDataset(
        observations=np.stack([error, outside], axis=1).astype(np.float32),
        actions=opening[:, None].astype(np.float32),
        rewards=-np.abs(error).astype(np.float32),
        terminals=np.zeros(steps, dtype=np.float32),
        timeouts=day_end,
    )


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000, help="gradient steps of each behaviour cloner")
    parser.add_argument("--steps-per-epoch", type=int, default=500)
    parser.add_argument("--dataset-steps", type=int, default=None,
                        help="build a smaller CartPole dataset of this many steps (default: the built-in one)")
    parser.add_argument("--eval-episodes", type=int, default=5)
    parser.add_argument("--valve-days", type=int, default=200, help="days of the valve log (96 steps a day)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (networks this small run as fast on one; the offrl command's default)")
    parser.add_argument("--out", default=os.path.join("tutorial_output", "preprocessing"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    quiet = dict(logger_adapter=NoopAdapterFactory(), show_progress=False)

    # 1. Observations in engineering units, with and without a scaler.
    dataset, env = in_engineering_units(*load_cartpole(args.dataset_steps, args.out))
    train, test = train_test_split(dataset, test_size=0.2, random_state=0)
    print(f"observation magnitudes (mean |x| per dimension): "
          f"{np.abs(train.to_arrays()['observations']).mean(axis=0).round(1).tolist()}")
    observation_runs = {}
    for name, scaler in (("raw", None), ("standardised", StandardObservationScaler())):
        offrl.seed(0)
        config = DiscreteBCConfig(observation_scaler=scaler)
        algo = config.create(device="cpu")
        history = []
        for epoch, metrics in algo.fitter(train, n_steps=args.steps, n_steps_per_epoch=args.steps_per_epoch,
                                          evaluators={"match": DiscreteActionMatchEvaluator(episodes=test.episodes)},
                                          **quiet):
            episode_return = float(np.mean(rollout_returns(algo, env, n_trials=args.eval_episodes, seed=epoch)))
            history.append({"epoch": epoch, "loss": metrics["loss"], "match": metrics["match"], "return": episode_return})
            print(f"{name:>12} epoch {epoch}: loss {metrics['loss']:.3f}, held-out action match "
                  f"{metrics['match']:.3f}, return {episode_return:.0f}")
        observation_runs[name] = {"algo": algo, "config": config, "history": history}
    scaled = observation_runs["standardised"]
    fitted = scaled["algo"].observation_scaler
    print(f"fitted scaler: mean {fitted.mean.round(2).tolist()}, std {fitted.std.round(2).tolist()}; "
          f"the config's scaler is still unfitted: {not scaled['config'].observation_scaler.built}")

    # 2. Continuous actions: a valve opening logged in percent.
    valves, valve_test = train_test_split(valve_log(args.valve_days), test_size=0.25, random_state=0)
    logged_actions = valves.to_arrays()["actions"]
    test_observations = valve_test.to_arrays()["observations"]
    test_actions = valve_test.to_arrays()["actions"]
    action_runs = {}
    for name, scaler in (("no action scaler", None), ("MinMaxActionScaler", MinMaxActionScaler())):
        offrl.seed(0)
        algo = BCConfig(observation_scaler=StandardObservationScaler(), action_scaler=scaler).create(device="cpu")
        algo.fit(valves, n_steps=args.steps, n_steps_per_epoch=args.steps, **quiet)
        actions = algo.predict(test_observations)
        action_runs[name] = {"algo": algo, "actions": actions, "error": float(np.abs(actions - test_actions).mean())}
        print(f"{name:>18}: predicted openings in [{actions.min():.1f}, {actions.max():.1f}] %, mean |error| "
              f"on held-out days {action_runs[name]['error']:.2f} percentage points")
    fitted_actions = action_runs["MinMaxActionScaler"]["algo"].action_scaler
    print(f"logged openings in [{logged_actions.min():.1f}, {logged_actions.max():.1f}] %; the fitted "
          f"MinMaxActionScaler maps [{fitted_actions.minimum.item():.1f}, {fitted_actions.maximum.item():.1f}] to [-1, 1]")

    # 3. Rewards: what each scaler would feed the Q-functions.
    rewards = train.to_arrays()["rewards"][:5, 0]
    reward_scalers = {
        "MultiplyRewardScaler(0.1)": MultiplyRewardScaler(0.1),
        "ClipRewardScaler(-0.5, 0.5)": ClipRewardScaler(-0.5, 0.5),
        "StandardRewardScaler()": StandardRewardScaler().fit(train),
        "ReturnBasedRewardScaler()": ReturnBasedRewardScaler().fit(train),
    }
    scaled_rewards = {}
    for name, scaler in reward_scalers.items():
        scaled_rewards[name] = scaler.transform_numpy(rewards)
        print(f"{name:>28}: rewards {rewards.tolist()} -> {[round(float(r), 4) for r in scaled_rewards[name]]}")

    # 4. The fitted scaler travels with the model and with the exported policy.
    algo = scaled["algo"]
    model_path = os.path.join(args.out, "bc_standardised.d3")
    algo.save(model_path)
    loaded = offrl.load_learnable(model_path)
    same_statistics = bool(np.array_equal(loaded.observation_scaler.mean, fitted.mean)
                           and np.array_equal(loaded.observation_scaler.std, fitted.std))
    onnx_path = os.path.join(args.out, "bc_standardised.onnx")
    algo.save_policy(onnx_path)
    raw = test.to_arrays()["observations"]  # millimetres and degrees
    onnx_matches = bool(np.array_equal(load_onnx_policy(onnx_path)(raw), algo.predict(raw)))
    print(f"reloaded scaler statistics identical: {same_statistics}; ONNX policy fed raw mm/degree "
          f"observations gives predict's actions: {onnx_matches}")

    return {
        "dataset": dataset,
        "train": train,
        "test": test,
        "observation_runs": observation_runs,
        "valves": valves,
        "valve_test": valve_test,
        "action_runs": action_runs,
        "rewards": rewards,
        "reward_scalers": reward_scalers,
        "scaled_rewards": scaled_rewards,
        "loaded": loaded,
        "same_statistics": same_statistics,
        "onnx_path": onnx_path,
        "onnx_matches": onnx_matches,
    }


if __name__ == "__main__":
    main()
