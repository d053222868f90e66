import platform

import pytest

from offrl import _allocator


@pytest.fixture
def fresh(monkeypatch):
    """A process in which retain_freed_memory has not run yet."""
    monkeypatch.setitem(_allocator._STATE, "done", False)
    monkeypatch.setitem(_allocator._STATE, "applied", False)
    monkeypatch.delenv("OFFRL_RETAIN_FREED_MEMORY", raising=False)
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)


def test_opt_out_leaves_malloc_alone(fresh, monkeypatch):
    monkeypatch.setenv("OFFRL_RETAIN_FREED_MEMORY", "0")
    monkeypatch.setattr(_allocator.ctypes, "CDLL", lambda *a, **k: pytest.fail("libc must not be loaded"))
    assert _allocator.retain_freed_memory() is False


@pytest.mark.parametrize("variable", ["MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"])
def test_the_users_glibc_settings_stand(fresh, monkeypatch, variable):
    monkeypatch.setenv(variable, "1000000")
    monkeypatch.setattr(_allocator.ctypes, "CDLL", lambda *a, **k: pytest.fail("libc must not be loaded"))
    assert _allocator.retain_freed_memory() is False


def test_applied_once_on_glibc(fresh, monkeypatch):
    glibc = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
    assert _allocator.retain_freed_memory() is glibc
    # a second call does not touch libc again and reports the same
    monkeypatch.setattr(_allocator.ctypes, "CDLL", lambda *a, **k: pytest.fail("libc must not be loaded twice"))
    assert _allocator.retain_freed_memory() is glibc


@pytest.mark.parametrize("name", ["CQLConfig", "CalQLConfig", "BEARConfig", "BCQConfig"])
def test_sampled_action_algorithms_built_on_cpu_retain_freed_memory(fresh, name):
    import numpy as np

    import offrl
    from offrl.dataset import MDPDataset

    rng = np.random.default_rng(0)
    dataset = MDPDataset(rng.standard_normal((20, 3)).astype(np.float32), rng.uniform(-1, 1, (20, 1)).astype(np.float32),
                         np.ones(20, np.float32), np.r_[np.zeros(19), 1.0].astype(np.float32))
    getattr(offrl.algos, name)().create(device="cpu").build_with_dataset(dataset)
    assert _allocator._STATE["done"]


def test_other_algorithms_leave_malloc_alone(fresh):
    import numpy as np

    from offrl.algos import SACConfig
    from offrl.dataset import MDPDataset

    rng = np.random.default_rng(0)
    dataset = MDPDataset(rng.standard_normal((20, 3)).astype(np.float32), rng.uniform(-1, 1, (20, 1)).astype(np.float32),
                         np.ones(20, np.float32), np.r_[np.zeros(19), 1.0].astype(np.float32))
    SACConfig().create(device="cpu").build_with_dataset(dataset)
    assert not _allocator._STATE["done"]
