"""Online finetuning: start from an offline policy, keep learning in the environment.

Run: python tutorials/online_finetuning.py [--offline-steps N] [--online-steps N] [--out DIR]

Offline training gives a policy before anyone lets it act; once it is
allowed to act (in a simulator, or carefully in the real system), it can
keep improving from its own experience. This script takes the CartPole
"random" data (episodes of a uniformly random policy, about 22 steps long),
trains DiscreteCQL on it offline, and then finetunes online in three ways,
each for the same number of environment steps:

1. **Continue the same algorithm** from its saved file
   (``offrl.load_learnable(path)`` then ``fit_online``): DiscreteCQL keeps
   its conservative loss while new data comes in.
2. **Switch algorithm**: a DQN is built for the environment and takes the
   offline Q-function with ``dqn.copy_q_function_from(cql)`` (the copy is
   exact: it starts acting like the offline policy). DQN has no
   conservative term, and the Q-values CQL learned are pessimistic by
   design, so the switch can lose ground at first while the values
   re-calibrate (an effect studied by Nakamoto et al., 2023, "Cal-QL").
3. **No pretraining**: DQN from scratch, as the yardstick.

``fit_online(env, buffer, explorer, ...)`` acts with the explorer (here
epsilon-greedy, epsilon decaying from 0.1 to 0.01), writes every step into
the buffer (a FIFO buffer of the most recent 100,000 steps), updates the
networks after every step, and, with ``eval_env``, reports the mean return
of greedy episodes after every epoch. The hyperparameters are those of
d3rlpy's CartPole examples (batch 32, learning rate 2.5e-4, target network
copied every 100 updates). To keep the offline data in play online, pass it
as the buffer (``fit_online(env, buffer=dataset, ...)``): new steps are
appended to it.

Online RL on CartPole is noisy: returns jump between epochs, and another
seed gives another curve. Read the curves, not single epochs.
"""

from __future__ import annotations

import argparse
import os

import gymnasium
import numpy as np
import torch

import offrl
from offrl.algos import DiscreteCQLConfig, DQNConfig, LinearDecayEpsilonGreedy
from offrl.dataset import MDPDataset, create_fifo_replay_buffer
from offrl.datasets.builtin import build_dataset
from offrl.logging import NoopAdapterFactory
from offrl.metrics import rollout_returns

HYPERPARAMETERS = dict(batch_size=32, learning_rate=2.5e-4, target_update_interval=100)


def load_cartpole_random(dataset_steps: int | None, out_dir: str):
    """``(dataset, env)``: the built-in "cartpole-random" dataset, or a
    smaller one built by the same recipe when ``dataset_steps`` is given."""
    if dataset_steps is None:
        return offrl.datasets.get_cartpole("random")
    path = os.path.join(out_dir, f"cartpole-random-{dataset_steps}.h5")
    build_dataset("cartpole-random", path, n_steps=dataset_steps)
    return MDPDataset.load(path), gymnasium.make("CartPole-v1")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--offline-steps", type=int, default=5000, help="gradient steps of offline DiscreteCQL")
    parser.add_argument("--online-steps", type=int, default=12000, help="environment steps of each online run")
    parser.add_argument("--steps-per-epoch", type=int, default=2000)
    parser.add_argument("--dataset-steps", type=int, default=None,
                        help="build a smaller dataset of this many steps (default: the built-in one)")
    parser.add_argument("--eval-episodes", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (networks this small run as fast on one; the offrl command's default)")
    parser.add_argument("--out", default=os.path.join("tutorial_output", "online_finetuning"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    quiet = dict(logger_adapter=NoopAdapterFactory(), show_progress=False)
    eval_env = gymnasium.make("CartPole-v1")

    # Offline: DiscreteCQL on the random policy's episodes.
    offrl.seed(0)
    dataset, env = load_cartpole_random(args.dataset_steps, args.out)
    cql = DiscreteCQLConfig(**HYPERPARAMETERS).create(device="cpu")
    cql.fit(dataset, n_steps=args.offline_steps, n_steps_per_epoch=args.offline_steps, **quiet)
    offline_return = float(np.mean(rollout_returns(cql, eval_env, n_trials=args.eval_episodes, seed=0)))
    logged_return = float(np.mean(dataset.compute_returns()))
    print(f"logged episodes: mean return {logged_return:.1f}; offline DiscreteCQL: {offline_return:.1f}")
    model_path = os.path.join(args.out, "offline_cql.d3")
    cql.save(model_path)

    def finetune(name, algo):
        """Run ``algo`` online for ``--online-steps`` steps; the evaluation after every epoch."""
        offrl.seed(1)  # the same environment and exploration randomness for every run
        buffer = create_fifo_replay_buffer(limit=100_000, env=env)
        explorer = LinearDecayEpsilonGreedy(start_epsilon=0.1, end_epsilon=0.01, duration=args.online_steps // 2)
        results = algo.fit_online(env, buffer, explorer, n_steps=args.online_steps,
                                  n_steps_per_epoch=args.steps_per_epoch, eval_env=eval_env,
                                  eval_n_trials=args.eval_episodes, **quiet)
        curve = [metrics["evaluation"] for _, metrics in results]
        print(f"{name:>28}: " + " ".join(f"{value:5.0f}" for value in curve))
        return curve

    print(f"evaluation return after each epoch of {args.steps_per_epoch} environment steps:")
    curves = {}

    # 1. Continue DiscreteCQL from its saved file.
    continued = offrl.load_learnable(model_path)
    curves["DiscreteCQL, continued"] = finetune("DiscreteCQL, continued", continued)

    # 2. Switch to DQN, starting from DiscreteCQL's Q-function.
    dqn = DQNConfig(**HYPERPARAMETERS).create(device="cpu")
    dqn.build_with_env(env)
    dqn.copy_q_function_from(cql)
    probe = np.concatenate([episode.observations for episode in dataset.episodes[:20]])
    copied_exactly = bool(np.array_equal(dqn.predict_value(probe, cql.predict(probe)),
                                         cql.predict_value(probe, cql.predict(probe))))
    curves["DQN from DiscreteCQL"] = finetune("DQN from DiscreteCQL", dqn)

    # 3. DQN from scratch.
    scratch = DQNConfig(**HYPERPARAMETERS).create(device="cpu")
    curves["DQN from scratch"] = finetune("DQN from scratch", scratch)

    for name, curve in curves.items():
        print(f"{name}: best epoch {max(curve):.0f}, last epoch {curve[-1]:.0f} (offline start {offline_return:.0f})")
    return {
        "dataset": dataset,
        "cql": cql,
        "continued": continued,
        "dqn": dqn,
        "scratch": scratch,
        "model_path": model_path,
        "logged_return": logged_return,
        "offline_return": offline_return,
        "copied_exactly": copied_exactly,
        "probe": probe,
        "curves": curves,
    }


if __name__ == "__main__":
    main()
