#!/usr/bin/env python3
"""PyTorch peers of bench_psa_block (NOTES.md, "PSA block"): YOLO26's PSA Attention block, timed the same way.

The block (written from YOLO26.md, Attention; dim, heads: n = 128, 2 and s = 256, 4; key_dim kd = dim/heads/2 = 32,
head_dim hd = 2 kd = 64, scale kd^-0.5; the state_dict keys equal bench_psa_block's state keys, "attn.qkv.conv.weight"):
  qkv  = Conv(dim, 2 dim, 1, act=False)(x)          Conv = Conv2d (no bias) -> BatchNorm2d(eps 1e-3), no SiLU
  q, k, v = qkv.view(B, heads, 2 kd + hd, N).split([kd, kd, hd], dim=2)           N = H W
  attn = softmax over keys of (q^T k * scale);  o = (v @ attn^T).view(B, dim, H, W)
  y    = proj(o + pe(v.reshape(B, dim, H, W)))     pe = Conv(dim, dim, 3, g=dim, act=False), proj = Conv(dim, dim, 1)

Peers (inference, BatchNorm folded into the three convolutions by fold(), checked against the unfolded block at every
start; f16 weights and input in torch.channels_last on CUDA, f32 on the CPU), attention written as:
  math-ul        ultralytics' code as above: two matmuls and a softmax, its own views and reshapes (v @ attn^T is
                 NCHW-contiguous; v.reshape copies V into NCHW for pe);
  math-cl        the same math with channels_last-friendly reshapes: attn @ v^T, the result and pe's input copied
                 into channels_last (what a PyTorch user tuning this block would write);
  sdpa-auto      F.scaled_dot_product_attention(q^T, k^T, v^T, scale) on the views (last dimension contiguous, V head
                 dimension 2 kd != the QK one), PyTorch's choice of backend, output and pe input in channels_last;
  sdpa-flash, sdpa-efficient, sdpa-cudnn, sdpa-math   the same with the backend forced (torch.nn.attention.sdpa_kernel);
                 a backend that cannot run the shape (flash needs equal head dimensions) is reported n/a with
                 the reason;
  sdpa-auto-c, sdpa-cudnn-c   the same on contiguous copies of q^T, k^T, v^T ([B, heads, N, d], the layout SDPA
                 backends are tuned for), in case a backend rejects or is slow on the strided views.
Each as: eager (the folded block on an input already in its format); graph (torch.cuda.CUDAGraph of: copy the input
into the static input, the block; replayed — the same input copy as ours); compile+graph (torch.compile(block),
captured the same way; by default only math-ul and sdpa-auto at batch 32, see --compile).
TF32 off; torch.backends.cudnn.benchmark = True.

Timing (as bench_psa_block): warm-up calls, one timed call picks `iters` (a measurement of ~--target-ms), then
--repeats measurements of `iters` back-to-back calls with CUDA events around each; median (and min) per call in us.
Rows are JSON lines in bench_psa_block's format: key "{scale}_N{N}_b{batch}", variant the attention, mode the call.

  python3 bench/attention/psa_peer.py --json peer.jsonl [--shapes-from ours.jsonl]   # the benchmark (CUDA)
  python3 bench/attention/psa_peer.py --device cpu --quick                           # a logic check without a GPU
  python3 bench/attention/psa_peer.py --check-against dump.safetensors               # bench_psa_block --check-dump
"""
import argparse
import contextlib
import copy
import json
import os
import sys
import warnings

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from peer_util import capture, measure_us  # noqa: E402

SCALES = {"n": (128, 2), "s": (256, 4)}  # (dim, heads): bench_psa_block.cpp's parse_scale
BN_EPS, BN_MOMENTUM = 1e-3, 0.03
ATTENTIONS = ["math-ul", "math-cl", "sdpa-auto", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn", "sdpa-math",
              "sdpa-auto-c", "sdpa-cudnn-c"]


# ----------------------------------------------------------------------------------------------------------------
# The block.

