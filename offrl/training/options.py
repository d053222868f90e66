"""The options of ``fit``, ``fitter`` and ``fit_online``, gathered once.

The public methods keep d3rlpy 2.8.1's signatures (and their positional
orders, which differ between ``fit`` and ``fitter``); each builds one
:class:`FitOptions` from its keywords, and everything inside the training
package reads the options from it by name. The checks of the values stay
where the loops run (:mod:`offrl.training.fit`, :mod:`offrl.training.online`),
so every error message is the one users saw before.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Optional

from ..constants import LoggingStrategy

__all__ = ["FitOptions"]

Hook = Optional[Callable[[Any, int, int], None]]


@dataclasses.dataclass(frozen=True)
class FitOptions:
    """Every option of a training run, by name.

    Shared by offline and online training: ``n_steps`` (gradient steps
    offline, environment steps online), ``n_steps_per_epoch``, the logging
    options (``experiment_name``, ``with_timestamp``, ``logging_steps``,
    ``logging_strategy``, ``logger_adapter``), ``show_progress``,
    ``save_interval`` and the hooks (``callback`` after every step,
    ``epoch_callback`` after every epoch). Offline only: ``evaluators`` and
    ``resume_from``. Online only: ``update_interval``, ``n_updates``,
    ``update_start_step``, ``random_steps``, ``eval_env``, ``eval_epsilon``,
    ``eval_n_trials`` and ``seed``. Defaults are d3rlpy's.
    """

    n_steps: int
    n_steps_per_epoch: int = 10000
    experiment_name: Optional[str] = None
    with_timestamp: bool = True
    logging_steps: int = 500
    logging_strategy: Any = LoggingStrategy.EPOCH
    logger_adapter: Any = None
    show_progress: bool = True
    save_interval: int = 1
    callback: Hook = None
    epoch_callback: Hook = None
    evaluators: Optional[Dict[str, Any]] = None
    resume_from: Any = None
    update_interval: int = 1
    n_updates: int = 1
    update_start_step: int = 0
    random_steps: int = 0
    eval_env: Any = None
    eval_epsilon: float = 0.0
    eval_n_trials: int = 10
    seed: Optional[int] = None

    def replace(self, **changes: Any) -> "FitOptions":
        """A copy with ``changes`` (a data-parallel rank that does not log)."""
        return dataclasses.replace(self, **changes)
