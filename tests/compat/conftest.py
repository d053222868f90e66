"""Fixtures of the d3rlpy-compatibility suite.

Each test module here runs the code examples of one section of the d3rlpy
documentation with ``import d3rlpy`` replaced by ``import offrl``, shrunk
only in sizes (steps, episodes, rows) so the whole suite stays fast.

The documentation downloads its CartPole / Pendulum datasets; offrl builds
the same-named datasets locally (no network), so the fixtures below call
``offrl.datasets.get_cartpole()`` / ``get_pendulum()`` once per session, into
a cache under pytest's temporary directory.
"""

from __future__ import annotations

import os
from typing import Any, Iterator, Tuple

import pytest

import offrl


def _with_cache(tmp_path_factory: pytest.TempPathFactory, fn: Any, *args: Any) -> Any:
    """Call a dataset getter with the dataset cache under pytest's tmp dir."""
    cache = tmp_path_factory.getbasetemp() / "offrl_data_cache"
    old = os.environ.get("OFFRL_DATA_DIR")
    os.environ["OFFRL_DATA_DIR"] = str(cache)
    try:
        return fn(*args)
    finally:
        if old is None:
            os.environ.pop("OFFRL_DATA_DIR", None)
        else:
            os.environ["OFFRL_DATA_DIR"] = old


@pytest.fixture(scope="session")
def cartpole(tmp_path_factory: pytest.TempPathFactory) -> Tuple[Any, Any]:
    """``dataset, env = d3rlpy.datasets.get_cartpole()`` (built locally)."""
    return _with_cache(tmp_path_factory, offrl.datasets.get_cartpole)


@pytest.fixture(scope="session")
def pendulum(tmp_path_factory: pytest.TempPathFactory) -> Tuple[Any, Any]:
    """``dataset, env = d3rlpy.datasets.get_pendulum()`` (built locally)."""
    return _with_cache(tmp_path_factory, offrl.datasets.get_pendulum)


@pytest.fixture
def workdir(tmp_path: Any, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Run an example inside tmp_path: the docs write ``dqn.d3``, ``policy.onnx``
    and log folders into the current directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OFFRL_DATA_DIR", str(tmp_path_factory.getbasetemp() / "offrl_data_cache"))
    offrl.seed(0)
    yield tmp_path
