#!/usr/bin/env bash
# Tile sweep of our kernels alone (no peers): bench_attention over a few shapes for each VISION_FA2_TILES setting
# and forward path given in the list below (edit it). A tuning aid: the chosen tiles go into flash_attention2_tiles().
#   bench/attention/sweep.sh [bench_attention binary]
set -uo pipefail
bin=${1:-build/bench/attention/bench_attention}
shapes=(B1_H2_N400_d32_dv64_f16 B16_H4_N400_d32_dv64_f16 B64_H4_N1600_d32_dv64_f16 B64_H2_N400_d32_dv64_f16
        B8_H16_N1024_d64_dv64 B8_H16_N1024_d128 B8_H16_N4096_d64 B8_H16_N4096_d128_dv128)
configs=(
  "auto|"
  "auto|backward_sm90=64,64,4"
)
for c in "${configs[@]}"; do
  fwd=${c%%|*}
  tiles=${c#*|}
  echo "=== forward $fwd, VISION_FA2_TILES='$tiles'"
  for s in "${shapes[@]}"; do
    VISION_FA2_TILES="$tiles" "$bin" --forward $fwd --only "$s" --replays 9 | tail -n +3
  done
done
