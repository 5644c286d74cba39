"""Safetensors without numpy: writing floating tensors as F32, int32/int64 as I32, bool/uint8 as U8; reading F32, I32
and U8 back as torch tensors."""
import json
import struct

import torch

_FORMATS = {"F32": torch.float32, "I32": torch.int32, "U8": torch.uint8}


def _encoded(t):
    """(safetensors dtype, little-endian bytes) of a tensor."""
    if t.is_floating_point():
        kind = "F32"
    elif t.dtype in (torch.int32, torch.int64):
        kind = "I32"
    elif t.dtype in (torch.bool, torch.uint8):
        kind = "U8"
    else:
        raise ValueError(f"no safetensors encoding for {t.dtype}")
    dtype = _FORMATS[kind]
    flat = t.detach().to("cpu", dtype).contiguous().reshape(-1)
    data = bytearray(flat.numel() * flat.element_size())
    if flat.numel():
        torch.frombuffer(data, dtype=dtype).copy_(flat)  # the host's byte order: little-endian on every target
    return kind, data


def write_safetensors(path, tensors, metadata):
    """tensors: name -> torch tensor (any device); metadata: str -> str. Data in name order, header padded to 8."""
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name in sorted(tensors):
        kind, data = _encoded(tensors[name])
        header[name] = {"dtype": kind, "shape": list(tensors[name].shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def read_safetensors(path):
    """(tensors: name -> torch tensor on the CPU, metadata: str -> str) of an F32/I32/U8 safetensors file."""
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
        data = f.read()
    metadata = header.pop("__metadata__", {})
    tensors = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        dtype = _FORMATS[entry["dtype"]]
        flat = torch.frombuffer(bytearray(data[begin:end]), dtype=dtype) if end > begin else torch.empty(0, dtype=dtype)
        tensors[name] = flat.reshape(entry["shape"])
    return tensors, metadata
