"""Beyond one machine and beyond memory (issue 21): one subcommand per topic.

    python benchmarks/scale.py disk [--steps N] [--dir DIR] [--keep] [--layout rows|columns] [--no-columns]
    python benchmarks/scale.py disk --existing DIR [--no-h5] [--resident-limit-mb]

``disk``: a dataset larger than comfortable in memory, built by streaming
(``offrl.dataset.DiskDatasetWriter``, ``--layout``: ``rows``, the default,
one record file with every step's fields in one record, or ``columns``, one
file per field) and sampled from disk. Reports, each phase in its own
process (so peak memory is that phase's own):

* build: peak resident memory while streaming ``--steps`` steps (17-dim
  float32 observations, 6-dim float32 actions, episodes of 1000 steps) to
  disk, against the files' size;
* sample: ``sample_transition_batch(256)`` from disk with a warm page cache
  against the same data loaded in memory (interleaved rounds, wall and
  CPU time of the whole process, reader thread included), with each
  ``DiskStore.read_mode`` (``pread``, the default: positional reads, split
  over the reader thread; the same with ``split_reads=False``; ``mmap``:
  through the memory maps), and with ``pread`` from a copy in the other
  layout (built for this comparison unless ``--no-columns``), and the floor
  under positional reads in one thread: the same number of ``os.pread``
  calls (a transition's two records at random rows) without building a
  batch; the warm state is the files dropped from the page cache and read
  once in order (large page-cache folios, as after any sequential read);
  from a cold cache
  (``posix_fadvise(DONTNEED)`` on every column file first), and the same
  random-row reads through ``h5py`` from offrl's HDF5 file (the
  alternative layout, measured to choose between them);
* train: peak resident memory while training IQL for 1,000 steps from disk,
  with the default ``read_mode="pread"``, and with ``read_mode="mmap"``
  without and with ``DiskStore.resident_limit`` (``--resident-limit-mb``,
  32 MB by default: mapped pages released as sampling goes);
* speed: IQL updates (sampling included) from memory, ``pread`` and
  ``mmap`` in interleaved blocks, wall and CPU time per update.

``--existing DIR``: sample and train from a disk dataset already written
(layout ``rows``, not built, not deleted; no copy in the other layout), e.g.
one kept with ``--keep``; ``--no-h5`` skips the HDF5 comparison (which
writes a copy of the dataset).

Peak memory is reported as ``VmHWM`` (everything resident, including clean
file pages the process has mapped) and split into anonymous memory (the
process's own) and file-backed pages (page cache mapped by the memory maps,
which the kernel can drop at any time), sampled every 20 ms.
The free disk space is checked first; with less than 2.5x the dataset's
size free, the largest size that fits is used and said. The big files are
deleted at the end unless ``--keep``.

Other subcommands (data-parallel training, compiled steps) are added to
``SUBCOMMANDS`` by their owners.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Dict, List

import numpy as np

import _harness
import _scale_parallel as _parallel  # the ddp and compile subcommands

OBS_DIM, ACT_DIM, EPISODE = 17, 6, 1000
ROW_BYTES = OBS_DIM * 4 + ACT_DIM * 4 + 4
MARKER = "@@scale-json@@"


log = _harness.log


# ------------------------------------------------------------- memory
def _status() -> Dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) * 1024
    return out


class PeakMemory:
    """Samples this process's resident memory every 20 ms; keeps the peaks."""

    def __init__(self) -> None:
        self.peak = {"VmRSS": 0, "RssAnon": 0, "RssFile": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            time.sleep(0.02)

    def sample(self) -> None:
        s = _status()
        for key in self.peak:
            self.peak[key] = max(self.peak[key], s.get(key, 0))

    def __enter__(self) -> "PeakMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()
        self.peak["VmHWM"] = _status().get("VmHWM", 0)


def _emit(result: dict) -> None:
    print(MARKER + json.dumps(result), flush=True)


def _run_phase(args: List[str]) -> dict:
    out = subprocess.run([sys.executable, os.path.abspath(__file__), *args], stdout=subprocess.PIPE, text=True)
    if out.returncode != 0:
        raise SystemExit(f"phase {args[:2]} failed with exit status {out.returncode}")
    for line in out.stdout.splitlines():
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER):])
    raise SystemExit(f"phase {args[:2]} printed no result")


