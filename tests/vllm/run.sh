#!/usr/bin/env bash
# vLLM conformance suite: real hotswap-worker processes on loopback, driven by the vLLM that the
# python named by HOTSWAP_VLLM_PYTHON has (0.33 or 0.34, from PyPI; scripts/make-vllm-env.sh
# makes both). Says clearly that it was skipped (exit 77) when that python lacks vLLM: CI does
# not install it.
#
#   tests/vllm/run.sh HOTSWAP_WORKER HOTSWAP_MAKE_MODEL [TEST ...]
#
# TEST: test_trainer_side test_control_plane test_generation test_gloo_dense test_sparse (all by
# default). Each prints one line per check (PASS / FAIL / SKIP, INFO for facts beyond the spec)
# and "N passed, N failed"; this runner adds the totals and exits 1 if any check failed.
# The gloo tests need a python whose torch is the one the worker links (vLLM's own python when
# its torch is the build's, as with vLLM 0.33 and 0.34 and torch 2.14), found by itself or named
# by HOTSWAP_GLOO_PEER_PYTHON; without one they skip, saying why. HOTSWAP_VLLM_TEST_TRACE=1 prints tracebacks of failures.
set -u
py=${HOTSWAP_VLLM_PYTHON:-python3}
if ! "$py" -c "import vllm.distributed.weight_transfer.clients" >/dev/null 2>&1; then
  echo "SKIPPED: vLLM is not installed for '$py'; set HOTSWAP_VLLM_PYTHON to a python with vllm" \
    "(scripts/make-vllm-env.sh makes one)"
  exit 77
fi
if [ $# -lt 2 ]; then
  echo "usage: $0 HOTSWAP_WORKER HOTSWAP_MAKE_MODEL [TEST ...]" >&2
  exit 2
fi
worker=$1 make_model=$2
shift 2
for bin in "$worker" "$make_model"; do
  if [ ! -x "$bin" ]; then
    echo "FAILED: $bin is not an executable"
    exit 1
  fi
done
here=$(cd "$(dirname "$0")" && pwd)
tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=(test_trainer_side test_control_plane test_generation test_gloo_dense
  test_sparse)

export VLLM_LOGGING_LEVEL=${VLLM_LOGGING_LEVEL:-ERROR}
export PYTHONUNBUFFERED=1
# Noise of importing vLLM on a machine without a GPU; everything else is shown.
noise='^(W[0-9]{4} [0-9:.]+ +[0-9]+ torch/|Failed to import from vllm\._C|.*No CUDA runtime is found)'

passed=0 failed=0 status=0
for t in "${tests[@]}"; do
  log=$(mktemp)
  "$py" "$here/${t%.py}.py" "$worker" "$make_model" 2>&1 | grep -Ev --line-buffered "$noise" |
    tee "$log"
  rc=${PIPESTATUS[0]}
  summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -1)
  rm -f "$log"
  if [ -z "$summary" ]; then
    echo "FAIL $t ended without its summary (exit $rc)"
    failed=$((failed + 1))
    status=1
    continue
  fi
  read -r p _ f _ <<<"$summary"
  passed=$((passed + p)) failed=$((failed + f))
  [ "$rc" -eq 0 ] || status=1
done
echo "== vLLM $("$py" -c 'import vllm; print(vllm.__version__)' 2>/dev/null | tail -1):" \
  "$passed passed, $failed failed"
exit $status
