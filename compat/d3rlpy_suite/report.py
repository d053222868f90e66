"""Pass counts per area from two JUnit files: the upstream tests run on d3rlpy
(the baseline) and the port run on offrl.  See README.md for the commands.

    python compat/d3rlpy_suite/report.py BASELINE OFFRL [--failures FILE]

(each a JUnit file, or a directory of them as run_files.sh writes)

A test counts against offrl only if it passes on d3rlpy.  A module offrl cannot
import fails every test the baseline collected in it.  ``--failures`` writes one
line per such test (``id<TAB>first line of the error``) for clustering.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from typing import Dict

AREAS = [
    ("dataset", "dataset."),
    ("preprocessing", "preprocessing."),
    ("metrics", "metrics."),
    ("ope", "ope."),
    ("algos (qlearning)", "algos.qlearning."),
    ("algos (transformer)", "algos.transformer."),
    ("models", "models."),
    ("optimizers", "optimizers."),
    ("logging", "logging."),
    ("others", ""),
]


def _module(classname: str) -> str:
    """the test module relative to the suite's root, the same for both runs:
    the baseline's ``compat.d3rlpy_suite.upstream.tests.dataset.test_io`` (or
    ``tests.dataset.test_io`` when run from ``upstream/``) and the port's
    ``compat.d3rlpy_suite.dataset.test_io`` both give ``dataset.test_io``"""
    for prefix in ("upstream.tests.", "d3rlpy_suite.", "tests."):
        if classname.startswith(prefix):
            return classname[len(prefix):]
        if "." + prefix in classname:
            return classname.split("." + prefix, 1)[1]
    return classname


def _cases(path: str):
    paths = sorted(glob.glob(os.path.join(path, "*.xml"))) if os.path.isdir(path) else [path]
    for p in paths:
        yield from ET.parse(p).getroot().iter("testcase")


def read(path: str) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    """(test id -> (outcome, message), module -> collection error message);
    ``path`` is a JUnit file or a directory of them (run_files.sh)"""
    results: dict[str, tuple[str, str]] = {}
    broken: dict[str, str] = {}
    for case in _cases(path):
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = "failed" if tag != "skipped" else "skipped"
                message = (node.get("message") or node.text or "").strip().splitlines()[0:1]
                message = message[0] if message else ""
                break
        classname = case.get("classname") or ""
        if not classname:  # collection error of a whole module
            text = (case.find("error").text or "") if case.find("error") is not None else ""
            lines = [ln[4:].strip() for ln in text.splitlines() if ln.startswith("E   ")]
            broken[_module(case.get("name", "").replace("/", ".").removesuffix(".py"))] = lines[-1] if lines else message
            continue
        results[f"{_module(classname)}::{case.get('name')}"] = (outcome, message)
    return results, broken


def area_of(test_id: str) -> str:
    for area, prefix in AREAS:
        if test_id.startswith(prefix):
            return area
    return "others"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("baseline")
    parser.add_argument("offrl")
    parser.add_argument("--failures")
    args = parser.parse_args()
    base, base_broken = read(args.baseline)
    ours, our_broken = read(args.offrl)
    if base_broken:
        print(f"baseline modules that failed to import: {sorted(base_broken)}", file=sys.stderr)
    rows: dict[str, Counter] = defaultdict(Counter)
    failures = []
    for test_id, (b_outcome, _) in sorted(base.items()):
        area = area_of(test_id)
        module = test_id.split("::")[0]
        if module in our_broken:
            o_outcome, o_message = "failed", f"[import] {our_broken[module]}"
        else:
            o_outcome, o_message = ours.get(test_id, ("missing", "not run on offrl"))
        row = rows[area]
        row["tests"] += 1
        row[f"d3rlpy {b_outcome}"] += 1
        row[f"offrl {o_outcome}"] += 1
        if b_outcome == "passed":
            row["counted"] += 1
            if o_outcome == "passed":
                row["counted passed"] += 1
            elif o_outcome == "skipped":
                row["counted skipped"] += 1
            else:
                failures.append(f"{test_id}\t{o_message}")
    print("| area | tests | pass on d3rlpy (baseline) | pass on offrl | offrl pass rate (of baseline passes) | skipped on offrl |")
    print("|---|---:|---:|---:|---:|---:|")
    total: Counter = Counter()
    for area, _ in AREAS:
        row = rows.get(area, Counter())
        total.update(row)
        rate = f"{100 * row['counted passed'] / row['counted']:.0f} %" if row["counted"] else "-"
        print(f"| {area} | {row['tests']} | {row['d3rlpy passed']} | {row['counted passed']} | {rate} | {row['counted skipped']} |")
    rate = f"{100 * total['counted passed'] / total['counted']:.1f} %" if total["counted"] else "-"
    print(f"| **all** | {total['tests']} | {total['d3rlpy passed']} | {total['counted passed']} | {rate} | {total['counted skipped']} |")
    # test modules the baseline run has not reached (a partial baseline):
    # offrl's outcomes alone, not counted above
    measured = {test_id.split("::")[0] for test_id in base} | set(base_broken)
    unmeasured: Dict[str, Counter] = defaultdict(Counter)
    for test_id, (o_outcome, o_message) in sorted(ours.items()):
        module = test_id.split("::")[0]
        if module not in measured:
            unmeasured[module][o_outcome] += 1
            if o_outcome == "failed":
                failures.append(f"{test_id}\t[no baseline] {o_message}")
    for module in sorted(set(our_broken) - measured):
        unmeasured[module]["import error"] += 1
        failures.append(f"{module}::*\t[no baseline] [import] {our_broken[module]}")
    if unmeasured:
        print()
        print("Not in the baseline run (offrl only, not counted above):")
        print()
        print("| module | passed on offrl | failed | skipped |")
        print("|---|---:|---:|---:|")
        for module, row in sorted(unmeasured.items()):
            failed = row["failed"] + row["import error"]
            print(f"| {module} | {row['passed']} | {failed} | {row['skipped']} |")
    if args.failures:
        with open(args.failures, "w") as f:
            f.write("\n".join(failures) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
