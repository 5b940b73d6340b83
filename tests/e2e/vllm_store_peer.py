#!/usr/bin/env python3
"""The Python side of the NCCL TCP rendezvous, as vLLM's StatelessProcessGroup runs it, with
the python whose torch the build links (torch 2, from scripts/make-torch-env.sh; no vLLM, no GPU
needed): a TCPStore of world size 2 and the unique id
pickled under `broadcast_from/0/0`. vLLM's ctypes ncclUniqueId is recreated under its own module
path, so the pickle bytes are vLLM's exactly.

    vllm_store_peer.py host        rank 0: host on a free port and print "port N", publish an
                                   id, print it (see host_store)
    vllm_store_peer.py join PORT   rank 1: register, read the id rank 0 published, print it
    vllm_store_peer.py vllm-host   rank 0 through vLLM's own code, in a python that has vLLM,
                                   on a port it prints first ("port N"):
                                   StatelessProcessGroup.create, NCCLLibrary().ncclGetUniqueId(),
                                   broadcast_obj, exactly as vLLM's NCCL trainer engine does
    vllm_store_peer.py gloo-host   rank 0 of a gloo group of 2, as vLLM's gloo trainer joins
                                   one: hosts the store (prints "port N"), joins
                                   ProcessGroupGloo, the warm-up all-reduce, then broadcasts 64
                                   known bytes as rank 0 and prints them as the id
    vllm_store_peer.py gloo-join PORT
                                   rank 1 of the group a hotswap rank 0 hosts: joins, the warm-up
                                   all-reduce, receives rank 0's 64 bytes and prints them
Each prints "id <hex>" and exits once the C++ side has set the key "hotswap_done".
"""

import ctypes
import datetime
import pickle
import socket
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


def vllm_host():
    from vllm.distributed.device_communicators.pynccl_wrapper import NCCLLibrary
    from vllm.distributed.utils import StatelessProcessGroup

    # create() waits for rank 1 before it returns, so the port is picked here, after the slow
    # import, and told first: the window in which another process could take it is a moment.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    print("port %d" % port, flush=True)
    group = StatelessProcessGroup.create(host="127.0.0.1", port=port, rank=0, world_size=2,
                                         store_timeout=30)
    uid = NCCLLibrary().ncclGetUniqueId()  # no GPU needed: only NCCL's bootstrap
    group.broadcast_obj(uid, src=0)
    print("id " + bytes(b & 0xFF for b in uid.internal).hex(), flush=True)
    group.store.wait(["hotswap_done"])
    linger_for_the_setter()


def gloo_rank(role, port, timeout):
    import torch
    import torch.distributed as dist

    if role == "gloo-host":
        store, rank = host_store(timeout), 0
    else:
        store, rank = TCPStore("127.0.0.1", port, 2, False, timeout), 1
    opts = dist.ProcessGroupGloo._Options()
    opts._timeout = timeout
    opts._devices = [dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
    group = dist.ProcessGroupGloo(store, rank, 2, opts)
    group.allreduce([torch.zeros(1)]).wait()  # vLLM's warm-up all-reduce
    data = torch.tensor([(i * 37 + 11) % 256 for i in range(64)], dtype=torch.uint8)
    if rank == 1:
        data.zero_()
    opts = dist.BroadcastOptions()
    opts.rootRank = 0
    group.broadcast([data], opts).wait()
    print("id " + bytes(data.tolist()).hex(), flush=True)
    store.wait(["hotswap_done"])
    linger_for_the_setter()


def main():
    role, port = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0
    if role == "vllm-host":
        return vllm_host()
    if role in ("gloo-host", "gloo-join"):
        return gloo_rank(role, port, datetime.timedelta(seconds=60))
    register_vllm_class()
    timeout = datetime.timedelta(seconds=30)
    if role == "host":
        store = host_store(timeout)
        uid = ncclUniqueId()
        for i in range(128):
            uid.internal[i] = ((i * 53 + 7) % 256) - 128
        store.set("broadcast_from/0/0", pickle.dumps(uid))
    else:
        store = TCPStore("127.0.0.1", port, 2, False, timeout)
        uid = pickle.loads(store.get("broadcast_from/0/0"))
        assert type(uid) is ncclUniqueId
    print("id " + bytes(b & 0xFF for b in uid.internal).hex(), flush=True)
    store.wait(["hotswap_done"])
    linger_for_the_setter()


def host_store(timeout):
    # A port picked by the test and bound here seconds later (importing torch is slow on a loaded
    # machine) can be taken in between by any other process's listener or outgoing socket; the
    # test's rank then met a stranger ("Connection reset by peer", seen once in CI). Binding
    # port 0 leaves no such window. The constructor must return before the port can be told, so
    # this host does not wait there for rank 1 as vLLM's does; the rank's own registration and
    # its wait for the id are unchanged.
    store = TCPStore("127.0.0.1", 0, 2, True, timeout, wait_for_workers=False)
    print("port %d" % store.port, flush=True)
    return store


def linger_for_the_setter():
    # The C++ side confirms its set with a check on the same connection. A host that exits the
    # moment the key lands closes that connection first, and the check fails with a broken pipe
    # (seen twice under the full suite on 2 cores): stay up a moment longer.
    time.sleep(1.0)


if __name__ == "__main__":
    main()
