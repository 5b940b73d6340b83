#!/usr/bin/env bash
# hotswap's main job on embedded defaults: a small model served by two workers; a trainer pushes
# verified rounds into them over shm and gloo, and a sparse round over sparse_gloo, while they
# serve; generation before and after shows the new weights at work. Ends with a summary table.
# Installs what is missing and builds first. Usage: scripts/demo.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HOTSWAP_BUILD_DIR:-$root/build}

"$root/scripts/install-deps.sh"
cmake -S "$root" -B "$build" $("$root/scripts/cmake-generator.sh" "$build") \
  -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" \
  -DHOTSWAP_TORCH_PYTHON="$("$root/scripts/make-torch-env.sh" --python)" >/dev/null
cmake --build "$build" -j "${HOTSWAP_JOBS:-2}" \
  --target hotswap-worker hotswap-launch hotswap-make-model hotswap-trainer

work=$(mktemp -d)
launcher=""
stop_launcher() {
  if [ -n "$launcher" ]; then kill "$launcher" 2>/dev/null || true; wait "$launcher" 2>/dev/null || true; fi
  launcher=""
}
trap 'stop_launcher; rm -rf "$work"' EXIT

echo "== a small Qwen3 model (4 layers, bfloat16) as the trainer's starting point"
"$build/model_loader/hotswap-make-model" --arch qwen3 --layers 4 --hidden-size 256 \
  --intermediate-size 768 --heads 8 --kv-heads 4 --head-dim 64 --vocab 1024 \
  --dtype bfloat16 --seed 1 --tokenizer "$root/tests/golden/tokenizer/qwen2/tokenizer.json" \
  --out "$work/model"

generate() {  # generate ENDPOINT: greedy tokens, their text, and the weight versions that made them
  /usr/bin/python3 - "$1" <<'PY'
import json, sys, zmq
s = zmq.Context().socket(zmq.REQ); s.RCVTIMEO = 60000; s.connect(sys.argv[1])
def call(method, params):
    s.send_string(json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
    return json.loads(s.recv_string())["result"]
prompt = call("tokenize", {"prompt": "The trainer pushes weights"})["tokens"]
r = call("generate", {"prompt_token_ids": prompt, "max_tokens": 10, "temperature": 0})
text = call("detokenize", {"tokens": r["token_ids"]})["prompt"]
print(f"   {sys.argv[1]}: tokens {r['token_ids']} ({text!r}) versions {r['weight_versions']}")
PY
}

for spec in "shm 3" "gloo 3" "sparse_gloo 1"; do
  read -r backend rounds <<<"$spec"
  echo "== $backend: two workers, $rounds verified round(s)"
  base=$((20000 + RANDOM % 30000))
  "$build/worker/hotswap-launch" --replicas 2 --base-port "$base" -- \
    --model "$work/model" --weight-transfer-config "{\"backend\": \"$backend\"}" \
    >"$work/launch-$backend.json" 2>"$work/launch-$backend.log" &
  launcher=$!
  for _ in $(seq 1 300); do [ -s "$work/launch-$backend.json" ] && break; sleep 0.1; done
  endpoints=$(/usr/bin/python3 -c 'import json,sys; print(",".join(json.load(open(sys.argv[1]))["endpoints"]))' "$work/launch-$backend.json")
  generate "${endpoints%%,*}"
  "$build/trainer_sdk/hotswap-trainer" --workers "$endpoints" --backend "$backend" \
    --source "$work/model" --rounds "$rounds" --verify --buffer-size $((4 << 20)) --seed 7 \
    | tee "$work/rounds-$backend.log" | grep -v '^{'
  generate "${endpoints%%,*}"
  stop_launcher
done

echo "== summary"
/usr/bin/python3 - "$work" <<'PY'
import glob, json, sys
rows = [json.loads(l) for f in sorted(glob.glob(f"{sys.argv[1]}/rounds-*.log"))
        for l in open(f) if l.startswith("{")]
print(f"   {'backend':<12} {'round':>5} {'bytes':>12} {'seconds':>9} {'GB/s':>8}  verified")
for r in rows:
    print(f"   {r['backend']:<12} {r['round']:>5} {r['bytes']:>12} {r['seconds']:>9.4f} "
          f"{r['gbps']:>8.3f}  {'yes' if r['verified'] else 'no'}")
assert rows and all(r["verified"] for r in rows)
PY
echo "== done: every round landed in both workers while they served, and verified bit for bit."
