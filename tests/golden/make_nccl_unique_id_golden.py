#!/usr/bin/env python3
"""Golden vectors for the NCCL TCP rendezvous: the exact bytes vLLM's trainer stores under
`broadcast_from/0/0` — `pickle.dumps(ncclUniqueId)` of vLLM's own ctypes class — for pickle
protocols 3, 4 (the default up to Python 3.13) and 5 (the default from 3.14), with a known id.

Run from a virtual environment outside the repository that has vLLM (no GPU needed):
    /opt/hotswap-vllm-venv/bin/python tests/golden/make_nccl_unique_id_golden.py
Writes tests/golden/vllm/nccl_unique_id.json.
"""

import json
import os
import pickle
import sys

import vllm
from vllm.distributed.device_communicators.pynccl_wrapper import ncclUniqueId

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    uid = ncclUniqueId()
    raw = bytes((i * 37 + 11) % 256 for i in range(128))
    for i, b in enumerate(raw):
        uid.internal[i] = b - 256 if b > 127 else b  # c_byte is signed
    out = {
        "vllm_version": vllm.__version__,
        "python_version": sys.version.split()[0],
        "class_module": ncclUniqueId.__module__,
        "class_name": ncclUniqueId.__name__,
        "unique_id_hex": raw.hex(),
        "pickles_hex": {str(p): pickle.dumps(uid, protocol=p).hex() for p in (3, 4, 5)},
    }
    assert pickle.loads(bytes.fromhex(out["pickles_hex"]["4"])).internal[:] == uid.internal[:]
    with open(os.path.join(HERE, "vllm", "nccl_unique_id.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
