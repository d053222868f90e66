"""Data-parallel training (``create(device, enable_ddp=True)``) under
torchrun: 2 CPU processes (gloo) on a tiny dataset, the launch error
outside torchrun, a rank that dies, ``offrl fit --nproc``, and the
sampling helpers against naive loops."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import offrl
from offrl.algos import DQNConfig
from offrl.training import distributed
from offrl.logging import NoopAdapterFactory
from offrl.models import VectorEncoderFactory

TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK")

#: the script every rank runs (and one process runs without DDP for the reference)
SCRIPT = textwrap.dedent('''
    import os, sys
    import numpy as np, torch, offrl
    from offrl.algos import DQNConfig
    from offrl.training.distributed import global_batches
    from offrl.logging import FileAdapterFactory, NoopAdapterFactory
    from offrl.models import VectorEncoderFactory

    mode, out = sys.argv[1], sys.argv[2]
    ddp = mode != "one"
    rank = int(os.environ.get("RANK", 0))
    rng = np.random.default_rng(0)
    n = 200
    data = offrl.dataset.MDPDataset(rng.normal(size=(n, 3)).astype(np.float32), rng.integers(0, 2, n),
                                    rng.normal(size=n).astype(np.float32), (np.arange(n) % 20 == 19).astype(float),
                                    action_size=2)
    for sampling in ("global", "shard"):
        if sampling == "shard" and not ddp:
            break
        offrl.seed(0)
        algo = DQNConfig(batch_size=8, encoder_factory=VectorEncoderFactory(hidden_units=[8]),
                         target_update_interval=5).create(enable_ddp=ddp)
        logger = FileAdapterFactory(os.path.join(out, f"logs_{sampling}")) if sampling == "shard" else NoopAdapterFactory()

        def callback(algo, epoch, step):
            if mode == "kill" and rank == 1 and step == 5:
                os._exit(3)

        algo.fit(global_batches(data) if sampling == "global" else data, 20, 10, logger_adapter=logger,
                 show_progress=False, experiment_name="run", with_timestamp=False, callback=callback)
        weights = torch.cat([p.detach().reshape(-1) for p in algo.modules.parameters()])
        torch.save(weights, os.path.join(out, f"w_{mode}_{sampling}_{rank}.pt"))
        if sampling == "global":  # FQE of the trained DQN, data-parallel as d3rlpy's FQE(..., enable_ddp=True)
            offrl.seed(1)
            fqe = offrl.ope.DiscreteFQE(algo, offrl.ope.DiscreteFQEConfig(
                batch_size=8, encoder_factory=VectorEncoderFactory(hidden_units=[8]), target_update_interval=5),
                "cpu:0", ddp)
            fqe.fit(global_batches(data), 10, 5, logger_adapter=NoopAdapterFactory(), show_progress=False)
            weights = torch.cat([p.detach().reshape(-1) for p in fqe.modules.parameters()])
            torch.save(weights, os.path.join(out, f"f_{mode}_{rank}.pt"))
''')


def _clean_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_ENV}
    env["OMP_NUM_THREADS"] = "1"
    env["OFFRL_DDP_TIMEOUT"] = "60"
    return env


def _no_torchrun(monkeypatch) -> None:
    for key in TORCHRUN_ENV:
        monkeypatch.delenv(key, raising=False)


def test_enable_ddp_outside_torchrun_says_how_to_launch(monkeypatch):
    _no_torchrun(monkeypatch)
    with pytest.raises(ValueError, match=r"torchrun --nproc_per_node=N script\.py"):
        DQNConfig().create(enable_ddp=True)
    with pytest.raises(ValueError, match="torchrun"):
        offrl.algos.DQN(DQNConfig(), "cpu:0", True)
    with pytest.raises(ValueError, match=r"no torch\.distributed environment.*torchrun"):
        distributed.init_process_group("gloo")
    with pytest.raises(ValueError, match="backend must be 'gloo', 'nccl' or 'mpi', got 'tcp'"):
        distributed.init_process_group("tcp")


def test_timeout_variable_is_checked(monkeypatch):
    monkeypatch.setenv(distributed.TIMEOUT_ENV, "soon")
    with pytest.raises(ValueError, match="OFFRL_DDP_TIMEOUT must be a number of seconds, got 'soon'"):
        distributed._timeout()
    monkeypatch.setenv(distributed.TIMEOUT_ENV, "-1")
    with pytest.raises(ValueError, match="must be > 0"):
        distributed._timeout()


def test_shard_indices_split_episodes_by_rank():
    for n, world in [(5, 2), (7, 3), (4, 4)]:
        parts = [distributed._shard_indices(n, r, world) for r in range(world)]
        expected = [[i for i in range(n) if i % world == r] for r in range(world)]  # the naive loop
        assert [p.tolist() for p in parts] == expected
    with pytest.raises(ValueError, match="the dataset has 1 episodes, fewer than the 2 ranks"):
        distributed._shard_indices(1, 0, 2)


def test_slice_rows_keeps_each_ranks_rows():
    batch = offrl.dataset.TransitionMiniBatch(
        observations=[np.arange(8.0).reshape(4, 2), np.arange(4.0).reshape(4, 1)],
        actions=np.arange(4).reshape(4, 1), rewards=np.arange(4.0).reshape(4, 1) * 10,
        next_observations=[np.arange(8.0).reshape(4, 2) + 1, np.arange(4.0).reshape(4, 1) + 1],
        next_actions=np.arange(4).reshape(4, 1), terminals=np.zeros((4, 1)), intervals=np.ones((4, 1)))
    part = distributed._slice_rows(batch, 2, 4)
    assert part.observations[0].tolist() == [[4.0, 5.0], [6.0, 7.0]]
    assert part.observations[1].tolist() == [[2.0], [3.0]]
    assert part.rewards.tolist() == [[20.0], [30.0]]
    assert part.actions.tolist() == [[2], [3]]
    assert part.weights is None and part.rewards_to_go is None


def _same_in_a_one_rank_group(train, tmp_path) -> None:
    """``train(ddp)``'s weights without DDP, then with it in a gloo process group of one: equal."""
    import torch.distributed as dist

    expected = train(False)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        got = train(True)
    finally:
        dist.destroy_process_group()
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_one_rank_process_group_trains_like_one_process(tmp_path):
    """In a process group of one, DDP changes nothing: same weights as without it."""
    data = offrl.dataset.MDPDataset(np.random.default_rng(1).normal(size=(40, 3)).astype(np.float32),
                                    np.arange(40) % 2, np.ones(40, np.float32), (np.arange(40) % 10 == 9), action_size=2)

    def train(ddp: bool) -> torch.Tensor:
        offrl.seed(3)
        algo = DQNConfig(batch_size=4, encoder_factory=VectorEncoderFactory(hidden_units=[4])).create(enable_ddp=ddp)
        assert algo.enable_ddp is ddp
        algo.fit(distributed.global_batches(data), 6, 3, logger_adapter=NoopAdapterFactory(), show_progress=False)
        return torch.cat([p.detach().reshape(-1) for p in algo.modules.parameters()])

    _same_in_a_one_rank_group(train, tmp_path)


