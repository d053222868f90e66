"""d3rlpy's ``d3rlpy.dataset.writers`` import path, as an alias: the same
objects as :mod:`offrl.dataset` (offrl keeps them in other modules), so
``from offrl.dataset.writers import ...`` works as in d3rlpy 2.8.1."""

from .writer import BasicWriterPreprocess, ExperienceWriter, LastFrameWriterPreprocess, WriterPreprocessProtocol

__all__ = ["WriterPreprocessProtocol", "BasicWriterPreprocess", "LastFrameWriterPreprocess", "ExperienceWriter"]
