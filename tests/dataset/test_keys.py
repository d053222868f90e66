"""The one rule for dict-observation key names (offrl/dataset/keys.py), and
that every reader and writer applies it: MDPDataset dict input, Signature,
offrl's HDF5 files, gymnasium Dict spaces."""

from __future__ import annotations

import re

import h5py
import numpy as np
import pytest

from offrl.dataset import MDPDataset, ReplayBuffer, Signature
from offrl.dataset.keys import MAX_KEY_LENGTH, check_observation_key, check_observation_keys

GOOD = ["image", "joint pos", "achieved_goal", "état", "a.b", "robot/arm/pos", "x" * MAX_KEY_LENGTH, "0", "a-b:c"]
BAD = [
    ("", "empty key"),
    ("../x", "part starting with '.'"),
    ("..", "part starting with '.'"),
    (".hidden", "part starting with '.'"),
    ("a/./b", "part starting with '.'"),
    ("a\x00", "control character '\\x00' at position 1"),
    ("a\nb", "control character '\\n'"),
    ("tab\there", "control character '\\t'"),
    ("a\\b", "a backslash at position 1"),
    ("/abs", "empty part"),
    ("a/", "empty part"),
    ("a//b", "empty part"),
    ("x" * (MAX_KEY_LENGTH + 1), f"of {MAX_KEY_LENGTH + 1} characters"),
]


@pytest.mark.parametrize("key", GOOD)
def test_names_a_user_would_give_are_accepted(key):
    assert check_observation_key(key, "obs") == key


@pytest.mark.parametrize("key, message", BAD)
def test_keys_that_are_not_names_are_refused_naming_the_key(key, message):
    with pytest.raises(ValueError, match=re.escape(message)) as info:
        check_observation_key(key, "somewhere")
    assert str(info.value).startswith("somewhere has")


def test_non_strings_and_repeats():
    with pytest.raises(TypeError, match="keys must be strings"):
        check_observation_key(3, "obs")
    with pytest.raises(ValueError, match="repeats the key 'b'"):
        check_observation_keys(["a", "b", "c", "b"], "obs")
    assert check_observation_keys(["b", "a"], "obs") == ("b", "a")


@pytest.mark.parametrize("key, message", BAD[:8])
def test_mdp_dataset_and_signature_refuse_bad_keys(key, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        MDPDataset({key: np.zeros((4, 2)), "ok": np.zeros((4, 1))}, np.zeros((4, 1)), np.zeros(4), np.r_[0, 0, 0, 1])
    with pytest.raises(ValueError, match=re.escape(message)):
        Signature(dtype=[np.float32], shape=[(2,)], keys=[key])


def _dict_file(path):
    dataset = MDPDataset({"a": np.zeros((4, 2)), "b": np.ones((4, 1))}, np.zeros((4, 1)), np.zeros(4), np.r_[0, 0, 0, 1])
    dataset.dump(path)
    return path


@pytest.mark.parametrize("key, message", BAD[:8])
def test_an_hdf5_file_with_a_bad_key_is_refused_naming_file_and_key(tmp_path, key, message):
    path = _dict_file(tmp_path / "d.h5")
    with h5py.File(path, "r+") as h5:
        h5.attrs["observation_keys"] = f'["a", {__import__("json").dumps(key)}]'
    with pytest.raises(ValueError, match=re.escape(message)) as info:
        ReplayBuffer.load(path)
    assert str(path) in str(info.value) and "observation_keys" in str(info.value)


def test_an_hdf5_file_with_deeply_nested_keys_is_a_value_error(tmp_path):
    path = _dict_file(tmp_path / "d.h5")
    with h5py.File(path, "r+") as h5:
        h5.attrs["observation_keys"] = "[" * 100_000 + "]" * 100_000  # raised RecursionError before
    with pytest.raises(ValueError, match=re.escape(f"{path}: the attribute 'observation_keys': JSON nested 100000")):
        ReplayBuffer.load(path)


def test_good_keys_round_trip_through_a_file(tmp_path):
    obs = {"robot/arm": np.arange(8.0).reshape(4, 2), "état": np.ones((4, 1))}
    dataset = MDPDataset(obs, np.zeros((4, 1)), np.zeros(4), np.r_[0, 0, 0, 1])
    dataset.dump(tmp_path / "d.h5")
    loaded = ReplayBuffer.load(tmp_path / "d.h5")
    assert loaded.dataset_info.observation_signature.keys == ("robot/arm", "état")
    assert list(loaded.episodes[0].observations) == ["robot/arm", "état"]
    for key in obs:
        np.testing.assert_array_equal(loaded.episodes[0].observations[key], obs[key])


def test_a_gymnasium_dict_space_with_a_bad_key_is_refused():
    gymnasium = pytest.importorskip("gymnasium")
    from offrl.dataset.signature import signatures_from_env
    from offrl.dataset.writer import BasicWriterPreprocess

    class Env:
        observation_space = gymnasium.spaces.Dict({"../up": gymnasium.spaces.Box(-1, 1, (2,))})
        action_space = gymnasium.spaces.Discrete(2)

    with pytest.raises(ValueError, match=re.escape("the observation space has key '../up'")):
        signatures_from_env(Env(), BasicWriterPreprocess())
