"""d3rlpy's ``d3rlpy.dataset.trajectory_slicers`` import path, as an alias: the same
objects as :mod:`offrl.dataset` (offrl keeps them in other modules), so
``from offrl.dataset.trajectory_slicers import ...`` works as in d3rlpy 2.8.1."""

from .slicers import BasicTrajectorySlicer, FrameStackTrajectorySlicer, TrajectorySlicerProtocol

__all__ = ["TrajectorySlicerProtocol", "BasicTrajectorySlicer", "FrameStackTrajectorySlicer"]