class ConvBN(nn.Module):
    """ultralytics' Conv(c1, c2, k, g=g, act=False): Conv2d (no bias, padding k//2) -> BatchNorm2d."""

    def __init__(self, c1, c2, k=1, g=1):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, 1, k // 2, groups=g, bias=False)
        self.bn = nn.BatchNorm2d(c2, eps=BN_EPS, momentum=BN_MOMENTUM)

    def forward(self, x):
        return self.bn(self.conv(x))


def fold_conv(m):
    """A Conv2d with bias computing m's conv -> BatchNorm (running statistics): W g/s, b - mu g/s, s = sqrt(var + eps),
    in float64, rounded once."""
    conv, bn = m.conv, m.bn
    out = nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding,
                    groups=conv.groups, bias=True, device=conv.weight.device, dtype=conv.weight.dtype)
    with torch.no_grad():
        s = bn.weight.double() / torch.sqrt(bn.running_var.double() + bn.eps)
        out.weight.copy_((conv.weight.double() * s.reshape(-1, 1, 1, 1)).to(conv.weight.dtype))
        out.bias.copy_((bn.bias.double() - bn.running_mean.double() * s).to(conv.weight.dtype))
    return out


def sdpa_available():
    return hasattr(F, "scaled_dot_product_attention")


def emulated_sdpa(q, k, v, scale):
    """Stands in for F.scaled_dot_product_attention where PyTorch lacks it (< 2.0; the CPU logic check only)."""
    return torch.softmax((q @ k.transpose(-2, -1)) * scale, dim=-1) @ v


def sdpa_backend_context(backend):
    """A context forcing one SDPA backend, or a null context (auto, or no SDPA)."""
    if backend == "auto" or not sdpa_available():
        return contextlib.nullcontext()
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel({"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                            "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}[backend])
    except ImportError:  # PyTorch 2.0-2.2: the older switch (no cuDNN backend there)
        if backend == "cudnn":
            raise RuntimeError("this PyTorch has no cuDNN SDPA backend")
        return torch.backends.cuda.sdp_kernel(enable_flash=backend == "flash",
                                              enable_mem_efficient=backend == "efficient",
                                              enable_math=backend == "math")


class Attention(nn.Module):
    """The block. attention is one of ATTENTIONS; folded blocks (fold_block) replace the ConvBNs by biased convs."""

    def __init__(self, dim, heads, attention="math-ul", emulate_sdpa=False):
        super().__init__()
        self.dim, self.heads = dim, heads
        self.head_dim = dim // heads
        self.key_dim = self.head_dim // 2
        self.scale = self.key_dim ** -0.5
        self.qkv = ConvBN(dim, dim + 2 * self.key_dim * heads, 1)
        self.proj = ConvBN(dim, dim, 1)
        self.pe = ConvBN(dim, dim, 3, g=dim)
        self.attention = attention
        self.emulate_sdpa = emulate_sdpa

    def _sdpa(self, q, k, v):
        parts = self.attention.split("-")  # "sdpa", backend[, "c": contiguous copies of q, k, v]
        if len(parts) > 2 and parts[2] == "c":
            q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        if not sdpa_available():
            if not self.emulate_sdpa:
                raise RuntimeError("torch {} has no scaled_dot_product_attention".format(torch.__version__))
            return emulated_sdpa(q, k, v, self.scale)
        with sdpa_backend_context(parts[1]):
            return F.scaled_dot_product_attention(q, k, v, scale=self.scale)

    def forward(self, x):
        b, c, h, w = x.shape
        n, kd, hd, nh = h * w, self.key_dim, self.head_dim, self.heads
        qkv = self.qkv(x)
        q, k, v = qkv.view(b, nh, 2 * kd + hd, n).split([kd, kd, hd], dim=2)  # [B, nh, kd|kd|hd, N]
        if self.attention == "math-ul":
            attn = (q.transpose(-2, -1) @ k) * self.scale
            attn = attn.softmax(dim=-1)
            o = (v @ attn.transpose(-2, -1)).view(b, c, h, w)
            return self.proj(o + self.pe(v.reshape(b, c, h, w)))
        if self.attention == "math-cl":
            attn = ((q.transpose(-2, -1) @ k) * self.scale).softmax(dim=-1)
            o = attn @ v.transpose(-2, -1)  # [B, nh, N, hd]
        else:
            o = self._sdpa(q.transpose(-2, -1), k.transpose(-2, -1), v.transpose(-2, -1))  # [B, nh, N, hd]
        # [B, nh, N, hd] -> [B, N, nh, hd] = [B, H, W, C] -> NCHW shape in channels_last memory.
        o = o.transpose(1, 2).reshape(b, h, w, c).permute(0, 3, 1, 2)
        pe_in = v.permute(0, 3, 1, 2).reshape(b, h, w, c).permute(0, 3, 1, 2)
        return self.proj(o + self.pe(pe_in))


