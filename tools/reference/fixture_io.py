"""Writing safetensors fixtures without numpy: floating tensors as F32, int32/int64 as I32, bool/uint8 as U8."""
import json
import struct

import torch

_FORMATS = {"F32": (torch.float32, "f"), "I32": (torch.int32, "i"), "U8": (torch.uint8, "B")}


def _encoded(t):
    if t.is_floating_point():
        kind = "F32"
    elif t.dtype in (torch.int32, torch.int64):
        kind = "I32"
    elif t.dtype in (torch.bool, torch.uint8):
        kind = "U8"
    else:
        raise ValueError(f"no safetensors encoding for {t.dtype}")
    dtype, code = _FORMATS[kind]
    values = t.detach().to("cpu", dtype).contiguous().reshape(-1).tolist()
    return kind, struct.pack(f"<{len(values)}{code}", *values)


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