def test_fqe_in_a_one_rank_process_group_trains_like_one_process(tmp_path):
    """FQE's ``enable_ddp`` (d3rlpy's positional fourth argument): averaged
    optimizer steps, the held-out split taken under the global-batch
    marker; in a group of one, the weights of one process."""
    from offrl.ope import DiscreteFQE, DiscreteFQEConfig
    from offrl.training.distributed import _AveragedStep

    rng = np.random.default_rng(2)
    data = offrl.dataset.MDPDataset(rng.normal(size=(100, 3)).astype(np.float32), np.arange(100) % 2,
                                    rng.normal(size=100).astype(np.float32), (np.arange(100) % 10 == 9), action_size=2)
    offrl.seed(0)
    policy = DQNConfig(encoder_factory=VectorEncoderFactory(hidden_units=[4])).create()
    policy.build_with_dataset(data)

    def train(ddp: bool) -> torch.Tensor:
        offrl.seed(3)
        fqe = DiscreteFQE(policy, DiscreteFQEConfig(batch_size=4, encoder_factory=VectorEncoderFactory(hidden_units=[4])),
                          "cpu:0", ddp)
        assert fqe.enable_ddp is ddp
        fqe.fit(distributed.global_batches(data), 6, 3, logger_adapter=NoopAdapterFactory(), show_progress=False)
        assert isinstance(vars(fqe.optimizers["optim"]).get("step"), _AveragedStep) is ddp
        assert fqe.convergence.n_heldout_episodes == 1  # episode 9 held out, as without the marker
        return torch.cat([p.detach().reshape(-1) for p in fqe.modules.parameters()])

    _same_in_a_one_rank_group(train, tmp_path)


def _torchrun(tmp_path, mode: str, nproc: int = 2) -> subprocess.CompletedProcess:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc),
               str(script), mode, str(tmp_path)]
    return subprocess.run(command, cwd=tmp_path, env=_clean_env(), capture_output=True, text=True, timeout=300)


