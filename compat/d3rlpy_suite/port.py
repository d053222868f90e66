"""Generate the offrl port of d3rlpy 2.8.1's test suite from ``upstream/tests``.

    python compat/d3rlpy_suite/port.py          # rewrite the ported tree
    python compat/d3rlpy_suite/port.py --check  # exit 1 if the tree is stale

The rules are mechanical and listed in README.md; every change a rule makes is
a textual substitution on the upstream file, so ``diff -r upstream/tests .``
shows exactly what differs (imports, and the per-test skips below).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
UPSTREAM = HERE / "upstream" / "tests"
PACKAGE = HERE.name  # the ported tree is the package ``d3rlpy_suite``

# (pattern, replacement), applied line by line, in order.
RULES: list[tuple[re.Pattern[str], str]] = [
    # gym -> gymnasium (gymnasium's API is the one gym 0.26 has)
    (re.compile(r"^import gym$"), "import gymnasium as gym"),
    (re.compile(r"^from gym(\.| )"), r"from gymnasium\1"),
    # d3rlpy -> offrl, as a whole word (``D3RLPyLogger`` and
    # ``test_d3rlpy_logger`` are names, not the package)
    (re.compile(r"\bd3rlpy\b"), "offrl"),
    # the upstream package is called ``tests``; here it is ``d3rlpy_suite``
    (re.compile(r"^from tests\."), f"from {PACKAGE}."),
]

# Tests that cannot run for a reason outside offrl, as
# {relative path: {test function name: reason}}.  A skip marker is inserted
# above the function; nothing else in the test changes.  (Downloads: d3rlpy's
# tests/test_datasets.py is not ported, see README.md; nothing else in the
# ported set downloads, needs a GPU or reads pickled files.)
SKIPS: dict[str, dict[str, str]] = {}

HEADER = (
    "# Ported mechanically from d3rlpy 2.8.1 tests/{path} by port.py (MIT,\n"
    "# Copyright (c) 2021 Takuma Seno); see README.md.  Do not edit: edit\n"
    "# upstream/tests/{path} or port.py and regenerate.\n"
)


def port_text(rel: str, text: str) -> str:
    lines = []
    for line in text.splitlines():
        for pattern, replacement in RULES:
            line = pattern.sub(replacement, line)
        lines.append(line)
    skips = SKIPS.get(rel, {})
    if skips:
        out = []
        for line in lines:
            m = re.match(r"^def (test_\w+)\(", line)
            if m and m.group(1) in skips:
                # insert above the decorators that belong to this function
                k = len(out)
                while k > 0 and out[k - 1].startswith("@"):
                    k -= 1
                out.insert(k, f"@pytest.mark.skip(reason={skips[m.group(1)]!r})")
            out.append(line)
        lines = out
    body = "\n".join(lines) + "\n"
    if rel.endswith("__init__.py") and not text.strip():
        return ""
    return HEADER.format(path=rel) + body


def generate() -> dict[Path, str]:
    outputs = {}
    for src in sorted(UPSTREAM.rglob("*.py")):
        rel = src.relative_to(UPSTREAM).as_posix()
        outputs[HERE / rel] = port_text(rel, src.read_text())
    return outputs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that the ported tree is up to date")
    args = parser.parse_args()
    outputs = generate()
    stale = [path for path, text in outputs.items() if not path.exists() or path.read_text() != text]
    if args.check:
        for path in stale:
            print(f"stale: {path.relative_to(HERE)}")
        return 1 if stale else 0
    for path in stale:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(outputs[path])
    print(f"{len(outputs)} files, {len(stale)} written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
