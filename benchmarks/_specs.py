"""What the speed benchmarks build, shared by ``algos.py``,
``transformers.py`` and ``head_to_head.py``: the algorithm specs at their
documented defaults, the set-up ``fit`` does besides building, and the
Decision Transformer family's synthetic data and builder."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from typing import Any, Dict, Optional, Tuple

import numpy as np

from _harness import SEED


@dataclasses.dataclass(frozen=True)
class AlgoSpec:
    name: str
    module: str  # offrl module holding the config
    config: str  # config class name, in offrl and in d3rlpy.algos
    data: str  # "pendulum" or "cartpole"
    d3rlpy_earlier: float  # d3rlpy updates/s measured earlier on this machine (the figure)
    target_ratio: float  # offrl / d3rlpy updates per second


ALGOS: Tuple[AlgoSpec, ...] = (
    AlgoSpec("BC", "offrl.algos.bc", "BCConfig", "pendulum", 173.0, 2.0),
    AlgoSpec("TD3PlusBC", "offrl.algos.td3_plus_bc", "TD3PlusBCConfig", "pendulum", 45.0, 1.6),
    AlgoSpec("IQL", "offrl.algos.iql", "IQLConfig", "pendulum", 35.0, 1.6),
    AlgoSpec("SAC", "offrl.algos.sac", "SACConfig", "pendulum", 35.0, 1.6),
    AlgoSpec("CQL", "offrl.algos.cql", "CQLConfig", "pendulum", 6.2, 1.4),
    AlgoSpec("DQN", "offrl.algos.dqn", "DQNConfig", "cartpole", 205.0, 2.0),
    AlgoSpec("DiscreteCQL", "offrl.algos.cql", "DiscreteCQLConfig", "cartpole", 161.0, 2.0),
    # d3rlpy_earlier: nan where no earlier figure exists (the run measures d3rlpy beside offrl)
    AlgoSpec("DDPG", "offrl.algos.ddpg", "DDPGConfig", "pendulum", float("nan"), 1.5),
    AlgoSpec("TD3", "offrl.algos.td3", "TD3Config", "pendulum", float("nan"), 1.5),
    AlgoSpec("NFQ", "offrl.algos.nfq", "NFQConfig", "cartpole", float("nan"), 1.5),
    AlgoSpec("DiscreteSAC", "offrl.algos.discrete_sac", "DiscreteSACConfig", "cartpole", float("nan"), 1.5),
    AlgoSpec("CalQL", "offrl.algos.calql", "CalQLConfig", "pendulum", float("nan"), 1.3),
    AlgoSpec("ReBRAC", "offrl.algos.rebrac", "ReBRACConfig", "pendulum", float("nan"), 1.5),
    AlgoSpec("AWAC", "offrl.algos.awac", "AWACConfig", "pendulum", float("nan"), 1.5),
    AlgoSpec("CRR", "offrl.algos.crr", "CRRConfig", "pendulum", float("nan"), 1.5),
    AlgoSpec("PRDC", "offrl.algos.prdc", "PRDCConfig", "pendulum", float("nan"), 1.5),
    AlgoSpec("PLAS", "offrl.algos.plas", "PLASConfig", "pendulum", float("nan"), 1.5),
    AlgoSpec("PLASWithPerturbation", "offrl.algos.plas", "PLASWithPerturbationConfig", "pendulum", float("nan"), 1.5),
    AlgoSpec("BCQ", "offrl.algos.bcq", "BCQConfig", "pendulum", float("nan"), 1.5),
    AlgoSpec("DiscreteBCQ", "offrl.algos.bcq", "DiscreteBCQConfig", "cartpole", float("nan"), 1.5),
    AlgoSpec("BEAR", "offrl.algos.bear", "BEARConfig", "pendulum", float("nan"), 1.5),
)
SPECS = {s.name: s for s in ALGOS}
#: the PLAS family trains only its VAE for its first warmup_steps (500,000 at
#: the defaults), BEAR only the MMD for its policy (40,000): both libraries
#: are timed past it, on the full update
PAST_WARMUP = ("PLAS", "PLASWithPerturbation", "BEAR")


def prepare_offrl(name: str, algo: Any, dataset: Any) -> None:
    """Set-up ``fit`` does besides building: PRDC's neighbour index."""
    if name == "PRDC":
        algo.fit_neighbor_index(dataset)
    if name in PAST_WARMUP:
        algo.set_grad_step(int(algo.config.warmup_steps))


def prepare_d3rlpy(name: str, algo: Any, data: dict) -> None:
    """d3rlpy's counterpart: its PRDC fits the neighbour search in ``fit``
    (scikit-learn, on (beta * observation, action) of every step)."""
    if name == "PRDC":
        algo._nbsr.fit(np.concatenate([data["observations"] * algo.config.beta, data["actions"]], axis=1))
    if name in PAST_WARMUP:
        algo.set_grad_step(int(algo.config.warmup_steps))


def offrl_config_class(spec: AlgoSpec) -> Tuple[Optional[type], Optional[str]]:
    """The config class, or why it is not available yet."""
    if importlib.util.find_spec(spec.module) is None:
        return None, f"{spec.module} does not exist yet"
    try:
        module = importlib.import_module(spec.module)
    except Exception as e:  # a file being written by someone else
        return None, f"import {spec.module} failed: {type(e).__name__}: {e}"
    cls = getattr(module, spec.config, None)
    if cls is None:
        return None, f"{spec.module} has no {spec.config} yet"
    return cls, None


N_EPISODES, EPISODE_LENGTH, OBSERVATION_SIZE, ACTION_SIZE, N_DISCRETE = 50, 200, 17, 6, 4
CONTEXT_SIZE = 20


def make_arrays(discrete: bool) -> Dict[str, np.ndarray]:
    """The synthetic dataset as arrays (the same on both sides)."""
    rng = np.random.default_rng(SEED)
    n = N_EPISODES * EPISODE_LENGTH
    observations = rng.normal(size=(n, OBSERVATION_SIZE)).astype(np.float32)
    if discrete:
        actions = rng.integers(0, N_DISCRETE, size=(n, 1))
    else:
        actions = rng.uniform(-1.0, 1.0, size=(n, ACTION_SIZE)).astype(np.float32)
    rewards = rng.normal(size=(n, 1)).astype(np.float32)
    terminals = np.zeros(n, dtype=np.float32)
    terminals[EPISODE_LENGTH - 1::EPISODE_LENGTH] = 1.0
    return {"observations": observations, "actions": actions, "rewards": rewards, "terminals": terminals}


def build(backend: str, name: str) -> tuple:
    """``(algo, dataset)`` of ``backend`` ("offrl" or "d3rlpy"), built."""
    discrete = name == "DiscreteDecisionTransformer"
    arrays = make_arrays(discrete)
    if backend == "offrl":
        import offrl as lib

        lib.seed(SEED)
        dataset = lib.dataset.MDPDataset(arrays["observations"], arrays["actions"], arrays["rewards"],
                                         arrays["terminals"], action_size=N_DISCRETE if discrete else None)
    else:
        import d3rlpy as lib

        lib.seed(SEED)
        kwargs = {"action_space": lib.ActionSpace.DISCRETE, "action_size": N_DISCRETE} if discrete else {}
        dataset = lib.dataset.MDPDataset(arrays["observations"], arrays["actions"], arrays["rewards"],
                                         arrays["terminals"], **kwargs)
    config = getattr(lib.algos, f"{name}Config")()
    algo = config.create(device="cpu:0")
    algo.build_with_dataset(dataset)
    return algo, dataset
