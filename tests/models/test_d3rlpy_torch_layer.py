"""d3rlpy's torch layer on offrl (:mod:`offrl.models.torch`,
:mod:`offrl.models.builders`' ``create_*``): the maths of each piece
against a hand computation or a plain loop, the encoders' two layer
orders, and the errors bad arguments get."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from offrl.algos.qlearning.torch.utility import sample_q_values_with_policy
from offrl.constants import PositionEncodingType
from offrl.models import (
    DefaultEncoderFactory,
    IQNQFunctionFactory,
    MeanQFunctionFactory,
    QRQFunctionFactory,
    SimBaEncoderFactory,
    VectorEncoderFactory,
    create_continuous_decision_transformer,
    create_continuous_q_function,
    create_discrete_decision_transformer,
    create_discrete_q_function,
    create_normal_policy,
    create_parameter,
    create_vae_decoder,
    create_vae_encoder,
)
from offrl.models.encoders import PixelEncoderFactory
from offrl.models.torch import (
    ActionOutput,
    CategoricalPolicy,
    ContinuousMeanQFunction,
    ContinuousMeanQFunctionForwarder,
    DiscreteMeanQFunction,
    DiscreteMeanQFunctionForwarder,
    Encoder,
    EncoderWithAction,
    GaussianDistribution,
    Parameter,
    SquashedGaussianDistribution,
    build_gaussian_distribution,
    build_squashed_gaussian_distribution,
    compute_discrete_imitation_loss,
    compute_max_with_n_actions_and_indices,
    compute_output_size,
    compute_vae_error,
    get_parameter,
)
from offrl.models.torch.encoders import PixelEncoder, VectorEncoder, VectorEncoderWithAction

LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def _normal_log_density(y, mean, std):
    """Diagonal Gaussian log-density by its formula, summed over the last axis."""
    return np.sum(-0.5 * ((y - mean) / std) ** 2 - np.log(std) - LOG_SQRT_2PI, axis=-1, keepdims=True)


class Identity(Encoder):
    """The observation itself as features (exact values in the tests)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size
        self.unused = nn.Parameter(torch.zeros(1))  # a device to read

    def forward(self, x):
        return x


class Concat(EncoderWithAction):
    def __init__(self) -> None:
        super().__init__()
        self.unused = nn.Parameter(torch.zeros(1))

    def forward(self, x, action):
        return torch.cat([x, action], dim=1)


# ------------------------------------------------------------ distributions
def test_gaussian_log_prob_is_the_formula():
    loc = torch.tensor([[0.2, -0.1], [0.0, 0.5]])
    std = torch.tensor([[0.5, 2.0], [1.0, 0.3]])
    y = torch.tensor([[0.3, 0.4], [-0.2, 0.9]])
    dist = GaussianDistribution(loc, std, raw_loc=torch.atanh(loc))
    expected = _normal_log_density(y.numpy(), loc.numpy(), std.numpy())
    np.testing.assert_allclose(dist.log_prob(y).numpy(), expected, rtol=1e-6)
    assert torch.equal(dist.mean, loc) and torch.equal(dist.std, std)
    torch.manual_seed(0)
    samples, log_prob = dist.sample_n_with_log_prob(7)
    assert samples.shape == (2, 7, 2) and log_prob.shape == (2, 7, 1)
    assert samples.abs().max() <= 1.0  # clipped to the action range
    np.testing.assert_allclose(log_prob.numpy(), _normal_log_density(samples.numpy(), loc.numpy()[:, None], std.numpy()[:, None]),
                               rtol=1e-5)


def test_squashed_gaussian_log_prob_carries_the_tanh_correction():
    loc = torch.tensor([[0.3, -1.2]])
    std = torch.tensor([[0.4, 0.8]])
    u = np.array([[0.5, -0.7]])
    y = np.tanh(u)
    # log p(y) = log N(u) - sum log(1 - tanh(u)^2)
    expected = _normal_log_density(u, loc.numpy(), std.numpy()) - np.sum(np.log(1.0 - y**2), axis=-1, keepdims=True)
    dist = SquashedGaussianDistribution(loc, std)
    np.testing.assert_allclose(dist.log_prob(torch.tensor(y, dtype=torch.float32)).numpy(), expected, rtol=1e-5)
    torch.manual_seed(1)
    actions, log_prob = dist.sample_with_log_prob()
    assert actions.abs().max() < 1.0
    np.testing.assert_allclose(log_prob.numpy(), dist.log_prob(actions).detach().numpy(), rtol=1e-4)
    mean, mean_log_prob = dist.mean_with_log_prob()
    np.testing.assert_allclose(mean.numpy(), np.tanh(loc.numpy()), rtol=1e-6)
    np.testing.assert_allclose(mean_log_prob.numpy(), dist.log_prob(mean).numpy(), rtol=1e-4)
    assert dist.onnx_safe_sample_n(5).shape == (1, 5, 2) and dist.sample_n_without_squash(5).shape == (1, 5, 2)


