#!/bin/sh
# A node whose /dev/shm cannot hold the parameter server's shared-memory window (a container's is
# often 64 MiB) must train over point-to-point messages and say so. Before the check, MPICH's
# window was allocated anyway and the job died of SIGBUS on the first page past the end.
# Runs the demo with a 5.8M-parameter MLP (a 69 MiB window) under a private mount namespace with a
# 24 MiB /dev/shm; where no such namespace can be made (not root, no unshare), it reports itself
# skipped (exit 77).
#   shm_fallback.sh MPIEXEC PROGRAM
set -u
mpiexec=$1
program=$2
. "$(dirname "$0")/small_shm.sh"
run_with_small_shm \
  "$mpiexec" -iface lo -n 2 "$program" --servers 1 --hidden 2048,2048 --train-samples 256 --batch 64 \
  --epochs 1 --no-evaluation
if ! echo "$out" | grep -q "exchange through point-to-point messages instead"; then
  echo "FAILED: no fallback to point-to-point was reported"
  exit 1
fi
if echo "$out" | grep -q "shared memory on the node"; then
  echo "FAILED: the run still reports shared memory"
  exit 1
fi
echo "passed: fell back to point-to-point and trained"
