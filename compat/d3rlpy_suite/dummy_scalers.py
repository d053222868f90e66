# Ported mechanically from d3rlpy 2.8.1 tests/dummy_scalers.py by port.py (MIT,
# Copyright (c) 2021 Takuma Seno); see README.md.  Do not edit: edit
# upstream/tests/dummy_scalers.py or port.py and regenerate.
from typing import Sequence

import torch

from offrl.dataset import (
    EpisodeBase,
    TrajectorySlicerProtocol,
    TransitionPickerProtocol,
)
from offrl.preprocessing import ActionScaler, ObservationScaler, RewardScaler
from offrl.types import GymEnv, NDArray


class DummyObservationScaler(ObservationScaler):
    def fit_with_transition_picker(
        self,
        episodes: Sequence[EpisodeBase],
        transition_picker: TransitionPickerProtocol,
    ) -> None:
        pass

    def fit_with_trajectory_slicer(
        self,
        episodes: Sequence[EpisodeBase],
        trajectory_slicer: TrajectorySlicerProtocol,
    ) -> None:
        pass

    def fit_with_env(self, env: GymEnv) -> None:
        pass

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        return x + 0.1

    def reverse_transform(self, x: torch.Tensor) -> torch.Tensor:
        return x - 0.1

    def transform_numpy(self, x: NDArray) -> NDArray:
        return x + 0.1

    def reverse_transform_numpy(self, x: NDArray) -> NDArray:
        return x - 0.1

    @property
    def built(self) -> bool:
        return True


class DummyActionScaler(ActionScaler):
    def fit_with_transition_picker(
        self,
        episodes: Sequence[EpisodeBase],
        transition_picker: TransitionPickerProtocol,
    ) -> None:
        pass

    def fit_with_trajectory_slicer(
        self,
        episodes: Sequence[EpisodeBase],
        trajectory_slicer: TrajectorySlicerProtocol,
    ) -> None:
        pass

    def fit_with_env(self, env: GymEnv) -> None:
        pass

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        return x + 0.2

    def reverse_transform(self, x: torch.Tensor) -> torch.Tensor:
        return x - 0.2

    def transform_numpy(self, x: NDArray) -> NDArray:
        return x + 0.2

    def reverse_transform_numpy(self, x: NDArray) -> NDArray:
        return x - 0.2

    @property
    def built(self) -> bool:
        return True


class DummyRewardScaler(RewardScaler):
    def fit_with_transition_picker(
        self,
        episodes: Sequence[EpisodeBase],
        transition_picker: TransitionPickerProtocol,
    ) -> None:
        pass

    def fit_with_trajectory_slicer(
        self,
        episodes: Sequence[EpisodeBase],
        trajectory_slicer: TrajectorySlicerProtocol,
    ) -> None:
        pass

    def fit_with_env(self, env: GymEnv) -> None:
        pass

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        return x + 0.3

    def reverse_transform(self, x: torch.Tensor) -> torch.Tensor:
        return x - 0.3

    def transform_numpy(self, x: NDArray) -> NDArray:
        return x + 0.3

    def reverse_transform_numpy(self, x: NDArray) -> NDArray:
        return x - 0.3

    @property
    def built(self) -> bool:
        return True
