"""What the ``offrl`` commands share: the user-error type, config overrides
(``key=value`` and ``--config`` files), loading datasets, models and
environments by name, the metric evaluators by name, and output files.
Imports no numeric package at module level (``offrl --help`` stays fast)."""

from __future__ import annotations

import json
import os
import re
from typing import Any, Dict, Optional, Sequence, Tuple


class CLIError(Exception):
    """A user error: printed as one line, exit status 2."""


FIELD_KINDS = (
    ("observation_scaler", "observation_scaler"),
    ("action_scaler", "action_scaler"),
    ("reward_scaler", "reward_scaler"),
    ("encoder_factory", "encoder"),
    ("optim_factory", "optimizer"),
    ("q_func_factory", "q_function"),
)


def kind_of_field(field: str, current: Any) -> Optional[str]:
    if isinstance(current, dict) and set(current) == {"kind", "type", "params"}:
        return current["kind"]
    for suffix, kind in FIELD_KINDS:
        if field.endswith(suffix):
            return kind
    return None


def override_value(key: str, text: str) -> Any:
    """An override's value: JSON when it parses as JSON, else the text.
    JSON nested more deeply than offrl reads is refused with a ``CLIError``
    naming ``key`` (instead of being taken as a string)."""
    from .._safety import load_json

    source = f"override {key}"
    try:
        return load_json(text, source)
    except ValueError as e:
        if str(e).startswith(f"{source}: JSON nested"):
            raise CLIError(str(e)) from None
        return text


def parse_overrides(items: Sequence[str]) -> Dict[str, Any]:
    """``["batch_size=64", "encoder_factory.hidden_units=[64,64]"]`` ->
    ``{"batch_size": 64, ...}``; values are JSON when they parse as JSON
    (numbers, lists, true/false/null, objects), strings otherwise."""
    overrides: Dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not part for part in key.split(".")):
            raise CLIError(f"malformed override {item!r}: expected key=value (e.g. batch_size=64)")
        overrides[key] = override_value(key, text)
    return overrides


def apply_overrides(config_cls: type, overrides: Dict[str, Any], base: Optional[Dict[str, Any]] = None) -> Any:
    """A config of ``config_cls`` with ``overrides`` applied to its JSON form.

    Keys are field names, dotted for nested factories
    (``critic_encoder_factory.hidden_units``). A string given to a
    factory or scaler field names its type (``q_func_factory=qr``,
    ``observation_scaler=standard``), with that type's defaults; a JSON
    object gives ``{"type": ..., "params": {...}}``.
    """
    from ..serialization import from_json_value, lookup

    data = base if base is not None else config_cls().to_dict()
    data = json.loads(json.dumps(data))
    for key, value in overrides.items():
        parts = key.split(".")
        node = data
        for depth, part in enumerate(parts):
            params = node["params"]
            if part not in params:
                where = ".".join(parts[:depth]) or config_cls.__name__
                raise CLIError(f"unknown config key {'.'.join(parts[: depth + 1])!r} in {where}; valid: {', '.join(sorted(params))}")
            if depth < len(parts) - 1:
                child = params[part]
                if not (isinstance(child, dict) and "params" in child):
                    raise CLIError(f"{'.'.join(parts[: depth + 1])} is not a factory or scaler, so {key!r} cannot go inside it")
                node = child
                continue
            current = params[part]
            kind = kind_of_field(part, current)
            if kind is not None and isinstance(value, str):
                try:
                    cls = lookup(kind, value)
                except ValueError as e:
                    raise CLIError(f"{key}: {e}") from None
                value = cls().to_dict()
            elif kind is not None and isinstance(value, dict) and "type" in value:
                try:
                    cls = lookup(kind, value["type"])
                except ValueError as e:
                    raise CLIError(f"{key}: {e}") from None
                full = cls().to_dict()
                unknown = set(value.get("params", {})) - set(full["params"])
                if unknown:
                    raise CLIError(f"{key}: {cls.__name__} has no parameters {sorted(unknown)}; valid: {', '.join(sorted(full['params']))}")
                full["params"].update(value.get("params", {}))
                value = full
            params[part] = value
    try:
        return from_json_value(data)
    except (TypeError, ValueError) as e:
        raise CLIError(f"invalid config for {config_cls.__name__}: {e}") from None


def config_from_args(config_cls: type, config_file: Optional[str], overrides: Sequence[str]) -> Any:
    base = None
    extra: Dict[str, Any] = {}
    if config_file:
        if not os.path.isfile(config_file):
            raise CLIError(f"{config_file}: no such config file")
        from .._safety import load_json

        try:
            with open(config_file, "rb") as f:
                loaded = load_json(f.read(), config_file)
        except ValueError as e:
            raise CLIError(str(e)) from None
        if not isinstance(loaded, dict):
            raise CLIError(f"{config_file}: expected a JSON object of config values")
        if set(loaded) == {"kind", "type", "params"}:
            if loaded["type"] != config_cls.get_type():
                raise CLIError(f"{config_file} holds a {loaded['type']!r} config, not {config_cls.get_type()!r}")
            base = loaded
        else:
            extra = loaded
    if config_file:  # the file's own keys first, so that an error in them names the file
        try:
            apply_overrides(config_cls, extra, base)
        except CLIError as e:
            raise CLIError(f"{config_file}: {e}") from None
    extra.update(parse_overrides(overrides))
    return apply_overrides(config_cls, extra, base)


