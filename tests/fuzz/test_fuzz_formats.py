"""Hostile input on the surfaces of issue 28: d3rlpy dumps with any
discrete action, config sizes, JSON nested to any depth (HDF5 attributes,
CLI overrides and config files), dict-observation keys, d3rlpy 1.x files
with bad values, compressed arrays that expand, and ``offrl info``.

The contract: the call succeeds, or raises ValueError / TypeError (a
``CLIError`` for the command line) naming the file or the field; never a
RecursionError, a library's own exception, or an allocation the checks
should have refused."""

from __future__ import annotations

import io
import json

import h5py
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzz_budget import budget
from offrl import _safety
from offrl.algos import DQNConfig, _sizing
from offrl.cli import CLIError, apply_overrides, main, parse_overrides
from offrl.dataset import MDPDataset, ReplayBuffer, load_v1
from offrl.dataset.keys import MAX_KEY_LENGTH, check_observation_key
from offrl.dataset.io import MAX_DISCRETE_ACTION_SIZE, describe_dataset_file

pytestmark = pytest.mark.fuzz


def _names(error: BaseException, *names: str) -> None:
    assert any(n in str(error) for n in names), f"{type(error).__name__} names none of {names}: {error}"


# ------------------------------------------------------ d3rlpy 2.x dumps (item 5)


def _d3rlpy_dump(path, actions: np.ndarray) -> None:
    with h5py.File(path, "w") as h5:
        h5.create_dataset("version", data="2.1")
        h5.create_dataset("columns", data=["observations", "actions", "rewards", "terminated"])
        h5.create_dataset("num_episodes", data=1)
        h5.create_dataset("observations_0", data=np.zeros((len(actions), 2), np.float32))
        h5.create_dataset("actions_0", data=actions.reshape(-1, 1))
        h5.create_dataset("rewards_0", data=np.zeros((len(actions), 1), np.float32))
        h5.create_dataset("terminated_0", data=True)


@budget(25)
@given(actions=st.lists(st.one_of(st.integers(-3, 8), st.integers(2**20, 2**63 - 1)), min_size=1, max_size=6),
       dtype=st.sampled_from([np.int64, np.uint64, np.int32]))
def test_d3rlpy_dump_discrete_actions_obey_offrls_cap(tmp_path, actions, dtype):
    values = np.array(actions, dtype=np.int64)
    if np.dtype(dtype) != np.int64:
        values = values[(values >= np.iinfo(dtype).min) & (values <= np.iinfo(dtype).max)]
        if values.size == 0:
            return
    path = tmp_path / "d3.h5"
    _d3rlpy_dump(path, values.astype(dtype))
    try:
        loaded = ReplayBuffer.load(path)
    except (ValueError, TypeError) as e:
        _names(e, str(path))
        assert values.min() < 0 or values.max() >= MAX_DISCRETE_ACTION_SIZE, e
        return
    assert loaded.dataset_info.action_size == int(values.max()) + 1 <= MAX_DISCRETE_ACTION_SIZE


# -------------------------------------------------------- config sizes (item 7)

SIZES = st.one_of(st.integers(1, 16), st.integers(10**5, 10**12))


@budget(15)
@given(n_critics=SIZES, width=SIZES, depth=st.integers(1, 3), batch_size=SIZES)
def test_config_sizes_are_refused_before_allocating(monkeypatch, n_critics, width, depth, batch_size):
    free = 64 * 2**20  # the checks see a 64 MiB machine: a config they pass allocates at most that much
    monkeypatch.setattr(_sizing, "available_memory", lambda: free)
    try:
        config = apply_overrides(DQNConfig, {"n_critics": n_critics, "batch_size": batch_size,
                                             "encoder_factory": "vector", "encoder_factory.hidden_units": [width] * depth})
    except CLIError:
        return
    algo = config.create()
    try:
        algo.create_impl((4,), 2)
    except ValueError as e:
        _names(e, "n_critics=", "hidden_units=")
        assert "this machine has 67.1 MB available" in str(e) or "too large to address" in str(e)
        return
    numbers = sum(t.numel() for m in algo.modules.values() for t in m.state_dict().values())
    assert numbers * 4 * 4 <= free
    need = _sizing.training_step_bytes(algo, _tiny_discrete(), batch_size)
    assert need is not None and need > batch_size * 4  # at least the rows' inputs


