#!/usr/bin/env python3
"""The peer of hotswap_serving_bench: Hugging Face transformers' batched generate() of the same
prompts (token id lists) on the same checkpoint and thread count, sampled, every sequence
generating exactly TOKENS new tokens, timed from the first prefill to the last token.

    $HOTSWAP_PEER_PYTHON bench/hf_batched_peer.py MODEL_DIR PROMPTS_JSON TOKENS THREADS [DTYPE]

DTYPE (float32, bfloat16): the dtype the model computes in; the checkpoint's when left out.

Prints one JSON line: {"tokens_per_second": ..., "seconds": ..., "requests": ...}. Needs torch and
transformers (a virtual environment outside the repository, named by HOTSWAP_PEER_PYTHON).
"""

import json
import sys
import time

import torch
import transformers


def main(model_dir, prompts_file, tokens, threads, dtype="auto"):
    torch.set_num_threads(int(threads))
    tokens = int(tokens)
    with open(prompts_file) as f:
        prompts = json.load(f)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=dtype if dtype == "auto" else getattr(torch, dtype)).eval()
    # Left padding, as batched generation of unequal prompts needs.
    width = max(len(p) for p in prompts)
    pad = 0
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    torch.manual_seed(0)
    with torch.no_grad():
        start = time.perf_counter()
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=tokens,
                             min_new_tokens=tokens, do_sample=True, temperature=1.0, top_p=1.0,
                             top_k=0, pad_token_id=pad, eos_token_id=None)
        seconds = time.perf_counter() - start
    generated = (out.shape[1] - width) * len(prompts)
    print(json.dumps({"tokens_per_second": generated / seconds, "seconds": seconds,
                      "requests": len(prompts)}))


if __name__ == "__main__":
    main(*sys.argv[1:6])
