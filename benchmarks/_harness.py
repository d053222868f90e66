"""Shared pieces of the benchmarks in this folder (not a benchmark itself).

Every script is run from the repository root as ``python benchmarks/<name>.py``:
Python then puts ``benchmarks/`` first on ``sys.path``, so ``import _harness``
and ``import _data`` work with no path edits, in this interpreter and in the
d3rlpy interpreter that runs the same script as a worker. offrl itself must be
importable (``pip install -e .``).

What is here:

* finding the d3rlpy interpreter: ``--d3rlpy-python PATH`` or the
  ``D3RLPY_PYTHON`` environment variable, nothing else (no default path);
  without either the d3rlpy side is skipped with a one-line note;
* the common command-line options (``--quick``, ``--only``, ``--threads``
  (torch on one thread by default, both sides), ``--no-d3rlpy``,
  ``--d3rlpy-python``) and their parsing;
* running the d3rlpy side in its own worker process: once (:func:`run_json`)
  or as a server answering requests (:class:`Worker` / :func:`serve`);
* timing: interleaved rounds (:func:`run_rounds`), per-call timing
  (:func:`time_per_call`), ratios as medians of per-round ratios
  (:func:`paired_ratio`);
* the load average (:func:`print_load`) and one table printer
  (:func:`format_table` / :func:`print_table`).

This module imports neither offrl nor d3rlpy (both sides use it).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

SEED = 0
#: a worker's JSON answers start with this, so library chatter on stdout is ignored
JSON_MARKER = "@@offrl-benchmark-json@@"
ENV_VAR = "D3RLPY_PYTHON"
ENABLE_HINT = f"pass --d3rlpy-python PATH or set {ENV_VAR}=PATH (a Python with d3rlpy 2.8.1 installed)"


def log(msg: str) -> None:
    """Progress messages go to stderr, so stdout holds only the report."""
    print(msg, file=sys.stderr, flush=True)


# ------------------------------------------------------- d3rlpy interpreter
def find_d3rlpy_python(cli_value: Optional[str], environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The interpreter with d3rlpy: ``--d3rlpy-python`` first, then
    ``$D3RLPY_PYTHON``; ``None`` (skip the d3rlpy side) when neither is set.
    There is deliberately no default path: one would exist on one machine only."""
    if cli_value is not None and not isinstance(cli_value, str):
        raise TypeError(f"--d3rlpy-python must be a path string, got {type(cli_value).__name__}")
    if cli_value:
        return cli_value
    env = os.environ if environ is None else environ
    value = env.get(ENV_VAR)
    return value or None


def d3rlpy_interpreter(args: argparse.Namespace) -> Tuple[Optional[str], str]:
    """(interpreter, note) for a script's parsed arguments: the interpreter
    is ``None`` under ``--no-d3rlpy`` or when none is configured, and the
    note says why (printed once, on stderr). A configured path that is not
    an executable file raises ``ValueError`` naming the option."""
    if getattr(args, "no_d3rlpy", False):
        return None, "skipped (--no-d3rlpy)"
    python = find_d3rlpy_python(getattr(args, "d3rlpy_python", None))
    if python is None:
        note = f"skipped: {ENABLE_HINT}"
        log(f"d3rlpy side {note}")
        return None, note
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        source = "--d3rlpy-python" if getattr(args, "d3rlpy_python", None) else f"${ENV_VAR}"
        raise ValueError(f"{source}={python!r} is not an executable file; expected a Python interpreter with d3rlpy")
    return python, f"worker process {python}"


# ----------------------------------------------------------------- options
def add_common_args(parser: argparse.ArgumentParser, *, only: Optional[Sequence[str]] = None,
                    quick_help: str = "short rounds (a smoke run)", threads: bool = True,
                    d3rlpy: bool = True) -> None:
    """The options every benchmark shares. ``only``: the names ``--only``
    chooses from (no ``--only`` when ``None``)."""
    parser.add_argument("--quick", action="store_true", help=quick_help)
    if only is not None:
        parser.add_argument("--only", default=None, help=f"comma-separated subset of {','.join(only)}")
    if threads:
        parser.add_argument("--threads", type=int, default=1,
                            help="torch.set_num_threads(N) in both libraries (default 1: the machines are shared)")
    if d3rlpy:
        parser.add_argument("--no-d3rlpy", action="store_true", help="skip the d3rlpy comparison")
        parser.add_argument("--d3rlpy-python", default=None,
                            help=f"interpreter with d3rlpy (else ${ENV_VAR}; without either d3rlpy is skipped)")


