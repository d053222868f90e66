"""Logger adapters for training runs."""

from .base import LoggerAdapter, LoggerAdapterFactory, create_logger_adapter
from .combine_adapter import CombineAdapter, CombineAdapterFactory
from .file_adapter import FileAdapter, FileAdapterFactory
from .logger import D3RLPyLogger
from .lock import LogDirectoryInUseError, lock_log_directory
from .metric_files import truncate_metric_files
from .noop_adapter import NoopAdapter, NoopAdapterFactory
from .tensorboard_adapter import TensorboardAdapter, TensorboardAdapterFactory
from .wandb_adapter import WanDBAdapter, WanDBAdapterFactory
from .mlflow_adapter import MLflowAdapter, MLflowAdapterFactory

__all__ = [
    "D3RLPyLogger",
    "LoggerAdapter",
    "LoggerAdapterFactory",
    "FileAdapter",
    "FileAdapterFactory",
    "NoopAdapter",
    "NoopAdapterFactory",
    "CombineAdapter",
    "CombineAdapterFactory",
    "TensorboardAdapter",
    "TensorboardAdapterFactory",
    "WanDBAdapter",
    "WanDBAdapterFactory",
    "MLflowAdapter",
    "MLflowAdapterFactory",
    "create_logger_adapter",
    "LogDirectoryInUseError",
    "lock_log_directory",
    "truncate_metric_files",
]
