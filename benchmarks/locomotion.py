"""Locomotion side by side: offrl and d3rlpy 2.8.1 trained on the same locally
built MuJoCo datasets, with the same configs, updates and seeds, evaluated on
the same episodes; D4RL-normalised scores with the field's reporting
conventions (interquartile mean and stratified bootstrap intervals, as
rliable computes them) and learning curves.

    python benchmarks/locomotion.py run [--jobs 2] [--seeds 3] [--only IQL,BC] [--datasets hopper-medium-v0]
    python benchmarks/locomotion.py status
    python benchmarks/locomotion.py report [--plot]      # needs rliable (see benchmarks/README.md)
    python benchmarks/locomotion.py run --libraries offrl,offrl-bf16 --only SAC   # issue 32's SAC rows (not in the table)
    python benchmarks/locomotion.py run --only PRDC,BEAR,PLASWithPerturbation --seeds 1   # rows beyond the table (EXTRA)

``run`` is resumable: every (library, algorithm, dataset, seed) job writes
its result file ``benchmarks/results/locomotion/<library>-<algorithm>-<dataset>-s<seed>.json``
(atomically) when it ends, and a run skips the jobs whose file exists, so
stopping it (or the machine) loses at most the jobs in flight, and of
those only the updates since their last evaluation: a job saves its state
(``<data>/partial/<job>/``: the model by the library's own ``save_model``,
the update count, curve, times and random generators' states) after each
evaluation but the last and resumes from it; running the same command
again continues (remove the stale ``.running`` claims first: a claim is
kept while its process lives). Jobs are ordered seed-major (every row's
first seed, in both libraries, before any second seed), so a partial run
already compares the libraries on paired jobs. Each job runs in its own
process (offrl in this interpreter, d3rlpy in ``--d3rlpy-python`` /
``$D3RLPY_PYTHON``), with one torch thread; ``--jobs`` runs that many at
once (2 on a 2-core machine when nothing else runs).

A job: the dataset (``offrl.datasets.get_mujoco``, exported once as plain
arrays, so both libraries read identical numbers through their own
``MDPDataset``), the algorithm's config (:func:`config_kwargs`: the settings of
d3rlpy's reproduction scripts, the same in both libraries; ReBRAC at batch
256 instead of 1,024 to fit two cores), ``fitter`` for
the updates with an evaluation every ``updates / 5`` updates: 10 episodes of
the greedy policy, environment ``i`` of an evaluation reset with seed
``EVAL_SEED + i`` (the same episodes in both libraries: gymnasium 1.0.0 and
1.4.0 give bit-identical MuJoCo v5 trajectories, checked). Training time
(wall and process CPU) excludes evaluation; the report's speed is updates
per CPU-second of the training process (one torch thread), which other jobs
on a shared machine do not inflate as they do wall time.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from _harness import find_d3rlpy_python, load_average, quiet_d3rlpy

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results", "locomotion")
EVAL_SEED = 900_000
N_EVAL_EPISODES = 10
N_EVALS = 5
LIBRARIES = ("offrl", "d3rlpy")
#: what a job's ``library`` names: the package it imports and what it changes in the config. ``offrl-bf16``
#: (``--libraries offrl-bf16``, not run by default) is offrl with ``precision="bf16-mixed"``: issue 32's quality check
VARIANTS: Dict[str, Tuple[str, Dict[str, Any]]] = {
    "offrl": ("offrl", {}), "d3rlpy": ("d3rlpy", {}), "offrl-bf16": ("offrl", {"precision": "bf16-mixed"}),
}

MEDIUM4 = ("hopper-medium-v0", "halfcheetah-medium-v0", "walker2d-medium-v0", "hopper-medium-replay-v0")
#: (algorithm, dataset, updates): the issue's minimum table
TABLE: List[Tuple[str, str, int]] = (
    [(algo, dataset, 50_000) for dataset in MEDIUM4 for algo in ("BC", "TD3PlusBC", "IQL", "ReBRAC")]
    + [("CQL", dataset, 10_000) for dataset in ("hopper-medium-v0", "halfcheetah-medium-v0")]
)
#: rows beyond the issue's table, planned only when ``--only`` names their algorithm: SAC (no behaviour
#: regularisation, so not an offline method to compare libraries on) for issue 32's float32 / bf16-mixed check;
#: PRDC, BEAR and PLASWithPerturbation, whose gaps on Pendulum issue 29 asks to re-measure on this data
EXTRA: List[Tuple[str, str, int]] = [(algo, dataset, 50_000) for algo in ("SAC", "PRDC", "BEAR", "PLASWithPerturbation")
                                     for dataset in ("hopper-medium-v0", "halfcheetah-medium-v0")]

#: ReBRAC's (actor_beta, critic_beta) per dataset, from its paper's table (as d3rlpy's reproduction script)
REBRAC_BETAS = {"hopper-medium": (0.01, 0.001), "halfcheetah-medium": (0.001, 0.01), "walker2d-medium": (0.05, 0.1),
                "hopper-medium-replay": (0.05, 0.5), "halfcheetah-medium-replay": (0.01, 0.001),
                "walker2d-medium-replay": (0.05, 0.01)}


def config_kwargs(lib: Any, algo: str, dataset: str) -> Dict[str, Any]:
    """The config of ``algo`` for ``dataset`` built from ``lib`` (offrl or
    d3rlpy: the same names), following d3rlpy's reproduction scripts."""
    standard = lib.preprocessing.StandardObservationScaler
    if algo == "BC":
        return {}
    if algo == "TD3PlusBC":
        return {"actor_learning_rate": 3e-4, "critic_learning_rate": 3e-4, "batch_size": 256, "target_smoothing_sigma": 0.2,
                "target_smoothing_clip": 0.5, "alpha": 2.5, "update_actor_interval": 2, "observation_scaler": standard()}
    if algo == "IQL":
        return {"actor_learning_rate": 3e-4, "critic_learning_rate": 3e-4, "batch_size": 256, "weight_temp": 3.0,
                "max_weight": 100.0, "expectile": 0.7,
                "reward_scaler": lib.preprocessing.ReturnBasedRewardScaler(multiplier=1000.0),
                "observation_scaler": standard()}
    if algo == "ReBRAC":
        key = dataset.rsplit("-v", 1)[0]
        actor_beta, critic_beta = REBRAC_BETAS.get(key, (0.01, 0.01))
        # the paper's (and d3rlpy's script's) batch is 1,024; 256 here, in both libraries, to fit the
        # benchmark on 2 CPU cores (a ReBRAC update at 1,024 costs about four of the other algorithms')
        return {"actor_learning_rate": 1e-3, "critic_learning_rate": 1e-3, "batch_size": 256, "gamma": 0.99,
                "actor_encoder_factory": lib.models.VectorEncoderFactory([256, 256, 256]),
                "critic_encoder_factory": lib.models.VectorEncoderFactory([256, 256, 256], use_layer_norm=True),
                "target_smoothing_sigma": 0.2, "target_smoothing_clip": 0.5, "update_actor_interval": 2,
                "actor_beta": actor_beta, "critic_beta": critic_beta, "observation_scaler": standard()}
    if algo == "CQL":
        encoder = lib.models.VectorEncoderFactory([256, 256, 256])
        return {"actor_learning_rate": 1e-4, "critic_learning_rate": 3e-4, "temp_learning_rate": 1e-4,
                "alpha_learning_rate": 0.0, "conservative_weight": 5.0, "batch_size": 256, "n_action_samples": 10,
                "actor_encoder_factory": encoder, "critic_encoder_factory": encoder}
    if algo == "SAC":  # d3rlpy's script: no observation scaler
        return {"actor_learning_rate": 3e-4, "critic_learning_rate": 3e-4, "temp_learning_rate": 3e-4, "batch_size": 256}
    if algo == "PRDC":
        return {"actor_learning_rate": 3e-4, "critic_learning_rate": 3e-4, "batch_size": 256, "target_smoothing_sigma": 0.2,
                "target_smoothing_clip": 0.5, "alpha": 2.5, "update_actor_interval": 2, "observation_scaler": standard()}
    if algo == "PLASWithPerturbation":  # d3rlpy's script, its 500,000-update VAE warm-up cut to half of the updates
        encoder = lib.models.VectorEncoderFactory([400, 300])
        vae = lib.models.VectorEncoderFactory([128, 128] if "medium-replay" in dataset else [750, 750])
        return {"actor_encoder_factory": encoder, "critic_encoder_factory": encoder, "imitator_encoder_factory": vae,
                "lam": 1.0, "warmup_steps": 25_000, "action_flexibility": 0.05}
    if algo == "BEAR":  # d3rlpy's script: the temperature fixed near zero, a wide VAE, the kernel by environment
        return {"imitator_encoder_factory": lib.models.VectorEncoderFactory([750, 750]), "temp_learning_rate": 0.0,
                "initial_temperature": 1e-20, "mmd_kernel": "gaussian" if dataset.startswith("halfcheetah") else "laplacian"}
    raise ValueError(f"no config for {algo}")


