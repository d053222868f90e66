"""fit(..., resume_from=...) and ``offrl fit --resume``: an interrupted run
continued from its last checkpoint equals the uninterrupted run exactly."""

from __future__ import annotations

import csv
import json
import os
import random

import numpy as np
import pytest
import torch

import offrl
from offrl._model_file import read_payload, write_payload
from offrl.algos import DQNConfig, SACConfig
from offrl.training.checkpoint import CHECKPOINT_NAME
from offrl.logging import FileAdapterFactory, NoopAdapterFactory
from offrl.models import VectorEncoderFactory
from offrl.optimizers import AdamWFactory, CosineAnnealingLRFactory
from offrl.preprocessing import StandardObservationScaler, StandardRewardScaler


class Interrupt(Exception):
    pass


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _dataset(discrete: bool) -> offrl.dataset.MDPDataset:
    rng = np.random.default_rng(0)
    n = 120
    observations = rng.normal(size=(n, 3)).astype(np.float32)
    actions = rng.integers(2, size=n) if discrete else rng.uniform(-1, 1, size=(n, 2)).astype(np.float32)
    rewards = rng.normal(size=n).astype(np.float32)
    terminals = (np.arange(n) % 40 == 39).astype(np.float32)
    return offrl.dataset.MDPDataset(observations, actions, rewards, terminals)


CONFIGS = {
    "dqn": (lambda: DQNConfig(batch_size=8, target_update_interval=7,
                              encoder_factory=VectorEncoderFactory(hidden_units=[16])), True),
    "dqn_scaled_clipped": (lambda: DQNConfig(
        batch_size=8, encoder_factory=VectorEncoderFactory(hidden_units=[16]),
        optim_factory=AdamWFactory(weight_decay=0.01, clip_grad_norm=1.0),
        observation_scaler=StandardObservationScaler(), reward_scaler=StandardRewardScaler()), True),
    "dqn_lr_schedule": (lambda: DQNConfig(
        batch_size=8, encoder_factory=VectorEncoderFactory(hidden_units=[16]),
        optim_factory=AdamWFactory(lr_scheduler_factory=CosineAnnealingLRFactory(T_max=60))), True),
    "sac": (lambda: SACConfig(batch_size=8, actor_encoder_factory=VectorEncoderFactory(hidden_units=[16]),
                              critic_encoder_factory=VectorEncoderFactory(hidden_units=[16])), False),
}


def _fit(config, dataset, root, name, n_steps=50, **kwargs):
    return config.create().fit(dataset, n_steps, 20, experiment_name=name, with_timestamp=False,
                               logger_adapter=FileAdapterFactory(str(root)), show_progress=False, **kwargs)


def _states_equal(a, b) -> None:
    sa, sb = a.get_state(), b.get_state()
    assert sa["grad_step"] == sb["grad_step"]
    assert sa["modules"].keys() == sb["modules"].keys()
    for module in sa["modules"]:
        for key, value in sa["modules"][module].items():
            np.testing.assert_array_equal(value.numpy(), sb["modules"][module][key].numpy(), err_msg=f"{module}.{key}")
    for name, optim in sa["optimizers"].items():
        other = sb["optimizers"][name]
        if "lr_scheduler" in optim:  # an optimizer stepping a learning-rate scheduler
            assert optim["lr_scheduler"] == other["lr_scheduler"]
            optim, other = optim["optimizer"], other["optimizer"]
        for pid, values in optim["state"].items():
            for key, value in values.items():
                np.testing.assert_array_equal(np.asarray(value), np.asarray(other["state"][pid][key]))


