"""The saving half of :class:`~offrl.algos.base.QLearningAlgoBase`: the
state a model file holds (``get_state`` / ``load_state``, whose rules are
:mod:`offrl.model_rules`'), the file calls, and transfer learning between
algorithms (``copy_*_from``). A mixin of the base class."""

from __future__ import annotations

import copy
from typing import Any, Dict, Optional

from torch import nn

from .. import model_rules
from ..model_rules import SCALER_NAMES
from ..serialization import algo_from_params_json, load_state_into, save_learnable
from ..training.checkpoint import map_tensors
from ..training.device import DeviceArg

__all__ = ["PersistenceMixin", "cpu_state"]


class PersistenceMixin:
    """Saving, loading and transfer methods of an algorithm."""

    # ---------------------------------------------------- saving / loading
    def get_state(self) -> Dict[str, Any]:
        """What a model file holds besides the config: ``modules`` and
        ``optimizers`` (state dicts by name), fitted ``scalers`` (state dicts
        by scaler name) and ``grad_step``; tensors on the CPU."""
        return self.state_on_device(cpu=True)

    def state_on_device(self, cpu: bool = False) -> Dict[str, Any]:
        """:meth:`get_state`'s content with the tensors where they live
        (detached references to the live ones: no copy), or on the CPU with
        ``cpu=True``. What a check of the weights reads on a GPU without
        copying them to the host (``offrl.training.checkpoint``)."""
        self.require_built()
        move = (lambda t: t.detach().cpu()) if cpu else (lambda t: t.detach())
        scalers = {}
        for name in SCALER_NAMES:
            scaler = getattr(self, f"_{name}")
            if scaler is not None:
                scalers[name] = {k: move(v) for k, v in scaler.state_dict().items()}
        return {
            "modules": {name: {k: move(v) for k, v in m.state_dict().items()} for name, m in self._nets.items()},
            "optimizers": {name: map_tensors(o.state_dict(), move) for name, o in self._optims.items()},
            "scalers": scalers,
            "grad_step": int(self._grad_step),
        }

    def load_state(self, state: Dict[str, Any], source: str = "the state") -> None:
        """Load :meth:`get_state`'s content into this built algorithm;
        raises ``ValueError`` naming ``source`` and the entry when it does not
        fit (the rules are :func:`offrl.model_rules.check_state`'s). Everything
        is checked before anything is loaded, so on an error the algorithm is
        left as it was."""
        self.require_built()
        checked = model_rules.check_state(self, state, source)
        before = {key: copy.deepcopy(optim.state_dict()) for key, optim in self._optims.items()}
        try:
            for key, module in self._nets.items():
                module.load_state_dict(checked.modules[key])
            for key, optim in self._optims.items():
                optim.load_state_dict(checked.optimizers[key])
        except (ValueError, KeyError, RuntimeError, TypeError) as e:
            for key, optim in self._optims.items():
                optim.load_state_dict(before[key])
            raise ValueError(f"{source}: the state does not fit {type(self).__name__}: {e}") from None
        for key, scaler in checked.scalers.items():
            setattr(self, f"_{key}", scaler)
        if checked.observation_keys is not None:
            self._observation_keys = checked.observation_keys
        self.set_grad_step(checked.grad_step)

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
    def from_json(cls, fname: str, device: DeviceArg = False) -> Any:
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
    def _copy_module(self, other: Any, mine: Optional[str], theirs: Optional[str], what: str) -> None:
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

    def copy_policy_from(self, algo: Any) -> None:
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

    def copy_q_function_from(self, algo: Any) -> None:
        """Copy the Q-functions (and target Q-functions) from ``algo``."""
        if not self._q_modules or not algo._q_modules:
            raise ValueError(f"cannot copy Q-functions between {type(algo).__name__} and {type(self).__name__}")
        for mine in self._q_modules:
            theirs = mine if mine in algo._q_modules else algo._q_modules[0]
            self._copy_module(algo, mine, theirs, "Q-function")

    def _copy_optim(self, other: Any, mine: Optional[str], theirs: Optional[str], what: str) -> None:
        self.require_built()
        other.require_built()
        if mine is None or theirs is None:
            raise ValueError(f"cannot copy the {what} optimizer from {type(other).__name__} to {type(self).__name__}")
        try:
            getattr(self._modules, mine).load_state_dict(getattr(other._modules, theirs).state_dict())
        except (ValueError, KeyError, RuntimeError) as e:
            raise ValueError(f"the {what} optimizer state of {type(other).__name__} does not fit {type(self).__name__}: {e}") from None

    def copy_policy_optim_from(self, algo: Any) -> None:
        self._copy_optim(algo, self._policy_optim, algo._policy_optim, "policy")

    def copy_q_function_optim_from(self, algo: Any) -> None:
        self._copy_optim(algo, self._q_optim, algo._q_optim, "Q-function")

    def reset_optimizer_states(self) -> None:
        """Forget optimizer moments and step counts (e.g. before finetuning)."""
        self.require_built()
        self._modules.reset_optimizer_states()


def cpu_state(value: Any) -> Any:
    """``value`` with every tensor detached and on the CPU."""
    return map_tensors(value, lambda t: t.detach().cpu())