# ------------------------------------------------------------------ data
def data_directory() -> str:
    base = os.environ.get("OFFRL_BENCH_DATA") or os.path.join(os.path.expanduser("~"), ".cache", "offrl", "bench-locomotion")
    os.makedirs(base, exist_ok=True)
    return base


def dataset_arrays(name: str) -> str:
    """``<data>/<name>.npz`` holding the dataset as plain arrays (built and
    exported on first use): observations, actions, rewards, terminals,
    timeouts, one row per step, episodes in order."""
    path = os.path.join(data_directory(), f"{name}.npz")
    if os.path.exists(path):
        return path
    import offrl

    dataset, _ = offrl.datasets.get_mujoco(name)
    columns: Dict[str, list] = {k: [] for k in ("observations", "actions", "rewards", "terminals", "timeouts")}
    for episode in dataset.episodes:
        n = len(episode.rewards)
        columns["observations"].append(np.asarray(episode.observations, np.float32)[:n])
        columns["actions"].append(np.asarray(episode.actions, np.float32)[:n])
        columns["rewards"].append(np.asarray(episode.rewards, np.float32).reshape(n))
        ends = np.zeros(n, np.float32)
        ends[-1] = 1.0
        columns["terminals"].append(ends if episode.terminated else np.zeros(n, np.float32))
        columns["timeouts"].append(np.zeros(n, np.float32) if episode.terminated else ends)
    arrays = {k: np.concatenate(v) for k, v in columns.items()}
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".npz")
    os.close(fd)
    np.savez(tmp, **arrays)
    os.replace(tmp, path)
    return path