def _rows(path):
    with open(path) as f:
        return list(csv.reader(f))


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_interrupted_then_resumed_run_equals_the_uninterrupted_run(tmp_path, name):
    make, discrete = CONFIGS[name]
    dataset = _dataset(discrete)
    observations = np.random.default_rng(1).normal(size=(16, 3)).astype(np.float32)

    offrl.seed(3)
    full = make().create()
    full.fit(dataset, 50, 20, experiment_name="full", with_timestamp=False,
             logger_adapter=FileAdapterFactory(str(tmp_path)), show_progress=False)

    def stop(algo, epoch, step):
        if step == 47:  # in the last epoch: the checkpoint is at step 40
            raise Interrupt

    offrl.seed(3)
    interrupted = make().create()
    with pytest.raises(Interrupt):
        interrupted.fit(dataset, 50, 20, experiment_name="part", with_timestamp=False,
                        logger_adapter=FileAdapterFactory(str(tmp_path)), show_progress=False, callback=stop)
    assert interrupted.grad_step == 47

    offrl.seed(12345)  # the checkpoint's random states win over the new process's
    resumed = make().create()
    results = resumed.fit(dataset, 50, 20, show_progress=False, resume_from=str(tmp_path / "part"))
    assert [epoch for epoch, _ in results] == [3]

    _states_equal(full, resumed)
    np.testing.assert_array_equal(full.predict(observations), resumed.predict(observations))
    actions = full.predict(observations)
    np.testing.assert_array_equal(full.predict_value(observations, actions),
                                  resumed.predict_value(observations, actions))
    # the same metric rows (epochs 1-3) and snapshots, appended not overwritten
    for metric in ("loss.csv",) if discrete else ("critic_loss.csv", "actor_loss.csv", "temp.csv"):
        assert _rows(tmp_path / "full" / metric) == _rows(tmp_path / "part" / metric)
        assert [int(r[1]) for r in _rows(tmp_path / "part" / metric)] == [20, 40, 50]
    assert sorted(p for p in os.listdir(tmp_path / "part") if p.startswith("model_")) == [
        "model_20.d3", "model_40.d3", "model_50.d3"]


def test_resume_from_a_checkpoint_file_and_sampling_continues(tmp_path):
    make, discrete = CONFIGS["dqn"]
    dataset = _dataset(discrete)
    offrl.seed(0)
    full = make().create()
    full.fit(dataset, 40, 20, experiment_name="full", with_timestamp=False,
             logger_adapter=FileAdapterFactory(str(tmp_path)), show_progress=False)
    offrl.seed(0)
    first = make().create()
    first.fit(dataset, 20, 20, experiment_name="short", with_timestamp=False,
              logger_adapter=FileAdapterFactory(str(tmp_path)), show_progress=False)
    # a longer run continued from the checkpoint file, logged elsewhere
    resumed = make().create()
    resumed.fit(dataset, 40, 20, experiment_name="more", with_timestamp=False, show_progress=False,
                logger_adapter=FileAdapterFactory(str(tmp_path)),
                resume_from=str(tmp_path / "short" / CHECKPOINT_NAME))
    _states_equal(full, resumed)
    assert [int(r[1]) for r in _rows(tmp_path / "more" / "loss.csv")] == [40]


def test_resume_with_steps_logging_keeps_the_window(tmp_path):
    make, discrete = CONFIGS["dqn"]
    dataset = _dataset(discrete)
    kwargs = dict(logging_strategy="steps", logging_steps=15)
    offrl.seed(0)
    _fit(make(), dataset, tmp_path, "full", **kwargs)

    def stop(algo, epoch, step):
        if step == 33:
            raise Interrupt

    offrl.seed(0)
    with pytest.raises(Interrupt):
        _fit(make(), dataset, tmp_path, "part", callback=stop, **kwargs)
    resumed = make().create()
    resumed.fit(dataset, 50, 20, show_progress=False, resume_from=str(tmp_path / "part"), **kwargs)
    # rows written after the checkpoint (step 30) were dropped, then written again
    assert _rows(tmp_path / "full" / "loss.csv") == _rows(tmp_path / "part" / "loss.csv")
    assert [int(r[1]) for r in _rows(tmp_path / "part" / "loss.csv")] == [15, 20, 30, 40, 45, 50]


def test_resume_refuses_what_does_not_match(tmp_path):
    make, discrete = CONFIGS["dqn"]
    dataset = _dataset(discrete)
    offrl.seed(0)
    _fit(make(), dataset, tmp_path, "run", n_steps=20)
    with pytest.raises(ValueError, match="n_steps_per_epoch=10, but .* n_steps_per_epoch=20"):
        make().create().fit(dataset, 40, 10, show_progress=False, resume_from=str(tmp_path / "run"))
    smaller = offrl.dataset.MDPDataset(*_columns(60))
    with pytest.raises(ValueError, match="the dataset has 60 transitions.* had 120"):
        make().create().fit(smaller, 40, 20, show_progress=False, resume_from=str(tmp_path / "run"))
    with pytest.raises(ValueError, match="n_steps=10 is below the 20 steps"):
        make().create().fit(dataset, 10, 20, show_progress=False, resume_from=str(tmp_path / "run"))
    with pytest.raises(ValueError, match="holds a 'dqn' checkpoint, not 'sac'"):
        CONFIGS["sac"][0]().create().fit(_dataset(False), 40, 20, show_progress=False,
                                         resume_from=str(tmp_path / "run"))
    with pytest.raises(ValueError, match="without a resume record"):
        make().create().fit(dataset, 40, 20, show_progress=False, resume_from=str(tmp_path / "run" / "model_20.d3"))
    with pytest.raises(FileNotFoundError, match="no checkpoint.d3 in it"):
        make().create().fit(dataset, 40, 20, show_progress=False, resume_from=str(tmp_path))
    with pytest.raises(TypeError, match="resume_from must be a path"):
        make().create().fit(dataset, 40, 20, show_progress=False, resume_from=3)


