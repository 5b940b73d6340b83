#!/usr/bin/env python3
"""The peer of hotswap's numerics benchmark: for one checkpoint and prompt, transformers'
log-probabilities of each next prompt token (teacher forcing, as an RL trainer scores a
rollout) computed in bfloat16, and the reference they are both held against: the same
bfloat16-rounded weights computed in float32.

    $HOTSWAP_PEER_PYTHON bench/numerics_peer.py MODEL_DIR 3 17 42 ...

Prints one JSON line: {"bf16": [...], "reference": [...]}, one entry per position but the last.
Needs torch and transformers (a virtual environment outside the repository).
"""

import json
import sys

import torch
import transformers


def next_token_logprobs(model, ids):
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    logprobs = torch.log_softmax(logits, -1)
    return [logprobs[t, ids[t + 1]].item() for t in range(len(ids) - 1)]


def main():
    directory, ids = sys.argv[1], [int(t) for t in sys.argv[2:]]
    torch.set_num_threads(1)
    config = transformers.AutoConfig.from_pretrained(directory)
    config._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_pretrained(
        directory, config=config, dtype=torch.bfloat16).eval()
    bf16 = next_token_logprobs(model, ids)
    reference = next_token_logprobs(model.to(torch.float32), ids)
    print(json.dumps({"bf16": bf16, "reference": reference}))


if __name__ == "__main__":
    main()
