"""d3rlpy's ``d3rlpy.tokenizers``: continuous values to integer tokens
(uniform bins over ``[minimum, maximum)``, optionally after mu-law
companding) and back."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["FloatTokenizer", "Tokenizer", "mu_law_decode", "mu_law_encode"]


def mu_law_encode(x: Any, mu: float, basis: float) -> np.ndarray:
    """``sign(x) * log(|x| mu + 1) / log(basis mu + 1)`` (float32)."""
    x = np.asarray(x, dtype=np.float32)
    return (np.sign(x) * np.log(np.abs(x) * mu + 1.0) / np.log(basis * mu + 1.0)).astype(np.float32)


def mu_law_decode(y: Any, mu: float, basis: float) -> np.ndarray:
    """The inverse of :func:`mu_law_encode`."""
    y = np.asarray(y, dtype=np.float32)
    return (np.sign(y) * (np.exp(np.log(basis * mu + 1.0) * np.abs(y)) - 1.0) / mu).astype(np.float32)


@runtime_checkable
class Tokenizer(Protocol):
    def __call__(self, x: np.ndarray) -> np.ndarray: ...

    def decode(self, y: np.ndarray) -> np.ndarray: ...


class FloatTokenizer:
    """``num_bins`` tokens: value ``v`` (mu-law encoded first by default)
    becomes the index of the bin whose left edge is the largest one below
    or at ``v``, plus ``token_offset``; ``decode`` returns the bin's left
    edge (decoded)."""

    def __init__(self, num_bins: int, minimum: float = -1.0, maximum: float = 1.0, use_mu_law_encode: bool = True,
                 mu: float = 100.0, basis: float = 256.0, token_offset: int = 0):
        if int(num_bins) < 1:
            raise ValueError(f"num_bins must be at least 1, got {num_bins}")
        if not maximum > minimum:
            raise ValueError(f"maximum must be above minimum, got minimum={minimum}, maximum={maximum}")
        self._bins = ((maximum - minimum) * np.arange(int(num_bins)) / int(num_bins) + minimum).astype(np.float32)
        self._use_mu_law_encode = bool(use_mu_law_encode)
        self._mu = float(mu)
        self._basis = float(basis)
        self._token_offset = int(token_offset)

    def __call__(self, x: Any) -> np.ndarray:
        if self._use_mu_law_encode:
            x = mu_law_encode(x, self._mu, self._basis)
        return np.digitize(x, self._bins) - 1 + self._token_offset

    def decode(self, y: Any) -> np.ndarray:
        x = self._bins[np.asarray(y) - self._token_offset]
        if self._use_mu_law_encode:
            x = mu_law_decode(x, self._mu, self._basis)
        return x
