"""The ``offrl`` command.

``offrl quickstart`` runs the whole job on a built-in dataset; ``fit``,
``evaluate``, ``search``, ``export``, ``info``, ``plot`` / ``plot-all`` / ``stats``,
``record`` and ``play`` are the pieces. Every subcommand has ``--help``.
A user error (a missing file, an unknown name, a malformed override) prints
one line on stderr and exits with status 2 (argparse's usage errors too);
``--debug`` shows the traceback instead.

Building the parser imports neither torch nor offrl's numeric packages: each
command imports what it needs when it runs, so ``offrl --help`` and usage
errors answer at once. Nothing below ``offrl.cli`` imports it back.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Any, Dict, List, NoReturn, Optional, Tuple

from .common import (
    DEFAULT_MAX_EXPANSION,
    EVALUATORS,
    CLIError,
    apply_overrides,
    build_evaluators,
    check_env_fits,
    config_from_args,
    env_from_header,
    env_name,
    hdf5_kind,
    load_dataset,
    load_model,
    make_env,
    parse_overrides,
)
from .evaluate import CI_METHODS, OPE_ESTIMATORS, cmd_evaluate

__all__ = ["main", "build_parser", "CLIError", "parse_overrides", "apply_overrides", "load_dataset", "check_env_fits"]


# ----------------------------------------------------------- subcommands
def _launch_nproc(args: argparse.Namespace) -> int:
    """``offrl fit ... --nproc N``: the same command in N processes under
    torchrun (one run directory, chosen here so every rank uses it)."""
    import subprocess

    argv = list(getattr(args, "argv", None) or sys.argv[1:])
    cleaned: List[str] = []
    skip = False
    for item in argv:
        if skip:
            skip = False
        elif item == "--nproc":
            skip = True
        elif not item.startswith("--nproc="):
            cleaned.append(item)
    if args.output_dir is None and args.resume is None:
        output = os.path.join("offrl_runs", f"{args.algo}_{time.strftime('%Y%m%d%H%M%S')}")
        cleaned += ["--output-dir", output]
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(args.nproc),
               "-m", "offrl.cli", *cleaned]
    return subprocess.call(command)


def _cmd_fit(args: argparse.Namespace) -> int:
    from .._atomic import remove_stale_temporaries
    from ..training import distributed
    from .._random import seed as seed_everything
    from ..algos.registry import resolve_algorithm
    from ..logging import FileAdapterFactory
    from ..logging.file_adapter import STALE_AFTER_S

    if getattr(args, "nproc", 1) > 1 and not distributed.in_torchrun():
        return _launch_nproc(args)
    ddp = distributed.in_torchrun() and int(os.environ["WORLD_SIZE"]) > 1
    main_rank = not ddp or int(os.environ["RANK"]) == 0
    config_cls = resolve_algorithm(args.algo)
    if not config_cls.algorithm_class().is_trainable:
        raise CLIError(f"{config_cls.get_type()} only acts and cannot be trained")
    config = config_from_args(config_cls, args.config, args.overrides)
    dataset, env = load_dataset(args.dataset, max_expansion=args.max_expansion)
    if args.env:
        env = make_env(args.env)
    if args.seed is not None:
        seed_everything(args.seed)
    algo = config.create(device=args.device, enable_ddp=ddp)
    if args.resume is not None:
        if args.output_dir is not None and os.path.abspath(args.output_dir) != os.path.abspath(args.resume):
            raise CLIError("--resume DIR continues the run in DIR: give no other --output-dir")
        if not os.path.isfile(os.path.join(args.resume, "logs", "checkpoint.d3")):
            raise CLIError(f"--resume {args.resume}: no checkpoint at {os.path.join(args.resume, 'logs', 'checkpoint.d3')} "
                           "(give the --output-dir of an earlier 'offrl fit')")
    output = args.resume or args.output_dir or os.path.join("offrl_runs", f"{config.get_type()}_{time.strftime('%Y%m%d%H%M%S')}")
    os.makedirs(output, exist_ok=True)
    remove_stale_temporaries(output, min_age_s=STALE_AFTER_S)  # half-written files of a killed earlier run
    test_episodes = dataset.episodes
    algo.build_with_dataset(dataset)
    if env is not None:
        check_env_fits(algo, env, f"{config.get_type()} on {args.dataset}")
    evaluators = build_evaluators(args.evaluators.split(","), algo, test_episodes, env) if args.evaluators else {}
    results = algo.fit(
        dataset,
        n_steps=args.steps,
        n_steps_per_epoch=min(args.steps_per_epoch, args.steps),
        experiment_name="logs",
        with_timestamp=False,
        logger_adapter=FileAdapterFactory(output),
        show_progress=not args.no_progress,
        evaluators=evaluators,
        resume_from=os.path.join(output, "logs") if args.resume is not None else None,
    )
    if not main_rank:  # rank 0 saves and reports
        return 0
    model_path = os.path.join(output, "model.d3")
    algo.save(model_path)
    print(f"trained {type(algo).__name__} for {args.steps} steps on {args.dataset}")
    if not results:
        print(f"  the run in {output} had already finished its {args.steps} steps")
    for name, value in (results[-1][1] if results else {}).items():
        if not name.startswith("time_"):
            print(f"  {name}: {value:.6g}")
    print(f"model: {model_path}")
    print(f"logs:  {os.path.join(output, 'logs')}")
    if args.export:
        algo.save_policy(args.export)
        print(f"policy: {args.export} (verified against the model)")
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    algo = load_model(args.model)
    algo.save_policy(args.output)
    print(f"wrote {args.output} ({type(algo).__name__}, verified against the model)")
    return 0


def _shown(value: Any) -> str:
    """A value from a file, safe to print: text with control characters
    (terminal escapes) is shown as a Python literal."""
    text = str(value)
    return text if text.isprintable() else repr(text)


def _dataset_metadata(path: str) -> Optional[Dict[str, Any]]:
    """What ``offrl info`` prints for a dataset file or a Minari folder,
    from metadata only (shapes, dtypes, counts, attributes: no per-step
    array is read), or None for a disk dataset (opened in place instead)."""
    from ..dataset.disk import is_disk_dataset

    if is_disk_dataset(path):
        return None
    if os.path.isdir(path):
        from ..datasets.minari import describe_minari

        return describe_minari(path)
    if hdf5_kind(path) == "offrl":
        from ..dataset.io import describe_dataset_file

        return describe_dataset_file(path)
    from ..datasets.d4rl import describe_d4rl_hdf5

    return describe_d4rl_hdf5(path)


def _cmd_info(args: argparse.Namespace) -> int:
    path = args.path
    if not os.path.exists(path):
        raise CLIError(f"{path}: no such file or directory")
    if os.path.isdir(path) or path.endswith((".h5", ".hdf5")):
        metadata = _dataset_metadata(path)
        print(f"dataset {path}")
        for key, value in (metadata or {}).items():
            print(f"  {key}: {_shown(value)}")
        if metadata is not None and not args.verbose:
            return 0
        dataset, env = load_dataset(path, max_expansion=args.max_expansion)
        for key, value in dataset.summary().items():
            if metadata is None or key not in metadata:
                print(f"  {key}: {_shown(value)}")
        if env is not None:
            print(f"  environment: {env.spec.id if env.spec else env}")
        return 0
    _use_threads(args)
    from ..serialization import read_model_file

    payload = read_model_file(path)
    algo = load_model(path)
    print(f"model {path}")
    print(f"  algorithm: {type(algo).__name__} ({algo.config.get_type()})")
    print(f"  observation_shape: {algo.observation_shape}")
    print(f"  action_size: {algo.action_size} ({algo.get_action_type().name.lower()})")
    print(f"  grad_step: {algo.grad_step}")
    n_params = sum(p.numel() for p in algo.modules.parameters())
    print(f"  parameters: {n_params}")
    for name in ("observation_scaler", "action_scaler", "reward_scaler"):
        scaler = getattr(algo, name)
        if scaler is not None:
            print(f"  {name}: {scaler.get_type()}")
    if args.verbose:
        print(json.dumps(payload.get("config", algo.config.to_dict()), indent=2))
    return 0


def _cmd_plot(args: argparse.Namespace) -> int:
    from ..plotting import metric_stats, plot_curves, read_metric_csv

    for path in args.paths:
        stats = metric_stats(read_metric_csv(path))
        print(f"{path}: " + ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in stats.items()))
    plot_curves(args.paths, window=args.window, show_steps=args.show_steps, show_max=args.show_max, labels=args.label,
                xlim=args.xlim, ylim=args.ylim, title=args.title, ylabel=args.ylabel, save=args.save)
    if args.save:
        print(f"wrote {args.save}")
    return 0


def _cmd_plot_all(args: argparse.Namespace) -> int:
    from ..plotting import plot_all, read_params

    params = read_params(args.path)
    if params is not None:
        print(f"{args.path}: {params.get('algorithm', '?')}")
    plot_all(args.path, window=args.window, title=args.title, save=args.save)
    if args.save:
        print(f"wrote {args.save}")
    return 0


def _cmd_stats(args: argparse.Namespace) -> int:
    from ..plotting import metric_stats, read_metric_csv

    for path in args.paths:
        print(path)
        for key, value in metric_stats(read_metric_csv(path)).items():
            print(f"  {key}: {value:.6g}" if isinstance(value, float) else f"  {key}: {value}")
    return 0


def _run_episodes(algo: Any, env: Any, n_episodes: int, seed: Optional[int], epsilon: float = 0.0) -> List[float]:
    from ..metrics.utility import rollout_returns

    return rollout_returns(algo, env, n_episodes, epsilon, seed=seed)


def _env_for_rendering(args: argparse.Namespace, render_mode: str) -> Tuple[Any, str]:
    """The environment of ``record`` / ``play`` and its name: ``--env-id``
    (made with ``render_mode``) or ``--env-header`` (the user's code)."""
    if args.env_id is not None and args.env_header is not None:
        raise CLIError("give either --env-id or --env-header, not both")
    if args.env_id is not None:
        return make_env(args.env_id, render_mode=render_mode), args.env_id
    if args.env_header is not None:
        env = env_from_header(args.env_header)
        return env, env_name(env)
    raise CLIError("give --env-id ENV_ID (e.g. CartPole-v1) or --env-header CODE")


def _warn_target_return(args: argparse.Namespace) -> None:
    if args.target_return is not None:
        print(f"offrl {args.command}: warning: --target-return applies to Decision-Transformer models; "
              "this model acts without it", file=sys.stderr)


def _cmd_record(args: argparse.Namespace) -> int:
    algo = load_model(args.model)
    try:
        import moviepy  # noqa: F401
    except ImportError:
        raise CLIError("recording videos needs moviepy: pip install 'offrl[video]'") from None
    from gymnasium.wrappers import RecordVideo

    _warn_target_return(args)
    env, env_name = _env_for_rendering(args, "rgb_array")
    check_env_fits(algo, env, args.model)
    env = RecordVideo(env, args.out, episode_trigger=lambda _: True, name_prefix=args.prefix, disable_logger=True)
    try:
        returns = _run_episodes(algo, env, args.n_episodes, args.seed, args.epsilon)
    except ImportError as e:  # gymnasium's renderers (pygame, mujoco) are optional
        raise CLIError(f"cannot render {env_name}: {e}") from None
    finally:
        env.close()
    videos = sorted(f for f in os.listdir(args.out) if f.startswith(args.prefix) and f.endswith(".mp4"))
    for i, value in enumerate(returns):
        print(f"episode {i}: return {value:.6g}")
    print(f"wrote {len(videos)} videos to {args.out}")
    return 0


def _cmd_play(args: argparse.Namespace) -> int:
    algo = load_model(args.model)
    _warn_target_return(args)
    env, env_name = _env_for_rendering(args, "human")
    check_env_fits(algo, env, args.model)
    try:
        returns = _run_episodes(algo, env, args.n_episodes, args.seed, args.epsilon)
    except ImportError as e:
        raise CLIError(f"cannot render {env_name}: {e}") from None
    finally:
        env.close()
    for i, value in enumerate(returns):
        print(f"episode {i}: return {value:.6g}")
    if returns:
        print(f"score: {sum(returns) / len(returns):.6g}")
    return 0


def _cmd_quickstart(args: argparse.Namespace) -> int:
    from ..quickstart import run_quickstart

    run_quickstart(dataset_name=args.dataset, algorithm=args.algo, n_steps=args.steps, output_dir=args.output_dir,
                   fqe_steps=args.fqe_steps, n_trials=args.n_trials, show_progress=not args.no_progress,
                   seed=args.seed)
    return 0


# ---------------------------------------------------------------- search
def _test_size(text: str) -> Any:
    """``0.2`` (a fraction) or ``30`` (episodes)."""
    try:
        value: Any = float(text) if any(c in text for c in ".eE") else int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1) or a number of episodes, got {text!r}") from None
    if (isinstance(value, float) and not 0.0 < value < 1.0) or (isinstance(value, int) and value < 1):
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1) or a number of episodes >= 1, got {text!r}")
    return value


