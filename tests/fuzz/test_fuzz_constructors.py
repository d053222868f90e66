"""MDPDataset fed random dtypes, shapes and values (complex, float64 beyond
float32, NaN, inf, wrong lengths): it either builds a dataset whose stored
values equal the inputs as float32, or raises ValueError / TypeError naming
the field, never a warning, another exception, or silently changed data."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fuzz_budget import budget
from offrl.dataset import MDPDataset

pytestmark = pytest.mark.fuzz

FIELDS = ("observations", "actions", "rewards", "terminals", "timeouts", "behaviour_probabilities",
          "action_size", "action_space", "step", "the dataset")
DTYPES = st.sampled_from([np.float16, np.float32, np.float64, np.int8, np.int64, np.uint8, np.bool_,
                          np.complex64, np.complex128])
HOSTILE_FLOATS = st.sampled_from([np.nan, np.inf, -np.inf, 1e39, -1e300, 3.4028234663852886e38, 0.5, -1.0, 2.0])


@st.composite
def column(draw, n: int, width_choices=(None, 1, 2, 3)):
    """A column of about ``n`` rows: any dtype, sometimes the wrong length,
    sometimes with one hostile value (NaN, inf, beyond float32, fractional)."""
    rows = draw(st.sampled_from([n, n, n, n - 1, n + 1, 0]))
    width = draw(st.sampled_from(width_choices))
    shape = (rows,) if width is None else (rows, width)
    values = draw(hnp.arrays(np.float64, shape, elements=st.integers(-3, 3).map(float)))
    if values.size and draw(st.booleans()):
        values.reshape(-1)[draw(st.integers(0, values.size - 1))] = draw(HOSTILE_FLOATS)
        return values  # hostile values stay float64, as a user's array would hold them
    dtype = np.dtype(draw(DTYPES))
    if dtype.kind == "c":
        return values.astype(dtype) + (1j if draw(st.booleans()) else 0)
    with np.errstate(invalid="ignore"):
        return values.astype(dtype)


def _names_a_field(message: str) -> bool:
    return any(field in message for field in FIELDS)


@budget(40)
@given(data=st.data(), n=st.integers(1, 6))
def test_mdp_dataset_constructor_accepts_or_names_the_field(data, n):
    obs = data.draw(column(n, (None, 2, 3)), label="observations")
    actions = data.draw(column(n, (None, 1, 2)), label="actions")
    rewards = data.draw(column(n, (None, 1)), label="rewards")
    terminals = data.draw(st.one_of(column(n, (None,)), st.just(np.array([0] * (n - 1) + [1]))), label="terminals")
    behaviour = data.draw(st.one_of(st.none(), column(n, (None,))), label="behaviour_probabilities")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a ComplexWarning or overflow warning means data was changed silently
        try:
            dataset = MDPDataset(obs, actions, rewards, terminals, behaviour_probabilities=behaviour)
        except (ValueError, TypeError) as e:
            assert _names_a_field(str(e)), f"{type(e).__name__} names no field: {e}"
            return
    # built: what is stored is what was given, as float32, and all of it is finite and real
    stored_rewards = np.concatenate([ep.rewards[:, 0] for ep in dataset.episodes])
    assert np.isrealobj(rewards) and np.isfinite(stored_rewards).all()
    np.testing.assert_array_equal(stored_rewards, np.asarray(rewards, dtype=np.float32).reshape(-1))
    stored_obs = np.concatenate([ep.observations for ep in dataset.episodes])
    assert np.isrealobj(obs) and np.isfinite(stored_obs.astype(np.float64)).all()
    np.testing.assert_array_equal(stored_obs.reshape(n, -1), np.asarray(obs).reshape(n, -1).astype(stored_obs.dtype))


@budget(20)
@given(value=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.complex_numbers()), row=st.integers(0, 4))
def test_one_hostile_reward_is_refused_at_its_row_or_kept_exactly(value, row):
    rewards = np.zeros(5, dtype=np.complex128 if isinstance(value, complex) else np.float64)
    rewards[row] = value
    kwargs = dict(observations=np.zeros((5, 2)), actions=np.zeros((5, 2)), terminals=np.array([0, 0, 0, 0, 1]))
    if isinstance(value, complex):
        with pytest.raises(TypeError, match="rewards must hold real numbers"):
            MDPDataset(rewards=rewards, **kwargs)
    elif not np.isfinite(value) or abs(value) > float(np.finfo(np.float32).max):
        with pytest.raises(ValueError, match=rf"^rewards\[{row}\] is "):
            MDPDataset(rewards=rewards, **kwargs)
    else:
        dataset = MDPDataset(rewards=rewards, **kwargs)
        assert dataset.episodes[0].rewards[row, 0] == np.float32(value)
