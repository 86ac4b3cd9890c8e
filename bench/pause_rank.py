#!/usr/bin/python3
"""A straggler made from outside: one rank of an mpiexec job stopped (SIGSTOP) for --share of every
--period seconds and continued (SIGCONT) for the rest, as a preempting job, a noisy neighbour or a
throttled VM does to a process. Unlike the examples' --slow-worker, which makes the gradient itself
slower, the pause falls wherever the process happens to be: in its compute, its push, or its wait.

The rank is found by its environment: the job runs with HPCPS_PAUSE_JOB=<marker> (any string unique
to this job) and MPICH's Hydra gives every process PMI_RANK. Used by bench/balance_study.py
(--straggler paused); on its own:

    /usr/bin/python3 bench/pause_rank.py --rank 1 --period 0.2 --share 0.75 -- \\
        mpiexec -iface lo -n 3 build/examples/fashion_mnist_mlp --servers 1

The process is always continued at the end, whatever ends the job.
"""
import argparse
import os
import signal
import subprocess
import sys
import threading
import time
import uuid


def rank_pid(marker, rank, deadline):
    """The PID of the process with HPCPS_PAUSE_JOB=marker and PMI_RANK=rank, once it exists."""
    want = {f"HPCPS_PAUSE_JOB={marker}".encode(), f"PMI_RANK={rank}".encode()}
    while time.monotonic() < deadline:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    env = set(f.read().split(b"\0"))
            except OSError:
                continue  # gone, or not ours to read
            if want <= env:
                return int(entry)
        time.sleep(0.01)
    return None


class RankPauser(threading.Thread):
    """Stops and continues rank `rank` of the job marked `marker` until stop(); records how long it
    really kept the process stopped (sleep overshoots, so the share achieved is measured, not
    assumed)."""

    def __init__(self, marker, rank, period, share, find_timeout=60.0):
        super().__init__(daemon=True)
        if not (period > 0 and 0 <= share < 1):
            raise ValueError(f"period must be > 0 and share in [0, 1), got {period}, {share}")
        self.marker, self.rank, self.period, self.share = marker, rank, period, share
        self.find_timeout = find_timeout
        self.pid = None
        self.paused_seconds = 0.0
        self.pauses = 0
        self.started = None
        self.ended = None
        self._halt = threading.Event()

    def run(self):
        self.pid = rank_pid(self.marker, self.rank, time.monotonic() + self.find_timeout)
        if self.pid is None or self.share == 0:
            return
        self.started = time.monotonic()
        try:
            while not self._halt.is_set():
                t0 = time.monotonic()
                os.kill(self.pid, signal.SIGSTOP)
                self._halt.wait(self.share * self.period)
                os.kill(self.pid, signal.SIGCONT)
                self.paused_seconds += time.monotonic() - t0
                self.pauses += 1
                self._halt.wait((1 - self.share) * self.period)
        except ProcessLookupError:
            pass  # the rank ended
        finally:
            self.ended = time.monotonic()
            try:
                os.kill(self.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    def stop(self):
        self._halt.set()
        self.join()

    def summary(self):
        span = (self.ended or time.monotonic()) - self.started if self.started else 0.0
        return {"rank": self.rank, "period_seconds": self.period, "share": self.share, "found": self.pid is not None,
                "pauses": self.pauses, "paused_seconds": self.paused_seconds,
                "achieved_share": self.paused_seconds / span if span > 0 else 0.0}


def run_paused(cmd, env, rank, period, share, timeout):
    """Runs `cmd` (an mpiexec job) with rank `rank` paused as RankPauser does; returns
    (completed process, pause summary). Raises on a non-zero exit, with the job's output."""
    marker = uuid.uuid4().hex
    env = dict(env, HPCPS_PAUSE_JOB=marker)
    pauser = RankPauser(marker, rank, period, share)
    pauser.start()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    finally:
        pauser.stop()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed with exit code {proc.returncode}:\n"
                           f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    if not pauser.pid:
        raise RuntimeError(f"rank {rank} of {' '.join(cmd)} was never found to pause")
    return proc, pauser.summary()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--period", type=float, default=0.2, help="seconds of one stop-continue cycle")
    p.add_argument("--share", type=float, default=0.75, help="fraction of each period the rank is stopped")
    p.add_argument("--timeout", type=int, default=3600)
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the mpiexec command")
    args = p.parse_args()
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        p.error("no command: ... -- mpiexec -n N PROGRAM")
    proc, summary = run_paused(cmd, os.environ, args.rank, args.period, args.share, args.timeout)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    print(f"pause_rank: rank {summary['rank']} stopped {summary['pauses']} times, "
          f"{summary['paused_seconds']:.1f} s, {summary['achieved_share']:.2f} of the time", file=sys.stderr)


if __name__ == "__main__":
    main()