def _cmd_search(args: argparse.Namespace) -> int:
    """``offrl search``: :class:`offrl.model_selection.OfflineSearch` from the command line."""
    from .._atomic import atomic_write_text
    from .._safety import load_json
    from ..algos.registry import resolve_algorithm
    from ..model_selection import OfflineSearch, space_from_json

    config_cls = resolve_algorithm(args.algo)
    if not config_cls.algorithm_class().is_trainable:
        raise CLIError(f"{config_cls.get_type()} only acts and cannot be trained")
    config = config_from_args(config_cls, args.config, args.overrides)
    if not os.path.isfile(args.space):
        raise CLIError(f"--space {args.space}: no such file")
    with open(args.space, "rb") as f:
        space = space_from_json(load_json(f.read(), args.space), args.space)
    output = args.output_dir
    os.makedirs(output, exist_ok=True)
    storage = args.storage or "sqlite:///" + os.path.join(output, "study.db")
    pruner = None
    if args.pruner == "median":
        import optuna

        pruner = optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=1)
    search = OfflineSearch(config, space, args.scorer.split(","), seeds=args.seeds, n_steps=args.steps,
                           n_steps_per_epoch=min(args.steps_per_epoch, args.steps), n_trials=args.trials,
                           choose_by=args.choose_by, test_size=args.test_size, random_state=args.seed,
                           storage=storage, study_name=args.study_name, n_jobs=args.n_jobs, refit=args.refit,
                           pruner=pruner, n_eval_episodes=args.eval_episodes, fqe_steps=args.fqe_steps,
                           output_dir=output, device=args.device, show_progress=not args.no_progress)
    dataset, data_env = load_dataset(args.dataset)
    env = make_env(args.env) if args.env else (data_env if args.true_return else None)
    if args.true_return and env is None:
        raise CLIError(f"--true-return: {args.dataset} comes with no environment; give --env ENV_ID")
    if env is not None:  # before any training: the policies must be able to act in it
        probe = config.create(device="cpu")
        probe.build_with_dataset(dataset)
        check_env_fits(probe, env, f"{config.get_type()} on {args.dataset}")
    print(f"study {args.study_name!r} in {storage} (live view: optuna-dashboard {storage})", flush=True)
    search.fit(dataset, env=env)
    results = os.path.join(output, "results.csv")
    atomic_write_text(results, search.results_.to_csv(index=False))
    report = search.write_report(os.path.join(output, "report.html"))
    model = os.path.join(output, "model.d3")
    search.best_estimator_.save(model)
    print(search.leaderboard(10))
    print(f"results: {results}")
    print(f"report:  {report}")
    print(f"model:   {model} ({'retrained on every episode' if args.refit else 'the chosen checkpoint'})")
    return 0


