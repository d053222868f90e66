"""offrl.optimizers: d3rlpy's names, AdamW, learning-rate schedulers, JSON round trips."""

from __future__ import annotations

import math

import pytest
import torch

import offrl.models
import offrl.optimizers as O
from offrl.serialization import from_json_value


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Linear(3, 2)


def _lrs(factory, lr: float, steps: int) -> list[float]:
    model = _model()
    wrapper = factory.create(list(model.named_parameters()), lr)
    out = []
    for _ in range(steps):
        out.append(wrapper.optim.param_groups[0]["lr"])
        wrapper.zero_grad()
        model(torch.ones(1, 3)).sum().backward()
        wrapper.step()
    return out


def test_names_are_the_models_classes():
    for name in ("OptimizerFactory", "SGDFactory", "AdamFactory", "RMSpropFactory", "GPTAdamWFactory"):
        assert getattr(O, name) is getattr(offrl.models, name)
    assert issubclass(O.AdamWFactory, O.OptimizerFactory)
    assert set(O.__all__) <= set(dir(O))
    with pytest.raises(AttributeError):
        O.NoSuchFactory  # noqa: B018


def test_adamw_defaults_and_update_match_torch():
    factory = O.AdamWFactory(weight_decay=0.1)
    assert (factory.betas, factory.eps, factory.amsgrad, factory.clip_grad_norm, factory.lr_scheduler_factory) == (
        (0.9, 0.999), 1e-8, False, None, None)
    assert O.AdamWFactory().weight_decay == 0.0
    model, reference = _model(), _model()
    wrapper = factory.create(list(model.named_parameters()), 1e-2)
    assert isinstance(wrapper.optim, torch.optim.AdamW)
    torch_optim = torch.optim.AdamW(reference.parameters(), lr=1e-2, weight_decay=0.1)
    for net, step in ((model, wrapper), (reference, torch_optim)):
        for _ in range(3):
            step.zero_grad()
            net(torch.ones(1, 3)).pow(2).sum().backward()
            step.step()
    for a, b in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_warmup_schedule_values():
    lrs = _lrs(O.AdamWFactory(lr_scheduler_factory=O.WarmupSchedulerFactory(4)), 1.0, 6)
    assert lrs == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.0, 1.0])


def test_cosine_schedule_values():
    lrs = _lrs(O.AdamWFactory(lr_scheduler_factory=O.CosineAnnealingLRFactory(T_max=4, eta_min=0.1)), 1.0, 5)
    expected = [0.1 + 0.9 * (1 + math.cos(math.pi * t / 4)) / 2 for t in range(5)]
    assert lrs == pytest.approx(expected)


def test_scheduler_state_round_trips_through_state_dict():
    factory = O.AdamWFactory(lr_scheduler_factory=O.WarmupSchedulerFactory(10))
    model = _model()
    wrapper = factory.create(list(model.named_parameters()), 1.0)
    for _ in range(3):
        wrapper.zero_grad()
        model(torch.ones(1, 3)).sum().backward()
        wrapper.step()
    state = wrapper.state_dict()
    fresh = factory.create(list(_model().named_parameters()), 1.0)
    fresh.load_state_dict(state)
    assert fresh.optim.param_groups[0]["lr"] == pytest.approx(0.4)
    assert fresh.lr_scheduler.last_epoch == 3


@pytest.mark.parametrize(
    "factory",
    [
        O.AdamWFactory(weight_decay=0.01, clip_grad_norm=1.0, lr_scheduler_factory=O.WarmupSchedulerFactory(5)),
        O.AdamWFactory(lr_scheduler_factory=O.CosineAnnealingLRFactory(100, eta_min=1e-5)),
        O.WarmupSchedulerFactory(7),
        O.CosineAnnealingLRFactory(T_max=3, eta_min=0.5, last_epoch=-1),
        O.AdamFactory(),
    ],
    ids=repr,
)
def test_factories_round_trip_json(factory):
    import json

    data = json.loads(factory.to_json())
    back = from_json_value(data)
    assert type(back) is type(factory) and back == factory
    assert back.to_dict() == factory.to_dict()


def test_bad_arguments_name_the_field():
    with pytest.raises(ValueError, match="warmup_steps"):
        O.WarmupSchedulerFactory(0)
    with pytest.raises(TypeError, match="T_max"):
        O.CosineAnnealingLRFactory(2.5)
    with pytest.raises(ValueError, match="eta_min"):
        O.CosineAnnealingLRFactory(3, eta_min=-1.0)
    with pytest.raises(TypeError, match="lr_scheduler_factory"):
        O.AdamWFactory(lr_scheduler_factory="warmup")
    with pytest.raises(TypeError):
        O.register_optimizer_factory(int)


def test_make_fields():
    import dataclasses

    @dataclasses.dataclass
    class Config:
        optim_factory: O.OptimizerFactory = O.make_optimizer_field()
        lr_scheduler_factory: O.LRSchedulerFactory = O.make_lr_scheduler_field()

    config = Config()
    assert isinstance(config.optim_factory, O.AdamFactory) and config.lr_scheduler_factory is None
    assert Config().optim_factory is not config.optim_factory


