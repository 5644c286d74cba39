#!/usr/bin/env python3
"""Fixtures for the PyTorch checkpoint reader (core/torch_checkpoint.h, models/yolo/ultralytics_checkpoint.h):
ultralytics checkpoints written by real PyTorch (torch.save), with classes of ultralytics' module paths standing in for
ultralytics' own (the package is not needed: its classes are empty torch.nn.Module subclasses of the same names, so
the pickles name the same globals and hold the same attribute dicts as ultralytics' do).

Writes four files:

  yolo26n_random.pt             the stripped form (what strip_optimizer leaves, as the released yolo26n.pt): model =
                                the f16 DetectionModel, ema / optimizer / updates / scaler None, epoch -1, train_args,
                                train_metrics, train_results, date, version, license, docs, git; saved to a path, so
                                its zip folder is the file's stem. The model is the reference YOLO26n
                                (yolo26_model.py) dressed in ultralytics' classes (Conv with its shared SiLU act,
                                C3k2, SPPF, C2PSA, PSABlock, Attention, Detect, nn.Sequential, nn.Upsample, Concat)
                                holding exactly the tensors of yolo26n_random.safetensors: so that file is what
                                tools/convert_ultralytics.py makes of this one (tests/tools/test_convert_ultralytics.py
                                checks it), and the engine must read the same tensors from both.
  ultralytics_train_tiny.pt     the training form (trainer.save_model), tiny: model None, ema = a small f16
                                DetectionModel (model.0 a Conv with BatchNorm, model.23 a Detect with only
                                one2one_cv3.0.2, nc 6) whose args is an IterableSimpleNamespace, an SGD optimizer
                                state dict (momentum buffers f16), train_args (imgsz 320, a pathlib path), train_metrics
                                (a numpy float64), best_fitness (a numpy float32: -loss when val=False),
                                train_results, date, version, git; saved to a buffer (zip folder "archive"). An "extra"
                                entry holds what the unpickler must also read: torch.Size, a dtype, a set, a frozenset,
                                bytes, a numpy array, a transposed (non-contiguous) view, a tensor at an offset of a
                                shared storage, an empty tensor, a bool, a bfloat16 and a float64 tensor.
  ultralytics_train_tiny_p5.pt  the same pickled with protocol 5 (FRAME, MEMOIZE, STACK_GLOBAL, SHORT_BINUNICODE,
                                EMPTY_SET/ADDITEMS, FROZENSET, BINBYTES, …) instead of PyTorch's default 2, less the
                                numpy array (protocol 5 pickles it through numpy.core.numeric._frombuffer, which the
                                reader refuses: ultralytics pickles with protocol 2).
  ultralytics_fused_tiny.pt     a small model saved after ultralytics' fuse(): its Conv has no bn, a conv with a bias,
                                and forward = the bound method forward_fuse (pickled as getattr(conv, "forward_fuse")).

tests/fixtures/torch2/ holds the three tiny files as PyTorch 2.11 with NumPy 2.5 writes them (this script run on the GPU
host: its archives add .format_version, .storage_alignment, byteorder and .data/serialization_id, and NumPy 2 names its
rebuilder numpy._core); the fuzz corpus has the two of protocol 2 as *_torch2.pt.

With a second argument, also the seed corpus of the fuzz target fuzz_torch_checkpoint: the two tiny archives, and
data.pkl-only seeds (the tiny checkpoints pickled again with every storage renamed "s<Type>Storage" of 4096 bytes, the
storages the target gives a bare pickle, so that mutations reach past the first tensor without a zip CRC in the way).

    /usr/bin/python3 tools/reference/make_torch_checkpoint_fixtures.py tests/fixtures \
        tests/fuzz/corpus/fuzz_torch_checkpoint
"""
import io
import pickle
import os
import pathlib
import sys
import types

import numpy
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import safetensors_io  # noqa: E402
import yolo26_model as ref  # noqa: E402

