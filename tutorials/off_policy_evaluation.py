"""Off-policy evaluation: judge and choose policies from logged data alone.

Run: python tutorials/off_policy_evaluation.py [--learners N] [--steps N] [--out DIR]

Before a learned policy goes live you want to know how good it is, and the
only evidence is the log of the policy that ran before. Off-policy
evaluation (OPE) estimates a new policy's value (its expected discounted
return from the logged starting states) from that log. This script trains
four candidate policies on the log of a study app, estimates each one's
value in two different ways, and picks one; the simulator that produced
the log gives the true values, so you can see how well each estimate did.

The app chooses, once a day for ten days, an exercise for each learner:
review (0), practice (1) or a challenge (2). Challenges pay off for skilled
learners but discourage the others, and a learner whose motivation drops
too low quits (reward -1). Quitting and the end of the course are both
*terminal*: no reward follows, and FQE must not bootstrap past them. The
logged policy practises, reviews when motivation is low, and explores: 30 %
of the time it picks uniformly at random, so every action has probability
at least 0.1, and the log records that probability (the *propensity*) for
each decision.

Two families of estimators:

* **Fitted Q Evaluation** (``DiscreteFQE``) learns the candidate's Q-function
  from the log by regression and reads off ``Q(s_0, pi(s_0))``. Its
  interval (``estimate_policy_value``) resamples the *starting states* only:
  it says nothing about the error of the learned Q-function itself, so it
  is too narrow whenever FQE is biased (few data where the candidate goes,
  function approximation error).
* **Importance sampling** (``offrl.ope``) reweights the logged returns by
  ``prod_t pi(a_t|s_t) / mu(a_t|s_t)``. It needs no model, and its
  bootstrap interval over episodes is honest about the sampling noise, but
  when the candidate often does what the logger rarely did the weights
  explode and a handful of episodes carry the estimate. The *effective
  sample size* (ESS) counts how many episodes effectively contribute: below
  ``min_effective_sample_size`` (10 by default) the result is marked
  unreliable and says why. WIS and WPDIS (weighted) trade a little bias for
  much less variance; DR (doubly robust) uses FQE's Q-function as a control
  variate. Every candidate is evaluated by its greedy action
  (``greedy=True``), smoothed to epsilon-greedy with ``epsilon=0.05`` for
  IS, which needs a policy that gives every logged action some probability
  (the true values are those of the smoothed policies).

How to read the output: trust a point estimate only together with its
interval; two candidates whose intervals overlap widely are not ranked by
the data; an IS result with a small ESS is mostly one or two episodes;
estimators that disagree strongly are a warning in themselves. The first
check below is the simplest one: evaluating the logging policy itself, all
weights are 1 and IS returns exactly the average discounted return of the
log with an ESS equal to the number of episodes.

What the full run shows: the two candidates that stay close to the logged
policy (DiscreteBC, DiscreteCQL with alpha=1) get reliable IS estimates
whose intervals hold their true values. The two that learned to challenge
skilled learners, and are truly better, depart so far from the log that IS
cannot tell (an effective sample size of one or two episodes out of 2000);
FQE ranks them right, but its intervals miss the truth, while DR, which
corrects FQE with the importance weights, holds it within wider intervals.
A log certifies best the policies that change least; one that departs far
deserves a careful online test before it is trusted.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import torch

import offrl
from offrl.algos import DiscreteBCConfig, DiscreteCQLConfig, DQNConfig
from offrl.dataset import MDPDataset
from offrl.logging import NoopAdapterFactory
from offrl.models import VectorEncoderFactory
from offrl.ope import DiscreteFQE, DiscreteFQEConfig, estimate_policy_value, select_policies

DAYS = 10
GAMMA = 0.99
EXPLORATION = 0.3  # the logging policy's uniform exploration
SMOOTHING = 0.05  # epsilon with which deterministic candidates are evaluated


# ------------------------------------------------------------ the study app
def observe(skill: np.ndarray, motivation: np.ndarray, day: int) -> np.ndarray:
    """``(n, 3)`` observations: skill, motivation (both in [0, 1]), day / 10."""
    return np.stack([skill, motivation, np.full_like(skill, day / DAYS)], axis=1).astype(np.float32)


def step(skill, motivation, action, rng):
    """One day for ``n`` learners: ``(skill, motivation, reward, quits)``."""
    success = rng.random(skill.shape) < skill
    review, practice, challenge = action == 0, action == 1, action == 2
    reward = 0.1 * review + 0.3 * (1.0 - skill) * practice + 1.0 * (challenge & success)
    skill = np.clip(skill + 0.02 * review + 0.08 * practice + 0.1 * (challenge & success), 0.0, 1.0)
    motivation = np.clip(motivation + 0.2 * review - 0.05 * practice + np.where(success, 0.05, -0.3) * challenge, 0.0, 1.0)
    quits = motivation < 0.2
    return skill, motivation, (reward - quits).astype(np.float32), quits


def logging_policy(observations: np.ndarray) -> np.ndarray:
    """``(n, 3)`` probabilities: practise, review when motivation < 0.4, explore 30 %."""
    probabilities = np.full((len(observations), 3), EXPLORATION / 3)
    rule = np.where(observations[:, 1] < 0.4, 0, 1)
    probabilities[np.arange(len(observations)), rule] += 1.0 - EXPLORATION
    return probabilities


def epsilon_greedy(algo, epsilon: float = SMOOTHING):
    """An algorithm's greedy actions, smoothed: ``(n, 3)`` probabilities."""
    def probabilities(observations: np.ndarray) -> np.ndarray:
        p = np.full((len(observations), 3), epsilon / 3)
        p[np.arange(len(observations)), algo.predict(observations)] += 1.0 - epsilon
        return p

    return probabilities


