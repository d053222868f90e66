"""Algorithm configs: hyperparameters as data, with their constraints
declared once, next to each field.

A config field states what it accepts with :func:`param`::

    tau: float = param(0.005, UNIT_INTERVAL_OPEN_LOW)
    actor_optim_factory: OptimizerFactory = param(default_factory=AdamFactory, check=instance_of(OptimizerFactory))

and :meth:`LearnableConfig.validate` checks every declared field with the
same routine and the same message style (``tau must be a number in (0, 1],
got 1.5``), when the config is made and after ``set_params``. A config
with constraints between fields adds them in its own ``validate``.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Callable, Dict, Optional, Sequence

import numpy as np

from ..preprocessing import ActionScaler, DictObservationScaler, ObservationScaler, RewardScaler
from .._d3rlpy_json import D3rlpySerializable
from ..serialization import Serializable
from ..training.precision import PRECISIONS

__all__ = [
    "Constraint",
    "param",
    "check_field",
    "POSITIVE_INT",
    "NON_NEGATIVE_INT",
    "POSITIVE",
    "NON_NEGATIVE",
    "FINITE",
    "UNIT_INTERVAL",
    "UNIT_INTERVAL_OPEN_LOW",
    "BOOL",
    "between",
    "instance_of",
    "one_of",
    "LearnableConfig",
    "SharedFieldsConfig",
    "check_positive_int",
    "check_positive_number",
    "check_instance",
    "check_enable_ddp",
]


def _is_int(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, np.integer))


def _is_number(value: Any) -> bool:
    return (
        not isinstance(value, bool)
        and isinstance(value, (int, float, np.integer, np.floating))
        and math.isfinite(float(value))
    )


@dataclasses.dataclass(frozen=True)
class Constraint:
    """What a field accepts: ``accepts(value)`` and the phrase that completes
    "``<field> must be ...``". ``error`` is the exception type raised (a
    ``TypeError`` for a value of the wrong kind of object)."""

    description: str
    accepts: Callable[[Any], bool]
    error: type = ValueError

    def check(self, value: Any, name: str) -> None:
        if not self.accepts(value):
            shown = type(value).__name__ if self.error is TypeError else repr(value)
            raise self.error(f"{name} must be {self.description}, got {shown}")


POSITIVE_INT = Constraint("a positive int", lambda v: _is_int(v) and v > 0)
NON_NEGATIVE_INT = Constraint("an int >= 0", lambda v: _is_int(v) and v >= 0)
POSITIVE = Constraint("a finite number > 0", lambda v: _is_number(v) and v > 0)
NON_NEGATIVE = Constraint("a finite number >= 0", lambda v: _is_number(v) and v >= 0)
FINITE = Constraint("a finite number", _is_number)
BOOL = Constraint("a bool", lambda v: isinstance(v, (bool, np.bool_)))


def between(low: float, high: float, low_open: bool = False, high_open: bool = False) -> Constraint:
    """A finite number in the interval from ``low`` to ``high``."""

    def accepts(v: Any) -> bool:
        if not _is_number(v):
            return False
        above = v > low if low_open else v >= low
        below = v < high if high_open else v <= high
        return above and below

    text = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    return Constraint(f"in {text}", accepts)


UNIT_INTERVAL = between(0.0, 1.0)
#: the target-network update rate: 0 would never move the target
UNIT_INTERVAL_OPEN_LOW = between(0.0, 1.0, low_open=True)


def instance_of(cls: type, optional: bool = False) -> Constraint:
    """An instance of ``cls`` (or ``None`` when ``optional``)."""
    text = f"a {cls.__name__}" + (" or None" if optional else "")
    return Constraint(text, lambda v: (optional and v is None) or isinstance(v, cls), TypeError)


def one_of(choices: Sequence[Any]) -> Constraint:
    values = tuple(choices)
    return Constraint(f"one of {list(values)}", lambda v: v in values)


def param(default: Any = dataclasses.MISSING, *, check: Constraint,
          default_factory: Any = dataclasses.MISSING) -> Any:
    """A dataclass field carrying its constraint (see the module docstring)."""
    return dataclasses.field(default=default, default_factory=default_factory, metadata={"check": check})


def check_field(config: Any, name: str) -> None:
    """Check one declared field of ``config`` (no-op for undeclared ones)."""
    for f in dataclasses.fields(config):
        if f.name == name and "check" in f.metadata:
            f.metadata["check"].check(getattr(config, name), name)


# the same checks for arguments that are not config fields
def check_positive_int(value: Any, name: str) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is an int > 0."""
    POSITIVE_INT.check(value, name)


