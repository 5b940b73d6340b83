#!/usr/bin/env python3
"""The peer of hotswap's decode benchmarks: Hugging Face transformers on the same checkpoint,
dtype and thread count, timing the same prefill and the greedy decode steps after it.

    $HOTSWAP_PEER_PYTHON bench/hf_decode_peer.py MODEL_DIR --batch 8 --prompt 16 --steps 32 \
        --threads 2 [--dtype float32] [--repeats 5]

Prints one JSON line: {"tokens_per_second": <median decode>, "min": ..., "max": ...,
"prefill_tokens_per_second": <median prefill of the prompt>, "batch": ...}; with --steps 0 only
the prefill is timed. Needs torch and
transformers (a virtual environment outside the repository, named by HOTSWAP_PEER_PYTHON).
"""

import argparse
import json
import time

import torch
import transformers


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dtype", choices=["auto", "float32", "bfloat16", "float16"],
                        default="auto", help="compute dtype (auto: the checkpoint's)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="time the decode this many times, print the median")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    config = transformers.AutoConfig.from_pretrained(args.model)
    config._attn_implementation = "eager"
    dtype = (getattr(config, "dtype", None) or "auto") if args.dtype == "auto" else \
        getattr(torch, args.dtype)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        args.model, config=config, dtype=dtype).eval()
    # The prompt hotswap's benchmark uses: token i is i * 7 mod the vocabulary.
    prompt = [i * 7 % config.vocab_size for i in range(args.prompt)]
    ids = torch.tensor([prompt] * args.batch)
    rates, prefills = [], []
    with torch.no_grad():
        model(ids[:, :1], use_cache=True)  # warm-up: the first call pays one-time set-up
        for _ in range(max(1, args.repeats)):
            start = time.perf_counter()
            out = model(ids, use_cache=True)  # prefill: timed apart from the decode steps
            cache = out.past_key_values
            token = out.logits[:, -1].argmax(-1, keepdim=True)
            prefills.append(args.batch * args.prompt / (time.perf_counter() - start))
            start = time.perf_counter()
            for _ in range(args.steps):
                out = model(token, past_key_values=cache, use_cache=True)
                cache = out.past_key_values
                token = out.logits[:, -1].argmax(-1, keepdim=True)
            if args.steps:
                rates.append(args.batch * args.steps / (time.perf_counter() - start))
    rates.sort()
    prefills.sort()
    result = {"prefill_tokens_per_second": prefills[len(prefills) // 2], "batch": args.batch,
              "prompt": args.prompt, "steps": args.steps, "dtype": str(dtype),
              "torch": torch.__version__}
    if rates:
        result.update(tokens_per_second=rates[len(rates) // 2], min=rates[0], max=rates[-1])
    print(json.dumps(result))


if __name__ == "__main__":
    main()
