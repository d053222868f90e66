"""What every algorithm shares: config base, device handling, scalers,
building, prediction, saving and loading, copying between algorithms.

An algorithm file defines a config dataclass (registered, with ``create``)
and an algorithm class that subclasses :class:`QLearningAlgoBase` once and
provides:

* ``_action_type``: which action spaces it learns;
* ``_build(observation_shape, action_size)``: networks (``self._add_module``)
  and optimizers (``self._add_optimizer``);
* ``_update(batch, grad_step) -> dict[str, Tensor]``: one gradient step on a
  preprocessed torch batch; returns 0-dim tensors (no host sync);
* ``_predict(x)``, optionally ``_sample(x)`` and ``_predict_value(x, a)``.

Observations are scaled, and actions and rewards transformed, once per batch
here before ``_update`` sees them.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Callable, Dict, Generator, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import nn

from ..constants import ActionSpace
from ..dataset.batch import TorchTransitionMiniBatch, TransitionMiniBatch
from ..preprocessing import ActionScaler, ObservationScaler, RewardScaler
from ..serialization import Serializable

__all__ = [
    "LearnableConfig",
    "QLearningAlgoBase",
    "parse_device",
    "NonFiniteLossError",
    "DeviceArg",
    "check_positive_int",
    "check_positive_number",
    "check_instance",
]

DeviceArg = Union[bool, int, str, torch.device, None]
Shape = Union[Tuple[int, ...], Sequence[Tuple[int, ...]]]


class NonFiniteLossError(FloatingPointError):
    """A training loss became NaN or infinite."""


def parse_device(device: DeviceArg) -> torch.device:
    """``False``/``None``/``"cpu"``/``"cpu:0"`` -> CPU; ``True`` -> ``cuda:0``;
    an int ``n`` -> ``cuda:n``; ``"cuda"``/``"cuda:N"`` as given."""
    if device is None or device is False:
        return torch.device("cpu")
    if device is True:
        target = torch.device("cuda:0")
    elif isinstance(device, (int, np.integer)):
        if device < 0:
            raise ValueError(f"device index must be >= 0, got {device}")
        target = torch.device(f"cuda:{int(device)}")
    elif isinstance(device, torch.device):
        target = device
    elif isinstance(device, str):
        try:
            target = torch.device(device)
        except RuntimeError:
            raise ValueError(
                f"unknown device {device!r}: expected 'cpu', 'cpu:0', 'cuda', 'cuda:N', True, False or an int"
            ) from None
        if target.type not in ("cpu", "cuda", "mps"):
            raise ValueError(f"unsupported device type {target.type!r} in {device!r}")
    else:
        raise TypeError(f"device must be a bool, an int or a string, got {type(device).__name__}")
    if target.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r} asks for CUDA, which is not available on this machine")
        index = 0 if target.index is None else target.index
        if index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: there are only {torch.cuda.device_count()} CUDA devices")
        return torch.device(f"cuda:{index}")
    return target


def check_positive_int(value: Any, name: str) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is an int > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


_check_positive_int = check_positive_int


def check_positive_number(value: Any, name: str, allow_zero: bool = False) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is a finite
    number > 0 (>= 0 with ``allow_zero``)."""
    ok = (
        not isinstance(value, bool)
        and isinstance(value, (int, float, np.integer, np.floating))
        and np.isfinite(value)
        and (value >= 0 if allow_zero else value > 0)
    )
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}")


def check_instance(config: Any, names: Sequence[str], cls: type) -> None:
    """Raise ``TypeError`` naming the field unless each ``config.<name>`` is a ``cls``."""
    for name in names:
        value = getattr(config, name)
        if not isinstance(value, cls):
            raise TypeError(f"{name} must be a {cls.__name__}, got {type(value).__name__}")


