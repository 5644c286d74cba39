"""YOLO26's training loss (E2ELoss) in PyTorch, written from ../shared/YOLO26.md (Loss, Detect head): the reference
the C++ loss is tested against (make_loss_fixture.py) and the peer its benchmark times (bench/loss/peer.py).

    E2ELoss = o2m * L(one-to-many head, topk 10) + o2o * L(one-to-one head, topk 7, topk2 1)
    L       = B * (7.5 * box + 0.5 * cls + 1.5 * l1)

per head, on the raw head outputs: LTRB distances [B, 4, A] and class logits [B, nc, A] (A = anchors of P3, P4, P5):

  * decode: anchors (x + 0.5, y + 0.5) in grid units of each level, P3 then P4 then P5, row-major; boxes (grid units)
    x1y1 = anchor - lt, x2y2 = anchor + rb.
  * TaskAlignedAssigner (alpha 0.5, beta 6, eps 1e-9, STAL 8 -> 16 px), run without gradient on detached predictions,
    in input pixels (predicted boxes and anchor centres times their stride). Its definition follows the C++ assigner's
    header (src/vision/models/yolo/kernels/loss/assigner.h), which fixes what YOLO26.md leaves open:
      candidate(g, a): the anchor centre strictly inside gt g (by more than eps) after STAL widening;
      overlap = max(CIoU(gt, pred), 0), align = sigmoid(logit of g's class)^alpha * overlap^beta, both 0 off the
        candidates (NaN counts as 0);
      each gt's top k anchors over ALL anchors by (align descending, anchor index ascending) -- ties toward the lower
        anchor index (YOLO26.md), here by stable sorts: the one place where we are deterministic and PyTorch's
        topk (order of equal values unspecified) is not -- of which the candidates are its claims;
      shared anchors, exactly as ultralytics' select_highest_overlaps: an anchor claimed by two or more gts goes to
        the argmax over ALL gts of the overlap (0 where a gt does not hold the anchor centre or is a padded row),
        first maximum = lowest gt index -- also a gt that did not claim it (and gt 0 when every overlap is 0); an
        anchor claimed by one gt stays with it;
      topk2: each gt keeps, of its positives after that step, those ranked < topk2 by align among all anchors (others
        0, ties toward the lower anchor index); an anchor its gt drops becomes background;
      soft target t = align * max_overlap_g / (max_align_g + eps) at the gt's class.
  * target_scores_sum N = max(sum of target scores, 1);
    cls = sum BCEWithLogits(logits, target_scores) / N over all B x nc x A;
    box = sum over positives (1 - CIoU(pred, target)) * w / N, w = target scores summed over classes, CIoU's alpha
      treated as a constant (computed without gradient);
    l1  = sum over positives mean_4 |pred_ltrb - target_ltrb| * scale * w / N, target_ltrb the target box as distances
      from the anchor, scale stride / image width for l, r and stride / image height for t, b.

Everything runs in the dtype and on the device of the inputs (float64 for fixtures, float32 on CUDA for the peer).
Written independently of ultralytics; nothing here is copied from it.
"""
import math

import torch
import torch.nn.functional as F

STRIDES = (8, 16, 32)
GAINS = (7.5, 0.5, 1.5)  # box, cls, dfl (the l1 term)
ONE_TO_MANY = dict(topk=10, topk2=0)
ONE_TO_ONE = dict(topk=7, topk2=1)


def anchor_grid(image_h, image_w, dtype=torch.float64, device="cpu"):
    """(x, y, stride) of every anchor, each [A]: P3, P4, P5, row-major, centres (col + 0.5, row + 0.5) in grid units."""
    xs, ys, ss = [], [], []
    for s in STRIDES:
        assert image_h % s == 0 and image_w % s == 0, "the input size must be a multiple of 32"
        h, w = image_h // s, image_w // s
        row = torch.arange(h, dtype=dtype, device=device) + 0.5
        col = torch.arange(w, dtype=dtype, device=device) + 0.5
        ys.append(row[:, None].expand(h, w).reshape(-1))
        xs.append(col[None, :].expand(h, w).reshape(-1))
        ss.append(torch.full((h * w,), float(s), dtype=dtype, device=device))
    return torch.cat(xs), torch.cat(ys), torch.cat(ss)


def decode(ltrb, ax, ay):
    """Raw LTRB distances [B, 4, A] -> xyxy boxes [B, 4, A] in grid units."""
    return torch.stack((ax - ltrb[:, 0], ay - ltrb[:, 1], ax + ltrb[:, 2], ay + ltrb[:, 3]), dim=1)


