"""d3rlpy docs, "API Reference / Algorithms / Decision Transformer", run with
``import offrl`` (the Decision Transformer family: issue 18).

Changes other than the import (marked ``# docs:``): sizes;
``device="cuda:0"`` -> CPU; the docs' ``observation, reward = env.reset(), 0.0``
(gym's reset) -> gymnasium's ``reset()[0]``.
"""

from __future__ import annotations

import numpy as np

import offrl

def test_decision_transformer_stateful_wrapper(pendulum, workdir) -> None:
    dataset, env = pendulum
    dt = offrl.algos.DecisionTransformerConfig(batch_size=4, context_size=5).create(device="cpu:0")
    # offline training
    dt.fit(
        dataset,
        n_steps=2,  # docs: 100000
        n_steps_per_epoch=2,  # docs: 1000
        eval_env=env,
        eval_target_return=0,  # specify target environment return
        show_progress=False,
        logger_adapter=offrl.logging.NoopAdapterFactory(),
    )
    # wrap as stateful actor for interaction
    actor = dt.as_stateful_wrapper(target_return=0)
    # interaction
    observation, reward = env.reset(seed=0)[0], 0.0  # docs: env.reset(), 0.0
    steps = 0
    while True:
        action = actor.predict(observation, reward)
        assert np.asarray(action).shape == (1,)
        observation, reward, done, truncated, _ = env.step(action)
        steps += 1
        if done or truncated:
            break
    assert steps == 200
    # reset history
    actor.reset()


def test_decision_transformer_with_action_sampler(pendulum, workdir) -> None:
    dataset, env = pendulum
    dt = offrl.algos.DecisionTransformerConfig(batch_size=4, context_size=5).create(device="cpu:0")
    dt.fit(dataset, n_steps=2, n_steps_per_epoch=2, show_progress=False,
           logger_adapter=offrl.logging.NoopAdapterFactory())
    # wrap as stateful actor for interaction with manually specified action-sampler
    actor = dt.as_stateful_wrapper(
        target_return=0,
        action_sampler=offrl.algos.IdentityTransformerActionSampler(),
    )
    observation, _ = env.reset(seed=0)
    assert np.asarray(actor.predict(observation, 0.0)).shape == (1,)
