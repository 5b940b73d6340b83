#!/usr/bin/env bash
# run.sh BUILD_DIR [PYTHON]: installs the build into a temporary prefix, builds tests/consumer
# against that prefix alone, and pushes one verified round from it into the installed
# hotswap-worker. Where the build has the Python package, PYTHON then imports the installed one
# (only the prefix's site-packages on its path) and pushes a second verified round from Python.
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
worker=""
cleanup() {
  if [ -n "$worker" ]; then kill "$worker" 2>/dev/null || true; wait "$worker" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

cmake --install "$build" --prefix "$work/prefix" >/dev/null
# One name on a consumer's include path: every header under include/hotswap/, included as
# <hotswap/...>, and none of them still including another by its in-tree short name.
if [ "$(ls "$work/prefix/include")" != hotswap ]; then
  echo "the package installs headers outside include/hotswap/:"; ls "$work/prefix/include"; exit 1
fi
if grep -rnE '#include "(protocol|transport|model_loader|receiver|trainer_sdk|worker)/' "$work/prefix/include"; then
  echo "installed headers above still use the in-tree include form"; exit 1
fi
cmake -S "$here" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_BUILD_TYPE=Release ${CMAKE_CXX_COMPILER_LAUNCHER:+-DCMAKE_CXX_COMPILER_LAUNCHER=$CMAKE_CXX_COMPILER_LAUNCHER} >/dev/null
cmake --build "$work/build" -j2 >/dev/null

"$work/prefix/bin/hotswap-make-model" --arch llama --layers 2 --hidden-size 64 \
  --intermediate-size 128 --heads 4 --kv-heads 2 --vocab 128 --dtype bfloat16 --seed 3 \
  --out "$work/model" >/dev/null
# The log exists before the worker starts: the background job opens it only once it runs, and
# a first sed that found no file ended the script under set -e (seen on a loaded machine).
: >"$work/worker.log"
"$work/prefix/bin/hotswap-worker" --model "$work/model" --control "tcp://127.0.0.1:*" \
  --weight-transfer-config '{"backend": "shm"}' >>"$work/worker.log" 2>&1 &
worker=$!
endpoint=""
# Up to 120 s: a loaded 2-core machine (other suites importing torch) starts a worker slowly.
for _ in $(seq 1 1200); do
  endpoint=$(sed -n 's/^hotswap-worker ready: control \([^;]*\);.*/\1/p' "$work/worker.log")
  [ -n "$endpoint" ] && break
  kill -0 "$worker" 2>/dev/null || { cat "$work/worker.log"; exit 1; }
  sleep 0.1
done
[ -n "$endpoint" ] || { echo "the installed worker did not become ready"; cat "$work/worker.log"; exit 1; }
"$work/build/push_one_round" "$work/model" "$endpoint" | tee "$work/out.txt"
grep -q '"weight_version":"consumer-1"' "$work/out.txt"
echo "consumer project: built against the installed package, pushed one verified round"

if [ -n "${2:-}" ]; then
  site=$(cd "$work/prefix" && ls -d lib/python3*/*-packages 2>/dev/null | head -1)
  [ -n "$site" ] && [ -d "$work/prefix/$site/hotswap" ] || {
    echo "cmake --install put no hotswap package under $work/prefix/lib/python3*/"; exit 1; }
  PYTHONPATH="$work/prefix/$site" "$2" - "$work/prefix/$site" "$work/model" "$endpoint" <<'PY'
import sys
import hotswap
site, model, endpoint = sys.argv[1:]
assert hotswap.__file__.startswith(site), f"imported {hotswap.__file__}, not the installed package"
client = hotswap.ZmqWeightSyncClient(endpoint, timeout=60)
source = hotswap.TensorListSource(list(hotswap.load_checkpoint(model).items()))
info = hotswap.ShmTrainerInitInfo(1, rank=0, timeout=60)
with hotswap.WeightTransferTrainerFactory.trainer_init(info, client=client, source=source) as engine:
    engine.push(weight_version="consumer-python-1", verify=True)
assert client.call("weight_info")["weight_version"] == "consumer-python-1"
print("installed Python package: imported from the prefix, pushed one verified round")
PY
fi
