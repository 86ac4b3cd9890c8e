# What signal_resume.sh and kill_resume.sh share (sourced): their arguments, a fresh work folder,
# and start_job, which starts the example in the background with checkpoints on and returns once
# the first checkpoint is published (training is then well under way), with the job's pid in $job.
#   <script> MPIEXEC PROGRAM WORKDIR [SYNC]
mpiexec=$1
program=$2
work=$3
sync=${4:-bsp}
rm -rf "$work" && mkdir -p "$work" || exit 1
ranks=$(basename "$program" | cut -c1-15)  # the rank processes' name, as pgrep -x sees it
common="--servers 1 --epochs 2 --train-samples ${train_samples:-30000} --checkpoint-every 100clocks --sync $sync"
fail() {
  echo "FAILED: $*"
  [ -n "${job:-}" ] && kill -KILL "$job" 2> /dev/null
  exit 1
}

# start_job OUTPUT
start_job() {
  "$mpiexec" -iface lo -n 3 "$program" $common --checkpoint "$work/ckpt" > "$1" 2>&1 &
  job=$!
  tries=0
  until ls -d "$work"/ckpt/ckpt-* > /dev/null 2>&1; do
    tries=$((tries + 1))
    [ $tries -gt 600 ] && { kill -KILL $job; fail "no checkpoint within 60 s"; }
    sleep 0.1
  done
}

# The rank processes of the job: children of its Hydra proxies, never another user's run.
job_ranks() {
  for proxy in $(pgrep -P "$job"); do pgrep -P "$proxy" -x "$ranks"; done
}
# Fails if any of the pids given is still alive.
none_alive() {
  for pid in "$@"; do
    kill -0 "$pid" 2> /dev/null && fail "rank process $pid left behind"
  done
  return 0
}

# After the job was signalled: waits for it, prints OUTPUT, and fails unless it ended within 60 s
# (a hang, not a speed: the time it took is printed, and a loaded machine may take several seconds)
# leaving none of the rank processes $pids alive, and, unless the second argument is
# "any-exit-code", with a non-zero exit code. Sets rc and took_ms.
# end_of_job OUTPUT [any-exit-code]
end_of_job() {
  signalled=$(date +%s%N)
  wait $job  # a hung job ends at MPIEXEC_TIMEOUT, and then fails the check below
  rc=$?
  took_ms=$(( ($(date +%s%N) - signalled) / 1000000 ))
  cat "$1"
  [ "$took_ms" -le 60000 ] || fail "the job did not end within 60 s of the signal (a hang)"
  [ "${2:-}" = any-exit-code ] || [ "$rc" -ne 0 ] || fail "the job exited with 0"
  none_alive $pids
}
