"""The fixtures' tensor encoding on top of tools/safetensors_io.py: floating tensors stored as F32, int32/int64 as
I32, bool/uint8 as U8 (the dtypes the C++ tests read), any device."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import safetensors_io  # noqa: E402


def _canonical(t):
    t = t.detach().to("cpu")
    if t.is_floating_point():
        return t.to(torch.float32)
    if t.dtype in (torch.int32, torch.int64):
        return t.to(torch.int32)
    if t.dtype in (torch.bool, torch.uint8):
        return t.to(torch.uint8)
    raise ValueError(f"no safetensors encoding for {t.dtype}")


def write_safetensors(path, tensors, metadata):
    """tensors: name -> torch tensor (any device); metadata: str -> str."""
    safetensors_io.write(path, {name: _canonical(t) for name, t in tensors.items()}, metadata)


def read_safetensors(path):
    """(tensors: name -> torch tensor on the CPU, metadata: str -> str)."""
    return safetensors_io.read(path)
