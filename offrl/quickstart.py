"""``offrl quickstart``: the whole job on a built-in dataset.

Build (or load) the dataset, train an offline algorithm suited to it with a
progress bar, score it with the metric evaluators, FQE and the environment,
export the policy to ONNX and check the file against the model, draw the
learning curve and print a short report with the figures and the paths.
"""

from __future__ import annotations

import os
import time
from typing import Any, Dict, Optional

import numpy as np

from ._atomic import atomic_write, atomic_write_json

__all__ = ["run_quickstart", "default_config"]


def default_config(algorithm: Optional[str], discrete: bool) -> Any:
    """The algorithm to train: ``algorithm`` by name with its defaults, or,
    when ``None``, a configuration known to learn the built-in replay
    datasets in a few thousand steps on a CPU: DiscreteCQL (a 64-64 network,
    target copied every 100 steps) for discrete actions, TD3+BC at its
    defaults for continuous ones (IQL needs far more steps on
    pendulum-replay), both on standardised observations."""
    from .algos import DiscreteCQLConfig, TD3PlusBCConfig
    from .models.encoders import VectorEncoderFactory
    from .preprocessing import StandardObservationScaler

    if algorithm is not None:
        from .algos.registry import resolve_algorithm

        return resolve_algorithm(algorithm)()
    encoder = VectorEncoderFactory(hidden_units=[64, 64])
    if discrete:
        return DiscreteCQLConfig(batch_size=64, learning_rate=1e-3, target_update_interval=100, alpha=1.0,
                                 encoder_factory=encoder, observation_scaler=StandardObservationScaler())
    return TD3PlusBCConfig(observation_scaler=StandardObservationScaler())


def _say(text: str) -> None:
    print(text, flush=True)


