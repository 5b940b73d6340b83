#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ with clang and runs each on a copy of its seed corpus
# (fuzz/corpus/<target>/, never rewritten), then prints one line per target. The exit status
# is non-zero when any target crashed, leaked, timed out or ran out of memory; the input that
# did it is named. No network needed.
#
# Usage: scripts/fuzz.sh [target ...]        (default: every target)
#   HOTSWAP_FUZZ_SECONDS  seconds per target (default 30)
#   HOTSWAP_FUZZ_BUILD_DIR  build directory (default build-fuzz at the repo root)
#   HOTSWAP_JOBS          parallel compile jobs (default 2)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HOTSWAP_FUZZ_BUILD_DIR:-$root/build-fuzz}
jobs=${HOTSWAP_JOBS:-2}
seconds=${HOTSWAP_FUZZ_SECONDS:-30}
all_targets=(jsonrpc_request backend_info safetensors_header model_config lora_config nccl_unique_id base64
  bounded_json tokenizer_json tokenizer_encode http_request chat_template)

targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=("${all_targets[@]}")
for target in "${targets[@]}"; do
  if [[ ! " ${all_targets[*]} " == *" $target "* ]]; then
    echo "fuzz.sh: unknown target '$target' (targets: ${all_targets[*]})" >&2
    exit 2
  fi
done

# libFuzzer is clang's: the compiler and its fuzzer runtime must both be there.
if ! command -v clang++ >/dev/null || ! command -v clang >/dev/null ||
  ! compgen -G '/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a' >/dev/null; then
  echo "fuzz.sh: needs clang with libFuzzer (clang++ and libclang_rt.fuzzer-x86_64.a);" \
    "on Debian: apt-get install clang libclang-rt-14-dev" >&2
  exit 1
fi

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  # As scripts/test.sh: cached by paths relative to the checkout, so other clones reuse it.
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}
  export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}
fi
cmake -S "$root/fuzz" -B "$build" $("$root/scripts/cmake-generator.sh" "$build") -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang \
  "${launcher[@]}" >/dev/null
cmake --build "$build" -j "$jobs" --target "${targets[@]/#/fuzz_}"

export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
summaries=()
failures=()
for target in "${targets[@]}"; do
  run="$build/runs/$target"
  rm -rf "$run"
  mkdir -p "$run/corpus"
  cp -R "$root/fuzz/corpus/$target/." "$run/corpus/"
  start=$(date +%s.%N)
  status=0
  # The outer timeout only guards against libFuzzer itself never stopping.
  (cd "$run" && timeout -k 10 $((seconds + 300)) "$build/$target" -max_total_time="$seconds" \
    -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$run/" corpus) >"$run/fuzz.log" 2>&1 || status=$?
  elapsed=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')
  executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$run/fuzz.log" | tail -n 1)
  artifacts=()
  for found in "$run"/crash-* "$run"/leak-* "$run"/timeout-* "$run"/oom-*; do
    [[ -e $found ]] && artifacts+=("$found")
  done
  line="fuzz $target: ${executions:-?} executions in $elapsed s, ${#artifacts[@]} crashes"
  echo "$line"
  summaries+=("$line")
  if [[ $status -ne 0 || ${#artifacts[@]} -gt 0 ]]; then
    grep -aE '^SUMMARY|ERROR: libFuzzer|fuzz invariant broken| threw: |cannot be serialized' \
      "$run/fuzz.log" | head -n 3 | sed 's/^/  /' || true
    for found in "${artifacts[@]}"; do echo "  input: $found"; done
    echo "  log: $run/fuzz.log (exit status $status)"
    failures+=("$target")
  fi
done

echo "== fuzz summary"
printf '%s\n' "${summaries[@]}"
if [[ ${#failures[@]} -gt 0 ]]; then
  echo "== fuzz: findings in ${failures[*]}; reproduce with: $build/<target> <input>" >&2
  exit 1
fi
