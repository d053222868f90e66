"""docs/MODEL_SELECTION.md names only what exists: its imports, the
keyword arguments it gives OfflineSearch, the scorer names of its table,
the result columns it lists, and its ``offrl search`` line."""

from __future__ import annotations

import ast
import importlib
import inspect
import pathlib
import re

import pytest

pytest.importorskip("optuna", reason="the search extra is not installed")

from offrl.cli import build_parser  # noqa: E402
from offrl.model_selection import SCORERS, OfflineSearch  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEXT = (ROOT / "docs" / "MODEL_SELECTION.md").read_text(encoding="utf-8")
CODE = re.findall(r"```python\n(.*?)```", TEXT, re.S)


def test_the_examples_import_and_call_what_exists():
    assert len(CODE) == 2
    parameters = set(inspect.signature(OfflineSearch).parameters)
    for block in CODE:
        tree = ast.parse(block)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                module = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(module, alias.name), f"{node.module}.{alias.name}"
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "OfflineSearch":
                assert {k.arg for k in node.keywords} <= parameters
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "search":
                assert hasattr(OfflineSearch, node.attr) or node.attr.endswith("_"), node.attr


def test_the_scorer_table_is_the_scorer_list():
    table = TEXT[TEXT.index("| name | score |"): TEXT.index("`ope_options` passes")]
    named = set(re.findall(r'`"(\w+)"`', table))
    assert named == set(SCORERS)


def test_the_command_line_parses():
    block = re.search(r"```\n(offrl search .*?)```", TEXT, re.S).group(1).replace("\\\n", " ")
    args = build_parser().parse_args(block.split()[1:])
    assert args.command == "search" and args.scorer == "fqe,wpdis" and args.trials == 6 and args.true_return


def test_the_readme_links_the_page():
    assert "](docs/MODEL_SELECTION.md)" in (ROOT / "README.md").read_text(encoding="utf-8")
