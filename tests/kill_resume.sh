#!/bin/sh
# SIGKILL to one rank in the middle of a run with checkpoints on: the job must end non-zero within
# 60 s (a hang bound) with no rank left behind, the newest checkpoint must be complete, and the resumed run must
# start from it (at most --checkpoint-every of work lost) and finish; resumed once more from the
# checkpoint at the end, it has nothing to train and says so.
#   kill_resume.sh MPIEXEC PROGRAM WORKDIR
set -u
. "$(dirname "$0")/checkpoint_job.sh"

start_job "$work/killed.out"
sleep 0.3
pids=$(job_ranks)
victim=$(echo "$pids" | tail -1)
[ -n "$victim" ] || fail "no rank process found"
kill -KILL "$victim"
end_of_job "$work/killed.out"
newest=$(ls -d "$work"/ckpt/ckpt-* | sort | tail -1)
echo "job ended in $took_ms ms with exit code $rc; newest checkpoint $newest"

"$mpiexec" -iface lo -n 3 "$program" $common --resume "$work/ckpt" --checkpoint "$work/ckpt" > "$work/resumed.out" 2>&1 ||
  fail "the resumed run failed: $(cat "$work/resumed.out")"
cat "$work/resumed.out"
grep -q "resumed from $newest:" "$work/resumed.out" || fail "did not resume from the newest checkpoint $newest"
grep -q "final test accuracy 0\.[78]" "$work/resumed.out" || fail "the resumed run did not train to 0.7"
# Resumed again from the checkpoint at the end: nothing to train, and it says so with the accuracy
# of the checkpoint's parameters (not 0).
"$mpiexec" -iface lo -n 3 "$program" $common --resume "$work/ckpt" > "$work/again.out" 2>&1 ||
  fail "the run resumed at the end failed: $(cat "$work/again.out")"
cat "$work/again.out"
grep -q "nothing left to train" "$work/again.out" || fail "the run resumed at the end did not say it had nothing to train"
grep -q "final test accuracy 0\.[78]" "$work/again.out" || fail "the run resumed at the end did not report the accuracy"
echo "passed: resumed from $newest"
