"""Builders of networks.

* offrl's own, for the algorithms that build alike: SAC's squashed-Gaussian
  policy (also BEAR's) and the critic ensemble with its frozen target copy
  (SAC, CQL, AWAC, BEAR): :func:`build_normal_policy`, :func:`build_critics`.
* d3rlpy 2.8.1's (``d3rlpy.models.builders``), for algorithms written on
  d3rlpy's torch layer (:mod:`offrl.models.torch`): ``create_*`` with
  d3rlpy's arguments, returning d3rlpy-style modules on ``device``.

``enable_ddp`` is accepted as d3rlpy's builders take it, but no module is
wrapped in ``DistributedDataParallel``: under ``torchrun`` offrl averages
the gradients of every network of an algorithm's ``Modules`` holder at
each optimizer step (see :mod:`offrl.training.distributed`), which covers
the modules these builders return once they are in the holder.
"""

from __future__ import annotations

import copy
import math
from typing import Any, List, Sequence, Tuple

import torch
from torch import nn

from ..constants import PositionEncodingType
from .encoders import EncoderFactory, compute_output_size
from .modules import freeze
from .policies import NormalPolicy as OffrlNormalPolicy
from .q_functions import QFunction, QFunctionFactory
from .torch.imitators import VAEDecoder, VAEEncoder
from .torch.parameters import Parameter
from .torch.policies import CategoricalPolicy, DeterministicPolicy, DeterministicResidualPolicy, NormalPolicy
from .torch.q_functions import ContinuousEnsembleQFunctionForwarder, DiscreteEnsembleQFunctionForwarder
from .torch.transformers import ContinuousDecisionTransformer, DiscreteDecisionTransformer
from .torch.v_functions import ValueFunction
from .transformers import activation as activation_module
from .transformers import create_position_encoding

__all__ = [
    "build_normal_policy",
    "build_critics",
    "create_discrete_q_function",
    "create_continuous_q_function",
    "create_deterministic_policy",
    "create_deterministic_residual_policy",
    "create_categorical_policy",
    "create_normal_policy",
    "create_vae_encoder",
    "create_vae_decoder",
    "create_value_function",
    "create_parameter",
    "create_continuous_decision_transformer",
    "create_discrete_decision_transformer",
]


def build_normal_policy(encoder_factory: EncoderFactory, observation_shape: Any, action_size: int) -> OffrlNormalPolicy:
    """A state-dependent Gaussian policy with ``logstd`` in ``[-20, 2]``."""
    encoder = encoder_factory.create(observation_shape)
    return OffrlNormalPolicy(encoder, compute_output_size(encoder, observation_shape), action_size, min_logstd=-20.0,
                             max_logstd=2.0)


def build_critics(config: Any, observation_shape: Any, action_size: int) -> Tuple[QFunction, QFunction]:
    """The continuous-action critic ensemble of a config with
    ``q_func_factory``, ``critic_encoder_factory`` and ``n_critics``, and
    its (frozen) target copy."""
    q = config.q_func_factory.create(config.critic_encoder_factory, observation_shape, action_size, int(config.n_critics), discrete=False)
    return q, freeze(copy.deepcopy(q))


# ------------------------------------------------------------- d3rlpy's
def _check(encoder_factory: Any, action_size: Any, enable_ddp: Any, who: str) -> None:
    if not isinstance(encoder_factory, EncoderFactory):
        raise TypeError(f"{who}: encoder_factory must be an EncoderFactory, got {type(encoder_factory).__name__}")
    if action_size is not None and (isinstance(action_size, bool) or not isinstance(action_size, int) or action_size <= 0):
        raise ValueError(f"{who}: action_size must be a positive int, got {action_size!r}")
    if not isinstance(enable_ddp, bool):
        raise TypeError(f"{who}: enable_ddp must be True or False, got {enable_ddp!r}")


def _placed(module: nn.Module, device: str) -> Any:
    return module.to(torch.device(device))


def _ensemble_size(n_ensembles: Any, who: str) -> int:
    if isinstance(n_ensembles, bool) or not isinstance(n_ensembles, int) or n_ensembles <= 0:
        raise ValueError(f"{who}: n_ensembles must be a positive int, got {n_ensembles!r}")
    return n_ensembles


def _shared_gradient_scale(encoder: nn.Module, n_ensembles: int) -> None:
    """A shared encoder gets the mean, not the sum, of its members' gradients."""
    for p in encoder.parameters():
        p.register_hook(lambda grad: grad / n_ensembles)