def simulate(policy, n_learners: int, seed: int, log: bool = False):
    """Run ``policy(observations) -> (n, 3) probabilities`` for ``n_learners``
    learners. Returns the mean discounted return, and the log (arrays in
    episode order, with the probability of each logged action) if asked."""
    rng = np.random.default_rng(seed)
    skill, motivation = rng.uniform(0.1, 0.6, n_learners), rng.uniform(0.4, 0.9, n_learners)
    alive = np.ones(n_learners, dtype=bool)
    value = np.zeros(n_learners)
    days = []
    for day in range(DAYS):
        observations = observe(skill, motivation, day)
        probabilities = policy(observations)
        actions = (rng.random(n_learners)[:, None] > np.cumsum(probabilities, axis=1)).sum(axis=1)
        actions = np.minimum(actions, 2)
        skill, motivation, rewards, quits = step(skill, motivation, actions, rng)
        value += np.where(alive, GAMMA**day * rewards, 0.0)
        if log:
            days.append((np.flatnonzero(alive), day, observations[alive], actions[alive], rewards[alive],
                         probabilities[alive, actions[alive]]))
        alive &= ~quits
        if not alive.any():
            break
    if not log:
        return float(value.mean())
    learner = np.concatenate([d[0] for d in days])
    order = np.lexsort((np.concatenate([np.full(len(d[0]), d[1]) for d in days]), learner))
    field = lambda k: np.concatenate([d[k] for d in days])[order]  # noqa: E731
    # the course ends after the last day: like quitting, nothing follows
    last = np.r_[learner[order][1:] != learner[order][:-1], True]
    dataset = MDPDataset(
        observations=field(2), actions=field(3), rewards=field(4), terminals=last,
        action_size=3, behaviour_probabilities=field(5),
    )
    return float(value.mean()), dataset


