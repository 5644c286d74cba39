"""An independent PyTorch YOLO26 written from ../shared/YOLO26.md (not from ultralytics' code): the five scales, any nc,
both Detect heads, the decode and the two postprocesses (end-to-end top-k, class-aware NMS).

Module and attribute names follow the ultralytics state_dict keys (model.<layer>.cv1.conv.weight, ...,
model.23.one2one_cv3.2.2.bias), so a state_dict of this model is a checkpoint the C++ engine loads by name.

Numerics: the model computes in the dtype of its parameters and input (float64 for the reference, float32 for the
peer error). NUMERICS.f16 = True emulates an f16 inference instead (eval mode only): BatchNorm folded into the
convolutions in float64, weights, biases and every op's output rounded to f16, arithmetic in f32 (what an f16 GPU
inference with f32 accumulation does); the attention probabilities are rounded to f16 too (as FlashAttention does
before its P·V product).

    python3 -c "import yolo26_model as y; print(y.parameter_count(y.YOLO26('n')))"   # 2572280
"""
import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

BN_EPS = 1e-3
BN_MOMENTUM = 0.03
STRIDES = (8, 16, 32)
# depth multiple, width multiple, max channels
SCALES = {
    "n": (0.50, 0.25, 1024),
    "s": (0.50, 0.50, 1024),
    "m": (0.50, 1.00, 512),
    "l": (1.00, 1.00, 512),
    "x": (1.00, 1.50, 512),
}


class Numerics:
    f16 = False


NUMERICS = Numerics()


def r16(t):
    """t as f16 holds it (under f16 emulation), else t."""
    return t.half().to(t.dtype) if NUMERICS.f16 else t


def folded(conv, bn):
    """conv → BatchNorm (running statistics) as one convolution's weight and bias, computed in float64."""
    scale = bn.weight.double() / torch.sqrt(bn.running_var.double() + bn.eps)
    w = conv.weight.double() * scale[:, None, None, None]
    b = bn.bias.double() - bn.running_mean.double() * scale
    return w.to(conv.weight.dtype), b.to(conv.weight.dtype)


class Conv(nn.Module):
    """Conv2d (no bias, "same" padding) → BatchNorm2d(eps 1e-3, momentum 0.03) → SiLU (none when act is False)."""

    def __init__(self, c1, c2, k=1, s=1, g=1, act=True):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, k // 2, groups=g, bias=False)
        self.bn = nn.BatchNorm2d(c2, eps=BN_EPS, momentum=BN_MOMENTUM)
        self.use_act = act

    def forward(self, x):
        if NUMERICS.f16:
            w, b = folded(self.conv, self.bn)
            c = self.conv
            y = r16(F.conv2d(x, r16(w), r16(b), c.stride, c.padding, groups=c.groups))
        else:
            y = self.bn(self.conv(x))
        return r16(F.silu(y)) if self.use_act else y


class DWConv(Conv):
    """Conv with groups = gcd(c1, c2)."""

    def __init__(self, c1, c2, k=1, s=1, act=True):
        super().__init__(c1, c2, k, s, g=math.gcd(c1, c2), act=act)


class HeadConv(nn.Conv2d):
    """The plain 1×1 Conv2d with a bias that ends each Detect branch."""

    def __init__(self, c1, c2):
        super().__init__(c1, c2, 1)

    def forward(self, x):
        return r16(F.conv2d(x, r16(self.weight), r16(self.bias)))


class Bottleneck(nn.Module):
    def __init__(self, c1, c2, shortcut=True, g=1, k=(3, 3), e=0.5):
        super().__init__()
        c_ = int(c2 * e)
        self.cv1 = Conv(c1, c_, k[0])
        self.cv2 = Conv(c_, c2, k[1], g=g)
        self.add = shortcut and c1 == c2

    def forward(self, x):
        y = self.cv2(self.cv1(x))
        return r16(x + y) if self.add else y


class C3k(nn.Module):
    """cv3(cat(m(cv1(x)), cv2(x))), m = n Bottlenecks (e = 1.0, k × k)."""

    def __init__(self, c1, c2, n=2, shortcut=True, g=1, e=0.5, k=3):
        super().__init__()
        c_ = int(c2 * e)
        self.cv1 = Conv(c1, c_, 1)
        self.cv2 = Conv(c1, c_, 1)
        self.cv3 = Conv(2 * c_, c2, 1)
        self.m = nn.Sequential(*(Bottleneck(c_, c_, shortcut, g, k=(k, k), e=1.0) for _ in range(n)))

    def forward(self, x):
        return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), 1))