def create_discrete_q_function(observation_shape: Any, action_size: int, encoder_factory: EncoderFactory,
                               q_func_factory: QFunctionFactory, device: str, enable_ddp: bool,
                               n_ensembles: int = 1) -> Tuple[nn.ModuleList, DiscreteEnsembleQFunctionForwarder]:
    """``n_ensembles`` discrete-action Q-functions (one encoder each, or one
    shared when ``q_func_factory.share_encoder``) and their ensemble
    forwarder."""
    _check(encoder_factory, action_size, enable_ddp, "create_discrete_q_function")
    n = _ensemble_size(n_ensembles, "create_discrete_q_function")
    if not isinstance(q_func_factory, QFunctionFactory):
        raise TypeError(f"create_discrete_q_function: q_func_factory must be a QFunctionFactory, got {type(q_func_factory).__name__}")
    shared = encoder_factory.create(observation_shape) if q_func_factory.share_encoder else None
    if shared is not None:
        _shared_gradient_scale(shared, n)
    q_funcs: List[nn.Module] = []
    forwarders = []
    for _ in range(n):
        encoder = shared if shared is not None else encoder_factory.create(observation_shape)
        q_func, forwarder = q_func_factory.create_discrete(encoder, compute_output_size([observation_shape], encoder),
                                                           action_size)
        q_funcs.append(_placed(q_func, device))
        forwarders.append(forwarder)
    return nn.ModuleList(q_funcs), DiscreteEnsembleQFunctionForwarder(forwarders, action_size)


def create_continuous_q_function(observation_shape: Any, action_size: int, encoder_factory: EncoderFactory,
                                 q_func_factory: QFunctionFactory, device: str, enable_ddp: bool,
                                 n_ensembles: int = 1) -> Tuple[nn.ModuleList, ContinuousEnsembleQFunctionForwarder]:
    """``n_ensembles`` continuous-action Q-functions and their ensemble
    forwarder (see :func:`create_discrete_q_function`)."""
    _check(encoder_factory, action_size, enable_ddp, "create_continuous_q_function")
    n = _ensemble_size(n_ensembles, "create_continuous_q_function")
    if not isinstance(q_func_factory, QFunctionFactory):
        raise TypeError(f"create_continuous_q_function: q_func_factory must be a QFunctionFactory, got {type(q_func_factory).__name__}")
    shared = encoder_factory.create_with_action(observation_shape, action_size) if q_func_factory.share_encoder else None
    if shared is not None:
        _shared_gradient_scale(shared, n)
    q_funcs: List[nn.Module] = []
    forwarders = []
    for _ in range(n):
        encoder = shared if shared is not None else encoder_factory.create_with_action(observation_shape, action_size)
        hidden_size = compute_output_size([observation_shape, (action_size,)], encoder)
        q_func, forwarder = q_func_factory.create_continuous(encoder, hidden_size)
        q_funcs.append(_placed(q_func, device))
        forwarders.append(forwarder)
    return nn.ModuleList(q_funcs), ContinuousEnsembleQFunctionForwarder(forwarders, action_size)


def create_deterministic_policy(observation_shape: Any, action_size: int, encoder_factory: EncoderFactory,
                                device: str, enable_ddp: bool) -> DeterministicPolicy:
    _check(encoder_factory, action_size, enable_ddp, "create_deterministic_policy")
    encoder = encoder_factory.create(observation_shape)
    return _placed(DeterministicPolicy(encoder, compute_output_size([observation_shape], encoder), action_size), device)


def create_deterministic_residual_policy(observation_shape: Any, action_size: int, scale: float,
                                         encoder_factory: EncoderFactory, device: str,
                                         enable_ddp: bool) -> DeterministicResidualPolicy:
    _check(encoder_factory, action_size, enable_ddp, "create_deterministic_residual_policy")
    encoder = encoder_factory.create_with_action(observation_shape, action_size)
    hidden_size = compute_output_size([observation_shape, (action_size,)], encoder)
    return _placed(DeterministicResidualPolicy(encoder, hidden_size, action_size, scale), device)


def create_normal_policy(observation_shape: Any, action_size: int, encoder_factory: EncoderFactory, device: str,
                         enable_ddp: bool, min_logstd: float = -20.0, max_logstd: float = 2.0,
                         use_std_parameter: bool = False) -> NormalPolicy:
    _check(encoder_factory, action_size, enable_ddp, "create_normal_policy")
    encoder = encoder_factory.create(observation_shape)
    policy = NormalPolicy(encoder, compute_output_size([observation_shape], encoder), action_size, min_logstd,
                          max_logstd, use_std_parameter)
    return _placed(policy, device)


def create_categorical_policy(observation_shape: Any, action_size: int, encoder_factory: EncoderFactory, device: str,
                              enable_ddp: bool) -> CategoricalPolicy:
    _check(encoder_factory, action_size, enable_ddp, "create_categorical_policy")
    encoder = encoder_factory.create(observation_shape)
    return _placed(CategoricalPolicy(encoder, compute_output_size([observation_shape], encoder), action_size), device)


def create_vae_encoder(observation_shape: Any, action_size: int, latent_size: int, encoder_factory: EncoderFactory,
                       device: str, enable_ddp: bool, min_logstd: float = -20.0, max_logstd: float = 2.0) -> VAEEncoder:
    _check(encoder_factory, action_size, enable_ddp, "create_vae_encoder")
    encoder = encoder_factory.create_with_action(observation_shape, action_size)
    hidden_size = compute_output_size([observation_shape, (action_size,)], encoder)
    return _placed(VAEEncoder(encoder, hidden_size, latent_size, min_logstd, max_logstd), device)


