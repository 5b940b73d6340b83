#!/usr/bin/env bash
# Runs every benchmark of a built tree and prints one table of their figures: each figure's
# median, its range, its limit (where it is held against one) and the ratio. The JSON lines the
# benches printed are kept in $HOTSWAP_BENCH_JSON when that names a file. A bench that fails is
# named and the others still run; the exit status is non-zero if any failed.
#
# Usage: scripts/bench.sh [BUILD_DIR]   (default: build/ at the repo root; build it first, e.g.
#        with scripts/test.sh). HOTSWAP_PEER_PYTHON, a python with torch and transformers,
#        adds the transformers peer to the benches that have one; without it they say so.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
bench=$build/bench
[ -x "$bench/hotswap-bench" ] || { echo "bench.sh: no $bench/hotswap-bench; build first" >&2; exit 2; }
lines=$(mktemp)
gbench=$(mktemp -d)
trap 'rm -rf "$lines" "$gbench"' EXIT
failed=0

run() {  # run BINARY [args]: keeps its JSON lines
  local name
  name=$(basename "$1")
  echo "bench.sh: running $name ..." >&2
  local out
  if out=$("$@" 2>&1); then
    grep '^{' <<<"$out" >>"$lines" || true
  else
    echo "bench.sh: $name failed:" >&2
    tail -5 <<<"$out" >&2
    failed=1
  fi
}

run "$bench/hotswap-bench" --json
run "$bench/hotswap_control_bench"
run "$bench/hotswap_model_loader_bench"
run "$bench/hotswap_moe_decode_bench"
run "$bench/hotswap_lora_decode_bench" --json
run "$bench/hotswap_lora_push_bench" --json
run "$bench/hotswap_numerics_bench" --json
run "$bench/hotswap_many_senders_bench"
run "$bench/hotswap_tensor_parallel_bench"
run "$bench/hotswap_tokenizer_bench" --json
run "$bench/hotswap_chat_template_bench" --json
run "$bench/hotswap_serving_bench" --json
run "$bench/hotswap_serving_updates_bench" --json
# The Python trainer SDK against the same push from C++, where the package was built.
if compgen -G "$build/python/hotswap/_C*.so" >/dev/null; then
  python=$(sed -n 's/^_\?Python3_EXECUTABLE:[A-Z]*=//p' "$build/CMakeCache.txt" | head -1)
  PYTHONPATH="$build/python" run "${python:-/usr/bin/python3}" "$root/bench/python_push_bench.py" \
    "$build" --json
  # hotswap.ray on a simulated three-node cluster, where the torch environment has Ray.
  if "${python:-/usr/bin/python3}" -c 'import ray' 2>/dev/null; then
    RAY_USAGE_STATS_ENABLED=0 PYTHONPATH="$build/python" run "${python:-/usr/bin/python3}" \
      "$root/bench/ray_group_bench.py" "$build" --json
  else
    echo "bench.sh: skipping ray_group_bench (no Ray in ${python:-/usr/bin/python3})" >&2
  fi
else
  echo "bench.sh: skipping python_push_bench and ray_group_bench (no hotswap Python package in $build)" >&2
fi
for g in hotswap_plan_bench hotswap_source_bench; do
  if [ -x "$bench/$g" ]; then
    echo "bench.sh: running $g ..." >&2
    "$bench/$g" --benchmark_out="$gbench/$g.json" --benchmark_out_format=json >/dev/null 2>&1 ||
      { echo "bench.sh: $g failed" >&2; failed=1; }
  fi
done
[ -n "${HOTSWAP_BENCH_JSON:-}" ] && cp "$lines" "$HOTSWAP_BENCH_JSON"

/usr/bin/python3 - "$lines" "$gbench" <<'PY'
import glob, json, os, sys

rows = []
for line in open(sys.argv[1]):
    try:
        f = json.loads(line)
    except ValueError:
        continue
    if "measure" not in f:
        continue
    spread = f.get("spread") or {}
    limit = f.get("limit") or {}
    ratio = next((f"{(k[6:] if k.startswith('ratio_') else k).replace('_', ' ')} {v:.2f}x" for k, v in f.items()
                  if k.startswith("ratio") and isinstance(v, (int, float))), "")
    paired = next((v for k, v in f.items() if k.endswith("_paired") and isinstance(v, dict)), None)
    if paired:
        ratio += f" (paired {paired['median']:.2f}x, {paired['min']:.2f}-{paired['max']:.2f})"
    rng = f"{spread['min']:.3g}-{spread['max']:.3g}" if spread else ""
    lim = f"{limit['median']:.3g} ({limit['min']:.3g}-{limit['max']:.3g})" if limit else ""
    if "budget_gb" in f:
        lim = f"budget {f['budget_gb']:.3g}"
        ratio = f"of budget {f['value'] / f['budget_gb']:.2f}x"
    rows.append((f.get("bench", ""), f["measure"], f"{f['value']:.4g} {f.get('unit', '')}", rng,
                 lim, ratio))
for path in sorted(glob.glob(os.path.join(sys.argv[2], "*.json"))):
    bench = os.path.basename(path)[:-5]
    for b in json.load(open(path)).get("benchmarks", []):
        rows.append((bench, b["name"], f"{b['real_time']:.4g} {b.get('time_unit', '')}", "", "",
                     ""))
header = ("bench", "figure", "median", "range", "limit (range)", "ratio")
widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
for r in [header, tuple("-" * w for w in widths)] + rows:
    print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())
PY
exit $failed