def check_positive_number(value: Any, name: str, allow_zero: bool = False) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is a finite
    number > 0 (>= 0 with ``allow_zero``)."""
    (NON_NEGATIVE if allow_zero else POSITIVE).check(value, name)


def check_instance(config: Any, names: Sequence[str], cls: type) -> None:
    """Raise ``TypeError`` naming the field unless each ``config.<name>`` is a ``cls``."""
    for name in names:
        instance_of(cls).check(getattr(config, name), name)


def check_enable_ddp(enable_ddp: Any, device: Any = None) -> bool:
    """d3rlpy's ``enable_ddp`` flag, checked: ``True`` needs a
    ``torch.distributed`` process group, the script's own or one initialised
    here from ``torchrun``'s environment (gloo on CPU, NCCL on CUDA; see
    :mod:`offrl.training.distributed`). Outside torchrun it raises
    ``ValueError`` saying how to launch. Returns the flag."""
    if not isinstance(enable_ddp, (bool, np.bool_)):
        raise TypeError(f"enable_ddp must be a bool, got {type(enable_ddp).__name__}")
    if not enable_ddp:
        return False
    import torch

    from ..training.distributed import ensure_process_group

    ensure_process_group(device if isinstance(device, torch.device) else torch.device("cpu"))
    return True


@dataclasses.dataclass
class LearnableConfig(D3rlpySerializable, Serializable):
    """Hyperparameters shared by every algorithm.

    Args:
        batch_size: mini-batch size.
        gamma: discount factor.
        observation_scaler, action_scaler, reward_scaler: preprocessing; an
            unfitted scaler is fitted on the training data (on a copy held
            by the algorithm: the config is never changed by ``fit``).
        compile_graph: compile the update step with ``torch.compile``.
        precision: offrl's addition (keyword only; d3rlpy has no such
            field): ``"float32"`` (default, d3rlpy's behaviour) or
            ``"bf16-mixed"``, the update step's products in bfloat16 on
            hardware with bf16 units, weights, optimizer state, targets and
            losses float32 (see :mod:`offrl.training.precision`).
    """

    _kind = "algorithm"
    #: the algorithm class this config creates: set by the algorithm's class
    #: statement, ``class SAC(QLearningAlgoBase, config=SACConfig)``
    _algorithm = None
    _offrl_only_fields = ("precision",)  # serialize() leaves it out at float32: d3rlpy's JSON

    batch_size: int = param(256, check=POSITIVE_INT)
    gamma: float = param(0.99, check=UNIT_INTERVAL)
    observation_scaler: Optional[ObservationScaler] = param(None, check=instance_of(ObservationScaler, optional=True))
    action_scaler: Optional[ActionScaler] = param(None, check=instance_of(ActionScaler, optional=True))
    reward_scaler: Optional[RewardScaler] = param(None, check=instance_of(RewardScaler, optional=True))
    compile_graph: bool = param(False, check=BOOL)
    precision: str = dataclasses.field(default="float32", kw_only=True, metadata={"check": one_of(PRECISIONS)})

    def __post_init__(self) -> None:
        if isinstance(self.observation_scaler, dict):  # per-key scalers for dict observations
            self.observation_scaler = DictObservationScaler(self.observation_scaler)
        self.validate()

    def validate(self) -> None:
        """Check every declared field (subclasses add checks between fields)."""
        for f in dataclasses.fields(self):
            check = f.metadata.get("check")
            if check is not None:
                check.check(getattr(self, f.name), f.name)

    def create(self, device: Any = False, enable_ddp: bool = False) -> Any:
        """The algorithm configured by this config, on ``device``.

        ``enable_ddp=True`` (d3rlpy's data-parallel flag) trains data-parallel
        under ``torchrun`` (see :mod:`offrl.training.distributed`); outside it, a
        ``ValueError`` says how to launch. ``compile_graph=True`` compiles the
        networks of the update step with ``torch.compile`` at the first
        training step (falling back to eager with one warning).
        """
        if not isinstance(enable_ddp, (bool, np.bool_)):
            raise TypeError(f"enable_ddp must be a bool, got {type(enable_ddp).__name__}")
        if enable_ddp:  # the algorithm initialises the process group for its device
            return self.algorithm_class()(self, device, True)
        return self.algorithm_class()(self, device)

    @classmethod
    def algorithm_class(cls) -> type:
        """The algorithm class this config creates: the one that names it in
        its class statement (``class SAC(QLearningAlgoBase, config=SACConfig)``;
        a subclass of a config creates what it creates unless another
        algorithm names it). A config written the d3rlpy way defines
        ``create`` instead: its class is that of what ``create()`` makes
        from the default config (nothing is built)."""
        if cls._algorithm is not None:
            return cls._algorithm
        if cls.create is LearnableConfig.create:
            raise NotImplementedError(f"{cls.__name__} defines neither algorithm_class nor create")
        return type(cls().create())

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


def _args_indent(doc: str) -> int:
    """The indentation of a docstring's ``Args:`` line (4 as written in a
    class body, 0 where Python 3.13 stripped the common indentation)."""
    match = re.search(r"^( *)Args:\n", doc, flags=re.MULTILINE)
    return len(match.group(1)) if match else 0


def _documented_args(doc: str) -> Dict[str, str]:
    """``{field: its Args entry}`` of a docstring's ``Args:`` section, each
    entry as written (its first line and continuation lines, with their
    line ends); an entry naming several fields is each one's."""
    found: Dict[str, str] = {}
    section = doc.split("Args:\n", 1)[1] if "Args:\n" in doc else ""
    entry = " " * (_args_indent(doc) + 4)  # Python 3.13 strips a docstring's common indentation, earlier ones keep it
    names: list = []
    for line in section.splitlines(keepends=True):
        match = re.match(rf"^{entry}(\w+(?:, \w+)*):(?: |$)", line)
        if match:
            names = match.group(1).split(", ")
            for name in names:
                found[name] = line
        elif names and line.startswith(entry + "    ") and line.strip():
            for name in names:
                found[name] += line
        elif line.strip():
            break
    return found


@dataclasses.dataclass
class SharedFieldsConfig(LearnableConfig):
    """The base of a config that holds fields several algorithms share (not
    an algorithm, not registered), e.g.
    :class:`~offrl.algos.actor_critic.ActorCriticConfig`.

    The fields are declared once, on the shared base; a field an algorithm
    gives another default is redefined in its own config, which keeps its
    place in the field order (dataclasses keep a redefined field where it
    was first declared), so every config lists its fields in d3rlpy's order.
    Their ``Args`` text is written once too: a subclass's docstring lists
    its own fields under ``Args:``, and the shared ones are put in front of
    them when the class is made, in the bases' field order (``help(TD3Config)``
    shows every field; a subclass may document a shared field in its own
    words, and one that documents no field of its own gets the section).
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        doc = cls.__dict__.get("__doc__")
        if not doc:
            return
        own = _documented_args(doc)
        shared: Dict[str, str] = {}
        for base in reversed(cls.__mro__[1:]):
            if issubclass(base, SharedFieldsConfig) and base is not SharedFieldsConfig and base.__dict__.get("__doc__"):
                shared.update(_documented_args(base.__dict__["__doc__"]))
        if not shared:
            return
        # the shared fields come first in every such config: their entries go first, in the
        # bases' order, with the subclass's own text where it documents one (an entry
        # documenting several fields is put in once)
        entries = list(dict.fromkeys(own.get(name, entry) for name, entry in shared.items()))
        if "Args:\n" in doc:
            head, section = doc.split("Args:\n", 1)
            for entry in entries:
                if entry in own.values():
                    section = section.replace(entry, "", 1)
            cls.__doc__ = head + "Args:\n" + "".join(entries) + section
        else:  # a config with no fields of its own to document
            # "Args:" one level above the entries, which keep the bases' indentation
            indent = " " * max(len(entries[0]) - len(entries[0].lstrip(" ")) - 4, 0)
            cls.__doc__ = doc.rstrip() + f"\n\n{indent}Args:\n" + "".join(entries) + indent