def test_build_distributions_from_an_action_output():
    mu, logstd = torch.tensor([[0.1, 0.2]]), torch.tensor([[-1.0, 0.5]])
    output = ActionOutput(mu, torch.tanh(mu), logstd)
    gaussian = build_gaussian_distribution(output)
    assert torch.equal(gaussian.mean, torch.tanh(mu)) and torch.allclose(gaussian.std, logstd.exp())
    with pytest.raises(ValueError, match="logstd=None"):
        build_gaussian_distribution(ActionOutput(mu, mu, None))
    with pytest.raises(TypeError, match="ActionOutput"):
        build_gaussian_distribution((mu, mu, logstd))  # type: ignore[arg-type]
    mu_out, squashed, std_out = output  # a NamedTuple, as d3rlpy's
    assert mu_out is mu and std_out is logstd


# ------------------------------------------------------------ Q-functions
def test_discrete_mean_q_function_td_error_by_hand():
    q_func = DiscreteMeanQFunction(Identity(2), 2, 3)
    with torch.no_grad():
        q_func._fc.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
        q_func._fc.bias.zero_()
    forwarder = DiscreteMeanQFunctionForwarder(q_func, 3)
    x = torch.tensor([[1.0, 2.0], [0.5, -1.0]])
    actions = torch.tensor([[2], [0]])
    rewards = torch.tensor([[1.0], [0.0]])
    target = torch.tensor([[2.0], [4.0]])
    terminals = torch.tensor([[0.0], [1.0]])
    # Q(x0, 2) = 3, y0 = 1 + 0.9 * 2 = 2.8, diff 0.2 -> 0.02; Q(x1, 0) = 0.5, y1 = 0, diff 0.5 -> 0.125
    expected = np.array([[0.5 * 0.2**2], [0.5 * 0.5**2]])
    error = forwarder.compute_error(x, actions, rewards, target, terminals, gamma=0.9, reduction="none")
    np.testing.assert_allclose(error.detach().numpy(), expected, rtol=1e-5)
    assert float(forwarder.compute_error(x, actions, rewards, target, terminals, 0.9).detach()) == pytest.approx(expected.mean())
    assert float(forwarder.compute_error(x, actions, rewards, target, terminals, 0.9, "sum").detach()) == pytest.approx(expected.sum())
    # a large TD error is in the linear part of the Huber loss
    far = forwarder.compute_error(x[:1], actions[:1], torch.tensor([[10.0]]), target[:1], terminals[:1], 0.9, "none")
    assert float(far.detach()) == pytest.approx(abs(10.0 + 1.8 - 3.0) - 0.5)
    np.testing.assert_allclose(forwarder.compute_target(x, actions).detach().numpy(), [[3.0], [0.5]])
    with pytest.raises(ValueError, match="reduction must be one of"):
        forwarder.compute_error(x, actions, rewards, target, terminals, 0.9, "median")


def test_continuous_mean_q_function_td_error_is_the_squared_error():
    q_func = ContinuousMeanQFunction(Concat(), 3)
    with torch.no_grad():
        q_func._fc.weight.copy_(torch.tensor([[1.0, -1.0, 2.0]]))
        q_func._fc.bias.fill_(0.5)
    forwarder = ContinuousMeanQFunctionForwarder(q_func)
    x, action = torch.tensor([[1.0, 2.0]]), torch.tensor([[0.25]])
    # Q = 1 - 2 + 0.5 + 0.5 = 0.0; y = 1 + 0.99 * 3 * (1 - 0) = 3.97
    error = forwarder.compute_error(x, action, torch.tensor([[1.0]]), torch.tensor([[3.0]]), torch.tensor([[0.0]]))
    assert float(error.detach()) == pytest.approx(3.97**2, rel=1e-6)


