"""One run per log directory: a second process is refused while the first
logs (file and TensorBoard adapters, the fit loop's checkpoints), a killed
holder blocks nothing, the holder's own process may come back (resume)."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="flock is POSIX")

from offrl.logging import (FileAdapter, FileAdapterFactory, LogDirectoryInUseError,  # noqa: E402
                           lock_log_directory)

# a process that holds the directory's flock (as offrl takes it) until its
# stdin closes; it imports nothing of offrl, so the lock is seen across
# processes at the operating system's level
_HOLDER = textwrap.dedent("""
    import fcntl, os, sys
    fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    print("locked", flush=True)
    sys.stdin.read()
""")


def _holder(directory) -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-c", _HOLDER, str(directory)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "locked"
    return child


def _free_in_another_process(directory) -> bool:
    probe = ("import fcntl, os, sys\nfd = os.open(sys.argv[1], os.O_RDONLY)\n"
             "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept OSError:\n    sys.exit(1)\n")
    return subprocess.run([sys.executable, "-c", probe, str(directory)]).returncode == 0


def test_a_second_process_is_refused_until_the_holder_ends(tmp_path):
    child = _holder(tmp_path)
    try:
        with pytest.raises(LogDirectoryInUseError) as info:
            FileAdapter(str(tmp_path))
        message = str(info.value)
        assert str(tmp_path) in message and f"process {child.pid}" in message
        assert "experiment_name" in message and "with_timestamp=True" in message
        with pytest.raises(LogDirectoryInUseError):
            lock_log_directory(str(tmp_path))
        assert os.listdir(tmp_path) == []  # refused before writing anything
    finally:
        child.stdin.close()
        child.wait()
        child.stdout.close()
    FileAdapter(str(tmp_path)).close()


def test_a_killed_holder_blocks_nothing(tmp_path):
    child = _holder(tmp_path)
    with pytest.raises(LogDirectoryInUseError):
        FileAdapterFactory(str(tmp_path.parent)).create(None, tmp_path.name, 10)
    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stdin.close()
    child.stdout.close()
    adapter = FileAdapterFactory(str(tmp_path.parent)).create(None, tmp_path.name, 10)
    adapter.write_metric(1, 10, "loss", 0.5)
    adapter.close()
    assert (tmp_path / "loss.csv").read_text() == "1,10,0.5\n"


def test_the_holding_process_may_reopen_and_the_lock_ends_with_its_last_user(tmp_path):
    first = FileAdapter(str(tmp_path))
    second = FileAdapter(str(tmp_path))  # same process: a resume, or a second adapter
    with lock_log_directory(str(tmp_path / ".")) as third:  # another spelling of the same directory
        assert third.held
        assert not _free_in_another_process(tmp_path)
    first.close()
    first.close()  # idempotent
    assert not _free_in_another_process(tmp_path)
    second.close()
    assert _free_in_another_process(tmp_path)


def test_an_adapter_never_closed_releases_the_lock_when_collected(tmp_path):
    adapter = FileAdapter(str(tmp_path))
    assert not _free_in_another_process(tmp_path)
    del adapter
    gc.collect()
    assert _free_in_another_process(tmp_path)


def test_the_tensorboard_adapter_locks_its_run_directory(tmp_path):
    pytest.importorskip("tensorboard")
    from offrl.logging import TensorboardAdapterFactory

    run = tmp_path / "runs" / "exp"
    run.mkdir(parents=True)
    child = _holder(run)
    try:
        with pytest.raises(LogDirectoryInUseError, match="in use by another training run"):
            TensorboardAdapterFactory(str(tmp_path)).create(None, "exp", 10)
        assert os.listdir(run) == []  # no event file written
    finally:
        child.stdin.close()
        child.wait()
        child.stdout.close()
    adapter = TensorboardAdapterFactory(str(tmp_path)).create(None, "exp", 10)
    assert not _free_in_another_process(run)
    adapter.close()
    assert _free_in_another_process(run)


def test_a_child_forked_by_the_holder_does_not_keep_the_lock(tmp_path):
    # the holder forks a child that outlives it (a vector-env worker, say):
    # once the holder is killed the directory is free
    script = textwrap.dedent("""
        import os, sys, time
        from offrl.logging import lock_log_directory
        lock = lock_log_directory(sys.argv[1])
        pid = os.fork()
        if pid == 0:
            time.sleep(120)
            os._exit(0)
        print(pid, flush=True)
        time.sleep(120)
    """)
    holder = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    grandchild = int(holder.stdout.readline())
    try:
        assert not _free_in_another_process(tmp_path)
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        assert _free_in_another_process(tmp_path)
    finally:
        os.kill(grandchild, signal.SIGKILL)
        holder.stdout.close()


_FIT = textwrap.dedent("""
    import sys
    import numpy as np
    import offrl
    from offrl.algos import BCConfig
    from offrl.logging import FileAdapterFactory

    rng = np.random.default_rng(0)
    n = 40
    dataset = offrl.dataset.MDPDataset(rng.normal(size=(n, 3)).astype(np.float32),
                                       rng.uniform(-1, 1, size=(n, 2)).astype(np.float32),
                                       rng.normal(size=n).astype(np.float32), (np.arange(n) % 20 == 19).astype(np.float32))

    def wait_once(algo, epoch, step):
        if step == 1:
            print("training", flush=True)
            sys.stdin.readline()

    BCConfig(batch_size=4).create().fit(dataset, 10, 5, experiment_name="run", with_timestamp=False,
                                        logger_adapter=FileAdapterFactory(sys.argv[1]), show_progress=False,
                                        callback=wait_once)
    print("done", flush=True)
