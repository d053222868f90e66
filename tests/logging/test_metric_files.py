"""truncate_metric_files: what a resumed run does to its metric CSVs (rows
after the checkpoint dropped, links written through, bad bytes named)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from offrl.logging import FileAdapter, truncate_metric_files


def _rows(*steps: int) -> str:
    return "".join(f"{i + 1},{s},0.5\n" for i, s in enumerate(steps))


def test_rows_after_the_step_are_dropped_other_lines_kept(tmp_path):
    (tmp_path / "loss.csv").write_text("# a note\n" + _rows(10, 20, 30))
    (tmp_path / "q.csv").write_text(_rows(10, 20))
    (tmp_path / "params.json").write_text("{}")
    assert truncate_metric_files(str(tmp_path), 20) == [str(tmp_path / "loss.csv")]
    assert (tmp_path / "loss.csv").read_text() == "# a note\n" + _rows(10, 20)
    assert (tmp_path / "q.csv").read_text() == _rows(10, 20)
    assert truncate_metric_files(str(tmp_path), 0) == sorted([str(tmp_path / "loss.csv"), str(tmp_path / "q.csv")])
    assert (tmp_path / "loss.csv").read_text() == "# a note\n" and (tmp_path / "q.csv").read_text() == ""


def test_the_torn_end_of_an_interrupted_append_is_dropped(tmp_path):
    (tmp_path / "loss.csv").write_text(_rows(10) + "2,20,0.2")  # no newline: the append was cut
    (tmp_path / "notes.csv").write_text("epoch,step,value")  # a header without its newline
    truncate_metric_files(str(tmp_path), 30)
    assert (tmp_path / "loss.csv").read_text() == _rows(10)
    assert (tmp_path / "notes.csv").read_text() == "epoch,step,value\n"


def test_a_byte_that_is_not_utf8_is_named_with_its_file_and_line(tmp_path):
    path = tmp_path / "loss.csv"
    original = _rows(10, 20).encode() + b"3,3\xff0,0.5\n" + _rows(40).encode()
    path.write_bytes(original)
    with pytest.raises(ValueError) as info:
        truncate_metric_files(str(tmp_path), 10)
    assert str(info.value).startswith(f"{path}, line 3: byte 0xff at column 4 is not UTF-8 text")
    assert not isinstance(info.value, UnicodeDecodeError)
    assert path.read_bytes() == original and os.listdir(tmp_path) == ["loss.csv"]


def test_a_linked_metric_file_is_written_through_and_stays_a_link(tmp_path):
    logdir = tmp_path / "run"
    dashboard = tmp_path / "dashboard"
    logdir.mkdir()
    dashboard.mkdir()
    (dashboard / "loss.csv").write_text(_rows(10, 20, 30))
    (logdir / "loss.csv").symlink_to(dashboard / "loss.csv")
    (logdir / "elsewhere.csv").symlink_to(tmp_path / "missing.csv")  # dangling: left alone
    assert truncate_metric_files(str(logdir), 10) == [str(logdir / "loss.csv")]
    assert (logdir / "loss.csv").is_symlink() and (dashboard / "loss.csv").read_text() == _rows(10)
    assert (logdir / "elsewhere.csv").is_symlink() and not (tmp_path / "missing.csv").exists()
    assert os.listdir(dashboard) == ["loss.csv"]
    adapter = FileAdapter(str(logdir))  # the next rows go through the link too
    adapter.write_metric(2, 20, "loss", 0.25)
    adapter.close()
    assert (logdir / "loss.csv").is_symlink() and (dashboard / "loss.csv").read_text() == _rows(10) + "2,20,0.25\n"


def _fit(dataset, root, **kwargs):
    from offrl.algos import BCConfig
    from offrl.logging import FileAdapterFactory

    return BCConfig(batch_size=4).create().fit(dataset, 10, 5, experiment_name="run", with_timestamp=False,
                                               logger_adapter=FileAdapterFactory(str(root)), show_progress=False,
                                               **kwargs)


@pytest.fixture
def dataset():
    import offrl

    rng = np.random.default_rng(0)
    n = 20
    return offrl.dataset.MDPDataset(rng.normal(size=(n, 3)).astype(np.float32),
                                    rng.uniform(-1, 1, size=(n, 2)).astype(np.float32),
                                    rng.normal(size=n).astype(np.float32), (np.arange(n) == n - 1).astype(np.float32))


def test_resume_keeps_a_linked_csv_a_link_and_names_a_bad_byte(tmp_path, dataset):
    from offrl.algos import BCConfig

    class Stop(Exception):
        pass

    def stop_after_first_epoch(algo, epoch, step):
        if step == 7:
            raise Stop

    with pytest.raises(Stop):
        _fit(dataset, tmp_path, callback=stop_after_first_epoch)
    run = tmp_path / "run"
    loss = run / "loss.csv"
    kept = tmp_path / "kept.csv"
    os.replace(loss, kept)
    loss.symlink_to(kept)
    (run / "time_step.csv").write_bytes(b"1,5,0.1\n1,\xc3(,0.2\n")
    with pytest.raises(ValueError, match=r"time_step\.csv, line 2: byte 0xc3 at column 3 is not UTF-8"):
        BCConfig(batch_size=4).create().fit(dataset, 10, 5, resume_from=str(run), show_progress=False)
    (run / "time_step.csv").write_text("1,5,0.1\n")
    BCConfig(batch_size=4).create().fit(dataset, 10, 5, resume_from=str(run), show_progress=False)
    assert loss.is_symlink() and [row.split(",")[:2] for row in kept.read_text().splitlines()] == [["1", "5"], ["2", "10"]]
