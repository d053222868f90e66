"""offrl._atomic: unique temporaries, no collisions, stale-orphan cleanup."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import threading

import pytest

from offrl._atomic import PREFIX, atomic_write, atomic_write_json, remove_stale_temporaries, temporary_path


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid  # reaped: no process has this id until the kernel reuses it


def test_temporary_names_carry_the_prefix_pid_and_extension(tmp_path):
    first = temporary_path(tmp_path / "policy.onnx")
    second = temporary_path(tmp_path / "policy.onnx")
    assert first != second
    for name in (first, second):
        base = os.path.basename(name)
        assert base.startswith(f"{PREFIX}{os.getpid()}-") and base.endswith(".tmp.onnx")
        assert os.path.dirname(name) == str(tmp_path) and os.path.getsize(name) == 0


def test_atomic_write_replaces_the_file_and_cleans_up_on_error(tmp_path):
    path = tmp_path / "a.json"
    atomic_write_json(path, {"x": 1})
    assert json.loads(path.read_text()) == {"x": 1}

    def fail(tmp: str) -> None:
        with open(tmp, "w") as f:
            f.write("half")
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError, match="disk on fire"):
        atomic_write(path, fail)
    assert json.loads(path.read_text()) == {"x": 1}
    assert os.listdir(tmp_path) == ["a.json"]
    with pytest.raises(TypeError):
        atomic_write_json(path, {"x": object()})
    assert os.listdir(tmp_path) == ["a.json"] and json.loads(path.read_text()) == {"x": 1}


def test_atomic_write_to_a_directory_or_missing_directory_writes_nothing(tmp_path):
    with pytest.raises(IsADirectoryError, match="is a directory"):
        atomic_write_json(tmp_path, {})
    with pytest.raises(FileNotFoundError, match="does not exist"):
        atomic_write_json(tmp_path / "missing" / "a.json", {})
    assert os.listdir(tmp_path) == [] and not os.path.exists(str(tmp_path) + ".tmp")


def test_threads_writing_one_path_never_fail(tmp_path):
    path = tmp_path / "shared.json"
    errors = []

    def writer(k: int) -> None:
        try:
            for i in range(40):
                atomic_write_json(path, {"k": k, "i": i})
        except Exception as e:  # noqa: BLE001 - asserted on below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert json.loads(path.read_text())["i"] == 39
    assert os.listdir(tmp_path) == ["shared.json"]


def _process_writer(path: str, k: int) -> None:
    for i in range(30):
        atomic_write_json(path, {"k": k, "i": i, "pad": "y" * 10000})


def test_processes_writing_one_path_never_fail(tmp_path):
    path = str(tmp_path / "shared.json")
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_process_writer, args=(path, k)) for k in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
    assert [w.exitcode for w in workers] == [0, 0, 0]
    assert json.loads(open(path).read())["i"] == 29
    assert os.listdir(tmp_path) == ["shared.json"]


def test_remove_stale_temporaries_removes_only_orphans_of_dead_writers(tmp_path):
    dead = _dead_pid()
    stale = tmp_path / f"{PREFIX}{dead}-0123456789ab.tmp.json"
    live = tmp_path / f"{PREFIX}{os.getpid()}-0123456789ab.tmp.json"
    parent = tmp_path / f"{PREFIX}{os.getppid()}-aaaaaaaaaaaa.tmp"
    foreign = tmp_path / f"{PREFIX}{dead}-not-ours.tmp"  # not a name offrl writes
    other = tmp_path / "model.d3"
    for p in (stale, live, parent, foreign, other):
        p.write_text("x")
    young = remove_stale_temporaries(tmp_path, min_age_s=3600)
    assert young == [] and stale.exists()
    assert remove_stale_temporaries(tmp_path) == [str(stale)]
    assert sorted(os.listdir(tmp_path)) == sorted(p.name for p in (live, parent, foreign, other))
    assert remove_stale_temporaries(tmp_path / "missing") == []


def test_a_writer_killed_mid_write_leaves_an_orphan_that_cleanup_removes(tmp_path):
    import signal
    import time

    target = tmp_path / "model.d3"
    target.write_text("old")
    script = ("import sys, time; from offrl._atomic import atomic_write\n"
              "def slow(tmp):\n    open(tmp, 'w').write('half'); print('writing', flush=True); time.sleep(60)\n"
              f"atomic_write({str(target)!r}, slow)\n")
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "writing"
        orphans = [n for n in os.listdir(tmp_path) if n.startswith(f"{PREFIX}{child.pid}-")]
        assert len(orphans) == 1 and orphans[0].endswith(".tmp.d3")
        assert remove_stale_temporaries(tmp_path) == []  # the writer is alive: kept
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and os.path.exists(f"/proc/{child.pid}"):
        time.sleep(0.05)
    assert remove_stale_temporaries(tmp_path) == [str(tmp_path / orphans[0])]
    assert os.listdir(tmp_path) == ["model.d3"] and target.read_text() == "old"
