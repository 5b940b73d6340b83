#!/usr/bin/env python3
"""The Python side of the NCCL TCP rendezvous, as vLLM's StatelessProcessGroup runs it, with
a Python torch whose store protocol is the build's (Debian's python3-torch, or the python a GPU
build takes its torch from; no vLLM, no GPU needed): a TCPStore of world size 2 and the unique id
pickled under `broadcast_from/0/0`. vLLM's ctypes ncclUniqueId is recreated under its own module
path, so the pickle bytes are vLLM's exactly.

    vllm_store_peer.py host PORT   rank 0: host, wait for rank 1, publish an id, print it
    vllm_store_peer.py join PORT   rank 1: register, read the id rank 0 published, print it
    vllm_store_peer.py vllm-host PORT
                                   rank 0 through vLLM's own code, in a python that has vLLM:
                                   StatelessProcessGroup.create, NCCLLibrary().ncclGetUniqueId(),
                                   broadcast_obj, exactly as vLLM's NCCL trainer engine does
Each prints "id <hex>" and exits once the C++ side has set the key "hotswap_done".
"""

import ctypes
import datetime
import pickle
import sys
import time
import types

from torch.distributed import TCPStore

MODULE = "vllm.distributed.device_communicators.pynccl_wrapper"


class ncclUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


def register_vllm_class():
    parts = MODULE.split(".")
    for i in range(1, len(parts) + 1):
        sys.modules.setdefault(".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
    ncclUniqueId.__module__ = MODULE
    sys.modules[MODULE].ncclUniqueId = ncclUniqueId


def vllm_host(port):
    from vllm.distributed.device_communicators.pynccl_wrapper import NCCLLibrary
    from vllm.distributed.utils import StatelessProcessGroup

    group = StatelessProcessGroup.create(host="127.0.0.1", port=port, rank=0, world_size=2,
                                         store_timeout=30)
    uid = NCCLLibrary().ncclGetUniqueId()  # no GPU needed: only NCCL's bootstrap
    group.broadcast_obj(uid, src=0)
    print("id " + bytes(b & 0xFF for b in uid.internal).hex(), flush=True)
    group.store.wait(["hotswap_done"])
    linger_for_the_setter()


def main():
    role, port = sys.argv[1], int(sys.argv[2])
    if role == "vllm-host":
        return vllm_host(port)
    register_vllm_class()
    timeout = datetime.timedelta(seconds=30)
    store = TCPStore("127.0.0.1", port, 2, role == "host", timeout)
    if role == "host":
        uid = ncclUniqueId()
        for i in range(128):
            uid.internal[i] = ((i * 53 + 7) % 256) - 128
        store.set("broadcast_from/0/0", pickle.dumps(uid))
    else:
        uid = pickle.loads(store.get("broadcast_from/0/0"))
        assert type(uid) is ncclUniqueId
    print("id " + bytes(b & 0xFF for b in uid.internal).hex(), flush=True)
    store.wait(["hotswap_done"])
    linger_for_the_setter()


def linger_for_the_setter():
    # The C++ side confirms its set with a check on the same connection. A host that exits the
    # moment the key lands closes that connection first, and the check fails with a broken pipe
    # (seen twice under the full suite on 2 cores): stay up a moment longer.
    time.sleep(1.0)


if __name__ == "__main__":
    main()
