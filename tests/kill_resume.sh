#!/bin/sh
# SIGKILL to one rank in the middle of a run with checkpoints on: the job must end non-zero within
# 10 s with no rank left behind, the newest checkpoint must be complete, and the resumed run must
# start from it (at most --checkpoint-every of work lost) and finish.
#   kill_resume.sh MPIEXEC PROGRAM WORKDIR
set -u
mpiexec=$1
program=$2
work=$3
rm -rf "$work" && mkdir -p "$work" || exit 1
ranks=$(basename "$program" | cut -c1-15)
common="--servers 1 --epochs 2 --train-samples 30000 --checkpoint-every 100clocks"
fail() { echo "FAILED: $*"; exit 1; }

"$mpiexec" -iface lo -n 3 "$program" $common --checkpoint "$work/ckpt" > "$work/killed.out" 2>&1 &
job=$!
tries=0
until ls -d "$work"/ckpt/ckpt-* > /dev/null 2>&1; do
  tries=$((tries + 1))
  [ $tries -gt 600 ] && { kill -KILL $job; fail "no checkpoint within 60 s"; }
  sleep 0.1
done
sleep 0.3
victim=$(pgrep -x -n "$ranks")  # the newest rank process
[ -n "$victim" ] || fail "no rank process found"
kill -KILL "$victim"
killed=$(date +%s%N)
wait $job
rc=$?
took_ms=$(( ($(date +%s%N) - killed) / 1000000 ))
cat "$work/killed.out"
[ "$rc" -ne 0 ] || fail "the job exited with 0 after a rank was killed"
[ "$took_ms" -le 10000 ] || fail "the job took $took_ms ms to end"
pgrep -x "$ranks" > /dev/null && fail "ranks left behind: $(pgrep -a -x "$ranks")"
newest=$(ls -d "$work"/ckpt/ckpt-* | sort | tail -1)
echo "job ended in $took_ms ms with exit code $rc; newest checkpoint $newest"

"$mpiexec" -iface lo -n 3 "$program" $common --resume "$work/ckpt" > "$work/resumed.out" 2>&1 ||
  fail "the resumed run failed: $(cat "$work/resumed.out")"
cat "$work/resumed.out"
grep -q "resumed from $newest:" "$work/resumed.out" || fail "did not resume from the newest checkpoint $newest"
grep -q "final test accuracy 0\.[78]" "$work/resumed.out" || fail "the resumed run did not train to 0.7"
echo "passed: resumed from $newest"
