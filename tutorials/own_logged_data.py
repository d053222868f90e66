"""Your own logged data: from arrays or a DataFrame to a dataset, to a policy.

Run: python tutorials/own_logged_data.py [--machines N] [--steps N] [--out DIR]

A plant logs every decision about its pumps, once an hour: the pump's wear
sensor, its temperature (degrees C), the current demand (0-1), and what the
operator did: keep the pump running (action 0) or take it down for service
(action 1). Running earns the demand served; a service costs 0.5 and
renews the pump; a pump that breaks down costs 10 and its history ends
there. The operator services when the pump runs hot (not always: at least
one time in ten it does the other thing), and never looks at the demand. Each pump's log is one *episode*: it ends
either in a breakdown (a *terminal* state: nothing follows, so the learner
must not bootstrap past it) or because the log window ended (a *timeout*:
the pump would have gone on; the learner treats the future as unknown
rather than zero).

This script shows the two ways such logs usually arrive and how offrl
turns them into the same :class:`~offrl.dataset.MDPDataset`:

1. **Arrays**, one row per step, in episode order: ``observations``
   ``(N, 3)``, ``actions`` ``(N,)`` (integer indices: discrete actions),
   ``rewards`` ``(N,)``, ``terminals`` and ``timeouts`` ``(N,)`` 0/1 flags
   on the last step of each episode. The operator's probability of the
   logged action is kept as ``behaviour_probabilities`` (off-policy
   evaluation uses it, see ``off_policy_evaluation.py``).
2. **A table** (pandas DataFrame) with one row per step, rows in any order
   (logs merged from several servers): ``offrl.datasets.from_dataframe``
   groups the rows by pump, orders them by time and finds the episode ends.
   For a CSV on disk see ``logged_csv_to_policy.py``.

Both give the identical dataset. Mistakes in the data (a NaN, a missing
row, a step logged twice) raise an error that names the field and the row,
shown below. Finally DiscreteCQL learns from the log and is compared with
the operator on fresh pumps of the simulator that produced the log: it
learns when a service pays off, and wastes fewer of them on fresh pumps.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import torch

import offrl
from offrl.algos import DiscreteCQLConfig
from offrl.dataset import MDPDataset
from offrl.datasets import from_dataframe
from offrl.logging import NoopAdapterFactory
from offrl.preprocessing import StandardObservationScaler

OBSERVATION_COLUMNS = ["wear", "temperature", "demand"]


# ------------------------------------------------------------ the plant
def observe(wear: np.ndarray, demand: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Sensor readings ``(n, 3)``: noisy wear, temperature in degrees C, demand."""
    reading = wear + rng.normal(0.0, 0.02, size=wear.shape)
    temperature = 40.0 + 30.0 * wear + 5.0 * demand + rng.normal(0.0, 1.0, size=wear.shape)
    return np.stack([reading, temperature, demand], axis=1).astype(np.float32)


def step(wear: np.ndarray, demand: np.ndarray, action: np.ndarray, rng: np.random.Generator):
    """One hour for ``n`` pumps: ``(next wear, reward, broke down)``."""
    running = action == 0
    breaks = running & (rng.random(wear.shape) < 0.6 * np.clip(wear - 0.5, 0.0, None))
    reward = np.where(running, demand, -0.5) - 10.0 * breaks
    next_wear = np.where(running, np.minimum(wear + 0.03 + 0.05 * demand, 1.0), 0.0)
    return next_wear, reward.astype(np.float32), breaks


def operator_service_probability(observations: np.ndarray) -> np.ndarray:
    """The operator's rule: service more often the hotter the pump runs, and
    at least 10 % of the time do the other thing."""
    temperature = observations[:, 1]
    return np.clip(1.0 / (1.0 + np.exp(-(temperature - 66.0) / 4.0)), 0.1, 0.9)