class Block(nn.Module):
    """The block under the name "attn", so that the state_dict keys are bench_psa_block's."""

    def __init__(self, dim, heads, attention="math-ul", emulate_sdpa=False):
        super().__init__()
        self.attn = Attention(dim, heads, attention, emulate_sdpa)

    def forward(self, x):
        return self.attn(x)


def fold_block(model, attention, emulate_sdpa):
    """A copy of model (eval) computing with `attention`, its three ConvBNs replaced by folded convolutions."""
    folded = copy.deepcopy(model).eval()
    a = folded.attn
    a.attention, a.emulate_sdpa = attention, emulate_sdpa
    for name in ("qkv", "pe", "proj"):
        setattr(a, name, fold_conv(getattr(a, name)))
    return folded


def randomize(model, gen):
    """bench_psa_block's distributions: BatchNorm weight, running_var in [0.5, 1.5); bias, running_mean in
    [-0.1, 0.1); the convolutions keep PyTorch's default initialisation."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                for t, lo, hi in ((m.weight, 0.5, 1.5), (m.running_var, 0.5, 1.5), (m.bias, -0.1, 0.1),
                                  (m.running_mean, -0.1, 0.1)):
                    t.copy_(torch.rand(t.shape, generator=gen) * (hi - lo) + lo)


def flops(dim, heads, n, batch):
    """bench_psa_block's count: 2 B N (dim 2dim + 9 dim + dim dim) for the convolutions, 2 B heads N^2 3 kd for
    QK^T and PV."""
    kd = dim // heads // 2
    return 2.0 * batch * n * (dim * 2 * dim + 9 * dim + dim * dim) + 2.0 * batch * heads * n * n * 3 * kd


def rel_err(a, b):
    """max |a - b| / max |b| (float64)."""
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


# ----------------------------------------------------------------------------------------------------------------
# Timing.

def short(e):
    msg = str(e).strip().splitlines()
    return (type(e).__name__ + ": " + (msg[0] if msg else "")).strip()[:300]


# ----------------------------------------------------------------------------------------------------------------
# Peers.

def run_dtype(device):
    return torch.float16 if device == "cuda" else torch.float32


def new_block(dim, heads, seed):
    gen = torch.Generator().manual_seed(seed)
    model = Block(dim, heads)
    randomize(model, gen)
    return model.eval(), gen


def peers_for(args, scale, side, batch):
    """(variant, mode, factory) for one shape; each factory returns the call to time (raising if it cannot run)."""
    dim, heads = SCALES[scale]
    dtype, mem = run_dtype(args.device), torch.channels_last
    model, gen = new_block(dim, heads, args.seed)
    x = (torch.rand(batch, dim, side, side, generator=gen) * 2 - 1).to(
        device=args.device, dtype=dtype).contiguous(memory_format=mem)
    key = "{}_N{}_b{}".format(scale, side * side, batch)
    out = []
    for attention in args.attentions:
        def build(attention=attention):
            m = fold_block(model, attention, args.emulate_sdpa).to(device=args.device, dtype=dtype, memory_format=mem)
            m(x)  # raises here, outside any capture, when the attention cannot run this shape
            return m

        def eager(build=build):
            m = build()
            return lambda: m(x)

        def graphed(build=build, compiled=False):
            m = build()
            if compiled:
                if not hasattr(torch, "compile"):
                    raise RuntimeError("torch.compile needs PyTorch 2")
                m = torch.compile(m, mode=args.compile_mode, dynamic=False)
                m(x)  # compiles here, outside capture
            static_in = torch.empty_like(x)

            def body():
                static_in.copy_(x)
                return m(static_in)

            return capture(body)[0].replay

        out.append((attention, "eager", eager))
        if args.device == "cuda":
            out.append((attention, "graph", graphed))
            wants_compile = args.compile == "all" or (
                args.compile == "b32" and batch == 32 and attention in ("math-ul", "sdpa-auto")) or (
                args.compile not in ("all", "b32", "none") and args.compile in key + "_" + attention)
            if wants_compile:
                out.append((attention, "compile+graph", lambda graphed=graphed: graphed(compiled=True)))
    return out


def run_rows(args, shapes):
    rows = []
    for scale, side, batch in shapes:
        dim, heads = SCALES[scale]
        key = "{}_N{}_b{}".format(scale, side * side, batch)
        for variant, mode, factory in peers_for(args, scale, side, batch):
            if args.only and args.only not in key + "_" + variant + "_" + mode:
                continue
            row = {"kind": "row", "impl": "pytorch", "key": key, "scale": scale, "dim": dim, "heads": heads,
                   "key_dim": dim // heads // 2, "side": side, "N": side * side, "batch": batch, "variant": variant,
                   "mode": mode, "flops": flops(dim, heads, side * side, batch), "us": None}
            if variant.startswith("sdpa") and not sdpa_available():
                row["note"] = "emulated (torch {} has no SDPA)".format(torch.__version__)
            fn = None
            try:
                with torch.no_grad():
                    fn = factory()
                    us, us_min, iters = measure_us(fn, args.device, args.warmup, args.repeats, args.target_ms,
                                                   args.max_iters)
                row.update(us=us, us_min=us_min, iters=iters, repeats=args.repeats)
            except Exception as e:  # noqa: BLE001 -- any failure of a peer is reported, not fatal
                row["error"] = short(e)
                if args.device == "cuda":
                    torch.cuda.synchronize()
            finally:
                fn = None
                if args.device == "cuda":
                    torch.cuda.empty_cache()
            rows.append(row)
            us = "{:10.2f}".format(row["us"]) if row["us"] is not None else "{:>10}".format("n/a")
            print("{:<14} {:<15} {:<14} {}  {}".format(key, variant, mode, us, row.get("error", row.get("note", ""))),
                  flush=True)
    return rows


# ----------------------------------------------------------------------------------------------------------------
# Checks.

def self_check(args):
    """Every attention variant (folded, in the run's dtype and channels_last, on the device) and the f32 fold against
    the unfolded block in float64 on the CPU, at a small size: max |out - ref| / max |ref| per variant."""
    results = []
    for scale in args.scales:
        dim, heads = SCALES[scale]
        model, gen = new_block(dim, heads, args.seed + 1)
        x = torch.rand(2, dim, 5, 4, generator=gen) * 2 - 1
        with torch.no_grad():
            ref = copy.deepcopy(model).double()(x.double())
            f32 = fold_block(model, "math-ul", args.emulate_sdpa).to(args.device)(x.to(args.device))
            results.append(("{} fold (f32, math-ul)".format(scale), rel_err(f32, ref), 1e-4))
            dtype = run_dtype(args.device)
            tol = 2e-2 if dtype == torch.float16 else 1e-4
            for attention in args.attentions:
                name = "{} {} ({})".format(scale, attention, str(dtype).replace("torch.", ""))
                try:
                    m = fold_block(model, attention, args.emulate_sdpa).to(
                        device=args.device, dtype=dtype, memory_format=torch.channels_last)
                    y = m(x.to(device=args.device, dtype=dtype).contiguous(memory_format=torch.channels_last))
                    results.append((name, rel_err(y, ref), tol))
                except Exception as e:  # noqa: BLE001 -- a backend that cannot run is reported by the timing too
                    results.append((name, None, short(e)))
    return results


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
        t = torch.frombuffer(bytearray(data[base + begin:base + end]), dtype=dtype) if end > begin else \
            torch.empty(0, dtype=dtype)
        out[name] = t.reshape(info["shape"]).clone()
    return out, header.get("__metadata__", {})


def check_against(args):
    """Loads bench_psa_block's dumped state into the torch block; compares our output with the unfolded block in
    float64 (and reports PyTorch's own f16 error next to it). Returns 0 if ours is within the tolerance."""
    tensors, meta = read_safetensors(args.check_against)
    dim, heads = int(meta["dim"]), int(meta["heads"])
    model = Block(dim, heads)
    state = {k: v for k, v in tensors.items() if not k.startswith("check.")}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("num_batches_tracked")]
    if missing or unexpected:
        print("check: the state does not match the torch block: missing {}, unexpected {}".format(missing, unexpected))
        return 1
    model.eval()
    x = tensors["check.input"]
    ours = tensors["check.output"]
    with torch.no_grad():
        ref = copy.deepcopy(model).double()(x.double())
        dtype = run_dtype(args.device)
        peer = {}
        for attention in ("math-ul", "sdpa-auto"):
            try:
                m = fold_block(model, attention, args.emulate_sdpa).to(
                    device=args.device, dtype=dtype, memory_format=torch.channels_last)
                peer[attention] = rel_err(m(x.to(device=args.device, dtype=dtype).contiguous(
                    memory_format=torch.channels_last)), ref)
            except Exception as e:  # noqa: BLE001
                peer[attention] = short(e)
    err = rel_err(ours, ref)
    tol = args.check_tolerance
    ok = err <= tol
    print("check against {} ({} {}, form {}, batch {}, {}x{}, computed on {}, replayed: {}):".format(
        args.check_against, meta.get("scale"), meta.get("format"), meta.get("form"), meta.get("batch"),
        meta.get("side"), meta.get("side"), meta.get("device"), meta.get("graph_replayed")))
    print("  {:<4} ours vs the unfolded block in float64: max|ours - ref| / max|ref| = {:.3g} (tolerance {:g})".format(
        "PASS" if ok else "FAIL", err, tol))
    for attention, e in peer.items():
        what = "{:.3g}".format(e) if isinstance(e, float) else e
        print("  info PyTorch {} ({}, on {}) vs the same reference: {}".format(
            attention, str(run_dtype(args.device)).replace("torch.", ""), args.device, what))
    return 0 if ok else 1


# ----------------------------------------------------------------------------------------------------------------

def shapes_from(path):
    """The (scale, side, batch) of bench_psa_block's rows, in order, once each."""
    seen, shapes = set(), []
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            if r.get("kind") != "row":
                continue
            s = (r["scale"], int(r["side"]), int(r["batch"]))
            if s not in seen:
                seen.add(s)
                shapes.append(s)
    return shapes


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="write the rows here as JSON lines (a meta line first); run_psa.sh reads them")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--quick", action="store_true",
                    help="tiny sizes (side 4, batch 2, few repeats, no compile): checks the logic, times nothing real")
    ap.add_argument("--shapes-from", help="take (scale, side, batch) from bench_psa_block's --json output")
    ap.add_argument("--scales", default="n,s")
    ap.add_argument("--sides", default="20,40")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--attentions", default=",".join(ATTENTIONS), help="comma-separated subset of " +
                    ", ".join(ATTENTIONS))
    ap.add_argument("--only", default="", help="run only the rows whose key_variant_mode contains this text")
    ap.add_argument("--compile", default="b32",
                    help="which rows get a torch.compile peer: none, b32 (math-ul and sdpa-auto at batch 32; "
                         "the default), all, or a text the key_variant must contain")
    ap.add_argument("--compile-mode", default="default",
                    help="torch.compile mode (default, max-autotune-no-cudagraphs: much longer compiles)")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--target-ms", type=float, default=10.0)
    ap.add_argument("--max-iters", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--emulate-sdpa", action="store_true",
                    help="where PyTorch has no scaled_dot_product_attention (< 2.0), run the sdpa peers on an "
                         "explicit softmax instead (on by default with --device cpu; a logic check only)")
    ap.add_argument("--check-against", help="compare with a bench_psa_block --check-dump file instead of timing")
    ap.add_argument("--check-tolerance", type=float, default=2e-2,
                    help="bound on max|ours - ref| / max|ref| for --check-against (f16 block; loose)")
    args = ap.parse_args()

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    warnings.filterwarnings("ignore")
    if args.device == "cuda" and not torch.cuda.is_available():
        print("psa_peer.py: no CUDA device visible to PyTorch (use --device cpu --quick for a logic check)",
              file=sys.stderr)
        return 2
    if args.device == "cpu":
        args.emulate_sdpa = True
    if args.check_against:
        return check_against(args)
    if args.quick:
        args.sides, args.batches, args.repeats, args.warmup, args.target_ms = "4", "2", 3, 1, 1.0
        args.compile = "none"
    args.attentions = [a for a in args.attentions.split(",") if a]
    for a in args.attentions:
        if a not in ATTENTIONS:
            ap.error("unknown attention {} (one of {})".format(a, ", ".join(ATTENTIONS)))
    if args.shapes_from:
        shapes = shapes_from(args.shapes_from)
        args.scales = sorted({s[0] for s in shapes})
    else:
        args.scales = [s for s in args.scales.split(",") if s]
        shapes = [(sc, int(si), int(b)) for sc in args.scales for si in args.sides.split(",") if si
                  for b in args.batches.split(",") if b]
    for sc in args.scales:
        if sc not in SCALES:
            ap.error("unknown scale {} (n or s)".format(sc))

    device_name = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    method = "median of {} measurements of back-to-back calls ({}), per call".format(
        args.repeats, "CUDA events" if args.device == "cuda" else "host clock")
    print("PyTorch {} peers on {}: PSA Attention block, {} channels_last, BatchNorm folded; {}".format(
        torch.__version__, device_name, str(run_dtype(args.device)).replace("torch.", ""), method))
    checks = self_check(args)
    checks_ok = True
    for name, err, tol in checks:
        if err is None:
            print("  self-check n/a  {:<40} {}".format(name, tol))
            continue
        ok = err <= tol
        checks_ok &= ok
        print("  self-check {} {:<40} max|out - ref|/max|ref| = {:.2e} (<= {:g})".format(
            "PASS" if ok else "FAIL", name, err, tol))
    print("{:<14} {:<15} {:<14} {:>10}  {}".format("row", "attention", "mode", "us", "note"), flush=True)
    rows = run_rows(args, shapes)

    if args.json:
        with open(args.json, "w") as f:
            f.write(json.dumps({
                "kind": "meta", "impl": "pytorch", "implementation": "PyTorch " + torch.__version__,
                "device": device_name, "dtype": str(run_dtype(args.device)).replace("torch.", ""), "method": method,
                "self_check": [{"name": n, "rel_err": e, "bound": t if e is not None else None,
                                "error": None if e is not None else t} for n, e, t in checks],
                "self_check_ok": checks_ok,
                "cudnn": torch.backends.cudnn.version() if args.device == "cuda" else None,
                "compile_mode": args.compile_mode,
                "state": {sc: {k: list(v.shape) for k, v in Block(*SCALES[sc]).state_dict().items()
                               if not k.endswith("num_batches_tracked")} for sc in args.scales},
            }) + "\n")
            for r in rows:
                f.write(json.dumps(r) + "\n")
    if not checks_ok:
        print("psa_peer.py: a peer does not reproduce the unfolded block (see the self-check lines)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
