"""predict / predict_value / sample_action refuse observations and actions
that are not a non-empty batch of finite real numbers that float32 holds,
naming the argument, the first bad row and what was expected (issue 15 item 7)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from offrl.algos import DQNConfig, SACConfig
from offrl.algos.inputs_check import FLOAT32_MAX, check_real_values


@pytest.fixture(scope="module")
def dqn():
    algo = DQNConfig().create()
    algo.create_impl((4,), 3)
    return algo


@pytest.fixture(scope="module")
def sac():
    algo = SACConfig().create()
    algo.create_impl((3,), 2)
    return algo


def _calls(algo):
    discrete = algo.get_action_type().name == "DISCRETE"

    def value(x):
        n = len(x) if hasattr(x, "__len__") and len(x) else 1
        action = np.zeros(n, dtype=np.int64) if discrete else np.zeros((n, algo.action_size), dtype=np.float32)
        return algo.predict_value(x, action)

    return {"predict": algo.predict, "sample_action": algo.sample_action, "predict_value": value}


def _with(shape, row, col, value, dtype=np.float64):
    x = np.zeros(shape, dtype=dtype)
    x[row, col] = value
    return x


@pytest.mark.parametrize("algo_name", ["dqn", "sac"])
@pytest.mark.parametrize("call", ["predict", "sample_action", "predict_value"])
@pytest.mark.parametrize(
    "value, row, message",
    [
        (np.nan, 2, "x[2] holds nan"),
        (np.inf, 1, "x[1] holds inf"),
        (-np.inf, 0, "x[0] holds -inf"),
        (1e300, 3, "x[3] holds 1e+300, beyond float32's range"),
        (-4e38, 1, "x[1] holds -4e+38, beyond float32's range"),
    ],
)
def test_non_finite_observation_names_the_first_bad_row(request, algo_name, call, value, row, message):
    algo = request.getfixturevalue(algo_name)
    x = _with((5, algo.observation_shape[0]), row, 1, value)
    x[4, 0] = np.nan  # a later bad row: the first one is named
    with pytest.raises(ValueError, match=message.replace("+", r"\+").replace("[", r"\[").replace("]", r"\]")):
        _calls(algo)[call](x)


@pytest.mark.parametrize("call", ["predict", "sample_action", "predict_value"])
def test_float32_nan_and_torch_tensors_are_checked(dqn, call):
    with pytest.raises(ValueError, match=r"x\[1\] holds nan"):
        _calls(dqn)[call](_with((2, 4), 1, 3, np.nan, np.float32))
    with pytest.raises(ValueError, match=r"x\[0\] holds inf"):
        _calls(dqn)[call](torch.tensor([[0.0, 0.0, float("inf"), 0.0]]))


@pytest.mark.parametrize("call", ["predict", "sample_action", "predict_value"])
@pytest.mark.parametrize(
    "x, dtype_text",
    [
        (np.ones((2, 4), dtype=np.complex128), "complex128"),
        (np.ones((2, 4), dtype=np.complex64), "complex64"),
        (np.array([["a", "b", "c", "d"]]), "<U1"),
        (np.ones((1, 4), dtype=object), "object"),
        (np.array([[b"a"] * 4]), r"\|S1"),
        (torch.ones(1, 4, dtype=torch.complex64), "torch.complex64"),
    ],
)
def test_values_that_are_not_real_numbers_raise_type_error(dqn, call, x, dtype_text):
    with pytest.raises(TypeError, match=f"x must hold real numbers.*got dtype {dtype_text}"):
        _calls(dqn)[call](x)


@pytest.mark.parametrize("call", ["predict", "sample_action", "predict_value"])
def test_empty_batch_and_ragged_input_raise_value_error(dqn, call):
    with pytest.raises(ValueError, match="x is an empty batch"):
        _calls(dqn)[call](np.zeros((0, 4), dtype=np.float32))
    with pytest.raises(ValueError, match="x is not a rectangular array"):
        _calls(dqn)[call]([[1.0, 2.0, 3.0, 4.0], [1.0]])


def test_valid_inputs_of_every_real_dtype_give_the_same_answer(dqn):
    x = np.array([[1, 0, 2, 0], [0, 3, 0, 1]])
    expected = dqn.predict(x.astype(np.float32))
    for dtype in (np.float64, np.float16, np.int64, np.int32, np.uint8, np.bool_):
        y = x.astype(dtype)
        np.testing.assert_array_equal(dqn.predict(y), dqn.predict(y.astype(np.float32)))
    np.testing.assert_array_equal(dqn.predict(torch.as_tensor(x, dtype=torch.float64)), expected)
    # float32's largest value itself is accepted
    assert dqn.predict(_with((1, 4), 0, 0, FLOAT32_MAX)).shape == (1,)


def test_bad_actions_in_predict_value(dqn, sac):
    x4, x3 = np.zeros((2, 4), dtype=np.float32), np.zeros((2, 3), dtype=np.float32)
    with pytest.raises(ValueError, match=r"action\[1\] is 0.5; expected an integer action index"):
        dqn.predict_value(x4, np.array([1.0, 0.5]))
    with pytest.raises(ValueError, match=r"action\[1\] is 3; expected an action index in \[0, 3\)"):
        dqn.predict_value(x4, np.array([0, 3]))
    with pytest.raises(ValueError, match=r"action\[0\] holds nan"):
        dqn.predict_value(x4, np.array([np.nan, 0.0]))
    with pytest.raises(TypeError, match="action must hold real numbers"):
        dqn.predict_value(x4, np.array(["a", "b"]))
    with pytest.raises(ValueError, match=r"action\[1\] holds 1e\+300, beyond float32's range"):
        sac.predict_value(x3, np.array([[0.0, 0.0], [0.0, 1e300]]))
    with pytest.raises(TypeError, match="action must hold real numbers.*complex"):
        sac.predict_value(x3, np.ones((2, 2), dtype=complex))


def test_tuple_observations_name_the_part():
    from offrl.algos import BCConfig

    algo = BCConfig().create()
    algo.create_impl([(2,), (3,)], 1)
    good = [np.zeros((2, 2), dtype=np.float32), np.zeros((2, 3), dtype=np.float32)]
    assert algo.predict(good).shape == (2, 1)
    bad = [good[0], _with((2, 3), 1, 2, np.nan)]
    with pytest.raises(ValueError, match=r"x\[1\]\[1\] holds nan"):
        algo.predict(bad)
    with pytest.raises(TypeError, match=r"x\[0\] must hold real numbers"):
        algo.predict([good[0].astype(complex), good[1]])


def _naive_first_bad_row(x: np.ndarray):
    """The first row holding a value float32 cannot represent finitely (a plain loop)."""
    for i in range(x.shape[0]):
        for v in x[i].reshape(-1):
            if not (abs(float(v)) <= FLOAT32_MAX):
                return i
    return None


SPECIAL = st.sampled_from([np.nan, np.inf, -np.inf, 1e300, -1e39, 0.0, 1.0, -3e38, FLOAT32_MAX])


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 6), cols=st.integers(1, 4),
       cells=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3), SPECIAL), max_size=5))
def test_check_real_values_agrees_with_a_naive_loop(rows, cols, cells):
    x = np.zeros((rows, cols))
    for r, c, v in cells:
        x[r % rows, c % cols] = v
    bad = _naive_first_bad_row(x)
    for array in (x, torch.as_tensor(x)):
        if bad is None:
            check_real_values(array, "obs")
        else:
            with pytest.raises(ValueError, match=rf"^obs\[{bad}\] holds"):
                check_real_values(array, "obs")