ULTRALYTICS_CLASSES = {
    "ultralytics.nn.tasks": ["DetectionModel"],
    "ultralytics.nn.modules.conv": ["Conv", "DWConv", "Concat"],
    "ultralytics.nn.modules.block": ["Bottleneck", "C3k", "C3k2", "SPPF", "C2PSA", "PSABlock", "Attention"],
    "ultralytics.nn.modules.head": ["Detect"],
}
DATE = "2026-01-02T03:04:05.678901"
VERSION = "8.4.0"


def forward_fuse(self, x):
    return self.act(self.conv(x))


def install_ultralytics_stand_ins():
    """Importable modules of ultralytics' names holding empty classes of its names (what pickle checks when saving)."""
    classes = {}
    for module, names in ULTRALYTICS_CLASSES.items():
        parts = module.split(".")
        for i in range(1, len(parts) + 1):
            sys.modules.setdefault(".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
        for name in names:
            attrs = {"__module__": module, "__qualname__": name}
            if name in ("Conv", "DWConv"):
                attrs["forward_fuse"] = forward_fuse
            cls = type(name, (torch.nn.Module,), attrs)
            setattr(sys.modules[module], name, cls)
            classes[name] = cls
    classes["Conv"].default_act = torch.nn.SiLU()  # as ultralytics': one SiLU shared by every Conv
    utils = sys.modules.setdefault("ultralytics.utils", types.ModuleType("ultralytics.utils"))
    utils.IterableSimpleNamespace = type("IterableSimpleNamespace", (types.SimpleNamespace,),
                                         {"__module__": "ultralytics.utils", "__qualname__": "IterableSimpleNamespace"})
    return classes, utils.IterableSimpleNamespace


def dress(model, classes):
    """The reference modules as ultralytics' classes, with the attributes ultralytics gives them."""
    for i, layer in enumerate(model.model):
        layer.i, layer.f = i, -1
        layer.type = f"ultralytics.nn.modules.{type(layer).__name__}"
        layer.np = sum(p.numel() for p in layer.parameters())
    for m in list(model.modules()):
        name = type(m).__name__
        if name in ("Conv", "DWConv"):
            m.act = classes["Conv"].default_act if m.use_act else torch.nn.Identity()
            del m.use_act
        if name in classes:
            m.__class__ = classes[name]
        elif isinstance(m, ref.HeadConv):
            m.__class__ = torch.nn.Conv2d
        elif isinstance(m, ref.Upsample):
            m.__class__ = torch.nn.Upsample
            m.name, m.size, m.scale_factor, m.mode = None, None, 2.0, "nearest"
            m.align_corners, m.recompute_scale_factor = None, None
    for i in (12, 15, 18, 21):  # the Concat layers (identities in the reference)
        model.model[i].__class__ = classes["Concat"]
        model.model[i].d = 1
    model.model.__class__ = torch.nn.Sequential
    detect = model.model[23]
    detect.nl, detect.reg_max, detect.end2end, detect.max_det, detect.legacy = 3, 1, True, 300, False
    detect.shape, detect.dynamic, detect.export, detect.format, detect.xyxy = None, False, False, None, False
    detect.anchors, detect.strides = torch.empty(0), torch.empty(0)  # plain attributes, not in the state_dict
    detect.stride = torch.tensor([8.0, 16.0, 32.0])
    model.__class__ = classes["DetectionModel"]
    model.save = [4, 6, 10, 13, 16, 19, 22]
    model.stride = detect.stride
    model.inplace, model.end2end, model.task = True, True, "detect"
    return model


def stripped_checkpoint(model, train_args):
    return {"date": DATE, "version": VERSION, "license": "AGPL-3.0 License (https://ultralytics.com/license)",
            "docs": "https://docs.ultralytics.com", "epoch": -1, "best_fitness": None, "model": model, "ema": None,
            "updates": None, "optimizer": None, "scaler": None, "train_args": train_args,
            "train_metrics": {"metrics/precision(B)": 0.61, "metrics/mAP50-95(B)": 0.4, "fitness": 0.42},
            "train_results": {"epoch": [1.0, 2.0], "metrics/mAP50-95(B)": [0.3, 0.4]},
            "git": {"root": "/src/ultralytics", "branch": "main", "commit": "0" * 40, "origin": None}}


def yolo26n_random(classes, fixtures):
    """The stripped checkpoint of the reference YOLO26n holding yolo26n_random.safetensors' tensors."""
    tensors, metadata = safetensors_io.read(os.path.join(fixtures, "yolo26n_random.safetensors"))
    model = ref.YOLO26("n", 80).half()
    state = model.state_dict()
    assert set(state) == set(tensors), sorted(set(state) ^ set(tensors))[:10]
    with torch.no_grad():
        for key, t in state.items():
            assert t.dtype == tensors[key].dtype, key
            t.copy_(tensors[key].reshape(t.shape))
    model = dress(model, classes)
    model.yaml = {"nc": 80, "scale": "n", "end2end": True, "yaml_file": "yolo26n.yaml", "ch": 3,
                  "scales": {"n": [0.5, 0.25, 1024]}, "backbone": [[-1, 1, "Conv", [64, 3, 2]]], "head": []}
    model.names = {i: f"class{i}" for i in range(80)}
    model.args = {"imgsz": 640, "task": "detect", "model": "yolo26n.yaml", "data": "coco.yaml"}
    for p in model.parameters():
        p.requires_grad = False
    train_args = {"task": "detect", "mode": "train", "model": "yolo26n.yaml", "data": "coco.yaml", "epochs": 100,
                  "imgsz": 640, "batch": 16, "save_dir": "runs/detect/train", "optimizer": "auto", "lr0": 0.01}
    path = os.path.join(fixtures, "yolo26n_random.pt")
    torch.save(stripped_checkpoint(model, train_args), path)
    assert metadata["nc"] == "80"
    return path


def tiny_model(classes, namespace, nc, fused):
    """A DetectionModel with model.0 (a Conv) and model.23 (a Detect with only one2one_cv3.0.2), f16."""
    g = torch.Generator().manual_seed(26)
    conv = classes["Conv"]()
    conv.conv = torch.nn.Conv2d(3, 16, 3, 2, 1, bias=fused)
    if not fused:
        conv.bn = torch.nn.BatchNorm2d(16, eps=1e-3, momentum=0.03)
        conv.bn.running_mean.copy_(torch.randn(16, generator=g))
        conv.bn.running_var.copy_(torch.rand(16, generator=g) + 0.5)
        conv.bn.num_batches_tracked.fill_(1234)
    conv.act = classes["Conv"].default_act
    if fused:
        conv.forward = conv.forward_fuse  # what ultralytics' fuse() does
    layers = [conv] + [torch.nn.Identity() for _ in range(22)]
    detect = classes["Detect"]()
    detect.nc, detect.nl, detect.end2end = nc, 3, True
    head = torch.nn.Sequential(torch.nn.Identity(), torch.nn.Identity(), torch.nn.Conv2d(16, nc, 1))
    detect.one2one_cv3 = torch.nn.ModuleList([head])
    detect.stride = torch.tensor([8.0, 16.0, 32.0])
    model = classes["DetectionModel"]()
    model.model = torch.nn.Sequential(*layers, detect)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    model.yaml = {"nc": nc, "scale": "n", "yaml_file": "yolo26n.yaml"}
    model.names = {0: "circle", 1: "square", 2: "triangle", 3: "star", 4: "cross", 5: "ring"}
    model.stride = detect.stride
    model.args = namespace(imgsz=320, task="detect", model="yolo26n.yaml")
    model.end2end = True
    return model.half()


def train_checkpoint(classes, namespace, numpy_array=True):
    model = tiny_model(classes, namespace, 6, fused=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.937, nesterov=True)
    for p in model.parameters():
        optimizer.state[p]["momentum_buffer"] = torch.full_like(p, 0.5, dtype=torch.float32).half()
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    shared = torch.arange(10, dtype=torch.int64)
    extra = {"size": torch.Size([2, 3]), "dtype": torch.float16, "set": {1, 2}, "frozen": frozenset({3}),
             "bytes": b"\x00\xffpt", "transposed": base.t(), "shared_a": shared[2:5], "shared_b": shared[7:],
             "empty": torch.empty(0, 4), "mask": torch.tensor([True, False, True]),
             "bf16": torch.tensor([1.5, -2.0], dtype=torch.bfloat16), "f64": torch.tensor([0.25], dtype=torch.float64),
             "int": 2 ** 40, "negative": -(2 ** 62), "float": 0.1, "none": None, "nested": [[1, [2, [3]]], (4,)]}
    if numpy_array:
        extra["ndarray"] = numpy.array([1.5, 2.5])
    return {"epoch": 3, "best_fitness": -numpy.array(1.25, dtype=numpy.float32), "model": None, "ema": model,
            "updates": 345, "optimizer": optimizer.state_dict(),
            "train_args": {"task": "detect", "model": "yolo26n.yaml", "data": "shapes/data.yaml", "epochs": 10,
                           "imgsz": 320, "batch": 8, "save_dir": pathlib.PosixPath("runs/detect/train2"),
                           "project": None, "name": "train2"},
            "train_metrics": {"metrics/mAP50-95(B)": 0.5, "fitness": numpy.float64(0.25)},
            "train_results": {"epoch": [1.0, 2.0, 3.0], "train/box_loss": [2.5, 2.0, 1.5]},
            "date": DATE, "version": VERSION, "license": "AGPL-3.0 License (https://ultralytics.com/license)",
            "docs": "https://docs.ultralytics.com", "git": {"root": None, "branch": None, "commit": None},
            "extra": extra}


class FuzzSeedPickler(pickle.Pickler):
    """torch.save's persistent ids, with every storage named after its type and 4096 bytes long (fuzz_torch_checkpoint
    gives a bare pickle exactly those storages)."""

    def persistent_id(self, obj):
        if isinstance(obj, torch.storage.TypedStorage):
            name = obj.pickle_storage_type()
            return ("storage", getattr(torch, name), f"s{name}", "cpu", 4096 // obj.element_size())
        return None


def fuzz_seeds(classes, namespace, corpus, archives):
    os.makedirs(corpus, exist_ok=True)
    for path in archives:
        pathlib.Path(corpus, os.path.basename(path)).write_bytes(pathlib.Path(path).read_bytes())
    fused = tiny_model(classes, namespace, 6, fused=True)
    for name, obj, protocol in (("train_p2.pkl", train_checkpoint(classes, namespace), 2),
                                ("train_p5.pkl", train_checkpoint(classes, namespace, numpy_array=False), 5),
                                ("fused_p2.pkl", {"model": fused, "ema": None}, 2)):
        buffer = io.BytesIO()
        FuzzSeedPickler(buffer, protocol=protocol).dump(obj)
        pathlib.Path(corpus, name).write_bytes(buffer.getvalue())
        print(f"wrote {os.path.join(corpus, name)} ({len(buffer.getvalue())} bytes)")


def main():
    fixtures = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures"
    classes, namespace = install_ultralytics_stand_ins()
    written = [yolo26n_random(classes, fixtures)]

    for name, protocol in (("ultralytics_train_tiny.pt", 2), ("ultralytics_train_tiny_p5.pt", 5)):
        buffer = io.BytesIO()  # as trainer.save_model: folder "archive"
        checkpoint = train_checkpoint(classes, namespace, numpy_array=protocol == 2)
        torch.save(checkpoint, buffer, pickle_protocol=protocol)
        path = os.path.join(fixtures, name)
        pathlib.Path(path).write_bytes(buffer.getvalue())
        written.append(path)

    fused = tiny_model(classes, namespace, 6, fused=True)
    fused.args = dict(vars(fused.args))  # strip_optimizer turns the namespace into a dict
    path = os.path.join(fixtures, "ultralytics_fused_tiny.pt")
    torch.save(stripped_checkpoint(fused, {"imgsz": [256, 320], "task": "detect"}), path)
    written.append(path)
    for path in written:
        print(f"wrote {path} ({os.path.getsize(path)} bytes)")
    if len(sys.argv) > 2:
        fuzz_seeds(classes, namespace, sys.argv[2], [p for p in written if "tiny" in p and "p5" not in p])


if __name__ == "__main__":
    main()
