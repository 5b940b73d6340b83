#!/usr/bin/env bash
# hotswap-trainer end to end against real workers: gloo into two workers (one trainer rank, or
# two that each send the experts or layers they hold) and into tensor-parallel workers, shm, disk,
# sparse_gloo, every round verified. Usage: trainer_cli_test.sh WORKER TRAINER MAKE_MODEL
set -euo pipefail
worker=$1 trainer=$2 make=$3
dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
# A failed check names itself (a silent `grep -q` would leave CTest's log empty).
trap 'echo "trainer_cli_test.sh: line $LINENO failed: $BASH_COMMAND" >&2; echo "${out:-}" >&2' ERR

"$make" --arch qwen3 --layers 2 --hidden-size 128 --intermediate-size 256 --heads 4 --kv-heads 2 \
  --head-dim 32 --vocab 512 --dtype bfloat16 --seed 3 --out "$dir/m" >/dev/null

start() {  # [model=DIR] start NAME BACKEND [extra worker args]: sets $endpoint
  local name=$1 backend=$2; shift 2
  "$worker" --model "${model:-$dir/m}" --control "tcp://127.0.0.1:*" --timeout 30 \
    --weight-transfer-config "{\"backend\": \"$backend\"}" "$@" >"$dir/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 300); do grep -q "hotswap-worker ready" "$dir/$name.log" && break; sleep 0.1; done
  endpoint=$(sed -n 's/^hotswap-worker ready: control \([^;]*\);.*/\1/p' "$dir/$name.log")
  [ -n "$endpoint" ] || { cat "$dir/$name.log"; exit 1; }
}

start g0 gloo --data-parallel-rank 0 --data-parallel-size 2; g0=$endpoint
start g1 gloo --data-parallel-rank 1 --data-parallel-size 2; g1=$endpoint
out=$("$trainer" --workers "$g0,$g1" --backend gloo --source "$dir/m" --rounds 2 --verify --buffer-size 65536)
echo "$out" | grep -q 'round 2/2: gloo .* weight_version "round-2", verified'
out=$("$trainer" --workers "$g0,$g1" --backend gloo --source "$dir/m" --rounds 1 --no-packed --verify --seed 9)
echo "$out" | grep -q 'round 1/1: gloo .*verified'
# A tensor-parallel worker is two ranks of the group, and a second replica two more: the trainer
# sizes the group from the workers' get_world_size (it used to count one rank per endpoint).
start t0 gloo --tensor-parallel-size 2 --data-parallel-rank 0 --data-parallel-size 2; t0=$endpoint
start t1 gloo --tensor-parallel-size 2 --data-parallel-rank 1 --data-parallel-size 2; t1=$endpoint
out=$("$trainer" --workers "$t0,$t1" --backend gloo --source "$dir/m" --rounds 2 --verify)
echo "$out" | grep -q 'round 2/2: gloo .* weight_version "round-2", verified'
"$trainer" --workers "$t0" --backend gloo --source "$dir/m" --rounds 1 --verify --seed 8 |
  grep -q 'round 1/1: gloo .*verified'
# A two-process trainer: rank 1 iterates its source each round and never touches the workers.
"$trainer" --workers "$g0,$g1" --backend gloo --source "$dir/m" --rounds 2 --rank 1 >"$dir/rank1.out" &
rank1=$!
out=$("$trainer" --workers "$g0,$g1" --backend gloo --source "$dir/m" --rounds 2 --verify --seed 4)
wait "$rank1"
echo "$out" | grep -q 'round 2/2: gloo .*verified'
grep -q 'round 2/2: rank 1 joined the round' "$dir/rank1.out"

# A mixture of experts pushed by two trainer processes, each holding half of every layer's
# experts (then half of the layers): rank 0 starts rank 1, and each verifies what it holds.
"$make" --arch qwen3_moe --layers 2 --hidden-size 64 --intermediate-size 128 --heads 4 --kv-heads 2 \
  --head-dim 16 --vocab 256 --num-experts 8 --num-experts-per-tok 2 --moe-intermediate-size 32 \
  --dtype bfloat16 --seed 5 --out "$dir/moe" >/dev/null
model=$dir/moe start e0 gloo --data-parallel-rank 0 --data-parallel-size 2; e0=$endpoint
model=$dir/moe start e1 gloo --data-parallel-rank 1 --data-parallel-size 2; e1=$endpoint
out=$("$trainer" --workers "$e0,$e1" --backend gloo --source "$dir/moe" --rounds 2 --ranks 2 \
  --shard experts --verify --buffer-size 16384)
