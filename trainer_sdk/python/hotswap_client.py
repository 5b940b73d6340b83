"""The pure-Python client, importable by its former module name. New code: `import hotswap`
(hotswap.HotswapWeightSyncClient), from trainer_sdk/python on PYTHONPATH or an installed
hotswap package."""

from hotswap.client import CONTROL_METHODS, HotswapError, HotswapWeightSyncClient  # noqa: F401