def _dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path))


def _drop_cache(paths: List[str]) -> bool:
    """Ask the kernel to drop the files' clean pages from the page cache."""
    if not hasattr(os, "posix_fadvise"):
        return False
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return True


def _warm(paths: List[str]) -> None:
    for p in paths:
        with open(p, "rb") as f:
            while f.read(64 << 20):
                pass


# ------------------------------------------------------------- phases
def phase_build(path: str, steps: int, layout: str = "rows") -> None:
    import offrl
    from offrl.dataset import DiskDatasetWriter, Episode

    base = _status()["VmRSS"]
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    with PeakMemory() as mem:
        with DiskDatasetWriter(path, expected_bytes=steps * ROW_BYTES, layout=layout) as writer:
            written = 0
            i = 0
            while written < steps:
                n = min(EPISODE, steps - written)
                writer.add_episode(Episode(
                    observations=rng.standard_normal((n, OBS_DIM), dtype=np.float32),
                    actions=rng.uniform(-1, 1, (n, ACT_DIM)).astype(np.float32),
                    rewards=rng.standard_normal((n, 1), dtype=np.float32),
                    terminated=i % 2 == 0,
                ))
                written += n
                i += 1
    _emit({"seconds": time.perf_counter() - start, "bytes": _dir_bytes(path), "base_rss": base,
           "offrl": offrl.__version__, **mem.peak})


def _h5_batch(h5_columns: list, rows: np.ndarray, next_rows: np.ndarray) -> list:
    """One random mini-batch read through h5py: sorted unique rows per
    selection (what h5py's fancy indexing needs), then put back in order."""
    out = []
    for column, r in ((h5_columns[0], rows), (h5_columns[0], next_rows), (h5_columns[1], rows), (h5_columns[2], rows)):
        unique, inverse = np.unique(r, return_inverse=True)
        out.append(column[unique][inverse])
    return out


