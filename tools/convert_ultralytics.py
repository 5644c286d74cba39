#!/usr/bin/env python3
"""Converts an ultralytics YOLO26 checkpoint (.pt) to a safetensors file the vision-cpp engine loads by name.

    python3 tools/convert_ultralytics.py yolo26n.pt yolo26n.safetensors

Needs PyTorch only, not the ultralytics package: the checkpoint is unpickled with stand-in classes for every
ultralytics class it names (and for any other class outside a short list of safe modules, so unpickling runs no code
of theirs). The model is the checkpoint's "ema" when it has one, else its "model"; its state_dict is written unchanged
(names, shapes and dtypes: ultralytics stores f16), with the metadata the engine reads: format ("full", or "fused"
for a model saved after fuse()), scale, nc, names (a JSON list), imgsz, stride, and where it came from.

The checkpoint is read as the zip archive torch.save writes (data.pkl and data/<storage key>), so that no version of
torch.load decides which classes it imports.
"""
import _compat_pickle
import argparse
import collections
import io
import json
import os
import pickle
import sys
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

try:
    import torch
except ImportError:  # pragma: no cover - reported to the user
    sys.exit("convert_ultralytics: PyTorch is needed (Debian: apt-get install python3-torch)")

# Modules whose classes and functions a checkpoint may use as they are; every other global becomes a stand-in.
SAFE_MODULES = ("torch", "collections", "numpy", "pathlib", "datetime", "copyreg", "_codecs")
SAFE_BUILTINS = {"set", "frozenset", "slice", "range", "complex", "bytearray", "bytes", "dict", "list", "tuple",
                 "int", "float", "bool", "str", "object"}


class StandIn(torch.nn.Module):
    """Whatever ultralytics class the pickle names: a Module holding the pickled attributes, so state_dict() works."""

    def __init__(self, *args, **kwargs):
        super().__init__()
        self.__dict__["_stand_in_args"] = (args, kwargs)

    def __setstate__(self, state):
        if isinstance(state, tuple) and len(state) == 2:  # (__dict__, __slots__ values)
            state = {**(state[0] or {}), **(state[1] or {})}
        torch.nn.Module.__setstate__(self, dict(state))

    # Subclasses of dict or list pickle their items through these.
    def __setitem__(self, key, value):
        self.__dict__.setdefault("_stand_in_items", {})[key] = value

    def append(self, value):
        self.__dict__.setdefault("_stand_in_list", []).append(value)

    def extend(self, values):
        for v in values:
            self.append(v)

    def get(self, key, default=None):  # dict-like access for namespaces (model.args)
        return self.__dict__.get(key, self.__dict__.get("_stand_in_items", {}).get(key, default))


_stand_ins = {}


def stand_in(module, name):
    key = (module, name)
    if key not in _stand_ins:
        _stand_ins[key] = type(name, (StandIn,), {"__module__": module, "__qualname__": name})
    return _stand_ins[key]


def rebuild_tensor(storage, offset, size, stride, requires_grad=False, *unused):
    """torch._utils._rebuild_tensor_v2 on our storages (flat tensors of one dtype)."""
    t = storage.as_strided(size, stride, offset)
    t.requires_grad_(requires_grad)
    return t


class Unpickler(pickle.Unpickler):
    """Unpickles the data.pkl of a checkpoint's zip archive: stand-ins for foreign classes, storages read from the
    archive as flat tensors (public PyTorch API only, whatever the PyTorch version)."""

    def __init__(self, file, archive, prefix):
        super().__init__(file, encoding="utf-8")
        self.archive, self.prefix, self.storages = archive, prefix, {}

    def find_class(self, module, name):
        # Protocol 2 pickles name Python 2's modules ("__builtin__", "copy_reg"): map them as pickle itself does.
        if (module, name) in _compat_pickle.NAME_MAPPING:
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return rebuild_tensor
        if module == "builtins" and name in SAFE_BUILTINS:
            return super().find_class(module, name)
        if module.split(".")[0] in SAFE_MODULES:
            return super().find_class(module, name)
        return stand_in(module, name)

    def persistent_load(self, saved_id):
        kind, storage_type, key, _location, _numel = saved_id
        if kind != "storage":
            raise pickle.UnpicklingError(f"unknown persistent id {kind!r}")
        if key not in self.storages:
            dtype = getattr(storage_type, "dtype", torch.uint8)  # torch.UntypedStorage: bytes
            data = bytearray(self.archive.read(f"{self.prefix}/data/{key}"))
            self.storages[key] = torch.frombuffer(data, dtype=dtype) if data else torch.empty(0, dtype=dtype)
        return self.storages[key]


