#!/usr/bin/env bash
# Installs what is missing, configures, builds with -j2, and runs every test under CTest.
# The exit status is the tests'.
#
# Usage: scripts/test.sh [--sanitize] [extra cmake -D options]
#   --sanitize   builds into build-sanitize/ with AddressSanitizer and UndefinedBehaviorSanitizer
#                and runs the whole suite instrumented; any report, from the tests or from a
#                worker or trainer process they started, fails the run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
jobs=${HOTSWAP_JOBS:-2}
sanitize=0
if [ "${1:-}" = "--sanitize" ]; then
  sanitize=1
  shift
fi

# Each stage's wall time, printed at the end of the run (on every exit path).
stage_names=()
stage_seconds=()
stage_start=$SECONDS
stage() {  # stage NAME: the stage that just ended
  stage_names+=("$1")
  stage_seconds+=($((SECONDS - stage_start)))
  stage_start=$SECONDS
}
print_stages() {
  local i
  echo "== test.sh stages (wall time):"
  for i in "${!stage_names[@]}"; do
    printf '   %-10s %5d s\n' "${stage_names[$i]}" "${stage_seconds[$i]}"
  done
  printf '   %-10s %5d s\n' total "$SECONDS"
}
trap print_stages EXIT

# ccache keys on paths relative to the checkout (and not on the build folder's own path), so a
# clone in another folder, CI's among them, reuses what this machine compiled for any other.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}
export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}

"$root/scripts/install-deps.sh"
# The torch environment install-deps made: libtorch, the `hotswap` package's python, the peers.
torch_python=$("$root/scripts/make-torch-env.sh" --python)
stage install

if ((sanitize)); then
  build=${HOTSWAP_BUILD_DIR:-$root/build-sanitize}
  # -O1 -g1: instrumented code compiles faster and still runs at a useful speed; line tables
  # are all a sanitizer report needs to name file and line.
  cmake -S "$root" -B "$build" $("$root/scripts/cmake-generator.sh" "$build") \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DHOTSWAP_SANITIZE=ON -DHOTSWAP_WERROR=ON \
    -DHOTSWAP_BUILD_BENCH=OFF -DHOTSWAP_TORCH_PYTHON="$torch_python" "$@"
  reports="$build/sanitizer-reports"
  rm -rf "$reports"
  mkdir -p "$reports"
  # Every process writes its reports to a file of its own, so a worker's report is seen even
  # when the test that started it passed. Leak checks need ptrace-free LSan: on by default.
  export ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=1:handle_segv=1:handle_sigbus=0:allow_user_segv_handler=1:detect_stack_use_after_return=0:strict_string_checks=1:check_initialization_order=1"
  export LSAN_OPTIONS="suppressions=$root/scripts/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="log_path=$reports/ubsan:print_stacktrace=1:halt_on_error=1"
else
  build=${HOTSWAP_BUILD_DIR:-$root/build}
  # -g1: line tables, all a backtrace or a sanitizer report needs. Full debug info (-g) doubled
  # the compile time of every file that includes ATen (sampling.cpp: 27.6 s against 12.1 s).
  cmake -S "$root" -B "$build" $("$root/scripts/cmake-generator.sh" "$build") \
    -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DHOTSWAP_WERROR=ON \
    -DHOTSWAP_TORCH_PYTHON="$torch_python" "$@"
fi
stage configure
cmake --build "$build" -j "$jobs"
stage build
cd "$build"
status=0
ctest --output-on-failure -j "$jobs" --timeout 600 || status=$?
stage tests
if ((sanitize)); then
  if compgen -G "$reports/*" >/dev/null; then
    echo "== sanitizer reports (each fails the run):"
    for f in "$reports"/*; do
      echo "--- $f"
      head -60 "$f"
    done
    status=1
  else
    echo "== sanitizers: no reports from any test, worker or trainer process"
  fi
fi
exit $status
