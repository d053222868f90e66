# Ported mechanically from d3rlpy 2.8.1 tests/models/torch/test_parameters.py by port.py (MIT,
# Copyright (c) 2021 Takuma Seno); see README.md.  Do not edit: edit
# upstream/tests/models/torch/test_parameters.py or port.py and regenerate.
from typing import Sequence

import pytest
import torch

from offrl.models.torch.parameters import Parameter


@pytest.mark.parametrize("shape", [(100,)])
def test_parameter(shape: Sequence[int]) -> None:
    data = torch.rand(shape)
    parameter = Parameter(data)

    assert parameter.data.shape == shape
    assert torch.all(parameter.data == data)