def _members(forwarder):
    return forwarder.forwarders


@pytest.mark.parametrize("reduction", ["min", "max", "mean", "mix", "none"])
def test_continuous_ensemble_reductions_match_a_loop(reduction):
    torch.manual_seed(0)
    q_funcs, forwarder = create_continuous_q_function((3,), 2, VectorEncoderFactory([8]), MeanQFunctionFactory(),
                                                      device="cpu", enable_ddp=False, n_ensembles=3)
    x, action = torch.randn(5, 3), torch.rand(5, 2) * 2 - 1
    members = torch.stack([q(x, action).q_value for q in q_funcs])  # (3, 5, 1)
    naive = {"min": members.min(0).values, "max": members.max(0).values, "mean": members.mean(0),
             "mix": 0.75 * members.min(0).values + 0.25 * members.max(0).values, "none": members}[reduction]
    torch.testing.assert_close(forwarder.compute_target(x, action, reduction=reduction), naive)
    torch.testing.assert_close(forwarder.compute_expected_q(x, action, reduction=reduction), naive)


@pytest.mark.parametrize("reduction", ["min", "max", "mix"])
def test_discrete_quantile_ensemble_picks_members_by_their_mean(reduction):
    torch.manual_seed(1)
    q_funcs, forwarder = create_discrete_q_function((4,), 3, VectorEncoderFactory([8]), QRQFunctionFactory(n_quantiles=5),
                                                    device="cpu", enable_ddp=False, n_ensembles=3)
    x = torch.randn(6, 4)
    quantiles = torch.stack([q(x).quantiles for q in q_funcs])  # (E, B, A, N)
    out = forwarder.compute_target(x, reduction=reduction, lam=0.6)
    assert out.shape == (6, 3, 5)
    for b in range(6):
        for a in range(3):
            means = quantiles[:, b, a].mean(dim=1)
            low, high = quantiles[int(means.argmin()), b, a], quantiles[int(means.argmax()), b, a]
            naive = {"min": low, "max": high, "mix": 0.6 * low + 0.4 * high}[reduction]
            torch.testing.assert_close(out[b, a], naive)
    action = torch.tensor([0, 2, 1, 1, 0, 2])
    at_action = forwarder.compute_target(x, action, reduction="max")
    assert at_action.shape == (6, 5)
    for b in range(6):
        member = int(quantiles[:, b, int(action[b])].mean(dim=1).argmax())
        torch.testing.assert_close(at_action[b], quantiles[member, b, int(action[b])])


def test_quantile_td_error_matches_a_loop():
    torch.manual_seed(2)
    q_funcs, forwarder = create_discrete_q_function((4,), 2, VectorEncoderFactory([8]), QRQFunctionFactory(n_quantiles=4),
                                                    device="cpu", enable_ddp=False)
    member = forwarder.forwarders[0]
    x, actions = torch.randn(3, 4), torch.tensor([[1], [0], [1]])
    rewards, terminals = torch.tensor([[1.0], [0.5], [-1.0]]), torch.tensor([[0.0], [1.0], [0.0]])
    target = torch.randn(3, 4)
    out = q_funcs[0](x)
    taus = out.taus[0]
    assert torch.allclose(taus, torch.tensor([0.125, 0.375, 0.625, 0.875]))
    expected = []
    for b in range(3):
        pred = out.quantiles[b, int(actions[b])].detach()
        y = rewards[b] + 0.9 * target[b] * (1 - terminals[b])
        total = 0.0
        for j in range(4):  # targets
            for i in range(4):  # predicted quantiles
                u = float(y[j] - pred[i])
                huber = 0.5 * u * u if abs(u) < 1 else abs(u) - 0.5
                total += abs(float(taus[i]) - (u < 0)) * huber
        expected.append(total / 4)
    error = member.compute_error(x, actions, rewards, target, terminals, gamma=0.9, reduction="none")
    np.testing.assert_allclose(error.detach().numpy().ravel(), expected, rtol=1e-5)
    ensemble = forwarder.compute_error(x, actions, rewards, target, terminals, gamma=0.9)
    assert float(ensemble.detach()) == pytest.approx(np.mean(expected), rel=1e-5)
    with pytest.raises(ValueError, match="target must hold"):
        member.compute_error(x, actions, rewards, target[:2], terminals, 0.9)


