"""Harness for running the upstream d3rlpy 2.8.1 tests against d3rlpy itself
(the baseline).  Nothing in here changes a test.

* torch >= 2.9 exports ONNX with the dynamo exporter by default, which cannot
  export the TorchScript function d3rlpy 2.8.1 hands to ``torch.onnx.export``;
  d3rlpy 2.8.1 was written against torch 2.5-2.8, whose default was the
  TorchScript exporter, so the baseline restores that default (``dynamo=False``
  unless a caller asks otherwise).
* d3rlpy's tests write ``test_data/...`` and ``d3rlpy_logs/`` relative to the
  working directory; the session runs in a temporary directory that has a
  ``test_data`` folder, so nothing lands in the checkout.
"""

import functools
import os

import pytest
import torch.onnx

_export = torch.onnx.export


@functools.wraps(_export)
def _legacy_default_export(*args, **kwargs):
    kwargs.setdefault("dynamo", False)
    return _export(*args, **kwargs)


torch.onnx.export = _legacy_default_export


@pytest.fixture(scope="session", autouse=True)
def _work_in_tmp_dir(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("d3rlpy_suite_upstream")
    (workdir / "test_data").mkdir()
    previous = os.getcwd()
    os.chdir(workdir)
    yield
    os.chdir(previous)
