#!/usr/bin/env bash
# Runs a command as N ranks on this machine under torchrun's environment contract (RANK, LOCAL_RANK, WORLD_SIZE,
# MASTER_ADDR, MASTER_PORT), the way `vision train --devices` starts them without mpirun; exits 1 when any rank fails.
#   tests/dist/run_ranks.sh N COMMAND [ARGS...]
set -u
n=$1
shift
port=$((20000 + RANDOM % 20000))
pids=()
for ((r = 0; r < n; r++)); do
  RANK=$r LOCAL_RANK=$r WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$@" &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status
