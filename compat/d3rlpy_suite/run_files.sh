#!/bin/bash
# Run a test tree one pytest process per file, JUnit file per test file in OUT_DIR
# (one long process grows past the machine's memory: the d3rlpy baseline was
# OOM-killed at 14 GB; per-file processes also keep partial results, and a
# rerun skips the files already done).
#
# usage: run_files.sh ROOT SUITE_SUBDIR OUT_DIR PYTHON [extra pytest args...]
#   offrl:    compat/d3rlpy_suite/run_files.sh . compat/d3rlpy_suite OUT python
#   baseline: compat/d3rlpy_suite/run_files.sh compat/d3rlpy_suite/upstream tests OUT /work/d3venv/bin/python
# The algorithm tests (slow) run last.
root=$1; sub=$2; out=$3; py=$4; shift 4
mkdir -p "$out"
cd "$root"
all=$(cd "$sub" && find . -name 'test_*.py' -not -path './upstream/*' -not -path '*/__pycache__/*' | sed 's|^\./||' | sort)
files="$(echo "$all" | grep -v -E '(^|/)algos/') $(echo "$all" | grep -E '(^|/)algos/')"
for f in $files; do
  name=$(echo "$f" | tr '/' '_' | sed 's/\.py$//')
  [ -f "$out/$name.xml" ] && continue
  $py -m pytest "$sub/$f" -p no:cacheprovider -v -rs --junitxml="$out/$name.tmp" -o junit_family=xunit1 "$@" > "$out/$name.log" 2>&1
  mv "$out/$name.tmp" "$out/$name.xml" 2>/dev/null
done
echo done > "$out/DONE"