def parse_only(value: Optional[str], choices: Sequence[str], parser: Optional[argparse.ArgumentParser] = None
               ) -> List[str]:
    """``--only`` as a list of canonical names (case-insensitive); all of
    ``choices`` when ``value`` is empty. An unknown name is an error that
    lists the choices."""
    if not value:
        return list(choices)
    lookup = {c.lower(): c for c in choices}
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n.lower() not in lookup]
    if unknown:
        message = f"--only: unknown names {unknown}; choose from {list(choices)}"
        if parser is not None:
            parser.error(message)
        raise ValueError(message)
    return [lookup[n.lower()] for n in names]


def check_threads(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """``--threads`` must be a positive count."""
    if getattr(args, "threads", 1) is not None and args.threads < 1:
        parser.error(f"--threads must be >= 1, got {args.threads}")


def set_threads(n: Optional[int]) -> int:
    """``torch.set_num_threads(n)`` when ``n`` is given; returns the count in use."""
    import torch

    if n:
        torch.set_num_threads(int(n))
    return torch.get_num_threads()


def quiet_d3rlpy() -> None:
    """Keep d3rlpy's structlog info lines off the output (d3rlpy side only)."""
    with contextlib.suppress(Exception):
        import logging

        import structlog

        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


# ------------------------------------------------------------ load average
def load_average() -> Tuple[float, float, float]:
    """``os.getloadavg()``, or NaNs where the platform has none."""
    try:
        return os.getloadavg()
    except (AttributeError, OSError):
        return (math.nan, math.nan, math.nan)


def print_load(when: str) -> Tuple[float, float, float]:
    """Print the 1/5/15-minute load average (on stdout, part of the report:
    a loaded machine explains noisy figures) and return it."""
    load = load_average()
    print(f"load average at {when}: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()} CPUs)", flush=True)
    return load


# ----------------------------------------------------------------- workers
def emit_json(obj: Any, stream: Any = None) -> None:
    """Write one marked JSON line (a worker's answer)."""
    stream = sys.stdout if stream is None else stream
    stream.write(JSON_MARKER + json.dumps(obj) + "\n")
    stream.flush()


def _tail(text: str, n: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


def run_json(python: str, script: str, argv: Sequence[str], timeout: float = 1800.0,
             show_stderr: bool = False) -> Tuple[Optional[dict], str]:
    """Run ``python script *argv`` once in its own process and return the
    last marked JSON line it printed (``None`` and why, on failure)."""
    cmd = [python, os.path.abspath(script), *argv]
    log(f"[worker] {' '.join(cmd)}")
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=None if show_stderr else subprocess.PIPE,
                              text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"failed to run {python}: {e}"
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(JSON_MARKER):
            return json.loads(line[len(JSON_MARKER):]), f"worker process {python}"
    return None, f"{python} exited with {proc.returncode}:\n{_tail(proc.stderr or proc.stdout or '')}"


def worker_main(measure: Callable[[], Any]) -> int:
    """The worker side of :func:`run_json`: run ``measure`` with stdout sent
    to stderr (library chatter) and print its result as one marked line."""
    real_stdout = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
        result = measure()
    emit_json(result, real_stdout)
    return 0


class Worker:
    """A long-lived process running ``python script *argv`` that answers
    one JSON request per line (see :func:`serve`). Its stderr goes to a
    temporary file (a pipe nobody reads could fill and block it) whose tail
    is shown when it dies."""

    def __init__(self, python: str, script: str, argv: Sequence[str], name: str = "d3rlpy") -> None:
        self.name = name
        self.python = python
        self._stderr = tempfile.TemporaryFile("w+")
        cmd = [python, os.path.abspath(script), *argv]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                     text=True, bufsize=1)
        self.info: dict = self._read()

    def _read(self) -> Any:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            if line.startswith(JSON_MARKER):
                reply = json.loads(line[len(JSON_MARKER):])
                if isinstance(reply, dict) and "worker_error" in reply:
                    raise RuntimeError(f"{self.name} worker: {reply['worker_error']}")
                return reply
        code = self.proc.wait()
        self._stderr.seek(0)
        raise RuntimeError(f"the {self.name} worker ({self.python}) exited with {code}:\n{_tail(self._stderr.read())}")

    def call(self, request: Any) -> Any:
        """Send one request, wait for its answer."""
        self.proc.stdin.write(json.dumps(request) + "\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]
        return self._read()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.proc.stdin.close()  # type: ignore[union-attr]
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=60)
        if self.proc.poll() is None:
            self.proc.kill()
        self._stderr.close()


def serve(info: Any, handle: Callable[[Any], Any], pause_gc: bool = False) -> int:
    """The worker side of :class:`Worker`: print ``info``, then answer each
    JSON request read from stdin with ``handle(request)`` (an exception
    becomes ``{"worker_error": ...}``). Library output goes to stderr.
    ``pause_gc``: no garbage collection inside a timed request."""
    real_stdout = sys.stdout
    emit_json(info, real_stdout)
    if pause_gc:
        gc.collect()
        gc.disable()
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        try:
            with contextlib.redirect_stdout(sys.stderr):
                reply = handle(request)
        except Exception as e:  # reported to the parent, which prints it
            reply = {"worker_error": f"{type(e).__name__}: {e}"}
        emit_json(reply, real_stdout)
    return 0


def load_module(name: str, path: str) -> Any:
    """Import the Python file at ``path`` (repository-relative paths are
    resolved from the repository root) as module ``name``, without touching
    ``sys.path``: for a helper that lives outside ``benchmarks/`` (e.g. a
    test fixture that builds a reference problem)."""
    import importlib.util

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    full = path if os.path.isabs(path) else os.path.join(root, path)
    spec = importlib.util.spec_from_file_location(name, full)
    if spec is None or spec.loader is None or not os.path.isfile(full):
        raise ValueError(f"path {full!r} is not a Python file that can be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------ timing
StepRunner = Callable[[int], Any]  # runs k steps


@dataclasses.dataclass(frozen=True)
class Settings:
    """Round lengths and counts of one run (full or ``--quick``)."""

    warmup: int
    main_round_s: float  # headline figure: rounds x round_s ~ 3-5 s
    main_rounds: int
    cmp_round_s: float  # interleaved comparisons
    cmp_rounds: int
    call_round_s: float  # short calls (predict, sampling)
    call_rounds: int


FULL = Settings(warmup=20, main_round_s=0.8, main_rounds=5, cmp_round_s=0.5, cmp_rounds=3, call_round_s=0.2,
                call_rounds=5)
QUICK = Settings(warmup=5, main_round_s=0.25, main_rounds=3, cmp_round_s=0.15, cmp_rounds=3, call_round_s=0.05,
                 call_rounds=3)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Collect, then keep the garbage collector off for a timed block."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def loop(fn: Callable[[], Any]) -> StepRunner:
    """A step runner calling ``fn`` ``k`` times."""
    def run(k: int) -> None:
        for _ in range(k):
            fn()
    return run


def warm_up(run: StepRunner, steps: int, max_s: float = 5.0) -> int:
    """Run up to ``steps`` steps, stopping early (after at least 3) once
    ``max_s`` seconds have passed; returns the steps run."""
    t0, done = time.perf_counter(), 0
    while done < steps:
        run(1)
        done += 1
        if done >= 3 and time.perf_counter() - t0 > max_s:
            break
    return done


def run_rounds(variants: Dict[str, StepRunner], round_s: float, rounds: int, warmup: int = 2,
               min_steps: int = 2) -> Dict[str, dict]:
    """Time each variant (a function running ``k`` steps) in interleaved
    rounds of about ``round_s`` seconds, the order rotated each round so no
    variant always runs first; ms per step, median over rounds, and the
    per-round figures for :func:`paired_ratio`."""
    names = list(variants)
    for name in names:
        if warmup:
            variants[name](warmup)
    steps: Dict[str, int] = {}
    for name in names:  # calibrate
        k = 1
        while True:
            t0 = time.perf_counter()
            variants[name](k)
            elapsed = time.perf_counter() - t0
            if elapsed >= round_s / 4 or k >= 1 << 20:
                break
            k *= 2 if elapsed < round_s / 40 else 1 + int(round_s / 4 / max(elapsed, 1e-9))
        steps[name] = max(min_steps, int(k * round_s / max(elapsed, 1e-9)))
    per_round: Dict[str, List[float]] = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            with gc_paused():
                t0 = time.perf_counter()
                variants[name](steps[name])
                per_round[name].append((time.perf_counter() - t0) / steps[name] * 1e3)
    return {
        n: {"ms": statistics.median(v), "min_ms": min(v), "max_ms": max(v), "steps": steps[n], "rounds": rounds,
            "per_round": v}
        for n, v in per_round.items()
    }


def time_per_call(fn: Callable[[], Any], round_s: float, rounds: int, warmup: int = 5) -> dict:
    """Median over ``rounds`` of the mean time per call of ``fn`` (calls
    per round calibrated to about ``round_s`` seconds)."""
    for _ in range(warmup):
        fn()
    calls = 1
    while True:  # calibrate
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        elapsed = time.perf_counter() - t0
        if elapsed >= round_s / 4 or calls >= 1 << 20:
            break
        calls *= 2
    calls = max(5, int(calls * round_s / max(elapsed, 1e-9)))
    per_call = []
    for _ in range(rounds):
        with gc_paused():
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            per_call.append((time.perf_counter() - t0) / calls)
    return {"ms": statistics.median(per_call) * 1e3, "min_ms": min(per_call) * 1e3, "max_ms": max(per_call) * 1e3,
            "calls_per_round": calls, "rounds": rounds}


def time_once(fn: Callable[[], Any], max_repeats: int = 3, repeat_below_s: float = 1.0) -> Tuple[dict, Any]:
    """Time ``fn``; repeat (median of up to ``max_repeats``) while a run is short."""
    times: List[float] = []
    result = None
    for _ in range(max_repeats):
        result = None
        gc.collect()
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
        if times[0] >= repeat_below_s:
            break
    return {"s": statistics.median(times), "runs": len(times), "min_s": min(times)}, result


def paired_ratio(a: Optional[dict], b: Optional[dict]) -> Optional[float]:
    """Median over interleaved rounds of ``a / b`` (``None`` if either is missing)."""
    if a is None or b is None:
        return None
    return statistics.median(x / y for x, y in zip(a["per_round"], b["per_round"]))


def median_ratio(a: Sequence[float], b: Sequence[float]) -> float:
    """Median of the per-round ratios ``a[i] / b[i]``."""
    if len(a) != len(b) or not a:
        raise ValueError(f"median_ratio needs two equal, non-empty sequences, got {len(a)} and {len(b)}")
    return statistics.median(x / y for x, y in zip(a, b))


# ------------------------------------------------------------------ tables
def fmt(value: Optional[float], spec: str = "{:.1f}") -> str:
    """``spec.format(value)``, or ``-`` for a missing figure."""
    return "-" if value is None else spec.format(value)


def ok(passed: Optional[bool]) -> str:
    """A target's result cell."""
    return "-" if passed is None else ("ok" if passed else "MISS")


def format_table(header: Sequence[Any], rows: Sequence[Sequence[Any]], left: int = 1) -> str:
    """A plain-text table: the first ``left`` columns and the last one
    left-aligned, the others (figures) right-aligned."""
    cells = [[str(c) for c in r] for r in rows]
    head = [str(c) for c in header]
    for i, row in enumerate(cells):
        if len(row) != len(head):
            raise ValueError(f"table row {i} has {len(row)} cells, the header has {len(head)}")
    widths = [max(len(r[i]) for r in cells + [head]) for i in range(len(head))]

    def line(r: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if i < left or i == len(head) - 1 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(r, widths))).rstrip()

    return "\n".join([line(head), "  ".join("-" * w for w in widths)] + [line(r) for r in cells])


def print_table(header: Sequence[Any], rows: Sequence[Sequence[Any]], title: Optional[str] = None,
                left: int = 1) -> None:
    """Print an optional title line and :func:`format_table`'s table."""
    if title:
        print(title)
    print(format_table(header, rows, left=left), flush=True)
