"""Policy export to TorchScript (``.pt``) and ONNX (``.onnx``).

The exported graph holds the observation scaler, the greedy policy and the
action scaler's inverse: it takes raw observations (float32, batch axis
dynamic; one input per element of a tuple observation (dict observations:
one input per key, named by the key, in sorted key order), named ``input_0``,
``input_1``, ... as d3rlpy names them) and returns ``output_0``: actions in
the environment's units (float32), or action indices (int64) for discrete
policies. Unlike d3rlpy's export (batch fixed to 1), any batch size works.
Files written by older offrl versions (inputs ``observation`` /
``observation_<k>``, output ``action``) still load: the loaders read the
names from the graph. After writing, the file is loaded back (``torch.jit.load`` /
onnxruntime) and compared with ``algo.predict`` on a few observations; a
mismatch is an error and no file is left behind.
"""

from __future__ import annotations

import copy
import json
import os
import warnings
from typing import Any, List, Optional

import numpy as np
import torch
from torch import nn

from ._atomic import atomic_write, check_target
from ._safety import load_json
from ._version import __version__
from .constants import ActionSpace

__all__ = ["allowed_difference", "save_policy", "PolicyGraph", "load_onnx_policy", "load_torchscript_policy", "ExportError"]

#: largest allowed difference between an exported policy and ``predict``, as
#: a fraction of the output's scale (its largest magnitude, at least 1): the
#: exported graph may fuse or reorder float32 sums (TorchScript, ONNX Runtime),
#: which moves results by a few ulps of the magnitudes summed, so an absolute
#: bound refuses exact exports whose actions are large (e.g. unscaled by an
#: action scaler); a wrong export (a missing scaler, other weights) differs
#: by far more
TOLERANCE = 1e-4


def allowed_difference(expected: np.ndarray) -> float:
    """The largest difference :func:`save_policy` accepts between an export's
    actions and ``predict``'s ``expected`` ones."""
    scale = float(np.abs(expected).max()) if expected.size else 0.0
    return TOLERANCE * max(1.0, scale)


class ExportError(ValueError):
    """An exported policy could not be written or does not match the model."""


class PolicyGraph(nn.Module):
    """Raw observations -> actions in environment units (the exported graph)."""

    def __init__(self, algo: Any) -> None:
        super().__init__()
        self.policy = algo.policy_module()
        self.observation_scaler = algo.observation_scaler
        self.action_scaler = algo.action_scaler if algo.get_action_type() != ActionSpace.DISCRETE else None
        self.n_inputs = len(algo.observation_shape) if isinstance(algo.observation_shape, list) else 1

    def forward(self, *observations: torch.Tensor) -> torch.Tensor:
        if self.n_inputs == 1:
            x: Any = observations[0]
            x = self.observation_scaler.transform(x) if self.observation_scaler is not None else x.float()
        else:
            x = list(observations)
            if self.observation_scaler is not None:
                x = self.observation_scaler.transform(x)
            else:
                x = [v.float() for v in x]
        action = self.policy(x)
        if self.action_scaler is not None:
            action = self.action_scaler.reverse_transform(action)
        return action


#: name of the exported graph's output (d3rlpy's name)
OUTPUT_NAME = "output_0"


def _input_names(algo: Any) -> List[str]:
    """``input_0``, ``input_1``, ...: one per observation element, as d3rlpy;
    for dict observations the keys themselves (in sorted key order, the
    order of the graph's positional inputs)."""
    keys = getattr(algo, "observation_keys", None)
    if keys is not None:
        return list(keys)
    shape = algo.observation_shape
    return [f"input_{k}" for k in range(len(shape) if isinstance(shape, list) else 1)]


def _feed_order(names: List[str], x: Any) -> List[Any]:
    """A dict observation's values in the order of ``names`` (the inputs);
    a missing or extra key raises ``ValueError`` naming it."""
    missing = [n for n in names if n not in x]
    if missing:
        raise ValueError(f"the observation has no key {missing[0]!r}: this policy takes {names}")
    extra = [k for k in x if k not in names]
    if extra:
        raise ValueError(f"the observation has an unexpected key {extra[0]!r}: this policy takes {names}")
    return [x[n] for n in names]


