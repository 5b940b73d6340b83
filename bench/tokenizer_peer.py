#!/usr/bin/env python3
"""The peer of hotswap's tokenizer benchmark: the Hugging Face `tokenizers` package encoding
the same documents with the same tokenizer.json, one document at a time on one thread, as a
server tokenizes one prompt per request.

    $HOTSWAP_PEER_PYTHON bench/tokenizer_peer.py TOKENIZER_JSON CORPUS_FILE

CORPUS_FILE holds the documents as a JSON list of strings. Prints one JSON line:
{"mb_per_second": ..., "tokens": <total ids>}. Needs `tokenizers` (a virtual environment outside
the repository, named by HOTSWAP_PEER_PYTHON).
"""

import json
import os
import sys
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from tokenizers import Tokenizer  # noqa: E402


def main():
    tokenizer = Tokenizer.from_file(sys.argv[1])
    with open(sys.argv[2], encoding="utf-8") as f:
        docs = json.load(f)
    size = sum(len(d.encode("utf-8")) for d in docs)
    for d in docs[:8]:  # warm-up
        tokenizer.encode(d)
    start = time.perf_counter()
    tokens = 0
    for d in docs:
        tokens += len(tokenizer.encode(d).ids)
    seconds = time.perf_counter() - start
    print(json.dumps({"mb_per_second": size / seconds / 1e6, "tokens": tokens}))


if __name__ == "__main__":
    main()
