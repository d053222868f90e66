"""d3rlpy docs, "Tutorials / Offline Policy Selection" and "API Reference /
Off-Policy Evaluation", run with ``import offrl``.

Changes other than the import (marked ``# docs:``): sizes; the trained model's
path (the docs load ``d3rlpy_logs/DQN_<time>/model_100000.d3``; here the model
saved by the step before); ``DQN.fit(..., scorers=...)`` -> ``evaluators=``
(d3rlpy 2.x renamed it; 2.8.1's ``fit`` rejects ``scorers`` too, offrl's FQE
still takes it).
"""

from __future__ import annotations

import numpy as np
import pytest

import offrl

NOOP = {"show_progress": False, "logger_adapter": offrl.logging.NoopAdapterFactory()}


def test_offline_policy_selection_tutorial(cartpole, workdir) -> None:
    # setup replay CartPole dataset and environment
    dataset, env = cartpole  # docs: get_dataset("cartpole-replay")
    dqn = offrl.algos.DQNConfig().create()
    result = dqn.fit(
        dataset,
        n_steps=10,  # docs: 100000
        n_steps_per_epoch=5,  # docs: 10000
        evaluators={  # docs: scorers=
            "environment": offrl.metrics.EnvironmentEvaluator(env, n_trials=1),
        },
        **NOOP,
    )
    assert "environment" in result[-1][1]
    dqn.save("model_10.d3")

    # load pretrained policy
    dqn = offrl.load_learnable("model_10.d3")
    # setup FQE algorithm
    fqe = offrl.ope.DiscreteFQE(algo=dqn, config=offrl.ope.DiscreteFQEConfig())
    # start FQE training
    result = fqe.fit(
        dataset,
        n_steps=10,  # docs: 10000
        n_steps_per_epoch=5,  # docs: 1000
        scorers={
            "init_value": offrl.metrics.InitialStateValueEstimationEvaluator(),
            "soft_opc": offrl.metrics.SoftOPCEvaluator(180),  # set 180 for success return threshold here
        },
        **NOOP,
    )
    assert [epoch for epoch, _ in result] == [1, 2]
    metrics = result[-1][1]
    assert {"init_value", "soft_opc"} <= set(metrics)
    # the logged init_value is FQE's value of the evaluated policy's action at the initial states
    first = np.stack([ep.observations[0] for ep in dataset.episodes])
    expected = np.mean(fqe.predict_value(first, dqn.predict(first)))
    assert metrics["init_value"] == pytest.approx(expected, rel=1e-4)
    # FQE acts as the evaluated policy
    np.testing.assert_array_equal(fqe.predict(first), dqn.predict(first))


def test_fqe_continuous_reference(pendulum, workdir) -> None:
    dataset, env = pendulum
    cql = offrl.algos.CQLConfig(batch_size=16).create()
    cql.fit(dataset, n_steps=2, n_steps_per_epoch=2, **NOOP)
    cql.save("model.d3")
    # prepare the trained algorithm
    cql = offrl.load_learnable("model.d3")
    # off-policy evaluation algorithm
    fqe = offrl.ope.FQE(algo=cql, config=offrl.ope.FQEConfig())
    # train estimators to evaluate the trained policy
    result = fqe.fit(
        dataset,
        n_steps=4,  # docs: 100000
        n_steps_per_epoch=2,
        scorers={
            "init_value": offrl.metrics.InitialStateValueEstimationEvaluator(),
            "soft_opc": offrl.metrics.SoftOPCEvaluator(return_threshold=-300),
        },
        **NOOP,
    )
    assert {"init_value", "soft_opc"} <= set(result[-1][1])
    assert all(np.isfinite(v) for v in result[-1][1].values())
    x = dataset.episodes[0].observations[:5]
    np.testing.assert_allclose(fqe.predict(x), cql.predict(x), rtol=1e-6)


def test_fqe_config_create_needs_the_algorithm() -> None:
    # as d3rlpy: FQE is built around the evaluated algorithm, not from its config alone
    with pytest.raises(NotImplementedError):
        offrl.ope.FQEConfig().create()
