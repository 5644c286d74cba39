#!/usr/bin/env python3
"""The PSA block table of run_psa.sh: bench_psa_block's rows (ours.jsonl) next to psa_peer.py's (peer.jsonl), the PSA
form comparison, ours' per-step estimate, and the issue's check. Exit status 1 when the required check fails.

  python3 bench/attention/psa_table.py ours.jsonl peer.jsonl [check.txt]
"""
import json
import math
import os
import sys


def load(path):
    meta, rows = {}, []
    if not path or not os.path.exists(path):
        return meta, rows
    with open(path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                if r.get("kind") == "meta":
                    meta = r
                else:
                    rows.append(r)
    return meta, rows


def us(x):
    return "{:.1f}".format(x) if x is not None else "n/a"


def main(argv):
    ours_meta, ours = load(argv[1])
    peer_meta, peer = load(argv[2] if len(argv) > 2 else None)
    check_text = open(argv[3]).read() if len(argv) > 3 and os.path.exists(argv[3]) else ""

    def ours_us(key, form):
        r = next((r for r in ours if r["key"] == key and r["variant"] == form), None)
        return r.get("us") if r else None

    def peers(key, mode=None):
        return [r for r in peer if r["key"] == key and r.get("us") is not None and (mode is None or r["mode"] == mode)]

    def best(rows):
        return min(rows, key=lambda r: r["us"]) if rows else None

    keys = []
    for r in ours + peer:
        if r["key"] not in keys:
            keys.append(r["key"])
    info = {r["key"]: r for r in ours + peer}
    default_form = ours_meta.get("default_psa_form", "one_pass")

    print("PSA Attention block on {}: ours ({}, f16 NHWC in and out) vs PyTorch ({}, {} channels_last)".format(
        ours_meta.get("device", peer_meta.get("device")), ours_meta.get("implementation", "n/a"),
        peer_meta.get("implementation", "n/a"), peer_meta.get("dtype", "n/a")))
    print("Times in us per call: {}. BatchNorm folded on both sides{}.".format(
        ours_meta.get("method", peer_meta.get("method")),
        "; ours replays the plan as a CUDA graph" if ours_meta.get("backend") == "cuda" else ""))
    print("two_pass, one_pass: pack -> attention -> merge as three ops; fused: one step (one_pass, the attention kernel "
          "reads qkv and writes the merged image). 2p/1p = two_pass / one_pass (> 1: one_pass faster). speedup = "
          "PyTorch's best / ours' fastest (> 1: ours is faster).")
    print("PyTorch columns: the fastest attention (math-ul, math-cl, sdpa-*) per mode; pt best over every mode.")
    print()
    head = ("{:<12} {:>4} {:>5} | {:>9} {:>9} {:>9} {:>6} | {:>9} {:>9} {:>9} | {:>9} {:<26} | {:>8} {:>7}")
    print(head.format("shape", "dim", "heads", "two_pass", "one_pass", "fused", "2p/1p", "pt eager", "pt graph",
                      "pt compl", "pt best", "(attention, mode)", "speedup", "TF/s"))
    print("-" * 152)
    form_ratios = []
    for key in keys:
        i = info[key]
        t2, t1, tf = ours_us(key, "two_pass"), ours_us(key, "one_pass"), ours_us(key, "fused")
        mine = min([t for t in (t2, t1, tf) if t is not None], default=None)
        ratio = t2 / t1 if t2 and t1 else None
        if ratio:
            form_ratios.append((key, ratio))
        b = best(peers(key))
        cells = [
            us(t2), us(t1), us(tf), "{:.2f}".format(ratio) if ratio else "",
            us(best(peers(key, "eager"))["us"]) if peers(key, "eager") else "n/a",
            us(best(peers(key, "graph"))["us"]) if peers(key, "graph") else "n/a",
            us(best(peers(key, "compile+graph"))["us"]) if peers(key, "compile+graph") else "n/a",
            us(b["us"]) if b else "n/a", "({}, {})".format(b["variant"], b["mode"]) if b else "",
            "{:.2f}x".format(b["us"] / mine) if b and mine else "",
            "{:.1f}".format(i["flops"] / mine * 1e-6) if mine and i.get("flops") else "",
        ]
        print(head.format(key, i.get("dim", ""), i.get("heads", ""), *cells))
        for r in ours:
            if r["key"] != key:
                continue
            notes = []
            if r.get("error"):
                notes.append(r["error"][:200])
            if r.get("finite") is False:
                notes.append("non-finite output")
            if r.get("graph_replayed") is False:
                notes.append("the plan did not replay a CUDA graph")
            if r.get("conversions"):
                notes.append("{} conversion steps in the plan".format(r["conversions"]))
            if notes:
                print("    ours {}: {}".format(r["variant"], "; ".join(notes)))

    # Which PyTorch attention ran, per variant (graph mode, else eager), and why the others did not.
    print()
    print("PyTorch attentions (how many shapes each ran at; the fastest graph-mode one per shape is in 'pt graph'):")
    variants = []
    for r in peer:
        if r["variant"] not in variants:
            variants.append(r["variant"])
    for v in variants:
        rows = [r for r in peer if r["variant"] == v]
        ran = sorted({r["key"] for r in rows if r.get("us") is not None}, key=keys.index)
        errors = sorted({r["error"] for r in rows if r.get("error")})
        notes = sorted({r["note"] for r in rows if r.get("note")})
        wins = sum(1 for k in keys if best(peers(k)) is not None and best(peers(k))["variant"] == v)
        line = "  {:<15} ran at {}/{} shapes, fastest PyTorch peer at {}".format(v, len(ran), len(keys), wins)
        if notes:
            line += "; " + "; ".join(notes)
        print(line)
        for e in errors:
            print("      n/a: " + e[:200])

    # PSA form.
    print()
    if form_ratios:
        geo = math.exp(sum(math.log(x) for _, x in form_ratios) / len(form_ratios))
        one_wins = [k for k, x in form_ratios if x > 1]
        b32 = [(k, x) for k, x in form_ratios if info[k].get("batch") == 32]
        print("PsaForm: one_pass faster at {} of {} shapes; geometric mean of two_pass/one_pass {:.3f}{}".format(
            len(one_wins), len(form_ratios), geo,
            "; at batch 32: " + ", ".join("{} {:.2f}".format(k, x) for k, x in b32) if b32 else ""))
        faster = "one_pass" if geo > 1 else "two_pass"
        print("  faster overall: {} (default_psa_form() is {} in this build{})".format(
            faster, default_form, "" if faster == default_form else "; consider switching"))
    else:
        print("PsaForm: both forms are needed for the comparison (run without --forms)")

    # Ours' per-step estimate from the prefix graphs.
    broken = [r for r in ours if r.get("breakdown_cumulative_us")]
    if broken:
        stages = ours_meta.get("stages", ["qkv", "pack", "attention", "merge", "pe"])
        names = {"qkv": "qkv conv", "pack": "pack", "attention": "attention", "merge": "merge",
                 "pe": "extract_v+pe", "full": "add+proj"}
        print()
        print("Ours per step (us; differences of cumulative prefix timings, so approximate: each prefix is its own "
              "plan and replay):")
        bhead = "{:<12} {:<9} " + " ".join(["{:>12}"] * (len(stages) + 1)) + " {:>9}"
        print(bhead.format("shape", "form", *[names.get(s, s) for s in stages + ["full"]], "total"))
        for r in broken:
            cum = r["breakdown_cumulative_us"]
            prev, cells = 0.0, []
            for s in stages:
                v = cum.get(s)
                cells.append("{:.1f}".format(v - prev) if v is not None else "n/a")
                prev = v if v is not None else prev
            cells.append("{:.1f}".format(r["us"] - prev) if r.get("us") is not None else "n/a")
            print(bhead.format(r["key"], r["variant"], *cells, us(r.get("us"))))
    for r in ours:
        if r.get("breakdown_error"):
            print("    breakdown {} {}: {}".format(r["key"], r["variant"], r["breakdown_error"][:200]))

    # Checks.
    print()
    print("Checks:")
    failed = False

    def check(required, ok, text):
        nonlocal failed
        tag = "PASS" if ok else ("FAIL" if ok is False else "N/A ")
        print("  {} {}{}".format(tag, "[required] " if required else "", text))
        if required and ok is not True:
            failed = True

    b32_keys = [k for k in keys if info[k].get("batch") == 32]
    if not b32_keys:
        check(True, None, "ours faster than PyTorch's best at batch 32: no batch-32 rows were run")
    for key in b32_keys:
        t = {f: ours_us(key, f) for f in ("two_pass", "one_pass", "fused")}
        have = {f: x for f, x in t.items() if x is not None}
        b = best(peers(key))
        if not have or b is None:
            check(True, None, "{}: ours faster than PyTorch's best at batch 32: a row is missing or failed".format(key))
            continue
        form = min(have, key=have.get)
        check(True, have[form] < b["us"], "{}: ours ({}, {:.1f} us) faster than PyTorch's best ({} {}, {:.1f} us): "
              "{:.2f}x".format(key, form, have[form], b["variant"], b["mode"], b["us"], b["us"] / have[form]))
        if form != default_form and default_form in have:
            check(False, have[default_form] < b["us"], "{}: (info) with default_psa_form() = {}: {:.1f} us, {:.2f}x"
                  .format(key, default_form, have[default_form], b["us"] / have[default_form]))
    for key in keys:
        if info[key].get("batch") != 1:
            continue
        t = [x for x in (ours_us(key, f) for f in ("two_pass", "one_pass", "fused")) if x is not None]
        b = best(peers(key))
        if t and b:
            check(False, min(t) < b["us"], "{}: (info, batch 1) ours {:.1f} us vs PyTorch's best {:.1f} us ({} {}): "
                  "{:.2f}x".format(key, min(t), b["us"], b["variant"], b["mode"], b["us"] / min(t)))
    bad = [r for r in ours if r.get("us") is not None and (r.get("conversions") or r.get("graph_replayed") is False
                                                             or r.get("finite") is False)]
    if ours:
        check(False, not bad, "ours: every plan replayed, no conversion step, finite outputs{}".format(
            "" if not bad else " (not: " + ", ".join(r["key"] + " " + r["variant"] for r in bad) + ")"))
    if peer_meta:
        check(False, peer_meta.get("self_check_ok"),
              "PyTorch peers reproduce the unfolded block in float64 (psa_peer.py self-check, small size)")
    if ours_meta.get("state") and peer_meta.get("state"):
        def state(meta, scale):  # num_batches_tracked: a counter, not part of the computation
            return {k: v for k, v in meta["state"][scale].items() if not k.endswith("num_batches_tracked")}

        common = sorted(set(ours_meta["state"]) & set(peer_meta["state"]))
        same = bool(common) and all(state(ours_meta, s) == state(peer_meta, s) for s in common)
        check(False, same, "the same block on both sides: state keys and shapes equal (scales {})".format(
            ", ".join(common) or "none in common"))
    for line in check_text.splitlines():
        if line.startswith("CHECK "):
            parts = line.split()
            check(False, parts[2] == "ok", "numerical cross-check, {} (n, 20x20, batch 2): ours vs the torch block "
                  "with our state in float64 (details in check.txt)".format(parts[1]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
