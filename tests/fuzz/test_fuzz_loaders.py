"""Every dataset file loader fed hostile input: random bytes, truncated
files, and valid files with one attribute or dataset replaced by a random
value. The contract: the loader returns a dataset, or raises ValueError /
TypeError whose message names the file (or folder); never another
exception from a library, never a hang (files are small), and never runs
code named in the file (the Minari env specs name a marker-writing call)."""

from __future__ import annotations

import io
import json
import pathlib
import warnings

import h5py
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzz_budget import budget
from offrl.dataset import MDPDataset, ReplayBuffer
from offrl.datasets import from_dataframe, get_minari, load_d4rl_hdf5, to_minari

pytestmark = pytest.mark.fuzz


def _small_dataset(discrete: bool = False) -> MDPDataset:
    n = 9
    rng = np.random.default_rng(0)
    actions = np.arange(n) % 3 if discrete else rng.standard_normal((n, 2))
    return MDPDataset(
        rng.standard_normal((n, 3)), actions, rng.standard_normal(n), np.array([0, 0, 1, 0, 0, 0, 0, 0, 0]),
        timeouts=np.array([0, 0, 0, 0, 0, 1, 0, 0, 0]), next_observations=rng.standard_normal((n, 3)),
        behaviour_probabilities=np.full(n, 0.5),
    )


def _offrl_file_bytes(discrete: bool) -> bytes:
    buffer = io.BytesIO()
    _small_dataset(discrete).dump(buffer)
    return buffer.getvalue()


VALID_OFFRL = {False: _offrl_file_bytes(False), True: _offrl_file_bytes(True)}

#: random HDF5 values: numbers of any dtype and shape, strings, bytes, complex, compound, scalars
H5_VALUES = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.complex_numbers(allow_nan=False, allow_infinity=False),
    st.sampled_from([
        np.zeros(0), np.zeros((2, 0)), np.float32(1.0), np.full((9, 1), 5.4), np.full((9, 3), 1e300),
        np.arange(9, dtype=np.uint64) + 2**63, np.zeros((9, 2), dtype=[("a", "f4"), ("b", "i4")]),
        np.array([b"a"] * 9), np.ones((9, 1), dtype=np.complex64), np.ones((3, 3, 3, 3)),
        np.array([2**62]), np.array([-1, 5, 9, 20]), np.ones(9, dtype=bool), np.zeros(9, dtype=np.int8),
    ]),
)


