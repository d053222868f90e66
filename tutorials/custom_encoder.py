"""A custom encoder: your own network inside any offrl algorithm.

Run: python tutorials/custom_encoder.py [--steps N] [--dataset-steps N] [--out DIR]

Every network in offrl starts with an *encoder* that turns an observation
into a feature vector; the algorithm adds its heads on top (a Q-value per
action for DQN / DiscreteCQL, a Gaussian for SAC's policy, ...). The
default encoder is a 256-256 ReLU MLP. To use your own architecture, write
an *encoder factory*:

* a dataclass subclassing :class:`offrl.models.EncoderFactory` whose fields
  are the architecture's hyperparameters (plain JSON values), so the config
  is data: it is saved in the model file and shows up in ``params.json``;
* ``get_type()``: a unique name, the key under which the factory is saved;
* ``create(observation_shape)``: a ``torch.nn.Module`` mapping observations
  ``(B, *observation_shape)`` to features ``(B, F)``;
* ``create_with_action(observation_shape, action_size, discrete_action)``:
  the same with the action as a second input, ``forward(x, action)``. The
  Q-functions of continuous-action algorithms (SAC, CQL, IQL, TD3+BC)
  encode ``(s, a)`` with it; discrete algorithms never call it.

Then register the class with :func:`offrl.models.register_encoder_factory`.
Model files never contain code, only the factory's name and fields, so the
process that *loads* a model must import and register the same class
before ``offrl.load_learnable`` (or it stops with an error that says so).

The encoder here is a small residual MLP with layer normalisation, a shape
that is popular in recent offline RL work: ``n_blocks`` blocks of
``x + W2 relu(W1 LayerNorm(x))``. The script trains DiscreteCQL with it on
the CartPole "medium" data, compares it with the default encoder (size and
return), saves and reloads the model, exports it to ONNX (a custom encoder
made of plain torch ops exports like the built-in ones), and finally builds
SAC with the same factory for Pendulum-sized inputs to show
``create_with_action`` at work.
"""

from __future__ import annotations

import argparse
import dataclasses
import os

import gymnasium
import numpy as np
import torch
from torch import nn

import offrl
from offrl.algos import DiscreteCQLConfig, SACConfig
from offrl.dataset import MDPDataset
from offrl.datasets.builtin import build_dataset
from offrl.export import load_onnx_policy
from offrl.logging import NoopAdapterFactory
from offrl.metrics import rollout_returns
from offrl.models import EncoderFactory, register_encoder_factory


