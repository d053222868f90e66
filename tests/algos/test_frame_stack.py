"""Networks are sized from a sampled transition, not the stored observation:
frame stacking with ``FrameStackTransitionPicker`` (offline) and
``offrl.envs.FrameStack`` (online) trains (issue 14 item 5)."""

from __future__ import annotations

from typing import Any, Optional

import gymnasium
import numpy as np
import pytest
from gymnasium.spaces import Box, Discrete

from offrl.algos import DiscreteCQLConfig, DQNConfig
from offrl.algos.inputs_check import network_observation_shape
from offrl.dataset import FrameStackTransitionPicker, MDPDataset
from offrl.envs import FrameStack
from offrl.preprocessing import PixelObservationScaler

SIDE = 36  # the smallest image the default pixel encoder takes


def _image_dataset(picker: Any = None, n: int = 24) -> MDPDataset:
    rng = np.random.default_rng(0)
    observations = rng.integers(0, 256, size=(n, 1, SIDE, SIDE), dtype=np.uint8)
    terminals = np.zeros(n)
    terminals[[9, n - 1]] = 1.0
    return MDPDataset(observations, rng.integers(0, 2, n), rng.standard_normal(n), terminals,
                      transition_picker=picker)


@pytest.mark.parametrize("config_cls", [DQNConfig, DiscreteCQLConfig])
def test_frame_stacked_images_train_and_predict(config_cls):
    dataset = _image_dataset(FrameStackTransitionPicker(n_frames=4))
    assert network_observation_shape(dataset) == (4, SIDE, SIDE)
    algo = config_cls(observation_scaler=PixelObservationScaler(), batch_size=4).create()
    algo.fit(dataset, n_steps=2, n_steps_per_epoch=2, show_progress=False, logger_adapter=_noop())
    assert algo.observation_shape == (4, SIDE, SIDE)
    assert algo.grad_step == 2
    stacked = np.zeros((3, 4, SIDE, SIDE), dtype=np.uint8)
    actions = algo.predict(stacked)
    assert actions.shape == (3,) and set(actions.tolist()) <= {0, 1}
    # a second fit on the same (stacked) data is accepted by the dataset check
    algo.fit(dataset, n_steps=1, n_steps_per_epoch=1, show_progress=False, logger_adapter=_noop())
    assert algo.grad_step == 3
    with pytest.raises(ValueError, match=r"x must have shape \(batch, 4, 36, 36\)"):
        algo.predict(np.zeros((1, 1, SIDE, SIDE), dtype=np.uint8))


def test_without_a_frame_stacking_picker_the_stored_shape_is_used():
    dataset = _image_dataset()
    assert network_observation_shape(dataset) == (1, SIDE, SIDE)
    algo = DQNConfig(observation_scaler=PixelObservationScaler()).create()
    algo.build_with_dataset(dataset)
    assert algo.observation_shape == (1, SIDE, SIDE)


def test_a_custom_picker_is_asked_with_an_index_valid_under_d3rlpys_contract():
    calls = []

    class Doubling:
        """A user picker (d3rlpy's contract: index < transition_count) that
        concatenates the observation with itself along the channel axis."""

        def __call__(self, episode, index):
            calls.append((episode.size(), index))
            base = FrameStackTransitionPicker(1)(episode, index)
            return type(base)(
                observation=np.concatenate([base.observation] * 2), action=base.action, reward=base.reward,
                next_observation=np.concatenate([base.next_observation] * 2), next_action=base.next_action,
                terminal=base.terminal, interval=base.interval, rewards_to_go=base.rewards_to_go,
            )

    dataset = _image_dataset(Doubling())
    assert network_observation_shape(dataset) == (2, SIDE, SIDE)
    assert calls == [(10, 0)]


class _Frames(gymnasium.Env):
    """36x36 grey frames (no channel axis, as after Atari grayscale); the
    episode ends after 5 steps."""

    observation_space = Box(0, 255, (SIDE, SIDE), dtype=np.uint8)
    action_space = Discrete(2)

    def reset(self, *, seed: Optional[int] = None, options: Any = None):
        super().reset(seed=seed)
        self._t = 0
        return np.full((SIDE, SIDE), 7, dtype=np.uint8), {}

    def step(self, action):
        self._t += 1
        return np.full((SIDE, SIDE), self._t, dtype=np.uint8), 1.0, self._t >= 5, False, {}


def test_online_frame_stack_env_trains():
    env = FrameStack(_Frames(), num_stack=4)
    algo = DQNConfig(observation_scaler=PixelObservationScaler(), batch_size=4).create()
    algo.fit_online(env, n_steps=8, n_steps_per_epoch=8, update_start_step=4, show_progress=False,
                    logger_adapter=_noop(), eval_n_trials=1)
    assert algo.observation_shape == (4, SIDE, SIDE)
    assert algo.grad_step == 4  # steps 5..8 update (after update_start_step)
    observation, _ = env.reset(seed=0)
    assert algo.predict(observation[None]).shape == (1,)


def _noop():
    from offrl.logging import NoopAdapterFactory

    return NoopAdapterFactory()


def test_a_standard_scaler_is_fitted_on_the_stacked_observations():
    from offrl.preprocessing import StandardObservationScaler

    dataset = _image_dataset(FrameStackTransitionPicker(n_frames=2))
    algo = DQNConfig(observation_scaler=StandardObservationScaler(), batch_size=4).create()
    algo.build_with_dataset(dataset)
    assert algo.observation_shape == (2, SIDE, SIDE)
    # the statistics of the picked (stacked) observations, by a plain loop over every transition
    stacked = []
    picker = dataset.transition_picker
    for episode in dataset.episodes:
        for index in range(episode.size()):
            stacked.append(picker(episode, index).observation.astype(np.float64))
    stacked = np.stack(stacked)
    np.testing.assert_allclose(algo.observation_scaler.mean, stacked.mean(axis=0), rtol=1e-10)
    np.testing.assert_allclose(algo.observation_scaler.std, stacked.std(axis=0), rtol=1e-10)
    assert algo.predict(np.zeros((1, 2, SIDE, SIDE), dtype=np.uint8)).shape == (1,)
