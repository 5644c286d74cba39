#!/usr/bin/env python3
"""Sums ONNX Runtime's profile (the chrome-trace JSON that `ORT_PROFILE=PREFIX node tests/onnx/ort_run.js ...` writes)
per op kind and per node, as `vision bench --profile` prints ours: the median over the timed runs of each kind's
total, in ms. The first `model_run` is ort_run.js's untimed warm-up and is left out.

  bench/model/ort_profile.py PROFILE.json [--top N]
"""
import argparse
import json
import statistics
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile")
    ap.add_argument("--top", type=int, default=30, help="slowest nodes to list (default 30)")
    args = ap.parse_args()
    try:
        with open(args.profile, encoding="utf-8") as f:
            events = json.load(f)
    except (OSError, ValueError) as e:
        print(f"ort_profile.py: cannot read {args.profile}: {e}", file=sys.stderr)
        return 2
    runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "Session" and e.get("name") == "model_run")
    if len(runs) < 2:
        print(f"ort_profile.py: {args.profile} holds {len(runs)} model_run event(s): need the warm-up and a timed run "
              "(ort_run.js with REPEAT >= 1)", file=sys.stderr)
        return 2
    runs = runs[1:]
    per_run_node = [dict() for _ in runs]  # (node, op kind) -> ms, per timed run
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        r = next((i for i, (t0, t1) in enumerate(runs) if t0 <= e["ts"] <= t1), None)
        if r is None:
            continue
        kind = e.get("args", {}).get("op_name", "?")
        node = e["name"][: -len("_kernel_time")]
        key = (node, kind)
        per_run_node[r][key] = per_run_node[r].get(key, 0.0) + e["dur"] / 1000.0
    per_run_kind = [dict() for _ in runs]
    for by_node, by_kind in zip(per_run_node, per_run_kind):
        for (_, kind), ms in by_node.items():
            by_kind[kind] = by_kind.get(kind, 0.0) + ms
    total = statistics.median(sum(k.values()) for k in per_run_kind)
    wall = statistics.median((t1 - t0) / 1000.0 for t0, t1 in runs)
    print(f"{len(runs)} timed runs: {wall:.3f} ms a run (median), {total:.3f} ms of it in nodes")
    nodes = {key for r in per_run_node for key in r}
    node_ms = {key: statistics.median(r.get(key, 0.0) for r in per_run_node) for key in nodes}
    print(f"{'ms':>9}  {'share':>5}  {'op':<20} node")
    for (node, kind), ms in sorted(node_ms.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"{ms:9.4f} {100 * ms / total:5.1f}%  {kind:<20} {node}")
    print("per op:")
    kinds = {k for r in per_run_kind for k in r}
    count = {k: sum(1 for (_, kind) in nodes if kind == k) for k in kinds}
    kind_ms = {k: statistics.median(r.get(k, 0.0) for r in per_run_kind) for k in kinds}
    for k, ms in sorted(kind_ms.items(), key=lambda kv: -kv[1]):
        print(f"{ms:9.4f} {100 * ms / total:5.1f}%  {k} x{count[k]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
