"""from_dataframe: a hand-written table with shuffled rows, the vectorised
grouping against a plain per-episode loop (hypothesis), and errors that name
the column and the row."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from offrl import ActionSpace
from offrl.datasets import from_dataframe

pd = pytest.importorskip("pandas")  # the `tabular` extra; in the test extra too

# two sessions of logged decisions, written in time order
TABLE = [
    # session, step, x0, x1, action, reward, done, p
    ("u2", 0, 0.0, 1.0, 1, 0.0, 0, 0.5),
    ("u2", 1, 0.1, 1.1, 0, 1.0, 0, 0.25),
    ("u2", 2, 0.2, 1.2, 2, 0.0, 1, 1.0),
    ("u1", 0, 5.0, 6.0, 0, 2.0, 0, 0.75),
    ("u1", 1, 5.1, 6.1, 1, 3.0, 0, 0.2),
]
COLUMNS = ["session", "step", "x0", "x1", "action", "reward", "done", "p"]


def _frame(order=None):
    df = pd.DataFrame(TABLE, columns=COLUMNS)
    if order is not None:
        df = df.iloc[order]
    return df


def _load(df, **kwargs):
    args = dict(
        episode_column="session", observation_columns=["x0", "x1"], action_columns="action",
        reward_column="reward", terminal_column="done", step_column="step", behaviour_probability_column="p",
    )
    args.update(kwargs)
    return from_dataframe(df, **args)


def test_shuffled_rows_become_ordered_episodes():
    ds = _load(_frame([4, 2, 0, 3, 1]))
    assert ds.action_space == ActionSpace.DISCRETE and ds.action_size == 3
    u1, u2 = ds.episodes  # episodes in sorted order of their ids
    np.testing.assert_array_equal(u1.observations, np.array([[5.0, 6.0], [5.1, 6.1]], np.float32))
    np.testing.assert_array_equal(u1.actions[:, 0], [0, 1])
    np.testing.assert_array_equal(u1.rewards[:, 0], [2.0, 3.0])
    assert not u1.terminated  # no terminal flag: the log stops mid-session
    np.testing.assert_array_equal(u2.observations, np.array([[0.0, 1.0], [0.1, 1.1], [0.2, 1.2]], np.float32))
    np.testing.assert_array_equal(u2.actions[:, 0], [1, 0, 2])
    np.testing.assert_array_equal(u2.rewards[:, 0], [0.0, 1.0, 0.0])
    assert u2.terminated
    np.testing.assert_array_equal(u1.behaviour_probabilities, [0.75, 0.2])
    np.testing.assert_array_equal(u2.behaviour_probabilities, [0.5, 0.25, 1.0])
    np.testing.assert_array_equal(ds.behaviour_probabilities, [0.75, 0.2, 0.5, 0.25, 1.0])
    assert ds.transition_count == 1 + 3


def test_without_step_column_rows_keep_table_order_within_an_episode():
    df = _frame([3, 0, 1, 4, 2])  # u1 rows in order, u2 rows in order, interleaved
    ds = _load(df, step_column=None)
    np.testing.assert_array_equal(ds.episodes[0].rewards[:, 0], [2.0, 3.0])
    np.testing.assert_array_equal(ds.episodes[1].actions[:, 0], [1, 0, 2])


def test_timestamps_order_steps_and_timeouts_mark_truncation():
    df = pd.DataFrame({
        "ep": [7, 7, 7, 3],
        "t": pd.to_datetime(["2024-01-01 10:02", "2024-01-01 10:00", "2024-01-01 10:01", "2024-01-02 00:00"]),
        "obs": [2.0, 0.0, 1.0, 9.0],
        "a": [0.5, -0.5, 0.0, 1.0],
        "a2": [1.0, 2.0, 3.0, 4.0],
        "r": [1.0, 1.0, 1.0, 1.0],
        "cut": [1, 0, 0, 0],
    })
    ds = from_dataframe(df, "ep", "obs", ["a", "a2"], "r", timeout_column="cut", step_column="t")
    assert ds.action_space == ActionSpace.CONTINUOUS and ds.action_size == 2
    ep3, ep7 = ds.episodes
    np.testing.assert_array_equal(ep7.observations[:, 0], [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(ep7.actions, [[-0.5, 2.0], [0.0, 3.0], [0.5, 1.0]])
    assert not ep7.terminated and not ep3.terminated
    assert ds.behaviour_probabilities is None


def test_tuple_observations_from_lists_of_columns():
    ds = _load(_frame(), observation_columns=[["x0"], ["x0", "x1"]])
    first, second = ds.episodes[0].observations
    np.testing.assert_array_equal(first[:, 0], np.array([5.0, 5.1], np.float32))
    np.testing.assert_array_equal(second, np.array([[5.0, 6.0], [5.1, 6.1]], np.float32))


def _naive(rows):
    """Episodes built one row at a time: sorted ids, steps sorted within."""
    episodes = {}
    for episode, step, obs, action, reward in rows:
        episodes.setdefault(episode, []).append((step, obs, action, reward))
    out = []
    for episode in sorted(episodes):
        steps = sorted(episodes[episode])
        out.append(([s[1] for s in steps], [s[2] for s in steps], [s[3] for s in steps]))
    return out


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 6), min_size=1, max_size=6),
    seed=st.integers(0, 2**31 - 1),
)
def test_vectorised_grouping_matches_a_plain_loop(lengths, seed):
    rng = np.random.default_rng(seed)
    ids = rng.permutation(100)[: len(lengths)]
    rows = []
    for episode, n in zip(ids, lengths):
        for step in rng.permutation(n * 3)[:n]:  # gaps and any order
            rows.append((int(episode), int(step), float(rng.integers(-50, 50)), int(rng.integers(0, 4)),
                         float(rng.integers(-9, 9))))
    rows = [rows[i] for i in rng.permutation(len(rows))]
    df = pd.DataFrame(rows, columns=["ep", "step", "obs", "action", "reward"])
    ds = from_dataframe(df, "ep", ["obs"], "action", "reward", step_column="step", action_size=4)
    expected = _naive(rows)
    assert ds.size() == len(expected)
    for episode, (obs, actions, rewards) in zip(ds.episodes, expected):
        np.testing.assert_array_equal(episode.observations[:, 0], obs)
        np.testing.assert_array_equal(episode.actions[:, 0], actions)
        np.testing.assert_array_equal(episode.rewards[:, 0], rewards)
        assert not episode.terminated


# ------------------------------------------------------------------ errors


def test_duplicate_steps_name_both_rows():
    df = _frame()
    df.loc[4, "step"] = 0  # u1 logs step 0 twice
    with pytest.raises(ValueError, match=re.escape("row 3 and row 4 both hold step 0 of episode 'u1'")):
        _load(df)


def test_nan_reward_names_the_row_and_its_index_label():
    df = _frame([4, 2, 0, 3, 1])
    df.loc[0, "reward"] = np.nan  # label 0 sits at position 2 after the shuffle
    with pytest.raises(ValueError, match=re.escape("reward column 'reward' is nan in row 2 (index 0)")):
        _load(df)


def test_nan_observation_names_the_column():
    df = _frame()
    df.loc[1, "x1"] = np.nan
    with pytest.raises(ValueError, match=re.escape("observation column 'x1' is nan in row 1")):
        _load(df)


def test_terminal_flag_on_a_step_that_is_not_the_last():
    df = _frame()
    df.loc[3, "done"] = 1  # u1 "ends" at step 0 but goes on
    with pytest.raises(ValueError, match=re.escape("row 3 sets terminal column 'done' but episode 'u1' goes on for 1 more step(s)")):
        _load(df)


def test_unsorted_rows_without_step_column_are_caught_by_the_flags():
    df = _frame([2, 0, 1, 3, 4])  # u2's terminal step first in the table
    with pytest.raises(ValueError, match=r"row 0 \(index 2\) sets terminal column 'done' .*give step_column to sort them"):
        _load(df, step_column=None)


def test_missing_column():
    with pytest.raises(ValueError, match=re.escape("reward_column: column 'rwd' is not in the table")):
        _load(_frame(), reward_column="rwd")


def test_label_actions_are_refused_with_a_hint():
    df = _frame()
    df["action"] = ["left", "right", "left", "up", "up"]
    with pytest.raises(TypeError, match=r"action column 'action' must be numeric.*cat.codes"):
        _load(df)


def test_negative_action_index_names_the_row():
    df = _frame()
    df.loc[2, "action"] = -1
    with pytest.raises(ValueError, match=re.escape("action column 'action' is -1 in row 2, expected a non-negative action index")):
        _load(df, action_space="discrete")


def test_zero_behaviour_probability_names_the_row():
    df = _frame()
    df.loc[3, "p"] = 0.0
    with pytest.raises(ValueError, match=re.escape("behaviour probability column 'p' is 0.0 in row 3, expected a probability in (0, 1]")):
        _load(df)


def test_flagged_both_terminal_and_timeout():
    df = _frame()
    df["cut"] = [0, 0, 1, 0, 0]
    with pytest.raises(ValueError, match=re.escape("row 2 is flagged both terminal ('done') and timeout ('cut')")):
        _load(df, timeout_column="cut")


def test_missing_episode_id():
    df = _frame()
    df.loc[1, "session"] = None
    with pytest.raises(ValueError, match=re.escape("episode column 'session' is empty in row 1")):
        _load(df)


def test_not_a_dataframe():
    with pytest.raises(TypeError, match="df must be a pandas DataFrame or the path of a CSV / Parquet file, got dict"):
        from_dataframe({"a": [1]}, "a", "a", "a", "a")


# ------------------------------------------------- hostile tables (issue 15)


def test_csv_path_reads_like_the_frame(tmp_path):
    path = tmp_path / "log.csv"
    _frame([4, 2, 0, 3, 1]).to_csv(path, index=False)
    from_file, from_frame = _load(path), _load(_frame())
    for a, b in zip(from_file.episodes, from_frame.episodes):
        np.testing.assert_array_equal(a.observations, b.observations)
        np.testing.assert_array_equal(a.actions, b.actions)
        np.testing.assert_array_equal(a.rewards, b.rewards)


def test_parquet_path_reads_like_the_frame(tmp_path):
    pytest.importorskip("pyarrow", reason="Parquet needs pyarrow (the minari extra)")
    path = tmp_path / "log.parquet"
    _frame().to_parquet(path)
    np.testing.assert_array_equal(_load(path).episodes[1].actions[:, 0], [1, 0, 2])


def test_binary_file_as_csv_names_the_file_and_offset(tmp_path):
    path = tmp_path / "log.csv"
    path.write_bytes(b"session,step\n" + bytes(range(128, 256)))
    with pytest.raises(ValueError, match=re.escape(f"{path} is not a UTF-8 CSV file: it holds the byte b'\\x80', which is not text")):
        _load(path)


def test_garbage_parquet_names_the_file(tmp_path):
    pytest.importorskip("pyarrow", reason="Parquet needs pyarrow (the minari extra)")
    path = tmp_path / "log.parquet"
    path.write_bytes(b"PAR1" + b"\x00" * 64)
    with pytest.raises(ValueError, match=re.escape(f"{path} is not a readable Parquet file")):
        _load(path)


def test_missing_column_in_a_csv_names_the_file(tmp_path):
    path = tmp_path / "log.csv"
    _frame().drop(columns=["reward"]).to_csv(path, index=False)
    with pytest.raises(ValueError, match=re.escape(f"{path}: reward_column: column 'reward' is not in the table")):
        _load(path)


def test_complex_column_is_refused_naming_it():
    df = _frame()
    df["x1"] = df["x1"].astype(complex) + 1j
    with pytest.raises(TypeError, match="observation column 'x1' holds complex numbers"):
        _load(df)


def test_float64_reward_beyond_float32_names_the_row():
    df = _frame()
    df.loc[3, "reward"] = 1e300
    with pytest.raises(ValueError, match=r"reward column 'reward' is 1e\+300 in row 3, outside float32's range"):
        _load(df)
