"""Load a tutorial script by path (tutorials/ is not a package)."""

import importlib.util
import pathlib
import sys

import pytest

TUTORIALS = pathlib.Path(__file__).resolve().parents[2] / "tutorials"


@pytest.fixture
def tutorial():
    """``tutorial("getting_started")`` -> the module of tutorials/getting_started.py."""

    def load(name: str):
        spec = importlib.util.spec_from_file_location(f"tutorial_{name}", TUTORIALS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses defined in a tutorial look their module up
        spec.loader.exec_module(module)
        return module

    return load
