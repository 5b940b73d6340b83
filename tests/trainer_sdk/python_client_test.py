"""The Python client against a real hotswap-worker. Usage: python_client_test.py WORKER MAKE_MODEL"""

import json
import os
import subprocess
import sys
import tempfile

# The package's source folder: the pure-Python client imports without the built extension.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "trainer_sdk", "python"))
from hotswap import (CONTROL_METHODS, HotswapError, HotswapFanOutClient,  # noqa: E402
                     HotswapWeightSyncClient, WorkerProcess)
import hotswap_client  # noqa: E402  (its former module name still works)
import zmq  # noqa: E402

assert hotswap_client.HotswapWeightSyncClient is HotswapWeightSyncClient


def main(worker, make):
    # The client knows exactly the methods of the worker's table, and has one for each.
    table = json.loads(subprocess.run([worker, "--control-methods"], check=True,
                                      capture_output=True, text=True).stdout)
    assert [m["name"] for m in table["methods"]] == list(CONTROL_METHODS), table
    for name in CONTROL_METHODS:
        assert callable(getattr(HotswapWeightSyncClient, name)), name
    tmp = tempfile.mkdtemp(prefix="hotswap-pyclient-")
    for seed in (1, 2):
        subprocess.run([make, "--arch", "llama", "--layers", "2", "--hidden-size", "64",
                        "--intermediate-size", "96", "--heads", "4", "--kv-heads", "2",
                        "--vocab", "128", "--seed", str(seed), "--out", f"{tmp}/m{seed}"],
                       check=True, stdout=subprocess.DEVNULL)
    proc = subprocess.Popen([worker, "--model", f"{tmp}/m1", "--control", "tcp://127.0.0.1:*",
                             "--weight-transfer-config", '{"backend": "disk"}'],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = proc.stdout.readline()
        endpoint = line.split("control ", 1)[1].split(";", 1)[0]
        client = HotswapWeightSyncClient(endpoint, timeout=30)
        # It satisfies vLLM's VLLMWeightSyncClient protocol: the four methods, by name.
        for method in ("init_weight_transfer_engine", "start_weight_update", "update_weights",
                       "finish_weight_update"):
            assert callable(getattr(client, method)), method
        before = client.generate([1, 2, 3], max_tokens=4, temperature=0)
        client.init_weight_transfer_engine({})
        client.start_weight_update()
        client.update_weights({"path": f"{tmp}/m2"})
        client.finish_weight_update(weight_version="py-1")
        assert client.weight_info() == {"weight_version": "py-1"}
        after = client.generate([1, 2, 3], max_tokens=4, temperature=0)
        assert after["weight_versions"] == [["py-1", 0, 4]], after
        assert before["token_ids"] != after["token_ids"]
        sums = client.weight_checker("checksum")["checksums"]
        assert client.weight_checker("compare", baseline=sums)["match"] is True
        assert client.pause(mode="keep") == {"status": "paused"}
        assert client.is_paused() == {"is_paused": True}
        assert client.resume() == {"status": "resumed"}
        assert client.get_world_size(include_dp=False) == {"world_size": 1}
        assert client.health()["weight_version"] == "py-1"
        try:
            client.update_weights({"path": f"{tmp}/m2"})
            raise AssertionError("update without start must fail")
        except HotswapError as e:
            assert e.code == -32000 and e.kind == "RuntimeError", (e.code, e.kind)
            assert "start_weight_update must be called before update_weights." in e.message
        try:
            client.tokenize("hello")
            raise AssertionError("tokenize without a tokenizer.json must fail")
        except HotswapError as e:
            assert e.code == -32000 and "no tokenizer.json" in e.message, (e.code, e.message)
        try:
            client.chat_completions([{"role": "user", "content": "hi"}])
            raise AssertionError("a chat without a tokenizer must fail")
        except HotswapError as e:
            assert e.code == -32602 and "need the model's tokenizer" in e.message, (e.code, e.message)
        # Completions from token ids need no tokenizer; their tokens say their version.
        done = client.completions([1, 2, 3], max_tokens=4, temperature=0, ignore_eos=True,
                                  return_token_ids=True, return_weight_versions=True)
        choice = done["choices"][0]
        assert choice["token_ids"] == after["token_ids"], (choice, after)
        assert choice["weight_versions"] == [{"version": "py-1", "start": 0, "end": 4}], choice
        assert client.models()["data"][0]["object"] == "model"
        print("python client: ok")
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    check_fan_out_with_curve(worker, tmp)
    check_ray_missing()


def check_fan_out_with_curve(worker, tmp):
    """HotswapFanOutClient over two workers that take only CURVE clients they authorize."""
    server_public, server_secret = (k.decode() for k in zmq.curve_keypair())
    client_public, client_secret = (k.decode() for k in zmq.curve_keypair())
    os.makedirs(f"{tmp}/authorized")
    with open(f"{tmp}/server.key", "w") as f:
        f.write(server_secret)
    with open(f"{tmp}/authorized/trainer.key", "w") as f:
        f.write(client_public)
    curve = {"server_public": server_public, "public_key": client_public,
             "secret_key": client_secret}
    flags = ["--curve-secret-key-file", f"{tmp}/server.key",
             "--curve-authorized-keys", f"{tmp}/authorized"]
    with WorkerProcess(worker, f"{tmp}/m1", "disk", *flags) as a, \
            WorkerProcess(worker, f"{tmp}/m1", "disk", *flags) as b:
        try:
            HotswapWeightSyncClient(a.endpoint, timeout=1).health()
            raise AssertionError("a client without the keys was answered")
        except TimeoutError:
            pass
        client = HotswapFanOutClient([a.endpoint, b.endpoint], timeout=30, curve=curve)
        assert client.inference_world_size() == 2
        client.init_weight_transfer_engine({})
        client.start_weight_update()
        client.update_weights({"path": f"{tmp}/m2"})
        client.finish_weight_update(weight_version="fan-1")
        assert [r["weight_version"] for r in client.call("weight_info")] == ["fan-1"] * 2
        digests = client.checkpoint_checksums()
        assert [w for w, _ in digests] == [a.endpoint, b.endpoint]
        assert digests[0][1] == digests[1][1] and digests[0][1], digests
        try:
            client.update_weights({"path": f"{tmp}/m2"})
            raise AssertionError("update without start must fail")
        except HotswapError as e:
            assert e.message.startswith(f"worker {a.endpoint}: "), e.message
            assert e.kind == "RuntimeError", e.kind
        try:
            HotswapFanOutClient(a.endpoint)
            raise AssertionError("one endpoint string was taken as a list")
        except TypeError:
            pass
    print("fan-out client over CURVE workers: ok")


def check_ray_missing():
    """Without Ray, `import hotswap.ray` says what to install."""
    try:
        import ray  # noqa: F401
        print("hotswap.ray without Ray: not checked (this interpreter has Ray)")
        return
    except ImportError:
        pass
    try:
        import hotswap.ray  # noqa: F401
        raise AssertionError("hotswap.ray imported without Ray")
    except ImportError as e:
        assert "pip install 'hotswap[ray]'" in str(e), str(e)
    print("hotswap.ray without Ray: says what to install")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