def test_iqn_uses_sampled_fractions_to_train_and_fixed_ones_to_act():
    factory = IQNQFunctionFactory(n_quantiles=6, n_greedy_quantiles=3, embed_size=4)
    q_funcs, forwarder = create_continuous_q_function((2,), 1, VectorEncoderFactory([8]), factory, device="cpu",
                                                      enable_ddp=False)
    x, action = torch.randn(5, 2), torch.rand(5, 1)
    assert q_funcs[0](x, action).quantiles.shape == (5, 6)
    q_funcs.eval()
    out = q_funcs[0](x, action)
    assert out.quantiles.shape == (5, 3) and torch.allclose(out.taus[0], torch.tensor([0.0, 0.5, 1.0]))
    torch.testing.assert_close(forwarder.compute_expected_q(x, action), out.quantiles.mean(dim=1, keepdim=True))


def test_max_with_n_actions_matches_a_loop():
    torch.manual_seed(3)
    _, forwarder = create_continuous_q_function((3,), 2, VectorEncoderFactory([8]), MeanQFunctionFactory(),
                                                device="cpu", enable_ddp=False, n_ensembles=2)
    x, actions, lam = torch.randn(4, 3), torch.rand(4, 5, 2) * 2 - 1, 0.75
    values, indices = compute_max_with_n_actions_and_indices(x, actions, forwarder, lam)
    assert values.shape == (4, 1) and indices.shape == (4,)
    for b in range(4):
        mixed = []
        for j in range(5):
            q = forwarder.compute_target(x[b:b + 1], actions[b, j:j + 1], reduction="none")[:, 0, 0]
            mixed.append(lam * q.min() + (1 - lam) * q.max())
        assert int(indices[b]) == int(torch.stack(mixed).argmax())
        torch.testing.assert_close(values[b, 0], torch.stack(mixed).max())


def test_shared_encoder_gets_the_mean_of_the_members_gradients():
    factory = VectorEncoderFactory([4])
    torch.manual_seed(4)
    q_funcs, forwarder = create_continuous_q_function((2,), 1, factory, MeanQFunctionFactory(share_encoder=True),
                                                      device="cpu", enable_ddp=False, n_ensembles=2)
    assert q_funcs[0].encoder is q_funcs[1].encoder
    x, action = torch.randn(3, 2), torch.rand(3, 1)
    forwarder.compute_expected_q(x, action, reduction="none").sum().backward()
    shared_grad = q_funcs[0].encoder.mlp.layers[0].weight.grad.clone()
    # the plain sum of the members' gradients, through a copy of the weight (no hook on it)
    name = "_encoder.mlp.layers.0.weight"
    weight = q_funcs[0].get_parameter(name).detach().clone().requires_grad_()
    total = sum(torch.func.functional_call(q, {name: weight}, (x, action)).q_value.sum() for q in q_funcs)
    plain, = torch.autograd.grad(total, weight)
    torch.testing.assert_close(shared_grad, plain / 2)


# ------------------------------------------------------------ policies, VAE, imitation
def test_normal_policy_with_std_parameter_maps_logstd_into_its_range():
    torch.manual_seed(5)
    policy = create_normal_policy((3,), 2, VectorEncoderFactory([8]), device="cpu", enable_ddp=False,
                                  min_logstd=-4.0, max_logstd=1.0, use_std_parameter=True)
    out = policy(torch.randn(6, 3))
    assert out.mu.shape == (6, 2) and torch.equal(out.squashed_mu, torch.tanh(out.mu))
    np.testing.assert_allclose(out.logstd.detach().numpy(), np.full((1, 2), -1.5))  # sigmoid(0) = 1/2 of the span
    with pytest.raises(ValueError, match="min_logstd must be below max_logstd"):
        create_normal_policy((3,), 2, VectorEncoderFactory(), "cpu", False, min_logstd=2.0, max_logstd=-1.0)