def _per_call(fn: Callable[[], Any], n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n


def _per_call_cpu(fn: Callable[[], Any], n: int) -> tuple:
    """(wall, CPU) seconds per call; CPU time is the process's, all its
    threads (the disk store's reader thread included)."""
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n, (time.process_time() - cpu) / n


def _reads_only(path: str, batch: int) -> Callable[[], Any]:
    """The positional reads a scattered transition batch makes from a
    ``layout="rows"`` file (its step's record and the next, per transition,
    at random rows) in one thread, without the rest of the batch: the floor
    under ``read_mode="pread"`` with ``split_reads=False``."""
    with open(os.path.join(path, "manifest.json")) as f:
        record_bytes = int(json.load(f)["record_bytes"])
    fd = os.open(os.path.join(path, "records.bin"), os.O_RDONLY)
    rows = os.path.getsize(os.path.join(path, "records.bin")) // record_bytes
    rng = np.random.default_rng(1)
    fds, sizes = [fd] * batch, [2 * record_bytes] * batch

    def reads() -> bytes:
        offsets = ((rng.integers(1, rows - 1, batch) - 1) * record_bytes).tolist()
        return b"".join(map(os.pread, fds, sizes, offsets))

    return reads


def phase_sample(path: str, other_path: str, h5_path: str, batch: int, calls: int) -> None:
    """``other_path``: the same data in the other layout ("-": none);
    ``h5_path`` "-": no HDF5 comparison."""
    import h5py

    import offrl
    from offrl.dataset import ReplayBuffer

    disk = ReplayBuffer.load(path, in_memory=False)
    mapped = ReplayBuffer.load(path, in_memory=False)
    mapped.buffer.read_mode = "mmap"
    columns = [os.path.join(path, n) for n in os.listdir(path) if n.endswith(".bin")]
    one_thread = ReplayBuffer.load(path, in_memory=False)
    one_thread.buffer.split_reads = False
    sources = {"pread": disk, "pread_one_thread": one_thread, "mmap": mapped}
    if other_path != "-":
        sources["pread_other"] = ReplayBuffer.load(other_path, in_memory=False)
        columns += [os.path.join(other_path, n) for n in os.listdir(other_path) if n.endswith(".bin")]
    memory = ReplayBuffer.load(path)  # the same data, in memory
    sources["memory"] = memory
    offrl.seed(0)
    with open(os.path.join(path, "manifest.json")) as f:
        layout = json.load(f).get("layout", "columns")
    result: Dict[str, Any] = {"batch": batch, "read_mode": disk.buffer.read_mode, "layout": layout}
    calls_of = {name: (lambda data=data: data.sample_transition_batch(batch)) for name, data in sources.items()}
    if layout == "rows":
        calls_of["reads_only"] = _reads_only(path, batch)
    # warm cache: every file dropped from the page cache and read once in order (the page cache then holds it
    # in large folios, as after any sequential read; pages cached by scattered reads of an earlier run sit in
    # small folios, where a random read costs ~35 % more), then interleaved rounds
    _drop_cache(columns)
    _warm(columns)
    for _ in range(calls):  # mmap: map every page first (its steady state in a long run)
        mapped.sample_transition_batch(batch)
    times: Dict[str, list] = {name: [] for name in calls_of}
    for _ in range(5):
        for name, fn in calls_of.items():
            times[name].append(_per_call_cpu(fn, calls))
    result["rounds_us"] = {name: [round(w * 1e6) for w, _ in t] for name, t in times.items()}
    for name, t in times.items():
        t = np.array(t)
        result[f"{name}_s"], result[f"{name}_cpu_s"] = float(np.median(t[:, 0])), float(np.median(t[:, 1]))
        m = np.array(times["memory"])
        result[f"{name}_ratio"] = float(np.median(t[:, 0] / m[:, 0]))
        result[f"{name}_ratio_cpu"] = float(np.median(t[:, 1] / m[:, 1]))
    # cold cache: the first batches after dropping the files' pages
    for name, data in (("pread", disk), ("pread_one_thread", one_thread), ("mmap", mapped),
                       *((("pread_other", sources["pread_other"]),) if "pread_other" in sources else ())):
        disk.buffer.release_pages()
        mapped.buffer.release_pages()  # mapped pages would stay cached whatever fadvise says
        result["fadvise"] = _drop_cache(columns)
        result[f"{name}_cold_first_s"] = _per_call(lambda: data.sample_transition_batch(batch), 1)
        result[f"{name}_cold_s"] = _per_call(lambda: data.sample_transition_batch(batch), 20)
    mapped = sources = calls_of = None
    if h5_path == "-":
        _emit(result)
        return
    # the HDF5 alternative: offrl's file, h5py fancy-index reads
    memory.dump(h5_path)
    memory = None  # freed before the HDF5 reads
    store = disk.buffer
    total = store.transition_count
    rng = np.random.default_rng(0)

    def h5_sample(h5_columns: list) -> list:
        _, rows = store.locate_transitions(rng.integers(total, size=batch))
        return _h5_batch(h5_columns, rows, rows + 1)

    with h5py.File(h5_path, "r") as h5:
        h5_columns = [h5["observations_0"], h5["actions"], h5["rewards"]]
        result["h5_layout"] = str(h5["observations_0"].chunks or "contiguous")
        _warm([h5_path])
        result["h5_warm_s"] = float(np.median([_per_call(lambda: h5_sample(h5_columns), max(calls // 10, 5))
                                               for _ in range(3)]))
    _drop_cache([h5_path])
    with h5py.File(h5_path, "r") as h5:
        h5_columns = [h5["observations_0"], h5["actions"], h5["rewards"]]
        result["h5_cold_s"] = _per_call(lambda: h5_sample(h5_columns), 5)
    os.remove(h5_path)
    _emit(result)


def phase_train(path: str, steps: int, steps_per_epoch: int, resident_limit: int, read_mode: str) -> None:
    import torch

    import offrl
    from offrl.dataset import ReplayBuffer
    from offrl.logging import NoopAdapterFactory

    torch.set_num_threads(1)
    base = _status()
    with PeakMemory() as mem:
        dataset = ReplayBuffer.load(path, in_memory=False)
        dataset.buffer.read_mode = read_mode
        dataset.buffer.resident_limit = resident_limit or None
        algo = offrl.algos.IQLConfig(batch_size=256).create()
        start = time.perf_counter()
        algo.fit(dataset, n_steps=steps, n_steps_per_epoch=steps_per_epoch,
                 logger_adapter=NoopAdapterFactory(), show_progress=False)
        seconds = time.perf_counter() - start
    _emit({"seconds": seconds, "updates_per_s": steps / seconds, "base_rss": base["VmRSS"],
           "base_anon": base["RssAnon"], "base_file": base["RssFile"], **mem.peak})


def phase_speed(path: str, rounds: int, steps: int) -> None:
    """IQL update time (sampling included) from the same data in memory,
    from disk with ``read_mode="pread"`` and with ``"mmap"``: blocks of
    ``steps`` updates from each source in turn (the load moves all three
    alike), wall and this thread's CPU time."""
    import torch

    import offrl
    from offrl.dataset import ReplayBuffer

    torch.set_num_threads(1)
    sources = {"memory": ReplayBuffer.load(path), "pread": ReplayBuffer.load(path, in_memory=False),
               "mmap": ReplayBuffer.load(path, in_memory=False)}
    sources["mmap"].buffer.read_mode = "mmap"
    offrl.seed(0)
    algo = offrl.algos.IQLConfig(batch_size=256).create()
    algo.build_with_dataset(sources["memory"])
    for data in sources.values():
        for _ in range(steps):  # warm-up (and mmap: map pages as a long run would)
            algo.update(data.sample_transition_batch(256))
    times: Dict[str, list] = {name: [] for name in sources}
    for _ in range(rounds):
        for name, data in sources.items():
            times[name].append(_per_call_cpu(lambda: algo.update(data.sample_transition_batch(256)), steps))
    result = {}
    for name, t in times.items():
        t, m = np.array(t), np.array(times["memory"])
        result[name] = {"wall_s": float(np.median(t[:, 0])), "cpu_s": float(np.median(t[:, 1])),
                        "ratio_wall": float(np.median(t[:, 0] / m[:, 0])), "ratio_cpu": float(np.median(t[:, 1] / m[:, 1]))}
    _emit(result)


# ------------------------------------------------------------- driver
def _gb(n: float) -> str:
    return f"{n / 1e9:.3f} GB"


def _pct(n: float, of: float) -> str:
    return f"{100 * n / of:.1f} %"


def run_disk(argv: List[str]) -> None:
    parser = argparse.ArgumentParser(prog="scale.py disk")
    parser.add_argument("--steps", type=int, default=25_000_000)
    parser.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "offrl-scale-disk"))
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--calls", type=int, default=200, help="calls per timing round")
    parser.add_argument("--train-steps", type=int, default=1000)
    parser.add_argument("--steps-per-epoch", type=int, default=1000)
    parser.add_argument("--keep", action="store_true", help="keep the files (deleted by default)")
    parser.add_argument("--layout", choices=("rows", "columns"), default="rows",
                        help="the disk layout trained and sampled from (DiskDatasetWriter's layout)")
    parser.add_argument("--no-columns", action="store_true",
                        help="do not build a copy in the other layout for the sampling comparison")
    parser.add_argument("--speed-rounds", type=int, default=8, help="interleaved rounds of the IQL update timing")
    parser.add_argument("--resident-limit-mb", type=int, nargs="*", default=[32],
                        help="also train with DiskStore.resident_limit set to these sizes (MB)")
    parser.add_argument("--existing", metavar="DIR",
                        help="sample and train from this disk dataset (not built, not deleted, no other-layout copy)")
    parser.add_argument("--no-h5", action="store_true", help="skip the HDF5 comparison (it writes a copy)")
    args = parser.parse_args(argv)

    existing = os.path.abspath(args.existing) if args.existing else None
    if existing:
        args.no_columns, args.keep = True, True
        if not os.path.isfile(os.path.join(existing, "manifest.json")):
            raise SystemExit(f"--existing {existing}: not a disk dataset (no manifest.json)")
        args.dir = os.path.dirname(existing)
    os.makedirs(args.dir, exist_ok=True)
    path = existing or os.path.join(args.dir, "dataset")
    other = "columns" if args.layout == "rows" else "rows"
    other_path = os.path.join(args.dir, f"dataset-{other}")
    h5_path = os.path.join(args.dir, "dataset.h5")
    for p in (() if existing else (path, other_path)):
        if os.path.exists(p):
            shutil.rmtree(p)
    free = shutil.disk_usage(args.dir).free
    steps = args.steps
    # the directory + the HDF5 copy (+ the other layout) for the comparison + a margin
    copies = 2.5 if args.no_columns else 3.5
    if not existing and copies * steps * ROW_BYTES > free:
        steps = int(free / copies / ROW_BYTES)
        log(f"only {_gb(free)} free under {args.dir}: using {steps} steps instead of {args.steps}")
    _harness.print_load("start")
    print(f"free disk under {args.dir}: {_gb(free)}")
    try:
        if existing:
            size = _dir_bytes(path)
            with open(os.path.join(path, "manifest.json")) as f:
                manifest = json.load(f)
            print(f"existing dataset {path}: {manifest['rows']} steps, layout {manifest.get('layout', 'columns')!r}, "
                  f"{_gb(size)} on disk (not built here)")
        else:
            log(f"building {steps} steps in {path} (layout {args.layout!r}) ...")
            build = _run_phase(["_disk-build", path, str(steps), args.layout])
            size = build["bytes"]
            print(f"build: {steps} steps, layout {args.layout!r}, {_gb(size)} on disk in {build['seconds']:.1f} s "
                  f"({size / build['seconds'] / 1e6:.0f} MB/s)")
            for key in ("VmHWM", "RssAnon", "RssFile"):
                print(f"  peak {key}: {_gb(build[key])} = {_pct(build[key], size)} of the file size")
            print(f"  (interpreter + offrl import before writing: {_gb(build['base_rss'])})")
        if not args.no_columns:
            log(f"building the same steps in {other_path} (layout {other!r}, for the sampling comparison) ...")
            other_build = _run_phase(["_disk-build", other_path, str(steps), other])
            print(f"  the same steps in layout {other!r}: {_gb(other_build['bytes'])} in {other_build['seconds']:.1f} s")
        log("sampling ...")
        sample = _run_phase(["_disk-sample", path, "-" if args.no_columns else other_path,
                             "-" if args.no_h5 else h5_path, str(args.batch), str(args.calls)])
        b = sample["batch"]
        print(f"sample_transition_batch({b}), warm page cache, median of 5 interleaved rounds (wall / CPU time): "
              f"memory {sample['memory_s'] * 1e6:.0f} / {sample['memory_cpu_s'] * 1e6:.0f} us")
        for name in ("pread", "pread_one_thread", "mmap", "pread_other"):
            if name + "_s" not in sample:
                continue
            label = (f"layout {other!r}, read_mode='pread'" if name == "pread_other" else
                     f"layout {sample['layout']!r}, read_mode='pread', split_reads=False" if name == "pread_one_thread"
                     else f"layout {sample['layout']!r}, read_mode={name!r}"
                          f"{' (default)' if name == sample['read_mode'] else ''}")
            print(f"  disk {label}: "
                  f"{sample[name + '_s'] * 1e6:.0f} / {sample[name + '_cpu_s'] * 1e6:.0f} us "
                  f"(ratio {sample[name + '_ratio']:.2f}x wall, {sample[name + '_ratio_cpu']:.2f}x CPU); cold cache "
                  f"{sample[name + '_cold_s'] * 1e6:.0f} us (first call {sample[name + '_cold_first_s'] * 1e3:.1f} ms; "
                  f"fadvise DONTNEED applied: {sample['fadvise']})")
        if "reads_only_s" in sample:
            print(f"  floor: the {b} positional reads of a batch alone in one thread (2 records at random rows, no batch "
                  "built): "
                  f"{sample['reads_only_s'] * 1e6:.0f} / {sample['reads_only_cpu_s'] * 1e6:.0f} us "
                  f"({sample['reads_only_ratio']:.2f}x wall, {sample['reads_only_ratio_cpu']:.2f}x CPU of memory's whole batch)")
        if "h5_warm_s" in sample:
            print(f"h5py fancy-index reads of the same rows ({sample['h5_layout']} layout): warm "
                  f"{sample['h5_warm_s'] * 1e6:.0f} us, cold {sample['h5_cold_s'] * 1e6:.0f} us per batch")
        for mode, limit in (("pread", 0), ("mmap", 0), *(("mmap", mb) for mb in args.resident_limit_mb)):
            log(f"training IQL from disk (read_mode {mode}, resident_limit {limit or None} MB) ...")
            train = _run_phase(["_disk-train", path, str(args.train_steps), str(args.steps_per_epoch),
                                str(limit << 20), mode])
            print(f"IQL {args.train_steps} steps from disk, read_mode={mode!r}, "
                  f"resident_limit={f'{limit} MB' if limit else None}: "
                  f"{train['updates_per_s']:.1f} updates/s (n_steps_per_epoch={args.steps_per_epoch})")
            for key in ("VmHWM", "RssAnon", "RssFile"):
                print(f"  peak {key}: {_gb(train[key])} = {_pct(train[key], size)} of the file size")
            print(f"  (after importing torch and offrl, before loading: VmRSS {_gb(train['base_rss'])}, "
                  f"anonymous {_gb(train['base_anon'])}, file-backed (shared libraries) {_gb(train['base_file'])})")
        log("IQL updates from memory / pread / mmap, interleaved ...")
        speed = _run_phase(["_disk-speed", path, str(args.speed_rounds), "25"])
        print(f"IQL update + sample_transition_batch(256), {args.speed_rounds} interleaved rounds of 25 updates "
              "(wall / CPU time per update, ratio to memory): " + "; ".join(
                  f"{name} {v['wall_s'] * 1e3:.1f} / {v['cpu_s'] * 1e3:.1f} ms ({v['ratio_wall']:.2f}x / "
                  f"{v['ratio_cpu']:.2f}x)" for name, v in speed.items()))
    finally:
        if not args.keep:
            shutil.rmtree(path, ignore_errors=True)
            shutil.rmtree(other_path, ignore_errors=True)
            if os.path.exists(h5_path):
                os.remove(h5_path)
            log(f"deleted {path}")
        _harness.print_load("end")


SUBCOMMANDS: Dict[str, Callable[[List[str]], None]] = {"disk": run_disk, **_parallel.SUBCOMMANDS}
_PHASES = {
    "_disk-build": lambda a: phase_build(a[0], int(a[1]), *a[2:3]),
    "_disk-sample": lambda a: phase_sample(a[0], a[1], a[2], int(a[3]), int(a[4])),
    "_disk-train": lambda a: phase_train(a[0], int(a[1]), int(a[2]), int(a[3]), a[4]),
    "_disk-speed": lambda a: phase_speed(a[0], int(a[1]), int(a[2])),
    **_parallel.PHASES,
}


def main(argv: List[str]) -> None:
    if argv and argv[0] in _PHASES:
        _PHASES[argv[0]](argv[1:])
        return
    if not argv or argv[0] not in SUBCOMMANDS:
        raise SystemExit(f"usage: python benchmarks/scale.py {{{','.join(SUBCOMMANDS)}}} [options]")
    SUBCOMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