def test_two_ranks_under_torchrun_agree_and_match_one_process(tmp_path):
    run = _torchrun(tmp_path, "ddp")
    assert run.returncode == 0, run.stderr[-3000:]
    one = subprocess.run([sys.executable, str(tmp_path / "train.py"), "one", str(tmp_path)], cwd=tmp_path,
                         env=_clean_env(), capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr[-3000:]
    load = lambda name: torch.load(tmp_path / name)  # noqa: E731
    for sampling in ("global", "shard"):
        assert torch.equal(load(f"w_ddp_{sampling}_0.pt"), load(f"w_ddp_{sampling}_1.pt")), sampling
    # each rank trains on its half of the same global batch: the averaged gradient is the full batch's
    reference = load("w_one_global_0.pt")
    torch.testing.assert_close(load("w_ddp_global_0.pt"), reference, rtol=1e-4, atol=1e-5)
    # FQE of the trained DQN (10 of the 200 transitions held out): the same on both ranks and as one process's
    assert torch.equal(load("f_ddp_0.pt"), load("f_ddp_1.pt"))
    torch.testing.assert_close(load("f_ddp_0.pt"), load("f_one_0.pt"), rtol=1e-4, atol=1e-5)
    # sharded sampling sees other batches: the weights moved away from the reference
    assert not torch.allclose(load("w_ddp_shard_0.pt"), reference)
    # rank 0 alone logged and saved; the saved model loads in this single process
    run_dir = tmp_path / "logs_shard" / "run"
    assert sorted(p.name for p in (tmp_path / "logs_shard").iterdir()) == ["run"]
    models = sorted(run_dir.glob("model_*.d3"))
    assert [m.name for m in models] == ["model_10.d3", "model_20.d3"]
    algo = DQNConfig(batch_size=8, encoder_factory=VectorEncoderFactory(hidden_units=[8])).create()
    algo.build_with_dataset(offrl.dataset.MDPDataset(np.zeros((4, 3), np.float32), np.zeros(4, int), np.zeros(4),
                                                     np.r_[0, 0, 0, 1], action_size=2))
    algo.load_model(str(models[-1]))
    loaded = torch.cat([p.detach().reshape(-1) for p in algo.modules.parameters()])
    assert torch.equal(loaded, load("w_ddp_shard_0.pt"))


def test_a_killed_rank_is_named_by_the_others(tmp_path):
    """Ranks started by hand (no torchrun agent to kill the survivors): rank 1
    exits mid-training; rank 0 stops with an error naming rank 1."""
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = _clean_env()
    env.update(WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(20000 + os.getpid() % 20000))
    procs = [subprocess.Popen([sys.executable, str(script), "kill", str(tmp_path)], cwd=tmp_path,
                              env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in (0, 1)]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert procs[1].returncode == 3
    assert procs[0].returncode != 0
    assert "RankFailedError: rank 0: averaging the gradients of optim failed because rank 1 (process" in outputs[0], \
        outputs[0][-3000:]
    assert not list(tmp_path.glob("w_kill_*"))  # nobody finished


def test_cli_nproc_trains_under_torchrun(tmp_path):
    rng = np.random.default_rng(0)
    data = offrl.dataset.MDPDataset(rng.normal(size=(60, 3)).astype(np.float32), rng.integers(0, 2, 60),
                                    rng.normal(size=60).astype(np.float32), (np.arange(60) % 10 == 9), action_size=2)
    data.dump(str(tmp_path / "data.h5"))
    command = [sys.executable, "-m", "offrl.cli", "fit", str(tmp_path / "data.h5"), "dqn", "batch_size=4",
               "encoder_factory=vector", "encoder_factory.hidden_units=[4]", "--steps", "6", "--steps-per-epoch", "3",
               "--nproc", "2", "--no-progress", "--output-dir", str(tmp_path / "run")]
    run = subprocess.run(command, cwd=tmp_path, env=_clean_env(), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.count("trained DQN for 6 steps") == 1  # rank 0 alone reports
    model = offrl.load_learnable(str(tmp_path / "run" / "model.d3"))
    assert model.predict(np.zeros((2, 3), np.float32)).shape == (2,)


#: each rank opens the same disk dataset in place and trains on its shard (a view); the same ranks also train
#: on the in-memory dataset for the reference
DISK_SCRIPT = textwrap.dedent('''
    import json, os, sys
    import numpy as np, torch, offrl
    from offrl.algos import DQNConfig
    from offrl.training import distributed
    from offrl.dataset import DiskStore, ReplayBuffer
    from offrl.logging import NoopAdapterFactory
    from offrl.models import VectorEncoderFactory

    directory, out = sys.argv[1], sys.argv[2]
    rank = int(os.environ["RANK"])
    seen = []
    original = distributed.DDPContext.sampler

    def recording(self, dataset, algo):
        sampler = original(self, dataset, algo)
        seen.append(sampler)
        return sampler

    distributed.DDPContext.sampler = recording
    on_disk = ReplayBuffer.load(directory, in_memory=False)
    in_memory = ReplayBuffer.load(directory)
    for name, data in (("disk", on_disk), ("memory", in_memory)):
        offrl.seed(0)
        algo = DQNConfig(batch_size=8, encoder_factory=VectorEncoderFactory(hidden_units=[8]),
                         target_update_interval=5).create(enable_ddp=True)
        algo.fit(data, 12, 6, logger_adapter=NoopAdapterFactory(), show_progress=False)
        torch.save(torch.cat([p.detach().reshape(-1) for p in algo.modules.parameters()]),
                   os.path.join(out, f"w_{name}_{rank}.pt"))
    shard = seen[0].source
    full = on_disk.buffer
    facts = {"store": type(shard.buffer).__name__, "is_view": bool(getattr(shard.buffer, "is_view", False)),
             "shares_files": bool(np.shares_memory(shard.buffer.observations[0], full.observations[0])),
             "episodes": len(shard.episodes), "transitions": int(shard.transition_count),
             "first_rewards": [float(e.rewards[0, 0]) for e in shard.episodes]}
    with open(os.path.join(out, f"facts_{rank}.json"), "w") as f:
        json.dump(facts, f)
''')


def test_two_ranks_train_on_views_of_one_disk_dataset(tmp_path):
    """Each rank opens the same disk dataset with ``in_memory=False`` and
    samples its episode shard as a view of the mapped files (no copy); the
    weights agree across ranks and equal those trained from the same data in
    memory."""
    import json

    n, length = 120, 12
    rewards = np.arange(n, dtype=np.float32)  # episode i starts with reward 12 i: names the episode
    data = offrl.dataset.MDPDataset(np.random.default_rng(2).normal(size=(n, 3)).astype(np.float32), np.arange(n) % 2,
                                    rewards, (np.arange(n) % length == length - 1), action_size=2)
    offrl.dataset.dump_disk_dataset(data, str(tmp_path / "data"))
    script = tmp_path / "train_disk.py"
    script.write_text(DISK_SCRIPT)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               str(script), str(tmp_path / "data"), str(tmp_path)]
    run = subprocess.run(command, cwd=tmp_path, env=_clean_env(), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    load = lambda name: torch.load(tmp_path / name)  # noqa: E731
    assert torch.equal(load("w_disk_0.pt"), load("w_disk_1.pt"))
    torch.testing.assert_close(load("w_disk_0.pt"), load("w_memory_0.pt"), rtol=1e-5, atol=1e-6)
    for rank in (0, 1):
        facts = json.loads((tmp_path / f"facts_{rank}.json").read_text())
        # episodes rank, rank + 2, ... of the 10, as views over the same mapped column files
        assert facts["store"] == "DiskStore" and facts["is_view"] and facts["shares_files"], facts
        assert facts["episodes"] == 5 and facts["transitions"] == 5 * length
        assert facts["first_rewards"] == [float(length * i) for i in range(rank, 10, 2)]


def test_group_destroyed_at_exit_waits_for_the_others_unless_a_rank_failed(tmp_path, monkeypatch):
    """The exit hook destroys the group (an undestroyed gloo group could abort
    the process at interpreter teardown); it meets the other ranks at a
    barrier first, except after a failure, when they may never arrive."""
    import torch.distributed as dist

    barriers = []
    monkeypatch.setattr(dist, "barrier", lambda *a, **k: barriers.append(1))
    for failed, uncaught, expected in ((False, None, [1]), (True, None, []), (False, ValueError("x"), [])):
        barriers.clear()
        monkeypatch.setattr(distributed, "_FAILED", failed)
        monkeypatch.setattr(sys, "last_value", uncaught, raising=False)
        dist.init_process_group("gloo", init_method=f"file://{tmp_path / f'rv_{len(expected)}_{failed}'}", rank=0,
                                world_size=1)
        distributed._destroy_at_exit()
        assert not dist.is_initialized()
        assert barriers == expected
    distributed._destroy_at_exit()  # no group: nothing to do
