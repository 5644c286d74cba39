#!/usr/bin/env python3
"""PyTorch peer of bench_train: one YOLO26 training step — the tools/reference/ model in training mode (both heads, the
one-to-one head on detached features, BatchNorm batch statistics), E2ELoss from tools/reference/yolo26_loss.py with
both assigners, backward, grad-norm clipping at 10, Nesterov SGD with weight decay on weights only, and an EMA update
— on random images with 1-16 random boxes each (as bench_train makes them), batch 64 at 640 by default.

    peer.py [--scales n,s] [--modes f32,bf16] [--batch 64] [--imgsz 640] [--steps 10] [--warmup 3] [--json FILE]
    /usr/bin/python3 bench/train/peer.py --device cpu --quick      # tiny, a logic check on the CPU
    torchrun --nproc_per_node N peer.py --ddp …                    # DistributedDataParallel, --batch images a rank

Modes: f32 (TF32 off), tf32 (f32 with TF32 allowed in cuDNN and cuBLAS), bf16 (torch.autocast bf16; f32 master
weights), channels-last variants with --channels-last.
Each step is waited for (the loss is read back, as ours does). Prints one table; --json writes JSON lines for run.sh.
--ddp (under torchrun, bench/train/run_dist.sh): each rank a GPU (NCCL; gloo on the CPU) and --batch images, the
model wrapped in DistributedDataParallel as ultralytics' DDP trains it; the ranks start each step together (a barrier)
and rank 0 prints the job's images/s from the slowest rank's median step.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch

_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(_here, "..", "..", "tools", "reference")]
import yolo26_model as ym  # noqa: E402
from yolo26_loss import e2e_loss  # noqa: E402


def random_batch(batch, size, nc, seed, device):
    g = torch.Generator().manual_seed(seed)
    images = torch.rand(batch, 3, size, size, generator=g)
    count = torch.randint(1, 17, (batch,), generator=g, dtype=torch.int32)
    side = 16 + torch.rand(batch, 16, 2, generator=g) * (size / 3 - 16)
    xy = torch.rand(batch, 16, 2, generator=g) * (size - side)
    cls = torch.randint(0, nc, (batch, 16, 1), generator=g).float()
    targets = torch.cat((cls, xy, xy + side), -1)
    return images.to(device), targets.to(device), count.to(device)


def optimizer_for(model, lr=0.01, momentum=0.937, decay=5e-4):
    weights, norms, biases = [], [], []
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if name == "bias":
                biases.append(p)
            elif isinstance(module, torch.nn.BatchNorm2d):
                norms.append(p)
            else:
                weights.append(p)
    return torch.optim.SGD([{"params": biases, "weight_decay": 0.0}, {"params": norms, "weight_decay": 0.0},
                            {"params": weights, "weight_decay": decay}], lr=lr, momentum=momentum, nesterov=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--scales", default="n,s")
    p.add_argument("--modes", default="f32,bf16")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--imgsz", type=int, default=640)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--device", default="cuda")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json")
    p.add_argument("--ddp", action="store_true")
    a = p.parse_args()
    if a.quick:
        a.scales, a.batch, a.imgsz, a.steps, a.warmup = "n", 2, 128, 2, 1
    rank, world, dev = 0, 1, a.device
    if a.ddp:
        import torch.distributed as dist
        dist.init_process_group("nccl" if a.device == "cuda" else "gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        if a.device == "cuda":
            local = int(os.environ.get("LOCAL_RANK", "0"))
            torch.cuda.set_device(local)
            dev = f"cuda:{local}"
    lead = rank == 0
    if not lead:
        sys.stdout = open(os.devnull, "w")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    images, targets, count = random_batch(a.batch, a.imgsz, 80, 1 + rank, dev)
    rows = []
    print(f"PyTorch {torch.__version__} YOLO26 training step (forward, E2ELoss, backward, clip 10, SGD nesterov, EMA), "
          f"batch {a.batch}" + (f" a rank on {world} ranks (DistributedDataParallel)" if a.ddp else "") +
          f", {a.imgsz}x{a.imgsz}, 80 classes, on {a.device}")
    print(f"{'scale':<6} {'mode':<5} {'ms/step':>10} {'img/s':>9}")
    for scale in a.scales.split(","):
        for mode in a.modes.split(","):
            torch.manual_seed(0)
            torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
            torch.backends.cudnn.allow_tf32 = mode == "tf32"
            model = ym.YOLO26(scale, 80).to(dev).train()
            model.model[23].bias_init()
            fmt = torch.channels_last if a.channels_last else torch.contiguous_format
            model = model.to(memory_format=fmt)
            x = images.contiguous(memory_format=fmt)
            ema = [t.detach().clone() for t in model.state_dict().values() if t.is_floating_point()]
            opt = optimizer_for(model)
            live_model = model
            if a.ddp:
                model = torch.nn.parallel.DistributedDataParallel(
                    model, device_ids=[torch.cuda.current_device()] if a.device == "cuda" else None)

            def step():
                with torch.autocast(device_type="cuda" if a.device == "cuda" else "cpu", dtype=torch.bfloat16,
                                    enabled=mode == "bf16"):
                    out = model(x)
                heads = {"o2m": tuple(t.float() for t in out["one2many"]),
                         "o2o": tuple(t.float() for t in out["one2one"])}
                total, components, _, _ = e2e_loss(heads, targets, count, (a.imgsz, a.imgsz), 0.8, 0.2)
                total.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
                opt.step()
                opt.zero_grad(set_to_none=True)
                with torch.no_grad():
                    live = [t for t in live_model.state_dict().values() if t.is_floating_point()]
                    torch._foreach_mul_(ema, 0.9)
                    torch._foreach_add_(ema, live, alpha=0.1)
                return float(total)

            for _ in range(a.warmup):
                step()
            times = []
            for _ in range(a.steps):
                if a.device == "cuda":
                    torch.cuda.synchronize()
                if a.ddp:
                    dist.barrier()  # the ranks start each step together
                t0 = time.perf_counter()
                loss = step()
                if a.device == "cuda":
                    torch.cuda.synchronize()
                times.append((time.perf_counter() - t0) * 1000)
            ms = statistics.median(times)
            if a.ddp:  # the slowest rank's median
                slowest = torch.tensor([ms], dtype=torch.float64, device=dev)
                dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
                ms = float(slowest)
            assert math.isfinite(loss)
            print(f"{scale:<6} {mode:<5} {ms:>10.2f} {a.batch * world * 1000 / ms:>9.1f}")
            sys.stdout.flush()
            rows.append(dict(side="pytorch", scale=scale, dtype=mode, batch=a.batch, imgsz=a.imgsz, ms=ms,
                             channels_last=a.channels_last, ranks=world,
                             images_per_second=a.batch * world * 1000 / ms))
            del model, live_model, opt, ema
            if a.device == "cuda":
                torch.cuda.empty_cache()
    if a.json and lead:
        with open(a.json, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
    if "torch.distributed" in sys.modules and sys.modules["torch.distributed"].is_initialized():
        sys.modules["torch.distributed"].destroy_process_group()