# ------------------------------------------------------------ the walk-through
def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--learners", type=int, default=2000, help="learners (episodes) in the log")
    parser.add_argument("--steps", type=int, default=3000, help="gradient steps of each candidate")
    parser.add_argument("--fqe-steps", type=int, default=4000, help="gradient steps of each FQE")
    parser.add_argument("--n-bootstrap", type=int, default=1000)
    parser.add_argument("--true-learners", type=int, default=20000, help="simulated learners for the true values")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (networks this small run as fast on one; the offrl command's default)")
    parser.add_argument("--out", default=os.path.join("tutorial_output", "off_policy_evaluation"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    offrl.seed(0)
    quiet = dict(logger_adapter=NoopAdapterFactory(), show_progress=False)

    logged_value, dataset = simulate(logging_policy, args.learners, seed=0, log=True)
    print(dataset)

    # Sanity check: the logging policy evaluated on its own log.
    itself = estimate_policy_value(logging_policy, dataset, "wis", gamma=GAMMA, n_bootstrap=args.n_bootstrap)
    print(f"logging policy on its own log: {itself}")

    # Four candidates trained on the log (small networks: 3 numbers in; the
    # target network refreshed every 200 steps, as the runs are short).
    encoder = VectorEncoderFactory(hidden_units=[64, 64])
    q_learning = dict(encoder_factory=encoder, gamma=GAMMA, learning_rate=3e-4, target_update_interval=200)
    candidates = {
        "DiscreteCQL alpha=0.1": DiscreteCQLConfig(alpha=0.1, **q_learning),
        "DiscreteCQL alpha=1": DiscreteCQLConfig(alpha=1.0, **q_learning),
        "DQN": DQNConfig(**q_learning),
        "DiscreteBC": DiscreteBCConfig(encoder_factory=encoder, gamma=GAMMA),
    }
    policies = {}
    for name, config in candidates.items():
        policies[name] = config.create(device="cpu")
        policies[name].fit(dataset, n_steps=args.steps, n_steps_per_epoch=args.steps, **quiet)

    # The truth, which OPE does not get to see: each candidate (epsilon-greedy,
    # as IS evaluates it) run for many fresh learners.
    true_values = {name: simulate(epsilon_greedy(algo), args.true_learners, seed=1) for name, algo in policies.items()}

    # FQE for each candidate (FQE evaluates the greedy policy).
    fqes = {}
    for name, algo in policies.items():
        fqes[name] = DiscreteFQE(algo=algo, config=DiscreteFQEConfig(encoder_factory=encoder, gamma=GAMMA,
                                                                       learning_rate=3e-4))
        fqes[name].fit(dataset, n_steps=args.fqe_steps, n_steps_per_epoch=args.fqe_steps, **quiet)

    def fqe(policy, data):
        """FQE's estimate of ``policy`` as an estimator for select_policies."""
        (fitted,) = [f for f in fqes.values() if f.algo is policy]
        return fitted.estimate_policy_value(data, n_bootstrap=args.n_bootstrap, seed=0)

    # Estimate every candidate with every estimator, rank them, and, since
    # this is a simulation, compare the rankings with the true values.
    selection = select_policies(
        policies, dataset,
        estimators={"FQE": fqe, "WIS": "wis", "WPDIS": "wpdis", "DR": "dr"},
        q_models=fqes, true_values=true_values, gamma=GAMMA, greedy=True, epsilon=SMOOTHING,
        n_bootstrap=args.n_bootstrap, seed=0,
    )
    print(f"\ntrue values: logging policy {logged_value:.2f}, "
          + ", ".join(f"{name} {value:.2f}" for name, value in true_values.items()))
    print(selection.table())

    # Reading the results as you would without the true values: an IS
    # estimate marked reliable is an estimate with an honest error bar;
    # otherwise all the log offers is FQE's extrapolation.
    print("\nWhat the log can tell about each candidate:")
    for name in policies:
        wis, fqe_estimate = selection.results["WIS"][name], selection.results["FQE"][name]
        if wis.reliable:
            verdict = (f"WIS {wis.value:.2f} [{wis.lower:.2f}, {wis.upper:.2f}] from an effective "
                       f"{wis.effective_sample_size:.0f} of {wis.n_episodes} episodes")
        else:
            verdict = f"IS cannot tell ({wis.warnings[0]})"
        print(f"  {name}: {verdict}; FQE {fqe_estimate.value:.2f}")

    # Checked against the truth: how often each estimator's interval holds it.
    coverage = {
        estimator: sum(results[name].lower <= true_values[name] <= results[name].upper for name in policies)
        for estimator, results in selection.results.items()
    }
    print("intervals that contain the true value: "
          + ", ".join(f"{estimator} {count} of {len(policies)}" for estimator, count in coverage.items()))
    return {
        "dataset": dataset,
        "logged_value": logged_value,
        "itself": itself,
        "policies": policies,
        "fqes": fqes,
        "true_values": true_values,
        "selection": selection,
        "coverage": coverage,
    }


if __name__ == "__main__":
    main()
