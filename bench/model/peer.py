#!/usr/bin/env python3
"""PyTorch peer of `vision bench` (bench/model, NOTES.md): YOLO26 inference from a normalised input on the device to
the [B, 300, 6] end-to-end detections, timed per call the same way.

The model: tools/reference/yolo26_model.py (written from YOLO26.md, ultralytics' module structure and state_dict
names) at the scale asked for, random weights (PyTorch's default initialisation, seeded; YOLO26's Detect biases; random
BatchNorm statistics so that the fold is not the identity), then prepared for inference as ultralytics' fuse() does:
each Conv's BatchNorm folded into its convolution (a Conv2d with a bias, folded in float64), the one-to-many head
dropped, eval mode. The forward: backbone and neck, the one-to-one head (raw LTRB [B, 4, A], logits [B, nc, A]), the
decode (xyxy = (anchor -/+ LTRB) * stride, anchors precomputed once per image size) and the end-to-end postprocess of
YOLO26.md: scores = sigmoid(logits), the top k = min(300, A) anchors by their best class score, then the top k of their
k x nc (anchor, class) pairs -> [B, 300, 6] (x1, y1, x2, y2, score, class), rows with score <= conf (0.25) zeroed and
the count of the others (what ours returns; a prefix, since the scores come sorted). All of it in the model's dtype on
the device, batched, with no host synchronisation inside.

Modes (each a fresh copy of the same fused model; the input is prepared in the mode's memory format before timing):
  eager       f16 NCHW, module called directly;
  eager-cl    f16 channels-last (model and input);
  graph       NCHW, the whole call (copy of the input into a static tensor, forward, postprocess) captured with
              torch.cuda.graph and replayed (as ours copies its input into the plan's arena inside each call);
  graph-cl    the same, channels-last;
  compile-cl  torch.compile(model, --compile-mode), channels-last, captured and replayed like graph-cl (slow to
              build: run it as its own command, --compile).
On the CPU (--device cpu): f32, eager and eager-cl, torch.set_num_threads(--threads).
torch.backends.cudnn.benchmark = True; TF32 off.

Timing (bench/common/peer_util.latencies_ms, as `vision bench`): --warmup untimed calls, then each call timed on its
own between CUDA events and waited for (the host clock on the CPU), for about --seconds or --iters calls; median, p90
(nearest rank), min. JSON lines (--json): a meta line, then one row per (scale, batch, mode).

    python3 bench/model/peer.py --json peer.jsonl                          # n and s, batch 1 and 32, 640, f16 (CUDA)
    python3 bench/model/peer.py --modes compile-cl --json compile.jsonl    # torch.compile, separately
    /usr/bin/python3 bench/model/peer.py --device cpu --scales n --batches 1 --modes eager,eager-cl
    /usr/bin/python3 bench/model/peer.py --device cpu --quick              # a logic check (64x64, few calls)
"""
import argparse
import copy
import os
import sys
import warnings

import torch
import torch.nn.functional as F
from torch import nn

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "common"))
sys.path.insert(0, os.path.join(here, "..", "..", "tools", "reference"))
from peer_util import capture, latencies_ms, latency_stats, randomize_batchnorm, write_json_lines  # noqa: E402
import yolo26_model as ref  # noqa: E402

MODES = ("eager", "eager-cl", "graph", "graph-cl", "compile-cl")
DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}


# ----------------------------------------------------------------------------------------------------------------
# The model as inference runs it.

def fuse(model):
    """Each reference Conv's BatchNorm folded into its convolution (ref.folded: float64), in place: the Conv keeps a
    Conv2d with a bias and an identity where its BatchNorm was."""
    for m in model.modules():
        if isinstance(m, ref.Conv) and isinstance(m.bn, nn.BatchNorm2d):
            c = m.conv
            w, b = ref.folded(c, m.bn)
            conv = nn.Conv2d(c.in_channels, c.out_channels, c.kernel_size, c.stride, c.padding, groups=c.groups,
                             bias=True)
            with torch.no_grad():
                conv.weight.copy_(w)
                conv.bias.copy_(b)
            m.conv, m.bn = conv, nn.Identity()
    return model


