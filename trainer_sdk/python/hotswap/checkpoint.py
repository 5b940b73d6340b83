"""load_checkpoint: the tensors of a Hugging Face safetensors checkpoint directory, read with
torch alone (no `safetensors` package needed), in the files' own order."""

import json
import os
import struct

import torch

_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
           "F64": torch.float64, "I64": torch.int64, "I32": torch.int32, "I16": torch.int16,
           "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool}


def read_safetensors(path):
    """[(name, tensor)] of one .safetensors file, in the order of its data."""
    with open(path, "rb") as f:
        (header_size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_size))
        data = bytearray(f.read())
    header.pop("__metadata__", None)
    tensors = []
    for name, entry in sorted(header.items(), key=lambda item: item[1]["data_offsets"][0]):
        if entry["dtype"] not in _DTYPES:
            raise ValueError(f"{path}: tensor '{name}' has dtype {entry['dtype']}, which "
                             "load_checkpoint does not read")
        begin, end = entry["data_offsets"]
        dtype = _DTYPES[entry["dtype"]]
        item_size = torch.empty((), dtype=dtype).element_size()  # torch 1.13: no dtype.itemsize
        if end == begin:
            tensors.append((name, torch.empty(entry["shape"], dtype=dtype)))
            continue
        flat = torch.frombuffer(data, dtype=dtype, offset=begin, count=(end - begin) // item_size)
        tensors.append((name, flat.reshape(entry["shape"]).clone()))
    return tensors


def load_checkpoint(directory):
    """{name: tensor} of every .safetensors file in `directory`, in file then data order."""
    files = sorted(f for f in os.listdir(directory) if f.endswith(".safetensors"))
    if not files:
        raise ValueError(f"{directory} holds no .safetensors file")
    tensors = {}
    for file in files:
        tensors.update(read_safetensors(os.path.join(directory, file)))
    return tensors
