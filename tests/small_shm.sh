# Sourced by shm_fallback.sh and data_fallback.sh: run_with_small_shm COMMAND... runs the command
# under a private mount namespace whose /dev/shm is a 24 MiB tmpfs, prints its output and keeps it
# in $out. Exits 77 (skipped) where no such namespace or mount can be made (not root, no unshare),
# and 1 if the command fails.
run_with_small_shm() {
  if ! unshare -m true 2>/dev/null; then
    echo "skipped: cannot make a private mount namespace (unshare -m)"
    exit 77
  fi
  out=$(unshare -m sh -c 'mount -t tmpfs -o size=24m tmpfs /dev/shm || exit 77; exec "$@"' sh "$@" 2>&1)
  rc=$?
  echo "$out"
  if [ "$rc" -eq 77 ]; then
    echo "skipped: cannot mount a small /dev/shm"
    exit 77
  fi
  if [ "$rc" -ne 0 ]; then
    echo "FAILED: the run ended with exit code $rc"
    exit 1
  fi
}
