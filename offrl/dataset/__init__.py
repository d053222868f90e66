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
from .utils import (
    batch_pad_array,
    batch_pad_observations,
    cast_flat_shape,
    cast_recursively,
    cast_tuple_shape,
    check_dtype,
    check_non_1d_array,
    detect_action_size_from_env,
    detect_action_space,
    detect_action_space_from_env,
    get_axis_size,
    get_batch_dim,
    get_dtype_from_observation,
    get_dtype_from_observation_sequence,
    get_shape_from_observation,
    get_shape_from_observation_sequence,
    is_tuple_shape,
    slice_observations,
    stack_observations,
    stack_recent_observations,
)
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
    "batch_pad_array",
    "batch_pad_observations",
    "cast_flat_shape",
    "cast_recursively",
    "cast_tuple_shape",
    "check_dtype",
    "check_non_1d_array",
    "detect_action_size_from_env",
    "detect_action_space",
    "detect_action_space_from_env",
    "get_axis_size",
    "get_batch_dim",
    "get_dtype_from_observation",
    "get_dtype_from_observation_sequence",
    "get_shape_from_observation",
    "get_shape_from_observation_sequence",
    "is_tuple_shape",
    "slice_observations",
    "stack_observations",
    "stack_recent_observations",
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
