"""d3rlpy's ``d3rlpy.dataset.buffers`` import path, as an alias: the same
objects as :mod:`offrl.dataset` (offrl keeps them in other modules), so
``from offrl.dataset.buffers import ...`` works as in d3rlpy 2.8.1."""

from .storage import BufferProtocol, FIFOBuffer, InfiniteBuffer

__all__ = ["BufferProtocol", "InfiniteBuffer", "FIFOBuffer"]
