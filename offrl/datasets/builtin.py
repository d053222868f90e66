"""Built-in datasets, built locally from recipes: no network, deterministic.

``get_dataset(name)`` returns ``(dataset, env)``. The first call builds the
dataset by its recipe (a gymnasium environment, a behaviour policy, a seed),
writes it to the cache directory (``$OFFRL_DATA_DIR``, else
``$XDG_CACHE_HOME/offrl/datasets``, else ``~/.cache/offrl/datasets``) with a
SHA-256 checksum file beside it, and later calls load it after checking the
checksum. A cache file whose checksum does not match (corrupted, truncated,
edited) is rebuilt, never used.

Recipes (the cards in the repository's ``datasets/`` folder give the figures):

* ``*-random``: a uniform random policy;
* ``*-replay``: every transition an agent saw while learning online from
  scratch (DQN on CartPole, SAC on Pendulum), as D4RL's "replay" datasets;
* ``*-medium``: a scripted controller acting with heavy noise (about half
  way between the random and the expert returns);
* ``*-expert``: the scripted controller with light noise.

The scripted controllers: CartPole pushes towards where the pole falls
(``theta + 0.3 theta_dot + 0.01 x + 0.1 x_dot > 0``), which balances for
the full 500 steps; Pendulum pumps energy into the swing
(``2 sign(theta_dot (E* - E))`` with ``E = theta_dot^2 / 2 + 15 (cos theta - 1)``,
``E* = 0``) and catches the top with a PD controller
(``-12 theta - 2.5 theta_dot``), for a mean return near -140.

The replay recipes learn online for longer than a minute on two CPU cores,
so their files are shipped in ``offrl/datasets/prebuilt`` and copied into
the cache (after the checksum check) instead of being rebuilt;
``rebuild=True`` runs the recipe.

Same bytes on every machine: ``get_dataset`` of a replay dataset (the
quickstart's) copies the shipped file, so it is the reference file
everywhere. The other recipes act on one observation at a time and give the
reference files under every torch kernel set and thread count (checked in
the tests with ``ATEN_CPU_CAPABILITY=default``/``avx2`` and 1/2 threads).
Their environments' own maths is gymnasium's: CartPole uses Python's
``math``, Pendulum numpy's ``sin``/``cos``, whose SIMD versions are chosen
per CPU by numpy. Only ``rebuild=True`` of a replay recipe (training
networks with float32 kernels, which do differ across CPUs and torch builds)
can give other bytes: a rebuild that does not match the reference checksum
in the card warns, and the dataset is used (it is a valid build of the
recipe).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import warnings
from typing import Any, Callable, Dict, Optional, Tuple

import torch

from .._atomic import atomic_write
from .._random import seeded
from ..algos.base import LearnableConfig, QLearningAlgoBase
from ..constants import ActionSpace

__all__ = [
    "get_dataset",
    "get_cartpole",
    "get_pendulum",
    "dataset_names",
    "build_dataset",
    "cache_directory",
    "DatasetRecipe",
    "RECIPES",
    "SHIPPED",
]

ENV_VAR = "OFFRL_DATA_DIR"
#: recipes that take longer than a minute; their files are shipped with offrl
SHIPPED = frozenset({"cartpole-replay", "pendulum-replay"})
#: where the shipped files are
PREBUILT_DIRECTORY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "prebuilt")


# ------------------------------------------------------ scripted policies
@dataclasses.dataclass
class _ScriptedConfig(LearnableConfig):
    """Config of a scripted controller (nothing to learn)."""


class _ScriptedPolicy(QLearningAlgoBase):
    """A fixed controller written with torch ops, acting like an algorithm
    so that ``collect`` and the explorers can drive it."""

    is_trainable = False

    def __init__(self) -> None:
        super().__init__(_ScriptedConfig(), "cpu")

    def _build(self, observation_shape: Any, action_size: int) -> None:
        pass


class CartPoleController(_ScriptedPolicy):
    """Push right when ``theta + 0.3 theta_dot + 0.01 x + 0.1 x_dot > 0``."""

    _action_type = ActionSpace.DISCRETE

    def _predict(self, x: torch.Tensor) -> torch.Tensor:
        weights = torch.tensor([0.01, 0.1, 1.0, 0.3], dtype=x.dtype, device=x.device)
        return ((x * weights).sum(dim=1) > 0).long()


class PendulumController(_ScriptedPolicy):
    """Energy-pumping swing-up, PD control near the top (torque in [-2, 2])."""

    _action_type = ActionSpace.CONTINUOUS

    def _predict(self, x: torch.Tensor) -> torch.Tensor:
        cos, sin, velocity = x[:, 0], x[:, 1], x[:, 2]
        angle = torch.atan2(sin, cos)
        energy = 0.5 * velocity**2 + 15.0 * (cos - 1.0)
        catch = -12.0 * angle - 2.5 * velocity
        pump = 2.0 * torch.sign(-velocity * energy)
        pump = torch.where(pump == 0, torch.full_like(pump, 2.0), pump)
        near_top = (cos > 0.9) & (energy.abs() < 8.0)
        return torch.where(near_top, catch, pump).clamp(-2.0, 2.0).unsqueeze(1)


# ---------------------------------------------------------------- recipes
@dataclasses.dataclass(frozen=True)
class DatasetRecipe:
    """How a built-in dataset is made: ``build(env, n_steps)`` returns a
    filled replay buffer; ``n_steps`` environment steps; ``seed``."""

    name: str
    env_id: str
    behaviour: str
    n_steps: int
    seed: int
    build: Callable[[Any, int], Any]

    @property
    def reference_sha256(self) -> Optional[str]:
        """SHA-256 of the file built on the reference machine (see the card);
        ``None`` for a recipe resized from the reference one."""
        try:
            from ._reference import REFERENCE_SHA256
        except ImportError:  # before datasets/build.py has run
            return None
        steps, checksum = REFERENCE_SHA256.get(self.name, (None, None))
        return checksum if steps == self.n_steps else None


def _random_recipe(env: Any, n_steps: int) -> Any:
    from ..algos import DiscreteRandomPolicyConfig, RandomPolicyConfig

    discrete = hasattr(env.action_space, "n")
    algo = (DiscreteRandomPolicyConfig() if discrete else RandomPolicyConfig()).create()
    algo.build_with_env(env)
    return algo.collect(env, n_steps=n_steps, show_progress=False)


def _scripted_recipe(controller: Callable[[], _ScriptedPolicy], noise: Callable[[], Any]) -> Callable[[Any, int], Any]:
    def build(env: Any, n_steps: int) -> Any:
        algo = controller()
        algo.build_with_env(env)
        return algo.collect(env, explorer=noise(), n_steps=n_steps, show_progress=False)

    return build


def _cartpole_replay(env: Any, n_steps: int) -> Any:
    from ..algos import DQNConfig
    from ..training.explorers import LinearDecayEpsilonGreedy
    from ..dataset import create_infinite_replay_buffer
    from ..logging import NoopAdapterFactory

    dqn = DQNConfig(batch_size=32, learning_rate=2.5e-4, target_update_interval=100).create()
    buffer = create_infinite_replay_buffer(env=env)
    explorer = LinearDecayEpsilonGreedy(start_epsilon=1.0, end_epsilon=0.1, duration=n_steps // 5)
    dqn.fit_online(env, buffer, explorer, n_steps=n_steps, n_steps_per_epoch=n_steps, update_start_step=1000,
                   logger_adapter=NoopAdapterFactory(), show_progress=False)
    return buffer


def _pendulum_replay(env: Any, n_steps: int) -> Any:
    from ..algos import SACConfig
    from ..dataset import create_infinite_replay_buffer
    from ..logging import NoopAdapterFactory

    sac = SACConfig().create()
    buffer = create_infinite_replay_buffer(env=env)
    sac.fit_online(env, buffer, n_steps=n_steps, n_steps_per_epoch=n_steps, update_start_step=1000,
                   random_steps=1000, logger_adapter=NoopAdapterFactory(), show_progress=False)
    return buffer


def _epsilon(epsilon: float) -> Callable[[], Any]:
    def make() -> Any:
        from ..training.explorers import ConstantEpsilonGreedy

        return ConstantEpsilonGreedy(epsilon)

    return make


def _normal(std: float) -> Callable[[], Any]:
    def make() -> Any:
        from ..training.explorers import NormalNoise

        return NormalNoise(mean=0.0, std=std)

    return make


RECIPES: Dict[str, DatasetRecipe] = {
    r.name: r
    for r in (
        DatasetRecipe("cartpole-random", "CartPole-v1", "uniform random actions", 100_000, 1, _random_recipe),
        DatasetRecipe("cartpole-replay", "CartPole-v1", "DQN's replay buffer while learning online from scratch",
                      50_000, 2, _cartpole_replay),
        DatasetRecipe("cartpole-medium", "CartPole-v1", "scripted controller, epsilon-greedy with epsilon 0.5",
                      100_000, 3, _scripted_recipe(CartPoleController, _epsilon(0.5))),
        DatasetRecipe("cartpole-expert", "CartPole-v1", "scripted controller, epsilon-greedy with epsilon 0.05",
                      100_000, 4, _scripted_recipe(CartPoleController, _epsilon(0.05))),
        DatasetRecipe("pendulum-random", "Pendulum-v1", "uniform random torques", 100_000, 5, _random_recipe),
        DatasetRecipe("pendulum-replay", "Pendulum-v1", "SAC's replay buffer while learning online from scratch",
                      20_000, 6, _pendulum_replay),
        DatasetRecipe("pendulum-medium", "Pendulum-v1", "scripted controller plus Gaussian noise (std 3.0), clipped to [-2, 2]",
                      100_000, 7, _scripted_recipe(PendulumController, _normal(3.0))),
        DatasetRecipe("pendulum-expert", "Pendulum-v1", "scripted controller plus Gaussian noise (std 0.05), clipped to [-2, 2]",
                      100_000, 8, _scripted_recipe(PendulumController, _normal(0.05))),
    )
}


def dataset_names() -> list:
    """Names :func:`get_dataset` knows."""
    return sorted(RECIPES)


# ------------------------------------------------------------------ cache
def cache_directory(cache_dir: Optional[str] = None) -> str:
    """Where built datasets are kept: ``cache_dir``, ``$OFFRL_DATA_DIR``,
    ``$XDG_CACHE_HOME/offrl/datasets`` or ``~/.cache/offrl/datasets``."""
    if cache_dir is not None:
        return os.fspath(cache_dir)
    if os.environ.get(ENV_VAR):
        return os.environ[ENV_VAR]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "offrl", "datasets")


def file_sha256(path: str) -> str:
    """The SHA-256 hex digest of the file at ``path`` (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_bytes_atomically(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` through :func:`offrl._atomic.atomic_write` (all or nothing)."""
    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(data)

    atomic_write(path, write)


def _make_env(recipe: DatasetRecipe, render_mode: Optional[str] = None) -> Any:
    import gymnasium

    return gymnasium.make(recipe.env_id, render_mode=render_mode)


def build_dataset(name: str, path: str, n_steps: Optional[int] = None) -> str:
    """Build ``name`` by its recipe into ``path`` (atomically) and write
    ``path.sha256``; returns the checksum. ``n_steps`` overrides the
    recipe's size (for tests and quick looks; the checksum then differs
    from the card's)."""
    recipe = _recipe(name)
    steps = recipe.n_steps if n_steps is None else int(n_steps)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with seeded(recipe.seed):
            buffer = recipe.build(_make_env(recipe), steps)
    finally:
        torch.set_num_threads(threads)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    buffer.dump(path)  # atomic (temporary file, then rename)
    checksum = file_sha256(path)
    write_bytes_atomically(path + ".sha256", f"{checksum}  {os.path.basename(path)}\n".encode())
    return checksum


def _recipe(name: str) -> DatasetRecipe:
    if not isinstance(name, str):
        raise TypeError(f"dataset name must be a str, got {type(name).__name__}")
    if name not in RECIPES:
        raise ValueError(f"unknown dataset {name!r}; known datasets: {', '.join(dataset_names())}")
    return RECIPES[name]


def _copy_prebuilt(recipe: DatasetRecipe, path: str) -> bool:
    """Copy the file shipped with offrl (for recipes slower than a minute)
    into the cache, if there is one and it matches the reference checksum."""
    source = os.path.join(PREBUILT_DIRECTORY, f"{recipe.name}.h5")
    if recipe.reference_sha256 is None or not os.path.isfile(source):
        return False
    with open(source, "rb") as f:
        data = f.read()
    checksum = hashlib.sha256(data).hexdigest()
    if checksum != recipe.reference_sha256:
        warnings.warn(f"the shipped {source} does not match its reference checksum; building it by its recipe", stacklevel=3)
        return False
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    write_bytes_atomically(path, data)
    write_bytes_atomically(path + ".sha256", f"{checksum}  {os.path.basename(path)}\n".encode())
    return True


def _cached_is_valid(path: str) -> bool:
    sums = path + ".sha256"
    if not (os.path.isfile(path) and os.path.isfile(sums)):
        return False
    with open(sums) as f:
        expected = f.read().split()[:1]
    return bool(expected) and file_sha256(path) == expected[0]


def get_dataset(name: str, transition_picker: Any = None, trajectory_slicer: Any = None,
                render_mode: Optional[str] = None, cache_dir: Optional[str] = None,
                rebuild: bool = False) -> Tuple[Any, Any]:
    """``(dataset, env)`` for a built-in dataset name (see :func:`dataset_names`).

    Built by its recipe on first use (up to a minute on two CPU cores),
    then loaded from the cache after a checksum check. ``rebuild=True``
    builds it again. ``env`` is a new gymnasium environment of the recipe
    (made with ``render_mode``); ``transition_picker`` / ``trajectory_slicer``
    are the dataset's (the defaults when None). The first four arguments are
    d3rlpy 2.8.1's, in its order.
    """
    from ..dataset import MDPDataset

    recipe = _recipe(name)
    directory = cache_directory(cache_dir)
    path = os.path.join(directory, f"{name}.h5")

    def loaded() -> Tuple[Any, Any]:
        dataset = MDPDataset.load(path, transition_picker=transition_picker, trajectory_slicer=trajectory_slicer)
        return dataset, _make_env(recipe, render_mode)

    if rebuild or not _cached_is_valid(path):
        if os.path.exists(path) and not rebuild:
            warnings.warn(f"{path} does not match its checksum (corrupted or incomplete); rebuilding it", stacklevel=2)
        if not rebuild and _copy_prebuilt(recipe, path):
            return loaded()
        checksum = build_dataset(name, path)
        if recipe.reference_sha256 is not None and checksum != recipe.reference_sha256:
            warnings.warn(
                f"{name} was rebuilt with checksum {checksum[:12]}..., the reference build has "
                f"{recipe.reference_sha256[:12]}... (floating-point kernels differ across CPUs and torch builds); "
                "the dataset is a valid build of its recipe",
                stacklevel=2,
            )
    return loaded()


def _by_type(env_name: str, dataset_type: str, cache_dir: Optional[str], transition_picker: Any,
             trajectory_slicer: Any, render_mode: Optional[str]) -> Tuple[Any, Any]:
    name = f"{env_name}-{dataset_type}"
    if name not in RECIPES:
        types = sorted(n.split("-", 1)[1] for n in RECIPES if n.startswith(env_name + "-"))
        raise ValueError(f"unknown dataset_type {dataset_type!r} for {env_name}; known: {', '.join(types)}")
    return get_dataset(name, transition_picker, trajectory_slicer, render_mode, cache_dir=cache_dir)


def get_cartpole(dataset_type: str = "replay", transition_picker: Any = None, trajectory_slicer: Any = None,
                 render_mode: Optional[str] = None, cache_dir: Optional[str] = None) -> Tuple[Any, Any]:
    """CartPole-v1 data (``random``, ``replay``, ``medium``, ``expert``) and the environment.

    d3rlpy's arguments: the dataset's ``transition_picker`` and
    ``trajectory_slicer``, and the environment's ``render_mode``;
    ``cache_dir`` is where offrl keeps the built file."""
    return _by_type("cartpole", dataset_type, cache_dir, transition_picker, trajectory_slicer, render_mode)


def get_pendulum(dataset_type: str = "replay", transition_picker: Any = None, trajectory_slicer: Any = None,
                 render_mode: Optional[str] = None, cache_dir: Optional[str] = None) -> Tuple[Any, Any]:
    """Pendulum-v1 data (``random``, ``replay``, ``medium``, ``expert``) and the environment
    (arguments as :func:`get_cartpole`)."""
    return _by_type("pendulum", dataset_type, cache_dir, transition_picker, trajectory_slicer, render_mode)
