"""What a trainer needs to reach a worker group: its endpoints and its keys.

A GroupConnection is plain data (it pickles into any Ray task or actor), so the driver hands it
to trainer ranks wherever Ray placed them and each builds its own client there.
"""

import dataclasses
import secrets

import zmq

from ..client import DEFAULT_TIMEOUT_S
from ..fan_out_client import HotswapFanOutClient


@dataclasses.dataclass(frozen=True)
class GroupKeys:
    """The secrets one worker group is started with: the workers' CURVE key pair, the one
    client key pair they authorize, and the API key of their HTTP routes. Made fresh for each
    group (never written to the repository or a shared file system). The workers' secret key
    stays with the group and its replicas' actors; clients get client_curve() and api_key
    (a GroupConnection). Secrets never appear in a repr."""

    server_public: str
    server_secret: str = dataclasses.field(repr=False)
    client_public: str
    client_secret: str = dataclasses.field(repr=False)
    api_key: str = dataclasses.field(repr=False)

    @staticmethod
    def generate():
        server_public, server_secret = zmq.curve_keypair()
        client_public, client_secret = zmq.curve_keypair()
        return GroupKeys(server_public.decode(), server_secret.decode(), client_public.decode(),
                         client_secret.decode(), secrets.token_urlsafe(32))

    def client_curve(self):
        """The `curve` argument of hotswap.ZmqWeightSyncClient and HotswapWeightSyncClient."""
        return {"server_public": self.server_public, "public_key": self.client_public,
                "secret_key": self.client_secret}


@dataclasses.dataclass(frozen=True)
class GroupConnection:
    """Every replica's control endpoint (and HTTP base URL, or None), in data-parallel rank
    order, with what reaches them: `curve` (the client's CURVE keys and the workers' public
    key) and `api_key` (for `Authorization: Bearer ...` on the HTTP routes, an OpenAI client's
    api_key). `incarnations` names the worker behind each replica when the connection was made:
    WorkerGroup.replaced(connection) says which replicas are no longer those workers."""

    endpoints: tuple
    http_urls: tuple
    incarnations: tuple
    tensor_parallel_size: int
    curve: dict = dataclasses.field(repr=False)
    api_key: str = dataclasses.field(repr=False)

    def inference_world_size(self):
        """The inference ranks of the group: a transfer group's world_size is this plus its
        broadcasting trainer ranks."""
        return len(self.endpoints) * self.tensor_parallel_size

    def client(self, kind="cpp", timeout=DEFAULT_TIMEOUT_S):
        """The fan-out client over every replica: kind "cpp" is hotswap.FanOutClient (the trainer
        SDK's, needs the extension), "python" hotswap.HotswapFanOutClient (pyzmq only)."""
        if kind == "python":
            return HotswapFanOutClient(self.endpoints, timeout=timeout, curve=self.curve)
        if kind != "cpp":
            raise ValueError(f"client kind must be 'cpp' or 'python', not {kind!r}")
        import hotswap

        return hotswap.FanOutClient(list(self.endpoints), timeout=timeout, curve=self.curve)

    def replica_client(self, replica, kind="python", timeout=DEFAULT_TIMEOUT_S):
        """One replica's client: hotswap.ZmqWeightSyncClient ("cpp") or
        hotswap.HotswapWeightSyncClient ("python")."""
        if kind == "python":
            from ..client import HotswapWeightSyncClient

            return HotswapWeightSyncClient(self.endpoints[replica], timeout=timeout,
                                           curve=self.curve)
        if kind != "cpp":
            raise ValueError(f"client kind must be 'cpp' or 'python', not {kind!r}")
        import hotswap

        return hotswap.ZmqWeightSyncClient(self.endpoints[replica], timeout=timeout,
                                           curve=self.curve)
