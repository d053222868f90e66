"""MuJoCo locomotion datasets built locally by D4RL's recipes.

``get_mujoco(name)`` returns ``(dataset, env)`` for ``hopper``,
``halfcheetah`` and ``walker2d`` (gymnasium's ``Hopper-v5``,
``HalfCheetah-v5``, ``Walker2d-v5``) × ``random``, ``medium``,
``medium-replay``, ``medium-expert``, ``expert``, named with a recipe
version (``hopper-medium-v0``): a changed recipe gets a new version, so a
cached file is never silently replaced by other data.

The recipes follow D4RL (Fu et al., 2020, arXiv:2004.07219), with
behaviour policies that offrl's own SAC trained online
(``datasets/mujoco_behaviour.py``; shipped in ``offrl/datasets/behaviour/``
as float16 safetensors, read without unpickling):

* ``random``: uniform random actions;
* ``medium``: the first SAC snapshot whose sampled return reached a third of
  the expert's, acting stochastically (actions sampled from its squashed
  Gaussian);
* ``expert``: the fully trained policy (the best snapshot of the last third
  of training), acting stochastically;
* ``medium-replay``: what SAC's replay buffer held when it reached medium,
  replayed: 10,000 uniform random steps (SAC's warm-up), then each training
  snapshot acting stochastically for the 10,000 environment steps that
  followed it in training;
* ``medium-expert``: ``medium`` followed by ``expert`` (half the steps each).

``random``, ``medium`` and ``expert`` have 1,000,000 steps by default,
``medium-expert`` 2,000,000 (D4RL's sizes), ``medium-replay`` the steps
training took to reach medium; ``n_steps=`` builds fewer (or more). Episodes
end as terminal when the environment terminates (the hopper or walker falls)
and as timeouts at the 1,000-step limit or where the step budget cuts them;
the two are kept apart in ``terminals`` and ``timeouts``.

Data is generated on first use (a progress bar; minutes on two CPU cores)
by 16 environments in lockstep with one batched policy call per step, then
cached (the cache directory of :mod:`offrl.datasets.builtin`) beside a
SHA-256 file; a cache file that does not match its checksum (truncated,
edited) is rebuilt with a warning, never read. A build writes a temporary
file and renames it, so a killed build leaves nothing under the final name.

Reproducibility: the same machine, torch build and seed give the same bytes.
On another CPU the policy's float32 products can round differently, and the
simulation is chaotic: the episodes differ, while their statistics (the
card's mean return) agree within the tolerance stated in the cards
(``tests/datasets/test_mujoco.py`` checks it on short builds).

Normalised scores (:func:`get_normalized_score`) are D4RL's,
``100 (return - random) / (expert - random)``, with reference returns
measured locally: the uniform random policy's and the expert policy's mean
returns over 100 episodes each (recorded in the cards).
"""

from __future__ import annotations

import os
import re
import warnings
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from .._optional import optional_dependency
from .._random import seeded
from .builtin import cache_directory, file_sha256, write_bytes_atomically

__all__ = [
    "get_mujoco",
    "mujoco_dataset_names",
    "get_normalized_score",
    "REFERENCE_RETURNS",
    "build_mujoco_dataset",
    "load_behaviour_policy",
]

from .._scores import ENV_IDS, KINDS, REFERENCE_RETURNS, dataset_name, get_normalized_score, mujoco_dataset_names

DEFAULT_STEPS = 1_000_000
#: environments stepped in lockstep by a build (one batched policy call each step)
N_BUILD_ENVS = 16
#: environment steps each training snapshot acted for (datasets/mujoco_behaviour.py)
SNAPSHOT_INTERVAL = 10_000
BEHAVIOUR_DIRECTORY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "behaviour")
_SEEDS = {"random": 1, "medium": 2, "medium-replay": 3, "expert": 4}
_ENV_SEED = {"hopper": 1, "halfcheetah": 2, "walker2d": 3}


def _parse(name: Any) -> Tuple[str, str]:
    if not isinstance(name, str):
        raise TypeError(f"dataset name must be a str, got {type(name).__name__}")
    for env in ENV_IDS:
        for kind in KINDS:
            if name == dataset_name(env, kind):
                return env, kind
    hint = ""
    for env in ENV_IDS:
        for kind in KINDS:
            current = dataset_name(env, kind)
            if re.fullmatch(rf"{env}-{kind}-v\d+", name):
                hint = f" (recipe version {current.rsplit('-', 1)[1]} is the one offrl builds: {current})"
    raise ValueError(f"unknown locomotion dataset {name!r}{hint}; known: {', '.join(mujoco_dataset_names())}")


