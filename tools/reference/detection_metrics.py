#!/usr/bin/env python3
"""Detection metrics of `vision val` in float64 numpy, written from ../shared/YOLO26.md "Metrics" (the C++ twin is
src/vision/eval/metrics.cpp; its header lists the choices where YOLO26.md is silent, made identically here):

* IoU without epsilon (0 for an empty union); thresholds np.linspace(0.5, 0.95, 10).
* Matching: pairs with IoU >= t sorted by IoU descending with a STABLE sort reversed (np.argsort(kind="stable")[::-1]:
  equal IoUs, the later (label, detection) pair first), then unique by detection (first occurrence), then unique by
  label (first occurrence in the detection-ordered result).
* Detections of all images sorted by -score with a stable sort.
* P/R curves over 1000 confidences, mean F1 smoothed by a box filter of nf = round(0.1 * n * 2) // 2 + 1 points with
  nf // 2 edge copies on each side; the first maximum.

Run as a script to write the C++ test's fixture:

    /usr/bin/python3 tools/reference/detection_metrics.py tests/fixtures/detection_metrics.json
"""
import json
import sys

import numpy as np

THRESHOLDS = np.linspace(0.5, 0.95, 10)
EPS = 1e-16


def iou_matrix(a, b):
    """a (L, 4), b (D, 4) x1y1x2y2 float64 -> (L, D)."""
    w = np.clip(np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0]), 0.0, None)
    h = np.clip(np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1]), 0.0, None)
    inter = w * h
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def match(pred_boxes, pred_cls, gt_boxes, gt_cls):
    """-> (D, 10) bool: detection d is a true positive at threshold i."""
    tp = np.zeros((len(pred_boxes), len(THRESHOLDS)), dtype=bool)
    if len(pred_boxes) == 0 or len(gt_boxes) == 0:
        return tp
    iou = iou_matrix(gt_boxes, pred_boxes) * (gt_cls[:, None] == pred_cls[None, :])
    for i, t in enumerate(THRESHOLDS):
        li, di = np.nonzero(iou >= t)
        if len(li) == 0:
            continue
        order = np.argsort(iou[li, di], kind="stable")[::-1]
        li, di = li[order], di[order]
        _, keep = np.unique(di, return_index=True)
        li, di = li[keep], di[keep]
        _, keep = np.unique(li, return_index=True)
        tp[di[keep], i] = True
    return tp


def average_precision(recall, precision):
    mrec = np.concatenate(([0.0], recall, [1.0]))
    mpre = np.concatenate(([1.0], precision, [0.0]))
    mpre = np.maximum.accumulate(mpre[::-1])[::-1]
    x = np.linspace(0.0, 1.0, 101)
    return float(np.trapz(np.interp(x, mrec, mpre), x))


def smooth(y, fraction=0.1):
    nf = round(len(y) * fraction * 2) // 2 + 1
    pad = nf // 2
    yp = np.concatenate((np.full(pad, y[0]), y, np.full(pad, y[-1])))
    return np.convolve(yp, np.ones(nf) / nf, mode="valid")


def metrics(images, nc):
    """images: list of dicts with pred_boxes (D,4), pred_scores (D,) float32, pred_cls (D,), gt_boxes (L,4), gt_cls (L,)."""
    scores, classes, tps = [], [], []
    gt_all, class_images = [], np.zeros(nc, dtype=np.int64)
    per_image_tp = []
    for im in images:
        tp = match(im["pred_boxes"].astype(np.float64), im["pred_cls"], im["gt_boxes"].astype(np.float64),
                   im["gt_cls"])
        per_image_tp.append(tp)
        scores.append(im["pred_scores"].astype(np.float32).astype(np.float64))
        classes.append(im["pred_cls"])
        tps.append(tp)
        gt_all.append(im["gt_cls"])
        class_images[np.unique(im["gt_cls"]).astype(np.int64)] += 1
    conf = np.concatenate(scores) if scores else np.zeros(0)
    pcls = np.concatenate(classes) if classes else np.zeros(0, dtype=np.int64)
    tp = np.concatenate(tps) if tps else np.zeros((0, 10), dtype=bool)
    gcls = np.concatenate(gt_all) if gt_all else np.zeros(0, dtype=np.int64)
    order = np.argsort(-conf, kind="stable")
    conf, pcls, tp = conf[order], pcls[order], tp[order]

    present, counts = np.unique(gcls, return_counts=True)
    k = len(present)
    grid = np.linspace(0.0, 1.0, 1000)
    ap = np.zeros((k, 10))
    p_curve = np.zeros((k, 1000))
    r_curve = np.zeros((k, 1000))
    for ci, c in enumerate(present):
        sel = pcls == c
        if not sel.any():
            continue
        tpc = np.cumsum(tp[sel], axis=0).astype(np.float64)
        fpc = np.cumsum(~tp[sel], axis=0).astype(np.float64)
        recall = tpc / (counts[ci] + EPS)
        precision = tpc / (tpc + fpc)
        for j in range(10):
            ap[ci, j] = average_precision(recall[:, j], precision[:, j])
        r_curve[ci] = np.interp(-grid, -conf[sel], recall[:, 0], left=0.0)
        p_curve[ci] = np.interp(-grid, -conf[sel], precision[:, 0], left=1.0)
    out = {"images": len(images), "instances": int(len(gcls)), "classes": []}
    if k == 0:
        out.update(mp=0.0, mr=0.0, map50=0.0, map=0.0, fitness=0.0, best_index=0)
        return out, per_image_tp
    f1 = 2 * p_curve * r_curve / (p_curve + r_curve + EPS)
    smoothed = smooth(f1.mean(0), 0.1)
    best = int(smoothed.argmax())
    p, r = p_curve[:, best], r_curve[:, best]
    # The best index must not hinge on rounding: every index whose P/R differ from the best's scores clearly less.
    differ = np.any(p_curve != p[:, None], 0) | np.any(r_curve != r[:, None], 0)
    margin = float(smoothed[best] - smoothed[differ].max()) if differ.any() else 1.0
    for ci, c in enumerate(present):
        out["classes"].append({"cls": int(c), "images": int(class_images[c]), "instances": int(counts[ci]),
                               "precision": float(p[ci]), "recall": float(r[ci]), "ap": [float(v) for v in ap[ci]]})
    out.update(mp=float(p.mean()), mr=float(r.mean()), map50=float(ap[:, 0].mean()), map=float(ap.mean()),
               best_index=best, best_confidence=float(grid[best]), smoothed_f1_max=float(smoothed[best]), best_margin=margin)
    out["fitness"] = 0.1 * out["map50"] + 0.9 * out["map"]
    return out, per_image_tp