#: d3rlpy 2.8.1's ``DQNConfig(optim_factory=AdamFactory(clip_grad_norm=2.0,
#: lr_scheduler_factory=CosineAnnealingLRFactory(T_max=100))).serialize()``,
#: its optim_factory entry (file-format fixture, written by d3rlpy 2.8.1)
D3RLPY_ADAM_WITH_SCHEDULER = (
    '{"type": "adam", "params": {"clip_grad_norm": 2.0, "lr_scheduler_factory": {"type": "cosine_annealing", '
    '"params": {"T_max": 100, "eta_min": 0.0, "last_epoch": -1}}, "betas": [0.9, 0.999], "eps": 1e-08, '
    '"weight_decay": 0, "amsgrad": false}}'
)


@pytest.mark.parametrize("name", ["SGDFactory", "AdamFactory", "AdamWFactory", "RMSpropFactory", "GPTAdamWFactory"])
def test_every_named_factory_takes_d3rlpys_common_fields_first(name):
    cls = getattr(O, name)
    # d3rlpy 2.8.1's positional order: clip_grad_norm, lr_scheduler_factory, then the optimizer's own fields
    factory = cls(0.5, O.WarmupSchedulerFactory(4))
    assert factory.clip_grad_norm == 0.5 and factory.lr_scheduler_factory == O.WarmupSchedulerFactory(4)
    # the scheduler is stepped after each optimizer step: the warm-up's lr * (t + 1) / 4
    assert _lrs(factory, 1.0, 6) == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.0, 1.0])
    again = from_json_value(factory.to_dict())
    assert again == factory and again.lr_scheduler_factory == O.WarmupSchedulerFactory(4)
    assert _lrs(cls(), 1.0, 3) == [1.0, 1.0, 1.0]
    with pytest.raises(TypeError, match="lr_scheduler_factory must be an LRSchedulerFactory"):
        cls(lr_scheduler_factory="cosine")


def test_generic_factory_takes_a_scheduler():
    factory = O.OptimizerFactory("SGD", lr_scheduler_factory=O.CosineAnnealingLRFactory(T_max=4), momentum=0.5)
    lrs = _lrs(factory, 1.0, 5)
    assert lrs == pytest.approx([0.5 * (1 + math.cos(math.pi * t / 4)) for t in range(5)])
    again = from_json_value(factory.to_dict())
    assert again == factory and again.lr_scheduler_factory == O.CosineAnnealingLRFactory(T_max=4)
    assert O.OptimizerFactory("Adam").to_dict()["params"]["lr_scheduler_factory"] is None


def test_d3rlpy_config_with_an_adam_scheduler_reads_back():
    import json

    data = {"optim_factory": json.loads(D3RLPY_ADAM_WITH_SCHEDULER)}
    config = offrl.algos.DQNConfig.deserialize(json.dumps(data))
    factory = config.optim_factory
    assert type(factory) is O.AdamFactory and factory.clip_grad_norm == 2.0
    assert factory.lr_scheduler_factory == O.CosineAnnealingLRFactory(T_max=100)
    assert json.loads(config.serialize())["optim_factory"]["params"]["lr_scheduler_factory"] == \
        json.loads(D3RLPY_ADAM_WITH_SCHEDULER)["params"]["lr_scheduler_factory"]


def test_optimizer_and_scheduler_factories_serialize_as_d3rlpy():
    import json

    # d3rlpy 2.8.1: AdamFactory(clip_grad_norm=1.0, lr_scheduler_factory=CosineAnnealingLRFactory(T_max=10)).serialize()
    theirs = ('{"clip_grad_norm": 1.0, "lr_scheduler_factory": {"type": "cosine_annealing", "params": {"T_max": 10, '
              '"eta_min": 0.0, "last_epoch": -1}}, "betas": [0.9, 0.999], "eps": 1e-08, "weight_decay": 0, '
              '"amsgrad": false}')
    factory = O.AdamFactory(clip_grad_norm=1.0, lr_scheduler_factory=O.CosineAnnealingLRFactory(T_max=10))
    assert json.loads(factory.serialize()) == json.loads(theirs)
    assert O.AdamFactory.deserialize(theirs) == factory
    for cls in (O.SGDFactory, O.RMSpropFactory, O.AdamWFactory, O.GPTAdamWFactory):
        made = cls(clip_grad_norm=0.5, lr_scheduler_factory=O.WarmupSchedulerFactory(3))
        assert cls.deserialize(made.serialize()) == made
        assert cls.deserialize_from_dict(made.serialize_to_dict()) == made
    assert json.loads(O.WarmupSchedulerFactory(5).serialize()) == {"warmup_steps": 5}
    assert O.WarmupSchedulerFactory.deserialize('{"warmup_steps": 5}') == O.WarmupSchedulerFactory(5)