def _require_mujoco() -> None:
    with optional_dependency("the locomotion datasets need MuJoCo: pip install 'offrl[mujoco]' (gymnasium[mujoco])"):
        import mujoco  # noqa: F401


def make_env(env: str, render_mode: Optional[str] = None) -> Any:
    """The gymnasium environment of ``env`` (``hopper``, ``halfcheetah``,
    ``walker2d``), with its 1,000-step time limit."""
    _require_mujoco()
    import gymnasium

    if env not in ENV_IDS:
        raise ValueError(f"unknown locomotion environment {env!r}; known: {', '.join(ENV_IDS)}")
    return gymnasium.make(ENV_IDS[env], render_mode=render_mode)


# ------------------------------------------------------ behaviour policies
def shipped_environments() -> Tuple[str, ...]:
    """The environments whose behaviour policies this version of offrl ships."""
    return tuple(env for env in ENV_IDS if os.path.exists(os.path.join(BEHAVIOUR_DIRECTORY, f"{env}.json")))


def check_shipped(env: str, kind: str) -> None:
    """``ValueError`` before any work when ``kind`` needs a behaviour policy
    that this version of offrl does not ship for ``env`` (random needs none)."""
    if kind != "random" and env not in shipped_environments():
        raise ValueError(
            f"{dataset_name(env, kind)}: this version of offrl ships no behaviour policies for {env} (its SAC "
            f"training has not reached an expert yet; see datasets/README.md); shipped: "
            f"{', '.join(shipped_environments()) or 'none'}; {dataset_name(env, 'random')} needs none"
        )


def behaviour_facts(env: str) -> Dict[str, Any]:
    """What ``datasets/mujoco_behaviour.py ship`` recorded for ``env``:
    which snapshots are medium, expert and the replay, and the training curve."""
    from .._safety import check_regular_file, load_json

    path = check_regular_file(os.path.join(BEHAVIOUR_DIRECTORY, f"{env}.json"), "behaviour record")
    with open(path, "rb") as f:
        facts = load_json(f.read(), path)
    if not isinstance(facts, dict) or not all(k in facts for k in ("expert", "medium", "replay")):
        raise ValueError(f"{path}: expected an object with 'expert', 'medium' and 'replay' entries")
    return facts


def load_behaviour_policy(env: str, snapshot: str) -> Any:
    """A SAC algorithm (default config, built for ``env``) holding the
    shipped policy weights of ``snapshot`` (``"expert"``, ``"medium"`` or a
    snapshot name such as ``"step_0020000"``); its ``sample_action`` is the
    behaviour policy. The weights are read with safetensors (no pickle)."""
    import torch
    from safetensors import safe_open

    from .._safety import check_regular_file
    from ..algos import SACConfig

    facts = behaviour_facts(env)
    name = facts[snapshot] if snapshot in ("expert", "medium") else snapshot
    path = check_regular_file(os.path.join(BEHAVIOUR_DIRECTORY, f"{env}.safetensors"), "behaviour weights")
    prefix = f"{name}."
    weights = {}
    with safe_open(path, framework="pt") as f:
        for key in f.keys():
            if key.startswith(prefix):
                weights[key[len(prefix):]] = f.get_tensor(key).to(torch.float32)
    if not weights:
        raise ValueError(f"{path} holds no snapshot {name!r}")
    algo = SACConfig().create(device="cpu")
    algo.build_with_env(make_env(env))
    algo.modules["policy"].load_state_dict(weights)
    return algo


# ---------------------------------------------------------------- building
def _uniform(env: str) -> Any:
    from ..algos import RandomPolicyConfig

    algo = RandomPolicyConfig(distribution="uniform").create(device="cpu")
    algo.build_with_env(make_env(env))
    return algo