""")


def test_two_fit_runs_in_one_directory_the_second_is_refused(tmp_path):
    import offrl
    from offrl.algos import BCConfig

    rng = np.random.default_rng(1)
    n = 40
    dataset = offrl.dataset.MDPDataset(rng.normal(size=(n, 3)).astype(np.float32),
                                       rng.uniform(-1, 1, size=(n, 2)).astype(np.float32),
                                       rng.normal(size=n).astype(np.float32),
                                       (np.arange(n) % 20 == 19).astype(np.float32))

    def fit(**kwargs):
        return BCConfig(batch_size=4).create().fit(dataset, 10, 5, experiment_name="run", with_timestamp=False,
                                                   logger_adapter=FileAdapterFactory(str(tmp_path)),
                                                   show_progress=False, **kwargs)

    first = subprocess.Popen([sys.executable, "-c", _FIT, str(tmp_path)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline().strip() == "training"
        with pytest.raises(LogDirectoryInUseError, match="run"):
            fit()
        first.stdin.write("go\n")
        first.stdin.flush()
        assert first.stdout.readline().strip() == "done"
    finally:
        first.stdin.close()
        first.wait()
        first.stdout.close()
    assert first.returncode == 0
    rows = (tmp_path / "run" / "loss.csv").read_text().splitlines()
    assert [row.split(",")[:2] for row in rows] == [["1", "5"], ["2", "10"]]  # the first run's rows only
    fit()  # the first run has ended: allowed
    fit(resume_from=str(tmp_path / "run"))  # resuming in the process that ran it: allowed
    assert _free_in_another_process(tmp_path / "run")


def test_a_fit_that_fails_releases_its_directory(tmp_path):
    import offrl
    from offrl.algos import BCConfig

    class Stop(Exception):
        pass

    def stop(algo, epoch, step):
        raise Stop

    rng = np.random.default_rng(2)
    dataset = offrl.dataset.MDPDataset(rng.normal(size=(20, 3)).astype(np.float32),
                                       rng.uniform(-1, 1, size=(20, 2)).astype(np.float32),
                                       rng.normal(size=20).astype(np.float32), (np.arange(20) == 19).astype(np.float32))
    with pytest.raises(Stop):
        BCConfig(batch_size=4).create().fit(dataset, 4, 2, experiment_name="run", with_timestamp=False,
                                            logger_adapter=FileAdapterFactory(str(tmp_path)), show_progress=False,
                                            callback=stop)
    assert _free_in_another_process(tmp_path / "run")


def test_the_fit_loop_locks_the_directory_of_any_adapter_it_checkpoints_into(tmp_path):
    # a user's adapter with a logdir (where fit writes checkpoint.d3) but no lock of its own
    import offrl
    from offrl.algos import BCConfig
    from offrl.logging import NoopAdapter

    closed = []

    class Adapter(NoopAdapter):
        logdir = str(tmp_path)

        def close(self) -> None:
            closed.append(True)

    class Factory:
        def create(self, algo, experiment_name, n_steps_per_epoch):
            return Adapter()

    rng = np.random.default_rng(3)
    dataset = offrl.dataset.MDPDataset(rng.normal(size=(20, 3)).astype(np.float32),
                                       rng.uniform(-1, 1, size=(20, 2)).astype(np.float32),
                                       rng.normal(size=20).astype(np.float32), (np.arange(20) == 19).astype(np.float32))
    child = _holder(tmp_path)
    try:
        with pytest.raises(LogDirectoryInUseError):
            BCConfig(batch_size=4).create().fit(dataset, 2, 2, logger_adapter=Factory(), show_progress=False)
        assert closed == [True] and os.listdir(tmp_path) == []
    finally:
        child.stdin.close()
        child.wait()
        child.stdout.close()
    BCConfig(batch_size=4).create().fit(dataset, 2, 2, logger_adapter=Factory(), show_progress=False)
    assert "checkpoint.d3" in os.listdir(tmp_path) and _free_in_another_process(tmp_path)