def test_vae_error_by_hand():
    torch.manual_seed(6)
    encoder = create_vae_encoder((3,), 2, 4, VectorEncoderFactory([8]), device="cpu", enable_ddp=False)
    decoder = create_vae_decoder((3,), 2, 4, VectorEncoderFactory([8]), device="cpu", enable_ddp=False)
    x, action = torch.randn(5, 3), torch.rand(5, 2) * 2 - 1
    torch.manual_seed(7)
    error = compute_vae_error(encoder, decoder, x, action, beta=0.5)
    torch.manual_seed(7)
    dist = encoder(x, action)
    mean, std = dist.mean.detach().numpy(), dist.stddev.detach().numpy()
    z = dist.rsample()
    reconstruction = decoder(x, z).detach().numpy()  # with_squash=True: the raw output (d3rlpy's meaning)
    kl = np.mean(np.log(1.0 / std) + (std**2 + mean**2) / 2.0 - 0.5)
    expected = np.mean((reconstruction - action.numpy()) ** 2) + 0.5 * kl
    assert float(error.detach()) == pytest.approx(float(expected), rel=1e-5)
    torch.testing.assert_close(decoder(x, z, with_squash=False), torch.tanh(decoder(x, z)))


def test_discrete_imitation_loss_by_hand():
    policy = CategoricalPolicy(Identity(3), 3, 3)
    with torch.no_grad():
        policy._fc.weight.copy_(torch.eye(3))
        policy._fc.bias.zero_()
    x, action = torch.tensor([[1.0, 0.0, -1.0], [0.0, 2.0, 0.0]]), torch.tensor([0, 1])
    loss = compute_discrete_imitation_loss(policy, x, action, beta=0.1)
    logits = x.numpy()
    log_softmax = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    nll = -np.mean([log_softmax[0, 0], log_softmax[1, 1]])
    assert float(loss.imitation_loss.detach()) == pytest.approx(nll, rel=1e-6)
    # the penalty is on Categorical's (normalised) logits, the log-probabilities, as d3rlpy computes it
    assert float(loss.regularization_loss.detach()) == pytest.approx(0.1 * np.mean(log_softmax**2), rel=1e-6)
    assert float(loss.loss.detach()) == pytest.approx(nll + 0.1 * np.mean(log_softmax**2), rel=1e-6)


def test_sample_q_values_with_policy_values_the_sampled_actions():
    torch.manual_seed(8)
    policy = create_normal_policy((3,), 2, VectorEncoderFactory([8]), "cpu", False)
    _, forwarder = create_continuous_q_function((3,), 2, VectorEncoderFactory([8]), MeanQFunctionFactory(), "cpu",
                                                False, n_ensembles=2)
    x = torch.randn(4, 3)
    torch.manual_seed(9)
    values, log_probs = sample_q_values_with_policy(policy, forwarder, x, x, 6, detach_policy_output=True)
    assert values.shape == (2, 4, 6) and log_probs.shape == (1, 4, 6) and not log_probs.requires_grad
    torch.manual_seed(9)
    actions, expected_log_probs = build_squashed_gaussian_distribution(policy(x)).sample_n_with_log_prob(6)
    torch.testing.assert_close(log_probs[0], expected_log_probs[..., 0].detach())
    for b in range(4):
        q = forwarder.compute_expected_q(x[b:b + 1].expand(6, 3), actions[b], reduction="none")[..., 0]
        torch.testing.assert_close(values[:, b], q)


# ------------------------------------------------------------ encoders
def test_factories_return_d3rlpys_encoder_classes_with_offrls_layers():
    vector = VectorEncoderFactory(hidden_units=[5], use_batch_norm=True).create_with_action((3,), 2, True)
    assert isinstance(vector, VectorEncoderWithAction) and isinstance(vector, EncoderWithAction)
    assert vector._discrete_action is True and vector.discrete_action is True
    # offrl's order (normalisation before the activation) and state-dict keys, as saved models have them
    assert [type(m).__name__ for m in vector.mlp.layers] == ["Linear", "BatchNorm1d", "ReLU"]
    assert list(vector.state_dict())[:3] == ["mlp.layers.0.weight", "mlp.layers.0.bias", "mlp.layers.1.weight"]
    # d3rlpy's constructor puts the activation first
    direct = VectorEncoder((3,), [5], use_batch_norm=True, activation=nn.Tanh())
    assert [type(m).__name__ for m in direct.mlp.layers] == ["Linear", "Tanh", "BatchNorm1d"]
    pixel = PixelEncoderFactory(use_batch_norm=True).create((1, 36, 36))
    assert isinstance(pixel, PixelEncoder) and isinstance(pixel, Encoder)
    assert [type(m).__name__ for m in pixel.head] == ["Linear", "BatchNorm1d", "ReLU"]
    assert [type(m).__name__ for m in PixelEncoder((1, 36, 36), use_batch_norm=True).head] == ["Linear", "ReLU", "BatchNorm1d"]
    simba = SimBaEncoderFactory(feature_size=8, hidden_size=16).create_with_action((3,), 2)
    assert simba(torch.zeros(4, 3), torch.zeros(4, 2)).shape == (4, 8) and simba._discrete_action is False
    assert list(simba.state_dict())[0] == "layers.0.weight"


