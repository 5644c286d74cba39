#!/usr/bin/env python3
"""PyTorch peers of bench_graph (NOTES.md): the same Conv-BN-SiLU/C2f stack as torch.nn modules, timed the same way.

The stack (STACK below; bench_graph.cpp builds the same one, and the state_dict keys equal its state keys):
  Conv(c1, c2, k, s) = Conv2d(k, stride s, padding k//2, no bias) -> BatchNorm2d(eps 1e-3, momentum 0.03) -> SiLU
  C2f(c, n)          = cv1 = Conv(c, c, 1, 1), split in halves a, b; n times b = b + cv2(cv1(b)) (two 3x3 Convs);
                       cv2 = Conv((2 + n) * c/2, c, 1, 1) over cat(a, b_0, ..., b_n)   (ultralytics' C2f)
  model.0-8: Conv(3,16,3,2) Conv(16,32,3,2) C2f(32,1) Conv(32,64,3,2) C2f(64,2) Conv(64,128,3,2) C2f(128,2)
             Conv(128,256,3,2) C2f(256,1); output y [N, 256, H/32, W/32]; training loss mean(y).

Inference peers (BatchNorm folded into the convolutions by fold_batchnorm, written here), per format and batch:
  eager          the folded model called on an input already in its format;
  graph          torch.cuda.CUDAGraph of (copy the input into the static input, the folded model), replayed;
  graph          with input f32_nchw (16-bit formats): the copy_ into the static input converts f32 NCHW to the
                 format inside the graph (what bench_graph's f32_nchw-input rows do);
  compile+graph  torch.compile(folded model, --compile-mode), captured into a CUDAGraph the same way.
Formats: f32_nchw (TF32 off: torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False),
f16_nhwc and bf16_nhwc (model.half()/bfloat16() and torch.channels_last). torch.backends.cudnn.benchmark = True.
Training peers: one step = zero_grad, forward (f16/bf16: autocast, model weights f32 channels_last), loss =
mean(y.float()), backward, torch.optim.SGD(lr) step (f16: through torch.cuda.amp.GradScaler); eager, and (f32, bf16)
the whole step captured into a CUDAGraph.

Timing (as bench_graph): warm-up calls, one timed call picks `iters` (a measurement of ~--target-ms), then
--repeats measurements of `iters` back-to-back calls with CUDA events around each; median (and min) per call.
Rows are JSON lines in bench_graph's format: keys "{mode}_{format}_in-{input}_b{batch}", variant the peer.

  python3 bench/graph/peer.py --json peer.jsonl                    # the benchmark (CUDA)
  python3 bench/graph/peer.py --device cpu --quick                 # a logic check without a GPU (tiny sizes)
  python3 bench/graph/peer.py --check-against dump.safetensors     # compare with bench_graph --check-dump
"""
import argparse
import contextlib
import copy
import json
import os
import sys
import warnings

import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from peer_util import capture, measure_us, randomize_batchnorm  # noqa: E402

# (kind, output channels, kernel, stride) for conv, (kind, channels, n bottlenecks) for c2f: bench_graph.cpp's
# stack_layers().
STACK = [
    ("conv", 16, 3, 2), ("conv", 32, 3, 2), ("c2f", 32, 1),
    ("conv", 64, 3, 2), ("c2f", 64, 2),
    ("conv", 128, 3, 2), ("c2f", 128, 2),
    ("conv", 256, 3, 2), ("c2f", 256, 1),
]
BN_EPS, BN_MOMENTUM = 1e-3, 0.03
FORMATS = {
    "f32_nchw": (torch.float32, torch.contiguous_format),
    "f16_nhwc": (torch.float16, torch.channels_last),
    "bf16_nhwc": (torch.bfloat16, torch.channels_last),
    "f16_nchw": (torch.float16, torch.contiguous_format),
    "bf16_nchw": (torch.bfloat16, torch.contiguous_format),
    "f32_nhwc": (torch.float32, torch.channels_last),
}


# ----------------------------------------------------------------------------------------------------------------
# The stack.

