"""``offrl evaluate --ope``: the marginal estimators by name, ``--ci`` and
``--value-range``, ``--ratio-steps``; figures equal the library's own
estimates with the same arguments, bad combinations fail before any work."""

from __future__ import annotations

import json

import numpy as np
import pytest

from offrl.algos import DiscreteBCConfig
from offrl.cli import main
from offrl.cli.evaluate import CI_METHODS as _CI_METHODS
from offrl.cli.evaluate import OPE_ESTIMATORS as _OPE_ESTIMATORS
from offrl.dataset import MDPDataset
from offrl.logging import NoopAdapterFactory
from offrl.models.encoders import VectorEncoderFactory
from offrl.ope import ESTIMATORS, estimate_policy_value
from offrl.ope.bounds import CI_METHODS
from offrl.ope.marginal import DensityRatioConfig

RANGE = (-1000.0, 1000.0)


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(0)
    n = 120
    dataset = MDPDataset(
        rng.normal(size=(n, 3)).astype(np.float32),
        rng.integers(0, 2, size=n),
        rng.uniform(0.0, 1.0, size=n).astype(np.float32),
        (np.arange(n) % 20 == 19).astype(np.float32),
    )
    data = tmp_path / "data.h5"
    dataset.dump(data)
    algo = DiscreteBCConfig(batch_size=8, encoder_factory=VectorEncoderFactory(hidden_units=[8])).create()
    algo.fit(dataset, n_steps=5, n_steps_per_epoch=5, logger_adapter=NoopAdapterFactory(), show_progress=False)
    model = tmp_path / "model.d3"
    algo.save(str(model))
    return algo, data, model


def test_the_cli_lists_the_librarys_estimators_and_intervals(capsys):
    assert _CI_METHODS == CI_METHODS
    assert _OPE_ESTIMATORS == ("fqe", *ESTIMATORS)
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert "fqe, is, wis, pdis, wpdis, dr, wdr, mis, wmis, mdr" in " ".join(text.split())
    assert "--ci {bootstrap,hoeffding,bernstein,ttest}" in text and "--value-range LOW HIGH" in text


def test_marginal_estimators_with_hoeffding_equal_the_library(files, tmp_path, capsys):
    algo, data, model = files
    report = tmp_path / "report.json"
    code = main(["evaluate", str(model), "--dataset", str(data), "--evaluators", "action_match",
                 "--ope", "wis,mis,wmis,mdr", "--fqe-steps", "10", "--ratio-steps", "20", "--ci", "hoeffding",
                 "--value-range", str(RANGE[0]), str(RANGE[1]), "--seed", "0", "--json", str(report)])
    assert code == 0, capsys.readouterr().err
    figures = json.loads(report.read_text())
    dataset = MDPDataset.load(str(data))
    ratio = DensityRatioConfig(n_steps=20, log_interval=20)
    for name in ("wis", "mis", "wmis"):
        alone = estimate_policy_value(algo, dataset, name, seed=0, ci="hoeffding", value_range=RANGE,
                                      ratio_model=ratio if name != "wis" else None)
        assert alone.ci == "hoeffding"
        assert (figures[name], figures[f"{name}_lower"], figures[f"{name}_upper"]) == (
            alone.value, alone.lower, alone.upper)
    # mdr's FQE trains with torch's generator: its figures are there, with a Hoeffding interval inside the range
    assert RANGE[0] <= figures["mdr_lower"] <= figures["mdr"] <= figures["mdr_upper"] <= RANGE[1]


@pytest.mark.filterwarnings("ignore:DiscreteFQE's estimate may not have settled")
def test_ttest_and_the_fqe_note(files, tmp_path, capsys):
    algo, data, model = files
    report = tmp_path / "report.json"
    assert main(["evaluate", str(model), "--dataset", str(data), "--evaluators", "action_match", "--ope", "fqe,pdis",
                 "--fqe-steps", "10", "--ci", "ttest", "--seed", "0", "--json", str(report)]) == 0
    assert "note: fqe's interval is a bootstrap one (FQE offers no --ci ttest)" in capsys.readouterr().err
    figures = json.loads(report.read_text())
    alone = estimate_policy_value(algo, MDPDataset.load(str(data)), "pdis", seed=0, ci="ttest")
    assert (figures["pdis"], figures["pdis_lower"], figures["pdis_upper"]) == (alone.value, alone.lower, alone.upper)


@pytest.mark.parametrize("extra,message", [
    (["--ci", "bernstein"], "--ci bernstein needs --value-range LOW HIGH"),
    (["--ci", "hoeffding", "--value-range", "2", "1"], "--value-range 2 1: expected finite numbers with LOW < HIGH"),
    (["--value-range", "0", "inf"], "--value-range 0 inf: expected finite numbers with LOW < HIGH"),
    (["--ci", "hoeffding", "--value-range", "0", "0.001"], "does not bound the terms: episode"),
])
def test_bad_interval_options_are_one_line_exit_2(files, extra, message, capsys):
    _, data, model = files
    assert main(["evaluate", str(model), "--dataset", str(data), "--evaluators", "action_match", "--ope", "pdis",
                 *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("offrl evaluate: error: ") and message in err and len(err.strip().splitlines()) == 1


def test_unknown_ci_is_a_usage_error(files, capsys):
    _, data, model = files
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate", str(model), "--dataset", str(data), "--ope", "wis", "--ci", "wald"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'wald'" in capsys.readouterr().err