def _assert_contract(call, name: str) -> None:
    """``call()`` succeeds, or raises ValueError/TypeError naming ``name``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # e.g. unregistered environments
        try:
            call()
        except (ValueError, TypeError) as e:
            assert name in str(e), f"{type(e).__name__} does not name {name}: {e}"


# ------------------------------------------------------------- offrl HDF5


@budget(15)
@given(data=st.binary(max_size=4096))
def test_offrl_load_random_bytes(tmp_path, data):
    path = tmp_path / "random.h5"
    path.write_bytes(data)
    _assert_contract(lambda: ReplayBuffer.load(path), str(path))


@budget(15)
@given(discrete=st.booleans(), cut=st.floats(0, 1, exclude_max=True))
def test_offrl_load_truncated(tmp_path, discrete, cut):
    valid = VALID_OFFRL[discrete]
    path = tmp_path / "truncated.h5"
    path.write_bytes(valid[: int(cut * len(valid))])
    _assert_contract(lambda: ReplayBuffer.load(path), str(path))


OFFRL_KEYS = ["observations_0", "actions", "rewards", "episode_starts", "episode_ends", "episode_terminated",
              "episode_has_final", "behaviour_probabilities"]
OFFRL_ATTRS = ["format", "schema_version", "schema_minor_version", "action_space", "action_size",
               "n_observation_columns"]


@budget(30)
@given(discrete=st.booleans(), target=st.sampled_from(OFFRL_KEYS + OFFRL_ATTRS), value=H5_VALUES)
def test_offrl_load_one_field_mutated(tmp_path, discrete, target, value):
    path = tmp_path / "mutated.h5"
    path.write_bytes(VALID_OFFRL[discrete])
    try:
        with h5py.File(path, "r+") as h5:
            if target in OFFRL_ATTRS:
                h5.attrs[target] = value
            else:
                del h5[target]
                h5.create_dataset(target, data=value)
    except (TypeError, ValueError, OSError):
        return  # h5py cannot store this value: nothing to load
    _assert_contract(lambda: ReplayBuffer.load(path), str(path))


# -------------------------------------------------------------------- D4RL


def _write_d4rl(path: pathlib.Path, **changes) -> None:
    rng = np.random.default_rng(1)
    arrays = {
        "observations": rng.standard_normal((9, 3)), "actions": rng.standard_normal((9, 2)),
        "rewards": rng.standard_normal(9), "terminals": np.array([0, 0, 1, 0, 0, 0, 0, 0, 0], dtype=bool),
        "timeouts": np.array([0, 0, 0, 0, 0, 1, 0, 0, 0], dtype=bool), "next_observations": rng.standard_normal((9, 3)),
        "infos/action_log_probs": np.full(9, -0.5), "metadata/algorithm": "SAC",
    }
    arrays.update(changes)
    with h5py.File(path, "w") as f:
        for key, value in arrays.items():
            f.create_dataset(key, data=value)


D4RL_KEYS = ["observations", "actions", "rewards", "terminals", "timeouts", "next_observations",
             "infos/action_log_probs", "metadata/algorithm"]


@budget(30)
@given(target=st.sampled_from(D4RL_KEYS), value=H5_VALUES, extras=st.booleans())
def test_d4rl_one_dataset_mutated(tmp_path, target, value, extras):
    path = tmp_path / "d4rl.hdf5"
    try:
        _write_d4rl(path, **{target: value})
    except (TypeError, ValueError, OSError):
        return
    _assert_contract(lambda: load_d4rl_hdf5(path, return_extras=extras), str(path))


@budget(15)
@given(data=st.binary(max_size=4096), cut=st.floats(0, 1, exclude_max=True))
def test_d4rl_random_and_truncated_bytes(tmp_path, data, cut):
    path = tmp_path / "d4rl.hdf5"
    path.write_bytes(data)
    _assert_contract(lambda: load_d4rl_hdf5(path), str(path))
    _write_d4rl(path)
    valid = path.read_bytes()
    path.write_bytes(valid[: int(cut * len(valid))])
    _assert_contract(lambda: load_d4rl_hdf5(path), str(path))


# ------------------------------------------------------------------ Minari

JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False), st.text(max_size=6)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=8,
)
SPACES = st.sampled_from([
    {"type": "Box", "dtype": "float32", "shape": [4], "low": [0] * 4, "high": [1] * 4},
    {"type": "Box", "dtype": "float32", "shape": [-1]},
    {"type": "Box", "dtype": "object", "shape": [3]},
    {"type": "Box", "dtype": "float32", "shape": ["x"]},
    {"type": "Discrete", "n": 2**62},
    {"type": "Discrete", "n": 0, "start": -5},
    {"type": "Tuple", "subspaces": [{"type": "Box", "dtype": "float32", "shape": [3]}] * 2},
    {"type": "Dict", "subspaces": {"a": {"type": "Text"}}},
    {"type": "Graph"},
])


def _hostile_env_spec(marker: pathlib.Path, env_id: str) -> str:
    return json.dumps({
        "id": env_id, "entry_point": "os:system", "kwargs": {"command": f"touch {marker}"},
        "additional_wrappers": [{"name": "W", "entry_point": "os:system", "kwargs": {"command": f"touch {marker}"}}],
        "vector_entry_point": "os:system",
    })


@budget(30)
@given(
    data_format=st.sampled_from(["hdf5", "arrow"]),
    key=st.sampled_from(["observation_space", "action_space", "total_steps", "total_episodes", "data_format",
                         "env_spec", "dataset_id"]),
    value=st.one_of(JSON_VALUES, SPACES.map(json.dumps), SPACES),
    env_id=st.sampled_from(["Hostile-v0", "os:system", "subprocess:CartPole-v1", "CartPole-v1"]),
)
def test_minari_metadata_mutated_runs_no_code(tmp_path, data_format, key, value, env_id):
    root = tmp_path / "minari"
    marker = tmp_path / "marker"
    to_minari(_small_dataset(discrete=True), root, data_format=data_format, overwrite=True)
    meta_path = root / "data" / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta["env_spec"] = _hostile_env_spec(marker, env_id)
    meta[key] = value
    meta_path.write_text(json.dumps(meta))
    _assert_contract(lambda: get_minari(root), str(root))
    assert not marker.exists(), "reading the dataset ran code named in it"


@budget(30)
@given(
    episode=st.integers(0, 2),
    member=st.sampled_from(["observations", "actions", "rewards", "terminations", "truncations",
                            "behaviour_probabilities"]),
    value=H5_VALUES,
)
def test_minari_hdf5_episode_member_mutated(tmp_path, episode, member, value):
    root = tmp_path / "minari"
    to_minari(_small_dataset(discrete=True), root, overwrite=True)
    try:
        with h5py.File(root / "data" / "main_data.hdf5", "r+") as f:
            group = f[f"episode_{episode}"]
            if member in group:
                del group[member]
            group.create_dataset(member, data=value)
    except (TypeError, ValueError, OSError):
        return
    _assert_contract(lambda: get_minari(root), str(root))


@budget(15)
@given(data=st.binary(max_size=2048), which=st.sampled_from(["main_data.hdf5", "metadata.json", "arrow"]))
def test_minari_files_replaced_by_random_bytes(tmp_path, data, which):
    root = tmp_path / "minari"
    to_minari(_small_dataset(), root, data_format="arrow" if which == "arrow" else "hdf5", overwrite=True)
    target = root / "data" / ("0/part-0.arrow" if which == "arrow" else which)
    target.write_bytes(data)
    _assert_contract(lambda: get_minari(root), str(root))


# ------------------------------------------------------------------ tables


@budget(15)
@given(data=st.binary(max_size=2048), suffix=st.sampled_from([".csv", ".parquet", ".txt"]))
def test_table_files_of_random_bytes(tmp_path, data, suffix):
    pytest.importorskip("pandas", reason="tables need pandas (the tabular extra)")
    path = tmp_path / f"log{suffix}"
    path.write_bytes(data)
    _assert_contract(
        lambda: from_dataframe(path, "episode", ["x0", "x1"], "action", "reward", terminal_column="done"), str(path)
    )


@budget(15)
@given(cells=st.lists(st.lists(st.one_of(st.text(max_size=4), st.floats(), st.integers()), min_size=5, max_size=5),
                      min_size=1, max_size=6))
def test_csv_with_hostile_cells(tmp_path, cells):
    pd = pytest.importorskip("pandas", reason="tables need pandas (the tabular extra)")
    path = tmp_path / "log.csv"
    pd.DataFrame(cells, columns=["episode", "x0", "x1", "action", "reward"]).to_csv(path, index=False)
    _assert_contract(lambda: from_dataframe(path, "episode", ["x0", "x1"], "action", "reward"), str(path))