def create_vae_decoder(observation_shape: Any, action_size: int, latent_size: int, encoder_factory: EncoderFactory,
                       device: str, enable_ddp: bool) -> VAEDecoder:
    _check(encoder_factory, action_size, enable_ddp, "create_vae_decoder")
    if isinstance(latent_size, bool) or not isinstance(latent_size, int) or latent_size <= 0:
        raise ValueError(f"create_vae_decoder: latent_size must be a positive int, got {latent_size!r}")
    encoder = encoder_factory.create_with_action(observation_shape, latent_size)
    hidden_size = compute_output_size([observation_shape, (latent_size,)], encoder)
    return _placed(VAEDecoder(encoder, hidden_size, action_size), device)


def create_value_function(observation_shape: Any, encoder_factory: EncoderFactory, device: str,
                          enable_ddp: bool) -> ValueFunction:
    _check(encoder_factory, None, enable_ddp, "create_value_function")
    encoder = encoder_factory.create(observation_shape)
    return _placed(ValueFunction(encoder, compute_output_size([observation_shape], encoder)), device)


def create_parameter(shape: Sequence[int], initial_value: float, device: str, enable_ddp: bool) -> Parameter:
    """A :class:`~offrl.models.torch.parameters.Parameter` of ``shape``
    filled with ``initial_value`` (float32)."""
    if not isinstance(enable_ddp, bool):
        raise TypeError(f"create_parameter: enable_ddp must be True or False, got {enable_ddp!r}")
    if isinstance(initial_value, bool) or not isinstance(initial_value, (int, float)) or not math.isfinite(initial_value):
        raise ValueError(f"create_parameter: initial_value must be a finite number, got {initial_value!r}")
    data = torch.full(tuple(int(s) for s in shape), float(initial_value), dtype=torch.float32)
    return _placed(Parameter(data), device)


def _decision_transformer_parts(observation_shape: Any, encoder_factory: EncoderFactory, max_timestep: int,
                                context_size: int, position_encoding_type: PositionEncodingType) -> Tuple[Any, int, Any]:
    encoder = encoder_factory.create(observation_shape)
    hidden_size = compute_output_size([observation_shape], encoder)
    if isinstance(max_timestep, bool) or not isinstance(max_timestep, int) or max_timestep <= 0:
        raise ValueError(f"max_timestep must be a positive int, got {max_timestep!r}")
    # timesteps 0..max_timestep + 1, as d3rlpy's builders size the embedding table
    position = create_position_encoding(PositionEncodingType(position_encoding_type), hidden_size, max_timestep + 1,
                                        context_size)
    return encoder, hidden_size, position


def create_continuous_decision_transformer(
    observation_shape: Any, action_size: int, encoder_factory: EncoderFactory, num_heads: int, max_timestep: int,
    num_layers: int, context_size: int, attn_dropout: float, resid_dropout: float, embed_dropout: float,
    activation_type: str, position_encoding_type: PositionEncodingType, device: str, enable_ddp: bool,
) -> ContinuousDecisionTransformer:
    return _decision_transformer(
        ContinuousDecisionTransformer, "create_continuous_decision_transformer", observation_shape, action_size,
        encoder_factory, num_heads, max_timestep, num_layers, context_size, attn_dropout, resid_dropout,
        embed_dropout, [activation_type], position_encoding_type, device, enable_ddp,
    )


def create_discrete_decision_transformer(
    observation_shape: Any, action_size: int, encoder_factory: EncoderFactory, num_heads: int, max_timestep: int,
    num_layers: int, context_size: int, attn_dropout: float, resid_dropout: float, embed_dropout: float,
    activation_type: str, embed_activation_type: str, position_encoding_type: PositionEncodingType, device: str,
    enable_ddp: bool,
) -> DiscreteDecisionTransformer:
    return _decision_transformer(
        DiscreteDecisionTransformer, "create_discrete_decision_transformer", observation_shape, action_size,
        encoder_factory, num_heads, max_timestep, num_layers, context_size, attn_dropout, resid_dropout,
        embed_dropout, [activation_type, embed_activation_type], position_encoding_type, device, enable_ddp,
    )


def _decision_transformer(cls: Any, name: str, observation_shape: Any, action_size: int,
                          encoder_factory: EncoderFactory, num_heads: int, max_timestep: int, num_layers: int,
                          context_size: int, attn_dropout: float, resid_dropout: float, embed_dropout: float,
                          activation_types: Sequence[str], position_encoding_type: PositionEncodingType, device: str,
                          enable_ddp: bool) -> Any:
    """A Decision Transformer of ``cls`` (its activations by name: the
    blocks', then the discrete one's embedding activation)."""
    _check(encoder_factory, action_size, enable_ddp, name)
    encoder, hidden_size, position = _decision_transformer_parts(observation_shape, encoder_factory, max_timestep,
                                                                 context_size, position_encoding_type)
    transformer = cls(
        encoder, hidden_size, position, action_size, num_heads, context_size, num_layers, attn_dropout,
        resid_dropout, embed_dropout, *[activation_module(t) for t in activation_types],
    )
    return _placed(transformer, device)
