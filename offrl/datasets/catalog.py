"""Datasets by name, as d3rlpy's ``get_dataset`` / ``get_d4rl`` / ``get_atari``.

* ``get_dataset(name)``: offrl's built-in CartPole / Pendulum datasets
  (``cartpole-replay``, ...), D4RL names (``hopper-medium-v2``, ...) through
  :func:`get_d4rl`, Atari names through :func:`get_atari` (d3rlpy's routing).
* ``get_d4rl(name)``: a D4RL file you already have: a path to the ``.hdf5``
  file, or the file in offrl's data directory (``<cache>/d4rl/<name>.hdf5``)
  or in D4RL's own (``$D4RL_DATASET_DIR`` or ``~/.d4rl/datasets``, D4RL's
  file names such as ``hopper_medium-v2.hdf5``); read as arrays by
  :func:`offrl.datasets.load_d4rl_hdf5`. offrl never downloads, and never
  returns its own builds under D4RL's names: without the file, the error
  names the locally built equivalent (:func:`offrl.datasets.get_mujoco`).
* ``get_atari`` / ``get_atari_transitions``: not provided (no Atari data can
  be built here in reasonable time); they raise ``NotImplementedError``
  saying so.
"""

from __future__ import annotations

import os
import re
import warnings
from typing import Any, Optional, Tuple

from .._scores import ENV_IDS, KINDS, dataset_name
from .builtin import RECIPES
from .builtin import cache_directory
from .builtin import get_dataset as get_builtin_dataset
from .d4rl import load_d4rl_hdf5

__all__ = ["get_dataset", "get_d4rl", "get_atari", "get_atari_transitions", "d4rl_file"]

_D4RL_NAME = re.compile(r"^(?P<env>hopper|halfcheetah|walker2d|ant)-(?P<kind>[a-z-]+)-v(?P<version>\d+)$")
_ATARI_NAME = re.compile(r"^[a-z-]+-(mixed|medium|expert)-v\d+(-\d+)?$")


def d4rl_file(name: str) -> Optional[str]:
    """The D4RL file for ``name`` found on this machine (a path given as the
    name, offrl's data directory, D4RL's data directory), or None."""
    if name.endswith((".hdf5", ".h5")) or os.sep in name:
        return name if os.path.exists(name) else None
    candidates = [os.path.join(cache_directory(), "d4rl", f"{name}.hdf5")]
    match = re.match(r"^(?P<stem>.+)-(?P<version>v\d+)$", name)
    d4rl_directory = os.environ.get("D4RL_DATASET_DIR") or os.path.join(os.path.expanduser("~"), ".d4rl", "datasets")
    if match:  # D4RL names its files hopper_medium_replay-v2.hdf5
        candidates.append(os.path.join(d4rl_directory, f"{match['stem'].replace('-', '_')}-{match['version']}.hdf5"))
    candidates.append(os.path.join(d4rl_directory, f"{name}.hdf5"))
    return next((c for c in candidates if os.path.isfile(c)), None)


def _local_equivalent(name: str) -> Optional[str]:
    match = _D4RL_NAME.match(os.path.basename(name).replace("_", "-").replace(".hdf5", ""))
    if match and match["env"] in ENV_IDS and match["kind"] in KINDS:
        return dataset_name(match["env"], match["kind"])
    return None


