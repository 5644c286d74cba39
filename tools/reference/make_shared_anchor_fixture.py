#!/usr/bin/env python3
"""Fixture for the assigner's shared-anchor rule (YOLO26.md, Loss: "Shared anchors, exactly as ultralytics'
select_highest_overlaps"): a crowded batch of 2 images of 128x128 (336 anchors), 3 classes, 40 heavily overlapping
boxes each (M = 48 rows, garbage past each count), predictions jittered around a gt holding each anchor, so that
anchors kept after top-k by several gts are common and the gt of the highest overlap often did not claim them.

Both heads' options run on the same predictions: o2m (topk 10) and o2o (topk 7, topk2 1). The case is redrawn (next
seed) until (1) no decision lies within rounding of a tie (make_loss_fixture.fragile) and the float32 reference assigns
as the float64 one does, and (2) in BOTH heads the rule decides assignments: the float64 assignment differs from the
superseded rule (the claiming gt of the highest overlap only: yolo26_loss.assign(claiming_only=True)) at one anchor or
more -- asserted, so that the fixture cannot silently stop testing the rule. Stored:

    boxes [2, 4, 336]   predicted xyxy in grid units (what the assigner reads; the detect decode's grid mode)
    logits [2, 3, 336]  raw class logits
    targets [2, 48, 5]  (class, x1, y1, x2, y2) in input pixels; count [2] i32
    assign.<head>.gt_index [2, 336] i32        the float64 assignment (-1: background)
    assign.<head>.target_scores [2, 3, 336]    its soft targets (float64 rounded to f32)
    claiming_only.<head>.gt_index [2, 336] i32 the superseded rule's assignment, which must differ

for <head> in o2m, o2o (options in the metadata).

    /usr/bin/python3 tools/reference/make_shared_anchor_fixture.py tests/fixtures/yolo26_shared_anchors.safetensors
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_loss_fixture  # noqa: E402
from fixture_io import write_safetensors  # noqa: E402
from yolo26_loss import ONE_TO_MANY, ONE_TO_ONE, anchor_grid, assign  # noqa: E402

B, NC, M, H, W = 2, 3, 48, 128, 128
BOXES = 40  # per image
HEADS = {"o2m": ONE_TO_MANY, "o2o": ONE_TO_ONE}


def draw_case(gen):
    """targets [B, M, 5], count [B], boxes [B, 4, A] (grid units), logits [B, NC, A], all float32."""
    u = lambda *shape: torch.rand(shape, generator=gen, dtype=torch.float64)  # noqa: E731
    targets = torch.empty((B, M, 5), dtype=torch.float64)
    for b in range(B):
        for g in range(M):
            if g >= BOXES:
                targets[b, g] = torch.tensor([1e6, -5.0, 7.0, 3.0, 1e9])  # garbage past the count
                continue
            bw, bh = 16 + 48 * u(1).item(), 16 + 48 * u(1).item()  # no STAL widening: sides >= 16 px
            x1, y1 = u(1).item() * (W - bw), u(1).item() * (H - bh)
            targets[b, g] = torch.tensor([int(u(1).item() * NC) % NC, x1, y1, x1 + bw, y1 + bh])
    targets = targets.float()
    ax, ay, stride = anchor_grid(H, W)
    A = ax.numel()
    boxes = torch.empty((B, 4, A), dtype=torch.float64)
    for b in range(B):
        rows = targets[b, :BOXES].double()
        for a in range(A):
            s = stride[a].item()
            x, y = ax[a].item() * s, ay[a].item() * s
            holders = [g for g in range(BOXES) if rows[g, 1] < x < rows[g, 3] and rows[g, 2] < y < rows[g, 4]]
            if not holders or u(1).item() < 0.1:
                cx, cy = u(1).item() * W, u(1).item() * H
                bw, bh = 8 + u(1).item() * 56, 8 + u(1).item() * 56
                p = [cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2]
            else:
                r = rows[holders[int(u(1).item() * len(holders)) % len(holders)]].tolist()
                sx, sy = 0.12 * (r[3] - r[1]), 0.12 * (r[4] - r[2])
                n = torch.randn(4, generator=gen, dtype=torch.float64).tolist()
                p = [r[1] + n[0] * sx, r[2] + n[1] * sy, r[3] + n[2] * sx, r[4] + n[3] * sy]
                p = [min(p[0], p[2]), min(p[1], p[3]), max(p[0], p[2]), max(p[1], p[3])]
            boxes[b, :, a] = torch.tensor(p) / s
    logits = u(B, NC, A) * 8 - 4
    return targets, torch.full((B,), BOXES, dtype=torch.int32), boxes.float(), logits.float()


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/yolo26_shared_anchors.safetensors"
    torch.use_deterministic_algorithms(True)
    make_loss_fixture.H, make_loss_fixture.W = H, W
    grid = anchor_grid(H, W)
    ax, ay, _ = grid
    for seed in range(3033, 3233):
        targets, count, boxes, logits = draw_case(torch.Generator().manual_seed(seed))
        # fragile() takes raw LTRB distances; these decode back to the boxes (to float64 rounding).
        ltrb = torch.stack((ax - boxes[:, 0].double(), ay - boxes[:, 1].double(), boxes[:, 2].double() - ax,
                            boxes[:, 3].double() - ay), dim=1)
        reasons = [f"{h}: {r}" for h, opts in HEADS.items()
                   for r in make_loss_fixture.fragile(ltrb, logits, targets, count, opts)]
        out, changed = {}, {}
        for h, opts in HEADS.items():
            a64 = assign(logits.double(), boxes.double(), grid, targets.double(), count, **opts)
            a32 = assign(logits, boxes, anchor_grid(H, W, torch.float32), targets, count, **opts)
            old = assign(logits.double(), boxes.double(), grid, targets.double(), count, claiming_only=True, **opts)
            if not torch.equal(a64["gt_index"], a32["gt_index"]):
                reasons.append(f"{h}: the float32 reference assigns differently")
            changed[h] = int((a64["gt_index"] != old["gt_index"]).sum())
            if changed[h] == 0:
                reasons.append(f"{h}: the shared-anchor rule changes no assignment")
            out[h] = (a64, old)
        if not reasons:
            break
        print(f"seed {seed}: redrawn ({'; '.join(reasons)})")
    else:
        sys.exit("no robust case in 200 seeds")
    assert all(changed[h] > 0 for h in HEADS), changed  # the fixture must tell the two rules apart in both heads

    tensors = {"boxes": boxes, "logits": logits, "targets": targets, "count": count}
    meta = {"maker": "tools/reference/make_shared_anchor_fixture.py", "seed": str(seed), "image_h": str(H),
            "image_w": str(W), "torch": torch.__version__}
    for h, (a64, old) in out.items():
        tensors[f"assign.{h}.gt_index"] = a64["gt_index"].to(torch.int32)
        tensors[f"assign.{h}.target_scores"] = a64["target_scores"]
        tensors[f"claiming_only.{h}.gt_index"] = old["gt_index"].to(torch.int32)
        meta[f"options.{h}"] = f"topk={HEADS[h]['topk']},topk2={HEADS[h]['topk2']}"
    write_safetensors(path, tensors, meta)
    for h, (a64, old) in out.items():
        gi, og = a64["gt_index"], old["gt_index"]
        print(f"{h}: {int((gi >= 0).sum())} positives, {changed[h]} anchors assigned otherwise than by the claiming "
              f"gts only ({int(((gi >= 0) & (og >= 0) & (gi != og)).sum())} to another gt, "
              f"{int(((gi < 0) & (og >= 0)).sum())} to background, {int(((gi >= 0) & (og < 0)).sum())} from it)")
    print(f"wrote {path} (seed {seed}, {os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