def _tiny_discrete() -> MDPDataset:
    return MDPDataset(np.zeros((6, 4), np.float32), np.array([0, 1, 0, 1, 0, 1]), np.zeros(6), np.r_[0, 0, 1, 0, 0, 1])


# -------------------------------------------------------- nested JSON (item 8)

JSON_TEXT = st.one_of(
    st.integers(1, 200_000).map(lambda d: "[" * d + "]" * d),
    st.integers(1, 200_000).map(lambda d: '{"a":' * d + "1" + "}" * d),
    st.integers(1, 100_000).map(lambda d: "[" * d),  # unbalanced
    st.text(alphabet='[]{}",:ab1 \\', max_size=64),
    st.lists(st.text(max_size=6), max_size=4).map(json.dumps),
)


@budget(15)
@given(text=JSON_TEXT)
def test_observation_keys_attribute_of_any_depth(tmp_path, text):
    path = tmp_path / "keys.h5"
    MDPDataset({"a": np.zeros((4, 2)), "b": np.zeros((4, 1))}, np.zeros((4, 1)), np.zeros(4),
               np.r_[0, 0, 0, 1]).dump(path)
    with h5py.File(path, "r+") as h5:
        h5.attrs["observation_keys"] = text
    for call in (lambda: ReplayBuffer.load(path), lambda: describe_dataset_file(path)):
        try:
            call()
        except (ValueError, TypeError) as e:
            _names(e, str(path))


@budget(30)
@given(key=st.sampled_from(["batch_size", "encoder_factory.hidden_units", "q_func_factory", "learning_rate"]),
       text=JSON_TEXT)
def test_cli_overrides_of_any_depth(key, text):
    try:
        overrides = parse_overrides([f"{key}={text}"])
        apply_overrides(DQNConfig, {"encoder_factory": "vector", **overrides} if "encoder" in key else overrides)
    except CLIError as e:
        _names(e, key, "invalid config")


@budget(10)
@given(text=JSON_TEXT)
def test_cli_config_files_of_any_depth(tmp_path, text):
    path = tmp_path / "config.json"
    path.write_text(text)
    from offrl.cli.common import config_from_args as _config_from_args

    try:
        _config_from_args(DQNConfig, str(path), [])
    except CLIError as e:
        _names(e, str(path))


# ---------------------------------------------------- dict-observation keys (item 11)


def _oracle(key: str) -> bool:
    """The documented rule, written out plainly."""
    if not 1 <= len(key) <= MAX_KEY_LENGTH or "\\" in key or not all(c.isprintable() for c in key):
        return False
    return all(part and not part.startswith(".") for part in key.split("/"))


@budget(30)
@given(key=st.one_of(st.text(max_size=12), st.text(alphabet="./\\\x00\n a", max_size=6),
                     st.sampled_from(["../x", "", "a\x00", "..", "a/b", "état", " "])))
def test_keys_follow_the_documented_rule(tmp_path, key):
    try:
        check_observation_key(key, "obs")
        accepted = True
    except ValueError as e:
        accepted = False
        assert "obs has" in str(e)
    assert accepted == _oracle(key), key
    observations = {key: np.zeros((4, 2)), "~other": np.ones((4, 1))} if key != "~other" else {key: np.zeros((4, 2))}
    try:
        dataset = MDPDataset(observations, np.zeros((4, 1)), np.zeros(4), np.r_[0, 0, 0, 1])
    except ValueError:
        assert not accepted
        return
    assert accepted
    buffer = io.BytesIO()
    dataset.dump(buffer)
    buffer.seek(0)
    assert key in ReplayBuffer.load(buffer).dataset_info.observation_signature.keys


# --------------------------------------------------- d3rlpy 1.x files (item 11)


@budget(20)
@given(column=st.sampled_from(["observations", "actions", "rewards", "terminals", "episode_terminals"]),
       row=st.integers(0, 7), value=st.sampled_from([np.nan, np.inf, -np.inf, 2.0, -1.0, 0.5, 1e300]))