def run_quickstart(
    dataset_name: str = "cartpole-replay",
    algorithm: Optional[str] = None,
    n_steps: int = 5000,
    output_dir: str = "offrl_quickstart",
    fqe_steps: int = 4000,
    n_trials: int = 10,
    show_progress: bool = True,
    seed: int = 0,
    n_epochs: int = 5,
) -> Dict[str, Any]:
    """Run the quickstart; returns the report (also written to
    ``output_dir/report.json``)."""
    from . import metrics, ope
    from ._random import seed as seed_everything
    from .constants import ActionSpace
    from .datasets import get_dataset
    from .datasets.builtin import cache_directory
    from .export import load_onnx_policy
    from .logging import FileAdapterFactory, NoopAdapterFactory
    from .metrics.utility import rollout_returns

    start = time.perf_counter()
    os.makedirs(output_dir, exist_ok=True)
    seed_everything(seed)

    cached = os.path.isfile(os.path.join(cache_directory(), f"{dataset_name}.h5"))
    _say(f"[1/6] dataset {dataset_name}: {'loading from the cache' if cached else 'building it by its recipe (first use)'}")
    t0 = time.perf_counter()
    dataset, env = get_dataset(dataset_name)
    summary = dataset.summary()
    _say(f"      {summary['transitions']:,} transitions in {summary['episodes']:,} episodes, "
         f"mean return {summary['episode_return']['mean']:.1f} ({time.perf_counter() - t0:.1f} s)")
    discrete = dataset.dataset_info.action_space == ActionSpace.DISCRETE

    config = default_config(algorithm, discrete)
    algo = config.create(device="cpu")
    name = type(algo).__name__
    n_test = max(1, len(dataset.episodes) // 10)
    test_episodes = [dataset.episodes[i] for i in range(len(dataset.episodes) - n_test, len(dataset.episodes))]
    evaluators = {
        "td_error": metrics.TDErrorEvaluator(episodes=test_episodes),
        "initial_value": metrics.InitialStateValueEstimationEvaluator(episodes=test_episodes),
        ("action_match" if discrete else "action_diff"): (
            metrics.DiscreteActionMatchEvaluator(episodes=test_episodes) if discrete
            else metrics.ContinuousActionDiffEvaluator(episodes=test_episodes)
        ),
        "environment": metrics.EnvironmentEvaluator(env, n_trials=max(1, n_trials // 2)),
    }
    if not algo.has_q_function:
        evaluators = {k: v for k, v in evaluators.items() if k not in ("td_error", "initial_value")}
    _say(f"[2/6] training {name} for {n_steps:,} steps (logs: {os.path.join(output_dir, 'logs')})")
    t0 = time.perf_counter()
    steps_per_epoch = max(1, n_steps // n_epochs)
    results = algo.fit(dataset, n_steps=n_steps, n_steps_per_epoch=steps_per_epoch, experiment_name="logs",
                       with_timestamp=False, logger_adapter=FileAdapterFactory(output_dir),
                       show_progress=show_progress, evaluators=evaluators)
    train_seconds = time.perf_counter() - t0
    model_path = os.path.join(output_dir, "model.d3")
    algo.save(model_path)
    last = results[-1][1]

    _say(f"[3/6] off-policy evaluation with FQE ({fqe_steps:,} steps)")
    fqe_cls, fqe_config = (ope.DiscreteFQE, ope.DiscreteFQEConfig) if discrete else (ope.FQE, ope.FQEConfig)
    fqe = fqe_cls(algo=algo, config=_fqe_config(fqe_config))
    fqe.fit(dataset, n_steps=fqe_steps, n_steps_per_epoch=fqe_steps, logger_adapter=NoopAdapterFactory(),
            show_progress=show_progress)
    fqe_value = float(metrics.InitialStateValueEstimationEvaluator(episodes=test_episodes)(fqe, dataset))

    _say(f"[4/6] {n_trials} episodes in {env.spec.id if env.spec else 'the environment'}")
    returns = rollout_returns(algo, env, n_trials, seed=seed)
    # the same episodes again, discounted: the figure FQE estimates
    discounted = rollout_returns(algo, env, n_trials, seed=seed, gamma=algo.gamma)
    behaviour_return = float(dataset.compute_returns().mean())

    _say("[5/6] exporting the policy to ONNX and checking it against the model")
    onnx_path = os.path.join(output_dir, "policy.onnx")
    algo.save_policy(onnx_path)
    observations = dataset.to_arrays()["observations"]
    sample = observations[np.linspace(0, len(observations) - 1, 256).astype(np.int64)]
    exported = load_onnx_policy(onnx_path).predict(sample)
    expected = algo.predict(sample)
    if discrete:
        export_check = {"action_agreement": float(np.mean(exported == expected))}
    else:
        export_check = {"max_abs_action_difference": float(np.abs(exported - expected).max())}

    _say("[6/6] learning curve")
    curve_path: Optional[str] = os.path.join(output_dir, "learning_curve.png")
    try:
        _plot_curve(results, curve_path, name, dataset_name)
    except ImportError as e:
        _say(f"      skipped: {e}")
        curve_path = None

    report = {
        "dataset": dataset_name,
        "algorithm": name,
        "config": config.to_dict(),
        "n_steps": n_steps,
        "training_seconds": round(train_seconds, 2),
        "final_metrics": {k: v for k, v in last.items() if not k.startswith("time_")},
        "fqe_initial_state_value": fqe_value,
        "environment_discounted_return": float(np.mean(discounted)),
        "environment_return": {"mean": float(np.mean(returns)), "std": float(np.std(returns)),
                               "min": float(np.min(returns)), "max": float(np.max(returns)), "n_trials": n_trials},
        "behaviour_policy_return": behaviour_return,
        "export_check": export_check,
        "paths": {"model": model_path, "policy_onnx": onnx_path, "logs": os.path.join(output_dir, "logs"),
                  "learning_curve": curve_path, "report": os.path.join(output_dir, "report.json")},
        "total_seconds": None,
    }
    report["total_seconds"] = round(time.perf_counter() - start, 2)
    atomic_write_json(report["paths"]["report"], report)
    _print_report(report, discrete)
    return report


def _fqe_config(config_class: type) -> Any:
    """FQE that converges in a few thousand steps: with gamma 0.99 the value
    needs a couple of hundred Bellman backups, so the target network is
    copied every 20 steps (d3rlpy's default 100 would cap the estimate after
    4,000 steps at (1 - 0.99^40) / 0.01 = 33 reward units)."""
    from .models.encoders import VectorEncoderFactory
    from .preprocessing import StandardObservationScaler

    return config_class(learning_rate=1e-3, batch_size=256, target_update_interval=20,
                        observation_scaler=StandardObservationScaler(),
                        encoder_factory=VectorEncoderFactory(hidden_units=[64, 64]))


def _plot_curve(results: Any, path: str, name: str, dataset_name: str) -> None:
    from .plotting import require_matplotlib

    plt = require_matplotlib(path)
    epochs = [epoch for epoch, _ in results]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    top.plot(epochs, [m["environment"] for _, m in results], marker="o")
    top.set_ylabel("environment return")
    top.set_title(f"{name} on {dataset_name}")
    top.grid(alpha=0.3)
    loss_names = [k for k in results[0][1] if k.endswith("loss")]
    for key in loss_names:
        bottom.plot(epochs, [m[key] for _, m in results], marker="o", label=key)
    bottom.set_xlabel("epoch")
    bottom.set_ylabel("loss")
    bottom.grid(alpha=0.3)
    if loss_names:
        bottom.legend()
    fig.tight_layout()
    try:
        atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=100, format="png"))
    finally:
        plt.close(fig)


def _print_report(report: Dict[str, Any], discrete: bool) -> None:
    env_return = report["environment_return"]
    lines = [
        "",
        f"offrl quickstart: {report['algorithm']} on {report['dataset']} ({report['n_steps']:,} steps, "
        f"{report['training_seconds']:.0f} s training, {report['total_seconds']:.0f} s in all)",
        f"  environment return      {env_return['mean']:9.2f} +- {env_return['std']:.2f} over {env_return['n_trials']} episodes "
        f"(the data's behaviour: {report['behaviour_policy_return']:.2f})",
        f"  FQE estimate (V at s0)  {report['fqe_initial_state_value']:9.2f}  "
        f"(the environment's discounted return: {report['environment_discounted_return']:.2f})",
    ]
    for key, value in report["final_metrics"].items():
        lines.append(f"  {key:<23} {value:9.4g}")
    check = report["export_check"]
    if discrete:
        lines.append(f"  ONNX policy agrees with the model on {check['action_agreement']:.1%} of 256 observations")
    else:
        lines.append(f"  ONNX policy differs from the model by at most {check['max_abs_action_difference']:.2e}")
    lines.append("wrote:")
    for key, path in report["paths"].items():
        if path is not None:
            lines.append(f"  {key:<15} {path}")
    print("\n".join(lines), flush=True)
