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

import contextlib
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
from ..dataset.signature import signatures_from_env
from ..dataset.writer import BasicWriterPreprocess
from ..models.modules import Modules
from ..models.plain_mlp import plain_products
from ..preprocessing import ActionScaler, ObservationScaler, RewardScaler
from ..model_rules import SCALER_NAMES, saved_observation_keys
from ..training import distributed, graph, online
from ..training import precision as mixed_precision
from ..training import fit as training
from . import _sizing
from .config import LearnableConfig, check_enable_ddp, check_instance, check_positive_int, check_positive_number
from ..training.device import DeviceArg, parse_device
from ..training.fit import NonFiniteLossError, TrainStepResult
from ..training.options import FitOptions
from .acting import ActingMixin
from .impl import TQLearningConfig, TQLearningImpl, checked_impl, impl_update
from .inputs_check import float_observation, network_observation_shape, normalise_shape, stored_observation_shape
from .persistence import PersistenceMixin
from .precision_rules import PrecisionMixin

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
_FLOAT32_STEP = contextlib.nullcontext()


def _uses_impl(cls: type) -> bool:
    """The class is written against d3rlpy's extension API (it defines
    ``inner_create_impl``; see :mod:`offrl.algos.impl`)."""
    return callable(getattr(cls, "inner_create_impl", None))


def _module_device(module: nn.Module) -> torch.device:
    for p in module.parameters():
        return p.device
    return torch.device("cpu")


class QLearningAlgoBase(ActingMixin, PersistenceMixin, PrecisionMixin, Generic[TQLearningImpl, TQLearningConfig]):
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

    def __init_subclass__(cls, config: Optional[type] = None, **kwargs: Any) -> None:
        """``config``: the config class that creates this algorithm (what its
        ``algorithm_class()`` returns), as in ``class SAC(QLearningAlgoBase, config=SACConfig)``."""
        super().__init_subclass__(**kwargs)
        if config is not None:
            if not (isinstance(config, type) and issubclass(config, LearnableConfig)):
                raise TypeError(f"{cls.__name__}'s config must be a LearnableConfig subclass, got {config!r}")
            config._algorithm = cls
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
        """The config this algorithm runs: the one it was given, except that
        once its scalers are fitted (``fit``, ``build_with_dataset``, a
        loaded model) it names the fitted scalers, so that
        ``algo.config.create()`` gives an algorithm that predicts on the
        same scale (d3rlpy's habit: its ``fit`` fits the config's scalers in
        place). The config object the user passed is never modified: a
        copy with the fitted scalers is returned, the same object until the
        config or a scaler changes."""
        names = ("observation_scaler", "action_scaler", "reward_scaler")
        mine = {n: getattr(self, f"_{n}", None) for n in names}
        fitted = {n: v for n, v in mine.items()
                  if v is not None and getattr(v, "built", False) and getattr(self._config, n, None) is not v}
        if not fitted:
            return self._config
        cached = getattr(self, "_fitted_config", None)
        if cached is not None and cached[0] is self._config and all(getattr(cached[1], n) is v for n, v in fitted.items()):
            return cached[1]
        config = dataclasses.replace(self._config, **fitted)
        self._fitted_config = (self._config, config)
        return config

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

    @property
    def q_function_optim(self) -> Any:
        """The Q-function's optimizer (d3rlpy's ``impl.q_function_optim``;
        ``algo.impl`` is the algorithm itself once built), None if the
        algorithm has none."""
        self.require_built()
        return getattr(self._modules, self._q_optim) if self._q_optim is not None else None

    @property
    def policy_optim(self) -> Any:
        """The policy's optimizer (d3rlpy's ``impl.policy_optim``), None if
        the algorithm has none."""
        self.require_built()
        return getattr(self._modules, self._policy_optim) if self._policy_optim is not None else None

    # ------------------------------------------------------------ building
    def create_impl(self, observation_shape: Shape, action_size: int) -> None:
        """Build networks and optimizers for the given shapes."""
        shape = normalise_shape(observation_shape)
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
                    and network_observation_shape(dataset) != stored_observation_shape(dataset)):
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
            if isinstance(batch.observations, dict):  # dict observations: the encoders' key order
                batch = batch.with_observation_keys(self._observation_keys)
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
            obs, next_obs = float_observation(obs), float_observation(next_obs)
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
        mixed = self._config.precision != "float32" and self._mixed_step_ready()
        # bf16-mixed: autocast, and on the CPU the written-out passes' own bf16 products (models.plain_mlp)
        written = plain_products(torch.bfloat16) if mixed and self._device.type == "cpu" else _FLOAT32_STEP
        with mixed_precision.autocast(self._device) if mixed else _FLOAT32_STEP, written:
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
                where = "" if self.precision == "float32" else f" with precision={self.precision!r}"
                raise NonFiniteLossError(f"{name} is {value} at step {self._grad_step}{where}")
        return out

    def _update(self, batch: TorchTransitionMiniBatch, grad_step: int) -> Union[Dict[str, torch.Tensor], TrainStepResult]:
        if self._impl is None:
            raise NotImplementedError(f"{type(self).__name__} cannot be trained")
        return impl_update(self._impl, batch, grad_step)

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

    def __repr__(self) -> str:
        state = f"built for {self._observation_shape} -> {self._action_size}" if self._built else "not built"
        return f"{type(self).__name__}({state}, device={self._device}, grad_step={self._grad_step})"


