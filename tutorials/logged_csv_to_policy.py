"""From a CSV of logged decisions to a trained policy.

Run: python tutorials/logged_csv_to_policy.py [--sessions N] [--steps N] [--out DIR]

A notification service logged one row per decision: the session, the time,
the user's state (engagement, fatigue), the action it took (0 wait, 1 send a
notification, 2 send an offer), the reward (clicks, minus 1 when the user
unsubscribes), whether the user unsubscribed (the session's terminal state),
and the probability its randomised policy gave that action. Rows arrive in
any order, as logs merged from several servers do.

The script writes such a CSV, turns it into an MDPDataset with one call to
``offrl.datasets.from_dataframe`` (the logged probabilities are kept for
off-policy evaluation), trains DiscreteCQL on it, and compares the learned
policy with the logging policy on the simulator that produced the log.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np

import offrl
from offrl.algos import DiscreteCQLConfig
from offrl.datasets import from_dataframe
from offrl.logging import NoopAdapterFactory

ACTIONS = ("wait", "notify", "offer")
LOGGING_POLICY = np.array([0.4, 0.45, 0.15])  # the service's randomised policy
SESSION_LENGTH = 20


def step(state: np.ndarray, action: int, rng: np.random.Generator) -> tuple[np.ndarray, float, bool]:
    """One decision: ``(next state, reward, unsubscribed)``. Notifications
    and offers earn clicks while fatigue is low; fatigue past 0.95 makes the
    user unsubscribe; waiting lets fatigue recover."""
    engagement, fatigue = float(state[0]), float(state[1])
    reward = 0.0
    if action == 0:
        fatigue -= 0.3
        engagement -= 0.02
    elif action == 1:
        click = rng.random() < engagement * (1.0 - fatigue)
        reward = float(click)
        engagement += 0.05 * click
        fatigue += 0.2
    else:
        click = rng.random() < 0.6 * engagement * (1.0 - fatigue)
        reward = 2.0 * click
        fatigue += 0.35
    engagement, fatigue = float(np.clip(engagement, 0.0, 1.0)), float(np.clip(fatigue, 0.0, 1.0))
    unsubscribed = fatigue > 0.95
    if unsubscribed:
        reward -= 1.0
    return np.array([engagement, fatigue], dtype=np.float32), reward, unsubscribed


def initial_state(rng: np.random.Generator) -> np.ndarray:
    return np.array([rng.uniform(0.3, 1.0), rng.uniform(0.0, 0.3)], dtype=np.float32)


def write_log(path: str, sessions: int, seed: int = 0) -> int:
    """Run the logging policy for ``sessions`` sessions and write the CSV
    (rows shuffled). Returns the number of rows."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    rows = []
    start = pd.Timestamp("2024-03-01")
    for session in range(sessions):
        state = initial_state(rng)
        for t in range(SESSION_LENGTH):
            action = int(rng.choice(3, p=LOGGING_POLICY))
            next_state, reward, unsubscribed = step(state, action, rng)
            rows.append({
                "session_id": f"s{session:05d}",
                "time": start + pd.Timedelta(minutes=session * 60 + t),
                "engagement": state[0],
                "fatigue": state[1],
                "action": action,
                "reward": reward,
                "unsubscribed": int(unsubscribed),
                "propensity": LOGGING_POLICY[action],
            })
            state = next_state
            if unsubscribed:
                break
    table = pd.DataFrame(rows)
    table = table.iloc[rng.permutation(len(table))]
    table.to_csv(path, index=False)
    return len(table)


def average_return(choose, sessions: int, seed: int) -> float:
    """Mean undiscounted return of a policy ``choose(state, rng) -> action``
    over ``sessions`` simulated sessions."""
    rng = np.random.default_rng(seed)
    total = 0.0
    for _ in range(sessions):
        state = initial_state(rng)
        for _ in range(SESSION_LENGTH):
            state, reward, unsubscribed = step(state, choose(state, rng), rng)
            total += reward
            if unsubscribed:
                break
    return total / sessions


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=2000, help="logged sessions in the CSV")
    parser.add_argument("--steps", type=int, default=5000, help="gradient steps of DiscreteCQL")
    parser.add_argument("--eval-sessions", type=int, default=500)
    parser.add_argument("--out", default=None, help="directory for the CSV (a temporary one by default)")
    args = parser.parse_args(argv)
    import pandas as pd

    offrl.seed(0)
    out_dir = args.out or tempfile.mkdtemp(prefix="offrl-tutorial-")
    path = os.path.join(out_dir, "decisions.csv")
    n_rows = write_log(path, args.sessions)
    print(f"logged {n_rows} decisions to {path}")

    # 1. the log as a dataset, in one call
    table = pd.read_csv(path, parse_dates=["time"])
    dataset = from_dataframe(
        table,
        episode_column="session_id",
        observation_columns=["engagement", "fatigue"],
        action_columns="action",
        reward_column="reward",
        terminal_column="unsubscribed",
        step_column="time",
        behaviour_probability_column="propensity",
        action_size=len(ACTIONS),
    )
    print(dataset)
    print(f"logged propensities kept for off-policy evaluation: {dataset.behaviour_probabilities[:5]}")

    # 2. a policy from the log
    cql = DiscreteCQLConfig(batch_size=256, learning_rate=3e-4, target_update_interval=500, alpha=0.5).create()
    cql.fit(dataset, n_steps=args.steps, n_steps_per_epoch=max(args.steps // 5, 1),
            logger_adapter=NoopAdapterFactory(), show_progress=False)

    # 3. how it does on the simulator, next to the policy that wrote the log
    def learned(state, rng):
        return int(cql.predict(state[None])[0])

    def logging_policy(state, rng):
        return int(rng.choice(3, p=LOGGING_POLICY))

    learned_return = average_return(learned, args.eval_sessions, seed=1)
    logging_return = average_return(logging_policy, args.eval_sessions, seed=1)
    print(f"average return per session: logging policy {logging_return:.3f}, learned policy {learned_return:.3f}")
    states = np.array([[0.8, 0.0], [0.8, 0.7]], dtype=np.float32)
    chosen = [ACTIONS[a] for a in cql.predict(states)]
    print(f"learned choice for a fresh user: {chosen[0]}; for a tired user: {chosen[1]}")
    return {
        "path": path, "dataset": dataset, "algo": cql,
        "learned_return": learned_return, "logging_return": logging_return,
    }


if __name__ == "__main__":
    main()
