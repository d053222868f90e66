"""The documentation inside the repository: every algorithm config documents
its loss, its defaults and its paper; the README links the architecture
notes; no file points outside the repository for documentation."""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import pathlib
import re
from typing import Dict, Iterator

import pytest

import offrl.algos
from offrl.serialization import registered

ROOT = pathlib.Path(__file__).resolve().parents[1]
SECTIONS = ("Loss", "Defaults", "References")

for _module in sorted(os.listdir(os.path.dirname(offrl.algos.__file__))):
    if _module.endswith(".py") and not _module.startswith("_"):
        importlib.import_module(f"offrl.algos.{_module[:-3]}")

CONFIGS = dict(sorted(registered("algorithm").items()))


def docstring_sections(doc: str) -> Dict[str, str]:
    """Google-style sections of a docstring: a line ``Heading:`` alone,
    then its indented body, up to the next heading at the same indent."""
    lines = inspect.cleandoc(doc).splitlines()
    sections: Dict[str, str] = {}
    current = None
    for line in lines:
        match = re.fullmatch(r"([A-Z][A-Za-z ]*):", line)
        if match:
            current = match.group(1)
            sections[current] = ""
        elif current is not None:
            if line and not line[0].isspace():
                current = None
            else:
                sections[current] += line.strip() + "\n"
    return {k: v.strip() for k, v in sections.items()}


def test_the_section_reader_finds_headings_and_bodies():
    doc = """Summary line.

    Loss:
        L = (y - q)^2
        summed.

    References:
        none.
    Not a section body.
    """
    assert docstring_sections(doc) == {"Loss": "L = (y - q)^2\nsummed.", "References": "none."}


def test_all_algorithm_modules_are_registered():
    # the list below must not be empty or the next test checks nothing
    assert {"dqn", "sac", "cql", "iql", "td3_plus_bc", "bc", "fqe", "random_policy"} <= set(CONFIGS)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_algorithm_config_documents_loss_defaults_and_reference(name):
    cls = CONFIGS[name]
    doc = cls.__doc__ or ""
    sections = docstring_sections(doc)
    missing = [s for s in SECTIONS if not sections.get(s)]
    assert not missing, (
        f"{cls.__module__}.{cls.__name__}'s docstring lacks the sections {missing} "
        f"(see docs/ARCHITECTURE.md, 'Adding an algorithm')"
    )
    assert "d3rlpy" in sections["Defaults"], f"{cls.__name__}: Defaults must say where they come from"
    references = sections["References"]
    # a reference names a year (and an arXiv id when the paper has one), or says there is none
    assert re.search(r"\b(19|20)\d\d\b", references) or references.lower().startswith("none"), (
        f"{cls.__name__}: References must cite a paper with its year, or say 'none'"
    )
    bad = [m.group(0) for m in re.finditer(r"arXiv:\S*", references) if not re.match(r"arXiv:\d{4}\.\d{4,5}\b", m.group(0))]
    assert not bad, f"{cls.__name__}: malformed arXiv ids {bad}"


def test_readme_links_the_architecture_notes():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "](docs/ARCHITECTURE.md)" in readme
    assert (ROOT / "docs" / "ARCHITECTURE.md").is_file()


def test_architecture_notes_cite_only_paths_that_exist():
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    paths = set(re.findall(r"`((?:offrl|tests|benchmarks)/[\w/.<>]+)`", text))
    concrete = sorted(p for p in paths if "<" not in p)
    assert len(concrete) >= 10, concrete
    missing = [p for p in concrete if not (ROOT / p).exists()]
    assert not missing, f"docs/ARCHITECTURE.md names paths that do not exist: {missing}"


def test_the_large_datasets_guide_names_what_exists():
    """docs/LARGE_DATASETS.md: every ``from offrl... import`` of its code
    imports, every ``x.attribute`` it names on a store or config exists, and
    its ``offrl fit`` lines parse."""
    from offrl.cli import build_parser
    from offrl.dataset import DiskStore

    text = (ROOT / "docs" / "LARGE_DATASETS.md").read_text(encoding="utf-8")
    assert "](docs/LARGE_DATASETS.md)" in (ROOT / "README.md").read_text(encoding="utf-8")
    imports = re.findall(r"^from (offrl[\w.]*) import ([\w, ]+)$", text, flags=re.M)
    assert len(imports) >= 3, imports
    for module, names in imports:
        loaded = importlib.import_module(module)
        for name in names.split(","):
            assert hasattr(loaded, name.strip()), f"{module}.{name.strip()}"
    for attribute in re.findall(r"`dataset\.buffer\.(\w+)`", text) + re.findall(r"`DiskStore\.(\w+)`", text):
        assert hasattr(DiskStore, attribute), attribute
    for line in re.findall(r"^(offrl fit [^#\n]*)", text, flags=re.M):
        args = build_parser().parse_args(line.split()[1:])
        assert args.nproc >= 1 and args.dataset and args.algo, line


#: where a file may refer to documentation outside the repository (built or
#: vendored trees, not the project's own files)
SKIPPED_DIRS = {".git", "__pycache__", "build", "dist", "node_modules", ".venv", "venv", ".hypothesis",
                ".pytest_cache", ".ruff_cache", "tutorial_output"}
TEXT_SUFFIXES = {".py", ".md", ".rst", ".txt", ".toml", ".cfg", ".ini", ".yml", ".yaml", ".sh", ".json", ""}


def _text_files() -> Iterator[pathlib.Path]:
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in SKIPPED_DIRS and not d.endswith(".egg-info")]
        for filename in filenames:
            path = pathlib.Path(dirpath) / filename
            if path.suffix in TEXT_SUFFIXES and path.stat().st_size < 2_000_000:
                yield path


def test_no_file_refers_to_documentation_outside_the_repository():
    needle = re.compile(r"\.\./" + "shared" + r"\b|" + "shared/" + "DESIGN" + r"\.md")
    offenders = []
    for path in _text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if needle.search(text):
            offenders.append(str(path.relative_to(ROOT)))
    assert not offenders, f"files refer to documents outside the repository: {offenders}"


BENCHMARKS = ROOT / "benchmarks"
SCRIPTS = sorted(p for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_"))


def test_no_file_names_a_machine_specific_d3rlpy_interpreter():
    needle = "/opt/" + "d3venv"
    offenders = [str(p.relative_to(ROOT)) for p in _text_files()
                 if p.suffix in {".py", ".md", ".toml", ".sh", ".cfg", ".yml", ".yaml"}
                 and needle in p.read_text(encoding="utf-8", errors="replace")]
    assert not offenders, f"files name a d3rlpy interpreter path of one machine: {offenders}"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_benchmark_uses_the_harness_and_edits_no_import_path(script):
    tree = ast.parse(script.read_text(encoding="utf-8"))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
        elif isinstance(node, ast.Import):
            imported.update(a.name for a in node.names)
        elif isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name):
            assert node.value.id != "sys", f"{script.name} edits sys.path (line {node.lineno})"
    assert "_harness" in imported, f"{script.name} does not use benchmarks/_harness.py"
    siblings = {p.stem for p in SCRIPTS}
    assert not imported & siblings, f"{script.name} imports another benchmark script: {imported & siblings}"


def test_benchmarks_readme_has_a_section_per_script():
    text = (BENCHMARKS / "README.md").read_text(encoding="utf-8")
    headings = re.findall(r"^### `(\w+\.py)`", text, re.M)
    assert sorted(headings) == sorted(p.name for p in SCRIPTS)
