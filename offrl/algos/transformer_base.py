"""The machinery of offrl's sequence policies (the Decision Transformer
family: :mod:`offrl.algos.decision_transformer`, :mod:`offrl.algos.tacr`).

The sequence models share :class:`~offrl.algos.base.QLearningAlgoBase`'s
machinery (building, scalers, ``fit``'s loop and logging, save / load,
``get_state``) and report ``predicts_from_sequences``: ``fit`` samples
trajectory windows for them, ``predict`` takes a :class:`TransformerInput`
(one context) and a caller that acts one observation at a time uses
:meth:`TransformerAlgoBase.as_stateful_wrapper`.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, TypeVar, Union, runtime_checkable

import numpy as np
import torch
from torch import nn

from .._random import get_rng
from ..constants import ActionSpace, PositionEncodingType
from ..dataset.batch import TrajectoryMiniBatch
from ..dataset.signature import observation_columns, observation_from_dict
from ..metrics.utility import evaluate_transformer_with_environment
from ..models.transformers import ACTIVATIONS
from .base import QLearningAlgoBase
from .inputs_check import as_array, check_real_values
from .config import (POSITIVE, POSITIVE_INT, Constraint, SharedFieldsConfig,
                     between, check_enable_ddp, one_of, param)

__all__ = [
    "TransformerInput",
    "TorchTrajectoryBatch",
    "TransformerConfig",
    "TransformerAlgoBase",
    "TransformerActionSampler",
    "IdentityTransformerActionSampler",
    "SoftmaxTransformerActionSampler",
    "GreedyTransformerActionSampler",
    "StatefulTransformerWrapper",
    "embeds_steps_once",
    "export_sequence_policy",
]

DROPOUT = between(0.0, 1.0, high_open=True)
ACTIVATION = one_of(sorted(ACTIVATIONS))
POSITION_ENCODING = Constraint("a PositionEncodingType", lambda v: isinstance(v, PositionEncodingType), TypeError)


# --------------------------------------------------------------------- inputs
@dataclasses.dataclass
class TransformerInput:
    """One context of ``L`` steps, oldest first, in the environment's units.

    observations: ``(L, *obs_shape)`` (a list of arrays for tuple
    observations); actions: ``(L, action_size)`` floats or ``(L,)`` /
    ``(L, 1)`` action indices (the last step's action is not used: it is
    what is predicted); rewards: ``(L, 1)``; returns_to_go: ``(L, 1)``;
    timesteps: ``(L,)`` integer positions in the episode.
    """

    observations: Union[np.ndarray, Sequence[np.ndarray]]
    actions: np.ndarray
    rewards: np.ndarray
    returns_to_go: np.ndarray
    timesteps: np.ndarray

    def __post_init__(self) -> None:
        if isinstance(self.observations, dict):  # dict observations: their values in sorted key order
            values = observation_from_dict(self.observations, None, "TransformerInput.observations")
            self.observations = values[0] if len(values) == 1 else values

    @property
    def length(self) -> int:
        return int(np.shape(self.actions)[0])


@dataclasses.dataclass(frozen=True)
class TorchTrajectoryBatch:
    """A trajectory mini-batch on the device, scaled (what ``_update`` sees):
    observations ``(B, L, ...)``, actions ``(B, L, A)`` (int64 ``(B, L, 1)``
    for discrete), rewards / returns_to_go / terminals ``(B, L, 1)``,
    timesteps ``(B, L)`` int64, masks ``(B, L)`` (0 on front padding)."""

    observations: Any
    actions: torch.Tensor
    rewards: torch.Tensor
    returns_to_go: torch.Tensor
    terminals: torch.Tensor
    timesteps: torch.Tensor
    masks: torch.Tensor
    #: unpadded steps in the batch (counted on the host, before the transfer; 0: not counted)
    n_steps: int = 0


# ------------------------------------------------------------ action samplers
@runtime_checkable
class TransformerActionSampler(Protocol):
    """Turns ``predict``'s output for one step (an action, or logits) into the
    action given to the environment."""

    def __call__(self, transformer_output: np.ndarray) -> Union[np.ndarray, int]: ...


class IdentityTransformerActionSampler:
    """The output as it is (continuous actions)."""

    def __call__(self, transformer_output: np.ndarray) -> Union[np.ndarray, int]:
        return transformer_output


class SoftmaxTransformerActionSampler:
    """An action index drawn from ``softmax(logits / temperature)`` (with
    offrl's random generator, so :func:`offrl.seed` fixes it)."""

    def __init__(self, temperature: float = 1.0) -> None:
        POSITIVE.check(temperature, "temperature")
        self.temperature = float(temperature)

    def __call__(self, transformer_output: np.ndarray) -> int:
        logits = np.asarray(transformer_output, dtype=np.float64).reshape(-1) / self.temperature
        probs = np.exp(logits - logits.max())
        probs /= probs.sum()
        return int(get_rng().choice(probs.shape[0], p=probs))


class GreedyTransformerActionSampler:
    """The action index with the largest logit."""

    def __call__(self, transformer_output: np.ndarray) -> int:
        return int(np.argmax(transformer_output))


# --------------------------------------------------------------------- config
@dataclasses.dataclass
class TransformerConfig(SharedFieldsConfig):
    """Fields every sequence model has.

    Args:
        context_size: steps in a context window (the model's input length).
        max_timestep: the largest episode timestep the position encoding knows.
    """

    context_size: int = param(20, check=POSITIVE_INT)
    max_timestep: int = param(1000, check=POSITIVE_INT)

    def __post_init__(self) -> None:
        # a position encoding given (or read from JSON) by its name becomes the enum
        kind = getattr(self, "position_encoding_type", None)
        if isinstance(kind, str):
            names = [k.value for k in PositionEncodingType]
            if kind not in names:
                raise ValueError(f"position_encoding_type must be one of {names}, got {kind!r}")
            self.position_encoding_type = PositionEncodingType(kind)
        super().__post_init__()

    def _params(self) -> Dict[str, Any]:
        # enums are written by their value (JSON has no enum type)
        return {k: (v.value if isinstance(v, PositionEncodingType) else v) for k, v in super()._params().items()}


# ----------------------------------------------------------------------- base
#: d3rlpy's type parameters of ``TransformerAlgoBase[TTransformerImpl, TTransformerConfig]``
TTransformerImpl = TypeVar("TTransformerImpl")
TTransformerConfig = TypeVar("TTransformerConfig", bound=TransformerConfig)


class TransformerAlgoBase(QLearningAlgoBase[TTransformerImpl, TTransformerConfig]):
    """Base of the sequence models: ``predict(TransformerInput)``,
    :meth:`as_stateful_wrapper` and ``fit`` with evaluation in an
    environment at a target return. Subclasses define ``_build``,
    ``_update`` (on a :class:`TorchTrajectoryBatch`) and
    ``_predict_sequence(observations, actions, returns_to_go, timesteps)``
    returning the last step's ``(1, action_size)`` scaled action or logits."""

    #: ``fit`` samples windows of ``context_size`` steps; ``predict`` takes a context
    predicts_from_sequences = True
    need_returns_to_go = True

    @property
    def context_size(self) -> int:
        return int(self._config.context_size)

    @property
    def max_timestep(self) -> int:
        return int(self._config.max_timestep)

    # ------------------------------------------------------------ training
    def preprocess_batch(self, batch: Any) -> TorchTrajectoryBatch:  # type: ignore[override]
        """A trajectory batch as scaled tensors on the device; timesteps
        beyond ``max_timestep`` are refused."""
        if isinstance(batch, TorchTrajectoryBatch):
            return batch
        if not isinstance(batch, TrajectoryMiniBatch):
            raise TypeError(f"{type(self).__name__} trains on a TrajectoryMiniBatch (sample_trajectory_batch), "
                            f"got {type(batch).__name__}")
        self._check_timesteps(batch.timesteps, "timesteps")
        device = self._device

        def tensor(array: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(np.ascontiguousarray(array)).to(device)

        obs = batch.with_observation_keys(self._observation_keys).observations  # dict observations: the encoders' order
        obs = observation_columns(obs)
        obs = [tensor(o) for o in obs] if isinstance(obs, list) else tensor(obs)
        obs = self.scale_observations(obs)
        actions = tensor(batch.actions)
        if self._action_type == ActionSpace.DISCRETE:
            actions = actions.long().reshape(actions.shape[0], actions.shape[1], 1)
        else:
            actions = actions.float()
            if self._action_scaler is not None:
                actions = self._action_scaler.transform(actions)
        rewards, rtg = tensor(batch.rewards).float(), tensor(batch.returns_to_go).float()
        if self._reward_scaler is not None:
            rewards, rtg = self._reward_scaler.transform(rewards), self._reward_scaler.transform(rtg)
        return TorchTrajectoryBatch(obs, actions, rewards, rtg, tensor(batch.terminals).float(),
                                    tensor(batch.timesteps).long(), tensor(batch.masks).float(),
                                    int(np.count_nonzero(batch.masks)))

    def _check_timesteps(self, timesteps: np.ndarray, name: str) -> None:
        if timesteps.size and int(timesteps.max()) > self.max_timestep:
            raise ValueError(f"{name} reaches {int(timesteps.max())}, beyond max_timestep={self.max_timestep}: "
                             "raise max_timestep in the config to at least the longest episode")
        if timesteps.size and int(timesteps.min()) < 0:
            raise ValueError(f"{name} holds {int(timesteps.min())}; expected timesteps >= 0")

    # ------------------------------------------------------------ inference
    def sequence_tensors(self, inpt: TransformerInput) -> tuple:
        """A checked :class:`TransformerInput` as ``(1, L, ...)`` scaled
        tensors ``(observations, actions, returns_to_go, timesteps)``."""
        self.require_built()
        if not isinstance(inpt, TransformerInput):
            raise TypeError(f"{type(self).__name__}.predict takes a TransformerInput (a context of steps), got "
                            f"{type(inpt).__name__}; to act one observation at a time use as_stateful_wrapper")
        length = inpt.length
        if length == 0:
            raise ValueError("the TransformerInput is empty: expected at least one step")
        if length > self.context_size:
            raise ValueError(f"the TransformerInput has {length} steps, more than context_size={self.context_size}: "
                             "pass the last context_size steps")
        obs = inpt.observations
        n_obs = len(obs[0]) if isinstance(obs, (list, tuple)) and isinstance(self._observation_shape, list) else len(obs)
        for name, value in (("observations", n_obs), ("rewards", len(inpt.rewards)),
                            ("returns_to_go", len(inpt.returns_to_go)), ("timesteps", len(inpt.timesteps))):
            if value != length:
                raise ValueError(f"TransformerInput.{name} has {value} steps, actions has {length}: "
                                 "every field must hold the same steps")
        observations = self.scale_observations(self.observation_tensor(obs, "observations"))
        timesteps = np.asarray(inpt.timesteps)
        if timesteps.dtype.kind not in "iu":
            raise TypeError(f"timesteps must hold integers, got dtype {timesteps.dtype}")
        self._check_timesteps(timesteps, "timesteps")
        rtg = as_array(inpt.returns_to_go, "returns_to_go")
        check_real_values(np.asarray(rtg, dtype=np.float64).reshape(length, -1), "returns_to_go")
        rtg_t = torch.as_tensor(np.ascontiguousarray(rtg, dtype=np.float32).reshape(1, length, 1), device=self._device)
        if self._reward_scaler is not None:
            rtg_t = self._reward_scaler.transform(rtg_t)
        actions = self._context_actions(inpt.actions, length)
        steps = torch.as_tensor(timesteps.reshape(1, length).astype(np.int64), device=self._device)
        observations = [o.unsqueeze(0) for o in observations] if isinstance(observations, list) else observations.unsqueeze(0)
        return observations, actions, rtg_t, steps

    def _context_actions(self, actions: Any, length: int) -> torch.Tensor:
        a = np.asarray(actions)
        if self._action_type == ActionSpace.DISCRETE:
            if a.shape not in ((length,), (length, 1)):
                raise ValueError(f"actions must have shape ({length},) holding action indices, got {a.shape}")
            if a.size and (a.min() < 0 or a.max() >= self._action_size):
                raise ValueError(f"actions holds {a.min()}..{a.max()}; expected indices in [0, {self._action_size})")
            return torch.as_tensor(a.reshape(1, length, 1).astype(np.int64), device=self._device)
        if a.shape != (length, self._action_size):
            raise ValueError(f"actions must have shape ({length}, {self._action_size}), got {a.shape}")
        check_real_values(a.astype(np.float64), "actions")
        t = torch.as_tensor(a.astype(np.float32).reshape(1, length, -1), device=self._device)
        if self._action_scaler is not None:
            t = self._action_scaler.transform(t)
        return t

    def predict(self, inpt: TransformerInput) -> np.ndarray:  # type: ignore[override]
        """The next action for one context: ``(action_size,)`` in the
        environment's units (continuous) or ``(action_size,)`` logits
        (discrete; an action sampler picks the index)."""
        tensors = self.sequence_tensors(inpt)
        out = self._in_eval_mode(lambda t: self._predict_sequence(*t), tensors)
        return self._postprocess_output(out)[0]

    def _predict_tensors(self, observations: Any, actions: torch.Tensor, returns_to_go: torch.Tensor,
                         timesteps: torch.Tensor) -> np.ndarray:
        """:meth:`predict` on already checked and scaled ``(1, L, ...)``
        tensors (the stateful wrapper keeps its context so)."""
        out = self._in_eval_mode(lambda t: self._predict_sequence(*t), (observations, actions, returns_to_go, timesteps))
        return self._postprocess_output(out)[0]

    def _mode_modules(self) -> Optional[List[nn.Module]]:
        """Every module of the networks, flat, when none overrides
        ``train`` (then setting each one's flag is what ``nn.Module.train``
        does, without its recursive walk: ~1 ms per call on the default
        model, paid twice per stateful step); ``None`` otherwise. Rebuilt
        when the networks or their top-level modules change."""
        key = (id(self._nets),) + tuple(id(m) for m in self._nets.values())
        cached = getattr(self, "_mode_cache", None)
        if cached is None or cached[0] != key:
            modules: Optional[List[nn.Module]] = list(self._nets.modules())
            if any(type(m).train is not nn.Module.train for m in modules):  # type: ignore[union-attr]
                modules = None
            self._mode_cache = cached = (key, modules)
        return cached[1]

    def _set_mode(self, training: bool) -> bool:
        if not self._toggles_mode:
            return True
        modules = self._mode_modules()
        if modules is None:
            return False
        for m in modules:
            m.__dict__["training"] = training  # what nn.Module.train sets (an instance attribute)
        return True

    def _eval_mode(self) -> None:
        if not self._set_mode(False):
            super()._eval_mode()

    def _train_mode(self) -> None:
        if not self._set_mode(True):
            super()._train_mode()

    def _postprocess_output(self, out: torch.Tensor) -> np.ndarray:
        if self._action_type != ActionSpace.DISCRETE:
            out = self._unscale_action(out)
        return out.cpu().numpy()

    def _predict_sequence(self, observations: Any, actions: torch.Tensor, returns_to_go: torch.Tensor,
                          timesteps: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def sample_action(self, x: Any) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} acts from a context: use as_stateful_wrapper(target_return, "
                                  "SoftmaxTransformerActionSampler()) to sample actions")

    def predict_value(self, x: Any, action: Any) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} has no value function for single observations")

    def as_stateful_wrapper(self, target_return: float,
                            action_sampler: Optional[TransformerActionSampler] = None) -> "StatefulTransformerWrapper":
        """A policy that takes one observation (and the last reward) at a
        time, keeping the context and the return-to-go (starting at
        ``target_return``). ``action_sampler`` defaults, as in d3rlpy, to
        the identity for continuous actions and to sampling from the
        softmax of the logits for discrete ones."""
        if action_sampler is None:
            action_sampler = (SoftmaxTransformerActionSampler() if self._action_type == ActionSpace.DISCRETE
                              else IdentityTransformerActionSampler())
        return StatefulTransformerWrapper(self, target_return, action_sampler)

    def policy_module(self) -> nn.Module:
        """One step of the policy over a context, with the scalers: raw
        ``(observations..., actions, returns_to_go, timesteps)`` float32
        windows ``(B, L, ...)`` -> the next action (see
        :class:`SequencePolicyGraph`)."""
        self.require_built()
        return SequencePolicyGraph(self)

    def save_policy(self, fname: str) -> None:
        """Export one step of the stateless policy over a context window:
        ``.pt`` TorchScript or ``.onnx``. Inputs (float32, batch and length
        axes dynamic, ``L <= context_size``): the observations ``(B, L,
        *obs_shape)`` (``input_0``, ``input_1``, ... for tuple
        observations), ``actions`` ``(B, L, action_size)`` (``(B, L)``
        indices for discrete control), ``returns_to_go`` ``(B, L, 1)`` and
        ``timesteps`` ``(B, L)``; output ``output_0``: the next action in
        the environment's units (``(B,)`` greedy int64 indices for discrete
        control). The file is loaded back and compared with :meth:`predict`
        at context lengths 1, 2 and ``context_size`` before it replaces
        ``fname`` (written to a temporary file first)."""
        export_sequence_policy(self, fname)

    # ------------------------------------------------------------ fitting
    def fit_online(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError(f"{type(self).__name__} trains offline only (as in d3rlpy): collect data with "
                                  "another policy and call fit")

    def collect(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError(f"{type(self).__name__}.collect: act through as_stateful_wrapper(target_return) "
                                  "in your own loop")

    def fit(self, dataset: Any, n_steps: int, n_steps_per_epoch: int = 10000,  # type: ignore[override]
            experiment_name: Optional[str] = None, with_timestamp: bool = True, logger_adapter: Any = None,
            show_progress: bool = True, eval_env: Any = None, eval_target_return: Optional[float] = None,
            eval_action_sampler: Optional[TransformerActionSampler] = None, save_interval: int = 1,
            callback: Optional[Callable[..., None]] = None, enable_ddp: bool = False,
            evaluators: Optional[Dict[str, Any]] = None, epoch_callback: Optional[Callable[..., None]] = None,
            logging_steps: int = 500, logging_strategy: Any = "epoch", eval_n_trials: int = 1,
            resume_from: Any = None) -> List[Any]:
        """Train on windows of ``context_size`` steps sampled from
        ``dataset`` for ``n_steps`` steps (d3rlpy's arguments first). With
        ``eval_env`` the policy is run in it at ``eval_target_return`` after
        each epoch (``eval_n_trials`` episodes) and the mean return logged as
        ``environment``. Returns ``[(epoch, metrics), ...]``."""
        if enable_ddp and not self.enable_ddp:  # d3rlpy's flag belongs to create(); honoured here too
            self._enable_ddp = check_enable_ddp(enable_ddp, self._device)
        all_evaluators = dict(evaluators or {})
        if eval_env is not None:
            if eval_target_return is None:
                raise ValueError("eval_env is given but eval_target_return is None: give the return to condition "
                                 "the policy on during evaluation")
            check = Constraint("a finite number", lambda v: isinstance(v, (int, float, np.integer, np.floating))
                               and not isinstance(v, bool) and math.isfinite(float(v)))
            check.check(eval_target_return, "eval_target_return")
            POSITIVE_INT.check(eval_n_trials, "eval_n_trials")
            target, sampler, env, trials = float(eval_target_return), eval_action_sampler, eval_env, int(eval_n_trials)

            def environment(algo: Any, _dataset: Any) -> float:
                return evaluate_transformer_with_environment(algo.as_stateful_wrapper(target, sampler), env, trials)

            all_evaluators["environment"] = environment
        if dataset is not None and hasattr(dataset, "episodes") and len(dataset.episodes) == 0:
            raise ValueError("dataset has no episodes: a sequence model needs at least one")
        return super().fit(dataset, n_steps, n_steps_per_epoch, experiment_name, with_timestamp,
                           logging_steps=logging_steps, logging_strategy=logging_strategy,
                           logger_adapter=logger_adapter, show_progress=show_progress, save_interval=save_interval,
                           evaluators=all_evaluators, callback=callback, epoch_callback=epoch_callback,
                           resume_from=resume_from)


class SequencePolicyGraph(nn.Module):
    """Raw context windows -> the next action (the exported graph of a
    sequence model; see :meth:`TransformerAlgoBase.save_policy`)."""

    def __init__(self, algo: TransformerAlgoBase) -> None:
        super().__init__()
        self.transformer = algo.modules["transformer"]
        self.observation_scaler = algo.observation_scaler
        self.discrete = algo.get_action_type() == ActionSpace.DISCRETE
        self.action_scaler = None if self.discrete else algo.action_scaler
        self.reward_scaler = algo.reward_scaler
        shape = algo.observation_shape
        self.n_observations = len(shape) if isinstance(shape, list) else 1

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        n = self.n_observations
        observations: Any = list(inputs[:n]) if n > 1 else inputs[0]
        actions, returns_to_go, timesteps = inputs[n:]
        if self.observation_scaler is not None:
            observations = self.observation_scaler.transform(observations)
        if self.discrete:
            actions = actions.long()
        elif self.action_scaler is not None:
            actions = self.action_scaler.transform(actions)
        if self.reward_scaler is not None:
            returns_to_go = self.reward_scaler.transform(returns_to_go)
        out = self.transformer(observations, actions, returns_to_go, timesteps.long(), last_only=True)[:, -1]
        if self.discrete:
            return out.argmax(dim=-1)
        if self.action_scaler is not None:
            out = self.action_scaler.reverse_transform(out)
        return out


def _sequence_input_names(algo: TransformerAlgoBase) -> List[str]:
    shape = algo.observation_shape
    return [f"input_{k}" for k in range(len(shape) if isinstance(shape, list) else 1)] + [
        "actions", "returns_to_go", "timesteps"]


def _example_context(algo: TransformerAlgoBase, batch: int, length: int, seed: int) -> List[np.ndarray]:
    """Random raw windows (float32) for tracing and checking an export."""
    rng = np.random.default_rng(seed)
    shapes = algo.observation_shape if isinstance(algo.observation_shape, list) else [algo.observation_shape]
    out = [rng.normal(size=(batch, length) + tuple(s)).astype(np.float32) for s in shapes]
    if algo.get_action_type() == ActionSpace.DISCRETE:
        out.append(rng.integers(0, algo.action_size, size=(batch, length)).astype(np.float32))
    else:
        out.append(rng.uniform(-1.0, 1.0, size=(batch, length, algo.action_size)).astype(np.float32))
    out.append(rng.normal(size=(batch, length, 1)).astype(np.float32) * 10.0)
    start = rng.integers(0, max(1, algo.max_timestep - length + 1), size=(batch, 1))
    out.append((start + np.arange(length)).astype(np.float32))
    return out


def _exported_expected(algo: TransformerAlgoBase, inputs: List[np.ndarray], row: int) -> Any:
    n = len(inputs) - 3
    observations = [x[row] for x in inputs[:n]] if n > 1 else inputs[0][row]
    actions = inputs[n][row].astype(np.int64) if algo.get_action_type() == ActionSpace.DISCRETE else inputs[n][row]
    length = actions.shape[0]
    output = algo.predict(TransformerInput(observations, actions, np.zeros((length, 1), np.float32), inputs[n + 1][row],
                                           inputs[n + 2][row].astype(np.int64)))
    return int(np.argmax(output)) if algo.get_action_type() == ActionSpace.DISCRETE else output


def export_sequence_policy(algo: TransformerAlgoBase, fname: str) -> None:
    """See :meth:`TransformerAlgoBase.save_policy`."""
    import json
    import os
    import warnings

    from .._atomic import atomic_write, check_target
    from ..export import ExportError, load_onnx_policy, load_torchscript_policy

    path = os.fspath(fname)
    extension = os.path.splitext(path)[1].lower()
    if extension not in (".pt", ".onnx"):
        raise ValueError(f"save_policy chooses the format by extension: use .pt (TorchScript) or .onnx, got {path!r}")
    if not algo.is_built:
        raise ValueError(f"{type(algo).__name__} is not built yet: fit it (or build_with_dataset / build_with_env) "
                         "before save_policy")
    try:
        check_target(path)  # before tracing: a missing directory, a file in the way, a name too long
    except FileNotFoundError as e:
        raise ValueError(str(e)) from None
    graph = copy.deepcopy(SequencePolicyGraph(algo)).to("cpu").eval()
    names = _sequence_input_names(algo)
    shape = algo.observation_shape
    metadata = {
        "algorithm": algo.config.get_type(),
        "observation_shapes": json.dumps([list(s) for s in shape] if isinstance(shape, list) else [list(shape)]),
        "action_space": algo.get_action_type().name.lower(), "action_size": str(algo.action_size),
        "inputs": json.dumps(names), "context_size": str(algo.context_size), "max_timestep": str(algo.max_timestep),
    }
    example = tuple(torch.from_numpy(a) for a in _example_context(algo, 2, min(3, algo.context_size), 0))

    def write(tmp: str) -> None:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if extension == ".pt":
                traced = torch.jit.trace(graph, example, check_trace=False)
                # through a Python file: torch.jit.save to a path aborts the process when a write fails
                with open(tmp, "wb") as f:
                    torch.jit.save(traced, f, _extra_files={"offrl_metadata.json": json.dumps(metadata)})
            else:
                import onnx

                axes = {name: {0: "batch", 1: "length"} for name in names}
                axes["output_0"] = {0: "batch"}
                torch.onnx.export(graph, example, tmp, input_names=names, output_names=["output_0"],
                                  dynamic_axes=axes, dynamo=False, opset_version=17)
                model = onnx.load(tmp)
                for key, value in metadata.items():
                    entry = model.metadata_props.add()
                    entry.key, entry.value = key, value
                onnx.save(model, tmp)
        runner = load_torchscript_policy(tmp) if extension == ".pt" else load_onnx_policy(tmp)
        for length in sorted({1, min(2, algo.context_size), algo.context_size}):
            inputs = _example_context(algo, 2, length, seed=length)
            got = np.asarray(runner(*inputs))
            for row in range(2):
                expected = _exported_expected(algo, inputs, row)
                if algo.get_action_type() == ActionSpace.DISCRETE:
                    if int(got[row]) != expected:
                        raise ExportError(f"{path}: the exported policy chooses other actions than predict "
                                          f"(context length {length})")
                elif not np.allclose(got[row], expected, atol=1e-4, rtol=1e-4):
                    raise ExportError(f"{path}: the exported policy differs from predict by "
                                      f"{np.abs(got[row] - expected).max():.3g} (context length {length})")

    atomic_write(path, write)


def observation_device(observation: Any) -> torch.device:
    """The device of an observation tensor (or of a tuple observation's first)."""
    return observation[0].device if isinstance(observation, list) else observation.device


def embeds_steps_once(predict: Callable) -> Callable:
    """Mark a ``_predict_sequence`` that reads only the built-in model's
    last position, so that :class:`StatefulTransformerWrapper` may embed
    each step's tokens once and keep them (a subclass that overrides the
    method loses the mark)."""
    predict.embeds_steps_once = True  # type: ignore[attr-defined]
    return predict


class StatefulTransformerWrapper:
    """A sequence policy acting one step at a time: it keeps the last
    ``context_size`` observations, actions, rewards, returns-to-go and
    timesteps of the current episode. ``predict(observation, reward)``
    takes the new observation and the reward received for the previous
    action (ignored at the first step); the return-to-go starts at
    ``target_return`` and falls by each reward. ``reset()`` starts a new
    episode."""

    def __init__(self, algo: TransformerAlgoBase, target_return: float, action_sampler: TransformerActionSampler) -> None:
        if not isinstance(algo, TransformerAlgoBase):
            raise TypeError(f"algo must be a sequence model (TransformerAlgoBase), got {type(algo).__name__}")
        algo.require_built()
        if isinstance(target_return, bool) or not isinstance(target_return, (int, float, np.integer, np.floating)) \
                or not math.isfinite(float(target_return)):
            raise ValueError(f"target_return must be a finite number, got {target_return!r}")
        if not callable(action_sampler):
            raise TypeError(f"action_sampler must be callable, got {type(action_sampler).__name__}")
        self._algo = algo
        self._target_return = float(target_return)
        self._action_sampler = action_sampler
        self._discrete = algo.get_action_type() == ActionSpace.DISCRETE
        self.reset()

    @property
    def algo(self) -> TransformerAlgoBase:
        return self._algo

    @property
    def target_return(self) -> float:
        return self._target_return

    @property
    def action_sampler(self) -> TransformerActionSampler:
        return self._action_sampler

    def reset(self) -> None:
        """Forget the episode: the next ``predict`` is its first step."""
        self._observations: List[Any] = []
        self._actions: List[Any] = []
        self._rewards: List[float] = []
        self._returns_to_go: List[float] = []
        self._timesteps: List[int] = []
        self._timestep = 0
        self._return_to_go = self._target_return
        # the context as the networks see it (checked, scaled), ``(1, context_size, ...)``
        # buffers filled oldest first; the first ``_filled`` steps are the context
        self._ring: Optional[Dict[str, Any]] = None
        self._filled = 0

    def context(self) -> TransformerInput:
        """The context the next action was (or will be) predicted from."""
        size = self._algo.context_size
        obs = self._observations[-size:]
        if obs and isinstance(obs[0], (list, tuple)):
            observations: Any = [np.stack([o[k] for o in obs]) for k in range(len(obs[0]))]
        else:
            observations = np.stack(obs)
        return TransformerInput(
            observations=observations,
            actions=np.stack(self._actions[-size:]),
            rewards=np.asarray(self._rewards[-size:], dtype=np.float32).reshape(-1, 1),
            returns_to_go=np.asarray(self._returns_to_go[-size:], dtype=np.float32).reshape(-1, 1),
            timesteps=np.asarray(self._timesteps[-size:], dtype=np.int64),
        )

    def _allocate(self, observation: Any) -> Dict[str, Any]:
        """Zeroed context buffers of ``2 * context_size`` steps shaped after
        the first (scaled) observation: the context is a sliding view
        ``[start, start + filled)``, moved to the front once every
        ``context_size`` steps instead of shifting every step. On the CPU
        each buffer also has a numpy alias (same memory): a numpy element
        write costs well under a microsecond, a tensor one several."""
        size, device = 2 * self._algo.context_size, observation_device(observation)
        observations = observation if isinstance(observation, list) else [observation]
        buffers = [torch.zeros((1, size) + tuple(o.shape[1:]), dtype=o.dtype, device=device) for o in observations]
        if self._discrete:
            buffers.append(torch.zeros((1, size, 1), dtype=torch.int64, device=device))
        else:
            buffers.append(torch.zeros((1, size, self._algo.action_size), dtype=torch.float32, device=device))
        buffers.append(torch.zeros((1, size, 1), device=device))  # returns-to-go
        buffers.append(torch.zeros((1, size), dtype=torch.int64, device=device))  # timesteps
        aliases = [b.numpy()[0] for b in buffers] if device.type == "cpu" else None
        ring = {"tensors": buffers, "aliases": aliases, "tuple": isinstance(observation, list), "start": 0,
                "tokens": None}
        transformer = self._algo.modules["transformer"]
        if self._caches_tokens(transformer):
            # per token (R, s, a of each step slot): the first block's input and its query-key-value products
            hidden = transformer.rtg_embed.out_features
            ring["tokens"] = (torch.zeros((1, 3 * size, hidden), device=device),
                              torch.zeros((1, 3 * size, 3 * hidden), device=device))
        return ring

    def _caches_tokens(self, transformer: nn.Module) -> bool:
        """Whether each step's tokens are embedded once and kept (the
        built-in models with the SIMPLE encoding, predicting through the
        built-in ``_predict_sequence``), instead of re-embedding the whole
        context every step."""
        predict = type(self._algo)._predict_sequence
        return (getattr(getattr(predict, "__func__", predict), "embeds_steps_once", False)
                and getattr(transformer, "caches_tokens", False))

    def _write(self, index: int, pos: int, value: Any) -> None:
        ring = self._ring
        if ring["aliases"] is not None:  # type: ignore[index]
            ring["aliases"][index][pos] = value.numpy() if isinstance(value, torch.Tensor) else value  # type: ignore[index]
        else:
            ring["tensors"][index][0, pos] = value  # type: ignore[index]

    def _push(self, observation: Any, return_to_go: torch.Tensor, timestep: int) -> int:
        """Append one step (scaled tensors, batch of one) to the context,
        dropping the oldest when full; returns its buffer position."""
        if self._ring is None:
            self._ring = self._allocate(observation)
        ring, size = self._ring, self._algo.context_size
        if self._filled < size:
            self._filled += 1
        elif ring["start"] + size == 2 * size:  # the end reached: the last size - 1 steps to the front
            for buf in ring["tensors"]:
                buf[:, :size - 1] = buf[:, size + 1:].clone()
            for buf in ring["tokens"] or ():
                buf[:, :3 * (size - 1)] = buf[:, 3 * (size + 1):].clone()
            ring["start"] = 0
        else:
            ring["start"] += 1
        pos = ring["start"] + self._filled - 1
        observations = observation if isinstance(observation, list) else [observation]
        for k, value in enumerate(observations):
            self._write(k, pos, value[0])
        n_obs = len(observations)
        self._write(n_obs, pos, 0)  # the step's own action is never read (it is what is predicted)
        self._write(n_obs + 1, pos, return_to_go.reshape(1))
        self._write(n_obs + 2, pos, timestep)
        return pos

    def _context_tensors(self) -> tuple:
        """``(observations, actions, returns_to_go, timesteps)`` views of the context."""
        ring = self._ring
        lo = ring["start"]  # type: ignore[index]
        hi = lo + self._filled
        views = [t[:, lo:hi] for t in ring["tensors"]]  # type: ignore[index]
        observations: Any = views[:-3] if ring["tuple"] else views[0]  # type: ignore[index]
        return observations, views[-3], views[-2], views[-1]

    def _predict_from_tokens(self, inputs: tuple) -> torch.Tensor:
        """Embed the new tokens of the step at buffer position ``pos`` (the
        previous step's action, ``R_t``, ``s_t``), keep them, and run the
        transformer on the context's kept tokens: ``(1, out)``."""
        observation, rtg, pos = inputs
        ring, transformer = self._ring, self._algo.modules["transformer"]
        tensors, (tokens, qkv) = ring["tensors"], ring["tokens"]  # type: ignore[index]
        steps, actions = tensors[-1], tensors[-3]
        has_previous = self._filled > 1
        new_tokens, new_qkv = transformer.step_tokens(
            observation, rtg.reshape(1, 1), steps[:, pos],
            actions[:, pos - 1] if has_previous else None, steps[:, pos - 1] if has_previous else None)
        first = 3 * pos - 1 if has_previous else 3 * pos
        tokens[:, first:3 * pos + 2] = new_tokens
        qkv[:, first:3 * pos + 2] = new_qkv
        lo = 3 * ring["start"]  # type: ignore[index]
        hi = 3 * (pos + 1) - 1  # the last step's action token is not part of the context
        return transformer.forward_tokens(tokens[:, lo:hi], qkv[:, lo:hi])

    def predict(self, x: Any, reward: float) -> Union[np.ndarray, int]:
        """The action for observation ``x`` (unbatched); ``reward`` is the
        reward of the previous step."""
        reward = float(reward)
        if not math.isfinite(reward):
            raise ValueError(f"reward is {reward}; expected a finite number")
        if self._timestep > self._algo.max_timestep:
            raise ValueError(f"the episode reached timestep {self._timestep}, beyond max_timestep="
                             f"{self._algo.max_timestep}: call reset() or raise max_timestep")
        algo = self._algo
        if isinstance(x, dict):  # dict observations: their values in the stored (sorted) key order
            x = observation_from_dict(x, algo.observation_keys, "x")
            x = x[0] if len(x) == 1 else x
        raw = [np.asarray(o) for o in x] if isinstance(x, (list, tuple)) else np.asarray(x)
        # checked and scaled before anything is kept: a bad observation leaves the episode as it was
        batched = [o[None] for o in raw] if isinstance(raw, list) else raw[None]
        observation = algo.scale_observations(algo.observation_tensor(batched, "x"))
        return_to_go = self._return_to_go - reward if self._timesteps else self._return_to_go
        rtg = torch.tensor([[[return_to_go]]], dtype=torch.float32, device=observation_device(observation))
        if algo.reward_scaler is not None:  # as sequence_tensors scales a context's returns-to-go
            rtg = algo.reward_scaler.transform(rtg)
        if self._timesteps:
            self._return_to_go = return_to_go
            self._rewards[-1] = reward
        self._observations.append(raw)
        placeholder = np.zeros((), dtype=np.int64) if self._discrete else np.zeros(algo.action_size, np.float32)
        self._actions.append(placeholder)
        self._rewards.append(0.0)
        self._returns_to_go.append(self._return_to_go)
        self._timesteps.append(self._timestep)
        size = algo.context_size
        if len(self._timesteps) > size:  # keep only what the next context needs
            for history in (self._observations, self._actions, self._rewards, self._returns_to_go, self._timesteps):
                del history[0]
        pos = self._push(observation, rtg, self._timestep)
        if self._ring["tokens"] is not None:  # type: ignore[index]
            output = algo._postprocess_output(algo._in_eval_mode(self._predict_from_tokens, (observation, rtg, pos)))[0]
        else:
            output = algo._predict_tensors(*self._context_tensors())
        action = self._action_sampler(output)
        kept = np.asarray(action, dtype=np.int64 if self._discrete else np.float32)
        # checked (a custom sampler's NaN or out-of-range index) and scaled as the next contexts read it
        n_obs = len(self._ring["tensors"]) - 3  # type: ignore[index]
        self._write(n_obs, pos, algo._context_actions(kept.reshape(1, -1), 1)[0, 0])
        self._actions[-1] = kept
        self._timestep += 1
        return action