def _example_inputs(algo: Any, batch: int, seed: int = 0) -> List[np.ndarray]:
    rng = np.random.default_rng(seed)
    shapes = algo.observation_shape if isinstance(algo.observation_shape, list) else [algo.observation_shape]
    scaler = algo.observation_scaler
    out = []
    for k, shape in enumerate(shapes):
        element = scaler.observation_scalers[k] if scaler is not None and hasattr(scaler, "observation_scalers") else scaler
        if element is not None and element.get_type() == "pixel":
            out.append(rng.integers(0, 256, size=(batch,) + tuple(shape)).astype(np.float32))
        elif element is not None and element.get_type() == "standard" and element.built:
            mean, std = np.asarray(element.mean), np.asarray(element.std)
            out.append((mean + std * rng.normal(size=(batch,) + tuple(shape))).astype(np.float32))
        elif element is not None and element.get_type() == "min_max" and element.built:
            low, high = np.asarray(element.minimum), np.asarray(element.maximum)
            out.append((low + (high - low) * rng.random(size=(batch,) + tuple(shape))).astype(np.float32))
        else:
            out.append(rng.normal(size=(batch,) + tuple(shape)).astype(np.float32))
    return out


def _metadata(algo: Any) -> dict:
    shape = algo.observation_shape
    return {
        "offrl_version": __version__,
        "algorithm": algo.config.get_type(),
        "observation_shapes": json.dumps([list(s) for s in shape] if isinstance(shape, list) else [list(shape)]),
        "action_space": algo.get_action_type().name.lower(),
        "action_size": str(algo.action_size),
        "inputs": json.dumps(_input_names(algo)),
    }


def _expected(algo: Any, inputs: List[np.ndarray]) -> np.ndarray:
    return algo.predict(inputs if len(inputs) > 1 else inputs[0])


def _compare(path: str, got: np.ndarray, expected: np.ndarray, discrete: bool) -> None:
    if got.shape != expected.shape:
        raise ExportError(f"{path}: the exported policy returns shape {got.shape}, predict returns {expected.shape}")
    if discrete:
        if not np.array_equal(got.astype(np.int64), expected.astype(np.int64)):
            raise ExportError(f"{path}: the exported policy chooses other actions than predict")
    elif not np.all(np.abs(got - expected) <= allowed_difference(expected)):
        raise ExportError(f"{path}: the exported policy differs from predict by {np.abs(got - expected).max():.3g} "
                          f"(allowed: {allowed_difference(expected):.3g})")


def save_policy(algo: Any, fname: str) -> None:
    """Write the greedy policy of ``algo`` to ``fname`` (``.pt`` TorchScript,
    ``.onnx`` ONNX), verified against ``algo.predict``."""
    path = os.fspath(fname)
    extension = os.path.splitext(path)[1].lower()
    if extension not in (".pt", ".onnx"):
        raise ValueError(f"save_policy chooses the format by extension: use .pt (TorchScript) or .onnx, got {path!r}")
    if not algo.is_built:
        raise ValueError(f"{type(algo).__name__} is not built yet: fit it (or build_with_dataset / build_with_env) before save_policy")
    try:
        check_target(path)  # before tracing: a missing directory, a file in the way, a name too long
    except FileNotFoundError as e:
        raise ValueError(str(e)) from None
    try:
        graph = PolicyGraph(algo)
    except NotImplementedError as e:
        raise ValueError(f"{type(algo).__name__} has no policy network to export: {e}") from None
    discrete = algo.get_action_type() == ActionSpace.DISCRETE
    graph = copy.deepcopy(graph).to("cpu").eval()  # the algorithm keeps its device
    example = [torch.from_numpy(a) for a in _example_inputs(algo, 3)]

    def write(tmp: str) -> None:
        with torch.no_grad():
            if extension == ".pt":
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    traced = torch.jit.trace(graph, tuple(example), check_trace=False)
                    # through a Python file: torch.jit.save to a path aborts the process when a write fails
                    with open(tmp, "wb") as f:
                        torch.jit.save(traced, f, _extra_files={"offrl_metadata.json": json.dumps(_metadata(algo))})
            else:
                _export_onnx(graph, example, algo, tmp)
        for batch in (1, 7):
            inputs = _example_inputs(algo, batch, seed=batch)
            runner = load_torchscript_policy(tmp) if extension == ".pt" else load_onnx_policy(tmp)
            got = runner(*inputs)
            _compare(path, np.asarray(got), _expected(algo, inputs), discrete)

    atomic_write(path, write)


