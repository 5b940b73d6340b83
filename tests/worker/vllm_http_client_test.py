"""Drives a real hotswap-worker through vLLM's own HTTPVLLMWeightSyncClient, unchanged.

Run by tests/worker/run_vllm_client_test.sh with a python that has vLLM installed (from PyPI,
in a virtual environment outside the repository). Usage:
    python vllm_http_client_test.py HOTSWAP_WORKER HOTSWAP_MAKE_MODEL
"""

import hashlib
import socket
import subprocess
import sys
import tempfile

import requests
import torch
from safetensors import safe_open
from vllm.distributed.weight_transfer.clients import HTTPVLLMWeightSyncClient


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_model(tool, out, seed):
    subprocess.run([tool, "--arch", "qwen2", "--layers", "2", "--hidden-size", "64",
                    "--intermediate-size", "96", "--heads", "4", "--kv-heads", "2",
                    "--vocab", "128", "--seed", str(seed), "--out", out],
                   check=True, stdout=subprocess.DEVNULL)


def main(worker, make):
    tmp = tempfile.mkdtemp(prefix="hotswap-vllm-")
    old, new = f"{tmp}/old", f"{tmp}/new"
    make_model(make, old, 1)
    make_model(make, new, 2)
    port = free_port()
    proc = subprocess.Popen([worker, "--model", old, "--control", "tcp://127.0.0.1:*",
                             "--http-port", str(port), "--timeout", "60",
                             "--weight-transfer-config", '{"backend": "disk"}'],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = proc.stdout.readline()
        assert "hotswap-worker ready" in line, line
        base = f"http://127.0.0.1:{port}"
        client = HTTPVLLMWeightSyncClient(base, timeout=60)

        client.init_weight_transfer_engine({})
        client.start_weight_update()
        client.update_weights({"path": new})
        client.finish_weight_update(weight_version="step-9")
        assert requests.get(f"{base}/weight_info").json() == {"weight_version": "step-9"}

        # The worker serves exactly the new checkpoint's tensors.
        sums = requests.post(f"{base}/weight_checker",
                             json={"action": "checksum", "format": "checkpoint"}).json()["checksums"]
        with safe_open(f"{new}/model.safetensors", framework="pt") as f:
            for name in f.keys():
                t = f.get_tensor(name)
                digest = hashlib.sha256(
                    t.contiguous().view(-1).view(torch.uint8).numpy()).hexdigest()
                assert sums[name] == digest, name

        # Failures surface as raised HTTP errors, as the client's contract requires.
        client.start_weight_update()
        try:
            client.start_weight_update()
            raise AssertionError("a nested start_weight_update must fail")
        except requests.HTTPError as e:
            assert e.response.status_code == 500, e.response.status_code  # vLLM 0.34
        client.update_weights({"path": old})
        client.finish_weight_update()
        assert requests.get(f"{base}/weight_info").json() == {"weight_version": "step-9"}
        # The nested start ended nothing: finish the open session before releasing the trainer.
        client.shutdown_weight_transfer_engine()
        print("vLLM's HTTPVLLMWeightSyncClient drove hotswap-worker through a full round: ok")
    finally:
        proc.terminate()
        proc.wait(timeout=15)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
