"""Episode-structured datasets and replay buffers (d3rlpy 2.x API)."""

from .batch import (
    TorchTrajectoryMiniBatch,
    TorchTransitionMiniBatch,
    TrajectoryMiniBatch,
    TransitionMiniBatch,
)
from .episode import (
    Episode,
    EpisodeBase,
    PartialTrajectory,
    Transition,
    create_zero_observation,
    retrieve_observation,
)
from .pickers import (
    BasicTransitionPicker,
    FrameStackTransitionPicker,
    MultiStepTransitionPicker,
    TransitionPickerProtocol,
)
from .mixed import MixedReplayBuffer
from .prioritized import PrioritizedReplayBuffer, SumTree, create_prioritized_replay_buffer
from .replay_buffer import (
    DatasetInfo,
    MDPDataset,
    ReplayBuffer,
    ReplayBufferBase,
    create_fifo_replay_buffer,
    create_infinite_replay_buffer,
)
from .signature import Observation, ObservationSequence, Signature
from .slicers import BasicTrajectorySlicer, FrameStackTrajectorySlicer, TrajectorySlicerProtocol
from .split import split_episodes, train_test_split
from .storage import BufferProtocol, FIFOBuffer, InfiniteBuffer
from .writer import BasicWriterPreprocess, LastFrameWriterPreprocess, WriterPreprocessProtocol

__all__ = [
    "Signature",
    "Observation",
    "ObservationSequence",
    "Episode",
    "EpisodeBase",
    "Transition",
    "PartialTrajectory",
    "create_zero_observation",
    "retrieve_observation",
    "BufferProtocol",
    "InfiniteBuffer",
    "FIFOBuffer",
    "TransitionPickerProtocol",
    "BasicTransitionPicker",
    "MultiStepTransitionPicker",
    "FrameStackTransitionPicker",
    "TrajectorySlicerProtocol",
    "BasicTrajectorySlicer",
    "FrameStackTrajectorySlicer",
    "WriterPreprocessProtocol",
    "BasicWriterPreprocess",
    "LastFrameWriterPreprocess",
    "TransitionMiniBatch",
    "TrajectoryMiniBatch",
    "TorchTransitionMiniBatch",
    "TorchTrajectoryMiniBatch",
    "DatasetInfo",
    "ReplayBufferBase",
    "ReplayBuffer",
    "MixedReplayBuffer",
    "PrioritizedReplayBuffer",
    "SumTree",
    "create_prioritized_replay_buffer",
    "MDPDataset",
    "create_infinite_replay_buffer",
    "create_fifo_replay_buffer",
    "train_test_split",
    "split_episodes",
]