# ---------------------------------------------------------------- parser
def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


#: seeds go to numpy, Python, torch and gymnasium; all accept [0, 2**63)
_MAX_SEED = 2**63 - 1


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer in [0, 2**63 - 1], got {text!r}") from None
    if not 0 <= value <= _MAX_SEED:
        raise argparse.ArgumentTypeError(f"expected an integer in [0, 2**63 - 1], got {text}")
    return value


def _expansion(text: str) -> Optional[float]:
    if text.strip().lower() == "none":
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 1 or 'none', got {text!r}") from None
    if not (math.isfinite(value) and value >= 1):
        raise argparse.ArgumentTypeError(f"expected a number >= 1 or 'none', got {text!r}")
    return value


_MAX_EXPANSION_HELP = (f"read HDF5 data whose compressed arrays expand up to this many times the bytes stored for "
                       f"them (default: {DEFAULT_MAX_EXPANSION:g}; 'none': no bound; see SECURITY.md)")


def _probability(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not 0.0 <= value <= 1.0:  # also rejects nan
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}")
    return value


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line (``offrl fit: error: ...``), exit status 2,
    pointing at ``--help`` instead of printing the whole usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``offrl`` argument parser. Building it imports neither torch nor
    offrl's numeric modules: ``offrl --help`` answers at once."""
    from .._version import __version__

    parser = _Parser(prog="offrl", description="offline-first reinforcement learning: fit, judge and export policies")
    parser.add_argument("--version", action="version", version=f"offrl {__version__}")
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks for errors")
    parser.add_argument("--threads", type=_positive_int, default=1,
                        help="torch intra-op threads (default: 1; offrl's small networks gain little from more, and "
                             "extra threads slow to a crawl when the machine is busy)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = commands.add_parser("quickstart", help="the whole job on a built-in dataset: train, evaluate, export, plot",
                            description="Build a built-in dataset, train an offline algorithm on it, score it with the "
                                        "metric evaluators, FQE and the environment, export the policy to ONNX (checked "
                                        "against the model), draw the learning curve and print a report.")
    p.add_argument("--dataset", default="cartpole-replay", help="built-in dataset name (default: cartpole-replay)")
    p.add_argument("--algo", default=None, help="algorithm (default: a tuned discrete_cql for discrete, td3_plus_bc for continuous actions)")
    p.add_argument("--steps", type=_positive_int, default=5000, help="gradient steps (default: 5000)")
    p.add_argument("--fqe-steps", type=_positive_int, default=4000, help="FQE gradient steps (default: 4000)")
    p.add_argument("--n-trials", type=_positive_int, default=10, help="evaluation episodes in the environment")
    p.add_argument("--output-dir", default="offrl_quickstart", help="where to write (default: offrl_quickstart)")
    p.add_argument("--seed", type=_seed, default=0)
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(run=_cmd_quickstart)

    p = commands.add_parser("fit", help="train an algorithm on a dataset",
                            description="Train ALGO on DATASET (a built-in dataset name, an offrl or D4RL-format HDF5 "
                                        "file, an offrl disk dataset directory (sampled in place), or a Minari "
                                        "dataset directory). Config values: key=value overrides "
                                        "(JSON values; dotted keys reach inside factories, e.g. "
                                        "encoder_factory=vector encoder_factory.hidden_units=[64,64]) and/or --config FILE.json.")
    p.add_argument("dataset")
    p.add_argument("algo", help="algorithm name, e.g. cql, discrete_cql, iql, bc, dqn")
    p.add_argument("overrides", nargs="*", default=[], metavar="key=value", help="config overrides")
    p.add_argument("--config", help="JSON file: a full config (as written in params.json) or an object of overrides")
    p.add_argument("--steps", type=_positive_int, default=10000)
    p.add_argument("--steps-per-epoch", type=_positive_int, default=1000)
    p.add_argument("--evaluators", default=None, help="comma-separated: auto, " + ", ".join(EVALUATORS))
    p.add_argument("--env", "--env-id", dest="env", default=None, help="gymnasium env id for the environment evaluator")
    p.add_argument("--output-dir", default=None, help="run directory (default: offrl_runs/<algo>_<time>)")
    p.add_argument("--resume", default=None, metavar="DIR",
                   help="continue the interrupted run in DIR (its --output-dir) from its last checkpoint; "
                        "give the same dataset, algorithm, options and --steps-per-epoch")
    p.add_argument("--export", default=None, help="also export the policy (.onnx or .pt)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--seed", type=_seed, default=None)
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--max-expansion", type=_expansion, default=DEFAULT_MAX_EXPANSION, metavar="RATIO",
                   help=_MAX_EXPANSION_HELP)
    p.add_argument("--nproc", type=_positive_int, default=1,
                   help="train data-parallel in N processes on this machine, started by torchrun (gloo on CPU, "
                        "NCCL on CUDA; rank 0 writes the run directory)")
    p.set_defaults(run=_cmd_fit)

    p = commands.add_parser("search", help="choose a config, seed and checkpoint by off-policy evaluation",
                            description="Search configs of ALGO (the values in --space), seeds and every epoch's "
                                        "checkpoint: each trial trains on DATASET's training episodes and each "
                                        "checkpoint is scored on held-out episodes by --scorer. Workers sharing "
                                        "--storage (and --study-name) share the search; rerunning continues it. "
                                        "key=value overrides set what the search holds fixed, as for fit. Writes "
                                        "results.csv, report.html and model.d3 (the chosen policy) to --output-dir.")
    p.add_argument("dataset")
    p.add_argument("algo", help="algorithm name, e.g. discrete_cql, td3_plus_bc")
    p.add_argument("overrides", nargs="*", default=[], metavar="key=value", help="config values held fixed")
    p.add_argument("--space", required=True, metavar="SPACE.json",
                   help='JSON object: field -> list of values, {"low": a, "high": b, "log": true} or {"choices": [...]}')
    p.add_argument("--scorer", default="fqe",
                   help="comma-separated; the first chooses: fqe, is, wis, pdis, wpdis, dr, wdr, mis, wmis, mdr, "
                        "init_value, average_value, action_match, neg_td_error, neg_action_diff (default: fqe)")
    p.add_argument("--trials", type=_positive_int, default=None,
                   help="trials (config x seed) to run; default: the whole grid (required for ranges)")
    p.add_argument("--storage", default=None,
                   help="Optuna database URL shared by the workers (default: sqlite:///OUTPUT_DIR/study.db)")
    p.add_argument("--study-name", default="offrl_search")
    p.add_argument("--seeds", type=_positive_int, default=1, help="training seeds 0..N-1 (default: 1)")
    p.add_argument("--steps", type=_positive_int, default=10000)
    p.add_argument("--steps-per-epoch", type=_positive_int, default=1000, help="steps between candidate checkpoints")
    p.add_argument("--config", help="JSON file: a full config or an object of overrides")
    p.add_argument("--choose-by", choices=("estimate", "lower"), default=None,
                   help="the estimate, or its lower confidence bound (default: the lower bound when the "
                        "selecting scorer has an interval, else the estimate)")
    p.add_argument("--test-size", type=_test_size, default=0.2, help="held-out episodes: a fraction or a count")
    p.add_argument("--n-jobs", type=_positive_int, default=1, help="worker processes on this machine")
    p.add_argument("--pruner", choices=("none", "median"), default="none", help="Optuna pruner (default: none)")
    p.add_argument("--fqe-steps", type=_positive_int, default=10000, help="FQE updates per checkpoint (cap)")
    p.add_argument("--env", "--env-id", dest="env", default=None,
                   help="gymnasium env id: each candidate's true return is recorded (never used to choose)")
    p.add_argument("--true-return", action="store_true",
                   help="record true returns in the environment a built-in dataset comes with")
    p.add_argument("--eval-episodes", type=_positive_int, default=10, help="episodes per true return")
    p.add_argument("--refit", action="store_true", help="retrain the chosen config on every episode")
    p.add_argument("--output-dir", default="offrl_search", help="where to write (default: offrl_search)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=_seed, default=0, help="seed of the split and the sampler (default: 0)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(run=_cmd_search)

    p = commands.add_parser("evaluate", help="score a saved model on a dataset or in an environment",
                            description="Score MODEL with metric evaluators and OPE estimators on --dataset, and/or by "
                                        "running it in the gymnasium environment --env.")
    p.add_argument("model")
    p.add_argument("--dataset", default=None)
    p.add_argument("--env", "--env-id", dest="env", default=None, help="gymnasium env id")
    p.add_argument("--evaluators", default=None, help="comma-separated (default: auto): " + ", ".join(EVALUATORS))
    p.add_argument("--ope", default=None,
                   help="comma-separated OPE estimators: " + ", ".join(OPE_ESTIMATORS) + " (dr, wdr and mdr use an "
                        "FQE of --fqe-steps as their Q model; mis, wmis and mdr train a DualDICE density ratio)")
    p.add_argument("--fqe-steps", type=_positive_int, default=5000)
    p.add_argument("--ci", choices=CI_METHODS, default="bootstrap",
                   help="interval of the --ope estimators other than fqe (which always bootstraps); "
                        "hoeffding and bernstein need --value-range (default: bootstrap)")
    p.add_argument("--value-range", nargs=2, type=float, default=None, metavar=("LOW", "HIGH"),
                   help="a bound, known in advance, on each episode's term, for --ci hoeffding / bernstein")
    p.add_argument("--ratio-steps", type=_positive_int, default=10000,
                   help="updates of the DualDICE density ratio of mis, wmis and mdr (default: 10000)")
    p.add_argument("--return-threshold", type=float, default=None, help="success threshold for soft_opc")
    p.add_argument("--normalize", default=None, metavar="NAME",
                   help="also report the environment returns as D4RL-normalised scores (0 random, 100 expert) of the "
                        "locomotion task NAME (hopper, Hopper-v5, hopper-medium-v0, ...); on by default when --dataset "
                        "is a get_mujoco name")
    p.add_argument("--n-trials", type=_positive_int, default=10)
    p.add_argument("--epsilon", type=_probability, default=0.0,
                   help="probability of a random action in the environment (default: 0)")
    p.add_argument("--seed", type=_seed, default=None)
    p.add_argument("--json", default=None, help="also write the figures to this JSON file")
    p.add_argument("--max-expansion", type=_expansion, default=DEFAULT_MAX_EXPANSION, metavar="RATIO",
                   help=_MAX_EXPANSION_HELP)
    p.set_defaults(run=cmd_evaluate)

    p = commands.add_parser("export", help="export a saved model's policy to ONNX or TorchScript",
                            description="Export the greedy policy of MODEL (a file written by algo.save) "
                                        "with its scalers to OUT: .onnx for ONNX, .pt for TorchScript.")
    p.add_argument("model", help="model file written by algo.save (e.g. model_10000.d3)")
    p.add_argument("output", help="destination, .onnx or .pt")
    p.set_defaults(run=_cmd_export)

    p = commands.add_parser("info", help="summary of a dataset file or a model file",
                            description="Summarise a dataset (from its metadata: shapes, dtypes, counts, sizes; "
                                        "no array is read) or a model file.")
    p.add_argument("path")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="a model: also print the full config; a dataset: also load it and print its return and "
                        "length statistics")
    p.add_argument("--max-expansion", type=_expansion, default=DEFAULT_MAX_EXPANSION, metavar="RATIO",
                   help=_MAX_EXPANSION_HELP + " (with -v)")
    p.set_defaults(run=_cmd_info)

    p = commands.add_parser("plot", help="plot metric CSV logs (needs matplotlib)",
                            description="Plot one curve per metric CSV (rows epoch,step,value) on shared axes.")
    p.add_argument("paths", nargs="+", metavar="CSV")
    p.add_argument("--window", type=_positive_int, default=1, help="moving-average window (default: 1)")
    p.add_argument("--show-steps", action="store_true", help="steps instead of epochs on the x-axis")
    p.add_argument("--show-max", action="store_true", help="dashed line at the maximum value")
    p.add_argument("--label", action="append", default=None, help="legend label, once per CSV")
    p.add_argument("--xlim", nargs=2, type=float, metavar=("LOW", "HIGH"))
    p.add_argument("--ylim", nargs=2, type=float, metavar=("LOW", "HIGH"))
    p.add_argument("--title")
    p.add_argument("--ylabel", default="value")
    p.add_argument("--save", help="write the figure to this file instead of showing it")
    p.set_defaults(run=_cmd_plot)

    p = commands.add_parser("plot-all", help="plot every metric of a run directory in a grid (needs matplotlib)")
    p.add_argument("path", help="a run's log directory (holding the metric CSVs)")
    p.add_argument("--window", type=_positive_int, default=1)
    p.add_argument("--title")
    p.add_argument("--save")
    p.set_defaults(run=_cmd_plot_all)

    p = commands.add_parser("stats", help="statistics of metric CSV logs")
    p.add_argument("paths", nargs="+", metavar="CSV")
    p.set_defaults(run=_cmd_stats)

    for name, run, text in (("record", _cmd_record, "record episodes of a saved model to video files (needs moviepy)"),
                            ("play", _cmd_play, "render episodes of a saved model on screen")):
        p = commands.add_parser(name, help=text, description=text[0].upper() + text[1:] + ". The environment is "
                                "--env-id (a gymnasium id) or --env-header (one line of Python that defines env).")
        p.add_argument("model", help="model file written by algo.save")
        p.add_argument("--env-id", "--env", dest="env_id", default=None, help="gymnasium env id, e.g. CartPole-v1")
        p.add_argument("--env-header", default=None,
                       help="one line of Python that defines env, e.g. \"import gymnasium; "
                            "env = gymnasium.make('Pendulum-v1', g=9.81, render_mode='rgb_array')\"")
        p.add_argument("--n-episodes", type=_positive_int, default=3, help="episodes to run (default: 3)")
        p.add_argument("--epsilon", type=_probability, default=0.0,
                       help="probability of a random action (default: 0)")
        p.add_argument("--seed", type=_seed, default=None)
        p.add_argument("--target-return", type=float, default=None,
                       help="for Decision-Transformer models (accepted for d3rlpy compatibility)")
        p.add_argument("--use-gymnasium", action="store_true",
                       help="accepted for d3rlpy compatibility: offrl always uses gymnasium")
        if name == "record":
            p.add_argument("--out", default="videos", help="output directory (default: videos)")
            p.add_argument("--prefix", default="offrl", help="video file name prefix")
        p.set_defaults(run=run)
    return parser


#: commands that start without loading torch: those that only read text logs, and ``info``
#: (a dataset's metadata needs no torch; a model file loads it, through _use_threads)
_WITHOUT_TORCH = frozenset({"plot", "plot-all", "stats", "info"})


def _use_threads(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)


def main(argv: Optional[List[str]] = None) -> int:
    """Run the ``offrl`` command; returns the exit status (0, 2 for a user
    error, 130 when interrupted)."""
    parser = build_parser()
    # key=value overrides of `fit` may come after its options
    args, extra = parser.parse_known_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # for `fit --nproc N`, which runs it again under torchrun
    if getattr(args, "command", None) in ("fit", "search"):
        args.overrides += [e for e in extra if "=" in e and not e.startswith("-")]
        extra = [e for e in extra if not ("=" in e and not e.startswith("-"))]
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command not in _WITHOUT_TORCH:
        _use_threads(args)
    try:
        return args.run(args)
    except KeyboardInterrupt:
        print(f"offrl {args.command}: interrupted", file=sys.stderr)
        return 130
    except (CLIError, ValueError, TypeError, FileNotFoundError, ImportError, OSError) as e:
        if args.debug:
            raise
        message = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"offrl {args.command}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
