# Ported mechanically from d3rlpy 2.8.1 tests/tokenizers/test_utils.py by port.py (MIT,
# Copyright (c) 2021 Takuma Seno); see README.md.  Do not edit: edit
# upstream/tests/tokenizers/test_utils.py or port.py and regenerate.
import numpy as np

from offrl.tokenizers import mu_law_encode


def test_mu_law_encode() -> None:
    v = np.arange(100) - 50
    encoded_v = mu_law_encode(v, mu=100, basis=256)
    assert np.all(encoded_v < 1)
    assert np.all(-1 < encoded_v)
