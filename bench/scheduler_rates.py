#!/usr/bin/python3
"""What this machine charges a synchronous clock when more ranks run than it has cores: one command
for the oversubscription input of the analytic model (bench/model.py, docs/model.md).

Runs bench/scheduler_rates (see its header) for R = 1 .. --max-ranks ranks in both patterns, server
(rank 0 waits, the others compute: the dedicated layout) and peers (every rank computes:
colocated), at compute times from 0.25 ms to 256 ms per superstep, and writes one JSON file with
the seconds of a superstep for every (pattern, R, compute). Each point is the median of --repeats
timings (each >= 5 steps and 0.5 s of compute) with the range; about 5 minutes on 2 cores.

    bench/scheduler_rates.py                    # R = 1 .. 2 x cores, writes bench/results/scheduler_rates.json
    bench/scheduler_rates.py --max-ranks 3 --compute-ms 0.5,4 --repeats 3 --out /tmp/s.json   # smoke
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def main():
    cores = len(os.sched_getaffinity(0))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build", help="CMake build folder with bench/scheduler_rates")
    p.add_argument("--max-ranks", type=int, default=2 * cores)
    p.add_argument("--compute-ms", default="0.25,0.5,1,2,4,16,64,256")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--timeout", type=int, default=300, help="seconds per run (MPIEXEC_TIMEOUT)")
    p.add_argument("--out", default="bench/results/scheduler_rates.json")
    args = p.parse_args()

    binary = os.path.join(args.build, "bench", "scheduler_rates")
    if not os.access(binary, os.X_OK):
        sys.exit(f"scheduler_rates.py: {binary} not found: build it first (cmake --build {args.build} "
                 "--target scheduler_rates)")
    env = dict(os.environ, UCX_NET_DEVICES="lo", MPIEXEC_TIMEOUT=str(args.timeout), OMP_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1")
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for pattern in ("server", "peers"):
            for ranks in range(2 if pattern == "server" else 1, args.max_ranks + 1):
                path = os.path.join(tmp, f"{pattern}_{ranks}.json")
                cmd = ["mpiexec", "-iface", "lo", "-n", str(ranks), binary, "--pattern", pattern,
                       "--compute-ms", args.compute_ms, "--repeats", str(args.repeats), "--out", path]
                done = subprocess.run(cmd, env=env)
                if done.returncode != 0:
                    sys.exit(f"scheduler_rates.py: {' '.join(cmd)} exited with {done.returncode}")
                with open(path) as f:
                    runs.append(json.load(f))
    result = {"benchmark": "scheduler_rates", "cores": cores, "repeats": args.repeats,
              "wait_mode": os.environ.get("HPCPS_WAIT") or "adaptive",
              "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", ""), "runs": runs}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
