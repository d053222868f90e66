"""``offrl evaluate``: metric evaluators, OPE estimators with intervals,
rollouts in an environment, and D4RL-normalised scores. Imports no numeric
package at module level."""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any, Dict, Optional, Sequence

from .common import (
    CLIError,
    build_evaluators,
    check_env_fits,
    check_output_file,
    load_dataset,
    load_model,
    make_env,
    noop,
    write_json,
)



def cmd_evaluate(args: argparse.Namespace) -> int:
    check_output_file(args.json, "--json")
    check_ope_options(args)
    normalize = normalize_name(args)
    algo = load_model(args.model)
    if args.dataset is None and args.env is None:
        raise CLIError("give --dataset DATASET and/or --env ENV_ID to evaluate on")
    env = make_env(args.env) if args.env else None
    if env is not None:
        check_env_fits(algo, env, args.model)
    report: Dict[str, float] = {}
    if env is not None and args.dataset is None:
        from ..metrics.utility import rollout_returns

        returns = rollout_returns(algo, env, args.n_trials, args.epsilon, seed=args.seed)
        report["environment_return_mean"] = float(sum(returns) / len(returns))
        report["environment_return_min"] = float(min(returns))
        report["environment_return_max"] = float(max(returns))
    if args.dataset is not None:
        dataset, dataset_env = load_dataset(args.dataset, max_expansion=args.max_expansion)
        if env is None and dataset_env is not None:
            env = dataset_env
            check_env_fits(algo, env, args.model)
        names = args.evaluators.split(",") if args.evaluators else ["auto"]
        evaluators = build_evaluators(names, algo, dataset.episodes, env, args.return_threshold)
        for name, evaluator in evaluators.items():
            report[name] = float(evaluator(algo, dataset))
        if args.ope:
            report.update(run_ope(args.ope.split(","), algo, dataset, args))
    if normalize is not None:
        from .._scores import get_normalized_score

        for key in [k for k in report if k.startswith("environment")]:
            report[f"{key}_normalized"] = float(get_normalized_score(normalize, report[key]))
    width = max(len(k) for k in report)
    for name, value in report.items():
        print(f"{name:<{width}}  {value:.6g}")
    if args.json:
        write_json(args.json, report)
        print(f"wrote {args.json}")
    return 0


def normalize_name(args: argparse.Namespace) -> Optional[str]:
    """The locomotion task whose D4RL-normalised scores ``evaluate`` adds:
    ``--normalize NAME``, else the ``--dataset`` when it is one of
    :func:`offrl.datasets.get_mujoco`'s names; None otherwise (checked
    before any work: an unknown name lists the known ones)."""
    from .._scores import environment_of, mujoco_dataset_names

    name = args.normalize
    if name is None and isinstance(args.dataset, str) and args.dataset in mujoco_dataset_names():
        name = args.dataset
    if name is None:
        return None
    try:
        environment_of(name)
    except ValueError as e:
        raise CLIError(f"--normalize {name}: {e}") from None
    return name


def train_fqe(algo: Any, dataset: Any, n_steps: int) -> Any:
    from .. import ope
    from ..constants import ActionSpace

    if algo.get_action_type() == ActionSpace.DISCRETE:
        fqe = ope.DiscreteFQE(algo=algo, config=ope.DiscreteFQEConfig())
    else:
        fqe = ope.FQE(algo=algo, config=ope.FQEConfig())
    fqe.fit(dataset, n_steps=n_steps, n_steps_per_epoch=n_steps, show_progress=False, logger_adapter=noop())
    return fqe


#: the interval methods of ``--ci`` (those of :data:`offrl.ope.bounds.CI_METHODS`; listed here so that
#: building the parser imports no torch)
CI_METHODS = ("bootstrap", "hoeffding", "bernstein", "ttest")
#: the estimators of ``--ope``: FQE, then those of :data:`offrl.ope.importance.ESTIMATORS`
OPE_ESTIMATORS = ("fqe", "is", "wis", "pdis", "wpdis", "dr", "wdr", "mis", "wmis", "mdr")


def check_ope_options(args: argparse.Namespace) -> None:
    """Fail before any work on an interval that needs a range without one."""
    if args.ci in ("hoeffding", "bernstein") and args.value_range is None:
        raise CLIError(f"--ci {args.ci} needs --value-range LOW HIGH: a bound, known in advance, on each episode's "
                       "term (use --ci bootstrap or ttest for unbounded rewards)")
    if args.value_range is not None:
        low, high = args.value_range
        if not (math.isfinite(low) and math.isfinite(high) and low < high):
            raise CLIError(f"--value-range {low:g} {high:g}: expected finite numbers with LOW < HIGH")


def run_ope(names: Sequence[str], algo: Any, dataset: Any, args: argparse.Namespace) -> Dict[str, float]:
    """FQE's estimate (``fqe``, bootstrap interval only), the
    importance-sampling family (``is``, ``wis``, ``pdis``, ``wpdis``,
    ``dr``, ``wdr``) and the state-action marginal estimators (``mis``,
    ``wmis``, ``mdr``, each training a DualDICE ratio of ``--ratio-steps``
    updates); DR and MDR use FQE as their model. The interval is
    ``--ci`` (with ``--value-range``) for all but FQE."""
    from ..ope import ESTIMATORS, estimate_policy_value
    from ..ope.marginal import MARGINAL_ESTIMATORS, DensityRatioConfig

    valid = ["fqe", *ESTIMATORS]
    unknown = [n for n in names if n not in valid]
    if unknown:
        raise CLIError(f"unknown OPE estimator {unknown[0]!r}; valid: {', '.join(valid)}")
    check_ope_options(args)
    ratio = DensityRatioConfig(n_steps=args.ratio_steps, log_interval=min(500, args.ratio_steps))
    fqe = None
    if "fqe" in names or any(ESTIMATORS[n][1] for n in names if n in ESTIMATORS):
        fqe = train_fqe(algo, dataset, args.fqe_steps)
    out: Dict[str, float] = {}
    for name in names:
        if name == "fqe":
            estimate = fqe.estimate_policy_value(dataset.episodes)
            out.update({"fqe": estimate.value, "fqe_lower": estimate.lower, "fqe_upper": estimate.upper})
            if args.ci != "bootstrap":
                print(f"note: fqe's interval is a bootstrap one (FQE offers no --ci {args.ci})", file=sys.stderr)
            continue
        result = estimate_policy_value(algo, dataset, name, q_model=fqe if ESTIMATORS[name][1] else None,
                                       seed=args.seed if args.seed is not None else 0, ci=args.ci,
                                       value_range=None if args.value_range is None else tuple(args.value_range),
                                       ratio_model=ratio if name in MARGINAL_ESTIMATORS else None)
        out.update({name: result.value, f"{name}_lower": result.lower, f"{name}_upper": result.upper,
                    f"{name}_effective_sample_size": result.effective_sample_size})
        if not result.reliable:
            print(f"warning: {name} is unreliable: {'; '.join(result.warnings)}", file=sys.stderr)
    return out
