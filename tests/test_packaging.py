"""CI's minimum-versions run tests the floors pyproject.toml states: every
requirement it installs (the dependencies and the ``test`` extra) has its
``>=`` floor pinned, exactly, in .ci/minimum-constraints.txt, and that file
pins nothing else."""

from __future__ import annotations

import pathlib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / ".ci" / "minimum-constraints.txt"
PINNED_BY_THE_README = {"torch"}  # the install command pins torch==2.13.0 (the CPU wheel on local disk)


def floors() -> dict:
    """``{name: floor}`` of the requirements CI installs, from pyproject.toml."""
    tomllib = pytest.importorskip("tomllib", reason="Python 3.10 has no tomllib (pyproject.toml is read on 3.11 and later)")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    out = {}
    for text in project["dependencies"] + project["optional-dependencies"]["test"]:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        if name in PINNED_BY_THE_README:
            continue
        lower = [Version(s.version) for s in requirement.specifier if s.operator == ">="]
        assert len(lower) == 1, f"pyproject.toml: {text!r} needs one '>=' floor, tested by CI's minimum run"
        out[name] = lower[0]
    return out


def pins() -> dict:
    out = {}
    for number, line in enumerate(CONSTRAINTS.read_text().splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        assert sep, f"{CONSTRAINTS.name}:{number}: {line!r} is not 'name==version'"
        out[canonicalize_name(name.strip())] = Version(version.strip())
    return out


def test_minimum_constraints_pin_each_floor_of_pyproject():
    want, got = floors(), pins()
    missing = sorted(set(want) - set(got))
    assert not missing, f"add the floors of {missing} to .ci/minimum-constraints.txt"
    extra = sorted(set(got) - set(want))
    assert not extra, f".ci/minimum-constraints.txt pins {extra}, which pyproject.toml does not require for the tests"
    differ = {name: (str(want[name]), str(got[name])) for name in want if want[name] != got[name]}
    assert not differ, f"pyproject.toml floor vs .ci/minimum-constraints.txt pin: {differ}"


def test_gymnasium_floor_is_what_d3rlpy_pins():
    # d3rlpy 2.8.1 pins gymnasium==1.0.0: its users have 1.0.0 installed
    assert floors()["gymnasium"] == Version("1.0.0")
