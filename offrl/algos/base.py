"""The algorithm base: the estimator every algorithm subclasses once, and
the internal interface through which the rest of offrl uses an algorithm.

**For algorithm authors** (files in ``offrl/algos/``): a subclass sets the
capability flags below that differ from the defaults and defines

* ``_build(observation_shape, action_size)``: networks and optimizers (made
  with ``self._optimizer``), returned in the algorithm's typed holder, a
  frozen dataclass subclassing :class:`~offrl.models.modules.Modules` that
  the class names by annotating ``_modules`` (``_modules: SACModules``);
  the hooks read them as ``self._modules.policy``;
* ``_update(batch, grad_step)``: one gradient step on a preprocessed torch
  batch, returning a dict of 0-dim loss tensors (no host sync) or a
  :class:`TrainStepResult` when it computes per-sample TD errors;
* ``_predict(x)``, optionally ``_sample(x)``, ``_predict_value(x, a)``, and
  the stochastic-policy hooks ``_action_probabilities(x)`` (discrete) or
  ``_action_log_prob(x, a)`` (continuous), all on scaled tensors;
* ``policy_module()`` for export.

An algorithm that is another plus a term subclasses it and redefines these
hooks (CQL = SAC + a conservative term), never the base's own machinery; its
holder extends the parent's (``CQLModules(SACModules)``).

d3rlpy's extension API works on the same hooks: a subclass that defines
``inner_create_impl`` (and sets ``self._impl`` to a
:class:`~offrl.algos.impl.QLearningAlgoImplBase`) is built and trained
through its Impl (see :mod:`offrl.algos.impl`).

**For everything outside ``offrl/algos/``** (training loops, OPE, export,
serialization, metrics, the command line) the interface is public:

* capability flags: :attr:`has_q_function`, :attr:`has_policy`,
  :attr:`is_trainable`, :attr:`supports_priorities`,
  :attr:`has_stochastic_policy`, :attr:`predicts_stochastically`,
  :meth:`get_action_type`;
* one training step: :meth:`training_step` (what ``fit`` and
  ``fit_online`` call) returning :class:`TrainStepResult`; :meth:`update`
  is d3rlpy's float-returning form of it;
* acting in torch: :meth:`observation_tensor` (checked raw input) and
  :meth:`policy_actions` (actions in the environment's units, no numpy
  round trip), and for OPE :meth:`action_probabilities` /
  :meth:`action_log_densities`;
* state for saving: :meth:`get_state` / :meth:`load_state`;
* :meth:`policy_module` for export.

Observations are scaled, and actions and rewards transformed, once per batch
here before ``_update`` sees them.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import math
import sys
from typing import Any, Callable, Dict, Generator, Generic, List, Optional, Sequence, Tuple, Type, Union

import numpy as np
import torch
from torch import nn

from ..constants import ActionSpace
from ..dataset.batch import TorchTransitionMiniBatch, TransitionMiniBatch
from ..dataset.signature import observation_from_dict, signatures_from_env
from ..dataset.writer import BasicWriterPreprocess
from ..export import save_policy as export_policy
from ..models.modules import Modules
from ..preprocessing import ActionScaler, ObservationScaler, RewardScaler
from ..serialization import algo_from_params_json, load_state_into, save_learnable, saved_observation_keys
from ..training import distributed, graph, online
from ..training import fit as training
from . import _sizing
from .config import LearnableConfig, check_enable_ddp, check_instance, check_positive_int, check_positive_number
from ..training.device import DeviceArg, parse_device
from ..training.fit import NonFiniteLossError, TrainStepResult
from ..training.options import FitOptions
from .impl import ImplPolicy, TQLearningConfig, TQLearningImpl, checked_impl, impl_update

__all__ = [
    "LearnableConfig",
    "QLearningAlgoBase",
    "TrainStepResult",
    "parse_device",
    "NonFiniteLossError",
    "DeviceArg",
    "check_positive_int",
    "check_positive_number",
    "check_instance",
    "ActionScaler",
    "ObservationScaler",
    "RewardScaler",
]

Shape = Union[Tuple[int, ...], Sequence[Tuple[int, ...]]]
SCALER_NAMES = ("observation_scaler", "action_scaler", "reward_scaler")


def _uses_impl(cls: type) -> bool:
    """The class is written against d3rlpy's extension API (it defines
    ``inner_create_impl``; see :mod:`offrl.algos.impl`)."""
    return callable(getattr(cls, "inner_create_impl", None))


def _module_device(module: nn.Module) -> torch.device:
    for p in module.parameters():
        return p.device
    return torch.device("cpu")


class QLearningAlgoBase(Generic[TQLearningImpl, TQLearningConfig]):
    """Base of all algorithms: the estimator API and the internal interface
    (see the module docstring). Subscriptable as d3rlpy's
    (``QLearningAlgoBase[MyImpl, MyConfig]``)."""

    _action_type: ActionSpace = ActionSpace.BOTH
    #: the typed holder of the networks and optimizers, once built (a
    #: subclass annotates it with its own Modules class)
    _modules: Modules
    #: holder fields used by copy_*_from (checked against the holder's
    #: fields when the class is defined)
    _policy_module: Optional[str] = None
    _q_modules: Tuple[str, ...] = ()
    _policy_optim: Optional[str] = None
    _q_optim: Optional[str] = None

    # ------------------------------------------------- capability flags
    # (class attributes; ``has_q_function`` and ``has_stochastic_policy``
    # default to whether the class defines the hooks behind them)
    #: it acts by itself: ``predict`` / ``sample_action`` / ``save_policy``
    has_policy: bool = True
    #: ``fit`` trains it (False for policies that only act, e.g. random ones)
    is_trainable: bool = True
    #: its loss takes importance weights and it reports per-sample TD
    #: errors, so it can train from a prioritized buffer
    supports_priorities: bool = False
    #: ``predict`` itself draws from the policy's distribution (random policies)
    predicts_stochastically: bool = False
    #: it is made around a trained algorithm whose policy it evaluates
    #: (``cls(algo=trained, config=...)``, ``cls.load(fname, algo=trained)``: FQE)
    evaluates_algorithm: bool = False
    #: d3rlpy's flag: the algorithm needs returns-to-go in its batches
    need_returns_to_go: bool = False
    #: a sequence model: ``fit`` samples windows of ``context_size`` steps and
    #: ``predict`` takes a context (``TransformerInput``), not observations
    predicts_from_sequences: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        holder = cls._holder_class()
        names = [f.name for f in dataclasses.fields(holder)]
        for attr in ("_policy_module", "_policy_optim", "_q_optim"):
            value = getattr(cls, attr)
            if value is not None and value not in names:
                raise TypeError(f"{cls.__name__}.{attr} is {value!r}, not a field of {holder.__name__} (fields: {names})")
        for value in cls._q_modules:
            if value not in names:
                raise TypeError(f"{cls.__name__}._q_modules names {value!r}, not a field of {holder.__name__} "
                                f"(fields: {names})")

    @classmethod
    def _holder_class(cls) -> Type[Modules]:
        """The :class:`~offrl.models.modules.Modules` class of this
        algorithm's networks and optimizers: the annotation of ``_modules``
        on the class or the nearest base that has one."""
        for klass in cls.__mro__:
            annotation = inspect.get_annotations(klass).get("_modules")
            if annotation is None:
                continue
            if isinstance(annotation, str):  # postponed annotations: a name of the class's module
                annotation = vars(sys.modules[klass.__module__]).get(annotation, annotation)
            if not (isinstance(annotation, type) and issubclass(annotation, Modules)):
                raise TypeError(f"{klass.__name__}._modules is annotated {annotation!r}; expected a Modules subclass "
                                "defined before the algorithm class in its module")
            return annotation
        return Modules

    def __init__(self, config: LearnableConfig, device: DeviceArg = False, enable_ddp: bool = False) -> None:
        if not isinstance(config, LearnableConfig):
            raise TypeError(f"config must be a LearnableConfig, got {type(config).__name__}")
        if type(self).get_action_type is not QLearningAlgoBase.get_action_type:
            self._action_type = self.get_action_type()  # d3rlpy's extension API declares it by this method
        self._config = config
        self._device_arg = device
        self._device = parse_device(device)
        self._enable_ddp = check_enable_ddp(enable_ddp, self._device)
        if self._enable_ddp:
            self._device = distributed.ddp_device(self._device)
        self._reset_state()

    def _reset_state(self) -> None:
        self._modules = Modules()  # none before building
        #: the holder's networks and optimizers by field name (the generic
        #: machinery's view: saving, loading, modes; ``modules`` / ``optimizers``)
        self._nets = nn.ModuleDict()
        self._optims: Dict[str, Any] = {}
        self._impl: Any = None  # an Impl of d3rlpy's extension API
        self._observation_shape: Optional[Shape] = None
        self._observation_keys: Optional[Tuple[str, ...]] = None  # dict observations' keys, when known
        self._action_size: Optional[int] = None
        self._grad_step = 0
        self._built = False
        self._toggles_mode = False
        self._observation_scaler = copy.deepcopy(self._config.observation_scaler)
        self._action_scaler = copy.deepcopy(self._config.action_scaler)
        self._reward_scaler = copy.deepcopy(self._config.reward_scaler)

    @property
    def has_q_function(self) -> bool:
        """It estimates action values: ``predict_value`` works."""
        return type(self)._predict_value is not QLearningAlgoBase._predict_value or _uses_impl(type(self))

    @property
    def has_stochastic_policy(self) -> bool:
        """The policy is a distribution whose probabilities (discrete) or
        densities (continuous) :meth:`action_probabilities` /
        :meth:`action_log_densities` give (for importance sampling)."""
        hook = "_action_probabilities" if self._action_type == ActionSpace.DISCRETE else "_action_log_prob"
        return callable(getattr(self, hook, None))

    @property
    def compiled(self) -> bool:
        """d3rlpy 2.8's flag: whether the update step runs compiled
        (``compile_graph=True`` and compiling worked; see :mod:`offrl.training.graph`)."""
        return getattr(self, "_compiled_for", None) is self._nets and getattr(self, "_update_fn", None) is not None \
            and getattr(self._update_fn, "__func__", None) is None

    @property
    def enable_ddp(self) -> bool:
        """Whether ``fit`` trains data-parallel (see :mod:`offrl.training.distributed`)."""
        return getattr(self, "_enable_ddp", False)

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

    def update_config(self, **changes: Any) -> LearnableConfig:
        """Replace the config by a validated copy with ``changes`` applied,
        keeping the built networks, optimizers and fitted scalers (for fields
        read during updates, such as ``gamma`` or ``tau``; a hook's seam,
        see :class:`offrl.algos.set_config`); returns the new config."""
        names = {f.name for f in dataclasses.fields(self._config)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise ValueError(f"{type(self._config).__name__} has no field {unknown[0]!r}")
        self._config = dataclasses.replace(self._config, **changes)
        return self._config

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
    def observation_keys(self) -> Optional[Tuple[str, ...]]:
        """The keys of dict observations in the order the networks take them
        (sorted); None for array and tuple observations."""
        return self._observation_keys

    @observation_keys.setter
    def observation_keys(self, keys: Optional[Sequence[str]]) -> None:
        """Name the parts of a built algorithm's observations (one distinct
        string per part, in the order the networks take them), so that dict
        inputs are checked key by key; None accepts any keys, sorted."""
        self.require_built()
        if keys is not None:
            if isinstance(keys, (str, bytes)) or not isinstance(keys, (list, tuple)):
                raise TypeError(f"observation_keys must be a list of strings, got {type(keys).__name__}")
            keys = saved_observation_keys({"observation_keys": list(keys)}, self._observation_shape, "observation_keys")
        self._observation_keys = keys

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
    def impl(self) -> Any:
        """The built networks' owner: ``self`` once built (the Impl for an
        algorithm of d3rlpy's extension API), ``None`` before."""
        if not self._built:
            return None
        return self if self._impl is None else self._impl

    @property
    def is_built(self) -> bool:
        return self._built

    def get_action_type(self) -> ActionSpace:
        return self._action_type

    @property
    def modules(self) -> nn.ModuleDict:
        """The networks, by name."""
        return self._nets

    @property
    def optimizers(self) -> Dict[str, Any]:
        """The optimizers, by name."""
        return dict(self._optims)

    # ------------------------------------------------------------ building
    def create_impl(self, observation_shape: Shape, action_size: int) -> None:
        """Build networks and optimizers for the given shapes."""
        shape = _normalise_shape(observation_shape)
        check_positive_int(action_size, "action_size")
        if self._device.type != "meta":  # sizes checked on the meta device first (that build skips this)
            _sizing.check_networks_fit(self, shape, int(action_size))
        self._modules = Modules()
        self._nets = nn.ModuleDict()
        self._optims = {}
        self._impl = None
        self._observation_shape = shape
        self._action_size = int(action_size)
        for scaler in (self._observation_scaler, self._action_scaler, self._reward_scaler):
            if scaler is not None:
                scaler.to(self._device)
        if self._observation_scaler is not None and self._observation_scaler.built:
            self._observation_scaler.check_observation_shape(shape)
        modules = self._build(shape, int(action_size))
        if modules is None:  # an algorithm without networks (a random policy)
            modules = Modules()
        holder = self._holder_class()
        if not isinstance(modules, holder):
            raise TypeError(f"{type(self).__name__}._build returned a {type(modules).__name__}; expected a "
                            f"{holder.__name__} (the holder of its networks and optimizers)")
        self._modules = modules
        self._nets = nn.ModuleDict(modules.torch_modules())
        self._nets.to(self._device)
        self._optims = modules.optimizers()
        self._toggles_mode = any(
            isinstance(m, (nn.modules.batchnorm._BatchNorm, nn.Dropout, nn.Dropout2d)) for m in self._nets.modules()
        )
        self._built = True

    def _build(self, observation_shape: Shape, action_size: int) -> Optional[Modules]:
        """The networks and optimizers, in this algorithm's holder. By
        default, d3rlpy's extension API: ``inner_create_impl`` leaves an
        Impl holding them in ``self._impl``."""
        if not _uses_impl(type(self)):
            raise NotImplementedError(f"{type(self).__name__} defines neither _build nor inner_create_impl")
        self.inner_create_impl(observation_shape, action_size)  # type: ignore[attr-defined]
        return checked_impl(self).modules

    def _optimizer(self, factory: Any, modules: Sequence[nn.Module], lr: float) -> Any:
        """An optimizer from ``factory`` over ``modules``' parameters, made
        once they are on the device, so that its state lives there."""
        named = []
        for m in modules:
            m.to(self._device)
            named.extend(m.named_parameters())
        return factory.create(named, lr)

    def check_action_space(self, action_space: ActionSpace) -> None:
        """Raise ``ValueError`` unless this algorithm learns/acts with ``action_space``."""
        allowed = self._action_type
        if allowed == ActionSpace.BOTH or action_space == allowed:
            return
        raise ValueError(
            f"{type(self).__name__} learns {allowed.name.lower()} actions, but the data has "
            f"{action_space.name.lower()} actions"
        )

    _check_action_space = check_action_space

    def check_training_fits(self, dataset: Any) -> None:
        """Raise ``ValueError`` before training when one step at the config's
        ``batch_size`` on ``dataset``'s shapes (estimated on the meta device)
        would need more memory than the device has free (``fit`` calls it
        after building; see :mod:`offrl.algos._sizing`)."""
        _sizing.check_training_step_fits(self, dataset)

    def build_with_dataset(self, dataset: Any) -> None:
        """Fit unfitted scalers (on copies) and build networks for the dataset's shapes.

        Nothing is changed when building fails (the scalers stay unfitted)."""
        info = dataset.dataset_info
        self.check_action_space(info.action_space)
        saved = self._scalers()
        try:
            self.fit_scalers(dataset)
            self.create_impl(network_observation_shape(dataset), info.action_size)
            self._observation_keys = getattr(info.observation_signature, "keys", None)
        except Exception:
            self._restore_scalers(saved)
            raise

    def build_with_env(self, env: Any) -> None:
        """Build networks for a gymnasium environment's spaces (scalers that
        can be fitted from the spaces are). Nothing is changed when it fails."""
        obs_sig, _, _, space, size = signatures_from_env(env, BasicWriterPreprocess())
        self.check_action_space(space)
        saved = self._scalers()
        try:
            for scaler in (self._observation_scaler, self._action_scaler, self._reward_scaler):
                if scaler is not None and not scaler.built:
                    scaler.fit_with_env(env)
            self.create_impl(obs_sig.shape if obs_sig.is_tuple else obs_sig.shape[0], size)
            self._observation_keys = obs_sig.keys
        except Exception:
            self._restore_scalers(saved)
            raise

    def _scalers(self) -> Tuple[Any, Any, Any]:
        return tuple(copy.deepcopy(getattr(self, f"_{name}")) for name in SCALER_NAMES)  # type: ignore[return-value]

    def _restore_scalers(self, saved: Tuple[Any, Any, Any]) -> None:
        for name, scaler in zip(SCALER_NAMES, saved):
            setattr(self, f"_{name}", scaler)

    def fit_scalers(self, dataset: Any) -> None:
        """Fit the scalers that have no statistics yet on ``dataset`` (the
        algorithm's own copies; the config's scalers are never changed).
        When the dataset's transition picker changes the observation shape
        (frame stacking), the observation scaler is fitted on the picked
        transitions, whose shape the networks see."""
        picker = getattr(dataset, "transition_picker", None)
        for name, scaler in zip(SCALER_NAMES, (self._observation_scaler, self._action_scaler, self._reward_scaler)):
            if scaler is None or scaler.built:
                continue
            if (name == "observation_scaler" and picker is not None and hasattr(scaler, "fit_with_transition_picker")
                    and network_observation_shape(dataset) != _stored_observation_shape(dataset)):
                scaler.fit_with_transition_picker(dataset.episodes, picker)
            else:
                scaler.fit(dataset)

    _fit_scalers = fit_scalers

    def check_dataset(self, dataset: Any) -> None:
        """Raise ``ValueError`` unless ``dataset``'s shapes and action space
        are those this (built) algorithm was built for."""
        info = dataset.dataset_info
        self.check_action_space(info.action_space)
        expected = network_observation_shape(dataset)
        if expected != self._observation_shape:
            raise ValueError(f"the dataset's observations have shape {expected}, the algorithm was built for {self._observation_shape}")
        if info.action_size != self._action_size:
            raise ValueError(f"the dataset has action_size={info.action_size}, the algorithm was built for {self._action_size}")

    def require_built(self) -> None:
        """Raise ``RuntimeError`` unless networks are built."""
        if not self._built:
            raise RuntimeError(
                f"{type(self).__name__} has no networks yet: call fit, build_with_dataset, "
                "build_with_env or create_impl first"
            )

    _require_built = require_built

    # ------------------------------------------------------------ training
    def preprocess_batch(self, batch: Union[TransitionMiniBatch, TorchTransitionMiniBatch]) -> TorchTransitionMiniBatch:
        """A batch as torch tensors on the device with this algorithm's
        observation scaler, action scaler and reward scaler applied."""
        if isinstance(batch, TransitionMiniBatch):
            if self.need_returns_to_go:  # Monte-Carlo returns of the scaled rewards (CalQL)
                transform = None if self._reward_scaler is None else self._reward_scaler.transform_numpy
                batch = batch.to_torch(self._device, returns_to_go_gamma=self._config.gamma, reward_transform=transform)
            else:
                batch = batch.to_torch(self._device)
        elif not isinstance(batch, TorchTransitionMiniBatch):
            raise TypeError(f"batch must be a TransitionMiniBatch, got {type(batch).__name__}")
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
        if (obs is batch.observations and next_obs is batch.next_observations and actions is batch.actions
                and next_actions is batch.next_actions and rewards is batch.rewards):
            return batch  # nothing to scale or convert
        return dataclasses.replace(
            batch, observations=obs, actions=actions, rewards=rewards, next_observations=next_obs, next_actions=next_actions
        )

    def training_step(self, batch: Union[TransitionMiniBatch, TorchTransitionMiniBatch]) -> TrainStepResult:
        """One gradient step on a (raw) mini-batch: what ``fit`` and
        ``fit_online`` call. Returns the losses as 0-dim tensors on the device
        (no host sync) and, for algorithms that compute them, the per-sample
        TD errors a prioritized buffer takes as priorities.

        A subclass (or a wrapper set on the instance) that overrides
        :meth:`update` is honoured: its ``update`` is called instead."""
        self.require_built()
        if self._update_overridden():
            captured: List[TrainStepResult] = []
            self._capture = captured
            try:
                losses = self.update(batch)
            finally:
                self._capture = None
            td_errors = captured[-1].td_errors if captured else None
            metrics = {k: torch.as_tensor(float(v)) for k, v in dict(losses).items()}
            return TrainStepResult(metrics, td_errors)
        return self._step(batch)

    def _update_overridden(self) -> bool:
        method = self.update
        return getattr(method, "__func__", None) is not QLearningAlgoBase.update

    def _step(self, batch: Union[TransitionMiniBatch, TorchTransitionMiniBatch]) -> TrainStepResult:
        torch_batch = self.preprocess_batch(batch)
        if not self._config.compile_graph:
            out = self._update(torch_batch, self._grad_step)
        elif getattr(self, "_compiled_for", None) is not self._nets:  # first step on these networks: compile
            self._compiled_for = self._nets
            self._update_fn, out = graph.compiled_step(self, self._update, lambda fn: fn(torch_batch, self._grad_step))
        else:
            out = self._update_fn(torch_batch, self._grad_step)
        result = out if isinstance(out, TrainStepResult) else TrainStepResult(out)
        self._grad_step += 1
        capture = getattr(self, "_capture", None)
        if capture is not None:
            capture.append(result)
        return result

    def update(self, batch: Union[TransitionMiniBatch, TorchTransitionMiniBatch]) -> Dict[str, float]:
        """One gradient step on a mini-batch; returns the losses as floats
        (d3rlpy's API; ``fit`` calls it when a subclass overrides it)."""
        self.require_built()
        result = self._step(batch)
        out = {k: float(v) for k, v in result.metrics.items()}
        for name, value in out.items():
            if not math.isfinite(value):
                raise NonFiniteLossError(f"{name} is {value} at step {self._grad_step}")
        return out

    def _update(self, batch: TorchTransitionMiniBatch, grad_step: int) -> Union[Dict[str, torch.Tensor], TrainStepResult]:
        if self._impl is None:
            raise NotImplementedError(f"{type(self).__name__} cannot be trained")
        return impl_update(self._impl, batch, grad_step)

    # ---------------------------------------------------------- inference
    def observation_tensor(self, x: Any, name: str = "x") -> Any:
        """``x`` checked and moved to the device as raw (unscaled) tensors: a
        tensor, or a list for tuple observations.

        Raises ``TypeError`` for values that are not real numbers (strings,
        objects, complex) and ``ValueError`` for a wrong shape, an empty batch
        or a value that is NaN, infinite or beyond float32's range, naming
        ``name``, the first bad row and what was expected. A dict of batched
        arrays (dict observations) is taken in sorted key order, the order
        the data stores them in."""
        shape = self._observation_shape
        if isinstance(x, dict):
            x = observation_from_dict(x, self._observation_keys, name)
            if not isinstance(shape, list) and len(x) == 1:
                x = x[0]
        if isinstance(shape, list):
            if not isinstance(x, (list, tuple)) or len(x) != len(shape):
                raise ValueError(f"{name} must be a list of {len(shape)} arrays (tuple observations of shapes {shape})")
            arrays = [_as_array(v, f"{name}[{k}]") for k, v in enumerate(x)]
            batch = arrays[0].shape[0] if arrays[0].ndim else None
            for k, (array, expected) in enumerate(zip(arrays, shape)):
                if tuple(array.shape[1:]) != tuple(expected) or array.ndim != len(expected) + 1:
                    raise ValueError(f"{name}[{k}] must have shape (batch, {', '.join(map(str, expected))}), got {tuple(array.shape)}")
                if array.shape[0] != batch:
                    raise ValueError(f"{name}[{k}] has {array.shape[0]} rows, {name}[0] has {batch}")
            return [self._as_input(a, f"{name}[{k}]") for k, a in enumerate(arrays)]
        array = _as_array(x, name)
        expected = tuple(shape)  # type: ignore[arg-type]
        if tuple(array.shape[1:]) != expected or array.ndim != len(expected) + 1:
            hint = " (add the batch dimension: x[None])" if tuple(array.shape) == expected else ""
            raise ValueError(f"{name} must have shape (batch, {', '.join(map(str, expected))}), got {tuple(array.shape)}{hint}")
        return self._as_input(array, name)

    def scale_observations(self, observations: Any) -> Any:
        """Raw observation tensors (from :meth:`observation_tensor`) as the
        networks see them: scaled, or converted to float32."""
        if self._observation_scaler is not None:
            return self._observation_scaler.transform(observations)
        return _float_observation(observations)

    def _observation_tensor(self, x: Any, name: str = "x") -> Any:
        return self.scale_observations(self.observation_tensor(x, name))

    def _as_input(self, array: Any, name: str) -> torch.Tensor:
        """A checked (see :func:`check_real_values`) numpy array or tensor
        as a tensor on the device; float64 becomes float32."""
        check_real_values(array, name)
        if isinstance(array, torch.Tensor):
            if array.dtype == torch.float64:
                array = array.to(torch.float32)
            return array.to(self._device)
        if array.dtype == np.float64:
            array = array.astype(np.float32)
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
        return torch.from_numpy(array).to(self._device)

    def _action_tensor(self, action: Any, batch: int) -> torch.Tensor:
        a = _as_array(action, "action")
        if self._action_type_of_data() == ActionSpace.DISCRETE:
            if a.shape not in ((batch,), (batch, 1)):
                raise ValueError(f"action must have shape ({batch},) holding action indices, got {a.shape}")
            check_real_values(a, "action")
            if a.dtype.kind not in "biu":
                whole = a == np.round(a)
                if not whole.all():
                    row = int(np.argmin(whole.reshape(batch, -1).all(axis=1)))
                    raise ValueError(f"action[{row}] is {a.reshape(batch, -1)[row, 0].item()!r}; expected an integer action index")
            if a.size and (a.min() < 0 or a.max() >= self._action_size):
                flat = a.reshape(-1)
                row = int(np.argmax((flat < 0) | (flat >= self._action_size)))
                raise ValueError(f"action[{row}] is {flat[row].item()!r}; expected an action index in [0, {self._action_size})")
            return torch.as_tensor(a.reshape(batch, 1).astype(np.int64), device=self._device)
        if a.shape != (batch, self._action_size):
            raise ValueError(f"action must have shape ({batch}, {self._action_size}), got {a.shape}")
        check_real_values(a, "action")
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

    def _in_eval_mode(self, fn: Callable[[Any], torch.Tensor], observations: Any) -> torch.Tensor:
        with torch.no_grad():
            self._eval_mode()
            try:
                return fn(observations)
            finally:
                self._train_mode()

    def _postprocess_action(self, action: torch.Tensor) -> np.ndarray:
        return self._unscale_action(action).cpu().numpy()

    def _unscale_action(self, action: torch.Tensor) -> torch.Tensor:
        if action.is_floating_point() and self._action_scaler is not None:
            action = self._action_scaler.reverse_transform(action)
        return action

    def policy_actions(self, observations: Any, sample: bool = False) -> torch.Tensor:
        """Actions for raw observation tensors on this algorithm's device, in
        the environment's units, as a tensor: ``(B, action_size)`` floats or
        ``(B,)`` int64 indices; greedy, or drawn from the policy with
        ``sample``. No numpy round trip (FQE calls it in its hot loop)."""
        self.require_built()
        scaled = self.scale_observations(observations)
        action = self._in_eval_mode(self._sample if sample else self._predict, scaled)
        return self._unscale_action(action)

    def predict(self, x: Any) -> np.ndarray:
        """Greedy actions for a batch of observations: ``(B, action_size)``
        for continuous control, ``(B,)`` indices for discrete control."""
        self.require_built()
        return self.policy_actions(self.observation_tensor(x)).cpu().numpy()

    def sample_action(self, x: Any) -> np.ndarray:
        """Actions sampled from the policy (``predict`` for deterministic ones)."""
        self.require_built()
        return self.policy_actions(self.observation_tensor(x), sample=True).cpu().numpy()

    def predict_value(self, x: Any, action: Any) -> np.ndarray:
        """Estimated action-values ``Q(x, action)``, shape ``(B,)``."""
        self.require_built()
        obs = self._observation_tensor(x)
        batch = obs[0].shape[0] if isinstance(obs, list) else obs.shape[0]
        a = self._action_tensor(action, batch)
        value = self._in_eval_mode(lambda o: self._predict_value(o, a), obs)
        return value.reshape(-1).cpu().numpy()

    def _predict(self, x: Any) -> torch.Tensor:
        if self._impl is None:
            raise NotImplementedError
        return self._impl.inner_predict_best_action(x)

    def _sample(self, x: Any) -> torch.Tensor:
        if self._impl is None:
            return self._predict(x)
        return self._impl.inner_sample_action(x)

    def _predict_value(self, x: Any, action: torch.Tensor) -> torch.Tensor:
        if self._impl is None:
            raise NotImplementedError(f"{type(self).__name__} has no value function")
        return self._impl.inner_predict_value(x, action)

    # ------------------------------------------- stochastic-policy hooks
    def action_probabilities(self, x: Any) -> np.ndarray:
        """The discrete policy's probabilities of every action, ``(B,
        action_size)`` float64 (for importance sampling)."""
        self.require_built()
        if self._action_type != ActionSpace.DISCRETE or not self.has_stochastic_policy:
            raise ValueError(f"{type(self).__name__} has no discrete action distribution")
        obs = self._observation_tensor(x)
        return self._in_eval_mode(self._action_probabilities, obs).double().cpu().numpy()  # type: ignore[attr-defined]

    def action_log_densities(self, x: Any, actions: Any) -> np.ndarray:
        """Log-densities of ``actions`` (in the environment's units) under the
        continuous policy at ``x``, ``(B,)`` float64: the policy's density on
        scaled actions plus ``log |det d scaled / d raw|`` of the action scaler."""
        self.require_built()
        if self._action_type == ActionSpace.DISCRETE or not self.has_stochastic_policy:
            raise ValueError(f"{type(self).__name__} has no continuous action density")
        obs = self._observation_tensor(x)
        raw = torch.as_tensor(np.asarray(actions), dtype=torch.float32, device=self._device)
        if self._action_scaler is None:
            scaled, log_jacobian = raw, torch.zeros(raw.shape[0], device=raw.device)
        else:
            with torch.enable_grad():
                raw = raw.clone().requires_grad_(True)
                scaled = self._action_scaler.transform(raw)
                (grad,) = torch.autograd.grad(scaled.sum(), raw)
            scaled, log_jacobian = scaled.detach(), torch.log(grad.abs()).sum(dim=-1)
        log_prob = self._in_eval_mode(lambda o: self._action_log_prob(o, scaled), obs)  # type: ignore[attr-defined]
        return (log_prob + log_jacobian).double().cpu().numpy()

    # ---------------------------------------------------------- exporting
    def policy_module(self) -> nn.Module:
        """The greedy policy on scaled observations, as a module (for export)."""
        if self._impl is None:
            raise NotImplementedError(f"{type(self).__name__} has no exportable policy")
        return ImplPolicy(self._impl)

    def save_policy(self, fname: str) -> None:
        """Export the greedy policy with its scalers: ``.pt`` TorchScript,
        ``.onnx`` ONNX; verified against :meth:`predict` after writing."""
        export_policy(self, fname)

    # ------------------------------------------------------------- training
    def fit(self, dataset: Any, n_steps: int, n_steps_per_epoch: int = 10000, experiment_name: Optional[str] = None,
            with_timestamp: bool = True, logging_steps: int = 500, logging_strategy: Any = "epoch",
            logger_adapter: Any = None, show_progress: bool = True, save_interval: int = 1,
            evaluators: Optional[Dict[str, Any]] = None, callback: Optional[Callable[..., None]] = None,
            epoch_callback: Optional[Callable[..., None]] = None,
            resume_from: Any = None) -> List[Tuple[int, Dict[str, float]]]:
        """Train on ``dataset`` for ``n_steps`` gradient steps; returns
        ``[(epoch, metrics), ...]``. See :func:`offrl.training.fit.fitter`."""
        return list(self.fitter(dataset, n_steps, n_steps_per_epoch=n_steps_per_epoch, logging_steps=logging_steps,
                                logging_strategy=logging_strategy, experiment_name=experiment_name,
                                with_timestamp=with_timestamp, logger_adapter=logger_adapter, show_progress=show_progress,
                                save_interval=save_interval, evaluators=evaluators, callback=callback,
                                epoch_callback=epoch_callback, resume_from=resume_from))

    def fitter(self, dataset: Any, n_steps: int, n_steps_per_epoch: int = 10000, logging_steps: int = 500,
               logging_strategy: Any = "epoch", experiment_name: Optional[str] = None, with_timestamp: bool = True,
               logger_adapter: Any = None, show_progress: bool = True, save_interval: int = 1,
               evaluators: Optional[Dict[str, Any]] = None, callback: Optional[Callable[..., None]] = None,
               epoch_callback: Optional[Callable[..., None]] = None,
               resume_from: Any = None) -> Generator[Tuple[int, Dict[str, float]], None, None]:
        """Like :meth:`fit`, yielding ``(epoch, metrics)`` after each epoch
        (positional order as d3rlpy's ``fitter``: logging options first)."""
        if not self.is_trainable:
            raise RuntimeError(
                f"{type(self).__name__} cannot be trained; build it with build_with_dataset, "
                "build_with_env or create_impl and use it to act"
            )
        return training.run(self, dataset, FitOptions(
            n_steps=n_steps, n_steps_per_epoch=n_steps_per_epoch, logging_steps=logging_steps,
            logging_strategy=logging_strategy, experiment_name=experiment_name, with_timestamp=with_timestamp,
            logger_adapter=logger_adapter, show_progress=show_progress, save_interval=save_interval,
            evaluators=evaluators, callback=callback, epoch_callback=epoch_callback, resume_from=resume_from,
        ))

    def fit_online(self, env: Any, buffer: Any = None, explorer: Any = None, n_steps: int = 1000000,
                   n_steps_per_epoch: int = 10000, update_interval: int = 1, n_updates: int = 1,
                   update_start_step: int = 0, random_steps: int = 0, eval_env: Any = None, eval_epsilon: float = 0.0,
                   eval_n_trials: int = 10, save_interval: int = 1, experiment_name: Optional[str] = None,
                   with_timestamp: bool = True, logging_steps: int = 500, logging_strategy: Any = "epoch",
                   logger_adapter: Any = None, show_progress: bool = True, callback: Optional[Callable[..., None]] = None,
                   epoch_callback: Optional[Callable[..., None]] = None,
                   seed: Optional[int] = None) -> List[Tuple[int, Dict[str, float]]]:
        """Train while acting in a gymnasium environment, or a vectorised one
        (``n_updates`` updates per vector step); returns ``[(epoch, metrics),
        ...]``. ``seed`` seeds the first reset (environment ``i`` of a vector
        env with ``seed + i``); None draws it from offrl's generator. See
        :func:`offrl.training.online.fit_online`."""
        return online.run_online(self, env, buffer, explorer, FitOptions(
            n_steps=n_steps, n_steps_per_epoch=n_steps_per_epoch, update_interval=update_interval, n_updates=n_updates,
            update_start_step=update_start_step, random_steps=random_steps, eval_env=eval_env,
            eval_epsilon=eval_epsilon, eval_n_trials=eval_n_trials, save_interval=save_interval,
            experiment_name=experiment_name, with_timestamp=with_timestamp, logging_steps=logging_steps,
            logging_strategy=logging_strategy, logger_adapter=logger_adapter, show_progress=show_progress,
            callback=callback, epoch_callback=epoch_callback, seed=seed,
        ))

    def collect(self, env: Any, buffer: Any = None, explorer: Any = None, deterministic: bool = False,
                n_steps: int = 1000000, show_progress: bool = True, seed: Optional[int] = None) -> Any:
        """Act in ``env`` (or a vectorised env) for ``n_steps`` steps, writing
        them into ``buffer``; returns the buffer. ``seed`` seeds the first
        reset (environment ``i`` of a vector env with ``seed + i``); None
        draws it from offrl's generator. See :func:`offrl.training.online.collect`."""
        return online.collect(self, env, buffer, explorer, deterministic, n_steps, show_progress, seed=seed)

    # ---------------------------------------------------- saving / loading
    def get_state(self) -> Dict[str, Any]:
        """What a model file holds besides the config: ``modules`` and
        ``optimizers`` (state dicts by name), fitted ``scalers`` (state dicts
        by scaler name) and ``grad_step``; tensors on the CPU."""
        self.require_built()
        scalers = {}
        for name in SCALER_NAMES:
            scaler = getattr(self, f"_{name}")
            if scaler is not None:
                scalers[name] = {k: v.detach().cpu() for k, v in scaler.state_dict().items()}
        return {
            "modules": {name: {k: v.detach().cpu() for k, v in m.state_dict().items()} for name, m in self._nets.items()},
            "optimizers": {name: _cpu(o.state_dict()) for name, o in self._optims.items()},
            "scalers": scalers,
            "grad_step": int(self._grad_step),
        }

    def load_state(self, state: Dict[str, Any], source: str = "the state") -> None:
        """Load :meth:`get_state`'s content into this built algorithm;
        raises ``ValueError`` naming ``source`` and the entry when it does not
        fit. Everything is checked before anything is loaded, so on an error
        the algorithm is left as it was."""
        self.require_built()
        for entry in ("modules", "optimizers", "scalers", "grad_step"):
            if entry not in state:
                raise ValueError(f"{source} has no {entry!r} entry")
        modules, optimizers, scalers = state["modules"], state["optimizers"], state["scalers"]
        for entry, table in (("modules", modules), ("optimizers", optimizers), ("scalers", scalers)):
            if not isinstance(table, dict):
                raise ValueError(f"{source}: {entry!r} is a {type(table).__name__}; expected a dict")
        grad_step = state["grad_step"]
        if isinstance(grad_step, bool) or not isinstance(grad_step, (int, np.integer)) or grad_step < 0:
            raise ValueError(f"{source}: grad_step is {grad_step!r}; expected a non-negative int")
        for entry, expected, found in (("modules", set(self._nets.keys()), set(modules)),
                                       ("optimizers", set(self._optims), set(optimizers))):
            if found - expected:
                raise ValueError(f"{source}: {entry} {sorted(map(str, found - expected))} are not part of "
                                 f"{type(self).__name__} (expected {sorted(expected)})")
            if expected - found:
                what = "weights" if entry == "modules" else "optimizer state"
                raise ValueError(f"{source} has no {what} for {sorted(expected - found)} of {type(self).__name__}")
        for key, module in self._nets.items():
            _check_module_state(module, modules[key], f"{source}: modules[{key!r}]")
        for key, optim in self._optims.items():
            _check_optimizer_state(optim, optimizers[key], f"{source}: optimizers[{key!r}]")
        new_scalers = self._checked_scalers(scalers, source)
        keys = saved_observation_keys(state.get("params"), self._observation_shape, source)
        # every check passed: load (nothing below depends on the file's content being valid)
        before = {key: copy.deepcopy(optim.state_dict()) for key, optim in self._optims.items()}
        try:
            for key, module in self._nets.items():
                module.load_state_dict(modules[key])
            for key, optim in self._optims.items():
                optim.load_state_dict(optimizers[key])
        except (ValueError, KeyError, RuntimeError, TypeError) as e:
            for key, optim in self._optims.items():
                optim.load_state_dict(before[key])
            raise ValueError(f"{source}: the state does not fit {type(self).__name__}: {e}") from None
        for key, scaler in new_scalers.items():
            setattr(self, f"_{key}", scaler)
        if keys is not None:
            self._observation_keys = keys
        self.set_grad_step(int(grad_step))

    def _checked_scalers(self, scalers: Dict[str, Any], source: str) -> Dict[str, Any]:
        """Copies of this algorithm's scalers with the file's statistics,
        checked: the known statistics only, floating point, finite, of the
        observation / action shape, non-negative standard deviations."""
        unknown = sorted(str(k) for k in scalers if k not in SCALER_NAMES)
        if unknown:
            raise ValueError(f"{source}: scalers {unknown} are not scalers of an algorithm; expected {list(SCALER_NAMES)}")
        out: Dict[str, Any] = {}
        for key in SCALER_NAMES:
            scaler = getattr(self, f"_{key}")
            scaler_state = scalers.get(key)
            if scaler_state is None:
                continue
            if scaler is None:
                raise ValueError(f"{source} holds a fitted {key}, but the algorithm's config has none")
            if not isinstance(scaler_state, dict):
                raise ValueError(f"{source}: scalers[{key!r}] is not a state dict")
            expected = _scaler_stat_names(scaler)
            for name in sorted(map(str, set(scaler_state) - expected)):
                raise ValueError(f"{source}: scalers[{key!r}][{name!r}] is not a statistic of "
                                 f"{type(scaler).__name__} (expected {sorted(expected)})")
            missing = sorted(n for n in expected - set(scaler_state) if _stat_value(scaler, n) is not None)
            if missing:
                raise ValueError(f"{source}: scalers[{key!r}] is missing {missing}")
            for name, value in scaler_state.items():
                where = f"{source}: scalers[{key!r}][{name!r}]"
                if not isinstance(value, torch.Tensor) or value.is_complex() or not value.is_floating_point():
                    what = value.dtype if isinstance(value, torch.Tensor) else type(value).__name__
                    raise ValueError(f"{where} is {what}; expected a floating-point tensor")
                if not bool(torch.isfinite(value).all()):
                    raise ValueError(f"{where} holds nan or inf; expected finite numbers")
                if name.rpartition(".")[2] == "std" and bool((value < 0).any()):
                    raise ValueError(f"{where} holds a negative standard deviation")
            candidate = copy.deepcopy(scaler)
            try:
                candidate.load_state_dict(scaler_state, strict=False)
                candidate.to(self._device)
                if key == "observation_scaler":
                    candidate.check_observation_shape(self._observation_shape)
                elif key == "action_scaler":
                    for name in scaler_state:
                        shape = tuple(scaler_state[name].shape)
                        if shape not in ((self._action_size,), ()):
                            raise ValueError(f"scalers[{key!r}][{name!r}] has shape {shape}; actions have shape "
                                             f"({self._action_size},)")
            except (ValueError, TypeError, RuntimeError, KeyError) as e:
                raise ValueError(f"{source}: the {key} does not fit: {e}") from None
            out[key] = candidate
        return out

    def save(self, fname: str) -> None:
        """Write config, networks, optimizer states, fitted scalers and
        grad_step to one file (atomically)."""
        save_learnable(self, fname)

    def save_model(self, fname: str) -> None:
        """Same file as :meth:`save` (d3rlpy's name for saving parameters)."""
        self.save(fname)

    def load_model(self, fname: str) -> None:
        """Load networks, optimizer states, scalers and grad_step from a file
        saved by an algorithm of the same type and shapes."""
        load_state_into(self, fname)

    @classmethod
    def from_json(cls, fname: str, device: DeviceArg = False) -> "QLearningAlgoBase":
        """Rebuild an (untrained) algorithm from a ``params.json`` written by
        :class:`~offrl.logging.FileAdapter`."""
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
            **({"observation_keys": list(self._observation_keys)} if self._observation_keys is not None else {}),
        }

    # -------------------------------------------------- transfer learning
    def _copy_module(self, other: "QLearningAlgoBase", mine: Optional[str], theirs: Optional[str], what: str) -> None:
        self.require_built()
        other.require_built()
        target = getattr(self._modules, mine, None) if mine is not None else None
        source = getattr(other._modules, theirs, None) if theirs is not None else None
        if not isinstance(target, nn.Module) or not isinstance(source, nn.Module):
            raise ValueError(f"cannot copy the {what} from {type(other).__name__} to {type(self).__name__}: one of them has none")
        try:
            target.load_state_dict(source.state_dict())
        except RuntimeError as e:
            raise ValueError(
                f"the {what} of {type(other).__name__} does not fit {type(self).__name__}'s "
                f"(different encoders, n_critics, Q-function types or shapes): {e}"
            ) from None

    def copy_policy_from(self, algo: "QLearningAlgoBase") -> None:
        """Copy the policy network's parameters from ``algo``; a target
        policy (DDPG, TD3, ...) gets ``algo``'s target policy, or its policy
        when it has none, so that finetuning does not bootstrap from a
        random target."""
        self._copy_module(algo, self._policy_module, algo._policy_module, "policy")
        mine = f"targ_{self._policy_module}"
        if getattr(self._modules, mine, None) is not None:
            theirs = f"targ_{algo._policy_module}"
            has_target = getattr(algo._modules, theirs, None) is not None
            self._copy_module(algo, mine, theirs if has_target else algo._policy_module, "target policy")

    def copy_q_function_from(self, algo: "QLearningAlgoBase") -> None:
        """Copy the Q-functions (and target Q-functions) from ``algo``."""
        if not self._q_modules or not algo._q_modules:
            raise ValueError(f"cannot copy Q-functions between {type(algo).__name__} and {type(self).__name__}")
        for mine in self._q_modules:
            theirs = mine if mine in algo._q_modules else algo._q_modules[0]
            self._copy_module(algo, mine, theirs, "Q-function")

    def _copy_optim(self, other: "QLearningAlgoBase", mine: Optional[str], theirs: Optional[str], what: str) -> None:
        self.require_built()
        other.require_built()
        if mine is None or theirs is None:
            raise ValueError(f"cannot copy the {what} optimizer from {type(other).__name__} to {type(self).__name__}")
        try:
            getattr(self._modules, mine).load_state_dict(getattr(other._modules, theirs).state_dict())
        except (ValueError, KeyError, RuntimeError) as e:
            raise ValueError(f"the {what} optimizer state of {type(other).__name__} does not fit {type(self).__name__}: {e}") from None

    def copy_policy_optim_from(self, algo: "QLearningAlgoBase") -> None:
        self._copy_optim(algo, self._policy_optim, algo._policy_optim, "policy")

    def copy_q_function_optim_from(self, algo: "QLearningAlgoBase") -> None:
        self._copy_optim(algo, self._q_optim, algo._q_optim, "Q-function")

    def reset_optimizer_states(self) -> None:
        """Forget optimizer moments and step counts (e.g. before finetuning)."""
        self.require_built()
        self._modules.reset_optimizer_states()

    def __repr__(self) -> str:
        state = f"built for {self._observation_shape} -> {self._action_size}" if self._built else "not built"
        return f"{type(self).__name__}({state}, device={self._device}, grad_step={self._grad_step})"