def _columns(n):
    rng = np.random.default_rng(0)
    return (rng.normal(size=(n, 3)).astype(np.float32), rng.integers(2, size=n), rng.normal(size=n).astype(np.float32),
            (np.arange(n) % 20 == 19).astype(np.float32))


def test_checkpoint_is_read_without_an_unpickler(tmp_path, monkeypatch):
    """A checkpoint is a version-2 model file (JSON and tensors in a
    safetensors file): resuming from it calls no unpickler."""
    import pickle

    make, discrete = CONFIGS["sac"]
    _fit(make(), _dataset(discrete), tmp_path, "run", n_steps=20)
    payload = read_payload(tmp_path / "run" / CHECKPOINT_NAME)
    assert payload["format_version"] == 2 and isinstance(payload["resume"], str)
    assert set(payload["random_tensors"]) >= {"torch_cpu", "numpy_global_keys"}

    def refuse(*args, **kwargs):
        raise AssertionError("an unpickler was called")

    for owner, name in ((torch, "load"), (pickle, "load"), (pickle, "loads"), (pickle, "Unpickler")):
        monkeypatch.setattr(owner, name, refuse)
    resumed = make().create()
    resumed.fit(_dataset(discrete), 40, 20, show_progress=False, resume_from=str(tmp_path / "run"))
    assert resumed.grad_step == 40


# ------------------------------------------------ tampered checkpoints (issue 28)


def _read_checkpoint(path):
    return read_payload(path)


def _write_checkpoint(payload, path):
    write_payload(payload, path)


@pytest.fixture(scope="module")
def written_checkpoint(tmp_path_factory):
    """A DQN run of 40 steps (2 epochs of 20): its checkpoint's payload."""
    root = tmp_path_factory.mktemp("run")
    make, discrete = CONFIGS["dqn"]
    offrl.seed(0)
    _fit(make(), _dataset(discrete), root, "run", n_steps=40)
    return _read_checkpoint(root / "run" / CHECKPOINT_NAME)


def _tampered(tmp_path, payload, edit_resume=None, edit_tensors=None, grad_step=None):
    """A copy of ``payload`` whose resume record ``edit_resume`` changed (a
    dict), whose random tensors ``edit_tensors`` changed, written to
    ``tmp_path/checkpoint.d3``."""
    record = json.loads(payload["resume"])
    if edit_resume is not None:
        edit_resume(record)
    tensors = dict(payload["random_tensors"])
    if edit_tensors is not None:
        edit_tensors(tensors)
    path = tmp_path / CHECKPOINT_NAME
    changed = {**payload, "resume": json.dumps(record), "random_tensors": tensors}
    if grad_step is not None:
        changed["grad_step"] = grad_step
    _write_checkpoint(changed, path)
    return path


def _random_snapshot():
    return (offrl._random.get_rng().bit_generator.state, random.getstate(), np.random.get_state(legacy=False),
            torch.random.get_rng_state())


def _assert_same_random_states(before, after):
    assert before[0] == after[0] and before[1] == after[1]
    assert before[2]["state"]["pos"] == after[2]["state"]["pos"]
    np.testing.assert_array_equal(before[2]["state"]["key"], after[2]["state"]["key"])
    assert torch.equal(before[3], after[3])


def _set(section, key, value):
    def edit(record):
        record[section][key] = value
    return edit


def _numpy_field(key, value):
    def edit(record):
        record["random"]["numpy_global"][key] = value
    return edit


def _python_word(index, value):
    def edit(record):
        record["random"]["python_random"][1][index] = value
    return edit


def _generator_field(value, *keys):
    def edit(record):
        table = record["random"]["offrl_generator"]
        for key in keys[:-1]:
            table = table[key]
        table[keys[-1]] = value
    return edit


