"""Signatures: the dtype and per-step shape of each array of a field."""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence, Union

import numpy as np

__all__ = ["Signature", "Observation", "ObservationSequence"]

#: One observation: an array, or a tuple of arrays (e.g. an image and a vector).
Observation = Union[np.ndarray, Sequence[np.ndarray]]
#: A sequence of observations along the time axis, in the same two forms.
ObservationSequence = Union[np.ndarray, Sequence[np.ndarray]]


@dataclasses.dataclass(frozen=True)
class Signature:
    """dtypes and per-step shapes of a field.

    A plain observation has one entry; a tuple observation has one entry per
    element. ``Signature(dtype=np.float32, shape=(3,))`` is accepted as a
    shorthand for ``Signature(dtype=[np.float32], shape=[(3,)])``.
    """

    dtype: Sequence[np.dtype]
    shape: Sequence[Sequence[int]]

    def __init__(self, dtype: Any, shape: Any) -> None:
        if isinstance(dtype, (list, tuple)):
            dtypes = [np.dtype(d) for d in dtype]
        else:
            dtypes = [np.dtype(dtype)]
        if len(shape) == 0 or isinstance(shape[0], (int, np.integer)):
            shapes = [tuple(int(s) for s in shape)]
        else:
            shapes = [tuple(int(s) for s in sh) for sh in shape]
        if len(dtypes) != len(shapes):
            raise ValueError(
                f"Signature has {len(dtypes)} dtypes but {len(shapes)} shapes"
            )
        for i, sh in enumerate(shapes):
            if any(s < 0 for s in sh):
                raise ValueError(f"Signature shape[{i}] has a negative size: {sh}")
        object.__setattr__(self, "dtype", dtypes)
        object.__setattr__(self, "shape", shapes)

    def __len__(self) -> int:
        return len(self.shape)

    @property
    def is_tuple(self) -> bool:
        """Whether this field holds several arrays per step."""
        return len(self.shape) > 1

    def sample(self) -> list[np.ndarray]:
        """Random arrays of this signature (one per element), for smoke tests."""
        rng = np.random.default_rng()
        out = []
        for dt, sh in zip(self.dtype, self.shape):
            if np.issubdtype(dt, np.integer):
                out.append(rng.integers(0, 256 if dt == np.uint8 else 2, size=sh).astype(dt))
            else:
                out.append(rng.random(sh).astype(dt))
        return out

    def to_dict(self) -> dict:
        return {"dtype": [d.str for d in self.dtype], "shape": [list(s) for s in self.shape]}

    @classmethod
    def from_dict(cls, data: dict) -> "Signature":
        return cls(dtype=list(data["dtype"]), shape=[tuple(s) for s in data["shape"]])

    def __repr__(self) -> str:
        parts = [f"{d.name}{tuple(s)}" for d, s in zip(self.dtype, self.shape)]
        return parts[0] if len(parts) == 1 else "(" + ", ".join(parts) + ")"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Signature):
            return NotImplemented
        return list(self.dtype) == list(other.dtype) and list(self.shape) == list(other.shape)

    def __hash__(self) -> int:
        return hash((tuple(d.str for d in self.dtype), tuple(self.shape)))