# -------------------------------------------------------------- datasets
#: ``--max-expansion``'s default: offrl._safety.DEFAULT_MAX_EXPANSION (written here so that
#: building the parser imports nothing numeric)
DEFAULT_MAX_EXPANSION = 1000.0


def hdf5_kind(path: str) -> str:
    """``"offrl"`` for offrl's and d3rlpy 2.x's dataset files, ``"d4rl"``
    for any other HDF5 file (the D4RL reader names what is missing)."""
    import h5py

    from ..dataset.io import dataset_file_format

    from .._safety import check_regular_file

    check_regular_file(path, "dataset file")  # a named pipe would block the read
    if not h5py.is_hdf5(path):
        raise CLIError(f"{path}: not an HDF5 file")
    return dataset_file_format(path) or "d4rl"


def load_dataset(spec: str, max_expansion: Optional[float] = DEFAULT_MAX_EXPANSION) -> Tuple[Any, Any]:
    """``(dataset, env or None)`` for a dataset file (offrl or d3rlpy HDF5,
    D4RL-format HDF5), an offrl disk dataset directory (sampled in place,
    never loaded whole), a Minari dataset directory, or a built-in dataset
    name. ``max_expansion``: the loaders' bound on compressed HDF5 arrays."""
    from ..dataset import MDPDataset
    from ..dataset.disk import is_disk_dataset

    if is_disk_dataset(spec):
        return MDPDataset.load(spec, in_memory=False), None
    if os.path.isdir(spec):
        from ..datasets import get_minari

        return get_minari(spec, max_expansion=max_expansion)
    if os.path.isfile(spec):
        if hdf5_kind(spec) == "offrl":
            return MDPDataset.load(spec, max_expansion=max_expansion), None
        from ..datasets import load_d4rl_hdf5

        return load_d4rl_hdf5(spec, max_expansion=max_expansion), None
    if os.sep in spec or spec.endswith((".h5", ".hdf5")):
        raise CLIError(f"{spec}: no such dataset file")
    try:
        from ..datasets import get_dataset
    except ImportError:
        raise CLIError(f"{spec}: no such dataset file") from None
    return get_dataset(spec)


def load_model(path: str) -> Any:
    # offrl.load_learnable (not serialization's) first loads the packages
    # whose algorithms, encoders and scalers a model file may name
    from .. import load_learnable

    if not os.path.isfile(path):
        raise CLIError(f"{path}: no such model file")
    return load_learnable(path)


#: gymnasium's id syntax: [module:][namespace/]name[-vN]
ENV_ID = re.compile(r"^(?:[A-Za-z_][\w.]*:)?(?:[\w.-]+/)?[\w.-]+$")


def make_env(env_id: str, render_mode: Optional[str] = None) -> Any:
    if not ENV_ID.match(env_id):
        raise CLIError(f"--env {env_id!r} is not a gymnasium environment id "
                       "(expected [module:][namespace/]Name-vN, e.g. CartPole-v1)")
    import gymnasium

    try:
        return gymnasium.make(env_id, render_mode=render_mode)
    except Exception as e:  # gymnasium raises its own errors, ValueError, ImportError ... for bad ids
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CLIError(f"cannot make environment {env_id!r}: {first}") from None


def env_from_header(code: str) -> Any:
    """The ``env`` that the user's one-line Python ``code`` (given on the
    command line, as with ``python -c``) defines; for environments that
    need arguments or wrappers (``--env-header``)."""
    namespace: Dict[str, Any] = {}
    try:
        exec(compile(code, "<--env-header>", "exec"), namespace)  # noqa: S102  (the user's own command-line code)
    except Exception as e:
        raise CLIError(f"--env-header failed: {type(e).__name__}: {e}") from None
    if "env" not in namespace:
        raise CLIError("--env-header must define a variable named env (e.g. \"import gymnasium; env = gymnasium.make('CartPole-v1')\")")
    env = namespace["env"]
    missing = [name for name in ("action_space", "observation_space", "reset", "step") if not hasattr(env, name)]
    if missing:
        raise CLIError(f"--env-header defined env as a {type(env).__name__}, not a gymnasium environment (it has no {', '.join(missing)})")
    return env


def env_name(env: Any) -> str:
    spec = getattr(env, "spec", None)
    return spec.id if spec is not None and getattr(spec, "id", None) else type(env).__name__


