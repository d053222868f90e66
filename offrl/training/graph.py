"""``compile_graph=True``: the update step compiled with ``torch.compile``.

The base class calls :func:`compiled_step` for the first training step of a
config with ``compile_graph=True`` (and again after the networks are
rebuilt). It compiles the algorithm's ``_update`` (every loss computation,
whatever network methods it calls; ``mode="reduce-overhead"``, i.e. CUDA
graphs, on CUDA only) while the optimizer steps run eagerly (they are
already fused kernels, and tracing them would recompile per parameter
list). ``backward()`` splits the traced code into graphs; the backward
passes are compiled by AOTAutograd.

Compiling happens lazily, during the first step. If it fails (no C
compiler, an operation the compiler does not support, a shape it cannot
handle), the state from before the step is restored (weights, optimizer
states, counters, torch's random state), the algorithm continues eagerly
and ONE warning per process says why: compiling never stops training.

Inductor's ``fallback_random`` is switched on (process-wide) so that random
draws inside compiled code (policy sampling, noise) are torch's eager ones:
a compiled run gives the eager results within float tolerance.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any, Callable

import torch

__all__ = ["compiled_step", "compile_mode"]

#: the "compiling failed" warning has been given in this process
_WARNED = False


def compile_mode(device: torch.device) -> str:
    """``"reduce-overhead"`` (CUDA graphs) on CUDA, ``"default"`` elsewhere."""
    return "reduce-overhead" if device.type == "cuda" else "default"


def _warn(error: BaseException) -> None:
    global _WARNED
    if not _WARNED:
        _WARNED = True
        warnings.warn(f"compile_graph=True: torch.compile failed ({type(error).__name__}: {str(error)[:300]}); "
                      "the update step runs eagerly", UserWarning, stacklevel=4)


def _eager_optimizer_steps(algo: Any) -> None:
    for wrapper in algo.optimizers.values():
        step = vars(wrapper).get("step") or type(wrapper).step.__get__(wrapper)
        if not getattr(step, "_offrl_eager", False):
            eager = torch._dynamo.disable(step)
            eager._offrl_eager = True  # type: ignore[attr-defined]
            wrapper.step = eager


def compiled_step(algo: Any, update: Callable[..., Any], run: Callable[[Callable[..., Any]], Any]) -> Callable[..., Any]:
    """Compile ``update`` (the algorithm's bound ``_update``) and run one
    step with it through ``run(fn)``; returns ``(fn_to_keep, result)``
    where ``fn_to_keep`` is the compiled function, or ``update`` itself
    after a failure (then the step was rerun eagerly from the restored
    state)."""
    saved = copy.deepcopy(algo.get_state())  # state_dict()s hold references to the live tensors
    rng = torch.random.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        _eager_optimizer_steps(algo)
        import torch._inductor.config as inductor_config

        inductor_config.fallback_random = True  # random draws as in eager mode, so results match it
        fn = torch.compile(update, mode=compile_mode(algo.device))
        return fn, run(fn)
    except Exception as error:  # noqa: BLE001 - any compiler failure falls back to eager
        algo.load_state(saved, "the state before compiling")
        torch.random.set_rng_state(rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
        _warn(error)
        return update, run(update)