def make_case(rng, n_images=40, nc=7):
    """Classes 0-4 labelled and predicted; class 5 labelled only (AP 0); class 6 predicted only (no row).
    Integer/half-pixel boxes (exact in float32, exact IoU ties), scores on a 0.05 grid (confidence ties)."""
    images = []
    for n in range(n_images):
        nl = int(rng.integers(0, 7)) if n else 0  # image 0: no labels
        gt_cls = rng.integers(0, 6, nl)
        xy = rng.integers(0, 500, (nl, 2)).astype(np.float64)
        wh = rng.integers(10, 120, (nl, 2)).astype(np.float64)
        gt = np.concatenate((xy, xy + wh), 1)
        if nl >= 2 and n % 3 == 0:  # a duplicated label: IoU ties between labels
            gt[1], gt_cls[1] = gt[0], gt_cls[0]
        boxes, cls = [], []
        for b, c in zip(gt, gt_cls):
            if c == 5:
                continue
            for _ in range(int(rng.integers(0, 3))):  # 0-2 detections around each label
                w, h = b[2] - b[0], b[3] - b[1]
                jit = np.round(rng.normal(0, 0.12, 4) * np.array([w, h, w, h]) * 2) / 2
                boxes.append(b + jit)
                cls.append(c if rng.random() > 0.1 else int(rng.integers(0, 5)))
        for _ in range(int(rng.integers(0, 4))):  # background detections, some of class 6
            xy = rng.integers(0, 500, 2).astype(np.float64)
            wh = rng.integers(10, 120, 2).astype(np.float64)
            boxes.append(np.concatenate((xy, xy + wh)))
            cls.append(int(rng.integers(0, 7)))
        boxes = np.array(boxes, dtype=np.float64).reshape(-1, 4)
        boxes[:, 2:] = np.maximum(boxes[:, 2:], boxes[:, :2] + 1)
        scores = (rng.integers(1, 20, len(boxes)) * 0.05).astype(np.float32)
        order = np.argsort(-scores, kind="stable")  # the detector's order: score descending
        images.append({"pred_boxes": boxes[order].astype(np.float32), "pred_scores": scores[order],
                       "pred_cls": np.array(cls, dtype=np.int64)[order], "gt_boxes": gt.astype(np.float32),
                       "gt_cls": gt_cls.astype(np.int64)})
    return images, nc


def main(path):
    rng = np.random.default_rng(16)
    images, nc = make_case(rng)
    ref, per_image_tp = metrics(images, nc)
    assert ref["best_margin"] > 1e-9, f"the best smoothed F1 is within rounding of another index: {ref['best_margin']}"
    doc = {"nc": nc, "thresholds": [float(t) for t in THRESHOLDS], "images": [], "reference": ref}
    for im, tp in zip(images, per_image_tp):
        doc["images"].append({
            "detections": [[*(float(v) for v in b), float(s), int(c)]
                           for b, s, c in zip(im["pred_boxes"], im["pred_scores"], im["pred_cls"])],
            "labels": [[*(float(v) for v in b), int(c)] for b, c in zip(im["gt_boxes"], im["gt_cls"])],
            "tp": [[int(v) for v in row] for row in tp],
        })
    with open(path, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"{path}: {len(images)} images, {sum(len(i['pred_boxes']) for i in images)} detections, "
          f"{ref['instances']} labels; mAP50 {ref['map50']:.4f} mAP50-95 {ref['map']:.4f} "
          f"P {ref['mp']:.4f} R {ref['mr']:.4f} best index {ref['best_index']}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/detection_metrics.json")