def ciou(b1, b2, eps=1e-7):
    """CIoU of xyxy boxes (last dim), YOLO26.md's formula; alpha is computed without gradient (a constant)."""
    b1x1, b1y1, b1x2, b1y2 = b1.unbind(-1)
    b2x1, b2y1, b2x2, b2y2 = b2.unbind(-1)
    w1, h1 = b1x2 - b1x1, b1y2 - b1y1 + eps
    w2, h2 = b2x2 - b2x1, b2y2 - b2y1 + eps
    inter = (torch.minimum(b1x2, b2x2) - torch.maximum(b1x1, b2x1)).clamp(min=0) * \
            (torch.minimum(b1y2, b2y2) - torch.maximum(b1y1, b2y1)).clamp(min=0)
    union = w1 * h1 + w2 * h2 - inter + eps
    iou = inter / union
    cw = torch.maximum(b1x2, b2x2) - torch.minimum(b1x1, b2x1)
    ch = torch.maximum(b1y2, b2y2) - torch.minimum(b1y1, b2y1)
    c2 = cw ** 2 + ch ** 2 + eps
    rho2 = ((b2x1 + b2x2 - b1x1 - b1x2) ** 2 + (b2y1 + b2y2 - b1y1 - b1y2) ** 2) / 4
    v = (4 / math.pi ** 2) * (torch.atan(w2 / h2) - torch.atan(w1 / h1)) ** 2
    with torch.no_grad():
        alpha = v / (v - iou + (1 + eps))
    return iou - (rho2 / c2 + v * alpha)


def _top_mask(values, k):
    """[..., A] bool: the k largest values of each row, ties toward the lower index (a stable descending sort)."""
    order = torch.sort(values, dim=-1, descending=True, stable=True).indices[..., :k]
    return torch.zeros_like(values, dtype=torch.bool).scatter_(-1, order, True)


@torch.no_grad()
def assign(logits, boxes, grid, targets, count, topk, topk2=0, alpha=0.5, beta=6.0, eps=1e-9, small_side=8.0,
           widened_side=16.0, details=False, claiming_only=False):
    """Task-aligned assignment of a batch. logits [B, nc, A], boxes [B, 4, A] xyxy grid units, grid = (ax, ay, stride)
    [A] each, targets [B, M, 5] (class, x1, y1, x2, y2 in input pixels), count [B] (rows past it are ignored).

    Returns target_boxes [B, 4, A] (the assigned gt / the anchor's stride, 0 elsewhere), target_scores [B, nc, A],
    gt_index [B, A] (int64, -1 for background); with details, also the [B, M, A] intermediates."""
    ax, ay, stride = grid
    B, nc, A = logits.shape
    M = targets.shape[1]
    dev, dt = logits.device, logits.dtype
    g_index = torch.arange(M, device=dev)
    valid = g_index[None, :] < count[:, None].to(dev)                        # [B, M]
    rows = torch.where(valid[..., None], targets.to(dt), torch.zeros((), dtype=dt, device=dev))
    cls = rows[..., 0].long().clamp(0, nc - 1)                                # [B, M]
    gt = rows[..., 1:5]                                                       # [B, M, 4] pixels

    # STAL: a side shorter than small_side becomes widened_side about the centre, for the candidate test only.
    centre = (gt[..., :2] + gt[..., 2:]) * 0.5
    side = gt[..., 2:] - gt[..., :2]
    side = torch.where(side < small_side, torch.full_like(side, widened_side), side)
    region = torch.cat((centre - side * 0.5, centre + side * 0.5), dim=-1)    # [B, M, 4]
    px, py = ax * stride, ay * stride                                          # [A]
    margin = torch.stack((px - region[..., 0, None], py - region[..., 1, None],
                          region[..., 2, None] - px, region[..., 3, None] - py)).amin(0)   # [B, M, A]
    candidate = (margin > eps) & valid[..., None]

    pred = (boxes * stride).transpose(1, 2)                                    # [B, A, 4] pixels
    raw_ciou = ciou(gt[:, :, None, :], pred[:, None, :, :])                   # [B, M, A]
    zero = torch.zeros((), dtype=dt, device=dev)
    overlap = torch.where(candidate, torch.nan_to_num(raw_ciou, nan=0.0).clamp(min=0), zero)
    score = torch.gather(torch.sigmoid(logits), 1, cls[:, :, None].expand(B, M, A))
    align = torch.where(candidate, score.pow(alpha) * overlap.pow(beta), zero)
    align = torch.nan_to_num(align, nan=0.0)

    claims = _top_mask(align, min(topk, A)) & candidate
    # Shared anchors (select_highest_overlaps): an anchor claimed by two or more gts goes to the argmax over ALL gts of
    # overlap[b, :, a] (0 where the gt does not hold the anchor or is a padded row), first maximum = lowest gt index,
    # whether or not that gt claimed it; an anchor claimed by one gt stays with it.
    # (claiming_only: the superseded rule -- the claiming gt of the highest overlap -- kept only so that
    # make_shared_anchor_fixture.py can assert that its fixture tells the two apart.)
    shared = claims.sum(dim=1) > 1                                             # [B, A]
    ranked = torch.where(claims, overlap, torch.full_like(overlap, -1.0)) if claiming_only else overlap
    best = ranked.amax(dim=1, keepdim=True)
    owner = torch.where(ranked == best, g_index[None, :, None], M).amin(dim=1)         # [B, A]
    positive = torch.where(shared[:, None, :], g_index[None, :, None] == owner[:, None, :], claims)
    if 0 < topk2 != topk:
        positive &= _top_mask(align * positive, topk2)

    max_align = (align * positive).amax(dim=-1, keepdim=True)
    max_overlap = (overlap * positive).amax(dim=-1, keepdim=True)
    soft = torch.where(positive, align * max_overlap / (max_align + eps), zero)      # [B, M, A]

    fg = positive.any(dim=1)                                                   # [B, A]
    gt_index = torch.where(fg, (positive.long() * g_index[None, :, None]).sum(dim=1), torch.full_like(owner, -1))
    safe = gt_index.clamp(min=0)
    anchor_cls = torch.gather(cls, 1, safe)                                    # [B, A]
    target_scores = torch.zeros((B, nc, A), dtype=dt, device=dev)
    target_scores.scatter_(1, anchor_cls[:, None, :], soft.sum(dim=1)[:, None, :])
    target_boxes = torch.gather(gt, 1, safe[..., None].expand(B, A, 4)).transpose(1, 2) / stride
    target_boxes = torch.where(fg[:, None, :], target_boxes, zero)
    out = dict(target_boxes=target_boxes, target_scores=target_scores, gt_index=gt_index)
    if details:
        out.update(valid=valid, gt=gt, side=gt[..., 2:] - gt[..., :2], margin=margin, candidate=candidate,
                   ciou=raw_ciou, overlap=overlap, align=align, claims=claims, positive=positive)
    return out