@dataclasses.dataclass
class LearnableConfig(Serializable):
    """Hyperparameters shared by every algorithm.

    Args:
        batch_size: mini-batch size.
        gamma: discount factor.
        observation_scaler, action_scaler, reward_scaler: preprocessing; an
            unfitted scaler is fitted on the training data (on a copy: the
            config is never changed by ``fit``).
    """

    _kind = "algorithm"

    batch_size: int = 256
    gamma: float = 0.99
    observation_scaler: Optional[ObservationScaler] = None
    action_scaler: Optional[ActionScaler] = None
    reward_scaler: Optional[RewardScaler] = None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check hyperparameter values; subclasses extend it."""
        _check_positive_int(self.batch_size, "batch_size")
        if not 0.0 <= float(self.gamma) <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {self.gamma}")
        for name, cls in (
            ("observation_scaler", ObservationScaler),
            ("action_scaler", ActionScaler),
            ("reward_scaler", RewardScaler),
        ):
            value = getattr(self, name)
            if value is not None and not isinstance(value, cls):
                raise TypeError(f"{name} must be a {cls.__name__} or None, got {type(value).__name__}")

    def create(self, device: DeviceArg = False) -> "QLearningAlgoBase":
        """The algorithm configured by this config, on ``device``."""
        return self.algorithm_class()(self, device)

    @classmethod
    def algorithm_class(cls) -> type:
        raise NotImplementedError

    # scikit-learn style access to hyperparameters
    def get_params(self, deep: bool = True) -> Dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def set_params(self, **params: Any) -> "LearnableConfig":
        names = {f.name for f in dataclasses.fields(self)}
        for key, value in params.items():
            if key not in names:
                raise ValueError(f"{type(self).__name__} has no parameter {key!r}")
            setattr(self, key, value)
        self.validate()
        return self


def _module_device(module: nn.Module) -> torch.device:
    for p in module.parameters():
        return p.device
    return torch.device("cpu")


class QLearningAlgoBase:
    """Base of all algorithms: the estimator API (see module docstring)."""

    _action_type: ActionSpace = ActionSpace.BOTH
    #: False for policies that only act (random policies): fit raises
    _trainable: bool = True
    #: module / optimizer names used by copy_*_from
    _policy_module: Optional[str] = None
    _q_modules: Tuple[str, ...] = ()
    _policy_optim: Optional[str] = None
    _q_optim: Optional[str] = None

    def __init__(self, config: LearnableConfig, device: DeviceArg = False) -> None:
        if not isinstance(config, LearnableConfig):
            raise TypeError(f"config must be a LearnableConfig, got {type(config).__name__}")
        self._config = config
        self._device_arg = device
        self._device = parse_device(device)
        self._reset_state()

    def _reset_state(self) -> None:
        self._nets = nn.ModuleDict()
        self._optims: Dict[str, Any] = {}
        self._observation_shape: Optional[Shape] = None
        self._action_size: Optional[int] = None
        self._grad_step = 0
        self._built = False
        self._toggles_mode = False
        self._observation_scaler = copy.deepcopy(self._config.observation_scaler)
        self._action_scaler = copy.deepcopy(self._config.action_scaler)
        self._reward_scaler = copy.deepcopy(self._config.reward_scaler)

    # ------------------------------------------------------- scikit-learn
    def get_params(self, deep: bool = True) -> Dict[str, Any]:
        params: Dict[str, Any] = {"config": self._config, "device": self._device_arg}
        if deep:
            for key, value in self._config.get_params().items():
                params[f"config__{key}"] = value
        return params

    def set_params(self, **params: Any) -> "QLearningAlgoBase":
        """Set ``config``/``device`` or hyperparameters (``config__batch_size=64``
        or just ``batch_size=64``). The config object given at construction is
        not modified: a changed copy replaces it. Networks built before are
        discarded."""
        config = self._config
        changes: Dict[str, Any] = {}
        for key, value in params.items():
            if key == "config":
                config = value
            elif key == "device":
                self._device_arg = value
                self._device = parse_device(value)
            else:
                changes[key[len("config__"):] if key.startswith("config__") else key] = value
        if changes:
            names = {f.name for f in dataclasses.fields(config)}
            unknown = sorted(set(changes) - names)
            if unknown:
                raise ValueError(f"{type(config).__name__} has no parameters {unknown}")
            config = dataclasses.replace(config, **changes)
        self._config = config
        self._reset_state()
        return self

    # ---------------------------------------------------------- properties
    @property
    def config(self) -> LearnableConfig:
        return self._config

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def observation_shape(self) -> Optional[Shape]:
        return self._observation_shape

    @property
    def action_size(self) -> Optional[int]:
        return self._action_size

    @property
    def gamma(self) -> float:
        return float(self._config.gamma)

    @property
    def batch_size(self) -> int:
        return int(self._config.batch_size)

    @property
    def observation_scaler(self) -> Optional[ObservationScaler]:
        """The scaler in use (fitted on the training data when it was not given statistics)."""
        return self._observation_scaler

    @property
    def action_scaler(self) -> Optional[ActionScaler]:
        return self._action_scaler

    @property
    def reward_scaler(self) -> Optional[RewardScaler]:
        return self._reward_scaler

    @property
    def grad_step(self) -> int:
        """Total number of gradient steps taken (kept across ``fit`` calls)."""
        return self._grad_step

    def set_grad_step(self, grad_step: int) -> None:
        if isinstance(grad_step, bool) or not isinstance(grad_step, (int, np.integer)) or grad_step < 0:
            raise ValueError(f"grad_step must be a non-negative int, got {grad_step!r}")
        self._grad_step = int(grad_step)

    @property
    def impl(self) -> Optional["QLearningAlgoBase"]:
        """The built networks' owner (``self`` once built, ``None`` before)."""
        return self if self._built else None

    @property
    def is_built(self) -> bool:
        return self._built

    def get_action_type(self) -> ActionSpace:
        return self._action_type

    @property
    def modules(self) -> nn.ModuleDict:
        """The networks, by name."""
        return self._nets

    # ------------------------------------------------------------ building
    def create_impl(self, observation_shape: Shape, action_size: int) -> None:
        """Build networks and optimizers for the given shapes."""
        shape = _normalise_shape(observation_shape)
        _check_positive_int(action_size, "action_size")
        self._nets = nn.ModuleDict()
        self._optims = {}
        self._optim_factories: Dict[str, Callable[[], Any]] = {}
        self._observation_shape = shape
        self._action_size = int(action_size)
        for scaler in (self._observation_scaler, self._action_scaler, self._reward_scaler):
            if scaler is not None:
                scaler.to(self._device)
        if self._observation_scaler is not None and self._observation_scaler.built:
            self._observation_scaler.check_observation_shape(shape)
        self._build(shape, int(action_size))
        self._nets.to(self._device)
        # optimizers are made after the move so their state lives on the device
        self._optims = {name: make() for name, make in self._optim_factories.items()}
        self._toggles_mode = any(
            isinstance(m, (nn.modules.batchnorm._BatchNorm, nn.Dropout, nn.Dropout2d)) for m in self._nets.modules()
        )
        self._built = True

    def _build(self, observation_shape: Shape, action_size: int) -> None:
        raise NotImplementedError

    def _add_module(self, name: str, module: nn.Module) -> nn.Module:
        self._nets[name] = module
        return module

    def _add_optimizer(self, name: str, factory: Any, modules: Sequence[nn.Module], lr: float, extra_params: Sequence[Tuple[str, nn.Parameter]] = ()) -> None:
        """Register an optimizer over ``modules`` (built once networks are on the device)."""

        def make():
            named = []
            for m in modules:
                named.extend(m.named_parameters())
            named.extend(extra_params)
            return factory.create(named, lr)

        self._optim_factories[name] = make

    def _check_action_space(self, action_space: ActionSpace) -> None:
        allowed = self._action_type
        if allowed == ActionSpace.BOTH or action_space == allowed:
            return
        raise ValueError(
            f"{type(self).__name__} learns {allowed.name.lower()} actions, but the data has "
            f"{action_space.name.lower()} actions"
        )

    def build_with_dataset(self, dataset: Any) -> None:
        """Fit unfitted scalers (on copies) and build networks for the dataset's shapes."""
        info = dataset.dataset_info
        self._check_action_space(info.action_space)
        self._fit_scalers(dataset)
        shape = info.observation_signature.shape
        self.create_impl(shape if info.observation_signature.is_tuple else shape[0], info.action_size)

    def build_with_env(self, env: Any) -> None:
        """Build networks for a gymnasium environment's spaces (scalers that
        can be fitted from the spaces are)."""
        from ..dataset.signature import signatures_from_env
        from ..dataset.writer import BasicWriterPreprocess

        obs_sig, _, _, space, size = signatures_from_env(env, BasicWriterPreprocess())
        self._check_action_space(space)
        for scaler in (self._observation_scaler, self._action_scaler, self._reward_scaler):
            if scaler is not None and not scaler.built:
                scaler.fit_with_env(env)
        self.create_impl(obs_sig.shape if obs_sig.is_tuple else obs_sig.shape[0], size)

    def _fit_scalers(self, dataset: Any) -> None:
        for scaler in (self._observation_scaler, self._action_scaler, self._reward_scaler):
            if scaler is not None and not scaler.built:
                scaler.fit(dataset)

    def _require_built(self) -> None:
        if not self._built:
            raise RuntimeError(
                f"{type(self).__name__} has no networks yet: call fit, build_with_dataset, "
                "build_with_env or create_impl first"
            )

    # ------------------------------------------------------------ batches
    def _to_tensor_batch(self, batch: Any) -> TorchTransitionMiniBatch:
        if isinstance(batch, TransitionMiniBatch):
            batch = batch.to_torch(self._device)
        elif not isinstance(batch, TorchTransitionMiniBatch):
            raise TypeError(f"batch must be a TransitionMiniBatch, got {type(batch).__name__}")
        return self._preprocess(batch)

    def _preprocess(self, batch: TorchTransitionMiniBatch) -> TorchTransitionMiniBatch:
        obs, next_obs = batch.observations, batch.next_observations
        actions, next_actions = batch.actions, batch.next_actions
        rewards = batch.rewards
        if self._observation_scaler is not None:
            obs = self._observation_scaler.transform(obs)
            next_obs = self._observation_scaler.transform(next_obs)
        else:
            obs, next_obs = _float_observation(obs), _float_observation(next_obs)
        if self._action_scaler is not None and actions.is_floating_point():
            actions = self._action_scaler.transform(actions)
            next_actions = self._action_scaler.transform(next_actions)
        if self._reward_scaler is not None:
            rewards = self._reward_scaler.transform(rewards)
        return TorchTransitionMiniBatch(
            obs, actions, rewards, next_obs, next_actions, batch.terminals, batch.intervals, batch.weights, batch.indices
        )

    def update(self, batch: Union[TransitionMiniBatch, TorchTransitionMiniBatch]) -> Dict[str, float]:
        """One gradient step on a mini-batch; returns the losses as floats."""
        self._require_built()
        losses = self._update(self._to_tensor_batch(batch), self._grad_step)
        self._grad_step += 1
        out = {k: float(v) for k, v in losses.items()}
        for name, value in out.items():
            if not np.isfinite(value):
                raise NonFiniteLossError(f"{name} is {value} at step {self._grad_step}")
        return out

    def _update(self, batch: TorchTransitionMiniBatch, grad_step: int) -> Dict[str, torch.Tensor]:
        raise NotImplementedError(f"{type(self).__name__} cannot be trained")

    # ---------------------------------------------------------- inference
    def _observation_tensor(self, x: Any, name: str = "x") -> Any:
        shape = self._observation_shape
        if isinstance(shape, list):
            if not isinstance(x, (list, tuple)) or len(x) != len(shape):
                raise ValueError(f"{name} must be a list of {len(shape)} arrays (tuple observations of shapes {shape})")
            arrays = [np.asarray(v) for v in x]
            batch = arrays[0].shape[0] if arrays[0].ndim else None
            for k, (array, expected) in enumerate(zip(arrays, shape)):
                if array.shape[1:] != tuple(expected) or array.ndim != len(expected) + 1:
                    raise ValueError(f"{name}[{k}] must have shape (batch, {', '.join(map(str, expected))}), got {array.shape}")
                if array.shape[0] != batch:
                    raise ValueError(f"{name}[{k}] has {array.shape[0]} rows, {name}[0] has {batch}")
            tensors = [self._as_input(a) for a in arrays]
            if self._observation_scaler is not None:
                return self._observation_scaler.transform(tensors)
            return [_float_observation(t) for t in tensors]
        array = np.asarray(x) if not isinstance(x, torch.Tensor) else x
        expected = tuple(shape)  # type: ignore[arg-type]
        if tuple(array.shape[1:]) != expected or array.ndim != len(expected) + 1:
            hint = " (add the batch dimension: x[None])" if tuple(array.shape) == expected else ""
            raise ValueError(f"{name} must have shape (batch, {', '.join(map(str, expected))}), got {tuple(array.shape)}{hint}")
        tensor = self._as_input(array)
        if self._observation_scaler is not None:
            return self._observation_scaler.transform(tensor)
        return _float_observation(tensor)

    def _as_input(self, array: Any) -> torch.Tensor:
        if isinstance(array, torch.Tensor):
            return array.to(self._device)
        if array.dtype == np.float64:
            array = array.astype(np.float32)
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
        return torch.from_numpy(array).to(self._device)

    def _action_tensor(self, action: Any, batch: int) -> torch.Tensor:
        a = np.asarray(action)
        if self._action_type_of_data() == ActionSpace.DISCRETE:
            if a.shape not in ((batch,), (batch, 1)):
                raise ValueError(f"action must have shape ({batch},) holding action indices, got {a.shape}")
            if not (np.issubdtype(a.dtype, np.integer) or np.all(np.asarray(a) == np.round(a))):
                raise ValueError("action must hold integer action indices")
            if a.size and (a.min() < 0 or a.max() >= self._action_size):
                raise ValueError(f"action indices must be in [0, {self._action_size}), got values in [{a.min()}, {a.max()}]")
            return torch.as_tensor(a.reshape(batch, 1).astype(np.int64), device=self._device)
        if a.shape != (batch, self._action_size):
            raise ValueError(f"action must have shape ({batch}, {self._action_size}), got {a.shape}")
        if not np.isfinite(a).all():
            raise ValueError("action holds nan or inf")
        t = torch.as_tensor(a, dtype=torch.float32, device=self._device)
        if self._action_scaler is not None:
            t = self._action_scaler.transform(t)
        return t

    def _action_type_of_data(self) -> ActionSpace:
        return self._action_type

    def _eval_mode(self) -> None:
        if self._toggles_mode:
            self._nets.eval()

    def _train_mode(self) -> None:
        if self._toggles_mode:
            self._nets.train()

    def _postprocess_action(self, action: torch.Tensor) -> np.ndarray:
        if action.is_floating_point() and self._action_scaler is not None:
            action = self._action_scaler.reverse_transform(action)
        return action.cpu().numpy()

    def predict(self, x: Any) -> np.ndarray:
        """Greedy actions for a batch of observations: ``(B, action_size)``
        for continuous control, ``(B,)`` indices for discrete control."""
        self._require_built()
        with torch.no_grad():
            obs = self._observation_tensor(x)
            self._eval_mode()
            try:
                action = self._predict(obs)
            finally:
                self._train_mode()
            return self._postprocess_action(action)

    def sample_action(self, x: Any) -> np.ndarray:
        """Actions sampled from the policy (``predict`` for deterministic ones)."""
        self._require_built()
        with torch.no_grad():
            obs = self._observation_tensor(x)
            self._eval_mode()
            try:
                action = self._sample(obs)
            finally:
                self._train_mode()
            return self._postprocess_action(action)

    def predict_value(self, x: Any, action: Any) -> np.ndarray:
        """Estimated action-values ``Q(x, action)``, shape ``(B,)``."""
        self._require_built()
        with torch.no_grad():
            obs = self._observation_tensor(x)
            batch = obs[0].shape[0] if isinstance(obs, list) else obs.shape[0]
            a = self._action_tensor(action, batch)
            self._eval_mode()
            try:
                value = self._predict_value(obs, a)
            finally:
                self._train_mode()
            return value.reshape(-1).cpu().numpy()

    def _predict(self, x: Any) -> torch.Tensor:
        raise NotImplementedError

    def _sample(self, x: Any) -> torch.Tensor:
        return self._predict(x)

    def _predict_value(self, x: Any, action: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} has no value function")

    def policy_module(self) -> nn.Module:
        """The greedy policy on scaled observations, as a module (for export)."""
        raise NotImplementedError(f"{type(self).__name__} has no exportable policy")

    def save_policy(self, fname: str) -> None:
        """Export the greedy policy with its scalers: ``.pt`` TorchScript,
        ``.onnx`` ONNX; verified against :meth:`predict` after writing."""
        from ..export import save_policy

        save_policy(self, fname)

    # ------------------------------------------------------------- training
    def fit(self, dataset: Any, n_steps: int, n_steps_per_epoch: int = 10000, experiment_name: Optional[str] = None,
            with_timestamp: bool = True, logger_adapter: Any = None, show_progress: bool = True, save_interval: int = 1,
            evaluators: Optional[Dict[str, Any]] = None, callback: Optional[Callable[..., None]] = None,
            epoch_callback: Optional[Callable[..., None]] = None) -> List[Tuple[int, Dict[str, float]]]:
        """Train on ``dataset`` for ``n_steps`` gradient steps; returns
        ``[(epoch, metrics), ...]``. See :func:`offrl.algos.training.fitter`."""
        return list(self.fitter(dataset, n_steps, n_steps_per_epoch, experiment_name, with_timestamp, logger_adapter,
                                show_progress, save_interval, evaluators, callback, epoch_callback))

    def fitter(self, dataset: Any, n_steps: int, n_steps_per_epoch: int = 10000, experiment_name: Optional[str] = None,
               with_timestamp: bool = True, logger_adapter: Any = None, show_progress: bool = True, save_interval: int = 1,
               evaluators: Optional[Dict[str, Any]] = None, callback: Optional[Callable[..., None]] = None,
               epoch_callback: Optional[Callable[..., None]] = None) -> Generator[Tuple[int, Dict[str, float]], None, None]:
        """Like :meth:`fit`, yielding ``(epoch, metrics)`` after each epoch."""
        from .training import fitter

        if not self._trainable:
            raise RuntimeError(
                f"{type(self).__name__} cannot be trained; build it with build_with_dataset, "
                "build_with_env or create_impl and use it to act"
            )
        return fitter(self, dataset, n_steps, n_steps_per_epoch, experiment_name, with_timestamp, logger_adapter,
                      show_progress, save_interval, evaluators, callback, epoch_callback)

    def fit_online(self, env: Any, buffer: Any = None, explorer: Any = None, n_steps: int = 1000000,
                   n_steps_per_epoch: int = 10000, update_interval: int = 1, update_start_step: int = 0,
                   random_steps: int = 0, eval_env: Any = None, eval_epsilon: float = 0.0, save_interval: int = 1,
                   experiment_name: Optional[str] = None, with_timestamp: bool = True, logger_adapter: Any = None,
                   show_progress: bool = True, callback: Optional[Callable[..., None]] = None, n_updates: int = 1,
                   eval_n_trials: int = 10,
                   epoch_callback: Optional[Callable[..., None]] = None) -> List[Tuple[int, Dict[str, float]]]:
        """Train while acting in a gymnasium environment; returns
        ``[(epoch, metrics), ...]``. See :func:`offrl.algos.online.fit_online`."""
        from .online import fit_online

        return fit_online(self, env, buffer, explorer, n_steps, n_steps_per_epoch, update_interval, update_start_step,
                          random_steps, eval_env, eval_epsilon, save_interval, experiment_name, with_timestamp,
                          logger_adapter, show_progress, callback, n_updates, eval_n_trials, epoch_callback)

    def collect(self, env: Any, buffer: Any = None, explorer: Any = None, deterministic: bool = False,
                n_steps: int = 1000000, show_progress: bool = True) -> Any:
        """Act in ``env`` for ``n_steps`` steps, writing them into ``buffer``;
        returns the buffer. See :func:`offrl.algos.online.collect`."""
        from .online import collect

        return collect(self, env, buffer, explorer, deterministic, n_steps, show_progress)

    # ---------------------------------------------------- saving / loading
    def save(self, fname: str) -> None:
        """Write config, networks, optimizer states, fitted scalers and
        grad_step to one file (atomically)."""
        from ..serialization import save_learnable

        save_learnable(self, fname)

    def save_model(self, fname: str) -> None:
        """Same file as :meth:`save` (d3rlpy's name for saving parameters)."""
        self.save(fname)

    def load_model(self, fname: str) -> None:
        """Load networks, optimizer states, scalers and grad_step from a file
        saved by an algorithm of the same type and shapes."""
        from ..serialization import load_state_into

        load_state_into(self, fname)

    @classmethod
    def from_json(cls, fname: str, device: DeviceArg = False) -> "QLearningAlgoBase":
        """Rebuild an (untrained) algorithm from a ``params.json`` written by
        :class:`~offrl.logging.FileAdapter`."""
        from ..serialization import algo_from_params_json

        algo = algo_from_params_json(fname, device)
        if not isinstance(algo, cls):
            raise ValueError(f"{fname} describes a {type(algo).__name__}, not a {cls.__name__}")
        return algo

    def to_params(self) -> Dict[str, Any]:
        """``params.json`` content: config, shapes and action space."""
        shape = self._observation_shape
        return {
            "algorithm": self._config.get_type(),
            "config": self._config.to_dict(),
            "observation_shape": [list(s) for s in shape] if isinstance(shape, list) else (list(shape) if shape is not None else None),
            "action_size": self._action_size,
        }

    # -------------------------------------------------- transfer learning
    def _copy_module(self, other: "QLearningAlgoBase", mine: Optional[str], theirs: Optional[str], what: str) -> None:
        self._require_built()
        other._require_built()
        if mine is None or theirs is None or mine not in self._nets or theirs not in other._nets:
            raise ValueError(f"cannot copy the {what} from {type(other).__name__} to {type(self).__name__}: one of them has none")
        try:
            self._nets[mine].load_state_dict(other._nets[theirs].state_dict())
        except RuntimeError as e:
            raise ValueError(
                f"the {what} of {type(other).__name__} does not fit {type(self).__name__}'s "
                f"(different encoders, n_critics, Q-function types or shapes): {e}"
            ) from None

    def copy_policy_from(self, algo: "QLearningAlgoBase") -> None:
        """Copy the policy network's parameters from ``algo``."""
        self._copy_module(algo, self._policy_module, algo._policy_module, "policy")

    def copy_q_function_from(self, algo: "QLearningAlgoBase") -> None:
        """Copy the Q-functions (and target Q-functions) from ``algo``."""
        if not self._q_modules or not algo._q_modules:
            raise ValueError(f"cannot copy Q-functions between {type(algo).__name__} and {type(self).__name__}")
        for mine in self._q_modules:
            theirs = mine if mine in algo._q_modules else algo._q_modules[0]
            self._copy_module(algo, mine, theirs, "Q-function")

    def _copy_optim(self, other: "QLearningAlgoBase", mine: Optional[str], theirs: Optional[str], what: str) -> None:
        self._require_built()
        other._require_built()
        if mine is None or theirs is None:
            raise ValueError(f"cannot copy the {what} optimizer from {type(other).__name__} to {type(self).__name__}")
        try:
            self._optims[mine].load_state_dict(other._optims[theirs].state_dict())
        except (ValueError, KeyError, RuntimeError) as e:
            raise ValueError(f"the {what} optimizer state of {type(other).__name__} does not fit {type(self).__name__}: {e}") from None

    def copy_policy_optim_from(self, algo: "QLearningAlgoBase") -> None:
        self._copy_optim(algo, self._policy_optim, algo._policy_optim, "policy")

    def copy_q_function_optim_from(self, algo: "QLearningAlgoBase") -> None:
        self._copy_optim(algo, self._q_optim, algo._q_optim, "Q-function")

    def reset_optimizer_states(self) -> None:
        """Forget optimizer moments and step counts (e.g. before finetuning)."""
        self._require_built()
        for optim in self._optims.values():
            optim.reset()

    def __repr__(self) -> str:
        state = f"built for {self._observation_shape} -> {self._action_size}" if self._built else "not built"
        return f"{type(self).__name__}({state}, device={self._device}, grad_step={self._grad_step})"


def _float_observation(x: Any) -> Any:
    if isinstance(x, list):
        return [_float_observation(v) for v in x]
    return x if x.is_floating_point() else x.to(torch.float32)


def _normalise_shape(shape: Any) -> Shape:
    if isinstance(shape, (list, tuple)) and len(shape) > 0 and isinstance(shape[0], (list, tuple)):
        return [tuple(int(s) for s in sub) for sub in shape]
    try:
        return tuple(int(s) for s in shape)
    except TypeError:
        raise ValueError(f"observation_shape must be a shape or a list of shapes, got {shape!r}") from None