class Conv(nn.Module):
    def __init__(self, c1, c2, k, s):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, k // 2, bias=False)
        self.bn = nn.BatchNorm2d(c2, eps=BN_EPS, momentum=BN_MOMENTUM)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class FoldedConv(nn.Module):
    """A Conv with its BatchNorm's running statistics folded in: SiLU(conv(x, W * g/s) + b - m * g/s),
    s = sqrt(running_var + eps), computed in float64 and rounded once."""

    def __init__(self, m):
        super().__init__()
        conv, bn = m.conv, m.bn
        self.conv = nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding,
                              bias=True, device=conv.weight.device)
        with torch.no_grad():
            scale = bn.weight.double() / torch.sqrt(bn.running_var.double() + bn.eps)
            self.conv.weight.copy_((conv.weight.double() * scale.reshape(-1, 1, 1, 1)).to(conv.weight.dtype))
            self.conv.bias.copy_((bn.bias.double() - bn.running_mean.double() * scale).to(conv.weight.dtype))
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(self.conv(x))


class Bottleneck(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.cv1 = Conv(c, c, 3, 1)
        self.cv2 = Conv(c, c, 3, 1)

    def forward(self, x):
        return x + self.cv2(self.cv1(x))


class C2f(nn.Module):
    def __init__(self, c2, n):
        super().__init__()
        self.c = c2 // 2
        self.cv1 = Conv(c2, 2 * self.c, 1, 1)
        self.cv2 = Conv((2 + n) * self.c, c2, 1, 1)
        self.m = nn.ModuleList(Bottleneck(self.c) for _ in range(n))

    def forward(self, x):
        y = list(self.cv1(x).split((self.c, self.c), 1))
        for m in self.m:
            y.append(m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        layers, c = [], 3
        for spec in STACK:
            layers.append(Conv(c, spec[1], spec[2], spec[3]) if spec[0] == "conv" else C2f(spec[1], spec[2]))
            c = spec[1]
        self.model = nn.Sequential(*layers)

    def forward(self, x):
        return self.model(x)


def fold_batchnorm(model):
    """A copy of model (in eval mode) with every Conv replaced by a FoldedConv."""
    folded = copy.deepcopy(model).eval()

    def replace(parent):
        for name, child in parent.named_children():
            if isinstance(child, Conv):
                setattr(parent, name, FoldedConv(child))
            else:
                replace(child)

    replace(folded)
    return folded


def flops_per_image(size):
    """Forward FLOPs per image: 2 x multiply-adds of every convolution (bench_graph counts the same)."""
    total, hooks = 0, []
    model = Stack()

    def hook(m, inp, out):
        nonlocal total
        total += 2 * out.numel() * (m.in_channels // m.groups) * m.kernel_size[0] * m.kernel_size[1]

    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            hooks.append(m.register_forward_hook(hook))
    with torch.no_grad():
        model(torch.zeros(1, 3, size, size))
    return total


def fold_check(device, size, batch):
    """Max |folded - unfolded| / max|unfolded| of the eval outputs in f32 (TF32 off), on device."""
    gen = torch.Generator().manual_seed(7)
    model = Stack()
    randomize_batchnorm(model, gen)
    model = model.to(device).eval()
    folded = fold_batchnorm(model)
    x = (torch.rand(batch, 3, size, size, generator=gen) * 2 - 1).to(device)
    with torch.no_grad():
        ref, out = model(x), folded(x)
    return ((out - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


# ----------------------------------------------------------------------------------------------------------------
# Timing.

def short(e):
    msg = str(e).strip().splitlines()
    return (type(e).__name__ + ": " + (msg[0] if msg else "")).strip()[:300]


# ----------------------------------------------------------------------------------------------------------------
# Peers.

def make_input(shape, fmt, device, gen):
    dtype, mem = FORMATS[fmt]
    x = torch.rand(shape, generator=gen) * 2 - 1
    return x.to(device=device, dtype=dtype).contiguous(memory_format=mem)


def new_model(device, gen):
    model = Stack()
    randomize_batchnorm(model, gen)
    return model.to(device)


def inference_peers(args, fmt, batch):
    """(variant, input, fn-factory) for one format and batch; each factory returns the call to time."""
    dtype, mem = FORMATS[fmt]
    shape = (batch, 3, args.size, args.size)
    gen = torch.Generator().manual_seed(args.seed)
    folded = fold_batchnorm(new_model("cpu", gen)).to(device=args.device, dtype=dtype, memory_format=mem)
    x = make_input(shape, fmt, args.device, gen)
    x32 = make_input(shape, "f32_nchw", args.device, gen)
    is16 = dtype != torch.float32

    def eager():
        return lambda: folded(x)

    def graphed(model, src):
        static_in = torch.empty_like(x)

        def body():
            static_in.copy_(src)
            return model(static_in)

        g, _ = capture(body)
        return g.replay

    def compiled():
        if not hasattr(torch, "compile"):
            raise RuntimeError("torch.compile needs PyTorch 2")
        cmodel = torch.compile(folded, mode=args.compile_mode, dynamic=False)
        cmodel(x)  # compiles here, outside capture
        return graphed(cmodel, x)

    peers = [("eager", "native", eager)]
    if args.device == "cuda":
        peers.append(("graph", "native", lambda: graphed(folded, x)))
        if is16:
            peers.append(("graph", "f32_nchw", lambda: graphed(folded, x32)))
        key = "infer_{}_in-native_b{}".format(fmt, batch)
        if args.compile == "all" or (args.compile == "b32" and is16 and batch == 32) or (
                args.compile not in ("all", "b32", "none") and args.compile in key):
            peers.append(("compile+graph", "native", compiled))
    return peers


def train_peers(args, fmt, batch):
    dtype, mem = FORMATS[fmt]
    scaled = dtype == torch.float16  # f16: autocast with dynamic loss scaling (GradScaler)
    shape = (batch, 3, args.size, args.size)
    gen = torch.Generator().manual_seed(args.seed)
    x = make_input(shape, fmt, args.device, gen)
    x32 = make_input(shape, "f32_nchw", args.device, gen)

    def setup():
        g2 = torch.Generator().manual_seed(args.seed)
        model = new_model("cpu", g2).to(device=args.device, memory_format=mem).train()
        opt = torch.optim.SGD(model.parameters(), lr=args.lr)
        return model, opt

    def autocast(cache_enabled=True):
        if dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(device_type=args.device, dtype=dtype, cache_enabled=cache_enabled)

    def eager():
        model, opt = setup()
        scaler = torch.cuda.amp.GradScaler() if scaled else None

        def step():
            opt.zero_grad(set_to_none=True)
            with autocast():
                y = model(x)
            loss = y.float().mean()
            if scaler is None:
                loss.backward()
                opt.step()
            else:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            return loss

        return step

    def graphed(src):
        model, opt = setup()
        static_in = torch.empty_like(x)

        def step():
            static_in.copy_(src)
            with autocast(cache_enabled=False):
                y = model(static_in)
            loss = y.float().mean()
            loss.backward()
            opt.step()
            return loss

        # PyTorch's whole-network capture: warm up on a side stream, grads set to None before capture so that
        # backward allocates them from the graph's pool; each replay overwrites them.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                opt.zero_grad(set_to_none=True)
                step()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        opt.zero_grad(set_to_none=True)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            step()
        torch.cuda.synchronize()
        return g.replay

    peers = [("eager", "native", eager)]
    if args.device == "cuda" and scaled:
        peers.append(("graph", "native", failing(RuntimeError(
            "not captured: GradScaler's step reads found-inf on the host (as the engine's LossScaler does)"))))
    elif args.device == "cuda":
        peers.append(("graph", "native", lambda: graphed(x)))
        if dtype != torch.float32:
            peers.append(("graph", "f32_nchw", lambda: graphed(x32)))
    return peers


def failing(e):
    def factory():
        raise e
    return factory


def run_rows(args):
    jobs = []
    for mode in args.modes:
        for fmt in (args.formats if mode == "infer" else args.train_formats):
            for batch in args.batches:
                jobs.append((mode, fmt, batch))
    rows = []
    for mode, fmt, batch in jobs:
        try:
            peers = (inference_peers if mode == "infer" else train_peers)(args, fmt, batch)
        except Exception as e:  # noqa: BLE001 -- reported as a row
            peers = [("setup", "native", failing(e))]
        for variant, inp, factory in peers:
            key = "{}_{}_in-{}_b{}".format(mode, fmt, inp, batch)
            if args.only and args.only not in key:
                continue
            row = {"kind": "row", "impl": "pytorch", "key": key, "mode": mode, "format": fmt, "input": inp,
                   "batch": batch, "variant": variant, "ms": None, "img_s": None}
            try:
                ctx = torch.no_grad() if mode == "infer" else contextlib.nullcontext()
                with ctx:
                    fn = factory()
                    us, us_min, iters = measure_us(fn, args.device, args.warmup, args.repeats, args.target_ms,
                                                   args.max_iters)
                    ms, ms_min = us / 1000.0, us_min / 1000.0
                row.update(ms=ms, ms_min=ms_min, img_s=batch * 1000.0 / ms, iters=iters, repeats=args.repeats)
            except Exception as e:  # noqa: BLE001 -- any failure of a peer is reported, not fatal
                row["error"] = short(e)
                if args.device == "cuda":
                    torch.cuda.synchronize()
            finally:
                fn = None
                if args.device == "cuda":
                    torch.cuda.empty_cache()
            rows.append(row)
            ms = "{:10.3f}".format(row["ms"]) if row["ms"] is not None else "{:>10}".format("n/a")
            img = "{:11.1f}".format(row["img_s"]) if row["img_s"] is not None else "{:>11}".format("n/a")
            print("{:<34} {:<14} {} {}  {}".format(key, variant, ms, img, row.get("error", "")), flush=True)
    return rows


# ----------------------------------------------------------------------------------------------------------------
# Cross-check against bench_graph --check-dump.

SAFETENSORS_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
                      "I64": torch.int64, "I32": torch.int32, "U8": torch.uint8, "BOOL": torch.bool}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        dtype = SAFETENSORS_DTYPES[info["dtype"]]
        if end > begin:
            t = torch.frombuffer(bytearray(data[base + begin:base + end]), dtype=dtype)
        else:
            t = torch.empty(0, dtype=dtype)
        out[name] = t.reshape(info["shape"]).clone()
    return out, header.get("__metadata__", {})


def check_against(args):
    """Loads bench_graph's dumped state into the torch stack, compares output, loss and gradients. Returns 0 if
    every relative error is within the format's tolerance."""
    tensors, meta = read_safetensors(args.check_against)
    fmt = meta.get("format", "f32_nchw")
    tol = {"f32": 1e-3, "f16": 2e-2, "bf16": 1e-1}[fmt.split("_")[0]]
    model = Stack()
    state = {k: v for k, v in tensors.items() if not k.startswith("check.")}
    model.load_state_dict(state, strict=True)  # the key sets must be equal: the same stack on both sides
    model = model.to(args.device)
    x = tensors["check.input"].to(args.device)
    results = []

    def rel(a, b):
        a, b = a.detach().double().cpu(), b.detach().double().cpu()
        return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()

    model.eval()
    with torch.no_grad():
        ref = model(x)
        results.append(("inference output vs torch eval (unfolded)", rel(tensors["check.output"], ref)))
        folded = fold_batchnorm(model)(x)
        results.append(("inference output vs torch eval (folded)", rel(tensors["check.output"], folded)))
    model.train()
    y = model(x)
    loss = y.mean()
    loss.backward()
    results.append(("training loss", rel(tensors["check.loss"].reshape(()), loss)))
    worst, worst_key = 0.0, ""
    for name, p in model.named_parameters():
        e = rel(tensors["check.grad." + name], p.grad)
        if e > worst:
            worst, worst_key = e, name
    results.append(("worst parameter gradient ({})".format(worst_key), worst))
    ok = True
    print("check against {} ({}, input {}, computed on {}; torch on {}, tolerance {:g} relative to max |torch|):"
          .format(args.check_against, fmt, meta.get("input"), meta.get("device"), args.device, tol))
    for what, e in results:
        good = e <= tol
        ok &= good
        print("  {:<4} {:<60} {:.3g}".format("PASS" if good else "FAIL", what, e))
    return 0 if ok else 1


# ----------------------------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="write the rows here as JSON lines (a meta line first); run.sh reads them")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--quick", action="store_true",
                    help="tiny sizes (64x64, batch 2, few repeats, no compile): checks the logic, times nothing real")
    ap.add_argument("--size", type=int, default=640)
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--modes", default="infer,train")
    ap.add_argument("--formats", default="f32_nchw,f16_nhwc,bf16_nhwc")
    ap.add_argument("--train-formats", default="f32_nchw,f16_nhwc,bf16_nhwc")
    ap.add_argument("--only", default="", help="run only the rows whose key contains this text")
    ap.add_argument("--compile", default="b32",
                    help="which inference rows get a torch.compile peer: none, b32 (16-bit formats at batch 32; "
                         "the default), all, or a text the row key must contain")
    ap.add_argument("--compile-mode", default="default",
                    help="torch.compile mode (default, max-autotune-no-cudagraphs: much longer compiles)")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--target-ms", type=float, default=20.0)
    ap.add_argument("--max-iters", type=int, default=200)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--check-against", help="compare with a bench_graph --check-dump file instead of timing")
    args = ap.parse_args()

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    warnings.filterwarnings("ignore")
    if args.device == "cuda" and not torch.cuda.is_available():
        print("peer.py: no CUDA device visible to PyTorch (use --device cpu --quick for a logic check)",
              file=sys.stderr)
        return 2
    if args.check_against:
        return check_against(args)
    if args.quick:
        args.size, args.batches, args.repeats, args.warmup, args.target_ms = 64, "2", 3, 1, 1.0
        args.compile = "none"
    args.batches = [int(b) for b in args.batches.split(",") if b]
    args.modes = [m for m in args.modes.split(",") if m]
    args.formats = [f for f in args.formats.split(",") if f]
    args.train_formats = [f for f in args.train_formats.split(",") if f]
    for f in args.formats + args.train_formats:
        if f not in FORMATS:
            ap.error("unknown format {}".format(f))

    fold_err = fold_check(args.device, min(args.size, 128), 2)
    fold_ok = fold_err <= 1e-4
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    gflops = flops_per_image(args.size) * 1e-9
    n_params = sum(p.numel() for p in Stack().parameters())
    state = {k: list(v.shape) for k, v in Stack().state_dict().items()}
    method = "median of {} measurements of back-to-back calls ({}), per call".format(
        args.repeats, "CUDA events" if args.device == "cuda" else "host clock")
    print("PyTorch {} peers on {}: stack at {}x{}, {:.3f} GFLOP/image forward, {} parameters; {}".format(
        torch.__version__, device_name, args.size, args.size, gflops, n_params, method))
    print("BatchNorm fold check (f32, eval): max |folded - unfolded| / max |unfolded| = {:.2e} {}".format(
        fold_err, "PASS" if fold_ok else "FAIL"))
    print("{:<34} {:<14} {:>10} {:>11}  {}".format("row", "variant", "ms", "img/s", "note"), flush=True)
    rows = run_rows(args)

    if args.json:
        with open(args.json, "w") as f:
            f.write(json.dumps({
                "kind": "meta", "impl": "pytorch", "implementation": "PyTorch " + torch.__version__,
                "device": device_name, "size": args.size, "gflops_per_image": gflops, "parameters": n_params,
                "state": state, "method": method, "fold_check_rel_err": fold_err, "fold_check_ok": fold_ok,
                "cudnn": torch.backends.cudnn.version() if args.device == "cuda" else None,
                "compile_mode": args.compile_mode,
            }) + "\n")
            for r in rows:
                f.write(json.dumps(r) + "\n")
    if not fold_ok:
        print("peer.py: the BatchNorm fold does not reproduce the unfolded model", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
