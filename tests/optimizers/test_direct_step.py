"""``DirectStep``: one optimizer step from gradients given as tensors. For a
plain fused Adam it calls torch's kernel on the optimizer's own state and must
be Adam's step bit for bit; for anything else it must step exactly as the
optimizer wrapper does."""

from __future__ import annotations

import pytest
import torch

from offrl.optimizers import AdamFactory, CosineAnnealingLRFactory, OptimizerFactory
from offrl.optimizers.optimizers import DirectStep


def twin_nets():
    torch.manual_seed(0)
    nets = [torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 4)) for _ in range(2)]
    nets[1].load_state_dict(nets[0].state_dict())
    return nets


def step_both(factory, keep_grads=True, n=4, prepare=None):
    """``n`` steps: ``DirectStep`` on one net, ``.grad`` + ``wrapper.step()``
    on its twin, the same random gradients; returns both wrappers and nets."""
    nets = twin_nets()
    wrappers = [factory.create(list(net.named_parameters()), lr=1e-2) for net in nets]
    if prepare is not None:
        prepare(wrappers)
    direct = DirectStep(wrappers[0], list(nets[0].parameters()), keep_grads=keep_grads)
    g = torch.Generator().manual_seed(3)
    for _ in range(n):
        grads = [torch.randn(p.shape, generator=g) for p in nets[0].parameters()]
        direct([grad.clone() for grad in grads])
        for p, grad in zip(nets[1].parameters(), grads):
            p.grad = grad
        wrappers[1].step()
    return direct, wrappers, nets


def test_the_direct_fused_adam_step_is_adams_own_step():
    direct, wrappers, nets = step_both(AdamFactory(weight_decay=1e-3))
    assert direct._fusable and direct._fused_state() is not None
    for a, b in zip(nets[0].parameters(), nets[1].parameters()):
        assert torch.equal(a, b)
        assert torch.equal(a.grad, b.grad)  # keep_grads: .grad holds the last step's gradient
        sa, sb = wrappers[0].optim.state[a], wrappers[1].optim.state[b]
        assert torch.equal(sa["exp_avg"], sb["exp_avg"]) and torch.equal(sa["exp_avg_sq"], sb["exp_avg_sq"])
        assert int(sa["step"]) == int(sb["step"]) == 4


def test_without_keep_grads_no_gradient_is_left():
    direct, _, nets = step_both(AdamFactory(), keep_grads=False)
    assert all(p.grad is None for p in nets[0].parameters())
    direct, _, nets = step_both(OptimizerFactory("SGD"), keep_grads=False)  # the wrapper's path too
    assert all(p.grad is None for p in nets[0].parameters())


@pytest.mark.parametrize("factory", [
    AdamFactory(clip_grad_norm=0.5),
    AdamFactory(lr_scheduler_factory=CosineAnnealingLRFactory(T_max=3)),
    AdamFactory(amsgrad=True),
    OptimizerFactory("SGD", momentum=0.9),
    OptimizerFactory("RMSprop"),
])
def test_other_optimizers_step_as_the_wrapper_does(factory):
    _, wrappers, nets = step_both(factory)
    for a, b in zip(nets[0].parameters(), nets[1].parameters()):
        assert torch.equal(a, b)
    assert wrappers[0].optim.param_groups[0]["lr"] == wrappers[1].optim.param_groups[0]["lr"]


def test_a_step_hook_and_a_replaced_step_are_honoured():
    seen = []

    def prepare(wrappers):
        wrappers[0].optim.register_step_post_hook(lambda optim, args, kwargs: seen.append("hook"))
        original = type(wrappers[0]).step.__get__(wrappers[0])

        def replaced():
            seen.append("step")
            original()

        wrappers[0].step = replaced  # as torchrun's gradient averaging does

    _, _, nets = step_both(AdamFactory(), prepare=prepare)
    assert seen == ["step", "hook"] * 4
    for a, b in zip(nets[0].parameters(), nets[1].parameters()):
        assert torch.equal(a, b)


