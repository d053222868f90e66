"""DictEncoderFactory: each key encoded by its own factory (by default pixel
for 3-D keys, vector otherwise), features concatenated; saved by name."""

from __future__ import annotations

import json

import pytest
import torch

from offrl.algos import SACConfig
from offrl.models import DictEncoderFactory, PixelEncoderFactory, VectorEncoderFactory
from offrl.models.encoders import PixelEncoder, TupleEncoder
from offrl.serialization import from_json_value

SHAPES = [(1, 36, 36), (3,)]  # sorted keys: "camera", "state"


def test_default_picks_pixel_or_vector_per_key():
    encoder = DictEncoderFactory().create(SHAPES)
    assert isinstance(encoder, TupleEncoder)
    assert isinstance(encoder.encoders[0], PixelEncoder)
    assert not isinstance(encoder.encoders[1], PixelEncoder)
    out = encoder([torch.zeros(4, 1, 36, 36), torch.zeros(4, 3)])
    assert out.shape == (4, 256)


def test_each_key_gets_its_factory_in_sorted_key_order():
    factory = DictEncoderFactory({"state": VectorEncoderFactory(hidden_units=[7]), "camera": None})
    encoder = factory.create_with_action(SHAPES, 2)
    assert isinstance(encoder.encoders[0], PixelEncoder)
    linears = [m for m in encoder.encoders[1].modules() if isinstance(m, torch.nn.Linear)]
    assert linears[0].out_features == 7 and linears[0].in_features == 3
    assert encoder([torch.zeros(2, 1, 36, 36), torch.zeros(2, 3)], torch.zeros(2, 2)).shape == (2, 256)


def test_saved_and_loaded_by_name():
    factory = DictEncoderFactory({"state": VectorEncoderFactory(hidden_units=[8]), "camera": PixelEncoderFactory()})
    record = factory.to_dict()
    assert record["type"] == "dict"
    rebuilt = from_json_value(json.loads(json.dumps(record)))
    assert isinstance(rebuilt, DictEncoderFactory) and rebuilt.to_dict() == record
    config = SACConfig(actor_encoder_factory=factory)
    assert SACConfig.from_dict(json.loads(json.dumps(config.to_dict()))).to_dict() == config.to_dict()


def test_bad_input():
    with pytest.raises(ValueError, match=r"names 1 keys \['state'\], the observations have 2"):
        DictEncoderFactory({"state": VectorEncoderFactory()}).create(SHAPES)
    with pytest.raises(TypeError, match=r"encoder_factories\['state'\]"):
        DictEncoderFactory({"state": 3})
    with pytest.raises(TypeError, match="non-empty dict"):
        DictEncoderFactory({})