def _check_module_state(module: nn.Module, state: Any, where: str) -> None:
    """``state`` has exactly ``module``'s state keys with their shapes and dtypes."""
    if not isinstance(state, dict):
        raise ValueError(f"{where} is not a state dict")
    own = module.state_dict()
    for key in sorted(map(str, set(state) - set(own))):
        raise ValueError(f"{where}[{key!r}] is not a state entry of the network")
    for key in sorted(set(own) - set(state)):
        raise ValueError(f"{where} is missing {key!r}")
    for key, mine in own.items():
        value = state[key]
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"{where}[{key!r}] is a {type(value).__name__}; expected a tensor")
        if tuple(value.shape) != tuple(mine.shape):
            raise ValueError(f"{where}[{key!r}] has shape {tuple(value.shape)}; the network has {tuple(mine.shape)}")
        if value.dtype != mine.dtype:
            raise ValueError(f"{where}[{key!r}] has dtype {value.dtype}; the network has {mine.dtype}")
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise ValueError(f"{where}[{key!r}] holds nan or inf; expected finite weights")


def _check_optimizer_state(optim: Any, state: Any, where: str) -> None:
    """``state`` is a torch optimizer state for ``optim``'s parameters: the
    same groups and parameter counts, per-parameter tensors of the
    parameter's shape (or scalars such as step counts), finite. An
    optimizer with a learning-rate scheduler saves ``{"optimizer": ...,
    "lr_scheduler": ...}``."""
    scheduler = getattr(optim, "lr_scheduler", None)
    if scheduler is not None and isinstance(state, dict) and set(state) == {"optimizer", "lr_scheduler"}:
        saved, own = state["lr_scheduler"], scheduler.state_dict()
        if not isinstance(saved, dict) or set(saved) != set(own):
            raise ValueError(f"{where}['lr_scheduler'] holds {sorted(saved) if isinstance(saved, dict) else saved!r}; "
                             f"expected the fields {sorted(own)}")
        where, state = f"{where}['optimizer']", state["optimizer"]
    if not isinstance(state, dict) or set(state) != {"state", "param_groups"}:
        raise ValueError(f"{where} is not an optimizer state (a dict of 'state' and 'param_groups')")
    own_groups = (optim.optim if hasattr(optim, "optim") else optim).state_dict()["param_groups"]
    groups = state["param_groups"]
    if not isinstance(groups, list) or len(groups) != len(own_groups):
        raise ValueError(f"{where} has {len(groups) if isinstance(groups, list) else groups!r} parameter groups; "
                         f"expected {len(own_groups)}")
    shapes: Dict[Any, Tuple[int, ...]] = {}
    params = [p for group in optim.optim.param_groups for p in group["params"]] if hasattr(optim, "optim") else None
    for g, (group, own) in enumerate(zip(groups, own_groups)):
        if not isinstance(group, dict) or not isinstance(group.get("params"), list) or len(group["params"]) != len(own["params"]):
            raise ValueError(f"{where}['param_groups'][{g}] does not list {len(own['params'])} parameters")
        for saved_id, own_id in zip(group["params"], own["params"]):
            if isinstance(saved_id, bool) or not isinstance(saved_id, int) or saved_id in shapes:
                raise ValueError(f"{where}['param_groups'][{g}] lists {saved_id!r}; expected distinct parameter indices")
            if params is not None:
                shapes[saved_id] = tuple(params[own_id].shape) if isinstance(own_id, int) and own_id < len(params) else None
    per_param = state["state"]
    if not isinstance(per_param, dict):
        raise ValueError(f"{where}['state'] is not a dict")
    for index, fields in per_param.items():
        if index not in shapes and params is not None:
            raise ValueError(f"{where}['state'][{index!r}] is not one of the optimizer's parameters")
        if not isinstance(fields, dict):
            raise ValueError(f"{where}['state'][{index!r}] is not a dict")
        expected = shapes.get(index)
        for field, value in fields.items():
            if not isinstance(value, torch.Tensor):
                continue
            if value.is_complex() or (value.is_floating_point() and not bool(torch.isfinite(value).all())):
                raise ValueError(f"{where}['state'][{index!r}][{field!r}] holds complex, nan or inf values")
            if value.ndim and expected is not None and tuple(value.shape) != expected:
                raise ValueError(f"{where}['state'][{index!r}][{field!r}] has shape {tuple(value.shape)}; "
                                 f"the parameter has {expected}")