def dataset_sha256(name: str) -> str:
    """The SHA-256 of the HDF5 file ``name`` was exported from (its card
    gives the development machine's; on another CPU the episodes, so the
    bytes, differ): a result records which data it trained on."""
    from offrl.datasets.mujoco import cache_path

    with open(cache_path(name) + ".sha256", "rb") as f:
        return f.read(200).split()[0].decode("ascii")


def envs_problem(python: str, env_ids: List[str]) -> Optional[str]:
    """The last line of the error ``python`` gives making ``env_ids`` (the
    evaluation environments), or None when it makes them all."""
    code = "import sys, gymnasium\nfor name in sys.argv[1:]:\n    gymnasium.make(name).close()"
    done = subprocess.run([python, "-c", code, *env_ids], capture_output=True, text=True)
    if done.returncode == 0:
        return None
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    return lines[-1] if lines else f"exit status {done.returncode}"


def bf16_kind() -> str:
    """``hardware``: the CPU has bf16 units; ``emulated``: bf16-mixed forced
    on without them (``OFFRL_BF16=1``): torch rounds the products' inputs to
    bf16 and accumulates in float32 as the units do, in software, so such a
    run's scores measure bf16's arithmetic and its speed means nothing."""
    from offrl.training.precision import cpu_bf16_flags

    return "hardware" if cpu_bf16_flags() else "emulated"


def bf16_cpu() -> bool:
    """Whether offrl's bf16-mixed runs in bf16 on this CPU (``OFFRL_BF16``
    included: on a CPU without bf16 units, emulated), not its float32
    fallback."""
    from offrl.training.precision import bf16_available

    return bf16_available("cpu")


# --------------------------------------------------------------- a job
def evaluate(predict: Any, env_id: str) -> List[float]:
    import gymnasium

    env = gymnasium.make(env_id)
    returns = []
    for i in range(N_EVAL_EPISODES):
        observation, _ = env.reset(seed=EVAL_SEED + i)
        total, done = 0.0, False
        while not done:
            action = predict(np.asarray(observation, np.float32)[None])[0]
            observation, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return returns


def run_job(job: Dict[str, Any]) -> Dict[str, Any]:
    """Train one (library, algorithm, dataset, seed) and measure it."""
    import torch

    torch.set_num_threads(1)
    package, changes = VARIANTS[job["library"]]
    if package == "offrl":
        import offrl as lib
        from offrl.logging import NoopAdapterFactory
        from offrl.models.plain_mlp import plain_backward_enabled

        device = "cpu"
        if changes.get("precision", "float32") != "float32":
            # bf16's arithmetic is what the variant measures: below 256 rows on the CPU (BC at batch 100) the
            # written-out float32 step would run instead (offrl.training.precision.WRITTEN_OUT_FASTER_BELOW)
            plain_backward_enabled(False)
    else:
        import d3rlpy as lib
        from d3rlpy.logging import NoopAdapterFactory

        quiet_d3rlpy()
        device = "cpu:0"
    lib.seed(job["seed"])
    with np.load(job["data"]) as saved:
        data = dict(saved)
    dataset = lib.dataset.MDPDataset(data["observations"], data["actions"], data["rewards"], data["terminals"],
                                     data["timeouts"])
    kwargs = {**config_kwargs(lib, job["algo"], job["dataset"]), **changes}
    algo = getattr(lib.algos, f"{job['algo']}Config")(**kwargs).create(device=device)
    interval = job["updates"] // N_EVALS
    partial = job.get("partial")  # a directory: the job's state at its last evaluation, to resume from
    done = _load_partial(partial, algo, dataset, lib) if partial else None
    progress = done or {"epochs": 0, "curve": [], "train_wall_s": 0.0, "train_cpu_s": 0.0, "eval_wall_s": 0.0,
                        "eval_cpu_s": 0.0, "segments": 0}
    progress["segments"] += 1
    curve: List[Dict[str, Any]] = progress["curve"]
    clock = {"wall": time.perf_counter(), "cpu": time.process_time()}

    def evaluate_epoch(epoch: int) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        progress["train_wall_s"] += wall - clock["wall"]
        progress["train_cpu_s"] += cpu - clock["cpu"]
        returns = evaluate(algo.predict, job["env_id"])
        epochs = progress["epochs"] = progress["epochs"] + 1
        curve.append({"updates": epochs * interval, "returns": returns, "mean": float(np.mean(returns))})
        progress["eval_wall_s"] += time.perf_counter() - wall
        progress["eval_cpu_s"] += time.process_time() - cpu
        if partial and epochs < N_EVALS:
            _save_partial(partial, algo, progress, lib)
        clock.update(wall=time.perf_counter(), cpu=time.process_time())

    remaining = job["updates"] - progress["epochs"] * interval
    options = {"n_steps": remaining, "n_steps_per_epoch": interval, "show_progress": False,
               "logger_adapter": NoopAdapterFactory(), "save_interval": 10**9}
    if remaining > 0 and job["algo"] == "PRDC":  # d3rlpy's PRDC builds its neighbour index in fit(), not in fitter()
        algo.fit(dataset, epoch_callback=lambda _algo, epoch, _step: evaluate_epoch(epoch), **options)
    elif remaining > 0:
        for epoch, _metrics in algo.fitter(dataset, **options):
            evaluate_epoch(epoch)
    return {"curve": curve, "final_returns": curve[-1]["returns"], "train_wall_s": round(progress["train_wall_s"], 2),
            "train_cpu_s": round(progress["train_cpu_s"], 2), "eval_wall_s": round(progress["eval_wall_s"], 2),
            "updates_per_s": round(job["updates"] / progress["train_wall_s"], 3), "library_version": lib.__version__,
            "config_changes": changes, "segments": progress["segments"],
            "torch_version": torch.__version__}