def simulate(policy, n_pumps: int, hours: int, seed: int, log: bool = False):
    """Run ``n_pumps`` pumps for up to ``hours`` steps under
    ``policy(observations, rng) -> (actions, probabilities)``.
    Returns the mean return per pump, and the step-by-step log (arrays in
    episode order) when ``log`` is true."""
    rng = np.random.default_rng(seed)
    wear = rng.uniform(0.0, 0.3, size=n_pumps)
    alive = np.ones(n_pumps, dtype=bool)
    total = np.zeros(n_pumps)
    rows = []
    for hour in range(hours):
        demand = rng.uniform(0.0, 1.0, size=n_pumps)
        observations = observe(wear, demand, rng)
        actions, probabilities = policy(observations, rng)
        wear, rewards, broke = step(wear, demand, actions, rng)
        total += np.where(alive, rewards, 0.0)
        if log:
            last_hour = hour == hours - 1
            rows.append((np.flatnonzero(alive), hour, observations[alive], actions[alive], rewards[alive],
                         broke[alive], np.full(int(alive.sum()), last_hour) & ~broke[alive], probabilities[alive]))
        alive &= ~broke
        if not alive.any():
            break
    if not log:
        return float(total.mean())
    # rows arrive hour by hour; sort them into episode (pump) order
    pump = np.concatenate([r[0] for r in rows])
    hour = np.concatenate([np.full(len(r[0]), r[1]) for r in rows])
    order = np.lexsort((hour, pump))
    arrays = {
        "pump": pump[order],
        "hour": hour[order],
        "observations": np.concatenate([r[2] for r in rows])[order],
        "actions": np.concatenate([r[3] for r in rows])[order],
        "rewards": np.concatenate([r[4] for r in rows])[order],
        "terminals": np.concatenate([r[5] for r in rows])[order].astype(np.float32),
        "timeouts": np.concatenate([r[6] for r in rows])[order].astype(np.float32),
        "behaviour_probabilities": np.concatenate([r[7] for r in rows])[order],
    }
    return float(total.mean()), arrays


def operator(observations: np.ndarray, rng: np.random.Generator):
    service = operator_service_probability(observations)
    actions = (rng.random(len(observations)) < service).astype(np.int64)
    return actions, np.where(actions == 1, service, 1.0 - service)


def greedy(algo):
    def act(observations: np.ndarray, rng: np.random.Generator):
        return algo.predict(observations), np.ones(len(observations))

    return act


