#!/usr/bin/env python3
"""Runs an exported model with ONNX's own reference evaluator (onnx.reference, ONNX >= 1.13: pure NumPy, the
operators as the standard defines them) and compares its output0 with what another runtime gave for the same input.

    tools/onnx_reference_check.py MODEL.onnx INPUT.bin DIMS EXPECTED.bin [--rtol 1e-4]

INPUT.bin holds the "images" input as raw little-endian f32 of shape DIMS (e.g. 1,3,64,64); EXPECTED.bin output0 as
raw f32 (ONNX Runtime's, written by tests/onnx/ort_run.js, or the engine's). Prints the relative error
||ref - expected|| / ||expected|| and the largest element difference; exits 1 above --rtol, 77 when this Python has
no onnx.reference (Debian 12's python3-onnx is 1.12).
"""
import argparse
import sys
import time

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("input")
    ap.add_argument("dims")
    ap.add_argument("expected")
    ap.add_argument("--rtol", type=float, default=1e-4)
    args = ap.parse_args()
    try:
        import onnx
        from onnx.reference import ReferenceEvaluator
    except ImportError as e:
        print(f"skip: no onnx.reference here ({e})")
        return 77
    dims = [int(d) for d in args.dims.split(",")]
    x = np.fromfile(args.input, dtype="<f4").reshape(dims)
    expected = np.fromfile(args.expected, dtype="<f4")
    model = onnx.load(args.model)
    onnx.checker.check_model(model, full_check=True)
    t0 = time.time()
    (out,) = ReferenceEvaluator(model).run(["output0"], {"images": x})
    seconds = time.time() - t0
    shape = list(np.asarray(out).shape)
    out = np.asarray(out, dtype=np.float64).ravel()
    if out.size != expected.size:
        print(f"FAIL: output0 has {out.size} values, the expected output {expected.size}")
        return 1
    ref = expected.astype(np.float64)
    rel = float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-300))
    print(f"onnx {onnx.__version__} reference evaluator: output0 {shape} in {seconds:.1f} s; "
          f"relative error {rel:.3e}, max |diff| {float(np.max(np.abs(out - ref))):.3e} (bound {args.rtol:g})")
    return 0 if np.isfinite(rel) and rel <= args.rtol else 1


if __name__ == "__main__":
    sys.exit(main())
