#!/usr/bin/env python3
"""Test of tools/reference/detection_metrics.py: the hand-worked cases of tests/eval/test_metrics.cpp, and the
committed fixture tests/fixtures/detection_metrics.json regenerated bit for bit. Exit code 77 (a CTest skip) when
numpy is missing."""
import json
import pathlib
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("skipped: numpy is not installed")
    sys.exit(77)

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "reference"))
import detection_metrics as dm  # noqa: E402


def image(preds, labels):
    return {"pred_boxes": np.array([p[:4] for p in preds], dtype=np.float32).reshape(-1, 4),
            "pred_scores": np.array([p[4] for p in preds], dtype=np.float32),
            "pred_cls": np.array([p[5] for p in preds], dtype=np.int64),
            "gt_boxes": np.array([g[:4] for g in labels], dtype=np.float32).reshape(-1, 4),
            "gt_cls": np.array([g[4] for g in labels], dtype=np.int64)}


def close(a, b):
    return abs(a - b) < 1e-12


def main():
    # Perfect predictions: 0.995 everywhere, P = R = 1.
    ref, _ = dm.metrics([image([[0, 0, 10, 10, 1.0, 0], [5, 5, 30, 30, 1.0, 1]], [[0, 0, 10, 10, 0], [5, 5, 30, 30, 1]])], 2)
    assert close(ref["map50"], 0.995) and close(ref["map"], 0.995), ref
    assert close(ref["mp"], 1.0) and close(ref["mr"], 1.0), ref
    # IoU 0.625: TP at 0.50-0.60 only.
    ref, _ = dm.metrics([image([[0, 0, 10, 6.25, 0.9, 0]], [[0, 0, 10, 10, 0]])], 1)
    assert np.allclose(ref["classes"][0]["ap"], [0.995] * 3 + [0.0] * 7, atol=1e-12), ref
    # FP then TP: 0.4975; the label keeps the lower detection index.
    ref, _ = dm.metrics([image([[20, 20, 30, 30, 0.9, 0], [0, 0, 10, 10, 0.8, 0]], [[0, 0, 10, 10, 0]])], 1)
    assert np.allclose(ref["classes"][0]["ap"], [0.4975] * 10, atol=1e-12), ref
    tp = dm.match(np.array([[0, 0, 10, 6.25], [0, 0, 10, 10]]), np.array([0, 0]), np.array([[0, 0, 10, 10.0]]),
                  np.array([0]))
    assert (tp[0] == (np.arange(10) < 3)).all() and (tp[1] == (np.arange(10) >= 3)).all(), tp
    # The fixture regenerates identically.
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "detection_metrics.json"
        dm.main(str(path))
        fresh = json.loads(path.read_text())
    committed = json.loads((ROOT / "tests" / "fixtures" / "detection_metrics.json").read_text())
    assert fresh == committed, "tests/fixtures/detection_metrics.json is stale: rerun tools/reference/detection_metrics.py"
    print("ok")


if __name__ == "__main__":
    main()
