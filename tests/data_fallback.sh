#!/bin/sh
# A node whose /dev/shm cannot hold its one copy of the data (a container's is often 64 MiB) must
# train on private copies and say so in one line, not die of SIGBUS while filling the window.
# Runs the demo on 3 ranks (2 workers, 1 server) under a private mount namespace with a 24 MiB
# /dev/shm: the training set's 45 MiB do not fit, the test set's 7.5 MiB and the parameter
# server's window do. Where no such namespace can be made (not root, no unshare), it reports
# itself skipped (exit 77).
#   data_fallback.sh MPIEXEC PROGRAM
set -u
mpiexec=$1
program=$2
. "$(dirname "$0")/small_shm.sh"
run_with_small_shm \
  "$mpiexec" -iface lo -n 3 "$program" --servers 1 --epochs 1 --train-samples 12000
lines=$(echo "$out" | grep -c "each rank reads a private copy of its rows instead")
if [ "$lines" -ne 1 ]; then
  echo "FAILED: expected one line about private copies of the training set, found $lines"
  exit 1
fi
if ! echo "$out" | grep -q "final test accuracy 0\.[5-9]"; then
  echo "FAILED: no final test accuracy above 0.5"
  exit 1
fi
echo "passed: read private copies, said so once, and trained"
