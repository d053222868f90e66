"""Model selection: which trained policy to deploy, chosen without the environment.

Run: python tutorials/model_selection.py [--steps N] [--fqe-steps N] [--seeds N] [--out DIR]
(needs the search extra: pip install 'offrl[search]'; several minutes at
the default sizes on one quiet CPU core)

Offline RL has hyperparameters (here DiscreteCQL's conservatism ``alpha``),
random seeds and a training length, and the usual way to pick them, trying
each policy on the real system, is exactly what offline RL cannot do. An
offline search trains every candidate on most of the logged episodes and
judges each checkpoint on the episodes it held out, by off-policy
evaluation (OPE): here Fitted Q Evaluation (FQE), the estimator that ranks
policies best on logged data of a learning agent (Paine et al., 2020), with
weighted per-decision importance sampling (WPDIS) beside it.

The data is the built-in ``cartpole-replay``: everything a DQN agent saw
while learning CartPole from scratch, so the logged policy changed all the
time and its action probabilities are not recorded (WPDIS works from a
behaviour model fitted to the held-out episodes). Three values of
``alpha`` x ``--seeds`` seeds x three checkpoints are the candidates.

Because CartPole is a simulator, this tutorial can do what you could not
in practice: measure each candidate's true return in the environment
(``fit(dataset, env=env)``). The search records it in ``results_`` and
never uses it to choose, so you can see how good the choice was:

* ``true_value`` is the discounted return (gamma 0.99), the quantity the
  estimates estimate; ``true_return`` the undiscounted episode return, the
  one you care about;
* the regret is the best candidate's true return minus the chosen one's;
  the baselines are the last checkpoint of the default config (what you
  get without searching) and a candidate picked at random (the mean);
* Spearman's rank correlation of the estimates with the true values says
  whether the estimator orders the candidates right, which is all a
  selection needs (FQE's values can be biased and still rank well).

How to read the output: a candidate flagged unreliable (FQE that has not
settled within its updates, importance weights carried by a few episodes)
ranks below every reliable one; when none is reliable the search warns
and takes the best unreliable estimate, which is what happens at the
tutorial's sizes (FQE needs ~20,000 updates to settle here; raise
``--fqe-steps`` to see it). The search chooses by the lower confidence
bound of FQE's estimate (its default with an interval-giving scorer), a
pessimistic choice that passes over candidates whose high estimate is mostly
noise; its FQE has three independent members, whose disagreement widens the
interval where FQE knows a candidate less well. The report (``report.html``) shows the
estimates with their intervals against the true values.
"""

from __future__ import annotations

import argparse
import os
import warnings

import numpy as np
import torch
from scipy.stats import spearmanr

import offrl
from offrl.algos import DiscreteCQLConfig
from offrl.model_selection import OfflineSearch
from offrl.models import VectorEncoderFactory

#: the candidates: DiscreteCQL's conservatism, 1.0 being d3rlpy's default
ALPHAS = [0.3, 1.0, 4.0]
DEFAULT_ALPHA = 1.0


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6000, help="gradient steps of each candidate")
    parser.add_argument("--checkpoints", type=int, default=3, help="checkpoints (candidates) along each run")
    parser.add_argument("--seeds", type=int, default=2, help="training seeds per config")
    parser.add_argument("--fqe-steps", type=int, default=3000, help="FQE updates per checkpoint (a cap)")
    parser.add_argument("--eval-episodes", type=int, default=20, help="environment episodes per true return")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--out", default=os.path.join("tutorial_output", "model_selection"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)

    # 1. Logged data, and (only to check the choice afterwards) its environment.
    dataset, env = offrl.datasets.get_cartpole("replay")
    print(dataset)

    # 2. The search: configs x seeds x every checkpoint, each judged on held-out episodes.
    config = DiscreteCQLConfig(encoder_factory=VectorEncoderFactory([64, 64]))
    search = OfflineSearch(
        config, {"alpha": ALPHAS}, scorer=["fqe", "wpdis"], seeds=args.seeds,
        n_steps=args.steps, n_steps_per_epoch=max(1, args.steps // args.checkpoints),
        test_size=0.2, fqe_steps=args.fqe_steps, fqe_steps_per_epoch=max(1, args.fqe_steps // 10),
        n_eval_episodes=args.eval_episodes, output_dir=os.path.join(args.out, "search"),
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        search.fit(dataset, env=env)
    for w in caught:
        print(f"warning: {w.message}")
    print(search.leaderboard(10))

    # 3. Estimates beside the truth, every candidate.
    table = search.results_.sort_values(["param_alpha", "seed", "epoch"])
    print(f"\n{'alpha':>5} {'seed':>4} {'step':>6} {'FQE':>8} {'WPDIS':>8} {'true value':>10} {'true return':>11} "
          f"{'reliable':>8}")
    for _, row in table.iterrows():
        mark = "  <- chosen" if row["chosen"] else ""
        print(f"{row['param_alpha']:>5} {row['seed']:>4} {row['step']:>6} {row['fqe']:>8.2f} {row['wpdis']:>8.2f} "
              f"{row['true_value']:>10.2f} {row['true_return']:>11.1f} {str(row['reliable']):>8}{mark}")

    # 4. How well did the choice go?
    truth = table["true_return"].to_numpy()
    best = float(truth.max())
    chosen = float(table.loc[table["chosen"], "true_return"].iloc[0])
    last = table["epoch"].max()
    default = float(table.loc[(table["param_alpha"] == DEFAULT_ALPHA) & (table["epoch"] == last), "true_return"].mean())
    random_pick = float(truth.mean())
    correlation = {}
    for label in ("fqe", "wpdis"):
        values = table[label].to_numpy()
        correlation[label] = float(spearmanr(values, table["true_value"].to_numpy())[0]) \
            if np.ptp(values) > 0 and np.ptp(table["true_value"].to_numpy()) > 0 else float("nan")
    print(f"\ntrue return: chosen {chosen:.1f}, best candidate {best:.1f} (regret {best - chosen:.1f}), "
          f"default config's last checkpoint {default:.1f}, a random candidate {random_pick:.1f} on average")
    print(f"rank correlation with the true values: FQE {correlation['fqe']:.2f}, WPDIS {correlation['wpdis']:.2f}")
    report = search.write_report(os.path.join(args.out, "report.html"))
    print(f"report: {report}")
    return {"search": search, "dataset": dataset, "chosen_return": chosen, "best_return": best,
            "default_return": default, "random_return": random_pick, "correlation": correlation, "report": report}


if __name__ == "__main__":
    main()