def _torch_left(value):
    """torch's CPU state with the Mersenne Twister's `left` counter (an int32 at byte 8) set to ``value``."""
    def edit(tensors):
        state = tensors["torch_cpu"].clone()
        state[8:12] = torch.from_numpy(np.array([value], dtype="<i4").view(np.uint8))
        tensors["torch_cpu"] = state
    return edit


@pytest.mark.parametrize(
    "edit_resume, edit_tensors, message",
    [
        (_numpy_field("pos", 100_000_000), None, r"numpy_global pos is 100000000; expected an int in \[0, 624\]"),
        (_numpy_field("pos", -5), None, r"numpy_global pos is -5; expected an int in \[0, 624\]"),
        (_numpy_field("pos", 3.0), None, r"numpy_global pos is 3.0"),
        (_numpy_field("has_gauss", 2), None, r"numpy_global has_gauss is 2"),
        (_numpy_field("cached", "x"), None, r"numpy_global cached is 'x'; expected a finite float"),
        (_numpy_field("kind", "PCG64"), None, r"numpy_global kind is 'PCG64'; expected 'MT19937'"),
        (None, lambda t: t.update(numpy_global_keys=torch.zeros(600, dtype=torch.int64)),
         r"numpy_global_keys is torch.int64 of shape \(600,\); expected int64 of shape \(624,\)"),
        (None, lambda t: t.update(numpy_global_keys=torch.full((624,), 2**33)),
         r"numpy_global_keys holds values outside \[0, 2\*\*32\)"),
        (_python_word(624, 625), None, r"python_random position \(python_random\[1\]\[624\]\) is 625"),
        (_python_word(0, 2**40), None, r"python_random\[1\]\[0\] is 1099511627776; expected an int in \[0, 4294967295\]"),
        (_set("random", "python_random", [3, [0] * 625, "x"]), None, r"python_random gauss is 'x'"),
        (_set("random", "python_random", [2, [0] * 625, None]), None, r"python_random version is 2; expected 3"),
        (_generator_field(1.5, "state", "state"), None, r"offrl_generator.state.state is 1.5"),
        (_generator_field(-1, "state", "inc"), None, r"offrl_generator.state.inc is -1"),
        (_generator_field(7, "has_uint32"), None, r"offrl_generator.has_uint32 is 7; expected an int in \[0, 1\]"),
        (_generator_field("MT19937", "bit_generator"), None, r"offrl_generator.bit_generator is 'MT19937'; this process uses 'PCG64'"),
        (None, _torch_left(0), r"torch_cpu is refused by torch"),
        (None, _torch_left(100_000_000), r"torch_cpu is refused by torch"),
        (None, lambda t: t.update(torch_cpu=torch.zeros(5056, dtype=torch.int64)),
         r"torch_cpu is torch.int64 of shape \(5056,\); expected uint8 of shape \(5056,\)"),
        (None, lambda t: t.update(torch_cpu=torch.zeros(16, dtype=torch.uint8)), r"torch_cpu is torch.uint8 of shape \(16,\)"),
        (None, lambda t: t.update(numpy_global_extra=torch.zeros(1)), r"random_tensors has unknown \['numpy_global_extra'\]"),
        (None, lambda t: t.pop("torch_cpu"), r"random_tensors has no \['torch_cpu'\]"),
    ],
)
def test_a_tampered_random_state_is_refused_before_anything_is_set(tmp_path, written_checkpoint, edit_resume,
                                                                  edit_tensors, message):
    """A numpy position of 100,000,000 made the next draw segfault and -5
    read outside the key array; every random state is checked, and
    nothing (random states, the model) changes when one is refused."""
    path = _tampered(tmp_path, written_checkpoint, edit_resume, edit_tensors)
    make, discrete = CONFIGS["dqn"]
    algo = make().create()
    algo.build_with_dataset(_dataset(discrete))
    weights = {k: v.clone() for k, v in algo.get_state()["modules"]["q_function"].items()}
    before = _random_snapshot()
    with pytest.raises(ValueError, match=f"{CHECKPOINT_NAME}: the random states in its resume record are malformed: "
                                         + message):
        algo.fit(_dataset(discrete), 60, 20, show_progress=False, resume_from=str(path),
                                 logger_adapter=NoopAdapterFactory())
    _assert_same_random_states(before, _random_snapshot())
    np.random.random(4)  # the global generator still draws
    assert algo.grad_step == 0
    for key, value in algo.get_state()["modules"]["q_function"].items():
        assert torch.equal(value, weights[key])