def test_params_that_are_not_the_optimizers_group_step_through_the_wrapper():
    nets = twin_nets()
    wrapper = AdamFactory().create(list(nets[0].named_parameters()), lr=1e-2)
    assert not DirectStep(wrapper, list(nets[0].parameters())[:2])._fusable
    assert not DirectStep(wrapper, list(nets[1].parameters()))._fusable


def _wrapper_against_adams_step(prepare=None, n=5, drop=None):
    """``n`` steps of the same gradients: ``wrapper.step()`` on one net and
    torch's own ``Adam.step`` (the wrapper's optimizer called directly) on
    its twin; ``drop``: indices of parameters left without a gradient."""
    nets = twin_nets()
    wrappers = [AdamFactory(weight_decay=1e-3).create(list(net.named_parameters()), lr=1e-2) for net in nets]
    if prepare is not None:
        prepare(wrappers)
    g = torch.Generator().manual_seed(5)
    for _ in range(n):
        grads = [torch.randn(p.shape, generator=g) for p in nets[0].parameters()]
        for net, step in zip(nets, (wrappers[0].step, wrappers[1].optim.step)):
            for i, (p, grad) in enumerate(zip(net.parameters(), grads)):
                p.grad = None if drop and i in drop else grad.clone()
            step()
    return wrappers, nets


def test_the_wrappers_step_is_adams_own_step_bit_for_bit(monkeypatch):
    """``OptimizerWrapper.step`` calls the fused kernel directly from the
    second step (the first initialises Adam's state through ``Adam.step``):
    the weights, moments and step counts equal torch's ``Adam.step``'s."""
    from offrl.optimizers import optimizers

    direct_calls = []
    kernel = optimizers._fused_adam_kernel
    monkeypatch.setattr(optimizers, "_fused_adam_kernel", lambda *a: (direct_calls.append(1), kernel(*a)))
    wrappers, nets = _wrapper_against_adams_step()
    assert wrappers[0]._direct_adam is True and len(direct_calls) == 4
    for a, b in zip(nets[0].parameters(), nets[1].parameters()):
        assert torch.equal(a, b)
        sa, sb = wrappers[0].optim.state[a], wrappers[1].optim.state[b]
        assert torch.equal(sa["exp_avg"], sb["exp_avg"]) and torch.equal(sa["exp_avg_sq"], sb["exp_avg_sq"])
        assert int(sa["step"]) == int(sb["step"]) == 5


def test_a_parameter_without_gradient_and_a_hook_go_through_adams_step():
    """Adam skips a parameter whose ``.grad`` is None (its moments and step
    count stay); the direct call would not, so such a step is Adam's. A step
    hook must run, so with one the step is Adam's too."""
    wrappers, nets = _wrapper_against_adams_step(drop={1})
    for a, b in zip(nets[0].parameters(), nets[1].parameters()):
        assert torch.equal(a, b)
    bias = list(nets[0].parameters())[1]
    assert bias not in wrappers[0].optim.state
    calls = []
    wrappers, nets = _wrapper_against_adams_step(
        prepare=lambda ws: ws[0].optim.register_step_post_hook(lambda optim, args, kwargs: calls.append(1)))
    assert len(calls) == 5
    for a, b in zip(nets[0].parameters(), nets[1].parameters()):
        assert torch.equal(a, b)


def test_a_parameter_group_added_after_the_first_step_is_stepped_by_adam():
    extra = torch.nn.Parameter(torch.ones(3))
    wrappers, nets = _wrapper_against_adams_step(n=2)
    assert wrappers[0]._direct_adam is True
    wrappers[0].optim.add_param_group({"params": [extra]})
    for p in list(nets[0].parameters()) + [extra]:
        p.grad = torch.ones_like(p)
    wrappers[0].step()
    assert extra in wrappers[0].optim.state and not torch.equal(extra.detach(), torch.ones(3))
