"""ByShapeEncoderFactory: DefaultEncoderFactory's choice by shape with the vector MLP's widths chosen."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from offrl.models.encoders import ByShapeEncoderFactory, DefaultEncoderFactory
from offrl.serialization import from_json_value


def _linear_widths(module: nn.Module) -> list:
    return [m.out_features for m in module.modules() if isinstance(m, nn.Linear)]


def test_vectors_get_the_chosen_widths_and_images_the_default_convolutions():
    f = ByShapeEncoderFactory(vector_hidden_units=[8, 6, 4])
    vector = f.create((5,))
    assert _linear_widths(vector) == [8, 6, 4] and vector(torch.zeros(2, 5)).shape == (2, 4)
    with_action = f.create_with_action((5,), 2)
    assert _linear_widths(with_action) == [8, 6, 4] and with_action(torch.zeros(2, 5), torch.zeros(2, 2)).shape == (2, 4)
    image, default_image = f.create((1, 36, 36)), DefaultEncoderFactory().create((1, 36, 36))
    assert type(image).__name__ == "PixelEncoder"
    assert [type(m) for m in image.modules()] == [type(m) for m in default_image.modules()]
    assert not any(isinstance(m, nn.Conv2d) for m in vector.modules())
    tuple_encoder = f.create([(5,), (1, 36, 36)])
    assert tuple_encoder([torch.zeros(2, 5), torch.zeros(2, 1, 36, 36)]).shape[0] == 2
    assert [8, 6, 4] == _linear_widths(tuple_encoder)[:3]  # the vector element's MLP


def test_default_widths_match_default_encoder_factory():
    assert _linear_widths(ByShapeEncoderFactory().create((5,))) == _linear_widths(DefaultEncoderFactory().create((5,)))


def test_round_trips_through_json():
    f = ByShapeEncoderFactory(vector_hidden_units=[256, 256, 256], activation="tanh")
    again = from_json_value(f.to_dict())
    assert isinstance(again, ByShapeEncoderFactory) and again == f and again.get_type() == "by_shape"


@pytest.mark.parametrize("units", [[], [0], [4, -1], [True], [2.5], "256", None])
def test_bad_widths_name_the_field(units):
    with pytest.raises(ValueError, match="vector_hidden_units"):
        ByShapeEncoderFactory(vector_hidden_units=units)


def test_vector_layer_norm_after_each_linear_layer_of_vectors_only():
    f = ByShapeEncoderFactory(vector_hidden_units=[8, 4], vector_layer_norm=True)
    kinds = [type(m).__name__ for m in f.create((5,)).mlp.layers]
    assert kinds == ["Linear", "LayerNorm", "ReLU", "Linear", "LayerNorm", "ReLU"]
    assert not any(isinstance(m, nn.LayerNorm) for m in f.create((1, 36, 36)).modules())
    assert not any(isinstance(m, nn.LayerNorm) for m in ByShapeEncoderFactory().create((5,)).modules())
    with pytest.raises(ValueError, match="vector_layer_norm"):
        ByShapeEncoderFactory(vector_layer_norm="yes")