# ------------------------------------------------------------ the encoder
class ResidualBlock(nn.Module):
    """``x + W2 relu(W1 LayerNorm(x))``."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(size)
        self.inner = nn.Linear(size, size)
        self.outer = nn.Linear(size, size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.outer(torch.relu(self.inner(self.norm(x))))


class ResidualEncoder(nn.Module):
    """Observations ``(B, *shape)`` (and optionally actions) -> features ``(B, hidden_size)``."""

    def __init__(self, in_features: int, hidden_size: int, n_blocks: int, action_size: int = 0,
                 discrete_action: bool = False) -> None:
        super().__init__()
        self.action_size = action_size
        self.discrete_action = discrete_action
        self.embed = nn.Linear(in_features + action_size, hidden_size)
        self.blocks = nn.Sequential(*[ResidualBlock(hidden_size) for _ in range(n_blocks)])
        self.norm = nn.LayerNorm(hidden_size)

    def forward(self, x: torch.Tensor, action: torch.Tensor | None = None) -> torch.Tensor:
        x = x.reshape(x.shape[0], -1)
        if action is not None:
            if self.discrete_action:  # discrete actions arrive as (B, 1) indices
                action = nn.functional.one_hot(action.reshape(-1).long(), self.action_size).to(x.dtype)
            x = torch.cat([x, action], dim=1)
        return torch.relu(self.norm(self.blocks(self.embed(x))))


@register_encoder_factory
@dataclasses.dataclass
class ResidualEncoderFactory(EncoderFactory):
    """Residual MLP encoder: ``hidden_size`` features, ``n_blocks`` residual blocks."""

    hidden_size: int = 64
    n_blocks: int = 2

    @staticmethod
    def get_type() -> str:
        return "tutorial_residual"

    def create(self, observation_shape) -> nn.Module:
        return ResidualEncoder(int(np.prod(observation_shape)), self.hidden_size, self.n_blocks)

    def create_with_action(self, observation_shape, action_size: int, discrete_action: bool = False) -> nn.Module:
        return ResidualEncoder(int(np.prod(observation_shape)), self.hidden_size, self.n_blocks,
                               action_size, discrete_action)


# ------------------------------------------------------------ the walk-through
def load_cartpole(dataset_steps: int | None, out_dir: str):
    """``(dataset, env)``: the built-in "cartpole-medium" dataset, or a
    smaller one built by the same recipe when ``dataset_steps`` is given."""
    if dataset_steps is None:
        return offrl.datasets.get_cartpole("medium")
    path = os.path.join(out_dir, f"cartpole-medium-{dataset_steps}.h5")
    build_dataset("cartpole-medium", path, n_steps=dataset_steps)
    return MDPDataset.load(path), gymnasium.make("CartPole-v1")


def n_parameters(algo) -> int:
    return sum(p.numel() for p in algo.modules["q_function"].parameters())


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000, help="gradient steps of each DiscreteCQL")
    parser.add_argument("--dataset-steps", type=int, default=None,
                        help="build a smaller dataset of this many steps (default: the built-in one)")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (networks this small run as fast on one; the offrl command's default)")
    parser.add_argument("--out", default=os.path.join("tutorial_output", "custom_encoder"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    dataset, env = load_cartpole(args.dataset_steps, args.out)
    factory = ResidualEncoderFactory(hidden_size=64, n_blocks=2)

    # Train DiscreteCQL with the custom encoder, and with the default one.
    returns, algos = {}, {}
    for name, encoder in (("residual", factory), ("default", None)):
        offrl.seed(0)
        config = DiscreteCQLConfig() if encoder is None else DiscreteCQLConfig(encoder_factory=encoder)
        algo = config.create(device="cpu")
        algo.fit(dataset, n_steps=args.steps, n_steps_per_epoch=args.steps,
                 logger_adapter=NoopAdapterFactory(), show_progress=False)
        algos[name] = algo
        returns[name] = float(np.mean(rollout_returns(algo, env, n_trials=args.eval_episodes, seed=0)))
        print(f"{name} encoder: {n_parameters(algo):,} Q-function parameters, mean return {returns[name]:.1f}")
    algo = algos["residual"]
    print(f"logged episodes: mean return {np.mean(dataset.compute_returns()):.1f}")

    # The config, encoder included, is plain JSON data.
    encoder_record = algo.config.to_dict()["params"]["encoder_factory"]
    print(f"encoder in the saved config: {encoder_record}")

    # Save and load: works because ResidualEncoderFactory is registered.
    model_path = os.path.join(args.out, "residual_cql.d3")
    algo.save(model_path)
    loaded = offrl.load_learnable(model_path)
    observations = np.concatenate([episode.observations for episode in dataset.episodes[:5]])
    actions = algo.predict(observations)
    same_values = bool(np.array_equal(loaded.predict_value(observations, actions),
                                      algo.predict_value(observations, actions)))
    print(f"reloaded {type(loaded.config.encoder_factory).__name__}: same Q-values {same_values}")

    # Export: the custom module goes into the ONNX graph like any other.
    onnx_path = os.path.join(args.out, "residual_policy.onnx")
    algo.save_policy(onnx_path)
    onnx_matches = bool(np.array_equal(load_onnx_policy(onnx_path)(observations), actions))
    print(f"exported to {onnx_path}: same actions as predict {onnx_matches}")

    # Continuous actions: SAC's critics encode (observation, action) pairs.
    sac = SACConfig(actor_encoder_factory=factory, critic_encoder_factory=factory).create(device="cpu")
    sac.create_impl((3,), 1)  # Pendulum: 3 observation values, 1 torque
    pendulum_states = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    sac_values = sac.predict_value(pendulum_states, sac.predict(pendulum_states))
    critic_encoders = [m for m in sac.modules["q_function"].modules() if isinstance(m, ResidualEncoder)]
    print(f"SAC with the residual encoder: Q-values of shape {sac_values.shape}; its {len(critic_encoders)} "
          f"critics encode (observation, action) with create_with_action: "
          f"{[m.embed.in_features for m in critic_encoders]} inputs each")

    return {
        "factory": factory,
        "algos": algos,
        "returns": returns,
        "loaded": loaded,
        "encoder_record": encoder_record,
        "observations": observations,
        "same_values": same_values,
        "model_path": model_path,
        "onnx_path": onnx_path,
        "onnx_matches": onnx_matches,
        "sac": sac,
        "sac_values": sac_values,
        "critic_encoders": critic_encoders,
    }


if __name__ == "__main__":
    main()