def test_load_v1_bad_values_name_the_file(tmp_path, column, row, value):
    data = {"observations": np.zeros((8, 2)), "actions": np.zeros((8, 2)), "rewards": np.zeros(8),
            "terminals": np.r_[0, 0, 0, 1, 0, 0, 0, 1].astype(np.float64), "episode_terminals": np.zeros(8)}
    data[column][row] = value
    path = tmp_path / "v1.h5"
    with h5py.File(path, "w") as h5:
        for key, array in data.items():
            h5[key] = array
    try:
        load_v1(path)
    except (ValueError, TypeError) as e:
        _names(e, str(path))


# -------------------------------------------------------- expansion (item 13)


@budget(12)
@given(rows=st.integers(1, 3000), width=st.integers(1, 40), written=st.floats(0, 1), bound=st.floats(1, 5000),
       zeros=st.booleans())
def test_expansion_is_refused_exactly_beyond_the_bound(tmp_path, monkeypatch, rows, width, written, bound, zeros):
    monkeypatch.setattr(_safety, "EXPANSION_FLOOR", 0)
    path = tmp_path / "x.h5"
    rng = np.random.default_rng(rows)
    MDPDataset(np.zeros((4, 2), np.float32), np.full((4, 1), 0.5), np.zeros(4), np.r_[0, 0, 0, 1]).dump(path)
    with h5py.File(path, "r+") as h5:
        for key in ("observations_0", "actions", "rewards", "episode_ends"):
            del h5[key]
        node = h5.create_dataset("observations_0", shape=(rows, width), dtype=np.float32, compression="gzip",
                                 chunks=(min(rows, 64), width))
        filled = int(written * rows)
        if filled:
            node[:filled] = 0 if zeros else rng.standard_normal((filled, width))
        h5.create_dataset("actions", data=np.zeros((rows, 1), np.float32))
        h5.create_dataset("rewards", data=np.zeros((rows, 1), np.float32))
        h5.create_dataset("episode_ends", data=np.array([rows], np.int64))
        h5["episode_starts"][0] = 0
        declared = stored = 0
        for key in ("observations_0", "actions", "rewards", "episode_starts", "episode_ends", "episode_terminated",
                    "episode_has_final"):
            d, s = _safety.h5_bytes(h5[key])
            declared, stored = declared + d, stored + s
    try:
        loaded = ReplayBuffer.load(path, max_expansion=bound)
    except ValueError as e:
        assert declared > bound * stored, e
        assert f"expand to {_safety.format_bytes(declared)}" in str(e) and str(path) in str(e)
        return
    assert declared <= bound * stored
    assert loaded.transition_count == rows


# ------------------------------------------------------------ offrl info (item 13)

INFO_TARGETS = ["observations_0", "actions", "rewards", "episode_starts", "episode_ends", "episode_terminated"]


@budget(12)
@given(target=st.sampled_from(INFO_TARGETS), rows=st.sampled_from([0, 1, 7, 10**9, 10**12]),
       compression=st.sampled_from([None, "gzip", "lzf"]))
def test_info_on_any_declared_shape(tmp_path, capsys, target, rows, compression):
    path = tmp_path / "info.h5"
    MDPDataset(np.zeros((4, 2), np.float32), np.zeros((4, 1)), np.zeros(4), np.r_[0, 0, 0, 1]).dump(path)
    with h5py.File(path, "r+") as h5:
        dtype = h5[target].dtype
        del h5[target]
        chunked = compression is not None or rows > 4
        h5.create_dataset(target, shape=(rows,) + ((2,) if target == "observations_0" else (1,) * (target in (
            "actions", "rewards"))), dtype=dtype, compression=compression, chunks=True if chunked and rows else None)
    code = main(["info", str(path)])  # metadata only: milliseconds whatever the declared size
    err = capsys.readouterr().err.strip()
    assert code in (0, 2)
    if code == 2:
        assert len(err.splitlines()) == 1 and str(path) in err and "Traceback" not in err