# ------------------------------------------------------------------ resuming a job
# A job saves its state after each evaluation but the last (the weights and optimizer moments by the library's own
# ``save_model``, the updates done, the curve and times so far, the random generators' states), so a job cut off by
# the end of a session restarts at its last evaluation, not at zero. The continued run starts from the saved weights,
# optimizer moments, update count and generators (numpy's, Python's, torch's, offrl's): checked on 50-update jobs cut
# after their second evaluation (offrl BC, BEAR, PRDC, bf16-mixed CQL; d3rlpy BC, BEAR, PRDC), it gave the same
# evaluations as the uninterrupted job, number for number.
def _random_state(lib: Any) -> Dict[str, Any]:
    import base64
    import random

    import torch

    kind, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss = random.getstate()
    state = {"numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(cached)],
             "python": [version, list(internal), gauss],
             "torch": base64.b64encode(torch.random.get_rng_state().numpy().tobytes()).decode("ascii")}
    if lib.__name__ == "offrl":
        from offrl import _random

        state["offrl"] = _random.get_rng().bit_generator.state
    return state


def _set_random_state(state: Dict[str, Any], lib: Any) -> None:
    import base64
    import random

    import torch

    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.random.set_rng_state(torch.from_numpy(np.frombuffer(base64.b64decode(state["torch"]), dtype=np.uint8).copy()))
    if "offrl" in state:
        from offrl import _random

        _random.get_rng().bit_generator.state = state["offrl"]


def _save_partial(directory: str, algo: Any, progress: Dict[str, Any], lib: Any) -> None:
    """The job's state after ``progress["epochs"]`` evaluations, written
    atomically (the model file first, then the record naming it)."""
    os.makedirs(directory, exist_ok=True)
    model = f"model_{progress['epochs']}.d3"
    tmp = os.path.join(directory, model + ".tmp")
    algo.save_model(tmp)
    os.replace(tmp, os.path.join(directory, model))
    record = dict(progress, model=model, grad_step=int(algo.grad_step), random=_random_state(lib))
    fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(record, f)
    os.replace(tmp, os.path.join(directory, "state.json"))
    for old in glob.glob(os.path.join(directory, "model_*.d3")):
        if os.path.basename(old) != model:
            os.remove(old)


