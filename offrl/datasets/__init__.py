"""Datasets: the built-in datasets (built locally by recipe, cached behind a
checksum), importers for logged data kept in other formats (Minari folders,
D4RL-format HDF5 files, tables of logged decisions) and the Minari exporter."""

from .builtin import dataset_names, get_cartpole, get_pendulum
from .catalog import get_atari, get_atari_transitions, get_d4rl, get_dataset
from .d4rl import load_d4rl_hdf5
from .mujoco import get_mujoco, get_normalized_score, mujoco_dataset_names
from .minari import get_minari, to_minari
from .tabular import from_dataframe
from .streaming import from_dataframe_chunks

__all__ = [
    "get_dataset",
    "get_cartpole",
    "get_pendulum",
    "get_d4rl",
    "get_atari",
    "get_atari_transitions",
    "dataset_names",
    "get_minari",
    "to_minari",
    "load_d4rl_hdf5",
    "get_mujoco",
    "get_normalized_score",
    "mujoco_dataset_names",
    "from_dataframe",
    "from_dataframe_chunks",
]