def load_checkpoint(path):
    """The object a torch.save zip archive holds (what torch.load returns), without running code of the pickle's."""
    try:
        with zipfile.ZipFile(path) as archive:
            pickles = [n for n in archive.namelist() if n.endswith("/data.pkl")]
            if len(pickles) != 1:
                raise pickle.UnpicklingError("no data.pkl in the archive")
            prefix = pickles[0][: -len("/data.pkl")]
            with archive.open(pickles[0]) as f:
                return Unpickler(io.BytesIO(f.read()), archive, prefix).load()
    except (zipfile.BadZipFile, pickle.UnpicklingError, KeyError, EOFError, OSError, ValueError, TypeError) as e:
        sys.exit(f"convert_ultralytics: {path}: cannot read it as a PyTorch checkpoint (a torch.save zip archive): "
                 f"{e}")


def attribute(obj, name, default=None):
    if isinstance(obj, dict):
        return obj.get(name, default)
    if isinstance(obj, StandIn):
        return obj.get(name, default)
    return getattr(obj, name, default)


def model_of(ckpt, path):
    if isinstance(ckpt, torch.nn.Module):
        return ckpt
    if not isinstance(ckpt, dict):
        sys.exit(f"convert_ultralytics: {path}: a checkpoint is a dict with 'model' or 'ema', got {type(ckpt).__name__}")
    model = ckpt.get("ema") if ckpt.get("ema") is not None else ckpt.get("model")
    if not isinstance(model, torch.nn.Module):
        sys.exit(f"convert_ultralytics: {path}: neither 'ema' nor 'model' holds a model (keys: {sorted(ckpt)})")
    return model


def scale_of(model, path):
    yaml = attribute(model, "yaml") or {}
    scale = yaml.get("scale") if isinstance(yaml, dict) else None
    if not scale and isinstance(yaml, dict):  # "yolo26n.yaml" names its scale
        stem = os.path.splitext(os.path.basename(str(yaml.get("yaml_file", ""))))[0]
        if stem.startswith("yolo26") and len(stem) == 7:
            scale = stem[-1]
    if scale not in ("n", "s", "m", "l", "x"):
        sys.exit(f"convert_ultralytics: {path}: cannot tell the YOLO26 scale from the model's yaml ({scale!r})")
    return scale


def names_of(model, nc, path):
    names = attribute(model, "names")
    if names is None:
        return [f"class{i}" for i in range(nc)]
    if isinstance(names, dict):
        names = [names[i] for i in sorted(names)]
    names = [str(n) for n in names]
    if len(names) != nc:
        sys.exit(f"convert_ultralytics: {path}: {len(names)} class names for {nc} classes")
    return names


def convert(src, dst):
    ckpt = load_checkpoint(src)
    model = model_of(ckpt, src)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    if not state:
        sys.exit(f"convert_ultralytics: {src}: the model has no tensors")
    class_bias = "model.23.one2one_cv3.0.2.bias"
    if class_bias not in state:
        sys.exit(f"convert_ultralytics: {src}: no YOLO26 end-to-end Detect head ({class_bias}) in the model")
    nc = state[class_bias].numel()
    args = (ckpt.get("train_args") if isinstance(ckpt, dict) else None) or attribute(model, "args") or {}
    imgsz = attribute(args, "imgsz", 640)
    stride = attribute(model, "stride")
    stride = [int(s) for s in (stride.tolist() if torch.is_tensor(stride) else stride or [8, 16, 32])]
    metadata = {
        "format": "full" if any(".bn." in k for k in state) else "fused",
        "scale": scale_of(model, src),
        "nc": str(nc),
        "names": json.dumps(names_of(model, nc, src)),
        "imgsz": json.dumps(imgsz if isinstance(imgsz, int) else [int(s) for s in imgsz]),
        "stride": json.dumps(stride),
        "source": os.path.basename(src),
        "converter": "tools/convert_ultralytics.py",
    }
    if isinstance(ckpt, dict) and ckpt.get("version"):
        metadata["ultralytics_version"] = str(ckpt["version"])
    safetensors_io.write(dst, state, metadata)
    return state, metadata


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", help="an ultralytics YOLO26 .pt checkpoint")
    parser.add_argument("output", help="the safetensors file to write")
    a = parser.parse_args()
    state, metadata = convert(a.checkpoint, a.output)
    counts = collections.Counter(str(v.dtype).replace("torch.", "") for v in state.values())
    print(f"wrote {a.output}: YOLO26{metadata['scale']}, {metadata['nc']} classes, {len(state)} tensors "
          f"({', '.join(f'{n} {d}' for d, n in sorted(counts.items()))}), format {metadata['format']}")


if __name__ == "__main__":
    main()
