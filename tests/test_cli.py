"""The ``offrl`` command: subcommands in-process (fast) and through a real
subprocess (the console script's exit codes and stderr)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from offrl.algos import DiscreteCQLConfig, SACConfig
from offrl.algos.registry import resolve_algorithm
from offrl.cli import CLIError, apply_overrides, main, parse_overrides
from offrl.dataset import MDPDataset
from offrl.export import load_onnx_policy
from offrl.models.encoders import VectorEncoderFactory
from offrl.preprocessing import StandardObservationScaler
from offrl.serialization import load_learnable


def _run(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "offrl.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=300)


@pytest.fixture
def dataset_file(tmp_path):
    rng = np.random.default_rng(0)
    n = 120
    dataset = MDPDataset(
        rng.normal(size=(n, 3)).astype(np.float32),
        rng.integers(0, 2, size=n),
        rng.normal(size=n).astype(np.float32),
        (np.arange(n) % 20 == 19).astype(np.float32),
    )
    path = tmp_path / "data.h5"
    dataset.dump(path)
    return path


# ----------------------------------------------------------------- export
def test_export_command(tmp_path, capsys):
    algo = SACConfig().create()
    algo.create_impl((3,), 2)
    algo.save(tmp_path / "model.d3")
    assert main(["export", str(tmp_path / "model.d3"), str(tmp_path / "policy.onnx")]) == 0
    assert "verified" in capsys.readouterr().out
    x = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    np.testing.assert_allclose(load_onnx_policy(tmp_path / "policy.onnx").predict(x), algo.predict(x), rtol=1e-5, atol=1e-5)


def test_export_command_errors(tmp_path, capsys):
    assert main(["export", str(tmp_path / "missing.d3"), str(tmp_path / "p.onnx")]) == 2
    assert "no such model file" in capsys.readouterr().err
    (tmp_path / "bad.d3").write_bytes(b"junk")
    assert main(["export", str(tmp_path / "bad.d3"), str(tmp_path / "p.onnx")]) == 2
    assert "bad.d3" in capsys.readouterr().err


def test_help_runs_as_module():
    out = _run("export", "--help")
    assert out.returncode == 0 and "ONNX" in out.stdout


def test_the_package_runs_as_the_command():
    """``python -m offrl`` is the ``offrl`` command (its usage and its exit
    status for a user error)."""
    ok = subprocess.run([sys.executable, "-m", "offrl", "--help"], capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0 and ok.stdout.startswith("usage: offrl") and "fit" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "offrl", "no-such-command"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "invalid choice: 'no-such-command'" in bad.stderr


def test_every_subcommand_has_help():
    for command in ("quickstart", "fit", "evaluate", "export", "info", "plot", "plot-all", "stats", "record", "play"):
        with pytest.raises(SystemExit) as exc:
            main([command, "--help"])
        assert exc.value.code == 0


# --------------------------------------------------------------- overrides
def test_parse_overrides_reads_json_values_and_strings():
    assert parse_overrides(["batch_size=64", "gamma=0.9", "name=abc", "units=[1, 2]", "flag=true", "x=null"]) == {
        "batch_size": 64, "gamma": 0.9, "name": "abc", "units": [1, 2], "flag": True, "x": None,
    }
    for bad in ("batch_size", "=3", "a..b=1"):
        with pytest.raises(CLIError, match="malformed override"):
            parse_overrides([bad])


def test_apply_overrides_sets_fields_types_and_nested_params():
    config = apply_overrides(DiscreteCQLConfig, {
        "batch_size": 16,
        "encoder_factory": "vector",
        "encoder_factory.hidden_units": [8, 4],
        "observation_scaler": "standard",
        "q_func_factory": {"type": "qr", "params": {"n_quantiles": 7}},
    })
    assert config.batch_size == 16
    assert isinstance(config.encoder_factory, VectorEncoderFactory) and list(config.encoder_factory.hidden_units) == [8, 4]
    assert isinstance(config.observation_scaler, StandardObservationScaler)
    assert config.q_func_factory.get_type() == "qr" and config.q_func_factory.n_quantiles == 7
    assert DiscreteCQLConfig().batch_size != 16  # defaults untouched


def test_apply_overrides_errors_list_the_valid_keys():
    with pytest.raises(CLIError, match=r"unknown config key 'bogus' in DiscreteCQLConfig; valid: .*batch_size"):
        apply_overrides(DiscreteCQLConfig, {"bogus": 1})
    with pytest.raises(CLIError, match=r"unknown config key 'encoder_factory.nope' in encoder_factory; valid: activation"):
        apply_overrides(DiscreteCQLConfig, {"encoder_factory.nope": 1})
    with pytest.raises(CLIError, match=r"batch_size is not a factory"):
        apply_overrides(DiscreteCQLConfig, {"batch_size.x": 1})
    with pytest.raises(CLIError, match=r"unknown q_function type 'zzz'"):
        apply_overrides(DiscreteCQLConfig, {"q_func_factory": "zzz"})
    with pytest.raises(CLIError, match=r"invalid config for DiscreteCQLConfig: batch_size must be a positive int"):
        apply_overrides(DiscreteCQLConfig, {"batch_size": -1})


def test_resolve_algorithm_accepts_type_class_and_config_names():
    assert resolve_algorithm("discrete_cql") is DiscreteCQLConfig
    assert resolve_algorithm("DiscreteCQL") is DiscreteCQLConfig
    assert resolve_algorithm("DiscreteCQLConfig") is DiscreteCQLConfig
    assert resolve_algorithm("discrete-cql") is DiscreteCQLConfig
    assert resolve_algorithm("td3plusbc") is resolve_algorithm("TD3PlusBCConfig")
    with pytest.raises(ValueError, match=r"unknown algorithm 'nope'; valid: (.+, )?bc, .*cql, .*td3_plus_bc"):
        resolve_algorithm("nope")
    with pytest.raises(ValueError, match=r"unknown algorithm ''"):
        resolve_algorithm("")
    with pytest.raises(TypeError, match="algorithm name must be a str, got int"):
        resolve_algorithm(3)
    # FQE registers as an algorithm config but needs a policy to evaluate: not offered by name
    import offrl.ope  # noqa: F401

    with pytest.raises(ValueError, match="unknown algorithm 'fqe'"):
        resolve_algorithm("fqe")


# ---------------------------------------------------------------- fit / info
def test_fit_writes_model_logs_and_policy(dataset_file, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["fit", str(dataset_file), "discrete_cql", "batch_size=8", "encoder_factory=vector",
                 "encoder_factory.hidden_units=[16]", "--steps", "6", "--steps-per-epoch", "3",
                 "--output-dir", str(out), "--export", str(tmp_path / "p.onnx"), "--no-progress", "--seed", "1"])
    assert code == 0
    printed = capsys.readouterr().out
    assert str(out / "model.d3") in printed
    algo = load_learnable(str(out / "model.d3"))
    assert algo.grad_step == 6 and algo.config.batch_size == 8
    assert list(algo.config.encoder_factory.hidden_units) == [16]
    params = json.loads((out / "logs" / "params.json").read_text())
    assert params["config"]["params"]["batch_size"] == 8
    rows = (out / "logs" / "loss.csv").read_text().splitlines()
    assert [r.split(",")[:2] for r in rows] == [["1", "3"], ["2", "6"]]
    x = np.zeros((2, 3), dtype=np.float32)
    np.testing.assert_array_equal(load_onnx_policy(tmp_path / "p.onnx").predict(x), algo.predict(x))


def test_fit_and_info_open_a_disk_dataset_in_place(dataset_file, tmp_path, capsys, monkeypatch):
    from offrl import cli
    from offrl.dataset import DiskStore, dump_disk_dataset

    dump_disk_dataset(MDPDataset.load(str(dataset_file)), tmp_path / "disk")
    opened = []
    real = cli.load_dataset
    monkeypatch.setattr(cli, "load_dataset", lambda spec, **kw: (lambda got: (opened.append(got[0]), got)[1])(real(spec, **kw)))
    assert main(["info", str(tmp_path / "disk")]) == 0
    assert "  episodes: 6\n" in capsys.readouterr().out
    assert main(["fit", str(tmp_path / "disk"), "dqn", "batch_size=8", "encoder_factory=vector",
                 "encoder_factory.hidden_units=[8]", "--steps", "4", "--output-dir", str(tmp_path / "run"),
                 "--no-progress"]) == 0
    assert [type(d.buffer) for d in opened] == [DiskStore, DiskStore]  # sampled from the files, not loaded
    assert load_learnable(str(tmp_path / "run" / "model.d3")).grad_step == 4


def test_fit_takes_a_json_config_file(dataset_file, tmp_path):
    (tmp_path / "c.json").write_text(json.dumps({"batch_size": 4, "learning_rate": 0.01}))
    assert main(["fit", str(dataset_file), "dqn", "--config", str(tmp_path / "c.json"), "target_update_interval=5",
                 "--steps", "2", "--output-dir", str(tmp_path / "r"), "--no-progress"]) == 0
    config = load_learnable(str(tmp_path / "r" / "model.d3")).config
    assert (config.batch_size, config.learning_rate, config.target_update_interval) == (4, 0.01, 5)
    # a full config as written in params.json
    full = json.loads((tmp_path / "r" / "logs" / "params.json").read_text())["config"]
    (tmp_path / "full.json").write_text(json.dumps(full))
    assert main(["fit", str(dataset_file), "dqn", "--config", str(tmp_path / "full.json"), "--steps", "1",
                 "--output-dir", str(tmp_path / "r2"), "--no-progress"]) == 0
    assert load_learnable(str(tmp_path / "r2" / "model.d3")).config.learning_rate == 0.01


def test_info_on_dataset_and_model(dataset_file, tmp_path, capsys):
    assert main(["info", str(dataset_file)]) == 0
    out = capsys.readouterr().out
    assert "episodes: 6" in out and "transitions: 120" in out
    algo = DiscreteCQLConfig().create()
    algo.create_impl((3,), 2)
    algo.save(tmp_path / "m.d3")
    assert main(["info", str(tmp_path / "m.d3")]) == 0
    out = capsys.readouterr().out
    n_params = sum(p.numel() for p in algo.modules.parameters())
    assert "DiscreteCQL" in out and "action_size: 2 (discrete)" in out and f"parameters: {n_params}" in out


# -------------------------------------------------------------- plotting
def _write_log(directory, name, values):
    directory.mkdir(parents=True, exist_ok=True)
    lines = [f"{i + 1},{(i + 1) * 100},{float(v)!r}" for i, v in enumerate(values)]
    (directory / f"{name}.csv").write_text("\n".join(lines) + "\n")
    return directory / f"{name}.csv"


def test_plot_writes_a_non_trivial_png(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    from matplotlib.image import imread

    a = _write_log(tmp_path / "run_a", "loss", np.linspace(5.0, 1.0, 30))
    b = _write_log(tmp_path / "run_b", "loss", np.linspace(4.0, 0.5, 30) ** 2)
    png = tmp_path / "plots" / "loss.png"
    assert main(["plot", str(a), str(b), "--window", "3", "--show-steps", "--show-max", "--label", "A", "--label", "B",
                 "--xlim", "0", "3000", "--ylim", "0", "20", "--title", "losses", "--save", str(png)]) == 0
    assert f"wrote {png}" in capsys.readouterr().out
    image = imread(png)
    assert image.shape[0] >= 300 and image.shape[1] >= 500
    # drawn content, not a blank canvas: many distinct colours
    assert len(np.unique(image.reshape(-1, image.shape[-1]), axis=0)) > 20
    assert not list((tmp_path / "plots").glob("*.tmp*"))


def test_plot_all_and_stats(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    run = tmp_path / "run"
    for name in ("loss", "td_error", "environment"):
        _write_log(run, name, np.arange(5, dtype=float))
    assert main(["plot-all", str(run), "--save", str(tmp_path / "all.png")]) == 0
    assert (tmp_path / "all.png").stat().st_size > 10000
    assert main(["stats", str(run / "loss.csv")]) == 0
    out = capsys.readouterr().out
    assert "max: 4" in out and "step: 500" in out


def test_moving_average_matches_a_loop():
    from offrl.plotting import moving_average

    values = np.random.default_rng(0).normal(size=50)
    for window in (1, 2, 7, 60):
        expected = [np.mean(values[max(0, i - window + 1): i + 1]) for i in range(len(values))]
        np.testing.assert_allclose(moving_average(values, window), expected)


# ---------------------------------------------------------------- errors
@pytest.mark.parametrize("args, message", [
    (["fit", "MISSING.h5", "dqn"], "MISSING.h5: no such dataset file"),
    (["fit", "{data}", "nope"], "unknown algorithm 'nope'; valid: awac, bc, bcq"),
    (["fit", "{data}", "dqn", "bogus=1"], "unknown config key 'bogus' in DQNConfig; valid:"),
    (["fit", "{data}", "dqn", "batch_size"], "malformed override 'batch_size'"),
    (["fit", "{data}", "random_policy"], "random_policy only acts and cannot be trained"),
    (["evaluate", "missing.d3", "--env", "CartPole-v1"], "missing.d3: no such model file"),
    (["info", "nothing-here"], "nothing-here: no such file or directory"),
    (["plot", "missing.csv", "--save", "x.png"], "missing.csv: no such metric file"),
    (["plot-all", "{tmp}", "--save", "x.png"], "holds no metric CSV files"),
    (["fit", "{data}", "discrete_cql", "--env", "Pendulum-v1", "--steps", "1", "--output-dir", "{tmp}/run"],
     "is a discrete-action model (2 actions), but Pendulum-v1 has a continuous action space of size 1"),
])
def test_user_errors_print_one_line_and_exit_2(args, message, dataset_file, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    args = [a.replace("{data}", str(dataset_file)).replace("{tmp}", str(empty)) for a in args]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_subprocess_exit_codes_usage_errors_and_debug(dataset_file, tmp_path):
    bad = _run("fit", str(dataset_file), "nope")
    assert bad.returncode == 2 and bad.stderr.strip().startswith("offrl fit: error: unknown algorithm")
    assert "Traceback" not in bad.stderr
    usage = _run("fit")
    assert usage.returncode == 2
    assert usage.stderr == ("offrl fit: error: the following arguments are required: dataset, algo "
                            "(see 'offrl fit --help')\n")
    unknown = _run("frobnicate")
    assert unknown.returncode == 2 and "invalid choice" in unknown.stderr
    debug = _run("--debug", "fit", str(dataset_file), "nope")
    assert debug.returncode != 0 and "Traceback" in debug.stderr


def test_record_writes_videos(tmp_path, capsys):
    pytest.importorskip("moviepy", reason="the video extra is not installed")
    pytest.importorskip("pygame", reason="the video extra is not installed")
    from offrl.algos import DiscreteRandomPolicyConfig

    algo = DiscreteRandomPolicyConfig().create()
    algo.create_impl((4,), 2)
    algo.save(tmp_path / "m.d3")
    out = tmp_path / "videos"
    assert main(["record", str(tmp_path / "m.d3"), "--env", "CartPole-v1", "--n-episodes", "2", "--seed", "0",
                 "--out", str(out)]) == 0
    videos = sorted(os.listdir(out))
    assert videos == ["offrl-episode-0.mp4", "offrl-episode-1.mp4"]
    assert all((out / v).stat().st_size > 1000 for v in videos)
    assert "wrote 2 videos" in capsys.readouterr().out


def test_fit_evaluate_export_through_the_console(dataset_file, tmp_path):
    run = tmp_path / "run"
    fit = _run("fit", str(dataset_file), "discrete_cql", "batch_size=8", "--steps", "10", "--steps-per-epoch", "5",
               "--evaluators", "td_error,action_match", "--output-dir", str(run), "--no-progress")
    assert fit.returncode == 0, fit.stderr
    assert (run / "model.d3").is_file() and (run / "logs" / "td_error.csv").is_file()
    assert len((run / "logs" / "action_match.csv").read_text().splitlines()) == 2

    report = tmp_path / "eval.json"
    evaluate = _run("evaluate", str(run / "model.d3"), "--dataset", str(dataset_file), "--evaluators",
                    "td_error,init_value,action_match", "--ope", "fqe,wis,dr", "--fqe-steps", "20", "--seed", "0",
                    "--json", str(report))
    assert evaluate.returncode == 0, evaluate.stderr
    figures = json.loads(report.read_text())
    assert {"td_error", "init_value", "action_match", "fqe", "fqe_lower", "fqe_upper", "wis", "wis_lower", "dr"} <= set(figures)
    assert figures["fqe_lower"] <= figures["fqe"] <= figures["fqe_upper"]
    # the figures equal the library's own evaluators on the same model and data
    from offrl.metrics import DiscreteActionMatchEvaluator, TDErrorEvaluator

    algo = load_learnable(str(run / "model.d3"))
    dataset = MDPDataset.load(str(dataset_file))
    assert figures["td_error"] == pytest.approx(TDErrorEvaluator()(algo, dataset), rel=1e-5)
    assert figures["action_match"] == pytest.approx(DiscreteActionMatchEvaluator()(algo, dataset))

    export = _run("export", str(run / "model.d3"), str(tmp_path / "policy.onnx"))
    assert export.returncode == 0, export.stderr
    x = dataset.to_arrays()["observations"][:16]
    np.testing.assert_array_equal(load_onnx_policy(tmp_path / "policy.onnx").predict(x), algo.predict(x))


def test_evaluate_in_an_environment(tmp_path, capsys):
    from offrl.algos import DiscreteRandomPolicyConfig

    algo = DiscreteRandomPolicyConfig().create()
    algo.create_impl((4,), 2)
    algo.save(tmp_path / "m.d3")
    assert main(["evaluate", str(tmp_path / "m.d3"), "--env", "CartPole-v1", "--n-trials", "3", "--seed", "0",
                 "--json", str(tmp_path / "r.json")]) == 0
    figures = json.loads((tmp_path / "r.json").read_text())
    assert 8 <= figures["environment_return_min"] <= figures["environment_return_mean"] <= figures["environment_return_max"] <= 500
    assert main(["evaluate", str(tmp_path / "m.d3"), "--env", "Nope-v9"]) == 2
    assert "cannot make environment 'Nope-v9'" in capsys.readouterr().err
    assert main(["evaluate", str(tmp_path / "m.d3")]) == 2
    assert "give --dataset" in capsys.readouterr().err


def test_missing_matplotlib_is_one_line_with_the_extra_to_install(tmp_path, monkeypatch, capsys):
    import builtins

    csv_path = _write_log(tmp_path / "run", "loss", [1.0, 2.0])
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    assert main(["plot", str(csv_path), "--save", str(tmp_path / "x.png")]) == 2
    assert "plotting needs matplotlib: pip install 'offrl[plot]'" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


# ------------------------------------------------------------ fast startup
def test_importing_the_cli_does_not_load_torch():
    code = "import sys, offrl, offrl.cli; offrl.cli.build_parser(); print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy', 'gymnasium')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_offrl_help_in_a_subprocess_exits_0():
    import shutil

    command = [shutil.which("offrl")] if shutil.which("offrl") else [sys.executable, "-m", "offrl.cli"]
    top = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=120)
    assert top.returncode == 0, top.stderr
    for name in ("quickstart", "fit", "evaluate", "export", "record", "play"):
        assert name in top.stdout
    record = subprocess.run([*command, "record", "--help"], capture_output=True, text=True, timeout=120)
    assert record.returncode == 0 and "--env-header" in record.stdout and "--env-id" in record.stdout


def test_package_attributes_load_on_first_use():
    code = ("import sys, offrl; names = sorted(offrl.__all__); loaded = 'torch' in sys.modules; "
            "from offrl import load_learnable; import offrl.algos as a; "
            "print(loaded, offrl.algos.CQLConfig is a.CQLConfig, callable(load_learnable), offrl.ActionSpace.DISCRETE.name, "
            "set(names) <= set(dir(offrl)), 'seed' in dir(offrl))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True", "True", "DISCRETE", "True", "True"]
    import offrl

    assert sorted(offrl.__all__) == sorted(["__version__", "seed", "ActionSpace", "LoggingStrategy", "PositionEncodingType",
                                            "load_learnable", "algos", "dataset", "datasets", "distributed", "envs", "logging", "metrics",
                                            "models", "ope", "optimizers", "preprocessing", "types"])
    with pytest.raises(AttributeError, match="module 'offrl' has no attribute 'nothing_here'"):
        offrl.nothing_here


def test_lazy_submodule_that_does_not_exist_is_an_attribute_error(monkeypatch):
    import offrl

    assert {"envs", "types", "optimizers"} <= offrl._LAZY_MODULES
    monkeypatch.setattr(offrl, "_LAZY_MODULES", offrl._LAZY_MODULES | {"not_a_module_here"})
    assert not hasattr(offrl, "not_a_module_here")
    assert offrl.metrics is sys.modules["offrl.metrics"]


def test_load_learnable_from_a_fresh_interpreter_finds_the_algorithms(tmp_path):
    algo = SACConfig().create()
    algo.create_impl((3,), 2)
    algo.save(tmp_path / "m.d3")
    code = f"import offrl; print(type(offrl.load_learnable({str(tmp_path / 'm.d3')!r})).__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "SAC", out.stderr


# ---------------------------------------------------------------- hardening
def _saved(tmp_path, config, observation_shape, action_size, name="m.d3"):
    algo = config.create()
    algo.create_impl(observation_shape, action_size)
    algo.save(tmp_path / name)
    return str(tmp_path / name)


@pytest.mark.parametrize("kind, observation_shape, action_size, env_id, message", [
    ("discrete", (4,), 7, "CartPole-v1", "chooses among 7 discrete actions, but CartPole-v1 has 2 (Discrete(2))"),
    ("continuous", (4,), 1, "CartPole-v1", "is a continuous-action model (action_size 1), but CartPole-v1 has a discrete action space"),
    ("discrete", (3,), 2, "Pendulum-v1", "is a discrete-action model (2 actions), but Pendulum-v1 has a continuous action space of size 1"),
    ("sac", (3,), 2, "Pendulum-v1", "outputs actions of size 2, but Pendulum-v1 expects shape (1,)"),
    ("discrete", (5,), 2, "CartPole-v1", "takes observations of shape (5,), but CartPole-v1 gives (4,)"),
])
def test_evaluate_refuses_a_model_that_does_not_fit_the_environment(kind, observation_shape, action_size, env_id, message,
                                                                    tmp_path, capsys):
    from offrl.algos import DiscreteRandomPolicyConfig, RandomPolicyConfig

    config = {"discrete": DiscreteRandomPolicyConfig(), "continuous": RandomPolicyConfig(), "sac": SACConfig()}[kind]
    path = _saved(tmp_path, config, observation_shape, action_size)
    assert main(["evaluate", path, "--env", env_id, "--n-trials", "1"]) == 2
    err = capsys.readouterr().err
    assert err == f"offrl evaluate: error: {path} {message}" + err.split(message, 1)[1]
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_record_and_play_check_the_environment_and_their_options(tmp_path, capsys):
    from offrl.algos import DiscreteRandomPolicyConfig

    path = _saved(tmp_path, DiscreteRandomPolicyConfig(), (4,), 7)
    assert main(["play", path, "--env-id", "CartPole-v1"]) == 2
    assert "chooses among 7 discrete actions, but CartPole-v1 has 2" in capsys.readouterr().err
    assert main(["play", path]) == 2
    assert "give --env-id ENV_ID (e.g. CartPole-v1) or --env-header CODE" in capsys.readouterr().err
    assert main(["play", path, "--env-id", "CartPole-v1", "--env-header", "env = 1"]) == 2
    assert "give either --env-id or --env-header, not both" in capsys.readouterr().err
    assert main(["play", path, "--env-header", "x = 1"]) == 2
    assert "--env-header must define a variable named env" in capsys.readouterr().err
    assert main(["play", path, "--env-header", "env = 3"]) == 2
    assert capsys.readouterr().err == ("offrl play: error: --env-header defined env as a int, not a gymnasium environment "
                                       "(it has no action_space, observation_space, reset, step)\n")
    shifted = "import gymnasium; env = gymnasium.make('CartPole-v1'); env.action_space = gymnasium.spaces.Discrete(7, start=1)"
    assert main(["play", path, "--env-header", shifted]) == 2
    assert "chooses actions 0..6, but the actions of CartPole-v1 start at 1 (Discrete(7, start=1))" in capsys.readouterr().err
    assert main(["play", path, "--env-header", "env = 1 / 0"]) == 2
    assert capsys.readouterr().err == "offrl play: error: --env-header failed: ZeroDivisionError: division by zero\n"
    assert main(["play", path, "--env-header", "import gymnasium; env = gymnasium.make('CartPole-v1')"]) == 2
    assert "chooses among 7 discrete actions, but CartPole-v1 has 2" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["record", path, "--env-id", "CartPole-v1", "--epsilon", "1.5"])
    assert exc.value.code == 2
    assert "argument --epsilon: expected a number in [0, 1], got '1.5'" in capsys.readouterr().err


def test_play_runs_episodes_with_env_header_and_epsilon(tmp_path, capsys):
    from offrl.algos import DiscreteRandomPolicyConfig

    path = _saved(tmp_path, DiscreteRandomPolicyConfig(), (4,), 2)
    header = "import gymnasium; env = gymnasium.make('CartPole-v1')"
    assert main(["play", path, "--env-header", header, "--n-episodes", "2", "--seed", "3", "--epsilon", "0.5",
                 "--target-return", "100", "--use-gymnasium"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["episode 0", "episode 1", "score"]
    returns = [float(line.split("return ")[1]) for line in lines[:2]]
    assert float(lines[2].split(": ")[1]) == pytest.approx(sum(returns) / 2)
    assert "--target-return applies to Decision-Transformer models" in captured.err


@pytest.mark.parametrize("args, message", [
    (["evaluate", "{model}", "--env", "::::"], "offrl evaluate: error: --env '::::' is not a gymnasium environment id "
     "(expected [module:][namespace/]Name-vN, e.g. CartPole-v1)"),
    (["fit", "{data}", "dqn", "--env", "::::"], "offrl fit: error: --env '::::' is not a gymnasium environment id"),
    (["evaluate", "{model}", "--env", "nomodule/x:Y-v0"], "offrl evaluate: error: --env 'nomodule/x:Y-v0' is not a gymnasium"),
    (["evaluate", "{model}", "--env", "nomodule:Y-v0"], "offrl evaluate: error: cannot make environment 'nomodule:Y-v0': "),
    (["fit", "{data}", "dqn", "--seed", "2**64"],
     "offrl fit: error: argument --seed: expected an integer in [0, 2**63 - 1], got '2**64'"),
    (["evaluate", "{model}", "--env", "CartPole-v1", "--seed", str(2**64)],
     "offrl evaluate: error: argument --seed: expected an integer in [0, 2**63 - 1], got 18446744073709551616"),
    (["evaluate", "{model}", "--env", "CartPole-v1", "--seed", "-1"], "argument --seed: expected an integer in [0, 2**63 - 1], got -1"),
    (["evaluate", "{model}", "--env", "CartPole-v1", "--epsilon", "nan"], "argument --epsilon: expected a number in [0, 1], got 'nan'"),
    (["plot", "{binary}", "--save", "{tmp}/x.png"], "offrl plot: error: {binary}: not a metric CSV (binary content: a NUL byte at offset 4)"),
    (["stats", "{latin}"], "offrl stats: error: {latin}: not a metric CSV (binary content: undecodable byte at offset 2)"),
    (["fit", "{data}", "dqn", "--config", "{binary}"], "offrl fit: error: {binary}: not UTF-8 text"),
    (["evaluate", "{model}", "--env", "CartPole-v1", "--json", "{tmp}"], "offrl evaluate: error: --json {tmp}: is a directory"),
])
def test_bad_command_lines_are_one_line_exit_2_in_a_subprocess(args, message, dataset_file, tmp_path):
    from offrl.algos import DiscreteRandomPolicyConfig

    model = _saved(tmp_path, DiscreteRandomPolicyConfig(), (4,), 2)
    (tmp_path / "binary.csv").write_bytes(b"\x89PNG\x00\x01\x02")
    (tmp_path / "latin.csv").write_bytes(b"1,\xff,3\n")
    fill = {"{model}": model, "{binary}": str(tmp_path / "binary.csv"), "{latin}": str(tmp_path / "latin.csv"),
            "{tmp}": str(tmp_path), "{data}": str(dataset_file)}
    for key, value in fill.items():
        args = [a.replace(key, value) for a in args]
        message = message.replace(key, value)
    out = _run(*args)
    assert out.returncode == 2
    assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    assert not os.path.exists(str(tmp_path) + ".tmp")
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".offrl-")]


def test_json_report_into_a_directory_leaves_nothing_behind(tmp_path, capsys):
    from offrl.algos import DiscreteRandomPolicyConfig

    model = _saved(tmp_path, DiscreteRandomPolicyConfig(), (4,), 2)
    before = sorted(os.listdir(tmp_path))
    assert main(["evaluate", model, "--env", "CartPole-v1", "--n-trials", "1", "--json", str(tmp_path)]) == 2
    assert "--json" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == before and not os.path.exists(str(tmp_path) + ".tmp")


def test_concurrent_json_reports_to_one_path_never_fail(tmp_path):
    import threading

    from offrl.cli.common import write_json as _write_json

    path = str(tmp_path / "sub" / "report.json")
    errors = []

    def writer(k: int) -> None:
        try:
            for i in range(25):
                _write_json(path, {"writer": k, "i": i, "pad": "x" * 5000})
        except Exception as e:  # noqa: BLE001 - collected and asserted on below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    data = json.loads(open(path).read())
    assert data["i"] == 24 and data["writer"] in range(4)
    assert os.listdir(tmp_path / "sub") == ["report.json"]


def test_fit_resume_continues_an_interrupted_run_exactly(dataset_file, tmp_path, capsys):
    """``offrl fit --resume DIR`` after a run stopped at its first checkpoint
    gives the model of the uninterrupted run (one thread, same seed)."""
    import torch

    common = ["--threads", "1", "fit", str(dataset_file), "dqn", "batch_size=8", "encoder_factory=vector",
              "--steps-per-epoch", "10", "--seed", "4", "--no-progress"]
    assert main([*common, "--steps", "30", "--output-dir", str(tmp_path / "full")]) == 0
    assert main([*common, "--steps", "10", "--output-dir", str(tmp_path / "part")]) == 0  # "interrupted" after epoch 1
    assert main([*common, "--steps", "30", "--resume", str(tmp_path / "part")]) == 0
    full = load_learnable(tmp_path / "full" / "model.d3")
    resumed = load_learnable(tmp_path / "part" / "model.d3")
    assert resumed.grad_step == full.grad_step == 30
    for module, tensors in full.get_state()["modules"].items():
        for key, value in tensors.items():
            torch.testing.assert_close(value, resumed.get_state()["modules"][module][key], rtol=0, atol=0)
    rows = (tmp_path / "part" / "logs" / "loss.csv").read_text().splitlines()
    assert [int(r.split(",")[1]) for r in rows] == [10, 20, 30]
    assert rows == (tmp_path / "full" / "logs" / "loss.csv").read_text().splitlines()
    capsys.readouterr()
    # resuming a finished run trains no more and keeps its model
    assert main([*common, "--steps", "30", "--resume", str(tmp_path / "part")]) == 0
    assert "had already finished its 30 steps" in capsys.readouterr().out
    assert load_learnable(tmp_path / "part" / "model.d3").grad_step == 30
    assert main(["fit", str(dataset_file), "dqn", "--resume", str(tmp_path / "nothing")]) == 2
    assert "--resume " in capsys.readouterr().err
    assert main(["fit", str(dataset_file), "dqn", "--resume", str(tmp_path / "part"), "--output-dir", str(tmp_path)]) == 2
    assert "give no other --output-dir" in capsys.readouterr().err


# ------------------------------------------------- issue 28: nested JSON, metadata-only info, expansion
def _one_line_error(capsys, *fragments):
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in err, err
    return err


def test_deeply_nested_json_overrides_and_config_files_are_one_line_errors(dataset_file, tmp_path, capsys):
    deep = "[" * 100_000 + "]" * 100_000  # a RecursionError traceback before
    assert main(["fit", str(dataset_file), "dqn", "encoder_factory=vector", "encoder_factory.hidden_units=" + deep]) == 2
    _one_line_error(capsys, "offrl fit: error: override encoder_factory.hidden_units: JSON nested 100000 levels deep")
    (tmp_path / "deep.json").write_text('{"batch_size": ' + deep + "}")
    assert main(["fit", str(dataset_file), "dqn", "--config", str(tmp_path / "deep.json")]) == 2
    _one_line_error(capsys, f"offrl fit: error: {tmp_path / 'deep.json'}: JSON nested 100001 levels deep")


def _declaring_bomb(path, rows):
    """An offrl file whose gzip-compressed observations were never written:
    ``rows`` declared, no bytes stored for them."""
    import h5py

    MDPDataset(np.zeros((4, 3), np.float32), np.zeros(4, np.int64), np.zeros(4), np.r_[0, 0, 0, 1]).dump(path)
    with h5py.File(path, "r+") as h5:
        for key, width, dtype in (("observations_0", 8, np.float32), ("actions", 1, np.int64), ("rewards", 1, np.float32)):
            del h5[key]
            h5.create_dataset(key, shape=(rows, width), dtype=dtype, compression="gzip", chunks=(4096, width))
        h5["episode_ends"][0] = rows
    return path


def test_info_reads_metadata_only(tmp_path, capsys):
    path = _declaring_bomb(tmp_path / "bomb.h5", 10**12)  # a read would need 68 TB: refused, or minutes and gigabytes
    assert path.stat().st_size < 20_000
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "  steps: 1000000000000\n" in out and "  observation_signature: float32(8,)\n" in out
    assert "  size: 44 TB in memory, 18 B on disk (2.44e+12x)\n" in out  # the episode table is all it stores
    assert main(["info", "-v", str(path)]) == 2  # loading it is refused before anything is read
    _one_line_error(capsys, "observations_0 declares 10^12 rows")


def test_fit_refuses_an_expansion_beyond_the_bound_unless_raised(tmp_path, capsys, monkeypatch):
    from offrl import _safety

    monkeypatch.setattr(_safety, "EXPANSION_FLOOR", 0)  # a small bomb stands for a large one
    path = _declaring_bomb(tmp_path / "bomb.h5", 4096)
    common = ["dqn", "batch_size=4", "encoder_factory=vector", "encoder_factory.hidden_units=[4]", "--steps", "1",
              "--no-progress"]
    assert main(["fit", str(path), *common, "--output-dir", str(tmp_path / "r1")]) == 2
    _one_line_error(capsys, f"offrl fit: error: {path}: its arrays expand to", "at most 1000x unless asked")
    assert not (tmp_path / "r1" / "model.d3").exists()
    assert main(["fit", str(path), *common, "--output-dir", str(tmp_path / "r2"), "--max-expansion", "none"]) == 0
    assert (tmp_path / "r2" / "model.d3").exists()
    with pytest.raises(SystemExit) as exit_:  # argparse's usage error: one line, status 2
        main(["fit", str(path), *common, "--max-expansion", "0.5"])
    assert exit_.value.code == 2
    _one_line_error(capsys, "argument --max-expansion: expected a number >= 1 or 'none', got '0.5'")


def test_a_d3rlpy_dump_is_read_by_fit_and_info(tmp_path, capsys):
    import h5py

    path = tmp_path / "d3.h5"
    with h5py.File(path, "w") as h5:  # d3rlpy 2.1+'s dump layout: it went to the D4RL reader before
        h5.create_dataset("version", data="2.1")
        h5.create_dataset("columns", data=["observations", "actions", "rewards", "terminated"])
        h5.create_dataset("num_episodes", data=1)
        h5.create_dataset("observations_0", data=np.zeros((6, 3), np.float32))
        h5.create_dataset("actions_0", data=np.array([[0], [1], [0], [1], [0], [1]]))
        h5.create_dataset("rewards_0", data=np.ones((6, 1), np.float32))
        h5.create_dataset("terminated_0", data=True)
    assert main(["info", str(path)]) == 0
    assert "  format: d3rlpy dataset, version 2.1\n  episodes: 1\n" in capsys.readouterr().out
    assert main(["fit", str(path), "dqn", "batch_size=2", "encoder_factory=vector", "encoder_factory.hidden_units=[4]",
                 "--steps", "1", "--no-progress", "--output-dir", str(tmp_path / "run")]) == 0


def test_config_sizes_beyond_memory_are_one_line_errors(dataset_file, tmp_path, capsys):
    assert main(["fit", str(dataset_file), "dqn", "n_critics=10000000", "--output-dir", str(tmp_path / "r")]) == 2
    _one_line_error(capsys, "offrl fit: error: DQN: the config declares networks of", "n_critics=10000000",
                    "with gradients and optimizer state; this machine has")
    assert main(["fit", str(dataset_file), "dqn", "batch_size=100000000", "--steps", "1", "--no-progress",
                 "--output-dir", str(tmp_path / "r")]) == 2
    _one_line_error(capsys, "offrl fit: error: DQN: one training step needs about", "batch_size=100000000")
    assert not (tmp_path / "r" / "model.d3").exists()


def test_an_error_in_a_config_file_names_the_file(dataset_file, tmp_path, capsys):
    (tmp_path / "c.json").write_text('{"a": 1}')
    assert main(["fit", str(dataset_file), "dqn", "--config", str(tmp_path / "c.json")]) == 2
    _one_line_error(capsys, f"offrl fit: error: {tmp_path / 'c.json'}: unknown config key 'a' in DQNConfig")
    (tmp_path / "c.json").write_text('{"batch_size": -1}')
    assert main(["fit", str(dataset_file), "dqn", "--config", str(tmp_path / "c.json")]) == 2
    _one_line_error(capsys, f"{tmp_path / 'c.json'}: invalid config for DQNConfig: batch_size must be a positive int")


def test_evaluate_reports_d4rl_normalised_returns_of_a_locomotion_task(tmp_path, capsys):
    pytest.importorskip("mujoco", reason="HalfCheetah-v5 needs MuJoCo (the mujoco extra)")
    from offrl import _scores
    from offrl.algos import BCConfig

    rng = np.random.default_rng(0)
    data = MDPDataset(rng.normal(size=(40, 17)).astype(np.float32), rng.uniform(-1, 1, size=(40, 6)).astype(np.float32),
                      np.ones(40, dtype=np.float32), (np.arange(40) % 20 == 19).astype(np.float32))
    algo = BCConfig(encoder_factory=VectorEncoderFactory(hidden_units=[8])).create()
    algo.build_with_dataset(data)
    algo.save(str(tmp_path / "model.d3"))
    out = tmp_path / "report.json"
    assert main(["evaluate", str(tmp_path / "model.d3"), "--env", "HalfCheetah-v5", "--n-trials", "1",
                 "--normalize", "halfcheetah-medium-v0", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    random_return, expert_return = _scores.REFERENCE_RETURNS["halfcheetah"]
    for key in ("environment_return_mean", "environment_return_min", "environment_return_max"):
        expected = 100.0 * (report[key] - random_return) / (expert_return - random_return)
        assert report[f"{key}_normalized"] == pytest.approx(expected, rel=1e-12)
    assert "environment_return_mean_normalized" in capsys.readouterr().out


def test_evaluate_refuses_an_unknown_normalisation_name_before_any_work(tmp_path, capsys):
    assert main(["evaluate", str(tmp_path / "missing.d3"), "--env", "CartPole-v1", "--normalize", "cartpole"]) == 2
    err = capsys.readouterr().err
    assert "--normalize cartpole: no reference returns for 'cartpole'; known: hopper, halfcheetah, walker2d, hopper-random-v0" in err
