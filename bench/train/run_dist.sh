#!/usr/bin/env bash
# Data-parallel scaling (issue #30): YOLO26 training steps at --batch images a GPU on 1, 2, 4 and 8 GPUs (as many as
# the machine has, or --gpus "1 2"), ours (bench_train --dist, one rank a GPU) against PyTorch's DistributedDataParallel
# over the tools/reference model (peer.py --ddp), in the same run on the same GPUs. One table: the job's images/s and
# the scaling efficiency, images/s on N GPUs ÷ (N × images/s on one); required ≥ 90% at the largest count (NOTES.md).
# Build first: cmake --preset default -DVISION_BENCH=ON && cmake --build build --target bench_train
# Usage: bench/train/run_dist.sh [BUILD_DIR] [--scales n,s] [--dtype bf16] [--batch 64] [--imgsz 640] [--steps 10]
#                                [--gpus "1 2 4 8"] [--device cuda|cpu]
# Ours starts under mpirun when it is on PATH, else under torchrun's variables (tests/dist/run_ranks.sh: the ranks
# meet over TCP, the gradients go through NCCL); the peer under `python3 -m torch.distributed.run`, or under
# PEER_LAUNCH N PYTHON peer.py … (e.g. PEER_LAUNCH=tests/dist/run_ranks.sh where torchrun does not work). --device cpu: CPU ranks, a logic check of the script.
# Environment: PYTHON (a CUDA PyTorch; default python3), OUT_DIR (JSON lines and the table; default a temp dir).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$root/build
if [[ $# -gt 0 && $1 != -* ]]; then build=$1; shift; fi
scales=n,s dtype=bf16 batch=64 imgsz=640 steps=10 device=cuda gpus=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --scales) scales=$2; shift 2 ;;
    --dtype) dtype=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --imgsz) imgsz=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --gpus) gpus=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    *) echo "run_dist.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
if [[ -z $gpus ]]; then
  have=$(nvidia-smi --list-gpus 2>/dev/null | wc -l)
  for n in 1 2 4 8; do ((n <= have)) && gpus+="$n "; done
  [[ -n $gpus ]] || { echo "run_dist.sh: no GPU found (--gpus N... and --device cpu for CPU ranks)" >&2; exit 1; }
fi
out=${OUT_DIR:-$(mktemp -d /tmp/bench_dist.XXXXXX)}
mkdir -p "$out"
: > "$out/ours.jsonl"
: > "$out/peer.jsonl"
python=${PYTHON:-python3}
peer_mode=$dtype
[[ $device == cpu ]] && peer_mode=f32
for n in $gpus; do
  if command -v mpirun > /dev/null; then
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np "$n" --oversubscribe --bind-to none \
      "$build/bench/train/bench_train" --dist --device "$device" --scales "$scales" --dtypes "$dtype" \
      --batch "$batch" --imgsz "$imgsz" --steps "$steps" --json "$out/ours.$n.jsonl"
  else
    "$root/tests/dist/run_ranks.sh" "$n" "$build/bench/train/bench_train" --dist --device "$device" \
      --scales "$scales" --dtypes "$dtype" --batch "$batch" --imgsz "$imgsz" --steps "$steps" --json "$out/ours.$n.jsonl"
  fi
  cat "$out/ours.$n.jsonl" >> "$out/ours.jsonl"
  peer_args=(--ddp --device "$device" --scales "$scales" --modes "$peer_mode" --batch "$batch" --imgsz "$imgsz"
             --steps "$steps" --json "$out/peer.$n.jsonl")
  if [[ -n ${PEER_LAUNCH:-} ]]; then
    "$PEER_LAUNCH" "$n" "$python" "$here/peer.py" "${peer_args[@]}"
  else
    "$python" -m torch.distributed.run --standalone --nproc_per_node "$n" "$here/peer.py" "${peer_args[@]}"
  fi
  cat "$out/peer.$n.jsonl" >> "$out/peer.jsonl"
done
"$python" - "$out" <<'PY' | tee "$out/table.txt"
import json, sys
out = sys.argv[1]
ours = [json.loads(l) for l in open(f"{out}/ours.jsonl")]
peer = [json.loads(l) for l in open(f"{out}/peer.jsonl")]
def ips(rows, scale, n):
    r = [x["images_per_second"] for x in rows if x["scale"] == scale and x["ranks"] == n]
    return r[0] if r else float("nan")
counts = sorted({r["ranks"] for r in ours})
print(f"{'scale':<6} {'GPUs':>4} {'ours img/s':>11} {'efficiency':>10} {'DDP img/s':>10} {'efficiency':>10} {'ours/DDP':>9}")
for scale in dict.fromkeys(r["scale"] for r in ours):
    o1, p1 = ips(ours, scale, 1), ips(peer, scale, 1)
    for n in counts:
        o, p = ips(ours, scale, n), ips(peer, scale, n)
        print(f"{scale:<6} {n:>4} {o:>11.1f} {o / (n * o1):>10.1%} {p:>10.1f} {p / (n * p1):>10.1%} {o / p:>8.2f}x")
PY
