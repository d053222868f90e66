"""Built-in datasets are the same bytes whatever torch's CPU kernels and
thread count: the recipes' files are built under other kernels
(``ATEN_CPU_CAPABILITY``) and thread counts in fresh interpreters and their
checksums compared. The replay datasets (built by training networks, whose
float32 kernels do differ across CPUs) are shipped files, copied as they are."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from offrl.datasets import builtin

BUILD = """
import json, os, sys, torch
torch.set_num_threads(int(sys.argv[1]))
from offrl.datasets.builtin import RECIPES, SHIPPED, build_dataset
out = {}
for name in sorted(set(RECIPES) - SHIPPED):
    out[name] = build_dataset(name, os.path.join(sys.argv[2], name + ".h5"), n_steps=int(sys.argv[3]))
print(json.dumps(out))
"""


def _checksums(tmp_path, capability: str, threads: int, n_steps: int) -> dict:
    directory = tmp_path / f"{capability}-{threads}"
    directory.mkdir()
    env = dict(os.environ, ATEN_CPU_CAPABILITY=capability, OMP_NUM_THREADS=str(threads))
    done = subprocess.run([sys.executable, "-c", BUILD, str(threads), str(directory), str(n_steps)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_recipes_give_the_same_bytes_under_other_kernels_and_thread_counts(tmp_path):
    reference = _checksums(tmp_path, "default", 1, 400)  # no SIMD, one thread
    assert sorted(reference) == sorted(set(builtin.RECIPES) - builtin.SHIPPED)
    assert _checksums(tmp_path, "avx2", 2, 400) == reference


@pytest.mark.slow
def test_full_recipes_match_their_reference_checksums_under_other_kernels(tmp_path):
    expected = {name: builtin.RECIPES[name].reference_sha256 for name in set(builtin.RECIPES) - builtin.SHIPPED}
    for capability, threads in (("default", 1), ("avx2", 2)):
        built = _checksums_full(tmp_path, capability, threads)
        assert built == expected, capability


def _checksums_full(tmp_path, capability: str, threads: int) -> dict:
    directory = tmp_path / f"full-{capability}-{threads}"
    directory.mkdir()
    code = BUILD.replace("n_steps=int(sys.argv[3])", "n_steps=None")
    env = dict(os.environ, ATEN_CPU_CAPABILITY=capability, OMP_NUM_THREADS=str(threads))
    done = subprocess.run([sys.executable, "-c", code, str(threads), str(directory), "0"],
                          capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", sorted(builtin.SHIPPED))
def test_the_quickstart_datasets_are_shipped_files(name):
    """The quickstart trains on the replay datasets: the same file on every
    machine, because it is copied from the package, never rebuilt."""
    path = os.path.join(builtin.PREBUILT_DIRECTORY, f"{name}.h5")
    assert builtin.file_sha256(path) == builtin.RECIPES[name].reference_sha256