echo "$out" | grep -q 'round 2/2: gloo .* weight_version "round-2", verified'
echo "$out" | grep -q 'round 2/2: rank 1 of 2 sent its share .*, verified'
out=$("$trainer" --workers "$e0,$e1" --backend gloo --source "$dir/moe" --rounds 1 --ranks 2 \
  --shard layers --no-packed --verify --seed 6)
echo "$out" | grep -q 'round 1/1: rank 1 of 2 sent its share .*, verified'
if "$trainer" --workers "$e0" --backend shm --source "$dir/moe" --ranks 2 2>"$dir/err"; then exit 1; fi
grep -q -- "--ranks 2 is for the gloo and nccl backends" "$dir/err"

start h0 shm; h0=$endpoint
start h1 shm; h1=$endpoint
"$trainer" --workers "$h0,$h1" --backend shm --source "$dir/m" --rounds 3 --verify --buffer-size 262144 | grep -q 'round 3/3: shm .*verified'
"$trainer" --workers "$h0,$h1" --backend shm --shm-arena --source "$dir/m" --rounds 2 --verify --buffer-size 262144 | grep -q 'round 2/2: shm .*verified'
"$trainer" --workers "$h0,$h1" --backend shm --shm-window --source "$dir/m" --rounds 2 --verify --buffer-size 1048576 | grep -q 'round 2/2: shm .*verified'
if "$trainer" --workers "$g0" --backend gloo --shm-window --source "$dir/m" 2>"$dir/err"; then exit 1; fi
grep -q -- "--shm-window is for --backend shm" "$dir/err"

start d0 disk; d0=$endpoint
start d1 disk; d1=$endpoint
"$trainer" --workers "$d0,$d1" --backend disk --source "$dir/m" --rounds 2 --verify --disk-dir "$dir/shared" | grep -q 'round 2/2: disk .*verified'
[ -z "$(ls -A "$dir/shared" | grep -v "round-.*-2$" || true)" ]  # only the last round remains
d=$d0

start s0 sparse_gloo --data-parallel-rank 0 --data-parallel-size 2; s0=$endpoint
start s1 sparse_gloo --data-parallel-rank 1 --data-parallel-size 2; s1=$endpoint
"$trainer" --workers "$s0,$s1" --backend sparse_gloo --source "$dir/m" --rounds 3 --verify | grep -q 'round 3/3: sparse_gloo .*verified'

# A worker started with CURVE answers only the trainer whose public key it lists: the trainer
# reaches it with the workers' public key and its own secret key, each in a file.
mkdir -p "$dir/keys/trainers"
/usr/bin/python3 - "$dir/keys" <<'PY'
import os, sys, zmq
keys = sys.argv[1]
for name, (public, secret) in (("worker", zmq.curve_keypair()), ("trainer", zmq.curve_keypair())):
    open(os.path.join(keys, name + ".pub"), "wb").write(public)
    open(os.path.join(keys, name + ".key"), "wb").write(secret)
open(os.path.join(keys, "trainers", "trainer.pub"), "wb").write(open(os.path.join(keys, "trainer.pub"), "rb").read())
PY
start c0 disk --curve-secret-key-file "$dir/keys/worker.key" --curve-authorized-keys "$dir/keys/trainers"
c0=$endpoint
"$trainer" --workers "$c0" --backend disk --source "$dir/m" --rounds 1 --verify \
  --curve-server-key-file "$dir/keys/worker.pub" --curve-secret-key-file "$dir/keys/trainer.key" |
  grep -q 'round 1/1: disk .*verified'
# Without the keys the worker stays silent, and the trainer says so within its timeout.
if "$trainer" --workers "$c0" --backend disk --source "$dir/m" --timeout 2 2>"$dir/err"; then exit 1; fi
grep -q "get_world_size" "$dir/err"
# A key file that holds no key is named.
echo "not a key" >"$dir/keys/bad.key"
if "$trainer" --workers "$c0" --backend disk --source "$dir/m" --curve-server-key-file "$dir/keys/worker.pub" \
  --curve-secret-key-file "$dir/keys/bad.key" 2>"$dir/err"; then exit 1; fi
grep -q "CURVE key file $dir/keys/bad.key must hold a 40-character Z85 key" "$dir/err"

if "$trainer" --workers "$d" --backend carrier_pigeon --source "$dir/m" 2>"$dir/err"; then exit 1; fi
grep -q "unknown --backend 'carrier_pigeon'" "$dir/err"
echo "hotswap-trainer: gloo (one and two trainer ranks), shm, disk and sparse_gloo rounds into two workers each, a disk round over CURVE, verified"
