"""d3rlpy docs, "Command Line Interface": ``plot``, ``plot-all``, ``export``,
``record`` and ``play`` with d3rlpy's options, run as ``offrl <command>``
(in-process through ``offrl.cli.main``, so the suite stays fast).

Changes other than the command name (marked ``# docs:``): the Atari and
PyBullet environments of the examples -> CartPole; ``play`` gets its
environment from ``--env-header`` (the docs' ``--env-id`` opens a window).
``d3rlpy install <name>`` has no offrl counterpart (extras are installed with
pip: see docs/COMPATIBILITY.md).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import offrl
from offrl.cli import main


@pytest.fixture
def run_dir(cartpole, workdir):
    """A run directory written by fit (metric CSVs and model_<step>.d3)."""
    dataset, _ = cartpole
    dqn = offrl.algos.DQNConfig().create()
    dqn.fit(dataset, n_steps=6, n_steps_per_epoch=2, experiment_name="CQL_20201224224314", with_timestamp=False,
            logger_adapter=offrl.logging.FileAdapterFactory(root_dir="d3rlpy_logs"), show_progress=False)
    return workdir / "d3rlpy_logs" / "CQL_20201224224314"


def test_plot_with_options(run_dir, workdir, monkeypatch) -> None:
    pytest.importorskip("matplotlib", reason="plot needs matplotlib")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    csv = str(run_dir / "loss.csv")
    code = main(["plot", csv, csv, "--window", "2", "--show-steps", "--show-max", "--label", "a", "--label", "b",
                 "--xlim", "0", "10", "--ylim", "-1", "5", "--title", "loss", "--save", "plot.png"])
    assert code == 0
    assert (workdir / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_all(run_dir, workdir, monkeypatch) -> None:
    pytest.importorskip("matplotlib", reason="plot-all needs matplotlib")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    assert main(["plot-all", str(run_dir), "--save", "all.png"]) == 0
    assert (workdir / "all.png").stat().st_size > 0


def test_export(run_dir, workdir) -> None:
    ort = pytest.importorskip("onnxruntime", reason="checking the exported file needs onnxruntime")
    model = run_dir / "model_6.d3"
    assert main(["export", str(model), "policy.onnx"]) == 0
    algo = offrl.load_learnable(str(model))
    session = ort.InferenceSession("policy.onnx", providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    (out,) = session.run(None, {session.get_inputs()[0].name: x})
    np.testing.assert_array_equal(out.reshape(-1), algo.predict(x))
    assert main(["export", str(model), "policy.pt"]) == 0
    assert (workdir / "policy.pt").stat().st_size > 0


def _model(workdir):
    dqn = offrl.algos.DQNConfig().create()
    dqn.build_with_env(gym.make("CartPole-v1"))
    dqn.save(str(workdir / "model_100.d3"))
    return str(workdir / "model_100.d3")


def test_record_with_env_id_and_epsilon(workdir, capsys) -> None:
    pytest.importorskip("moviepy", reason="record writes videos with moviepy")
    pytest.importorskip("pygame", reason="CartPole renders frames with pygame")
    model = _model(workdir)
    # docs: --env-id HopperBulletEnv-v0
    code = main(["record", model, "--env-id", "CartPole-v1", "--n-episodes", "1", "--epsilon", "0.1", "--out", "videos"])
    assert code == 0
    assert len(list((workdir / "videos").glob("*.mp4"))) == 1
    assert "episode 0: return" in capsys.readouterr().out


def test_play_with_env_header(workdir, capsys) -> None:
    model = _model(workdir)
    # docs: --env-header 'import gym; from d3rlpy.envs import Atari; env = Atari(gym.make(...), is_eval=True)'
    header = 'import gymnasium; env = gymnasium.make("CartPole-v1")'
    assert main(["play", model, "--env-header", header, "--n-episodes", "2"]) == 0
    out = capsys.readouterr().out
    assert out.count("episode ") == 2 and "score:" in out