def test_compute_output_size_takes_both_call_forms():
    encoder = DefaultEncoderFactory().create_with_action((4,), 3)
    assert compute_output_size([(4,), (3,)], encoder) == 256
    assert compute_output_size(encoder, (4,), 3) == 256
    tuple_encoder = DefaultEncoderFactory().create([(2,), (3,)])
    assert compute_output_size([[(2,), (3,)]], tuple_encoder) == 256
    with pytest.raises(ValueError, match="input_shapes must be a list of shapes"):
        compute_output_size(["obs"], encoder)


# ------------------------------------------------------------ parameters, transformers, bad input
def test_parameter_and_create_parameter():
    parameter = create_parameter((1, 2), 0.5, device="cpu", enable_ddp=False)
    assert isinstance(parameter, Parameter) and torch.equal(get_parameter(parameter), torch.full((1, 2), 0.5))
    with pytest.raises(NotImplementedError, match="get_parameter"):
        parameter()
    with pytest.raises(ValueError, match="initial_value must be a finite number"):
        create_parameter((1,), float("nan"), "cpu", False)
    with pytest.raises(TypeError, match="floating-point"):
        Parameter(torch.zeros(2, dtype=torch.long))


def test_decision_transformers_ignore_front_padding():
    torch.manual_seed(10)
    common = dict(encoder_factory=VectorEncoderFactory([16]), num_heads=2, max_timestep=20, num_layers=2,
                  context_size=4, attn_dropout=0.0, resid_dropout=0.0, embed_dropout=0.0, activation_type="relu",
                  position_encoding_type=PositionEncodingType.SIMPLE, device="cpu", enable_ddp=False)
    transformer = create_continuous_decision_transformer(observation_shape=(3,), action_size=2, **common).eval()
    x, action = torch.randn(1, 4, 3), torch.rand(1, 4, 2)
    rtg, timesteps = torch.randn(1, 4, 1), torch.tensor([[0, 5, 6, 7]])
    mask = torch.tensor([[0.0, 1.0, 1.0, 1.0]])
    padded = transformer(x, action, rtg, timesteps, mask)
    unpadded = transformer(x[:, 1:], action[:, 1:], rtg[:, 1:], timesteps[:, 1:], mask[:, 1:])
    torch.testing.assert_close(padded[:, 1:], unpadded)
    assert padded.abs().max() <= 1.0
    discrete = create_discrete_decision_transformer(observation_shape=(3,), action_size=3, embed_activation_type="tanh",
                                                    **common)
    probs, logits = discrete(x, torch.randint(0, 3, (1, 4)), rtg, timesteps, torch.ones(1, 4))
    torch.testing.assert_close(probs, torch.softmax(logits, dim=-1))


def test_builders_name_the_bad_argument():
    factory = VectorEncoderFactory()
    with pytest.raises(TypeError, match="enable_ddp must be True or False"):
        create_normal_policy((3,), 2, factory, "cpu", enable_ddp="no")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="encoder_factory must be an EncoderFactory"):
        create_normal_policy((3,), 2, "vector", "cpu", False)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="action_size must be a positive int"):
        create_normal_policy((3,), 0, factory, "cpu", False)
    with pytest.raises(ValueError, match="n_ensembles must be a positive int"):
        create_continuous_q_function((3,), 2, factory, MeanQFunctionFactory(), "cpu", False, n_ensembles=0)
    with pytest.raises(TypeError, match="q_func_factory must be a QFunctionFactory"):
        create_discrete_q_function((3,), 2, factory, "mean", "cpu", False)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="hidden_units\\[1\\] must be a positive int"):
        VectorEncoder((3,), [4, 0])
    with pytest.raises(TypeError, match="activation must be an activation name or an nn.Module"):
        VectorEncoder((3,), [4], activation=3)  # type: ignore[arg-type]
