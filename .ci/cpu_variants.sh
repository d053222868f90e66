#!/usr/bin/env bash
# CI: run the float-sensitive tests under other CPUs' kernels and thread counts.
#
# ATEN_CPU_CAPABILITY picks torch's vectorised kernels (default = no SIMD,
# avx2, avx512): another machine's CPU gives other roundings, so a tolerance
# that only holds for this machine's kernels fails here. OFFRL_TEST_THREADS
# (read by .ci/torch_threads.py, loaded as a pytest plugin after
# tests/conftest.py has pinned one thread) changes how reductions are split.
#
# The subset: the chunked / batched / exported comparisons (OPE, evaluators,
# Q-function ensembles, policies, export, every algorithm's contract, the
# written-out steps against autograd's, SAC's, IQL's, the PLAS family's and
# BEAR's among them). About
# 15 s per variant on two cores.
set -euo pipefail
cd "$(dirname "$0")/.."

TESTS=(
    tests/ope
    tests/metrics
    tests/models
    tests/algos/test_contract.py
    tests/algos/test_plain_step.py
    "tests/algos/test_sac.py::test_sac_written_out_steps_follow_the_autograd_steps"
    "tests/algos/test_sac.py::test_one_sac_step_equals_autograd_on_random_problems"
    "tests/algos/test_iql.py::test_iql_written_out_critic_and_value_steps_follow_the_autograd_steps"
    "tests/algos/test_plas.py::test_plas_written_out_actor_step_follows_the_autograd_step"
    "tests/algos/test_plas.py::test_one_plas_step_equals_autograd_on_random_problems"
    "tests/algos/test_bear.py::test_bear_written_out_critic_step_follows_the_autograd_step"
    tests/optimizers/test_direct_step.py
    tests/test_export.py
)

run_variant() {
    local capability=$1 threads=$2 onednn=$3
    echo "== ATEN_CPU_CAPABILITY=$capability, $threads torch thread(s), OFFRL_ONEDNN=$onednn"
    ATEN_CPU_CAPABILITY=$capability OFFRL_TEST_THREADS=$threads OMP_NUM_THREADS=$threads OFFRL_ONEDNN=$onednn \
        PYTHONPATH=".ci${PYTHONPATH:+:$PYTHONPATH}" \
        python -m pytest -q -p no:cacheprovider -p torch_threads "${TESTS[@]}"
}

run_variant default 1 1
run_variant avx2 2 0
