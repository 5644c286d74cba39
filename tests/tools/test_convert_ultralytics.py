#!/usr/bin/env python3
"""Test of tools/convert_ultralytics.py on synthetic checkpoints pickled the way ultralytics pickles its models.

A YOLO26n of the independent reference (tools/reference/yolo26_model.py, ultralytics' state_dict names) is dressed in
classes of ultralytics' module paths (ultralytics.nn.tasks.DetectionModel holding an nn.Sequential of
ultralytics.nn.modules.conv.Conv, ...block.C3k2, ...head.Detect, ...), halved as ultralytics' EMA is, and saved with
torch.save inside a checkpoint dict ("model" or "ema", "train_args", "train_metrics", "version", ...). The converter
then runs in a fresh interpreter where no ultralytics package exists; its output must hold the state_dict unchanged
(names, shapes, dtypes, bits: those of yolo26n_state_dict.tsv) and the metadata. A pickle that would call os.system
must run nothing. The committed .pt fixtures (tools/reference/make_torch_checkpoint_fixtures.py, which the engine reads
without PyTorch) convert to what the C++ tests expect of them. Exit code 77 (a CTest skip) when PyTorch is missing.
"""
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import types

try:
    import torch
except ImportError:
    print("skipped: PyTorch is not installed (Debian: python3-torch)")
    sys.exit(77)

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "tools" / "reference"))
import safetensors_io  # noqa: E402
import yolo26_model as ref  # noqa: E402

CONVERTER = ROOT / "tools" / "convert_ultralytics.py"
SHAPES = json.dumps(["circle", "square", "triangle", "star", "cross", "ring"])
TSV = ROOT / "tests" / "fixtures" / "yolo26n_state_dict.tsv"

ULTRALYTICS_CLASSES = {
    "ultralytics.nn.tasks": ["DetectionModel"],
    "ultralytics.nn.modules.conv": ["Conv", "DWConv", "Concat"],
    "ultralytics.nn.modules.block": ["Bottleneck", "C3k", "C3k2", "SPPF", "C2PSA", "PSABlock", "Attention"],
    "ultralytics.nn.modules.head": ["Detect"],
}


