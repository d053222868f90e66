"""Episode-wise splits through scikit-learn.

Holding out whole episodes (never single transitions of an episode seen in
training) is the honest way to validate an offline RL model.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional

import numpy as np

from .replay_buffer import ReplayBuffer

__all__ = ["train_test_split", "split_episodes"]


def _columnar(dataset: ReplayBuffer) -> None:
    if not isinstance(dataset, ReplayBuffer):
        raise TypeError(f"dataset must be a ReplayBuffer or MDPDataset, got {type(dataset).__name__}")


def train_test_split(
    dataset: ReplayBuffer,
    test_size: Optional[float | int] = None,
    train_size: Optional[float | int] = None,
    random_state: Any = None,
    shuffle: bool = True,
) -> tuple[ReplayBuffer, ReplayBuffer]:
    """Split a dataset into train and test datasets of whole episodes.

    Arguments are those of :func:`sklearn.model_selection.train_test_split`,
    counted in episodes. Each returned dataset holds copies of its episodes
    and the same pickers, slicer and action space as ``dataset``.
    """
    from sklearn.model_selection import train_test_split as sk_split

    _columnar(dataset)
    n = dataset.size()
    if n < 2:
        raise ValueError(f"train_test_split needs at least 2 episodes, the dataset has {n}")
    train_idx, test_idx = sk_split(
        np.arange(n), test_size=test_size, train_size=train_size, random_state=random_state, shuffle=shuffle
    )
    if shuffle:
        train_idx, test_idx = np.sort(train_idx), np.sort(test_idx)
    return dataset._subset(train_idx), dataset._subset(test_idx)


def split_episodes(dataset: ReplayBuffer, cv: Any) -> Iterator[tuple[ReplayBuffer, ReplayBuffer]]:
    """``(train, test)`` datasets for each split of a scikit-learn splitter
    (``KFold(5)``, ``ShuffleSplit(...)``, ...) applied to the episodes."""
    _columnar(dataset)
    if not hasattr(cv, "split"):
        raise TypeError(f"cv must be a scikit-learn splitter with a split() method, got {type(cv).__name__}")
    index = np.arange(dataset.size())
    for train_idx, test_idx in cv.split(index):
        yield dataset._subset(np.sort(train_idx)), dataset._subset(np.sort(test_idx))