def _scaler_stat_names(scaler: nn.Module) -> set:
    """State-dict names of a scaler's statistics (its own and its parts')."""
    names = set()
    for prefix, module in scaler.named_modules():
        for stat in getattr(type(module), "_stats", ()):
            names.add(f"{prefix}.{stat}" if prefix else stat)
    return names


def _stat_value(scaler: nn.Module, name: str) -> Any:
    owner_path, _, attr = name.rpartition(".")
    owner = scaler.get_submodule(owner_path) if owner_path else scaler
    return getattr(owner, attr, None)


def _cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: _cpu(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_cpu(v) for v in value]
    return value


#: the largest float32 magnitude: a larger float64 would become inf on conversion
FLOAT32_MAX = float(np.finfo(np.float32).max)
_TORCH_REAL = {torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
               torch.bfloat16, torch.float32, torch.float64}


def _as_array(x: Any, name: str) -> Any:
    """``x`` as a numpy array (tensors are kept); a ragged nesting raises
    ``ValueError`` naming ``name``."""
    if isinstance(x, (torch.Tensor, np.ndarray)):
        return x
    try:
        return np.asarray(x)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{name} is not a rectangular array of numbers: {e}") from None


def check_real_values(array: Any, name: str) -> None:
    """Raise unless ``array`` (numpy or torch, batch first) is a non-empty
    batch of real numbers that float32 represents: ``TypeError`` for other
    dtypes (strings, objects, complex), ``ValueError`` naming the first bad
    row for NaN, infinite or out-of-range values. One vectorised reduction
    for floats (NaN propagates through ``max``)."""
    if isinstance(array, torch.Tensor):
        if array.dtype not in _TORCH_REAL:
            raise TypeError(f"{name} must hold real numbers (bool, int or float), got dtype {array.dtype}")
        if array.ndim == 0 or array.shape[0] == 0:
            raise ValueError(f"{name} is an empty batch: expected at least one row")
        if array.is_floating_point() and not float(array.abs().max()) <= FLOAT32_MAX:
            _raise_bad_row(array.detach().cpu().double().numpy(), name)
        return
    kind = array.dtype.kind
    if kind not in "biuf":
        raise TypeError(f"{name} must hold real numbers (bool, int or float), got dtype {array.dtype}")
    if array.ndim == 0 or array.shape[0] == 0:
        raise ValueError(f"{name} is an empty batch: expected at least one row")
    if kind == "f" and not float(np.abs(array).max()) <= FLOAT32_MAX:
        _raise_bad_row(array, name)


