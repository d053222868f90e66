"""Every place offrl parses JSON that came from a file or a command line
goes through offrl._safety.load_json: deep nesting (within the size caps)
and bad UTF-8 are a ValueError naming the source, never a RecursionError."""

from __future__ import annotations

import pytest

from offrl.algos import DQNConfig
from offrl.cli import CLIError, parse_overrides
from offrl.plotting import read_params
from offrl.preprocessing import StandardObservationScaler

DEEP = "[" * 100_000 + "]" * 100_000  # a RecursionError in json.loads before
NESTED = "JSON nested 100000 levels deep"


def test_configs_and_scalers_from_d3rlpy_json(tmp_path):
    with pytest.raises(ValueError, match=f"DQNConfig.deserialize: {NESTED}"):
        DQNConfig.deserialize(DEEP)
    with pytest.raises(ValueError, match=f"serialized_config: {NESTED}"):
        StandardObservationScaler.deserialize(DEEP)
    (tmp_path / "c.json").write_text(DEEP)
    with pytest.raises(ValueError, match=f"c.json: {NESTED}"):
        DQNConfig.deserialize_from_file(str(tmp_path / "c.json"))
    with pytest.raises(ValueError, match=f"c.json: {NESTED}"):
        StandardObservationScaler.deserialize_from_file(str(tmp_path / "c.json"))
    (tmp_path / "latin.json").write_bytes(b'{"batch_size": "\xff"}')
    with pytest.raises(ValueError, match="latin.json: not UTF-8 text"):
        DQNConfig.deserialize_from_file(str(tmp_path / "latin.json"))
    # what is not nested too deeply still reads as before
    assert DQNConfig.deserialize(DQNConfig(batch_size=7).serialize()).batch_size == 7


def test_a_run_directory_params_json(tmp_path):
    (tmp_path / "params.json").write_text(DEEP)
    with pytest.raises(ValueError, match=f"params.json: {NESTED}"):
        read_params(str(tmp_path))


def test_command_line_overrides():
    with pytest.raises(CLIError, match=f"override encoder_factory.hidden_units: {NESTED}"):
        parse_overrides(["encoder_factory.hidden_units=" + DEEP])
    # text that is not JSON stays a string, as before; JSON parses
    assert parse_overrides(["q_func_factory=qr", "n_critics=2", "hidden_units=[64, 64]", "bad=[1,"]) == {
        "q_func_factory": "qr", "n_critics": 2, "hidden_units": [64, 64], "bad": "[1,"}
