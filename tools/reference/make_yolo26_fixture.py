#!/usr/bin/env python3
"""Fixtures for the YOLO26 model tests, from the independent reference yolo26_model.py (written from YOLO26.md).

Writes three files:

  yolo26n_random.safetensors   YOLO26n (nc 80) random weights as a full checkpoint (both heads, BatchNorm unfused,
                               every ultralytics state_dict tensor, metadata scale/nc/names/imgsz/stride/format).
                               Stored as f16 (num_batches_tracked i64): the model computes with exactly these values.
                               Convolutions have PyTorch's default initialisation, BatchNorm γ and β are random, the
                               Detect biases are random around YOLO26's initialisation, and the running statistics are
                               calibrated by training-mode passes over synthetic images (cumulative averages), so eval
                               activations neither explode nor vanish. Shared with the training tests.
  yolo26n_outputs.safetensors  Inputs (u8 RGB, CHW, batch 1) and the reference's outputs for them:
      image_320 [1, 3, 320, 320], image_192x320 [1, 3, 192, 320] (rectangular, H 192, W 320)
      eval.<head>.ltrb / .logits       eval mode (BatchNorm on running statistics), 320×320, heads one2one, one2many:
                                       raw LTRB [1, 4, 2100] and class logits [1, 80, 2100]
      train.<head>.ltrb / .logits      training mode (BatchNorm on batch statistics), 320×320
      rect.one2one.ltrb / .logits      eval mode, 192×320
      e2e.detections [1, 300, 6], e2e.count [1]   end-to-end postprocess of the eval one-to-one head (decoded to
                                       input pixels), conf = metadata e2e_conf
      nms.detections [1, 300, 6], nms.count [1]   NMS of the eval one-to-many head, conf nms_conf, IoU nms_iou
      err.<output> [4] (f32)           the reference's own error against its float64 result: ‖f32 − f64‖/‖f64‖,
                                       max|f32 − f64|, and the same for the emulated f16 inference (NaN where not
                                       computed: f16 in training mode)
  yolo26n_outputs_640.safetensors  The same at 640×640 (8400 anchors), eval mode, from an image drawn by a generator of
                                   its own (seed SEED + 640), so that the files above do not depend on it:
      image_640 [1, 3, 640, 640]
      eval640.<head>.ltrb / .logits    both heads: raw LTRB [1, 4, 8400] and class logits [1, 80, 8400]
      e2e640.detections / .count, nms640.detections / .count, err.eval640.<head>.<part>   as above
      metadata e2e_conf, nms_conf, nms_iou as above
    Every output is the float64 reference rounded to f32, computed from the f16-exact weights and the u8 inputs / 255.
    The rounding (≤ 2⁻²⁴ ≈ 6e-8 relative per element) is below the reference's own f32 errors (≥ 1.4e-7 relative in
    norm, 640×640 the smallest) and the tests add it to their bounds.

    /usr/bin/python3 tools/reference/make_yolo26_fixture.py tests/fixtures
"""
import copy
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import safetensors_io  # noqa: E402
import yolo26_model as y  # noqa: E402

SEED = 2026
NC = 80
E2E_CONF = 0.001
NMS_CONF = 0.25
NMS_IOU = 0.7