def _raise_bad_row(array: np.ndarray, name: str) -> None:
    rows = np.asarray(array, dtype=np.float64).reshape(array.shape[0], -1)
    with np.errstate(invalid="ignore"):
        bad = ~(np.abs(rows) <= FLOAT32_MAX)
    row = int(np.argmax(bad.any(axis=1)))
    value = rows[row][bad[row]][0]
    if np.isnan(value):
        what = "nan"
    elif np.isinf(value):
        what = str(value)
    else:
        what = f"{value:g}, beyond float32's range (+-{FLOAT32_MAX:.4g})"
    raise ValueError(f"{name}[{row}] holds {what}; expected finite numbers")


def _stored_observation_shape(dataset: Any) -> Shape:
    signature = dataset.dataset_info.observation_signature
    return [tuple(s) for s in signature.shape] if signature.is_tuple else tuple(signature.shape[0])


def network_observation_shape(dataset: Any) -> Shape:
    """The observation shape the networks see for ``dataset``: that of a
    transition its transition picker gives (frame stacking changes it; the
    first usable transition is picked, so no random numbers are drawn), or
    the stored observations' shape when the dataset has no picker or
    episodes to ask."""
    stored = _stored_observation_shape(dataset)
    picker = getattr(dataset, "transition_picker", None)
    try:
        episodes = dataset.episodes
    except (AttributeError, NotImplementedError):
        return stored
    if picker is None:
        return stored
    for episode in episodes:
        # a transition index valid under d3rlpy's picker contract (a user picker may rely on it)
        if episode.size() >= 2 or (episode.size() == 1 and bool(episode.terminated)):
            observation = picker(episode, 0).observation
            if isinstance(observation, (list, tuple)):
                return [tuple(np.shape(o)) for o in observation]
            return tuple(np.shape(observation))
    return stored


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


normalise_shape = _normalise_shape
as_array = _as_array
float_observation = _float_observation