def check_env_fits(algo: Any, env: Any, model_name: str = "the model") -> None:
    """Raise ``CLIError`` (one line naming both sizes) when ``algo`` cannot
    act in ``env``: a discrete model in a continuous environment or the other
    way round, a different number of actions, or a different observation
    shape. Checked before any episode runs, so the error is not an assertion
    deep inside the environment."""
    import numpy as np
    from gymnasium import spaces

    from ..constants import ActionSpace

    name = env_name(env)
    action_space = env.action_space
    kind = algo.get_action_type()
    size = int(algo.action_size)
    if isinstance(action_space, spaces.Discrete):
        if kind == ActionSpace.CONTINUOUS:
            raise CLIError(f"{model_name} is a continuous-action model (action_size {size}), but {name} has a discrete "
                           f"action space ({action_space}, {int(action_space.n)} actions)")
        if size != int(action_space.n):
            raise CLIError(f"{model_name} chooses among {size} discrete actions, but {name} has {int(action_space.n)} "
                           f"({action_space})")
        if int(getattr(action_space, "start", 0)) != 0:
            raise CLIError(f"{model_name} chooses actions 0..{size - 1}, but the actions of {name} start at "
                           f"{int(action_space.start)} ({action_space})")
    elif isinstance(action_space, spaces.Box):
        env_size = int(np.prod(action_space.shape))
        if kind == ActionSpace.DISCRETE:
            raise CLIError(f"{model_name} is a discrete-action model ({size} actions), but {name} has a continuous "
                           f"action space of size {env_size} ({action_space})")
        if len(action_space.shape) != 1 or size != env_size:
            raise CLIError(f"{model_name} outputs actions of size {size}, but {name} expects shape "
                           f"{tuple(action_space.shape)} ({action_space})")
    else:
        raise CLIError(f"{name} has an action space offrl models cannot act in: {action_space} "
                       "(expected Discrete or a 1-D Box)")
    obs_shape = getattr(env.observation_space, "shape", None)
    model_shape = tuple(int(d) for d in algo.observation_shape) if algo.observation_shape is not None else None
    if obs_shape is not None and model_shape is not None and tuple(obs_shape) != model_shape:
        raise CLIError(f"{model_name} takes observations of shape {model_shape}, but {name} gives {tuple(obs_shape)}")


# ------------------------------------------------------------ evaluators
EVALUATORS: Dict[str, Tuple[str, str]] = {
    # name: (class in offrl.metrics, what it needs)
    "td_error": ("TDErrorEvaluator", "q"),
    "advantage": ("DiscountedSumOfAdvantageEvaluator", "q"),
    "average_value": ("AverageValueEstimationEvaluator", "q"),
    "init_value": ("InitialStateValueEstimationEvaluator", "q"),
    "soft_opc": ("SoftOPCEvaluator", "q"),
    "action_diff": ("ContinuousActionDiffEvaluator", "continuous"),
    "action_match": ("DiscreteActionMatchEvaluator", "discrete"),
    "environment": ("EnvironmentEvaluator", "env"),
}


def build_evaluators(names: Sequence[str], algo: Any, episodes: Any, env: Any, soft_opc_threshold: Optional[float] = None) -> Dict[str, Any]:
    """Evaluator objects for ``names`` (``"auto"``: those that suit ``algo``)."""
    from .. import metrics
    from ..constants import ActionSpace

    discrete = algo.get_action_type() == ActionSpace.DISCRETE
    chosen = list(names)
    if chosen == ["auto"]:
        chosen = ["action_match" if discrete else "action_diff"]
        if algo.has_q_function:
            chosen = ["td_error", "init_value", "average_value"] + chosen
        if env is not None:
            chosen.append("environment")
        if algo.predicts_from_sequences:  # a sequence model acts from a context at a target return
            chosen = []
    out: Dict[str, Any] = {}
    for name in chosen:
        if name not in EVALUATORS:
            raise CLIError(f"unknown evaluator {name!r}; valid: auto, {', '.join(EVALUATORS)}")
        class_name, needs = EVALUATORS[name]
        cls = getattr(metrics, class_name)
        if needs == "env":
            if env is None:
                raise CLIError("the environment evaluator needs an environment: give --env ENV_ID")
            out[name] = cls(env)
        elif name == "soft_opc":
            if soft_opc_threshold is None:
                raise CLIError("soft_opc needs --return-threshold")
            out[name] = cls(soft_opc_threshold, episodes=episodes)
        else:
            out[name] = cls(episodes=episodes)
    return out




def check_output_file(path: Optional[str], option: str) -> None:
    """Fail before any work when ``path`` cannot be written as a file."""
    if path is None:
        return
    if os.path.isdir(path):
        raise CLIError(f"{option} {path}: is a directory, expected a file path (e.g. {os.path.join(path, 'report.json')})")
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise CLIError(f"{option} {path}: {directory} is not a directory")


def noop() -> Any:
    from ..logging import NoopAdapterFactory

    return NoopAdapterFactory()


def write_json(path: str, data: Any) -> None:
    """Write ``data`` as JSON, atomically under a unique temporary name (two
    runs writing the same report do not collide)."""
    from .._atomic import atomic_write_json

    check_output_file(path, "--json")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    atomic_write_json(path, data)
