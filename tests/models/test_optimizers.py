"""Optimizer factories: the torch optimizer and hyperparameters each one
builds, GPT-style weight-decay groups, gradient clipping, ``reset``, the
fast (fused / foreach) kernels, JSON round trips and bad input.

Update rules are checked against the textbook formulas on one step, written
out by hand (first Adam step: ``lr * g / (|g| + eps)``)."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
from torch import nn

from offrl.models import AdamFactory, GPTAdamWFactory, OptimizerFactory, RMSpropFactory, SGDFactory
from offrl.serialization import from_json_value


def named_linear(seed: int = 0) -> list:
    """``(name, parameter)`` pairs of a 3 -> 2 linear layer."""
    torch.manual_seed(seed)
    return list(nn.Linear(3, 2).named_parameters())


def set_grads(named: list, seed: int = 1) -> list:
    """Give every parameter a fixed random gradient; return the gradients."""
    gen = torch.Generator().manual_seed(seed)
    grads = []
    for _, p in named:
        p.grad = torch.randn(p.shape, generator=gen)
        grads.append(p.grad.clone())
    return grads


def group_values(optim: torch.optim.Optimizer, keys: tuple) -> tuple:
    group = optim.param_groups[0]
    return tuple(group[k] for k in keys)


@pytest.mark.parametrize(
    "factory,cls,keys,values",
    [
        (SGDFactory(momentum=0.5, dampening=0.1, weight_decay=0.01), torch.optim.SGD,
         ("momentum", "dampening", "weight_decay", "nesterov"), (0.5, 0.1, 0.01, False)),
        (SGDFactory(momentum=0.9, nesterov=True), torch.optim.SGD, ("momentum", "nesterov"), (0.9, True)),
        (AdamFactory(betas=(0.8, 0.99), eps=1e-6, weight_decay=0.02, amsgrad=True), torch.optim.Adam,
         ("betas", "eps", "weight_decay", "amsgrad"), ((0.8, 0.99), 1e-6, 0.02, True)),
        (RMSpropFactory(alpha=0.9, eps=0.1, weight_decay=0.03, momentum=0.2, centered=False), torch.optim.RMSprop,
         ("alpha", "eps", "weight_decay", "momentum", "centered"), (0.9, 0.1, 0.03, 0.2, False)),
        (GPTAdamWFactory(betas=(0.7, 0.8), eps=1e-5), torch.optim.AdamW, ("betas", "eps", "amsgrad"), ((0.7, 0.8), 1e-5, False)),
        (OptimizerFactory(torch.optim.Adagrad, lr_decay=0.25), torch.optim.Adagrad, ("lr_decay",), (0.25,)),
        (OptimizerFactory("RMSprop", alpha=0.5), torch.optim.RMSprop, ("alpha",), (0.5,)),
    ],
)
def test_factory_builds_its_optimizer_with_the_configured_hyperparameters(factory, cls, keys, values):
    named = named_linear()
    wrapper = factory.create(named, lr=0.123)
    assert type(wrapper.optim) is cls
    assert group_values(wrapper.optim, keys) == values
    assert all(group["lr"] == 0.123 for group in wrapper.optim.param_groups)
    covered = [p for group in wrapper.optim.param_groups for p in group["params"]]
    assert {id(p) for p in covered} == {id(p) for _, p in named}


def test_defaults_mirror_d3rlpy():
    assert (SGDFactory().momentum, SGDFactory().weight_decay, SGDFactory().nesterov) == (0.0, 0.0, False)
    assert (AdamFactory().betas, AdamFactory().eps, AdamFactory().weight_decay, AdamFactory().amsgrad) == ((0.9, 0.999), 1e-8, 0.0, False)
    r = RMSpropFactory()
    assert (r.alpha, r.eps, r.weight_decay, r.momentum, r.centered) == (0.95, 1e-2, 0.0, 0.0, True)
    g = GPTAdamWFactory()
    assert (g.betas, g.eps, g.weight_decay, g.amsgrad) == ((0.9, 0.999), 1e-8, 0.0, False)
    assert all(f.clip_grad_norm is None for f in (SGDFactory(), AdamFactory(), RMSpropFactory(), g, OptimizerFactory()))
    assert all(isinstance(f, OptimizerFactory) for f in (SGDFactory(), AdamFactory(), RMSpropFactory(), g))


def test_frozen_parameters_are_left_out():
    named = named_linear()
    named[1][1].requires_grad_(False)  # the bias
    wrapper = AdamFactory().create(named, lr=1e-3)
    assert [id(p) for p in wrapper.optim.param_groups[0]["params"]] == [id(named[0][1])]
    assert wrapper.params == [named[0][1]]


class _WithEmbedding(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(4, 3)
        self.fc = nn.Linear(3, 3)
        self.norm = nn.LayerNorm(3)
        self.conv = nn.Conv2d(1, 2, 2)


def test_gpt_adamw_decays_only_linear_and_conv_weights():
    module = _WithEmbedding()
    wrapper = GPTAdamWFactory(weight_decay=0.3).create(module.named_parameters(), lr=1e-3)
    decay, no_decay = wrapper.optim.param_groups
    assert (decay["weight_decay"], no_decay["weight_decay"]) == (0.3, 0.0)
    assert {id(p) for p in decay["params"]} == {id(module.fc.weight), id(module.conv.weight)}
    expected = [module.embed.weight, module.fc.bias, module.norm.weight, module.norm.bias, module.conv.bias]
    assert {id(p) for p in no_decay["params"]} == {id(p) for p in expected}


def test_sgd_step_with_weight_decay_and_momentum_matches_the_formula():
    lr, wd, momentum = 0.1, 0.05, 0.9
    named = named_linear()
    before = [p.detach().clone() for _, p in named]
    wrapper = SGDFactory(momentum=momentum, weight_decay=wd).create(named, lr=lr)
    grads = set_grads(named)
    wrapper.step()
    # first step: the momentum buffer is the (decayed) gradient itself
    for (_, p), p0, g in zip(named, before, grads):
        torch.testing.assert_close(p.detach(), p0 - lr * (g + wd * p0), rtol=1e-5, atol=1e-7)
    grads2 = set_grads(named, seed=2)
    mid = [p.detach().clone() for _, p in named]
    wrapper.step()
    for (_, p), p0, p1, g, g2 in zip(named, before, mid, grads, grads2):
        buf = momentum * (g + wd * p0) + (g2 + wd * p1)
        torch.testing.assert_close(p.detach(), p1 - lr * buf, rtol=1e-5, atol=1e-7)


def test_first_adam_step_is_lr_times_g_over_abs_g_plus_eps():
    lr, eps = 0.01, 0.5  # a large eps so the step is not just lr * sign(g)
    named = named_linear()
    before = [p.detach().clone() for _, p in named]
    wrapper = AdamFactory(eps=eps).create(named, lr=lr)
    grads = set_grads(named)
    wrapper.step()
    for (_, p), p0, g in zip(named, before, grads):
        torch.testing.assert_close(p.detach(), p0 - lr * g / (g.abs() + eps), rtol=1e-5, atol=1e-7)


def test_clip_grad_norm_rescales_the_joint_gradient():
    clip, lr = 0.5, 1.0
    named = named_linear()
    before = [p.detach().clone() for _, p in named]
    wrapper = SGDFactory(clip_grad_norm=clip).create(named, lr=lr)
    grads = set_grads(named)
    norm = math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads))
    assert norm > clip, "the test needs a gradient longer than the clip"
    wrapper.step()
    scale = clip / (norm + 1e-6)
    for (_, p), p0, g in zip(named, before, grads):
        torch.testing.assert_close(p.detach(), p0 - lr * scale * g, rtol=1e-5, atol=1e-6)
    # a gradient shorter than the clip is left alone
    short = SGDFactory(clip_grad_norm=1e6).create(named, lr=lr)
    start = [p.detach().clone() for _, p in named]
    grads = set_grads(named, seed=3)
    short.step()
    for (_, p), p0, g in zip(named, start, grads):
        torch.testing.assert_close(p.detach(), p0 - lr * g, rtol=1e-5, atol=1e-6)


def test_zero_grad_clears_gradients():
    named = named_linear()
    wrapper = AdamFactory().create(named, lr=1e-3)
    set_grads(named)
    wrapper.zero_grad()
    assert all(p.grad is None for _, p in named)


def test_reset_forgets_moments_so_the_next_step_is_a_first_step():
    lr, eps = 0.01, 0.5
    named = named_linear()
    wrapper = AdamFactory(eps=eps).create(named, lr=lr)
    for seed in (1, 2, 3):
        set_grads(named, seed=seed)
        wrapper.step()
    assert len(wrapper.optim.state) == 2
    wrapper.reset()
    assert len(wrapper.optim.state) == 0
    before = [p.detach().clone() for _, p in named]
    grads = set_grads(named, seed=4)
    wrapper.step()
    for (_, p), p0, g in zip(named, before, grads):
        torch.testing.assert_close(p.detach(), p0 - lr * g / (g.abs() + eps), rtol=1e-5, atol=1e-7)
    assert all(float(s["step"]) == 1.0 for s in wrapper.optim.state.values())


def test_state_dict_round_trip_continues_identically():
    named_a, named_b = named_linear(), named_linear()
    a = AdamFactory().create(named_a, lr=0.01)
    b = AdamFactory().create(named_b, lr=0.01)
    for seed in (1, 2):
        set_grads(named_a, seed=seed)
        set_grads(named_b, seed=seed)
        a.step()
    with torch.no_grad():
        for (_, pa), (_, pb) in zip(named_a, named_b):
            pb.copy_(pa)
    # torch's load_state_dict keeps same-device tensors as they are: without
    # the deep copy b's moments would be a's and a.step() would move both
    b.load_state_dict(copy.deepcopy(a.state_dict()))
    set_grads(named_a, seed=5)
    set_grads(named_b, seed=5)
    a.step()
    b.step()
    for (_, pa), (_, pb) in zip(named_a, named_b):
        assert torch.equal(pa, pb)  # same op, same inputs, same state


def test_fast_kernels_are_chosen_unless_the_user_picks_one():
    named = named_linear()
    assert AdamFactory().create(named, lr=1e-3).optim.defaults["fused"] is True
    assert SGDFactory().create(named, lr=1e-3).optim.defaults["fused"] is True
    rms = RMSpropFactory().create(named, lr=1e-3).optim.defaults
    assert rms["foreach"] is True and not rms.get("fused")  # RMSprop has no fused kernel
    mine = OptimizerFactory("Adam", foreach=False).create(named, lr=1e-3).optim.defaults
    assert mine["foreach"] is False and not mine["fused"]


@pytest.mark.parametrize(
    "factory",
    [
        SGDFactory(momentum=0.5, dampening=0.1, weight_decay=0.01, nesterov=False, clip_grad_norm=2.0),
        AdamFactory(betas=(0.8, 0.99), eps=1e-6, weight_decay=0.02, amsgrad=True, clip_grad_norm=1.0),
        RMSpropFactory(alpha=0.9, eps=0.1, weight_decay=0.03, momentum=0.2, centered=False),
        GPTAdamWFactory(betas=(0.7, 0.8), eps=1e-5, weight_decay=0.4, clip_grad_norm=0.5),
        OptimizerFactory(torch.optim.Adagrad, clip_grad_norm=3.0, lr_decay=0.25),
        OptimizerFactory("AdamW", betas=(0.5, 0.6), weight_decay=0.7),
    ],
)
def test_factories_round_trip_through_json(factory):
    data = json.loads(json.dumps(factory.to_dict()))
    again = type(factory).from_dict(data)
    assert again == factory and type(again) is type(factory)
    assert from_json_value(data) == factory  # found by its registered type name
    built_a = factory.create(named_linear(), lr=0.1).optim
    built_b = again.create(named_linear(), lr=0.1).optim
    assert type(built_a) is type(built_b)
    for ga, gb in zip(built_a.param_groups, built_b.param_groups):
        assert {k: v for k, v in ga.items() if k != "params"} == {k: v for k, v in gb.items() if k != "params"}


def test_equality_distinguishes_hyperparameters():
    assert AdamFactory(eps=1e-6) != AdamFactory(eps=1e-7)
    assert OptimizerFactory("Adam", weight_decay=0.1) != OptimizerFactory("Adam", weight_decay=0.2)
    assert OptimizerFactory(torch.optim.Adam) == OptimizerFactory("Adam")


def test_bad_optimizer_names_and_types():
    with pytest.raises(ValueError, match="NoSuchOptim"):
        OptimizerFactory("NoSuchOptim")
    with pytest.raises(ValueError, match="lr_scheduler"):
        OptimizerFactory("lr_scheduler")  # in torch.optim, but not an optimizer
    with pytest.raises(TypeError, match="optim_cls"):
        OptimizerFactory(42)

    class MyAdam(torch.optim.Adam):
        pass

    with pytest.raises(ValueError, match="MyAdam"):
        OptimizerFactory(MyAdam)  # could not be rebuilt from its name


def test_loading_never_imports_what_a_record_names():
    record = {"kind": "optimizer", "type": "optimizer", "params": {"optim_cls": "os.system", "clip_grad_norm": None, "kwargs": {}}}
    with pytest.raises(ValueError, match="os.system"):
        OptimizerFactory.from_dict(record)
    with pytest.raises(ValueError, match="sgd"):
        AdamFactory.from_dict(SGDFactory().to_dict())
    with pytest.raises(ValueError, match="bogus"):
        AdamFactory.from_dict({"kind": "optimizer", "type": "adam", "params": {"bogus": 1}})
