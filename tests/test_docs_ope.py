"""docs/OFF_POLICY_EVALUATION.md names only what exists: every name in
backticks is an attribute, parameter, field, estimator, interval method or
metric of offrl's OPE; the example's imports, attribute chains and keyword
arguments resolve; and (slow) the example runs with small step counts."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import pathlib
import re
from typing import Set

import pytest

import offrl
import offrl.cli
import offrl.metrics
import offrl.ope
import offrl.plotting
from offrl.algos import fqe as fqe_module
from offrl.cli.evaluate import OPE_ESTIMATORS as _OPE_ESTIMATORS
from offrl.ope import distributional, importance, marginal
from offrl.ope.bounds import CI_METHODS
from offrl.ope.selection import SELECTION_METRICS

DOC = pathlib.Path(__file__).resolve().parents[1] / "docs" / "OFF_POLICY_EVALUATION.md"
TEXT = DOC.read_text()
CODE = re.search(r"```python\n(.*?)```", TEXT, re.S).group(1)

CLASSES = [offrl.ope.OPEResult, offrl.ope.ReturnDistribution, offrl.ope.PolicySelection,
           offrl.ope.PolicyValueEstimate, fqe_module.ConvergenceDiagnostic, offrl.ope.FQE, offrl.ope.FQEConfig,
           offrl.ope.DiscreteFQEConfig, offrl.ope.DensityRatioConfig, offrl.ope.SequencePolicy]
FUNCTIONS = [offrl.ope.estimate_policy_value, offrl.ope.estimate_marginal_value, offrl.ope.select_policies,
             offrl.ope.estimate_return_distribution, offrl.ope.selection_metrics, offrl.plotting.plot_selection,
             offrl.ope.FQE.fit, offrl.ope.FQE.estimate_policy_value, offrl.ope.ReturnDistribution.cvar]
# module-level names the text cites (algorithms, modules, functions, logged metric names)
NAMESPACES = [offrl, offrl.ope, offrl.algos, offrl.metrics, offrl.plotting, fqe_module, importance, marginal,
              distributional]
LOGGED = {"fqe_initial_value", "fqe_value_change", "fqe_value_drift", "fqe_heldout_residual", "ValueError", "UserWarning",
          *SELECTION_METRICS}
# formulas and placeholders, not API names
NOT_NAMES = {"w_T G", "mu(a_t | s_t)", "[G_min, G_max]", "(c * min(0, G_min), c * max(0, G_max))",
             "predict_value(x, action)", "(policy, dataset) -> result", "(observations, actions) -> ratios",
             "str()", "abs(estimate - true) / abs(true)", "min(3, number of policies)", "q_model",
             "clip=c", "LOW", "HIGH"}


def _known() -> Set[str]:
    names: Set[str] = set(LOGGED)
    for cls in CLASSES:
        names.update(n for n in dir(cls) if not n.startswith("_"))
        if dataclasses.is_dataclass(cls):
            names.update(f.name for f in dataclasses.fields(cls))
        names.update(inspect.signature(cls).parameters)
    for fn in FUNCTIONS:
        names.update(inspect.signature(fn).parameters)
    for namespace in NAMESPACES:
        names.update(n for n in dir(namespace) if not n.startswith("_"))
    return names


KNOWN = _known()
CLI_OPTIONS = {"--ope", "--ci", "--value-range", "--ratio-steps", "--fqe-steps", "--json", "--dataset"}


def _resolves(dotted: str) -> bool:
    obj = offrl
    parts = dotted.split(".")
    if parts[0] != "offrl":
        return False
    for part in parts[1:]:
        if not hasattr(obj, part):
            return False
        obj = getattr(obj, part)
    return True


def _check_token(token: str) -> bool:
    token = token.strip()
    if token in NOT_NAMES:
        return True
    literal = re.fullmatch(r'"([^"]*)"', token)
    if literal:
        value = literal.group(1)
        return value in importance.ESTIMATORS or value in CI_METHODS or value in (
            "mean", "variance", "cvar", "lower_quartile")
    if token in _OPE_ESTIMATORS or token.startswith("--"):  # the command line's names and options
        return token in _OPE_ESTIMATORS or token.split()[0] in CLI_OPTIONS
    setting = re.fullmatch(r"(\w+)=([\w.\"]+)", token)
    if setting:  # a parameter with its default: the default must be the one cited
        name, value = setting.group(1), ast.literal_eval(setting.group(2))
        defaults = [p.default for fn in FUNCTIONS for p_name, p in inspect.signature(fn).parameters.items()
                    if p_name == name]
        return value in defaults
    call = re.fullmatch(r"([A-Za-z_][\w.]*)=?([(\[](.*)[)\]])?", token, re.S)
    if call is None:
        return False
    name, args = call.group(1), call.group(3)
    if name.startswith("offrl."):
        ok = _resolves(name)
    else:
        ok = all(part in KNOWN or part == "fit" for part in name.split("."))
    if args and ok and "=" in args:  # keyword arguments of a cited signature must exist
        for keyword in re.findall(r"(\w+)=", args):
            ok = ok and keyword in KNOWN
    return ok


def test_every_backticked_name_exists():
    prose = TEXT.replace(CODE, "")
    tokens = re.findall(r"`([^`\n]+)`", prose)
    assert len(tokens) > 100
    unknown = [t for t in tokens if not t.startswith("offrl evaluate") and not t.endswith(".md")
               and not _check_token(t)]
    assert unknown == [], unknown


def test_the_tables_list_exactly_the_estimators_and_metrics():
    estimator_rows = re.findall(r'^\| `"(\w+)"` \|', TEXT, re.M)
    assert tuple(estimator_rows) == tuple(importance.ESTIMATORS)
    metric_rows = [name for row in re.findall(r"^\| (`\w+`(?:, `\w+`)*) \|", TEXT, re.M)
                   for name in re.findall(r"`(\w+)`", row)]
    assert tuple(metric_rows) == SELECTION_METRICS
    for method in CI_METHODS:
        assert f'* `"{method}"`' in TEXT
    cli = re.search(r"--ope ([\w,]+)", TEXT).group(1).split(",")
    assert set(cli) <= set(_OPE_ESTIMATORS)


def test_the_checker_refuses_what_does_not_exist(capsys):
    for bad in ("estimate_value", "holdout_fraction=0.2", '"dice"', "offrl.ope.nope", "--nope", "plot_selection(x, nope=1)"):
        assert not _check_token(bad), bad
    with pytest.raises(SystemExit):
        offrl.cli.main(["evaluate", "--help"])
    help_text = capsys.readouterr().out
    for option in CLI_OPTIONS:
        assert option in help_text, option


def test_the_example_resolves():
    tree = ast.parse(CODE)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = __import__(node.module, fromlist=["_"])
            for alias in node.names:
                assert hasattr(module, alias.name), alias.name
        if isinstance(node, ast.Attribute) and re.fullmatch(r"offrl(\.\w+)+", ast.unparse(node)):
            assert _resolves(ast.unparse(node)), ast.unparse(node)
        if isinstance(node, ast.Call):
            target = ast.unparse(node.func)
            for keyword in node.keywords:
                assert keyword.arg in KNOWN or keyword.arg in ("n_steps", "n_steps_per_epoch"), (target, keyword.arg)


@pytest.mark.slow
def test_the_example_runs(tmp_path, monkeypatch, capsys):
    code = re.sub(r"n_steps=\d+", "n_steps=50", CODE)
    code = re.sub(r"n_steps_per_epoch=\d+", "n_steps_per_epoch=10", code)
    monkeypatch.setenv("OFFRL_DATA_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    with pytest.warns(UserWarning):  # 50 FQE updates have not settled
        exec(compile(code, str(DOC), "exec"), namespace)
    assert namespace["wis"].ci == "hoeffding" and namespace["wis"].value_range == (0.0, 2000.0)
    assert namespace["mis"].ci == "ttest"
    assert namespace["selection"].ci == "ttest"
    assert "metrics (k=1): mse" in capsys.readouterr().out