def head_loss(ltrb, logits, targets, count, image_hw, topk, topk2=0):
    """One head's loss terms (box, cls, l1), each divided by target_scores_sum (no gains, no batch factor), and the
    assignment. Positives are selected by masks over all anchors rather than by indexing, so that the whole loss runs
    without a host synchronisation (and can be captured in a CUDA graph)."""
    image_h, image_w = image_hw
    grid = anchor_grid(image_h, image_w, ltrb.dtype, ltrb.device)
    ax, ay, stride = grid
    boxes = decode(ltrb, ax, ay)
    a = assign(logits.detach(), boxes.detach(), grid, targets, count, topk, topk2)
    scores = a["target_scores"]
    n = scores.sum().clamp(min=1)
    cls = F.binary_cross_entropy_with_logits(logits, scores, reduction="none").sum() / n
    weight = scores.sum(dim=1)                                                 # [B, A], 0 off the positives
    fg = (a["gt_index"] >= 0)[:, None, :]                                      # [B, 1, A]
    target = a["target_boxes"]
    # CIoU of the positives; elsewhere a unit box against itself (CIoU 1, weight 0), which no gradient reaches.
    # (made on the device: a host list would be a host-to-device copy, which a CUDA graph capture refuses)
    unit = torch.zeros((1, 4, 1), dtype=ltrb.dtype, device=ltrb.device)
    unit[:, 2:] = 1.0
    pred_fg, target_fg = torch.where(fg, boxes, unit), torch.where(fg, target, unit)
    box = ((1 - ciou(pred_fg.transpose(1, 2), target_fg.transpose(1, 2))) * weight).sum() / n
    target_ltrb = torch.stack((ax - target[:, 0], ay - target[:, 1], target[:, 2] - ax, target[:, 3] - ay), dim=1)
    scale = torch.stack((stride / image_w, stride / image_h, stride / image_w, stride / image_h))   # [4, A]
    l1 = (ltrb * scale - target_ltrb * scale).abs().mean(dim=1)               # [B, A]
    l1 = torch.where(fg[:, 0], l1 * weight, torch.zeros_like(l1)).sum() / n
    return (box, cls, l1), a


def e2e_loss(heads, targets, count, image_hw, o2m, o2o):
    """heads: {"o2m": (ltrb, logits), "o2o": (ltrb, logits)}. Returns the total (what backward starts from), the
    logged components (the one-to-one head's gained terms: 7.5 box, 0.5 cls, 1.5 l1), each head's ungained terms and
    its assignment."""
    batch = targets.shape[0]
    terms, assignments = {}, {}
    for name, options in (("o2m", ONE_TO_MANY), ("o2o", ONE_TO_ONE)):
        ltrb, logits = heads[name]
        terms[name], assignments[name] = head_loss(ltrb, logits, targets, count, image_hw, **options)
    loss = {name: batch * sum(g * t for g, t in zip(GAINS, terms[name])) for name in terms}
    total = o2m * loss["o2m"] + o2o * loss["o2o"]
    components = torch.stack([g * t.detach() for g, t in zip(GAINS, terms["o2o"])])
    return total, components, terms, assignments