# ------------------------------------------------------------ the walk-through
def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machines", type=int, default=300, help="pumps in the log")
    parser.add_argument("--hours", type=int, default=100, help="length of the log window")
    parser.add_argument("--steps", type=int, default=6000, help="gradient steps of DiscreteCQL")
    parser.add_argument("--target-update-interval", type=int, default=200)
    parser.add_argument("--eval-machines", type=int, default=1000, help="pumps simulated to compare the policies")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (networks this small run as fast on one; the offrl command's default)")
    parser.add_argument("--out", default=os.path.join("tutorial_output", "own_logged_data"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    offrl.seed(0)

    # The plant's log, as arrays in episode order.
    operator_return, log = simulate(operator, args.machines, args.hours, seed=0, log=True)

    # 1. From arrays.
    dataset = MDPDataset(
        observations=log["observations"],
        actions=log["actions"],
        rewards=log["rewards"],
        terminals=log["terminals"],
        timeouts=log["timeouts"],
        behaviour_probabilities=log["behaviour_probabilities"],
    )
    print("from arrays:", dataset)
    n_breakdowns = int(log["terminals"].sum())
    print(f"{n_breakdowns} of {dataset.size()} pumps broke down inside the log window")

    # 2. From a table: one row per step, in any order, ids and timestamps as logged.
    import pandas as pd

    table = pd.DataFrame(log["observations"], columns=OBSERVATION_COLUMNS)
    table.insert(0, "pump_id", [f"pump-{p:04d}" for p in log["pump"]])
    table.insert(1, "time", pd.Timestamp("2024-01-01") + pd.to_timedelta(log["hour"], unit="h"))
    table["action"] = log["actions"]
    table["reward"] = log["rewards"]
    table["broke_down"] = log["terminals"].astype(int)
    table["propensity"] = log["behaviour_probabilities"]
    table = table.sample(frac=1.0, random_state=0).reset_index(drop=True)  # merged logs: any order
    print(table.head(3).to_string())
    from_table = from_dataframe(
        table,
        episode_column="pump_id",
        step_column="time",
        observation_columns=OBSERVATION_COLUMNS,
        action_columns="action",
        reward_column="reward",
        terminal_column="broke_down",  # episodes without a breakdown end in a timeout
        behaviour_probability_column="propensity",
    )
    a, b = dataset.to_arrays(), from_table.to_arrays()
    identical = all(np.array_equal(a[key], b[key]) for key in a)
    print(f"from the shuffled table: {from_table.size()} episodes, identical to the array-built dataset: {identical}")

    # 3. Mistakes in the data are caught with the field and the row named.
    errors = {}
    rewards = log["rewards"].copy()
    rewards[17] = np.nan
    try:
        MDPDataset(log["observations"], log["actions"], rewards, log["terminals"], log["timeouts"])
    except ValueError as e:
        errors["nan_reward"] = str(e)
    try:
        MDPDataset(log["observations"], log["actions"][:-1], log["rewards"], log["terminals"], log["timeouts"])
    except ValueError as e:
        errors["short_actions"] = str(e)
    duplicated = pd.concat([table, table.iloc[[0]]], ignore_index=True)
    try:
        from_dataframe(duplicated, "pump_id", OBSERVATION_COLUMNS, "action", "reward", step_column="time")
    except ValueError as e:
        errors["duplicate_row"] = str(e)
    for name, message in errors.items():
        print(f"caught ({name}): {message}")

    # 4. Learn from the log. Temperatures are in the tens while the other
    # readings are in [0, 1]: standardising them helps the network (see
    # preprocessing.py). alpha weighs CQL's pull towards the logged actions:
    # the operator tried both actions in every situation, so a light pull
    # (0.1 instead of 1) lets the learner depart from the operator's habits
    # where the data shows it pays. The default target_update_interval
    # (8000 steps, d3rlpy's, sized for long Atari runs) would never refresh
    # the target network in a run this short; gamma 0.95 looks about 20
    # hours ahead, far enough to see a breakdown coming.
    algo = DiscreteCQLConfig(
        observation_scaler=StandardObservationScaler(),
        alpha=0.1,
        gamma=0.95,
        learning_rate=3e-4,
        target_update_interval=args.target_update_interval,
    ).create(device="cpu")
    algo.fit(dataset, n_steps=args.steps, n_steps_per_epoch=max(1, args.steps // 5),
             logger_adapter=NoopAdapterFactory(), show_progress=False)
    dataset_path = os.path.join(args.out, "pumps.h5")
    dataset.dump(dataset_path)  # the dataset (with the propensities) for later: MDPDataset.load(path)

    # 5. Compare with the operator on fresh pumps from the same plant.
    comparison = {}
    for name, policy in (("operator", operator), ("DiscreteCQL", greedy(algo))):
        value, run = simulate(policy, args.eval_machines, args.hours, seed=1, log=True)
        serviced = run["actions"] == 1
        comparison[name] = {
            "return": value,
            "breakdowns": float(run["terminals"].sum() / args.eval_machines),
            "services": float(serviced.sum() / args.eval_machines),
            "wear_at_service": float(run["observations"][serviced, 0].mean()) if serviced.any() else float("nan"),
        }
        print(f"{name:>12}: mean return per pump over {args.hours} hours {value:.2f}; per pump "
              f"{comparison[name]['services']:.1f} services (at a mean wear reading of "
              f"{comparison[name]['wear_at_service']:.2f}), {comparison[name]['breakdowns']:.0%} broke down")
    operator_value, learned_value = comparison["operator"]["return"], comparison["DiscreteCQL"]["return"]
    return {
        "dataset": dataset,
        "from_table": from_table,
        "table": table,
        "log": log,
        "identical": identical,
        "errors": errors,
        "algo": algo,
        "dataset_path": dataset_path,
        "comparison": comparison,
        "operator_return": operator_value,
        "learned_return": learned_value,
    }


if __name__ == "__main__":
    main()
