"""offrl._atomic: unique temporaries, no collisions, stale-orphan cleanup,
failed writes reported on the target with the old file intact (for every
writer of offrl: model files, HDF5 datasets, metric CSVs, params.json,
exported policies)."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import pickle
import shutil
import subprocess
import sys
import threading

import pytest

from offrl._atomic import (PREFIX, FileWriteError, append_text, atomic_write, atomic_write_json, atomic_write_text,
                           check_target, make_directory, remove_stale_temporaries, temporary_path)


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


# ------------------------------------------------------------ failed writes
def _no_temporaries(directory) -> bool:
    return not any(name.startswith(PREFIX) or ".tmp" in name for name in os.listdir(directory))


def _failing(code: int, during: bool = False):
    """A writer that writes half a file, then fails the way Python's file
    objects do (an OSError with an errno and no file name), or the way h5py
    and torch do (a RuntimeError raised while handling it)."""

    def write(tmp: str) -> None:
        with open(tmp, "w") as f:
            f.write("half")
        try:
            raise OSError(code, os.strerror(code))
        except OSError:
            if during:
                raise RuntimeError("Can't decrement id ref count (unable to extend file properly)")
            raise

    return write


@pytest.mark.parametrize("code,base,words", [
    (errno.EFBIG, OSError, "File too large"),
    (errno.ENOSPC, OSError, "No space left on device"),
    (errno.EROFS, OSError, "Read-only file system"),
    (errno.EIO, OSError, "Input/output error"),
    (errno.EACCES, PermissionError, "Permission denied"),
])
@pytest.mark.parametrize("during", [False, True], ids=["oserror", "wrapped"])
def test_a_failed_write_names_the_target_and_keeps_the_old_file(tmp_path, code, base, words, during):
    target = tmp_path / "model.d3"
    target.write_text("old")
    with pytest.raises(FileWriteError) as info:
        atomic_write(target, _failing(code, during))
    error = info.value
    assert isinstance(error, OSError) and isinstance(error, base)
    assert error.errno == code and error.filename == str(target) == error.target
    message = str(error)
    assert message.startswith(f"cannot write {target}: {words}") and "keeps its previous content" in message
    assert PREFIX not in message  # never the temporary's name
    assert isinstance(error.__cause__, RuntimeError if during else OSError)
    assert not isinstance(error.__cause__, FileWriteError)
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["model.d3"]


def test_a_failed_first_write_says_no_file_was_written(tmp_path):
    with pytest.raises(FileWriteError, match="No space left on device .*; no file was written"):
        atomic_write(tmp_path / "new.json", _failing(errno.ENOSPC))
    assert os.listdir(tmp_path) == []


def test_the_file_size_limit_is_named_in_the_message(tmp_path):
    resource = pytest.importorskip("resource")
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    if hard != resource.RLIM_INFINITY and hard < 1 << 30:
        pytest.skip("a hard file-size limit is already set")
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 30, hard))
    try:
        with pytest.raises(FileWriteError, match=r"File too large \(this process may write files of at most 1073741824 bytes"):
            atomic_write(tmp_path / "a.bin", _failing(errno.EFBIG))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def test_errors_that_are_not_write_failures_pass_unchanged(tmp_path):
    target = tmp_path / "policy.onnx"
    target.write_text("old")

    def not_io(tmp: str) -> None:
        raise ValueError("the exported policy differs from predict")

    def other_file(tmp: str) -> None:
        open(tmp_path / "missing" / "input.txt")

    def handled_other_error(tmp: str) -> None:
        try:
            os.stat(tmp_path / "missing")
        except FileNotFoundError:
            raise ValueError("bad input") from None

    def runtime(tmp: str) -> None:
        raise RuntimeError("a bug in the writer, not a write failure")

    for write, kind, text in ((not_io, ValueError, "differs"), (other_file, FileNotFoundError, "input.txt"),
                              (handled_other_error, ValueError, "bad input"), (runtime, RuntimeError, "a bug")):
        with pytest.raises(kind, match=text) as info:
            atomic_write(target, write)
        assert not isinstance(info.value, FileWriteError)
        assert target.read_text() == "old" and os.listdir(tmp_path) == ["policy.onnx"]


def test_keyboard_interrupt_passes_unchanged_and_cleans_up(tmp_path):
    def interrupted(tmp: str) -> None:
        open(tmp, "w").write("half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(tmp_path / "a.json", interrupted)
    assert os.listdir(tmp_path) == []


def test_a_parent_that_is_a_file_is_named_and_nothing_is_written(tmp_path):
    (tmp_path / "data").write_text("a file")
    for target in (tmp_path / "data" / "model.d3", tmp_path / "data" / "deeper" / "model.d3"):
        with pytest.raises(NotADirectoryError) as info:
            atomic_write_json(target, {})
        assert isinstance(info.value, FileWriteError) and info.value.filename == str(target)
        assert f"{tmp_path / 'data'} is a file, not a directory" in str(info.value)
        with pytest.raises(NotADirectoryError):
            check_target(target)
    assert os.listdir(tmp_path) == ["data"]


def test_a_name_too_long_is_refused_before_writing(tmp_path):
    target = tmp_path / ("m" * 300 + ".d3")
    calls = []
    with pytest.raises(FileWriteError) as info:
        atomic_write(target, calls.append)
    assert info.value.errno == errno.ENAMETOOLONG and calls == []
    assert "File name too long (the name is 303 bytes, the file system allows" in str(info.value)
    assert os.listdir(tmp_path) == []


def test_write_errors_survive_pickling(tmp_path):
    with pytest.raises(FileWriteError) as info:
        atomic_write(tmp_path / "a", _failing(errno.EACCES))
    copy = pickle.loads(pickle.dumps(info.value))
    assert type(copy) is type(info.value) and str(copy) == str(info.value) and copy.errno == errno.EACCES


def test_a_temporary_that_cannot_be_created_is_reported_on_the_target(tmp_path, monkeypatch):
    import offrl._atomic as atomic

    def refuse(path):
        raise PermissionError(errno.EACCES, "Permission denied", os.path.join(os.path.dirname(path), ".offrl-1-x.tmp"))

    monkeypatch.setattr(atomic, "temporary_path", refuse)
    with pytest.raises(PermissionError) as info:
        atomic_write_text(tmp_path / "params.json", "{}")
    assert str(info.value).startswith(f"cannot write {tmp_path / 'params.json'}: Permission denied (no permission")
    assert PREFIX not in str(info.value)


def test_links_are_replaced_by_default_and_written_through_on_request(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    real = tmp_path / "elsewhere" / "loss.csv"
    real.write_text("old\n")
    link = tmp_path / "loss.csv"
    link.symlink_to(real)
    atomic_write_text(link, "through\n", follow_symlinks=True)
    assert link.is_symlink() and real.read_text() == "through\n"
    assert os.listdir(tmp_path / "elsewhere") == ["loss.csv"]
    atomic_write_text(link, "replaced\n")
    assert not link.is_symlink() and link.read_text() == "replaced\n" and real.read_text() == "through\n"


def test_append_text_appends_and_writes_through_links(tmp_path):
    path = tmp_path / "loss.csv"
    append_text(path, "1,10,0.5\n")
    append_text(path, "2,20,0.25\n")
    assert path.read_text() == "1,10,0.5\n2,20,0.25\n"
    link = tmp_path / "link.csv"
    link.symlink_to(path)
    append_text(link, "3,30,0.125\n")
    assert link.is_symlink() and path.read_text().endswith("3,30,0.125\n")


def test_append_text_refuses_a_name_too_long_or_a_file_in_the_way(tmp_path):
    with pytest.raises(FileWriteError, match="File name too long"):
        append_text(tmp_path / ("x" * 300 + ".csv"), "1,1,1\n")
    (tmp_path / "f").write_text("")
    with pytest.raises(NotADirectoryError, match="is a file, not a directory"):
        append_text(tmp_path / "f" / "loss.csv", "1,1,1\n")
    assert os.listdir(tmp_path) == ["f"]


def test_make_directory_says_which_component_is_in_the_way(tmp_path):
    (tmp_path / "logs").write_text("")
    with pytest.raises(NotADirectoryError, match="it is a file, expected a directory"):
        make_directory(tmp_path / "logs")
    with pytest.raises(NotADirectoryError, match=f"{tmp_path / 'logs'} is a file, not a directory\\); no directory was made"):
        make_directory(tmp_path / "logs" / "run" / "deeper")
    with pytest.raises(FileWriteError, match="cannot create the directory .*File name too long"):
        make_directory(tmp_path / ("d" * 300))
    make_directory(tmp_path / "a" / "b")
    make_directory(tmp_path / "a" / "b")
    assert (tmp_path / "a" / "b").is_dir()


# ------------------------------------------------------------ every writer, every failure
# Each writer of offrl against each way a write fails: a file-size limit
# (setrlimit, SIGXFSZ ignored), a full file system (a small tmpfs), a
# read-only one (a read-only bind mount; both in a user namespace, so no
# privilege is needed), a parent that is a file, a name too long. A writer
# must raise an OSError naming its target with the operating system's
# reason, leave the old target as it was and no temporary behind.

_LIMIT = 1024  # bytes: below every file written here (params.json of the algorithm below is ~1.3 kB)
_OLD = {"model.d3": b"old model", "data.h5": b"old dataset", "params.json": b'{"old": true}\n',
        "loss.csv": None, "policy.onnx": b"old onnx", "policy.pt": b"old torchscript"}
_WORDS = {"fsize": "File too large", "full": "No space left on device", "readonly": "Read-only file system",
          "parent_file": "Not a directory", "long_name": "File name too long"}
_NOT_ROUTED: dict = {}  # writers that bypass offrl._atomic (none now)

_CHILD = r'''
import json, os, resource, signal, subprocess, sys
config = json.loads(sys.argv[1])
for kind, root in config["roots"].items():
    if kind == "full":
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "none", root], check=True)
import numpy as np
import torch
import offrl
from offrl.algos import DQNConfig
from offrl.logging import FileAdapter
from offrl.models import VectorEncoderFactory

torch.set_num_threads(1)  # no thread pool running when the writers are forked
rng = np.random.default_rng(0)
n = 40
dataset = offrl.dataset.MDPDataset(rng.normal(size=(n, 3)).astype(np.float32), rng.integers(2, size=n),
                                   rng.normal(size=n).astype(np.float32), (np.arange(n) % 20 == 19).astype(np.float32))
algo = DQNConfig(batch_size=4, encoder_factory=VectorEncoderFactory(hidden_units=[8])).create()
algo.build_with_dataset(dataset)


def run(kind, root, old):
    for name, text in old.items():
        with open(os.path.join(root, name), "w") as f:
            f.write(text)
    adapter = FileAdapter(root)
    writers = {
        "model.d3": lambda path: algo.save(path),
        "data.h5": lambda path: dataset.dump(path),
        "params.json": lambda path: adapter.write_params(algo.to_params()),
        "loss.csv": lambda path: adapter.write_metric(1, 10, "loss", 0.5),
        "policy.onnx": lambda path: algo.save_policy(path),
        "policy.pt": lambda path: algo.save_policy(path),
    }
    if kind == "full":
        with open(os.path.join(root, "filler"), "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError:
                pass
    elif kind == "readonly":
        subprocess.run(["mount", "--bind", root, root], check=True)
        subprocess.run(["mount", "-o", "remount,bind,ro", root], check=True)
    results = {}
    for name, write in writers.items():  # each in a forked process: a writer that crashes is reported, not fatal
        path = os.path.join(root, name)
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            if kind == "fsize":
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                resource.setrlimit(resource.RLIMIT_FSIZE, (config["limit"], resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
            try:
                write(path)
                result = {"error": None, "mro": []}
            except BaseException as e:
                result = {"error": type(e).__name__, "mro": [c.__name__ for c in type(e).__mro__],
                          "message": str(e), "filename": getattr(e, "filename", None)}
            os.write(write_end, json.dumps(result).encode())
            os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as f:
            report = f.read()
        status = os.waitpid(pid, 0)[1]
        if os.WIFSIGNALED(status):
            result = {"error": f"the process was killed by signal {os.WTERMSIG(status)}", "mro": []}
        else:
            result = json.loads(report)
        with open(path) as f:
            result["intact"] = f.read() == old[name]
        results[name] = result
    results["listing"] = sorted(n for n in os.listdir(root) if n != "filler")
    return results


print("RESULTS " + json.dumps({kind: run(kind, root, config["old"][kind]) for kind, root in config["roots"].items()}))
'''


def _can_unshare() -> bool:
    if sys.platform != "linux" or shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    return subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def failures(tmp_path_factory):
    # One process for all kinds (each writer forked from it): importing
    # torch once, not once per kind.
    kinds = ["fsize"] if sys.platform != "win32" else []
    unshare = _can_unshare()
    if unshare:
        kinds += ["full", "readonly"]
    roots = {kind: str(tmp_path_factory.mktemp(kind)) for kind in kinds}
    old = {}
    for kind in kinds:
        # loss.csv: a whole page, so that a full tmpfs has no room for one more row; under
        # the size limit, one row away from it, so the append must be cut back, not left half-written
        csv = "x" * (_LIMIT - 3) + "\n" if kind == "fsize" else "1,1,0.5\n" * 512
        old[kind] = {name: (text.decode() if text is not None else csv) for name, text in _OLD.items()}
    results = {}
    if kinds:
        config = json.dumps({"roots": roots, "old": old, "limit": _LIMIT})
        command = (["unshare", "-rm"] if unshare else []) + [sys.executable, "-c", _CHILD, config]
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULTS ")]
        assert done.returncode == 0 and lines, f"the writer process failed (rc {done.returncode}):\n{done.stderr[-3000:]}"
        results = json.loads(lines[0][len("RESULTS "):])

    def get(kind: str):
        if kind not in results:
            pytest.skip("needs unshare -rm (user and mount namespaces) to mount a small or read-only file system"
                        if kind != "fsize" else "no file-size limits on this platform")
        return roots[kind], results[kind]

    return get


def _writer_params():
    params = []
    for name in _OLD:
        marks = [pytest.mark.xfail(reason=_NOT_ROUTED[name], strict=False)] if name in _NOT_ROUTED else []
        params.append(pytest.param(name, marks=marks, id=name))
    return params


@pytest.mark.parametrize("name", _writer_params())
@pytest.mark.parametrize("kind", ["fsize", "full", "readonly"])
def test_a_write_that_the_system_refuses_names_the_target(failures, kind, name):
    root, results = failures(kind)
    result = results[name]
    assert result["error"] is not None, f"{name} was written in spite of the failure"
    assert "OSError" in result["mro"] and "FileWriteError" in result["mro"], result
    target = os.path.join(str(root), name)
    assert result["message"].startswith(f"cannot write {target}: {_WORDS[kind]}"), result["message"]
    assert result["filename"] == target and PREFIX not in result["message"]
    if kind == "fsize":
        assert f"at most {_LIMIT} bytes" in result["message"]
    assert result["intact"], f"{name}: the old content was changed"
    assert not any(n.startswith(PREFIX) or ".tmp" in n or n.startswith(".writing") for n in results["listing"])


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    import numpy as np

    import offrl
    from offrl.algos import DQNConfig
    from offrl.models import VectorEncoderFactory

    rng = np.random.default_rng(0)
    n = 40
    dataset = offrl.dataset.MDPDataset(rng.normal(size=(n, 3)).astype(np.float32), rng.integers(2, size=n),
                                       rng.normal(size=n).astype(np.float32),
                                       (np.arange(n) % 20 == 19).astype(np.float32))
    algo = DQNConfig(batch_size=4, encoder_factory=VectorEncoderFactory(hidden_units=[8])).create()
    algo.build_with_dataset(dataset)
    return algo, dataset


def _write_with(built, name: str, path) -> None:
    from offrl.logging import FileAdapter

    algo, dataset = built
    if name == "model.d3":
        algo.save(path)
    elif name == "data.h5":
        dataset.dump(path)
    elif name in ("policy.onnx", "policy.pt"):
        algo.save_policy(path)
    elif name == "params.json":  # the adapter's directory is the path's parent
        FileAdapter(os.path.dirname(path)).write_params(algo.to_params())
    else:
        FileAdapter(os.path.dirname(path)).write_metric(1, 10, os.path.basename(path)[: -len(".csv")], 0.5)


@pytest.mark.parametrize("name", _writer_params())
@pytest.mark.parametrize("kind", ["parent_file", "long_name"])
def test_a_target_that_cannot_exist_is_named(tmp_path, built, kind, name):
    base, ext = os.path.splitext(name)
    (tmp_path / "taken").write_text("a file")
    if kind == "parent_file":
        target = tmp_path / "taken" / name
    elif name in ("params.json",):  # its name is fixed: the directory's name is the long one
        target = tmp_path / ("r" * 300) / name
    else:
        target = tmp_path / (base * (300 // len(base) + 1) + ext)
    with pytest.raises(OSError) as info:
        _write_with(built, name, target)
    assert isinstance(info.value, FileWriteError), repr(info.value)
    assert _WORDS[kind] in str(info.value) and PREFIX not in str(info.value)
    adapter_directory = name == "params.json" or (name == "loss.csv" and kind == "parent_file")
    shown = str(target.parent) if adapter_directory else str(target)
    assert shown in str(info.value)
    assert sorted(os.listdir(tmp_path)) == ["taken"] and (tmp_path / "taken").read_text() == "a file"


def test_a_nul_in_the_name_is_a_value_error_before_writing(tmp_path):
    with pytest.raises(ValueError, match="NUL character"):
        atomic_write_json(str(tmp_path / "a\x00b.json"), {})
    assert os.listdir(tmp_path) == []