def install_fake_ultralytics():
    """Modules named as ultralytics' with empty classes of its names, importable (what pickle checks when saving)."""
    classes = {}
    for module, names in ULTRALYTICS_CLASSES.items():
        parts = module.split(".")
        for i in range(1, len(parts) + 1):
            sys.modules.setdefault(".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
        for name in names:
            cls = type(name, (torch.nn.Module,), {"__module__": module, "__qualname__": name})
            setattr(sys.modules[module], name, cls)
            classes[name] = cls
    utils = sys.modules.setdefault("ultralytics.utils", types.ModuleType("ultralytics.utils"))
    utils.IterableSimpleNamespace = type("IterableSimpleNamespace", (types.SimpleNamespace,),
                                         {"__module__": "ultralytics.utils", "__qualname__": "IterableSimpleNamespace"})
    return classes


def ultralytics_model(classes):
    """The reference YOLO26n with ultralytics' classes and attributes, halved."""
    torch.manual_seed(0)
    model = ref.YOLO26("n", 80)
    with torch.no_grad():  # nothing at its initial value: every tensor must be copied, not re-created
        for t in model.state_dict().values():
            if t.is_floating_point():
                t.uniform_(-2, 2)
            else:
                t.fill_(123)
    for i, layer in enumerate(model.model):
        layer.i, layer.f, layer.np = i, -1, sum(p.numel() for p in layer.parameters())
        layer.type = f"{type(layer).__module__}.{type(layer).__name__}"
    for m in list(model.modules()):
        name = type(m).__name__
        if name in classes:
            m.__class__ = classes[name]
        elif isinstance(m, ref.HeadConv):
            m.__class__ = torch.nn.Conv2d
        elif isinstance(m, ref.Upsample):
            m.__class__ = torch.nn.Upsample
            m.size, m.scale_factor, m.mode, m.align_corners, m.recompute_scale_factor = None, 2.0, "nearest", None, None
        elif isinstance(m, torch.nn.Identity):  # the Concat layers
            m.__class__ = classes["Concat"]
            m.d = 1
    model.model.__class__ = torch.nn.Sequential
    model.__class__ = classes["DetectionModel"]
    model.yaml = {"nc": 80, "scale": "n", "end2end": True, "yaml_file": "yolo26n.yaml", "ch": 3,
                  "scales": {"n": [0.5, 0.25, 1024]}, "backbone": [[-1, 1, "Conv", [64, 3, 2]]], "head": []}
    model.names = {i: f"thing{i}" for i in range(80)}
    model.stride = torch.tensor([8.0, 16.0, 32.0])
    model.args = {"imgsz": 640, "task": "detect"}
    model.task, model.end2end = "detect", True
    return model.half()


def checkpoint(model, as_ema):
    train_args = {"imgsz": 640, "epochs": 100, "model": "yolo26n.yaml", "save_dir": pathlib.Path("runs/detect/train")}
    ckpt = {"date": "2026-01-01T00:00:00", "version": "8.4.0", "license": "AGPL-3.0", "docs": "https://docs.ultralytics.com",
            "epoch": -1 if not as_ema else 10, "best_fitness": None, "model": None if as_ema else model,
            "ema": model if as_ema else None, "updates": 1000 if as_ema else None, "optimizer": None,
            "train_args": train_args, "train_metrics": {"metrics/mAP50(B)": 0.5}, "train_results": None}
    try:
        import numpy
        ckpt["train_metrics"]["fitness"] = numpy.float64(0.25)
    except ImportError:
        pass
    return ckpt


class Evil:
    """Unpickled by a plain pickle, this would run a shell command."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def run_converter(src, dst):
    return subprocess.run([sys.executable, str(CONVERTER), str(src), str(dst)], capture_output=True, text=True,
                          cwd="/")


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def main():
    classes = install_fake_ultralytics()
    model = ultralytics_model(classes)
    want = {k: v.clone() for k, v in model.state_dict().items()}
    tsv = {}
    for line in TSV.read_text().splitlines():
        if line and not line.startswith("#"):
            key, shape, _ = line.split("\t")
            tsv[key] = [] if shape == "scalar" else [int(s) for s in shape.split("x")]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        for as_ema in (False, True):
            src, dst = tmp / f"ckpt_{as_ema}.pt", tmp / f"out_{as_ema}.safetensors"
            torch.save(checkpoint(model, as_ema), src)
            r = run_converter(src, dst)
            expect(r.returncode == 0, f"converter failed: {r.stdout}{r.stderr}")
            expect("YOLO26n, 80 classes, 708 tensors" in r.stdout, r.stdout)
            tensors, metadata = safetensors_io.read(dst)
            expect(set(tensors) == set(tsv), f"keys differ from the TSV: {sorted(set(tensors) ^ set(tsv))[:10]}")
            for key, t in tensors.items():
                expect(list(t.shape) == tsv[key], f"{key}: shape {list(t.shape)}, TSV {tsv[key]}")
                expect(t.dtype == want[key].dtype, f"{key}: dtype {t.dtype}, checkpoint {want[key].dtype}")
                expect(torch.equal(t.reshape(want[key].shape), want[key]), f"{key}: values changed")
            expect(tensors["model.0.conv.weight"].dtype == torch.float16, "ultralytics' f16 is kept")
            expect(tensors["model.0.bn.num_batches_tracked"].dtype == torch.int64, "num_batches_tracked stays i64")
            expect(metadata["format"] == "full" and metadata["scale"] == "n" and metadata["nc"] == "80", metadata)
            expect(json.loads(metadata["names"]) == [f"thing{i}" for i in range(80)], metadata["names"])
            expect(json.loads(metadata["imgsz"]) == 640 and json.loads(metadata["stride"]) == [8, 16, 32], metadata)
            expect(metadata["ultralytics_version"] == "8.4.0", metadata)

        # Unpickling runs nothing of the pickle's: os.system becomes a stand-in.
        marker = tmp / "marker"
        evil = tmp / "evil.pt"
        torch.save({"model": None, "ema": None, "train_args": Evil(marker)}, evil)
        r = run_converter(evil, tmp / "evil.safetensors")
        expect(r.returncode != 0 and "holds a model" in r.stderr, f"{r.returncode}: {r.stdout}{r.stderr}")
        expect(not marker.exists(), "the converter ran code from the pickle")

        # The committed .pt fixtures (tools/reference/make_torch_checkpoint_fixtures.py), which the engine reads
        # without PyTorch (tests/models/yolo/test_ultralytics_checkpoint.cpp): the converter makes of them exactly
        # what those tests expect, yolo26n_random.safetensors' tensors for the stripped YOLO26n.
        fixtures = ROOT / "tests" / "fixtures"
        expected = {
            "yolo26n_random.pt": ("full", "80", json.dumps([f"class{i}" for i in range(80)]), "640"),
            "ultralytics_train_tiny.pt": ("full", "6", SHAPES, "320"),
            "ultralytics_train_tiny_p5.pt": ("full", "6", SHAPES, "320"),
            "ultralytics_fused_tiny.pt": ("fused", "6", SHAPES, "[256, 320]"),
        }
        for name, (fmt, nc, names, imgsz) in expected.items():
            out = tmp / (name + ".safetensors")
            r = run_converter(fixtures / name, out)
            expect(r.returncode == 0, f"converter failed on {name}: {r.stdout}{r.stderr}")
            tensors, metadata = safetensors_io.read(out)
            got = (metadata["format"], metadata["nc"], metadata["names"], metadata["imgsz"])
            expect(got == (fmt, nc, names, imgsz), f"{name}: {got}")
            expect(metadata["scale"] == "n" and metadata["stride"] == "[8, 16, 32]", f"{name}: {metadata}")
        want_tensors, _ = safetensors_io.read(fixtures / "yolo26n_random.safetensors")
        got_tensors, _ = safetensors_io.read(tmp / "yolo26n_random.pt.safetensors")
        expect(set(got_tensors) == set(want_tensors), "yolo26n_random.pt: other tensors than the safetensors fixture")
        for key, t in want_tensors.items():
            expect(got_tensors[key].dtype == t.dtype and torch.equal(got_tensors[key], t), f"yolo26n_random.pt: {key}")

        # Not a checkpoint: a clear error naming the file.
        junk = tmp / "junk.pt"
        junk.write_bytes(b"not a checkpoint")
        r = run_converter(junk, tmp / "junk.safetensors")
        expect(r.returncode != 0 and "junk.pt" in r.stderr, f"{r.returncode}: {r.stderr}")
    print("convert_ultralytics: all checks passed")


if __name__ == "__main__":
    main()