def _export_onnx(graph: nn.Module, example: List[torch.Tensor], algo: Any, tmp: str) -> None:
    import onnx

    names = _input_names(algo)
    axes = {name: {0: "batch"} for name in names}
    axes[OUTPUT_NAME] = {0: "batch"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            graph, tuple(example), tmp, input_names=names, output_names=[OUTPUT_NAME],
            dynamic_axes=axes, dynamo=False, opset_version=17,
        )
    model = onnx.load(tmp)
    for key, value in _metadata(algo).items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(model, tmp)


class _OnnxPolicy:
    def __init__(self, path: str, threads: Optional[int] = None) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        if threads is not None:
            options.intra_op_num_threads = int(threads)
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        # read from the graph: files from before the d3rlpy names
        # (``observation``/``action``) keep working
        self.names = [i.name for i in self.session.get_inputs()]
        self.output_name = self.session.get_outputs()[0].name
        self.metadata = dict(self.session.get_modelmeta().custom_metadata_map)

    def __call__(self, *observations: np.ndarray) -> np.ndarray:
        if len(observations) != len(self.names):
            raise ValueError(f"this policy takes {len(self.names)} observation input(s) {self.names}, got {len(observations)}")
        feed = {n: np.asarray(o, dtype=np.float32) for n, o in zip(self.names, observations)}
        return self.session.run([self.output_name], feed)[0]

    def predict(self, x: Any) -> np.ndarray:
        """``algo.predict``'s interface (a batch, a list for tuple
        observations, or a dict by input name for dict observations)."""
        if isinstance(x, dict):
            return self(*_feed_order(self.names, x))
        return self(*x) if isinstance(x, (list, tuple)) else self(x)


class _TorchScriptPolicy:
    def __init__(self, path: str) -> None:
        extra = {"offrl_metadata.json": ""}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            self.module = torch.jit.load(path, map_location="cpu", _extra_files=extra)
        self.metadata = load_json(extra["offrl_metadata.json"] or "{}", f"{path}: offrl_metadata.json")

    def __call__(self, *observations: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return self.module(*[torch.as_tensor(np.asarray(o, dtype=np.float32)) for o in observations]).numpy()

    def predict(self, x: Any) -> np.ndarray:
        """``algo.predict``'s interface (a batch, a list for tuple
        observations, or a dict for dict observations, ordered by the
        ``inputs`` recorded in the metadata)."""
        if isinstance(x, dict):
            names = self.metadata.get("inputs")
            names = load_json(names, "the policy's metadata 'inputs'") if isinstance(names, str) else sorted(x)
            return self(*_feed_order(list(names), x))
        return self(*x) if isinstance(x, (list, tuple)) else self(x)


def load_onnx_policy(path: str, threads: Optional[int] = None) -> _OnnxPolicy:
    """An exported ONNX policy as a callable ``policy(*observations) -> actions``
    with its ``metadata`` (needs only onnxruntime; ``threads`` sets
    onnxruntime's intra-op threads)."""
    return _OnnxPolicy(os.fspath(path), threads)


def load_torchscript_policy(path: str) -> _TorchScriptPolicy:
    """An exported TorchScript policy as a callable with its ``metadata``."""
    return _TorchScriptPolicy(os.fspath(path))
