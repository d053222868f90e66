"""FileAdapter: params.json written atomically without name collisions."""

from __future__ import annotations

import json
import os
import threading

from offrl.logging import FileAdapter, FileAdapterFactory


def test_write_params_and_metrics(tmp_path):
    adapter = FileAdapterFactory(str(tmp_path)).create("run")
    adapter.write_params({"algorithm": "dqn", "config": {"gamma": 0.99}})
    adapter.write_metric(1, 10, "loss", 0.5)
    adapter.write_metric(2, 20, "loss", 0.25)
    assert json.loads((tmp_path / "run" / "params.json").read_text()) == {"algorithm": "dqn", "config": {"gamma": 0.99}}
    assert (tmp_path / "run" / "loss.csv").read_text() == "1,10,0.5\n2,20,0.25\n"
    assert sorted(os.listdir(tmp_path / "run")) == ["loss.csv", "params.json"]


def test_concurrent_write_params_to_one_directory_never_fail(tmp_path):
    errors = []

    def writer(k: int) -> None:
        adapter = FileAdapter(str(tmp_path))
        try:
            for i in range(40):
                adapter.write_params({"writer": k, "i": i, "pad": "z" * 4000})
        except Exception as e:  # noqa: BLE001 - asserted on below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert json.loads((tmp_path / "params.json").read_text())["i"] == 39
    assert os.listdir(tmp_path) == ["params.json"]


def test_a_new_adapter_removes_orphans_of_killed_writers_only(tmp_path):
    import subprocess
    import sys

    from offrl._atomic import PREFIX

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    orphan = tmp_path / f"{PREFIX}{child.pid}-00000000000a.tmp.d3"
    recent_orphan = tmp_path / f"{PREFIX}{child.pid}-00000000000b.tmp.d3"
    in_progress = tmp_path / f"{PREFIX}{os.getpid()}-00000000000c.tmp.json"
    for path in (orphan, recent_orphan, in_progress):
        path.write_bytes(b"partial")
    os.utime(orphan, (1_000_000_000, 1_000_000_000))
    os.utime(in_progress, (1_000_000_000, 1_000_000_000))
    FileAdapter(str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == sorted([recent_orphan.name, in_progress.name])
