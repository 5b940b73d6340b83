#!/usr/bin/env python3
"""The peer of hotswap's chat-template benchmark: transformers' apply_chat_template (text, not
tokenized, as vLLM calls it) rendering the same conversations with the same templates, one
request at a time.

    $HOTSWAP_PEER_PYTHON bench/chat_template_peer.py GOLDEN_JSON RENDERS

GOLDEN_JSON is tests/golden/chat_template/golden.json: its "applied" cases (those that render)
are the conversations. Each is rendered RENDERS times after a warm-up. Prints one JSON line:
{"median_us": ..., "p99_us": ..., "renders": ...}, per render. Needs transformers (a virtual
environment outside the repository, named by HOTSWAP_PEER_PYTHON).
"""

import json
import os
import sys
import time

from transformers import PreTrainedTokenizerFast


def main():
    golden, renders = sys.argv[1], int(sys.argv[2])
    here = os.path.dirname(os.path.abspath(golden))
    with open(golden, encoding="utf-8") as f:
        cases = [c for c in json.load(f)["applied"] if "text" in c]
    times = []
    for case in cases:
        tok = PreTrainedTokenizerFast(
            tokenizer_file=os.path.join(here, "..", "tokenizer", case["tokenizer"], "tokenizer.json"),
            **case["special"])

        def render():
            return tok.apply_chat_template(case["messages"], tools=case["tools"],
                                           chat_template=case["template"], tokenize=False,
                                           add_generation_prompt=case["add_generation_prompt"],
                                           **case["kwargs"])

        assert render() == case["text"]
        for _ in range(renders):
            start = time.perf_counter()
            render()
            times.append((time.perf_counter() - start) * 1e6)
    times.sort()
    print(json.dumps({"median_us": times[len(times) // 2],
                      "p99_us": times[min(len(times) - 1, int(0.99 * len(times)))],
                      "renders": len(times)}))


if __name__ == "__main__":
    main()