def get_d4rl(env_name: str, transition_picker: Any = None, trajectory_slicer: Any = None,
             render_mode: Optional[str] = None, max_episode_steps: int = 1000) -> Tuple[Any, Any]:
    """``(dataset, env)`` from a D4RL file already on this machine (d3rlpy's
    signature): ``env_name`` is D4RL's dataset name (``hopper-medium-v2``)
    or the path of the file. The environment is gymnasium's MuJoCo v5 task
    of the same robot (D4RL's observations and actions have the same
    layout), limited to ``max_episode_steps``; for other D4RL families the
    dataset comes with ``env=None`` and a warning.

    Raises:
        FileNotFoundError: no such file; the message says why nothing is
            downloaded and names offrl's local build of the same recipe.
    """
    if not isinstance(env_name, (str, os.PathLike)):
        raise TypeError(f"env_name must be a str or a path, got {type(env_name).__name__}")
    env_name = os.fspath(env_name)
    path = d4rl_file(env_name)
    if path is None:
        local = _local_equivalent(env_name)
        instead = (f"; offrl builds the same recipe locally: offrl.datasets.get_mujoco({local!r})" if local else
                   "; offrl has no local build of this dataset")
        raise FileNotFoundError(
            f"D4RL dataset {env_name!r} not found: offrl does not download (no network access by design). "
            f"Pass the path of the .hdf5 file, or put it at {os.path.join(cache_directory(), 'd4rl', env_name + '.hdf5')}"
            f"{instead}"
        )
    dataset = load_d4rl_hdf5(path, transition_picker=transition_picker, trajectory_slicer=trajectory_slicer)
    robot = os.path.basename(path).replace("_", "-").split("-", 1)[0]
    if robot not in ENV_IDS:
        warnings.warn(f"{path}: offrl makes no environment for D4RL's {robot!r} family; env is None", stacklevel=2)
        return dataset, None
    import gymnasium

    return dataset, gymnasium.make(ENV_IDS[robot], render_mode=render_mode, max_episode_steps=int(max_episode_steps))


def get_atari(env_name: str, num_stack: Optional[int] = None, sticky_action: bool = True, pre_stack: bool = False,
              render_mode: Optional[str] = None) -> Tuple[Any, Any]:
    """Not provided: d3rlpy downloads DQN-replay Atari data (d4rl-atari);
    offrl does not download, and building Atari data by its recipe (an
    online DQN over 50 million frames) takes days of GPU time."""
    raise NotImplementedError(
        f"get_atari({env_name!r}): offrl does not download datasets, and Atari's DQN-replay data cannot be built "
        "locally in reasonable time (an online DQN over 50M frames). Log your own with offrl.envs.Atari and "
        "collect/fit_online, or read a file you have with offrl.datasets.load_d4rl_hdf5 / get_minari."
    )


def get_atari_transitions(game_name: str, fraction: float = 0.01, index: int = 0, num_stack: Optional[int] = None,
                          sticky_action: bool = True, pre_stack: bool = False,
                          render_mode: Optional[str] = None) -> Tuple[Any, Any]:
    """Not provided (see :func:`get_atari`)."""
    raise NotImplementedError(
        f"get_atari_transitions({game_name!r}): offrl does not download datasets; see get_atari's message"
    )


def get_dataset(env_name: str, transition_picker: Any = None, trajectory_slicer: Any = None,
                render_mode: Optional[str] = None, cache_dir: Optional[str] = None,
                rebuild: bool = False) -> Tuple[Any, Any]:
    """``(dataset, env)`` by name, routed as d3rlpy 2.8.1 routes it: offrl's
    built-in datasets (``cartpole-replay``, ``pendulum-random``, ...;
    ``cache_dir`` is where they are kept, ``rebuild=True`` builds again), D4RL names to :func:`get_d4rl`,
    Atari names to :func:`get_atari`. offrl's locomotion builds are
    reached by :func:`offrl.datasets.get_mujoco`, never by D4RL's names."""
    if not isinstance(env_name, str):
        raise TypeError(f"dataset name must be a str, got {type(env_name).__name__}")
    if env_name in RECIPES:
        return get_builtin_dataset(env_name, transition_picker, trajectory_slicer, render_mode, cache_dir=cache_dir,
                                   rebuild=rebuild)
    if _D4RL_NAME.match(env_name) or env_name.startswith("bullet-"):
        return get_d4rl(env_name, transition_picker, trajectory_slicer, render_mode)
    if _ATARI_NAME.match(env_name):
        return get_atari(env_name, render_mode=render_mode)
    raise ValueError(f"unknown dataset {env_name!r}; known datasets: {', '.join(sorted(RECIPES))} "
                     f"(and D4RL files you have, by D4RL's names; offrl's locomotion builds: offrl.datasets.get_mujoco)")