def _replay_plan(env: str, n_steps: Optional[int]) -> List[Tuple[Optional[str], int]]:
    """``[(snapshot or None for uniform, steps), ...]`` of medium-replay."""
    facts = behaviour_facts(env)
    plan: List[Tuple[Optional[str], int]] = [(None, SNAPSHOT_INTERVAL)] + [(s, SNAPSHOT_INTERVAL) for s in facts["replay"]]
    total = sum(steps for _, steps in plan)
    if n_steps is None or n_steps == total:
        return plan
    # resized: every segment scaled, in order, so the mix of policies is kept
    sizes = [int(round(n_steps * steps / total)) for _, steps in plan]
    sizes[-1] += n_steps - sum(sizes)
    return [(s, k) for (s, _), k in zip(plan, sizes) if k > 0]


def default_steps(name: str) -> int:
    """Steps of ``name`` at its default size."""
    env, kind = _parse(name)
    if kind == "medium-replay":
        return sum(steps for _, steps in _replay_plan(env, None))
    return 2 * DEFAULT_STEPS if kind == "medium-expert" else DEFAULT_STEPS


#: most steps one shard of a build collects (shards run in parallel processes)
SHARD_STEPS = 250_000


def _shards(env: str, kind: str, n_steps: int) -> List[Tuple[Optional[str], int, int]]:
    """The build as ``[(policy, steps, seed), ...]`` in dataset order:
    ``policy`` is None (uniform random), ``"medium"``, ``"expert"`` or a
    snapshot name. The plan depends only on the recipe and ``n_steps``, not
    on how many processes run it, so the bytes do not either."""
    if kind == "medium-expert":
        half = n_steps // 2
        jobs = [("medium", half, _SEEDS["medium"], 0), ("expert", n_steps - half, _SEEDS["expert"], 0)]
    elif kind == "medium-replay":
        jobs = [(snapshot, steps, _SEEDS[kind], i) for i, (snapshot, steps) in enumerate(_replay_plan(env, n_steps))]
    else:
        jobs = [(None if kind == "random" else kind, n_steps, _SEEDS[kind], 0)]
    shards = []
    for policy, steps, kind_seed, job in jobs:
        count = max(1, -(-steps // SHARD_STEPS))
        sizes = [steps // count + (1 if i < steps % count else 0) for i in range(count)]
        # distinct seeds for every shard's N_BUILD_ENVS (< 100) environments
        base = _ENV_SEED[env] * 10_000 + kind_seed * 1_000_000 + job * 10_000
        shards += [(policy, size, base + 100 * i) for i, size in enumerate(sizes) if size > 0]
    return shards


def _collect_shard(env: str, policy: Optional[str], n_steps: int, seed: int) -> Any:
    """One shard: the policy acting stochastically in ``N_BUILD_ENVS``
    environments (environment ``i`` first reset with ``seed + i``) for
    ``n_steps`` steps, under ``offrl.seed(seed)``, on one torch thread."""
    import torch

    from ..dataset import create_infinite_replay_buffer

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with seeded(seed):
            algo = _uniform(env) if policy is None else load_behaviour_policy(env, policy)
            buffer = create_infinite_replay_buffer(env=make_env(env))
            envs = [make_env(env) for _ in range(N_BUILD_ENVS)]
            return algo.collect(envs, buffer, n_steps=n_steps, show_progress=False, seed=seed)
    finally:
        torch.set_num_threads(threads)


def _shard_to_file(args: Tuple[str, Optional[str], int, int, str, str]) -> str:
    global BEHAVIOUR_DIRECTORY
    env, policy, n_steps, seed, path, BEHAVIOUR_DIRECTORY = args  # the parent's (a spawned process starts from the default)
    _collect_shard(env, policy, n_steps, seed).dump(path)
    return path


def _build_buffer(env: str, kind: str, n_steps: int, show_progress: bool, n_jobs: Optional[int] = None) -> Any:
    """Collect every shard (in ``n_jobs`` processes when there are several)
    and join their episodes in plan order."""
    import tempfile

    from ..dataset import ReplayBuffer, create_infinite_replay_buffer

    shards = _shards(env, kind, n_steps)
    jobs = min(len(shards), n_jobs if n_jobs is not None else (os.cpu_count() or 1))
    progress = None
    if show_progress:
        from tqdm.auto import tqdm

        progress = tqdm(total=n_steps, desc=f"building {dataset_name(env, kind)}", unit="step", mininterval=0.5)
    try:
        if jobs <= 1:
            parts = []
            for policy, steps, seed in shards:
                parts.append(_collect_shard(env, policy, steps, seed))
                if progress is not None:
                    progress.update(steps)
        else:
            import multiprocessing

            with tempfile.TemporaryDirectory(prefix=".offrl-mujoco-") as directory:
                tasks = [(env, policy, steps, seed, os.path.join(directory, f"shard{i}.h5"), BEHAVIOUR_DIRECTORY)
                         for i, (policy, steps, seed) in enumerate(shards)]
                # fork (as torch's DataLoader workers): the children start
                # from this process's state, no re-import; spawn elsewhere
                method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
                with multiprocessing.get_context(method).Pool(jobs) as pool:
                    paths = []
                    for (_, _, steps, _, _, _), path in zip(tasks, pool.imap(_shard_to_file, tasks)):
                        paths.append(path)
                        if progress is not None:
                            progress.update(steps)
                parts = [ReplayBuffer.load(path) for path in paths]
    finally:
        if progress is not None:
            progress.close()
    if len(parts) == 1:
        return parts[0]
    buffer = create_infinite_replay_buffer(env=make_env(env))
    for part in parts:
        for episode in part.episodes:
            buffer.append_episode(episode)
    return buffer


def build_mujoco_dataset(name: str, path: str, n_steps: Optional[int] = None, show_progress: bool = False,
                         n_jobs: Optional[int] = None) -> str:
    """Build ``name`` by its recipe into ``path`` (a temporary file renamed
    into place) and write ``path.sha256``; returns the checksum."""
    env, kind = _parse(name)
    steps = default_steps(name) if n_steps is None else _check_steps(n_steps)
    buffer = _build_buffer(env, kind, steps, show_progress, n_jobs)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    buffer.dump(path)
    checksum = file_sha256(path)
    write_bytes_atomically(path + ".sha256", f"{checksum}  {os.path.basename(path)}\n".encode())
    return checksum


def _check_steps(n_steps: Any) -> int:
    if isinstance(n_steps, bool) or not isinstance(n_steps, (int, np.integer)) or n_steps < 1:
        raise ValueError(f"n_steps must be a positive int, got {n_steps!r}")
    return int(n_steps)


def _cached_is_valid(path: str) -> bool:
    sums = path + ".sha256"
    if not (os.path.isfile(path) and os.path.isfile(sums)):
        return False
    with open(sums, "rb") as f:
        expected = f.read(200).split()[:1]
    return bool(expected) and file_sha256(path) == expected[0].decode("ascii", "replace")


def cache_path(name: str, n_steps: Optional[int] = None, cache_dir: Optional[str] = None) -> str:
    """Where ``get_mujoco(name, n_steps=...)`` keeps its file."""
    _parse(name)
    suffix = "" if n_steps is None or int(n_steps) == default_steps(name) else f"-{int(n_steps)}steps"
    return os.path.join(cache_directory(cache_dir), "mujoco", f"{name}{suffix}.h5")


def get_mujoco(name: str, transition_picker: Any = None, trajectory_slicer: Any = None,
               render_mode: Optional[str] = None, cache_dir: Optional[str] = None, n_steps: Optional[int] = None,
               rebuild: bool = False, show_progress: bool = True) -> Tuple[Any, Any]:
    """``(dataset, env)`` for a locomotion dataset (see :func:`mujoco_dataset_names`).

    Built by its recipe on first use (minutes; ``show_progress`` shows a bar)
    and cached behind a SHA-256 file; ``n_steps`` builds another size (cached
    apart), ``rebuild=True`` builds again. ``env`` is a new gymnasium
    environment (made with ``render_mode``); ``transition_picker`` /
    ``trajectory_slicer`` are the dataset's. Needs ``pip install
    'offrl[mujoco]'``.
    """
    from ..dataset import ReplayBuffer

    env, kind = _parse(name)
    _require_mujoco()
    if n_steps is not None:
        n_steps = _check_steps(n_steps)
    check_shipped(env, kind)
    path = cache_path(name, n_steps, cache_dir)
    if rebuild or not _cached_is_valid(path):
        if os.path.exists(path) and not rebuild:
            warnings.warn(f"{path} does not match its checksum (truncated or edited); rebuilding it", stacklevel=2)
        build_mujoco_dataset(name, path, n_steps, show_progress=show_progress)
    dataset = ReplayBuffer.load(path, transition_picker=transition_picker, trajectory_slicer=trajectory_slicer)
    return dataset, make_env(env, render_mode)