def _load_partial(directory: str, algo: Any, dataset: Any, lib: Any) -> Optional[Dict[str, Any]]:
    """The progress saved in ``directory`` with ``algo`` built and loaded
    from it (weights, optimizer moments, update count, random states), or
    None when there is none."""
    path = os.path.join(directory, "state.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        record = json.load(f)
    algo.build_with_dataset(dataset)
    algo.load_model(os.path.join(directory, record.pop("model")))
    algo._grad_step = record.pop("grad_step")
    _set_random_state(record.pop("random"), lib)
    print(f"resumed after {record['epochs']} evaluations ({record['segments']} segment(s) so far)", flush=True)
    return record


# ------------------------------------------------------------------ driver
def job_name(library: str, algo: str, dataset: str, seed: int) -> str:
    return f"{library}-{algo}-{dataset}-s{seed}"


def planned(args: argparse.Namespace) -> List[Dict[str, Any]]:
    only = set(args.only.split(",")) if args.only else None
    datasets = set(args.datasets.split(",")) if args.datasets else None
    jobs = []
    rows = TABLE + [row for row in EXTRA if only and row[0] in only]
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        for algo, dataset, updates in rows:
            if (only and algo not in only) or (datasets and dataset not in datasets):
                continue
            for library in args.libraries:
                jobs.append({"library": library, "algo": algo, "dataset": dataset, "seed": seed, "updates": updates})
    return jobs


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _claim(name: str) -> bool:
    """Mark ``name`` as running (a ``.running`` file with this process's id);
    False when another live process holds it."""
    marker = os.path.join(RESULTS, name + ".running")
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        try:
            with open(marker) as f:
                pid = int(f.read().strip() or 0)
        except (OSError, ValueError):
            pid = 0
        if pid and _alive(pid):
            return False
        os.remove(marker)
        return _claim(name)
    with os.fdopen(fd, "w") as f:
        f.write(str(os.getpid()))
    return True


def run(args: argparse.Namespace) -> int:
    from offrl._scores import ENV_IDS

    os.makedirs(RESULTS, exist_ok=True)
    d3rlpy_python = find_d3rlpy_python(args.d3rlpy_python)
    jobs = [j for j in planned(args) if not os.path.exists(os.path.join(RESULTS, job_name(**_key(j)) + ".json"))]
    if not d3rlpy_python:
        print("d3rlpy: not given (--d3rlpy-python or $D3RLPY_PYTHON); offrl jobs only", flush=True)
        jobs = [j for j in jobs if VARIANTS[j["library"]][0] == "offrl"]
    d3rlpy_envs = sorted({ENV_IDS[j["dataset"].split("-", 1)[0]] for j in jobs if VARIANTS[j["library"]][0] == "d3rlpy"})
    problem = d3rlpy_python and d3rlpy_envs and envs_problem(d3rlpy_python, d3rlpy_envs)
    if problem:  # found now, not after the first job's training, at its first evaluation
        print(f"d3rlpy's interpreter {d3rlpy_python} cannot make {', '.join(d3rlpy_envs)}: {problem}\n"
              f"install the environments there: {d3rlpy_python} -m pip install \"gymnasium[mujoco]==1.0.0\" "
              "(d3rlpy 2.8.1's gymnasium)", flush=True)
        return 2
    float32_jobs = [j for j in jobs if VARIANTS[j["library"]][1].get("precision", "float32") == "float32"]
    if len(float32_jobs) < len(jobs) and not bf16_cpu():
        # offrl would warn and train in float32: a row labelled bf16-mixed that measured float32
        print("bf16-mixed rows skipped: this CPU has no bf16 units (no avx512_bf16 / amx_bf16 / bf16 flag)", flush=True)
        jobs = float32_jobs
    elif len(float32_jobs) < len(jobs) and bf16_kind() == "emulated":
        from offrl.training.precision import ENV_VAR

        print(f"bf16-mixed rows run with emulated bf16 products ({ENV_VAR}=1 on a CPU without bf16 units): "
              "their scores measure bf16's arithmetic, their speed does not (recorded as bf16: emulated)", flush=True)
    print(f"{len(jobs)} jobs to run, {args.jobs} at a time; results in {RESULTS}", flush=True)
    running: List[Tuple[subprocess.Popen, Dict[str, Any], str, float]] = []
    queue = list(jobs)
    while queue or running:
        while queue and len(running) < args.jobs:
            job = queue.pop(0)
            name = job_name(**_key(job))
            if os.path.exists(os.path.join(RESULTS, name + ".json")) or not _claim(name):
                continue
            env = job["dataset"].split("-", 1)[0]
            spec = dict(job, data=dataset_arrays(job["dataset"]), data_sha256=dataset_sha256(job["dataset"]),
                        env_id=ENV_IDS[env], output=os.path.join(RESULTS, name + ".json"),
                        partial=os.path.join(data_directory(), "partial", name))
            python = sys.executable if VARIANTS[job["library"]][0] == "offrl" else d3rlpy_python
            log = open(os.path.join(data_directory(), name + ".log"), "w")
            proc = subprocess.Popen([python, os.path.abspath(__file__), "worker", json.dumps(spec)],
                                    stdout=log, stderr=subprocess.STDOUT)
            running.append((proc, job, name, time.time()))
            print(f"{_now()} start {name}", flush=True)
        time.sleep(2)
        for entry in list(running):
            proc, job, name, started = entry
            if proc.poll() is None:
                continue
            running.remove(entry)
            marker = os.path.join(RESULTS, name + ".running")
            if os.path.exists(marker):
                os.remove(marker)
            status = "done" if proc.returncode == 0 else f"FAILED ({proc.returncode}; log in {data_directory()})"
            print(f"{_now()} {status} {name} in {time.time() - started:.0f} s", flush=True)
    return 0


def _key(job: Dict[str, Any]) -> Dict[str, Any]:
    return {k: job[k] for k in ("library", "algo", "dataset", "seed")}


def _now() -> str:
    return datetime.datetime.now().strftime("%H:%M:%S")


def worker(spec_text: str) -> int:
    job = json.loads(spec_text)
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    load_start = load_average()
    result = run_job(job)
    record = {k: job[k] for k in ("library", "algo", "dataset", "seed", "updates", "env_id", "data_sha256")}
    record.update(result)
    if VARIANTS[job["library"]][1].get("precision", "float32") != "float32":
        record["bf16"] = bf16_kind()
    record.update({"started": started, "load_start": load_start, "load_end": load_average(),
                   "machine": f"{platform.machine()} {_cpu_model()}, {os.cpu_count()} CPUs", "threads": 1})
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(job["output"]), suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    os.replace(tmp, job["output"])
    if job.get("partial"):
        import shutil

        shutil.rmtree(job["partial"], ignore_errors=True)
    return 0


def _cpu_model() -> str:
    from offrl._cpu import cpuinfo

    return cpuinfo().get("model name") or platform.processor() or "unknown CPU"


# ------------------------------------------------------------------ report
def load_results() -> List[Dict[str, Any]]:
    records = []
    for path in sorted(glob.glob(os.path.join(RESULTS, "*.json"))):
        with open(path) as f:
            records.append(json.load(f))
    return records


def status(args: argparse.Namespace) -> int:
    done = {job_name(**_key(r)) for r in load_results()}
    jobs = planned(args)
    left = [job_name(**_key(j)) for j in jobs if job_name(**_key(j)) not in done]
    cpu = sum(r["train_cpu_s"] for r in load_results())
    print(f"{len(jobs) - len(left)} of {len(jobs)} jobs done ({cpu / 3600:.1f} CPU-hours of training so far)")
    for name in left[:10]:
        print(f"  next: {name}")
    return 0


#: the seed of every bootstrap interval (set afresh before each): the same result files give the same report.
#: rliable's stratified bootstrap draws its indices from numpy's global generator (np.random.choice), not
#: from the random_state it passes on to arch, so the global generator is what is seeded
BOOTSTRAP_SEED = 0


def report(args: argparse.Namespace) -> int:
    from offrl._scores import get_normalized_score

    try:
        from rliable import library as rly
        from rliable import metrics as rly_metrics
    except ImportError:
        rly = None
    records = load_results()
    rows: Dict[Tuple[str, str], Dict[str, Dict[int, Dict[str, Any]]]] = {}
    for r in records:
        rows.setdefault((r["algo"], r["dataset"]), {}).setdefault(r["library"], {})[r["seed"]] = r
    lines = ["| algorithm | dataset | updates | seeds | offrl score | d3rlpy score | offrl IQM [95% CI] | d3rlpy IQM [95% CI] "
             "| offrl upd/CPU-s | d3rlpy upd/CPU-s | speed |", "|" + "---|" * 11]
    scores_by_lib: Dict[str, List[np.ndarray]] = {lib: [] for lib in LIBRARIES}
    for algo, dataset, updates in TABLE + EXTRA:  # the extra rows where both libraries ran them, outside the aggregate
        by_lib = rows.get((algo, dataset), {})
        seeds = sorted(set(by_lib.get("offrl", {})) & set(by_lib.get("d3rlpy", {})))
        if not seeds:
            continue
        cells, iqm, speed = {}, {}, {}
        for lib in LIBRARIES:
            # one score per seed: the mean normalised return of its last evaluation
            scores = np.array([np.mean(get_normalized_score(dataset, by_lib[lib][s]["final_returns"])) for s in seeds])
            if (algo, dataset, updates) in TABLE:
                scores_by_lib[lib].append(scores)
            cells[lib] = f"{scores.mean():.1f} ± {scores.std():.1f}"
            iqm[lib] = _iqm_cell(rly, rly_metrics if rly else None, {lib: scores[:, None]}, lib)
            # per CPU-second of the training process: on a shared machine wall time counts other jobs too
            speed[lib] = float(np.mean([by_lib[lib][s]["updates"] / by_lib[lib][s]["train_cpu_s"] for s in seeds]))
        lines.append(f"| {algo} | {dataset} | {updates:,} | {len(seeds)} | {cells['offrl']} | {cells['d3rlpy']} | {iqm['offrl']} "
                     f"| {iqm['d3rlpy']} | {speed['offrl']:.1f} | {speed['d3rlpy']:.1f} | {speed['offrl'] / speed['d3rlpy']:.2f}x |")
    print("\n".join(lines))
    if rly is not None and all(scores_by_lib[lib] for lib in LIBRARIES):
        n = min(len(s) for s in scores_by_lib["offrl"])
        matrix = {lib: np.stack([s[:n] for s in scores_by_lib[lib]], axis=1) for lib in LIBRARIES}  # (seeds, tasks)
        np.random.seed(BOOTSTRAP_SEED)  # see BOOTSTRAP_SEED
        point, interval = rly.get_interval_estimates(matrix, lambda x: np.array([rly_metrics.aggregate_iqm(x)]), reps=5000)
        for lib in LIBRARIES:
            # the aggregate needs as many runs per row: the first n seeds of each (with one, no interval)
            spread = (f"[{interval[lib][0][0]:.1f}, {interval[lib][1][0]:.1f}] (stratified bootstrap, 95 %)" if n > 1
                      else "(one seed per row so far: no interval)")
            print(f"{lib}: IQM over all {len(scores_by_lib[lib])} rows, seeds 0-{n - 1}: {point[lib][0]:.1f} {spread}")
    elif rly is None:
        print("(IQM intervals need rliable: run the report with a Python that has it, see benchmarks/README.md)")
    precision_table(rows)
    late_table(rows)
    data_table(records)
    if args.plot:
        plot_curves(rows, os.path.join(RESULTS, "curves.png"))
    return 0


def data_table(records: List[Dict[str, Any]]) -> None:
    """Which build of each dataset the results trained on: the SHA-256 of
    its HDF5 file against the card's (on another CPU the episodes, so the
    bytes, differ; both libraries of one machine read the same file, so each
    seed's pair stays paired). Results made before the field existed say
    "not recorded"."""
    from offrl._scores import REFERENCE_FILE

    with open(REFERENCE_FILE, encoding="utf-8") as f:
        cards = {name: entry.get("sha256") for name, entry in json.load(f)["datasets"].items()}
    builds: Dict[Tuple[str, Optional[str]], List[Dict[str, Any]]] = {}
    for r in records:
        builds.setdefault((r["dataset"], r.get("data_sha256")), []).append(r)
    lines = ["| dataset | build (SHA-256) | results | machines |", "|---|---|---|---|"]
    for (dataset, sha), group in sorted(builds.items(), key=lambda item: (item[0][0], item[0][1] or "")):
        build = ("not recorded" if sha is None else
                 f"the card's ({sha[:12]})" if sha == cards.get(dataset) else f"another ({sha[:12]})")
        machines = sorted({str(r.get("machine", "?")) for r in group})
        lines.append(f"| {dataset} | {build} | {len(group)} | {'; '.join(machines)} |")
    print("\ndata each result trained on (the HDF5 file's SHA-256 against the card's)")
    print("\n".join(lines))


def precision_table(rows: Dict[Tuple[str, str], Dict[str, Dict[int, Dict[str, Any]]]]) -> None:
    """offrl in float32 against offrl in bf16-mixed on the seeds both ran:
    normalised scores (mean ± std over seeds, and the difference of means
    against the larger of the two spreads), the bf16 speed-up in updates
    per CPU-second and bf16-mixed's speed against d3rlpy's float32 on the
    same row (d3rlpy's mean over every seed it ran there; issue 32)."""
    from offrl._scores import get_normalized_score

    lines = ["| algorithm | dataset | updates | seeds | float32 score | bf16-mixed score | difference | "
             "within the seeds' spread | float32 upd/CPU-s | bf16 upd/CPU-s | bf16 speed-up | bf16 / d3rlpy |", "|" + "---|" * 12]
    for algo, dataset, updates in TABLE + EXTRA:
        by_lib = rows.get((algo, dataset), {})
        seeds = sorted(set(by_lib.get("offrl", {})) & set(by_lib.get("offrl-bf16", {})))
        if not seeds:
            continue
        scores, speed = {}, {}
        for lib in ("offrl", "offrl-bf16"):
            scores[lib] = np.array([np.mean(get_normalized_score(dataset, by_lib[lib][s]["final_returns"]))
                                    for s in seeds])
            speed[lib] = float(np.mean([by_lib[lib][s]["updates"] / by_lib[lib][s]["train_cpu_s"] for s in seeds]))
        difference = scores["offrl-bf16"].mean() - scores["offrl"].mean()
        spread = max(scores["offrl"].std(), scores["offrl-bf16"].std())
        within = "-" if len(seeds) < 2 else ("yes" if abs(difference) <= spread else "no")
        # d3rlpy's runs of the same seeds: a seed's runs share a machine, other seeds may have run on another CPU
        d3rlpy_runs = [run for seed, run in by_lib.get("d3rlpy", {}).items() if seed in seeds]
        against = (f"{speed['offrl-bf16'] / np.mean([r['updates'] / r['train_cpu_s'] for r in d3rlpy_runs]):.2f}x"
                   if d3rlpy_runs else "-")
        bf16_speed = f"{speed['offrl-bf16']:.1f} | {speed['offrl-bf16'] / speed['offrl']:.2f}x | {against}"
        emulated = [s for s in seeds if by_lib["offrl-bf16"][s].get("bf16") == "emulated"]
        if emulated:  # software bf16: the scores stand, the speed is not bf16's
            bf16_speed = f"emulated (seed{'s' * (len(emulated) > 1)} {', '.join(map(str, emulated))}) | - | -"
        lines.append(f"| {algo} | {dataset} | {updates:,} | {len(seeds)} | {scores['offrl'].mean():.1f} ± "
                     f"{scores['offrl'].std():.1f} | {scores['offrl-bf16'].mean():.1f} ± {scores['offrl-bf16'].std():.1f} "
                     f"| {difference:+.1f} | {within} | {speed['offrl']:.1f} | {bf16_speed} |")
    if len(lines) > 2:
        print("\noffrl float32 against bf16-mixed (the same seeds, data and evaluation episodes)")
        print("\n".join(lines))


def late_table(rows: Dict[Tuple[str, str], Dict[str, Dict[int, Dict[str, Any]]]], last: int = 3) -> None:
    """How much one evaluation decides a row: per library, the score of the
    last evaluation (the table's) beside the mean of the last ``last``
    evaluations of each seed (mean ± std over seeds), and the evaluation
    swing: the mean absolute change of a seed's score between consecutive
    evaluations over the same stretch, both libraries pooled. A gap between
    the libraries smaller than the swing is within what one evaluation
    moves by; the headline stays the last evaluation's, as the field
    reports it."""
    from offrl._scores import get_normalized_score

    lines = [f"| algorithm | dataset | seeds | offrl last | d3rlpy last | offrl mean of last {last} | d3rlpy mean of last {last} "
             "| evaluation swing |", "|" + "---|" * 8]
    for algo, dataset, _updates in TABLE + EXTRA:
        by_lib = rows.get((algo, dataset), {})
        seeds = sorted(set(by_lib.get("offrl", {})) & set(by_lib.get("d3rlpy", {})))
        if not seeds:
            continue
        cells, swings = [], []
        for lib in LIBRARIES:
            curves = [[float(np.mean(get_normalized_score(dataset, p["returns"]))) for p in by_lib[lib][s]["curve"][-last:]]
                      for s in seeds]
            final = np.array([c[-1] for c in curves])
            late = np.array([np.mean(c) for c in curves])
            swings += [abs(b - a) for c in curves for a, b in zip(c, c[1:])]
            cells.append((f"{final.mean():.1f} ± {final.std():.1f}", f"{late.mean():.1f} ± {late.std():.1f}"))
        swing = f"{np.mean(swings):.1f}" if swings else "-"
        lines.append(f"| {algo} | {dataset} | {len(seeds)} | {cells[0][0]} | {cells[1][0]} | {cells[0][1]} | {cells[1][1]} "
                     f"| {swing} |")
    if len(lines) > 2:
        print(f"\nthe last evaluation against the mean of the last {last} (normalised scores; the swing: mean |change| "
              "between consecutive evaluations)")
        print("\n".join(lines))


def _iqm_cell(rly: Any, rly_metrics: Any, matrix: Dict[str, np.ndarray], lib: str) -> str:
    if rly is None or matrix[lib].shape[0] < 2:
        return "-"
    np.random.seed(BOOTSTRAP_SEED)  # see BOOTSTRAP_SEED
    point, interval = rly.get_interval_estimates(matrix, lambda x: np.array([rly_metrics.aggregate_iqm(x)]), reps=2000)
    return f"{point[lib][0]:.1f} [{interval[lib][0][0]:.1f}, {interval[lib][1][0]:.1f}]"


def plot_curves(rows: Dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from offrl._scores import get_normalized_score

    keys = [(a, d) for a, d, _ in TABLE if (a, d) in rows]
    if not keys:
        return
    cols = 4
    fig, axes = plt.subplots((len(keys) + cols - 1) // cols, cols, figsize=(4 * cols, 3 * ((len(keys) + cols - 1) // cols)),
                             squeeze=False)
    for ax, (algo, dataset) in zip(axes.flat, keys):
        for lib, color in (("offrl", "tab:blue"), ("d3rlpy", "tab:orange")):
            runs = list(rows[(algo, dataset)].get(lib, {}).values())
            if not runs:
                continue
            steps = [p["updates"] for p in runs[0]["curve"]]
            curves = np.array([[np.mean(get_normalized_score(dataset, p["returns"])) for p in r["curve"]] for r in runs
                               if len(r["curve"]) == len(steps)])
            mean, std = curves.mean(0), curves.std(0)
            ax.plot(steps, mean, color=color, label=f"{lib} ({len(curves)} seeds)")
            ax.fill_between(steps, mean - std, mean + std, color=color, alpha=0.2)
        ax.set_title(f"{algo} {dataset}", fontsize=9)
        ax.set_xlabel("updates")
        ax.set_ylabel("normalised score")
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    print(f"learning curves: {path}")


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:
        return worker(argv[1])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["run", "status", "report"])
    parser.add_argument("--jobs", type=int, default=1, help="jobs at once (default 1)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--only", default=None, help="algorithms, comma-separated")
    parser.add_argument("--datasets", default=None, help="datasets, comma-separated")
    parser.add_argument("--d3rlpy-python", default=None)
    parser.add_argument("--libraries", default=",".join(LIBRARIES),
                        help=f"run / status: comma-separated, of {', '.join(VARIANTS)} (default: offrl,d3rlpy; "
                             "offrl-bf16 is offrl with precision='bf16-mixed')")
    parser.add_argument("--plot", action="store_true", help="report: also draw the learning curves")
    args = parser.parse_args(argv)
    args.libraries = [name.strip() for name in args.libraries.split(",") if name.strip()]
    unknown = [name for name in args.libraries if name not in VARIANTS]
    if unknown or not args.libraries:
        parser.error(f"--libraries: unknown {', '.join(unknown) or '(none given)'}; expected some of {', '.join(VARIANTS)}")
    return {"run": run, "status": status, "report": report}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