def one2one_head(yolo, x):
    det = yolo.model[23]
    return det.head(yolo.features(x), det.one2one_cv2, det.one2one_cv3)


def decode(ltrb, anchors, strides):
    """Raw LTRB [B, 4, A] -> xyxy [B, 4, A] in input pixels."""
    lt, rb = ltrb.split(2, 1)
    return torch.cat((anchors - lt, anchors + rb), 1) * strides


def postprocess_e2e(boxes, logits, max_det, conf):
    """Batched end-to-end top-k: boxes [B, 4, A], logits [B, nc, A] -> detections [B, max_det, 6], count [B]."""
    scores = logits.sigmoid().transpose(1, 2)                          # [B, A, nc]
    _, anchors, nc = scores.shape
    k = min(max_det, anchors)
    top = scores.amax(-1).topk(k, -1).indices                          # [B, k] anchors by best class score
    cand = scores.gather(1, top.unsqueeze(-1).expand(-1, -1, nc))      # [B, k, nc]
    best, pair = cand.flatten(1).topk(k, -1)                           # [B, k] over the k x nc pairs
    anchor = top.gather(1, pair // nc)
    cls = (pair % nc).to(best.dtype)
    xyxy = boxes.transpose(1, 2).gather(1, anchor.unsqueeze(-1).expand(-1, -1, 4))
    det = torch.cat((xyxy, best.unsqueeze(-1), cls.unsqueeze(-1)), -1)
    keep = best > conf
    det = det * keep.unsqueeze(-1)                                     # scores sorted: the kept rows are a prefix
    if k < max_det:
        det = F.pad(det, (0, 0, 0, max_det - k))
    return det, keep.sum(-1, dtype=torch.int32)


class EndToEnd(nn.Module):
    """A fused YOLO26 (one-to-one head only) with its decode and postprocess: images -> (detections, count)."""

    def __init__(self, yolo, height, width, max_det=300, conf=0.25):
        super().__init__()
        self.yolo = yolo
        grid = ref.anchor_grid(height, width, torch.float32)
        self.register_buffer("anchors", grid[:2].unsqueeze(0).contiguous())   # [1, 2, A] grid units
        self.register_buffer("strides", grid[2:3].unsqueeze(0).contiguous())  # [1, 1, A]
        self.max_det, self.conf = max_det, conf

    def forward(self, x):
        ltrb, logits = one2one_head(self.yolo, x)
        return postprocess_e2e(decode(ltrb, self.anchors, self.strides), logits, self.max_det, self.conf)


def build(scale, nc, seed):
    """(unfused reference model in eval mode, fused one-to-one model): f32, on the CPU."""
    torch.manual_seed(seed)
    model = ref.YOLO26(scale, nc)
    model.model[23].bias_init()
    randomize_batchnorm(model, torch.Generator().manual_seed(seed))
    model.eval()
    fused = fuse(copy.deepcopy(model))
    det = fused.model[23]
    del det.cv2, det.cv3  # the one-to-many head (ultralytics' fuse() drops it for end-to-end inference)
    return model, fused


def fold_check(model, fused, size=64):
    """Checks of the peer's model, f32 on the CPU at size x size: max |fused - unfused| / max |unfused| over the
    one-to-one head's raw outputs, and max |ours - reference| of the batched decode + postprocess against the
    reference's per-image postprocess_e2e (every row kept: conf -1)."""
    x = torch.rand(2, 3, size, size, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        raw = one2one_head(model, x)
        a = torch.cat([t.flatten(1) for t in raw], 1)
        b = torch.cat([t.flatten(1) for t in one2one_head(fused, x)], 1)
        grid = ref.anchor_grid(size, size, torch.float32)
        det, count = postprocess_e2e(decode(raw[0], grid[None, :2], grid[None, 2:3]), raw[1], 300, -1.0)
        want, want_count = ref.postprocess_e2e(ref.decode(raw[0], size, size), raw[1], 300, -1.0)
    post = (det - want).abs().max().item() if torch.equal(count, want_count) else float("inf")
    return ((a - b).abs().max() / a.abs().max()).item(), post


# ----------------------------------------------------------------------------------------------------------------
# Modes.

def make_call(mode, fused, x, args):
    """The call to time for one mode: (fn, input) with fn() -> (detections, count)."""
    h, w = x.shape[2], x.shape[3]
    cl = mode.endswith("-cl")
    mem = torch.channels_last if cl else torch.contiguous_format
    model = EndToEnd(copy.deepcopy(fused), h, w).to(device=args.device, dtype=args.torch_dtype, memory_format=mem)
    model.eval()
    xin = x.contiguous(memory_format=mem)
    if mode.startswith("eager"):
        return lambda: model(xin)
    if mode.startswith("compile"):
        model = torch.compile(model, mode=args.compile_mode, dynamic=False)
        model(xin)  # compiles here, outside the capture
    static_in = torch.empty_like(xin)

    def body():
        static_in.copy_(xin)
        return model(static_in)

    g, out = capture(body)

    def replay():  # the captured call: replays it and returns its (static) outputs
        g.replay()
        return out

    return replay


def run(args):
    rows, checks = [], {}
    for scale in args.scales:
        model, fused = build(scale, args.nc, args.seed)
        fold, post = fold_check(model, fused)
        checks[scale] = {"fold_rel_err": fold, "postprocess_abs_err": post}
        params = sum(p.numel() for p in fused.parameters())
        print("YOLO26{} (fused, one-to-one head): {} parameters; checks at 64x64 f32: BatchNorm fold {:.1e} (relative), "
              "postprocess vs the reference's {:.1e}".format(scale, params, fold, post), flush=True)
        for batch in args.batches:
            gen = torch.Generator().manual_seed(args.seed + batch)
            x = torch.rand(batch, 3, args.imgsz[0], args.imgsz[1], generator=gen).to(args.device, args.torch_dtype)
            for mode in args.modes:
                row = {"kind": "row", "impl": "pytorch", "scale": scale, "batch": batch, "imgsz": args.imgsz,
                       "dtype": args.dtype, "mode": mode, "device": args.device, "median_ms": None}
                fn = None
                try:
                    with torch.no_grad():
                        fn = make_call(mode, fused, x, args)
                        det, count = fn()
                        if args.device == "cuda":
                            torch.cuda.synchronize()
                        if tuple(det.shape) != (batch, 300, 6) or tuple(count.shape) != (batch,):
                            raise RuntimeError("unexpected output shapes {} and {}".format(tuple(det.shape),
                                                                                           tuple(count.shape)))
                        samples = latencies_ms(fn, args.device, args.warmup, args.iters, args.seconds)
                    row.update(latency_stats(samples))
                    row["img_s"] = batch * 1000.0 / row["median_ms"]
                except Exception as e:  # noqa: BLE001 -- a failing mode is reported as a row, not fatal
                    row["error"] = "{}: {}".format(type(e).__name__, str(e).splitlines()[0] if str(e) else "")[:300]
                finally:
                    fn = None
                    if args.device == "cuda":
                        torch.cuda.synchronize()
                        torch.cuda.empty_cache()
                rows.append(row)
                if row.get("median_ms") is not None:
                    print("  {:<3} b{:<4} {:<11} median {:9.3f} ms  p90 {:9.3f} ms  {:10.1f} img/s  ({} calls)".format(
                        scale, batch, mode, row["median_ms"], row["p90_ms"], row["img_s"], row["iters"]), flush=True)
                else:
                    print("  {:<3} b{:<4} {:<11} failed: {}".format(scale, batch, mode, row["error"]), flush=True)
    return rows, checks


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--scales", default="n,s")
    ap.add_argument("--nc", type=int, default=80)
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--imgsz", default="640", help="one side or H,W (multiples of 32)")
    ap.add_argument("--dtype", default=None, choices=tuple(DTYPES), help="default f16 on CUDA, f32 on the CPU")
    ap.add_argument("--modes", default=None,
                    help="comma-separated, of " + ", ".join(MODES) + " (default: eager,eager-cl,graph,graph-cl on "
                         "CUDA, eager,eager-cl on the CPU)")
    ap.add_argument("--compile", action="store_true", help="the same as --modes compile-cl")
    ap.add_argument("--compile-mode", default="default", help="torch.compile mode (e.g. max-autotune-no-cudagraphs)")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--iters", type=int, default=0, help="timed calls per row (default: about --seconds)")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--threads", type=int, default=2, help="CPU threads (torch.set_num_threads)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="a logic check: 64x64, batch 1 and 2, n, 2 timed calls")
    ap.add_argument("--json", help="write a meta line and the rows here as JSON lines (run.sh reads them)")
    args = ap.parse_args()

    if args.quick:
        args.scales, args.batches, args.imgsz, args.warmup, args.iters = "n", "1,2", "64", 2, 2
    args.scales = [s for s in args.scales.split(",") if s]
    for s in args.scales:
        if s not in ref.SCALES:
            ap.error("unknown scale {} (n, s, m, l or x)".format(s))
    args.batches = [int(b) for b in args.batches.split(",") if b]
    sides = [int(v) for v in args.imgsz.replace("x", ",").split(",") if v]
    args.imgsz = sides * 2 if len(sides) == 1 else sides
    if len(args.imgsz) != 2 or any(v <= 0 or v % 32 for v in args.imgsz):
        ap.error("--imgsz: one side or H,W, positive multiples of 32")
    args.dtype = args.dtype or ("f16" if args.device == "cuda" else "f32")
    args.torch_dtype = DTYPES[args.dtype]
    if args.compile:
        args.modes = "compile-cl"
    args.modes = [m for m in (args.modes or ("eager,eager-cl,graph,graph-cl" if args.device == "cuda"
                                             else "eager,eager-cl")).split(",") if m]
    for m in args.modes:
        if m not in MODES:
            ap.error("unknown mode {} ({})".format(m, ", ".join(MODES)))
        if args.device == "cpu" and not m.startswith("eager"):
            ap.error("mode {} needs CUDA (the CPU runs eager and eager-cl)".format(m))
    if args.device == "cpu" and args.dtype != "f32":
        ap.error("the CPU comparison is f32 (ours computes in f32 on the CPU)")

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    warnings.filterwarnings("ignore")
    if args.device == "cuda" and not torch.cuda.is_available():
        print("peer.py: no CUDA device visible to PyTorch (use --device cpu for the CPU comparison or a logic check)",
              file=sys.stderr)
        return 2
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else "CPU, {} threads".format(
        torch.get_num_threads())
    print("PyTorch {} on {}: YOLO26 {} at {}x{} (H x W), {}, batches {}; per call: input {} -> detections "
          "[B, 300, 6] ready ({})".format(torch.__version__, device_name, ",".join(args.scales), args.imgsz[0],
                                          args.imgsz[1], args.dtype, ",".join(map(str, args.batches)),
                                          "on the device" if args.device == "cuda" else "in host memory",
                                          "CUDA events, synchronised" if args.device == "cuda" else "host clock"),
          flush=True)
    rows, checks = run(args)
    meta = {"kind": "meta", "impl": "pytorch", "implementation": "PyTorch " + torch.__version__,
            "device": args.device, "device_name": device_name, "imgsz": args.imgsz, "dtype": args.dtype,
            "cudnn": torch.backends.cudnn.version() if args.device == "cuda" else None,
            "threads": torch.get_num_threads() if args.device == "cpu" else None,
            "mkldnn": torch.backends.mkldnn.is_available() if args.device == "cpu" else None,
            "compile_mode": args.compile_mode if "compile-cl" in args.modes else None, "fold_check": checks}
    write_json_lines(args.json, [meta] + rows)
    bad = [s for s, c in checks.items() if not (c["fold_rel_err"] <= 1e-4 and c["postprocess_abs_err"] <= 1e-3)]
    if bad:
        print("peer.py: the fused model or its postprocess does not reproduce the reference for {}".format(
            ", ".join(bad)), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
