"""A Python client for hotswap-worker's ZeroMQ JSON-RPC control socket.

`HotswapWeightSyncClient` has the four methods of vLLM's `VLLMWeightSyncClient` protocol, so a
vLLM trainer engine (e.g. `NCCLTrainerWeightTransferEngine`) can drive a hotswap worker through
it, and a method for every other control method of the worker (`generate`, `weight_info`,
`weight_checker`, `pause`, `health`, ...). Needs only pyzmq (Debian: python3-zmq).

    client = HotswapWeightSyncClient("tcp://127.0.0.1:5555", timeout=300)
    client.init_weight_transfer_engine({})
    client.start_weight_update()
    client.update_weights({"path": "/ckpt/step-7"})
    client.finish_weight_update(weight_version="step-7")
"""

import itertools
import json
import threading

import zmq


# The bound, in seconds, of every control call and wait a caller does not bound itself: the
# Python twin of protocol/timeouts.hpp's kDefaultTimeout (kDefaultTimeoutSeconds), which is also
# the default of hotswap-worker's --timeout and of the extension's init infos and clients, so
# that a trainer and a worker left at their defaults give up together. Every Python default
# names it; tests/check_python_constants.py fails on a literal copy and checks it against C++.
DEFAULT_TIMEOUT_S = 300.0

# The worker's control methods, as `hotswap-worker --control-methods` prints them from the
# C++ table in protocol/control_methods.cpp (the client's test checks that the two agree).
CONTROL_METHODS = (
    "init_weight_transfer_engine",
    "shutdown_weight_transfer_engine",
    "start_weight_update",
    "start_draft_weight_update",
    "update_weights",
    "finish_weight_update",
    "update_weight_version",
    "weight_info",
    "pause",
    "resume",
    "is_paused",
    "abort_requests",
    "get_world_size",
    "weight_checker",
    "generate",
    "tokenize",
    "detokenize",
    "completions",
    "chat_completions",
    "models",
    "load_lora_adapter",
    "unload_lora_adapter",
    "health",
    "metrics",
    "shutdown",
)


class HotswapError(RuntimeError):
    """An error reply: `code` is the JSON-RPC code, `kind` the worker's error type
    (ValueError, RuntimeError, TimeoutError, TransferError)."""

    def __init__(self, code, kind, message):
        super().__init__(f"{kind}: {message}")
        self.code = code
        self.kind = kind
        self.message = message


class HotswapWeightSyncClient:
    """`curve`: a worker started with CURVE (--curve-secret-key-file) answers only clients that
    bring its public key and a key pair it authorizes, given as a dict of three Z85 strings,
    {"server_public", "public_key", "secret_key"} (what hotswap.ZmqWeightSyncClient takes)."""

    def __init__(self, endpoint, timeout=DEFAULT_TIMEOUT_S, context=None, curve=None):
        self.endpoint = endpoint
        self.timeout = timeout
        self.curve = curve
        if curve is not None:
            missing = {"server_public", "public_key", "secret_key"} - set(curve)
            if missing:
                raise ValueError(f"curve lacks {sorted(missing)}: it needs server_public, "
                                 "public_key and secret_key (Z85 strings)")
        self._context = context or zmq.Context.instance()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def call(self, method, params=None, timeout=None):
        """One JSON-RPC call; raises HotswapError for an error reply and TimeoutError when no
        reply comes within the timeout. Each call uses a socket of its own, so calls from
        several threads (an update running beside a transmit) never share one."""
        with self._lock:
            request_id = next(self._ids)
        sock = self._context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        if self.curve is not None:
            sock.curve_serverkey = self.curve["server_public"].encode()
            sock.curve_publickey = self.curve["public_key"].encode()
            sock.curve_secretkey = self.curve["secret_key"].encode()
        try:
            sock.connect(self.endpoint)
            body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}
            sock.send_multipart([b"", json.dumps(body).encode()])
            wait_ms = int(1000 * (self.timeout if timeout is None else timeout))
            if not sock.poll(wait_ms):
                raise TimeoutError(f"no reply from {self.endpoint} to {method!r} within {wait_ms} ms")
            reply = json.loads(sock.recv_multipart()[-1])
        finally:
            sock.close()
        if "error" in reply:
            error = reply["error"]
            raise HotswapError(error.get("code"), error.get("data", {}).get("type", "RuntimeError"),
                               error.get("message", ""))
        return reply["result"]

    # vLLM's VLLMWeightSyncClient protocol.
    def init_weight_transfer_engine(self, init_info):
        self.call("init_weight_transfer_engine", {"init_info": init_info})

    def start_weight_update(self, lora_name=None, lora_config=None):
        """With `lora_name` (hotswap's extension), the round moves that LoRA adapter instead of
        the model; `lora_config` (PEFT's adapter_config.json fields) for a new one."""
        params = {}
        if lora_name is not None:
            params["lora_name"] = lora_name
        if lora_config is not None:
            params["lora_config"] = lora_config
        self.call("start_weight_update", params)

    def update_weights(self, update_info):
        self.call("update_weights", {"update_info": update_info})

    def finish_weight_update(self, weight_version=None):
        params = {} if weight_version is None else {"weight_version": weight_version}
        self.call("finish_weight_update", params)

    # hotswap's additions.
    def generate(self, prompt_token_ids, **sampling):
        return self.call("generate", {"prompt_token_ids": list(prompt_token_ids), **sampling})

    def weight_info(self):
        return self.call("weight_info")

    def tokenize(self, prompt, **params):
        return self.call("tokenize", {"prompt": prompt, **params})

    def detokenize(self, tokens):
        return self.call("detokenize", {"tokens": list(tokens)})

    def completions(self, prompt, **params):
        """vLLM's POST /v1/completions body, answered whole (stream over HTTP)."""
        return self.call("completions", {"prompt": prompt, **params})

    def chat_completions(self, messages, **params):
        """vLLM's POST /v1/chat/completions body, answered whole (stream over HTTP). The
        messages' and tools' keys reach the chat template in the order given."""
        return self.call("chat_completions", {"messages": list(messages), **params})

    def models(self):
        return self.call("models")

    def weight_checker(self, action, **params):
        return self.call("weight_checker", {"action": action, **params})


def _plain_method(name):
    def method(self, **params):
        return self.call(name, params)

    method.__name__ = name
    method.__doc__ = f"The worker's `{name}`: keyword arguments are its params."
    return method


# Every control method without a wrapper above is a method taking its params as keywords:
# client.pause(mode="keep"), client.get_world_size(include_dp=False), client.health().
for _name in CONTROL_METHODS:
    if not hasattr(HotswapWeightSyncClient, _name):
        setattr(HotswapWeightSyncClient, _name, _plain_method(_name))
