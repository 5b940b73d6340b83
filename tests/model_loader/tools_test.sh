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
# Bad input: a clear error and a non-zero exit.
if "$bin/hotswap-make-model" --arch gpt2 --layers 1 --hidden-size 8 --intermediate-size 8 \
     --heads 2 --kv-heads 2 --vocab 8 --out "$dir/x" 2>"$dir/err"; then exit 1; fi
grep -q "unknown architecture 'gpt2'" "$dir/err"
if "$bin/hotswap-generate" --model "$dir/nowhere" --prompt-ids 1 --max-tokens 1 2>"$dir/err"; then exit 1; fi
grep -q "cannot read" "$dir/err"
echo "tools: make-model and generate behave"