class Attention(nn.Module):
    def __init__(self, dim, num_heads, attn_ratio=0.5):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.key_dim = int(self.head_dim * attn_ratio)
        self.scale = self.key_dim ** -0.5
        self.qkv = Conv(dim, dim + 2 * self.key_dim * num_heads, 1, act=False)
        self.proj = Conv(dim, dim, 1, act=False)
        self.pe = Conv(dim, dim, 3, g=dim, act=False)

    def forward(self, x):
        b, c, h, w = x.shape
        n, kd, hd = h * w, self.key_dim, self.head_dim
        qkv = self.qkv(x).view(b, self.num_heads, 2 * kd + hd, n)
        q, k, v = qkv[:, :, :kd], qkv[:, :, kd:2 * kd], qkv[:, :, 2 * kd:]
        scores = torch.einsum("bhdi,bhdj->bhij", q, k) * self.scale  # [b, heads, query, key]
        attn = r16(torch.softmax(scores, dim=-1))
        out = r16(torch.einsum("bhdj,bhij->bhdi", v, attn)).reshape(b, c, h, w)
        out = r16(out + self.pe(v.reshape(b, c, h, w)))
        return self.proj(out)


class PSABlock(nn.Module):
    def __init__(self, c, attn_ratio=0.5, num_heads=4, shortcut=True):
        super().__init__()
        self.attn = Attention(c, num_heads, attn_ratio)
        self.ffn = nn.Sequential(Conv(c, 2 * c, 1), Conv(2 * c, c, 1, act=False))
        self.add = shortcut

    def forward(self, x):
        x = r16(x + self.attn(x)) if self.add else self.attn(x)
        return r16(x + self.ffn(x)) if self.add else self.ffn(x)


