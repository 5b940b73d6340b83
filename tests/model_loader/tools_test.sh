#!/usr/bin/env bash
# The two command-line tools, end to end, with the exact flags that tests, the demo and
# orchestrators rely on. Usage: tools_test.sh BUILD_DIR
set -euo pipefail
bin=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

"$bin/hotswap-make-model" --arch qwen3 --layers 2 --hidden-size 64 --intermediate-size 96 \
  --heads 4 --kv-heads 2 --head-dim 32 --vocab 128 --dtype bfloat16 --tie-word-embeddings \
  --seed 5 --shard-size 40000 --out "$dir/m"
ls "$dir/m"/model-00001-of-*.safetensors "$dir/m/model.safetensors.index.json" "$dir/m/config.json" >/dev/null

out=$("$bin/hotswap-generate" --model "$dir/m" --prompt-ids 1,2,3 --max-tokens 4 --json)
/usr/bin/python3 - "$out" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
assert sorted(r) == ["logprobs", "token_ids"], r
assert len(r["token_ids"]) == 4 and len(r["logprobs"]) == 4, r
assert all(lp <= 0 for lp in r["logprobs"]), r
PY
# Same seed, same bytes; sampled generation is deterministic for a seed.
"$bin/hotswap-make-model" --arch qwen3 --layers 2 --hidden-size 64 --intermediate-size 96 \
  --heads 4 --kv-heads 2 --head-dim 32 --vocab 128 --dtype bfloat16 --tie-word-embeddings \
  --seed 5 --shard-size 40000 --out "$dir/again" >/dev/null
for f in "$dir"/m/*.safetensors; do cmp "$f" "$dir/again/$(basename "$f")"; done
a=$("$bin/hotswap-generate" --model "$dir/m" --prompt-ids 1,2,3 --max-tokens 6 --temperature 1 --seed 3 --quantization int8 --json)
b=$("$bin/hotswap-generate" --model "$dir/m" --prompt-ids 1,2,3 --max-tokens 6 --temperature 1 --seed 3 --quantization int8 --json)
[ "$a" = "$b" ]
# Mixtures of experts: the expert flags reach config.json, and the model generates (int8 too:
# the experts stay in the runtime dtype, the rest is quantized).
"$bin/hotswap-make-model" --arch qwen3_moe --layers 2 --hidden-size 64 --intermediate-size 96 \
  --heads 4 --kv-heads 2 --vocab 128 --num-experts 8 --num-experts-per-tok 2 \
  --moe-intermediate-size 32 --norm-topk-prob --out "$dir/moe" >/dev/null
"$bin/hotswap-make-model" --arch mixtral --layers 2 --hidden-size 64 --intermediate-size 96 \
  --heads 4 --kv-heads 2 --vocab 128 --num-experts 4 --num-experts-per-tok 2 \
  --dtype bfloat16 --out "$dir/mixtral" >/dev/null
/usr/bin/python3 - "$dir" <<'PY'
import json, sys
q = json.load(open(sys.argv[1] + "/moe/config.json"))
assert q["architectures"] == ["Qwen3MoeForCausalLM"] and q["num_experts"] == 8, q
assert q["moe_intermediate_size"] == 32 and q["norm_topk_prob"] is True, q
m = json.load(open(sys.argv[1] + "/mixtral/config.json"))
assert m["model_type"] == "mixtral" and m["num_local_experts"] == 4, m
PY
for m in moe mixtral; do
  "$bin/hotswap-generate" --model "$dir/$m" --prompt-ids 1,2,3 --max-tokens 4 --json >/dev/null
  "$bin/hotswap-generate" --model "$dir/$m" --prompt-ids 1,2,3 --max-tokens 4 --quantization int8 \
    --json >/dev/null
done
# Bad input: a clear error and a non-zero exit.
if "$bin/hotswap-make-model" --arch gpt2 --layers 1 --hidden-size 8 --intermediate-size 8 \
     --heads 2 --kv-heads 2 --vocab 8 --out "$dir/x" 2>"$dir/err"; then exit 1; fi
grep -q "unknown architecture 'gpt2'" "$dir/err"
if "$bin/hotswap-generate" --model "$dir/nowhere" --prompt-ids 1 --max-tokens 1 2>"$dir/err"; then exit 1; fi
grep -q "cannot read" "$dir/err"
echo "tools: make-model and generate behave"
