"""Writes under hostile conditions: writers that fail with any error after
writing anything, target names and metric names an attacker or a careless
user would give, metric CSVs holding any bytes when a run resumes, appends
cut by file-size limits.

The contract: a write succeeds, exactly at its target inside the directory
it was given, or raises a ``FileWriteError`` (an ``OSError`` naming the
target) for a failure of the write itself, ``ValueError`` / ``TypeError``
for a bad name, or the writer's own error unchanged; the old target is
intact, no temporary is left, nothing is written elsewhere."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import tempfile
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzz_budget import budget
from offrl._atomic import PREFIX, FileWriteError, atomic_write, atomic_write_json
from offrl.logging import FileAdapter, truncate_metric_files

pytestmark = pytest.mark.fuzz

ERRNOS = [errno.EFBIG, errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EACCES, errno.EPERM, errno.ENOENT,
          errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG, errno.EINTR]


def _tree(root: str):
    found = []
    for directory, dirnames, filenames in os.walk(root):
        found += [os.path.relpath(os.path.join(directory, n), root) for n in dirnames + filenames]
    return sorted(found)


@budget(30)
@given(content=st.binary(max_size=64), how=st.sampled_from(["oserror", "wrapped", "value", "runtime", "interrupt"]),
       code=st.sampled_from(ERRNOS), existed=st.booleans())
def test_a_writer_that_fails_any_way_leaves_the_target_as_it_was(tmp_path, content, how, code, existed):
    with tempfile.TemporaryDirectory(dir=tmp_path) as root:
        target = os.path.join(root, "model.d3")
        if existed:
            with open(target, "wb") as f:
                f.write(b"old")

        def write(tmp: str) -> None:
            with open(tmp, "wb") as f:
                f.write(content)
            if how == "oserror":
                raise OSError(code, os.strerror(code))
            if how == "wrapped":  # h5py's and torch's way: their own error while handling the system's
                try:
                    raise OSError(code, os.strerror(code))
                except OSError:
                    raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos") from None
            if how == "value":
                raise ValueError("not a write failure")
            if how == "runtime":
                raise RuntimeError("not a write failure either")
            raise KeyboardInterrupt

        expected = {"oserror": FileWriteError, "value": ValueError, "runtime": RuntimeError,
                    "interrupt": KeyboardInterrupt, "wrapped": FileWriteError}[how]
        with pytest.raises(BaseException) as info:
            atomic_write(target, write)
        assert isinstance(info.value, expected), repr(info.value)
        if isinstance(info.value, FileWriteError):
            assert info.value.errno == code and info.value.filename == target
            assert str(info.value).startswith(f"cannot write {target}: {os.strerror(code)}")
            assert PREFIX not in str(info.value)
        else:
            assert not isinstance(info.value, FileWriteError)
        assert _tree(root) == (["model.d3"] if existed else [])
        if existed:
            with open(target, "rb") as f:
                assert f.read() == b"old"


NAME_CHARACTERS = st.sampled_from(list("ab./\\:*?\"'<>| \t\n\x00-_~é中") + ["..", "\udcff", "\x7f"])
NAMES = st.one_of(st.lists(NAME_CHARACTERS, max_size=12).map("".join), st.text(max_size=300),
                  st.integers(250, 600).map(lambda n: "m" * n))


@budget(40)
@given(name=NAMES)
def test_a_target_named_anything_is_written_there_or_refused(tmp_path, name):
    with tempfile.TemporaryDirectory(dir=tmp_path) as root:
        inside = os.path.join(root, "inside")
        os.mkdir(inside)
        with open(os.path.join(root, "afile"), "w"):
            pass
        target = os.path.join(inside, name)
        try:
            atomic_write_json(target, {"k": 1})
        except (FileWriteError, ValueError) as e:
            if isinstance(e, FileWriteError):
                assert PREFIX not in str(e) and e.filename == os.path.abspath(target)
            assert _tree(root) == ["afile", "inside"]
            return
        # written exactly where asked (a name with ".." asks for a place outside "inside")
        with open(os.path.abspath(target)) as f:
            assert f.read() == '{\n  "k": 1\n}\n'
        assert not any(PREFIX in n for n in _tree(os.path.dirname(root)))


@budget(40)
@given(name=NAMES, value=st.floats(allow_nan=True, allow_infinity=True))
def test_a_metric_named_anything_lands_in_its_log_directory_or_is_refused(tmp_path, name, value):
    with tempfile.TemporaryDirectory(dir=tmp_path) as root:
        logdir = os.path.join(root, "run")
        adapter = FileAdapter(logdir)
        try:
            adapter.write_metric(1, 10, name, value)
        except (FileWriteError, ValueError):
            assert _tree(root) == ["run"]
            return
        finally:
            adapter.close()
        files = _tree(root)
        assert len(files) == 2 and files[0] == "run", files  # exactly one file, directly in the log directory
        with open(os.path.join(root, files[1])) as f:
            assert f.read() == f"1,10,{float(value)!r}\n"


LINES = st.one_of(
    st.tuples(st.integers(0, 9), st.integers(-5, 60), st.floats(allow_nan=True)).map(lambda r: f"{r[0]},{r[1]},{r[2]!r}\n".encode()),
    st.binary(max_size=24),
    st.sampled_from([b"\xff\n", b"\xc3(\n", b"epoch,step,value\n", b"1,\n", b",,\n", b"1,10", b"\r\n", b"1," + b"9" * 5000 + b",0\n"]),
)


@budget(60)
@given(lines=st.lists(LINES, max_size=12), step=st.integers(-1, 70), linked=st.booleans())
def test_resume_truncation_on_any_bytes_keeps_or_names(tmp_path, lines, step, linked):
    with tempfile.TemporaryDirectory(dir=tmp_path) as root:
        logdir = os.path.join(root, "run")
        os.mkdir(logdir)
        data = b"".join(lines)
        real = os.path.join(root, "real.csv") if linked else os.path.join(logdir, "loss.csv")
        with open(real, "wb") as f:
            f.write(data)
        if linked:
            os.symlink(real, os.path.join(logdir, "loss.csv"))
        try:
            truncate_metric_files(logdir, step)
        except ValueError as e:
            assert str(e).startswith(f"{os.path.join(logdir, 'loss.csv')}, line ")
            assert not isinstance(e, UnicodeError)
            with open(real, "rb") as f:
                assert f.read() == data  # unchanged
            return
        assert os.path.islink(os.path.join(logdir, "loss.csv")) == linked
        with open(real, "rb") as f:
            kept = f.read()
        assert kept == b"" or kept.endswith(b"\n")
        for line in kept.splitlines(keepends=True):
            assert line[:-1] in data  # (an unterminated last line that is no metric row is given its newline)
            parts = line.split(b",")
            try:
                row_step = int(parts[1])
            except (IndexError, ValueError):
                continue
            assert row_step <= step
        assert not any(PREFIX in n for n in _tree(root))


_APPENDER = textwrap.dedent("""
    import os, resource, signal, sys
    from offrl._atomic import FileWriteError, append_text
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    path = sys.argv[1]
    limits = [int(v) for v in sys.argv[2].split(",")]
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    for limit in limits:
        with open(path, "w") as f:
            f.write("0,0,0.0\\n" * (limit // 16))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
        step = 1
        while True:
            try:
                append_text(path, f"{step},{step * 10},{step / 7!r}\\n")
            except FileWriteError as e:
                assert e.errno == 27 and path in str(e), e
                break
            step += 1
        resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
        with open(path) as f:
            text = f.read()
        assert text.endswith("\\n") and len(text) <= limit, (limit, text[-40:])
        for line in text.splitlines()[limit // 16:]:
            s = int(line.split(",")[0])
            assert line == f"{s},{s * 10},{s / 7!r}", line
    print("ok")
""")


@pytest.mark.skipif(sys.platform == "win32", reason="no file-size limits")
@given(limits=st.lists(st.integers(16, 4000), min_size=1, max_size=20))
@settings(budget(3), max_examples=min(budget(3).max_examples, 30))  # a process each: at most 30 in a long campaign
def test_appends_cut_by_a_size_limit_leave_whole_rows_only(tmp_path, limits):
    import resource

    if resource.getrlimit(resource.RLIMIT_FSIZE)[1] != resource.RLIM_INFINITY:
        pytest.skip("a hard file-size limit is set")
    path = os.path.join(tempfile.mkdtemp(dir=tmp_path), "loss.csv")
    done = subprocess.run([sys.executable, "-c", _APPENDER, path, ",".join(map(str, limits))],
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
