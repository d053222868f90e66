"""D4RL-style normalised scores of the locomotion tasks (a base-layer table:
the metrics and the datasets both use it).

``get_normalized_score(name, returns) = 100 (return - random) / (expert - random)``
(Fu et al., 2020, "D4RL", arXiv:2004.07219), with the reference returns
measured locally by ``datasets/build_mujoco.py`` (the uniform random policy's
and the expert behaviour policy's mean returns over 100 episodes each,
recorded in the dataset cards): 0 is the random policy, 100 the expert that
made the ``*-expert-v0`` data. D4RL's own reference returns (its MuJoCo 1.5
environments and its experts) are not these: scores are comparable between
libraries on offrl's data, not with D4RL's published tables.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Sequence, Tuple, Union

import numpy as np

__all__ = ["ENV_IDS", "KINDS", "RECIPE_VERSION", "RECIPE_VERSIONS", "REFERENCE_RETURNS", "dataset_name",
           "get_normalized_score", "mujoco_dataset_names"]

#: the version of every recipe not listed in ``RECIPE_VERSIONS``
RECIPE_VERSION = "v0"
#: ``{"<env>-<kind>": version}`` of the recipes changed since they were
#: first shipped (a new behaviour policy is a new recipe: a new name, never
#: other data under an old one); ``datasets/mujoco_behaviour.py
#: ship-expert`` writes the same table into the environment's behaviour record
#: (``recipe_versions``), and a test holds the two equal
RECIPE_VERSIONS: Dict[str, str] = {}
ENV_IDS = {"hopper": "Hopper-v5", "halfcheetah": "HalfCheetah-v5", "walker2d": "Walker2d-v5"}
KINDS = ("random", "medium", "medium-replay", "medium-expert", "expert")

#: the figures ``datasets/build_mujoco.py`` measured (reference returns, each
#: dataset's default build), shipped beside the behaviour policies
REFERENCE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "datasets", "behaviour", "reference.json")


def reference_figures() -> Dict[str, Any]:
    """``{"returns": {env: [random, expert]}, "details": ..., "datasets": ...}``
    as recorded (empty before the first measurement)."""
    from ._safety import load_json

    if not os.path.isfile(REFERENCE_FILE):
        return {"returns": {}, "details": {}, "datasets": {}}
    with open(REFERENCE_FILE, "rb") as f:
        return load_json(f.read(), REFERENCE_FILE)


#: ``{env: (random return, expert return)}``, measured (see the cards)
REFERENCE_RETURNS: Dict[str, Tuple[float, float]] = {
    env: (float(low), float(high)) for env, (low, high) in reference_figures()["returns"].items()
}


def dataset_name(env: str, kind: str) -> str:
    """The name offrl builds ``kind`` of ``env`` under (``hopper-medium-v0``)."""
    return f"{env}-{kind}-{RECIPE_VERSIONS.get(f'{env}-{kind}', RECIPE_VERSION)}"


def mujoco_dataset_names() -> List[str]:
    """Every locomotion dataset name (``hopper-medium-v0``, ...)."""
    return [dataset_name(env, kind) for env in ENV_IDS for kind in KINDS]


def environment_of(name: Any) -> str:
    """``hopper`` for ``hopper``, ``Hopper-v5`` or ``hopper-medium-v0``."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    if name in ENV_IDS:
        return name
    for env, env_id in ENV_IDS.items():
        if name == env_id or name in (dataset_name(env, kind) for kind in KINDS):
            return env
    raise ValueError(f"no reference returns for {name!r}; known: {', '.join(list(ENV_IDS) + mujoco_dataset_names())}")


def get_normalized_score(name: str, returns: Union[float, Sequence[float], np.ndarray]) -> Any:
    """D4RL's normalised score of ``returns`` (a number, or an array of
    them) on the environment of ``name`` (``hopper-medium-v0``, ``hopper``
    or ``Hopper-v5``): a float for a number, an array for an array."""
    env = environment_of(name)
    if env not in REFERENCE_RETURNS:
        raise ValueError(f"no reference returns recorded for {env!r} yet (datasets/build_mujoco.py measures them)")
    random_return, expert_return = REFERENCE_RETURNS[env]
    try:
        values = np.asarray(returns, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"returns must be a number or an array of numbers, got {type(returns).__name__}") from None
    if not np.all(np.isfinite(values)):
        raise ValueError(f"returns must be finite, got {returns!r}")
    scores = 100.0 * (values - random_return) / (expert_return - random_return)
    return float(scores) if scores.ndim == 0 else scores
