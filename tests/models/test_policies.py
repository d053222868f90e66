"""Policies and value functions: shapes, the tanh-squashed sample's
log-density against the change-of-variables formula written out by hand,
greedy actions, log-std bounds, outputs in range.

The heads get an identity encoder and hand-set weights so each expected
value is a few lines of scalar arithmetic (Python floats, float64)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from torch import nn

from offrl.models.policies import (
    ArgmaxPolicy,
    CategoricalPolicy,
    DeterministicPolicy,
    GreedyNormalPolicy,
    NormalPolicy,
    ValueFunction,
    gaussian_log_prob,
    squashed_log_prob,
    squashed_sample,
)

W = [[0.5, -1.0], [2.0, 0.25]]  # (action, feature)
B = [0.1, -0.3]
X = [[0.2, -0.4], [1.0, 0.5], [-0.7, 0.3]]


def set_linear(layer: nn.Linear, weight, bias) -> None:
    with torch.no_grad():
        layer.weight.copy_(torch.tensor(weight, dtype=torch.float32))
        layer.bias.copy_(torch.tensor(bias, dtype=torch.float32))


def affine(x, weight, bias) -> list:
    """``W x + b`` for one row, by hand."""
    return [sum(w * v for w, v in zip(row, x)) + b for row, b in zip(weight, bias)]


def normal_policy(**kwargs) -> NormalPolicy:
    policy = NormalPolicy(nn.Identity(), feature_size=2, action_size=2, **kwargs)
    set_linear(policy.mu, W, B)
    if not policy.use_std_parameter:
        set_linear(policy.logstd, [[0.3, 0.1], [-0.2, 0.4]], [-0.5, 0.2])
    return policy


def hand_log_density(u, mean, logstd) -> float:
    """log N(u; mean, exp(logstd)) - log(1 - tanh(u)^2), summed over dimensions."""
    total = 0.0
    for ui, mi, si in zip(u, mean, logstd):
        total += -0.5 * ((ui - mi) / math.exp(si)) ** 2 - si - 0.5 * math.log(2 * math.pi)
        total -= math.log(1.0 - math.tanh(ui) ** 2)
    return total


def test_deterministic_policy_is_tanh_of_the_affine_head():
    policy = DeterministicPolicy(nn.Identity(), feature_size=2, action_size=2)
    set_linear(policy.fc, W, B)
    out = policy(torch.tensor(X))
    assert out.shape == (3, 2)
    expected = [[math.tanh(v) for v in affine(x, W, B)] for x in X]
    np.testing.assert_allclose(out.detach().numpy(), expected, rtol=1e-5, atol=1e-6)


@settings(max_examples=30, deadline=None)
@given(x=arrays(np.float32, (4, 2), elements=st.floats(-1e6, 1e6, width=32)))
def test_deterministic_policy_stays_in_range(x):
    torch.manual_seed(0)
    policy = DeterministicPolicy(nn.Identity(), feature_size=2, action_size=3)
    out = policy(torch.from_numpy(x)).detach()
    assert out.shape == (4, 3)
    assert torch.isfinite(out).all() and (out.abs() <= 1.0).all()


def test_normal_policy_mean_and_state_dependent_logstd():
    policy = normal_policy()
    mean, logstd = policy(torch.tensor(X))
    assert mean.shape == logstd.shape == (3, 2)
    np.testing.assert_allclose(mean.detach().numpy(), [affine(x, W, B) for x in X], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        logstd.detach().numpy(), [affine(x, [[0.3, 0.1], [-0.2, 0.4]], [-0.5, 0.2]) for x in X], rtol=1e-5, atol=1e-6
    )


def test_state_dependent_logstd_is_clipped_to_its_bounds():
    policy = NormalPolicy(nn.Identity(), feature_size=2, action_size=2, min_logstd=-3.0, max_logstd=1.5)
    set_linear(policy.logstd, [[0.0, 0.0], [0.0, 0.0]], [100.0, -100.0])
    _, logstd = policy(torch.tensor(X))
    assert torch.equal(logstd, torch.tensor([[1.5, -3.0]] * 3))


def test_std_parameter_starts_in_the_middle_and_stays_inside_the_bounds():
    policy = normal_policy(use_std_parameter=True, min_logstd=-5.0, max_logstd=2.0)
    mean, logstd = policy(torch.tensor(X))
    assert logstd.shape == mean.shape == (3, 2)
    np.testing.assert_allclose(logstd.detach().numpy(), -1.5, rtol=1e-6)  # sigmoid(0) = 1/2 of the range
    with torch.no_grad():
        policy.logstd.copy_(torch.tensor([[1.0, -60.0]]))
    _, logstd = policy(torch.tensor(X))
    expected = -5.0 + 7.0 / (1.0 + math.exp(-1.0))
    np.testing.assert_allclose(logstd[:, 0].detach().numpy(), expected, rtol=1e-5)
    assert ((logstd >= -5.0) & (logstd <= 2.0)).all()
    np.testing.assert_allclose(logstd[:, 1].detach().numpy(), -5.0, rtol=1e-6)
    # the bound is approached smoothly: the gradient does not vanish
    logstd[:, 0].sum().backward()
    assert float(policy.logstd.grad[0, 0]) > 0.0


def test_greedy_action_is_tanh_of_the_mean():
    policy = normal_policy()
    expected = [[math.tanh(v) for v in affine(x, W, B)] for x in X]
    np.testing.assert_allclose(policy.greedy(torch.tensor(X)).detach().numpy(), expected, rtol=1e-5, atol=1e-6)
    exported = GreedyNormalPolicy(policy)(torch.tensor(X))
    assert torch.equal(exported, policy.greedy(torch.tensor(X)))


def test_normal_policy_log_prob_is_gaussian_around_the_squashed_mean():
    policy = normal_policy()
    actions = [[0.1, -0.2], [0.9, 0.0], [-0.5, 0.5]]
    got = policy.log_prob(torch.tensor(X), torch.tensor(actions)).detach().numpy()
    assert got.shape == (3,)
    expected = []
    for x, a in zip(X, actions):
        mean = affine(x, W, B)
        logstd = affine(x, [[0.3, 0.1], [-0.2, 0.4]], [-0.5, 0.2])
        expected.append(
            sum(-0.5 * ((ai - math.tanh(mi)) / math.exp(si)) ** 2 - si - 0.5 * math.log(2 * math.pi) for ai, mi, si in zip(a, mean, logstd))
        )
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_gaussian_log_prob_by_hand():
    x, mean, logstd = [0.3, -1.2], [0.1, 0.4], [-0.7, 0.5]
    got = float(gaussian_log_prob(torch.tensor([x]), torch.tensor([mean]), torch.tensor([logstd]))[0])
    expected = sum(-0.5 * ((a - m) / math.exp(s)) ** 2 - s - 0.5 * math.log(2 * math.pi) for a, m, s in zip(x, mean, logstd))
    assert got == pytest.approx(expected, rel=1e-5, abs=1e-5)


@pytest.mark.parametrize("n", [0, 3])
def test_squashed_sample_log_prob_is_the_change_of_variables_formula(n):
    mean = torch.tensor([[0.2, -0.5], [1.0, 0.3]])
    logstd = torch.tensor([[-0.5, 0.1], [-1.0, -0.2]])
    torch.manual_seed(7)
    action, log_prob = squashed_sample(mean, logstd, n)
    # replay the generator: the sample is mean + noise * std with this noise
    torch.manual_seed(7)
    # n > 0: the n draws sample-major, as torch.distributions' rsample((n,)) (and d3rlpy's sample_n) draws them
    noise = (torch.randn(n, 2, 2).transpose(0, 1) if n else torch.randn(2, 2)).double().numpy()
    if n:
        assert action.shape == (2, n, 2) and log_prob.shape == (2, n)
    else:
        assert action.shape == (2, 2) and log_prob.shape == (2,)
        noise, action, log_prob = noise[:, None], action[:, None], log_prob[:, None]
    m, s = mean.double().tolist(), logstd.double().tolist()
    for b in range(2):
        for j in range(noise.shape[1]):
            u = [m[b][i] + noise[b, j, i] * math.exp(s[b][i]) for i in range(2)]
            np.testing.assert_allclose(action[b, j].numpy(), [math.tanh(v) for v in u], rtol=1e-5, atol=1e-6)
            assert float(log_prob[b, j]) == pytest.approx(hand_log_density(u, m[b], s[b]), rel=1e-5, abs=1e-5)


def test_n_samples_are_drawn_as_torch_distributions_draws_them():
    """``n`` samples per row come from the generator sample-major, as
    ``Normal.rsample((n,))`` (d3rlpy's ``sample_n``) draws them: the same seed
    gives the same actions, so a seeded update can be compared with
    d3rlpy's draw for draw (benchmarks/equivalence.py)."""
    from torch.distributions import Normal

    from offrl.algos.awac import gaussian_sample

    mean = torch.tensor([[0.2, -0.5], [1.0, 0.3], [-0.4, 0.8]])
    logstd = torch.tensor([[-0.5, 0.1], [-1.0, -0.2], [0.3, -0.7]])
    torch.manual_seed(3)
    action, _ = squashed_sample(mean, logstd, 4)
    torch.manual_seed(3)
    expected = torch.tanh(Normal(mean, logstd.exp()).rsample((4,))).transpose(0, 1)
    assert action.shape == (3, 4, 2) and action.is_contiguous()
    torch.testing.assert_close(action, expected, rtol=0, atol=0)
    torch.manual_seed(3)
    sampled = gaussian_sample(mean, logstd, 4)
    torch.manual_seed(3)
    expected = Normal(torch.tanh(mean), logstd.exp()).rsample((4,)).clamp(-1.0, 1.0).transpose(0, 1)
    torch.testing.assert_close(sampled, expected, rtol=0, atol=0)


def test_squashed_sample_is_reparameterised():
    mean = torch.tensor([[0.2, -0.5]], requires_grad=True)
    logstd = torch.tensor([[-0.5, 0.1]], requires_grad=True)
    action, _ = squashed_sample(mean, logstd)
    action.sum().backward()
    assert mean.grad is not None and (mean.grad != 0).all() and (logstd.grad != 0).all()


def test_squashed_log_prob_matches_the_formula_and_handles_the_bounds():
    mean, logstd = [0.2, -0.5], [-0.5, 0.1]
    actions = [[0.3, -0.6], [-0.95, 0.1], [1.0, 0.0], [1.5, 0.0], [0.0, -1.01]]
    got = squashed_log_prob(torch.tensor([mean] * 5), torch.tensor([logstd] * 5), torch.tensor(actions)).numpy()
    for row in range(2):
        u = [math.atanh(a) for a in actions[row]]
        assert got[row] == pytest.approx(hand_log_density(u, mean, logstd), rel=1e-4, abs=1e-4)
    assert np.isfinite(got[2])  # at the bound: moved 1e-6 inside
    # the bound 1 - 1e-6 as float32 holds it; atanh there is ill-conditioned in float32 (~1e-3 relative)
    u = [math.atanh(float(np.float32(1.0 - 1e-6))), 0.0]
    assert got[2] == pytest.approx(hand_log_density(u, mean, logstd), abs=0.1)
    assert got[3] == -math.inf and got[4] == -math.inf


def test_categorical_and_argmax_policies():
    policy = CategoricalPolicy(nn.Identity(), feature_size=2, action_size=2)
    set_linear(policy.fc, W, B)
    logits = policy(torch.tensor(X))
    expected = [affine(x, W, B) for x in X]
    np.testing.assert_allclose(logits.detach().numpy(), expected, rtol=1e-5, atol=1e-6)
    greedy = ArgmaxPolicy(policy)(torch.tensor(X))
    assert greedy.dtype == torch.int64
    assert greedy.tolist() == [int(np.argmax(e)) for e in expected]


def test_value_function_shape_and_values():
    value = ValueFunction(nn.Identity(), feature_size=2)
    set_linear(value.fc, [W[0]], [B[0]])
    out = value(torch.tensor(X))
    assert out.shape == (3, 1)
    np.testing.assert_allclose(out.detach().numpy()[:, 0], [affine(x, [W[0]], [B[0]])[0] for x in X], rtol=1e-5, atol=1e-6)