def synthetic_images(gen, n, height, width):
    """u8 RGB [n, 3, H, W]: smooth random colour fields, a few flat rectangles and a little noise."""
    low = torch.rand((n, 3, height // 16, width // 16), generator=gen)
    img = torch.nn.functional.interpolate(low, size=(height, width), mode="bilinear", align_corners=False)
    for i in range(n):
        for _ in range(6):
            h, w = (torch.randint(8, height // 2, (2,), generator=gen)).tolist()
            top = int(torch.randint(0, height - h, (1,), generator=gen))
            left = int(torch.randint(0, width - w, (1,), generator=gen))
            img[i, :, top:top + h, left:left + w] = torch.rand((3, 1, 1), generator=gen)
    img = img + 0.04 * torch.randn(img.shape, generator=gen)
    return (img.clamp(0, 1) * 255).round().to(torch.uint8)


def random_model(gen):
    torch.manual_seed(SEED)  # PyTorch's default convolution initialisation
    model = y.YOLO26("n", NC)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.weight.data = torch.rand(m.weight.shape, generator=gen) * 0.6 + 0.3
            m.bias.data = torch.rand(m.bias.shape, generator=gen) - 0.5
    detect = model.model[23]
    detect.bias_init()
    for head in (detect.cv2, detect.one2one_cv2):
        for branch in head:
            branch[-1].bias.data += (torch.rand(4, generator=gen) * 2 - 1) * 0.5
    for head in (detect.cv3, detect.one2one_cv3):
        for branch in head:  # around the initialisation, lifted so that conf filters keep some rows
            branch[-1].bias.data = torch.rand(NC, generator=gen) * 2 - 3.5
    return model


def calibrate(model, gen, passes=6):
    """Running statistics = cumulative averages of batch statistics over training-mode passes."""
    bns = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    with torch.no_grad():
        for _ in range(passes):
            model(synthetic_images(gen, 4, 320, 320).float() / 255)
    for m in bns:
        m.momentum = y.BN_MOMENTUM
    model.eval()


def f16_exact(model):
    """Every floating state tensor rounded to f16 (what the weights file holds)."""
    with torch.no_grad():
        for t in model.state_dict().values():
            if t.is_floating_point():
                t.copy_(t.half().float())


def run(model, images, dtype, train=False, f16=False):
    m = copy.deepcopy(model).to(dtype)  # training mode updates running statistics: work on a copy
    m.train(train)
    y.NUMERICS.f16 = f16
    try:
        with torch.no_grad():
            out = m(images.to(dtype) / 255)
    finally:
        y.NUMERICS.f16 = False
    return {head: {"ltrb": o[0], "logits": o[1]} for head, o in out.items()}


def errors(ref, f32, f16=None):
    def pair(t):
        if t is None:
            return [math.nan, math.nan]
        d = t.double() - ref
        return [(d.norm() / ref.norm()).item(), d.abs().max().item()]
    return torch.tensor(pair(f32) + pair(f16), dtype=torch.float32)


def reference_outputs(model, img, case, train, heads, tensors):
    """tensors[<case>.<head>.ltrb / .logits]: the float64 reference rounded to f32; tensors[err.<...>]: its own f32
    (and, in eval mode, emulated f16) errors. Returns the float64 outputs."""
    ref = run(model, img, torch.float64, train)
    f32 = run(model, img, torch.float32, train)
    f16 = None if train else run(model, img, torch.float32, f16=True)
    for head in heads:
        for part in ("ltrb", "logits"):
            name = f"{case}.{head}.{part}"
            r = ref[head][part]
            tensors[name] = r.float()
            tensors["err." + name] = errors(r, f32[head][part], f16[head][part] if f16 else None)
            e = tensors["err." + name].tolist()
            print(f"{name:27} |ref| {r.norm().item():10.3f}  max {r.abs().max().item():8.3f}  f32 rel {e[0]:.2e} "
                  f"max {e[1]:.2e}  f16 rel {e[2]:.2e} max {e[3]:.2e}")
    return ref


def detections(tensors, ref, e2e, nms, size):
    """The end-to-end postprocess of the float64 one-to-one head and the NMS of the one-to-many head (size × size)."""
    boxes = y.decode(ref["one2one"]["ltrb"], size, size)
    det, count = y.postprocess_e2e(boxes, ref["one2one"]["logits"], 300, E2E_CONF)
    tensors[f"{e2e}.detections"], tensors[f"{e2e}.count"] = det.float(), count
    boxes = y.decode(ref["one2many"]["ltrb"], size, size)
    det, count = y.postprocess_nms(boxes, ref["one2many"]["logits"], 300, NMS_CONF, NMS_IOU)
    tensors[f"{nms}.detections"], tensors[f"{nms}.count"] = det.float(), count
    print(f"{e2e} count {tensors[e2e + '.count'].tolist()}, {nms} count {tensors[nms + '.count'].tolist()}")


def outputs_metadata():
    return {"e2e_conf": str(E2E_CONF), "nms_conf": str(NMS_CONF), "nms_iou": str(NMS_IOU),
            "maker": "tools/reference/make_yolo26_fixture.py", "torch": torch.__version__}


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures"
    torch.set_num_threads(max(torch.get_num_threads(), 1))
    gen = torch.Generator().manual_seed(SEED)
    model = random_model(gen)
    calibrate(model, gen)
    f16_exact(model)

    state = {k: (v.half() if v.is_floating_point() else v) for k, v in model.state_dict().items()}
    metadata = {"scale": "n", "nc": str(NC), "names": json.dumps([f"class{i}" for i in range(NC)]), "imgsz": "640",
                "stride": "[8, 16, 32]", "format": "full", "maker": "tools/reference/make_yolo26_fixture.py",
                "torch": torch.__version__}
    safetensors_io.write(os.path.join(out_dir, "yolo26n_random.safetensors"), state, metadata)

    images = synthetic_images(gen, 1, 320, 320)
    rect = synthetic_images(gen, 1, 192, 320)
    tensors = {"image_320": images, "image_192x320": rect}
    cases = {"eval": (images, False), "train": (images, True), "rect": (rect, False)}
    for case, (img, train) in cases.items():
        ref = reference_outputs(model, img, case, train, ("one2one", "one2many") if case != "rect" else ("one2one",),
                                tensors)
        if case == "eval":
            detections(tensors, ref, "e2e", "nms", 320)
    safetensors_io.write(os.path.join(out_dir, "yolo26n_outputs.safetensors"), tensors, outputs_metadata())

    # 640×640 from a generator of its own, so that nothing above depends on it.
    image = synthetic_images(torch.Generator().manual_seed(SEED + 640), 1, 640, 640)
    tensors = {"image_640": image}
    ref = reference_outputs(model, image, "eval640", False, ("one2one", "one2many"), tensors)
    detections(tensors, ref, "e2e640", "nms640", 640)
    safetensors_io.write(os.path.join(out_dir, "yolo26n_outputs_640.safetensors"), tensors, outputs_metadata())


if __name__ == "__main__":
    main()
