#!/usr/bin/env bash
# hotswap's main job on embedded defaults: make a small model, start a worker, generate, push
# a new checkpoint into the running worker through vLLM's four-call contract (disk backend),
# generate again, and verify bit for bit that the worker serves the new checkpoint.
# Installs what is missing and builds first. Usage: scripts/demo.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HOTSWAP_BUILD_DIR:-$root/build}

"$root/scripts/install-deps.sh"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" >/dev/null
cmake --build "$build" -j "${HOTSWAP_JOBS:-2}" --target hotswap-worker hotswap-make-model

work=$(mktemp -d)
worker_pid=""
cleanup() {
  if [ -n "$worker_pid" ]; then kill "$worker_pid" 2>/dev/null || true; wait "$worker_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

echo "== 1. two checkpoints of one small Qwen3 model (the serving one, and the trainer's next step)"
for seed in 1 2; do
  "$build/model_loader/hotswap-make-model" --arch qwen3 --layers 4 --hidden-size 256 \
    --intermediate-size 768 --heads 8 --kv-heads 4 --head-dim 64 --vocab 1024 \
    --dtype bfloat16 --seed "$seed" --out "$work/step$seed"
done

echo "== 2. a hotswap-worker serving step 1, disk backend"
"$build/worker/hotswap-worker" --model "$work/step1" --control "tcp://127.0.0.1:*" \
  --weight-transfer-config '{"backend": "disk"}' >"$work/worker.log" 2>&1 &
worker_pid=$!
for _ in $(seq 1 300); do
  grep -q "hotswap-worker ready" "$work/worker.log" && break
  kill -0 "$worker_pid" 2>/dev/null || { cat "$work/worker.log"; exit 1; }
  sleep 0.1
done
grep "hotswap-worker ready" "$work/worker.log"
endpoint=$(sed -n 's/^hotswap-worker ready: control \([^;]*\);.*/\1/p' "$work/worker.log")

echo "== 3. generate, push step 2 while the worker runs, generate again, verify"
/usr/bin/python3 - "$endpoint" "$work/step2" <<'PY'
import hashlib, json, struct, sys, time
import zmq

endpoint, new_checkpoint = sys.argv[1], sys.argv[2]
sock = zmq.Context().socket(zmq.REQ)
sock.RCVTIMEO = 60000
sock.connect(endpoint)
ids = iter(range(1, 1000))

def call(method, **params):
    sock.send_string(json.dumps({"jsonrpc": "2.0", "id": next(ids), "method": method, "params": params}))
    reply = json.loads(sock.recv_string())
    if "error" in reply:
        raise RuntimeError(f"{method}: {reply['error']['message']}")
    return reply["result"]

def safetensors_digests(path):
    """SHA-256 of every tensor's bytes, read straight from the file (no torch needed)."""
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    start = 8 + n
    return {name: hashlib.sha256(data[start + info["data_offsets"][0]:start + info["data_offsets"][1]]).hexdigest()
            for name, info in header.items() if name != "__metadata__"}

prompt = {"prompt_token_ids": [1, 20, 300, 4], "max_tokens": 12, "temperature": 0, "logprobs": True}
before = call("generate", **prompt)
print(f"   before: tokens {before['token_ids']}  versions {before['weight_versions']}")

t0 = time.perf_counter()
call("init_weight_transfer_engine", init_info={})
call("start_weight_update")
call("update_weights", update_info={"path": new_checkpoint})
call("finish_weight_update", weight_version="step-2")
seconds = time.perf_counter() - t0
print(f"   pushed step 2 through init/start/update/finish in {seconds * 1000:.1f} ms; "
      f"weight_info: {call('weight_info')}")

after = call("generate", **prompt)
print(f"   after:  tokens {after['token_ids']}  versions {after['weight_versions']}")

served = call("weight_checker", action="checksum", format="checkpoint")["checksums"]
expected = safetensors_digests(f"{new_checkpoint}/model.safetensors")
mismatched = sorted(k for k in expected if served.get(k) != expected[k])
print(f"   verified: {len(expected) - len(mismatched)}/{len(expected)} tensors match the step-2 "
      f"checkpoint bit for bit")
assert before["token_ids"] != after["token_ids"], "the new weights should change the tokens"
assert not mismatched, f"mismatched tensors: {mismatched}"
call("shutdown")
PY
wait "$worker_pid" && worker_pid=""
echo "== done: the worker took new weights while serving, and they verify."
