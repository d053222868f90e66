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
from .episode_generator import EpisodeGenerator, EpisodeGeneratorProtocol
from .episode_io import DATASET_VERSION, dump, load, load_v1
from .pickers import (
    BasicTransitionPicker,
    FrameStackTransitionPicker,
    MultiStepTransitionPicker,
    SparseRewardTransitionPicker,
    TransitionPickerProtocol,
)
from .mixed import MixedReplayBuffer
from .prioritized import PrioritizedReplayBuffer, SumTree, create_prioritized_replay_buffer
from .compat import MDPDataset
from .replay_buffer import (
    DatasetInfo,
    ReplayBuffer,
    ReplayBufferBase,
    create_fifo_replay_buffer,
    create_infinite_replay_buffer,
)
from .signature import Observation, ObservationSequence, Signature
from .slicers import BasicTrajectorySlicer, FrameStackTrajectorySlicer, TrajectorySlicerProtocol
from .split import split_episodes, train_test_split
from .storage import BufferProtocol, FIFOBuffer, InfiniteBuffer
from . import utils
from .utils import *  # noqa: F403 - d3rlpy.dataset's helper functions, named in utils.__all__
from .writer import BasicWriterPreprocess, ExperienceWriter, LastFrameWriterPreprocess, WriterPreprocessProtocol
from .disk import DiskDatasetChangedError, DiskStore, open_disk_dataset
from .disk_fifo import DiskFIFOBuffer
from .disk_writer import DiskDatasetWriter, dump_disk_dataset

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
    "SparseRewardTransitionPicker",
    "TrajectorySlicerProtocol",
    "BasicTrajectorySlicer",
    "FrameStackTrajectorySlicer",
    "WriterPreprocessProtocol",
    "BasicWriterPreprocess",
    "LastFrameWriterPreprocess",
    "ExperienceWriter",
    "DiskDatasetWriter",
    "DiskFIFOBuffer",
    "DiskDatasetChangedError",
    "DiskStore",
    "dump_disk_dataset",
    "open_disk_dataset",
    "EpisodeGenerator",
    "EpisodeGeneratorProtocol",
    "DATASET_VERSION",
    "dump",
    "load",
    "load_v1",
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
__all__ += utils.__all__