class C3k2(nn.Module):
    """A C2f: cv1 → 2c channels, split, each block feeds the next, concat all, cv2."""

    def __init__(self, c1, c2, n=1, c3k=False, e=0.5, attn=False, g=1, shortcut=True):
        super().__init__()
        self.c = c = int(c2 * e)
        self.cv1 = Conv(c1, 2 * c, 1)
        self.cv2 = Conv((2 + n) * c, c2, 1)

        def block():
            if attn:
                return nn.Sequential(Bottleneck(c, c, shortcut, g), PSABlock(c, 0.5, max(c // 64, 1)))
            if c3k:
                return C3k(c, c, 2, shortcut, g)
            return Bottleneck(c, c, shortcut, g)

        self.m = nn.ModuleList(block() for _ in range(n))

    def forward(self, x):
        y = list(self.cv1(x).split((self.c, self.c), 1))
        for m in self.m:
            y.append(m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class SPPF(nn.Module):
    """YOLO26's form: cv1 without SiLU, n chained max-pools, cv2, plus x when shortcut and c1 == c2."""

    def __init__(self, c1, c2, k=5, n=3, shortcut=False):
        super().__init__()
        c_ = c1 // 2
        self.cv1 = Conv(c1, c_, 1, act=False)
        self.cv2 = Conv(c_ * (n + 1), c2, 1)
        self.k, self.n = k, n
        self.add = shortcut and c1 == c2

    def forward(self, x):
        y = [self.cv1(x)]
        for _ in range(self.n):
            y.append(F.max_pool2d(y[-1], self.k, 1, self.k // 2))
        out = self.cv2(torch.cat(y, 1))
        return r16(out + x) if self.add else out


class C2PSA(nn.Module):
    def __init__(self, c1, c2, n=1, e=0.5):
        super().__init__()
        assert c1 == c2
        self.c = c = int(c1 * e)
        self.cv1 = Conv(c1, 2 * c, 1)
        self.cv2 = Conv(2 * c, c1, 1)
        self.m = nn.Sequential(*(PSABlock(c, attn_ratio=0.5, num_heads=c // 64) for _ in range(n)))

    def forward(self, x):
        a, b = self.cv1(x).split((self.c, self.c), 1)
        return self.cv2(torch.cat((a, self.m(b)), 1))


class Detect(nn.Module):
    """reg_max = 1: per level a box branch (→ 4 raw LTRB distances) and a class branch (→ nc logits); one-to-many
    heads cv2/cv3 and their one-to-one copies."""

    def __init__(self, nc, ch):
        super().__init__()
        c2 = max(16, ch[0] // 4, 4)
        c3 = max(ch[0], min(nc, 100))
        self.nc = nc
        self.cv2 = nn.ModuleList(nn.Sequential(Conv(x, c2, 3), Conv(c2, c2, 3), HeadConv(c2, 4)) for x in ch)
        self.cv3 = nn.ModuleList(
            nn.Sequential(nn.Sequential(DWConv(x, x, 3), Conv(x, c3, 1)),
                          nn.Sequential(DWConv(c3, c3, 3), Conv(c3, c3, 1)), HeadConv(c3, nc)) for x in ch)
        self.one2one_cv2 = copy.deepcopy(self.cv2)
        self.one2one_cv3 = copy.deepcopy(self.cv3)

    @staticmethod
    def head(features, cv2, cv3):
        ltrb = torch.cat([cv2[i](f).flatten(2) for i, f in enumerate(features)], 2)
        logits = torch.cat([cv3[i](f).flatten(2) for i, f in enumerate(features)], 2)
        return ltrb, logits

    def forward(self, features):
        """{"one2many": (ltrb [B, 4, A], logits [B, nc, A]), "one2one": (...)}; the one-to-one head sees the features
        detached."""
        return {"one2many": self.head(features, self.cv2, self.cv3),
                "one2one": self.head([f.detach() for f in features], self.one2one_cv2, self.one2one_cv3)}

    def bias_init(self):
        """Box bias 2.0, class bias log(5 / nc / (640 / stride)²), both heads."""
        for cv2, cv3 in ((self.cv2, self.cv3), (self.one2one_cv2, self.one2one_cv3)):
            for box, cls, s in zip(cv2, cv3, STRIDES):
                box[-1].bias.data.fill_(2.0)
                cls[-1].bias.data.fill_(math.log(5 / self.nc / (640 / s) ** 2))


class Upsample(nn.Module):
    def forward(self, x):
        return F.interpolate(x, scale_factor=2, mode="nearest")


class YOLO26(nn.Module):
    def __init__(self, scale="n", nc=80):
        super().__init__()
        depth, width, max_ch = SCALES[scale]

        def ch(c):
            return math.ceil(min(c, max_ch) * width / 8) * 8

        def rep(n):
            return max(round(n * depth), 1) if n > 1 else n

        c3k = scale in "mlx"  # forced True at m/l/x
        self.scale, self.nc = scale, nc
        layers = [
            Conv(3, ch(64), 3, 2),                                   # 0
            Conv(ch(64), ch(128), 3, 2),                             # 1
            C3k2(ch(128), ch(256), rep(2), c3k, 0.25),               # 2
            Conv(ch(256), ch(256), 3, 2),                            # 3
            C3k2(ch(256), ch(512), rep(2), c3k, 0.25),               # 4
            Conv(ch(512), ch(512), 3, 2),                            # 5
            C3k2(ch(512), ch(512), rep(2), True),                    # 6
            Conv(ch(512), ch(1024), 3, 2),                           # 7
            C3k2(ch(1024), ch(1024), rep(2), True),                  # 8
            SPPF(ch(1024), ch(1024), 5, 3, True),                    # 9
            C2PSA(ch(1024), ch(1024), rep(2)),                       # 10
            Upsample(),                                              # 11
            nn.Identity(),                                           # 12 concat(11, 6)
            C3k2(ch(1024) + ch(512), ch(512), rep(2), True),         # 13
            Upsample(),                                              # 14
            nn.Identity(),                                           # 15 concat(14, 4)
            C3k2(ch(512) + ch(512), ch(256), rep(2), True),          # 16 → P3
            Conv(ch(256), ch(256), 3, 2),                            # 17
            nn.Identity(),                                           # 18 concat(17, 13)
            C3k2(ch(256) + ch(512), ch(512), rep(2), True),          # 19 → P4
            Conv(ch(512), ch(512), 3, 2),                            # 20
            nn.Identity(),                                           # 21 concat(20, 10)
            C3k2(ch(512) + ch(1024), ch(1024), 1, True, 0.5, True),  # 22 → P5
            Detect(nc, (ch(256), ch(512), ch(1024))),                # 23
        ]
        self.model = nn.ModuleList(layers)

    def features(self, x):
        m = self.model
        y = {}
        for i in range(11):
            x = m[i](x)
            y[i] = x
        x = m[13](torch.cat((m[11](y[10]), y[6]), 1))
        y[13] = x
        p3 = m[16](torch.cat((m[14](x), y[4]), 1))
        p4 = m[19](torch.cat((m[17](p3), y[13]), 1))
        p5 = m[22](torch.cat((m[20](p4), y[10]), 1))
        return [p3, p4, p5]

    def forward(self, x):
        return self.model[23](self.features(x))


def parameter_count(model):
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------------------------------------------------------------
# Decode and postprocess


def anchor_grid(height, width, dtype=torch.float64):
    """[3, A]: anchor x, anchor y (cell centres in grid units) and stride; P3, P4, P5, each row-major."""
    parts = []
    for s in STRIDES:
        h, w = height // s, width // s
        ys, xs = torch.meshgrid(torch.arange(h, dtype=dtype) + 0.5, torch.arange(w, dtype=dtype) + 0.5, indexing="ij")
        parts.append(torch.stack((xs.flatten(), ys.flatten(), torch.full((h * w,), float(s), dtype=dtype))))
    return torch.cat(parts, 1)


def decode(ltrb, height, width):
    """Raw LTRB [B, 4, A] → xyxy boxes [B, 4, A] in input pixels."""
    g = anchor_grid(height, width, ltrb.dtype)
    ax, ay, s = g[0], g[1], g[2]
    return torch.stack((ax - ltrb[:, 0], ay - ltrb[:, 1], ax + ltrb[:, 2], ay + ltrb[:, 3]), 1) * s


def postprocess_e2e(boxes, logits, max_det=300, conf=0.25):
    """Per image: the top k = min(max_det, A) anchors by their best class score, then the top k of their k × nc
    (anchor, class) pairs → rows [x1, y1, x2, y2, score, class], then score > conf. Returns [B, max_det, 6] (zero rows
    after the kept ones) and the counts."""
    b, nc, a = logits.shape
    k = min(max_det, a)
    out = torch.zeros(b, max_det, 6, dtype=boxes.dtype)
    counts = torch.zeros(b, dtype=torch.int32)
    for i in range(b):
        scores = torch.sigmoid(logits[i]).T  # [A, nc]
        anchors = scores.max(1).values.topk(k).indices
        pairs = scores[anchors].flatten().topk(k)
        anchor = anchors[pairs.indices // nc]
        cls = pairs.indices % nc
        rows = torch.cat((boxes[i][:, anchor].T, pairs.values[:, None], cls[:, None].to(boxes.dtype)), 1)
        rows = rows[rows[:, 4] > conf]
        out[i, :len(rows)] = rows
        counts[i] = len(rows)
    return out, counts


def box_iou(a, b):
    """IoU of one xyxy box with each of boxes b [n, 4]."""
    iw = (torch.minimum(a[2], b[:, 2]) - torch.maximum(a[0], b[:, 0])).clamp(min=0)
    ih = (torch.minimum(a[3], b[:, 3]) - torch.maximum(a[1], b[:, 1])).clamp(min=0)
    inter = iw * ih
    area_a = (a[2] - a[0]) * (a[3] - a[1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    return inter / (area_a + area_b - inter)


def postprocess_nms(boxes, logits, max_det=300, conf=0.25, iou=0.7, max_nms=30000):
    """Class-aware greedy NMS over each anchor's best class (score > conf), by descending score, the first max_nms
    candidates; a box is dropped when its IoU with a kept box of its class is > iou; the first max_det kept."""
    b = logits.shape[0]
    out = torch.zeros(b, max_det, 6, dtype=boxes.dtype)
    counts = torch.zeros(b, dtype=torch.int32)
    for i in range(b):
        best = torch.sigmoid(logits[i]).max(0)
        keep = (best.values > conf).nonzero().flatten()
        order = keep[best.values[keep].argsort(descending=True)][:max_nms]
        kept = []
        for a in order.tolist():
            box, cls = boxes[i][:, a], best.indices[a]
            same = [j for j in kept if best.indices[j] == cls]
            if same and (box_iou(box, boxes[i][:, same].T) > iou).any():
                continue
            kept.append(a)
            if len(kept) == max_det:
                break
        for r, a in enumerate(kept):
            out[i, r, :4] = boxes[i][:, a]
            out[i, r, 4] = best.values[a]
            out[i, r, 5] = float(best.indices[a])
        counts[i] = len(kept)
    return out, counts
