#!/usr/bin/env python3
"""Fixture for YOLO26's Attention block (the PSABlock's attn), written from ../shared/YOLO26.md (Attention):

    qkv = Conv(dim, 2*dim, 1, act=False)(x)              # Conv = conv2d (no bias) -> BatchNorm2d(eps 1e-3), no SiLU
    per head h: channels [h*4kd, (h+1)*4kd) = [Q (kd) | K (kd) | V (2kd)], N = H*W channel-major
    attn = softmax over keys of (q^T k * kd^-0.5)
    out  = (v @ attn^T).view(B, dim, H, W) + pe(v.view(B, dim, H, W))   # pe = Conv(dim, dim, 3, g=dim, act=False)
    y    = proj(out)                                      # proj = Conv(dim, dim, 1, act=False)

computed directly (a softmax over an explicit score matrix), in float64, from float32 inputs and parameters with
random BatchNorm statistics. It stores the parameters by their ultralytics names under the prefix "attn.", the input
x, a projection r, y in eval mode (BatchNorm on running statistics), and for training mode (batch statistics) y, the
loss mean(y * r) and the gradients of the loss with respect to x and every parameter ("grad.<name>").

    /usr/bin/python3 tools/reference/make_attention_fixture.py tests/fixtures/attention_dim64_h2.safetensors
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_io import write_safetensors  # noqa: E402

DIM, HEADS, B, H, W = 64, 2, 2, 4, 5
EPS = 1e-3


def conv_bn(x, p, name, groups=1, train=False):
    w = p[name + ".conv.weight"]
    k = w.shape[-1]
    z = torch.nn.functional.conv2d(x, w, padding=k // 2, groups=groups)
    g, b = p[name + ".bn.weight"], p[name + ".bn.bias"]
    if train:
        mean = z.mean(dim=(0, 2, 3))
        var = z.var(dim=(0, 2, 3), unbiased=False)
    else:
        mean, var = p[name + ".bn.running_mean"], p[name + ".bn.running_var"]
    s = g / torch.sqrt(var + EPS)
    return (z - mean[None, :, None, None]) * s[None, :, None, None] + b[None, :, None, None]


def attention(x, p, train):
    b, c, h, w = x.shape
    n, hd = h * w, c // HEADS
    kd = hd // 2
    qkv = conv_bn(x, p, "attn.qkv", train=train)
    qkv = qkv.view(b, HEADS, 2 * kd + hd, n)
    q, k, v = qkv[:, :, :kd], qkv[:, :, kd:2 * kd], qkv[:, :, 2 * kd:]
    scores = torch.einsum("bhdi,bhdj->bhij", q, k) * kd ** -0.5      # [b, h, query i, key j]
    attn = torch.softmax(scores, dim=-1)
    o = torch.einsum("bhdj,bhij->bhdi", v, attn).reshape(b, c, h, w)
    o = o + conv_bn(v.reshape(b, c, h, w), p, "attn.pe", groups=c, train=train)
    return conv_bn(o, p, "attn.proj", train=train)


def params(gen):
    p = {}
    kd = DIM // HEADS // 2
    shapes = {"attn.qkv": (4 * kd * HEADS, DIM, 1, 1), "attn.pe": (DIM, 1, 3, 3), "attn.proj": (DIM, DIM, 1, 1)}
    for name, shape in shapes.items():
        fan_in = shape[1] * shape[2] * shape[3]
        p[name + ".conv.weight"] = (torch.rand(shape, generator=gen) * 2 - 1) * fan_in ** -0.5
        c = shape[0]
        p[name + ".bn.weight"] = torch.rand(c, generator=gen) + 0.5
        p[name + ".bn.bias"] = torch.rand(c, generator=gen) * 2 - 1
        p[name + ".bn.running_mean"] = (torch.rand(c, generator=gen) * 2 - 1) * 0.5
        p[name + ".bn.running_var"] = torch.rand(c, generator=gen) * 1.8 + 0.2
    return {k: v.float() for k, v in p.items()}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/attention_dim64_h2.safetensors"
    gen = torch.Generator().manual_seed(2026)
    p32 = params(gen)
    x32 = torch.rand((B, DIM, H, W), generator=gen) * 2 - 1
    r32 = torch.rand((B, DIM, H, W), generator=gen) * 2 - 1
    p = {k: v.double().requires_grad_(not k.endswith(("running_mean", "running_var"))) for k, v in p32.items()}
    x = x32.double().requires_grad_(True)
    with torch.no_grad():
        y_eval = attention(x, p, train=False)
    y_train = attention(x, p, train=True)
    loss = (y_train * r32.double()).mean()
    trainable = [k for k in sorted(p) if p[k].requires_grad]
    grads = torch.autograd.grad(loss, [x] + [p[k] for k in trainable])
    tensors = dict(p32)
    tensors.update({"x": x32, "r": r32, "y_eval": y_eval, "y_train": y_train, "loss": loss.reshape(1),
                    "grad.x": grads[0]})
    tensors.update({"grad." + k: g for k, g in zip(trainable, grads[1:])})
    write_safetensors(out, tensors, {"dim": str(DIM), "heads": str(HEADS), "maker": "tools/reference/"
                                     "make_attention_fixture.py", "torch": torch.__version__})
    print(f"wrote {out}: loss {loss.item():.6f}, |y_eval| {y_eval.norm().item():.4f}")


if __name__ == "__main__":
    main()