def _loop(**fields):
    def edit(record):
        record["loop"].update(fields)
    return edit


@pytest.mark.parametrize(
    "edit_resume, grad_step, message",
    [
        (_loop(epoch=10**6, total_step=0), None, r"resume record field 'total_step' is 0, expected an int >= 1"),
        (_loop(epoch=10**6), None, r"'total_step' 40 is not within epoch 'epoch' 1000000 of 'n_steps_per_epoch' 20"),
        (_loop(epoch=1), None, r"'total_step' 40 is not within epoch 'epoch' 1 of 'n_steps_per_epoch' 20 "
                               r"\(expected 1 to 20\)"),
        (_loop(epoch=0), None, r"resume record field 'epoch' is 0, expected an int >= 1"),
        (_loop(grad_step=7), None, r"resume record field 'grad_step' is 7, but the model it holds has grad_step 40"),
        (_loop(grad_step=None), 3, r"'total_step' is 40, but the model it holds has made only 3 updates"),
        (_loop(logging_steps=15, window={"names": ["loss"], "sums": [1.0], "count": 3}), None,
         r"the window holds 3 steps, but 'total_step' 40 with 'logging_steps' 15 leaves 10"),
        (_loop(window={"names": ["loss"], "sums": [1.0], "count": 0}), None, r"'window' is set, but 'logging_steps' is None"),
    ],
)
def test_counters_that_disagree_are_refused(tmp_path, written_checkpoint, edit_resume, grad_step, message):
    """``epoch=10**6, total_step=0`` made resume return [] without training."""
    path = _tampered(tmp_path, written_checkpoint, edit_resume, grad_step=grad_step)
    make, discrete = CONFIGS["dqn"]
    with pytest.raises(ValueError, match=f"{CHECKPOINT_NAME}: .*{message}"):
        make().create().fit(_dataset(discrete), 100, 20, show_progress=False, resume_from=str(path),
                                 logger_adapter=NoopAdapterFactory())


def test_consistent_counters_resume_and_record_grad_step(tmp_path, written_checkpoint):
    assert json.loads(written_checkpoint["resume"])["loop"]["grad_step"] == written_checkpoint["grad_step"] == 40
    path = _tampered(tmp_path, written_checkpoint)
    make, discrete = CONFIGS["dqn"]
    resumed = make().create()
    results = resumed.fit(_dataset(discrete), 60, 20, show_progress=False, resume_from=str(path),
                                 logger_adapter=NoopAdapterFactory())
    assert [epoch for epoch, _ in results] == [3] and resumed.grad_step == 60


def test_a_run_that_ended_inside_an_epoch_is_not_silently_continued(tmp_path):
    make, discrete = CONFIGS["dqn"]
    dataset = _dataset(discrete)
    _fit(make(), dataset, tmp_path, "short", n_steps=30)  # epochs of 20: the second ends after 10 steps
    with pytest.raises(ValueError, match=r"a run of 30 steps, inside epoch 2: it cannot be continued to n_steps=60"):
        make().create().fit(dataset, 60, 20, show_progress=False, resume_from=str(tmp_path / "short"),
                                 logger_adapter=NoopAdapterFactory())


def test_a_deeply_nested_resume_record_is_a_value_error(tmp_path, written_checkpoint):
    path = tmp_path / CHECKPOINT_NAME
    _write_checkpoint({**written_checkpoint, "resume": "[" * 100_000 + "]" * 100_000}, path)
    make, discrete = CONFIGS["dqn"]
    with pytest.raises(ValueError, match=f"{CHECKPOINT_NAME}: its resume record: JSON nested 100000 levels deep"):
        make().create().fit(_dataset(discrete), 60, 20, show_progress=False, resume_from=str(path),
                                 logger_adapter=NoopAdapterFactory())


def test_a_resume_record_with_an_int_of_5000_digits_names_the_file(tmp_path, written_checkpoint):
    path = tmp_path / CHECKPOINT_NAME
    _write_checkpoint({**written_checkpoint, "resume": '{"version": ' + "1" * 5000 + "}"}, path)
    make, discrete = CONFIGS["dqn"]
    with pytest.raises(ValueError, match=f"{CHECKPOINT_NAME}: its resume record: not valid JSON \\(Exceeds the limit"):
        make().create().fit(_dataset(discrete), 60, 20, show_progress=False, resume_from=str(path),
                            logger_adapter=NoopAdapterFactory())
