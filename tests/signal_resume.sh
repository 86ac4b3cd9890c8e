#!/bin/sh
# SIGTERM to mpiexec in the middle of a run (what Slurm sends at a job's time limit): the job must
# finish its clock, write a checkpoint, print one line saying so and end, leaving no rank behind;
# resumed with --resume, a synchronous run must end with exactly the test accuracy of the same run
# left alone, an ssp or async one within 0.02 of it (their updates depend on timing).
#   signal_resume.sh MPIEXEC PROGRAM WORKDIR [SYNC]
set -u
# 469 clocks in all: the signal comes right after the first checkpoint (clock 100), so half of
# kill_resume's samples leave plenty to stop, and the three runs cost half as much.
train_samples=15000
. "$(dirname "$0")/checkpoint_job.sh"

"$mpiexec" -iface lo -n 3 "$program" $common --report "$work/whole.json" > "$work/whole.out" 2>&1 ||
  fail "the uninterrupted run failed: $(cat "$work/whole.out")"

start_job "$work/stopped.out"
pids=$(job_ranks)
[ -n "$pids" ] || fail "no rank process found"
kill -TERM $job
# Every rank exits with 143, but Hydra's exit code once mpiexec itself got the signal is not always
# theirs: MPICH 4.0.2's Hydra may report 0 for processes it was signalling (pmodels/mpich#5930,
# #7057; seen once on a fresh machine). What the ranks did is checked from their output instead.
end_of_job "$work/stopped.out" any-exit-code
[ "$(grep -c 'stopped by signal 15' "$work/stopped.out")" -eq 1 ] || fail "not exactly one 'stopped by signal 15' line"
grep -q "final test accuracy" "$work/stopped.out" && fail "the run was not stopped early"
echo "stopped in $took_ms ms with exit code $rc"

"$mpiexec" -iface lo -n 3 "$program" $common --resume "$work/ckpt" --report "$work/resumed.json" > "$work/resumed.out" 2>&1 ||
  fail "the resumed run failed: $(cat "$work/resumed.out")"
cat "$work/resumed.out"
whole=$(grep -o '"test_accuracy": [0-9.]*' "$work/whole.json" | tail -1)
resumed=$(grep -o '"test_accuracy": [0-9.]*' "$work/resumed.json" | tail -1)
[ -n "$whole" ] && [ -n "$resumed" ] || fail "no test accuracy in the reports"
if [ "$sync" = bsp ]; then
  [ "$whole" = "$resumed" ] || fail "resumed run ends with $resumed, the uninterrupted one with $whole"
  echo "passed: resumed to the uninterrupted run's $whole"
else
  awk -v a="${whole#*: }" -v b="${resumed#*: }" 'BEGIN { d = a - b; exit !(d <= 0.02 && d >= -0.02) }' ||
    fail "resumed run ends with $resumed, the uninterrupted one with $whole: more than 0.02 apart"
  echo "passed: resumed to $resumed, the uninterrupted run $whole"
fi
