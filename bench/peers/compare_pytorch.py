#!/usr/bin/python3
"""Single-process training throughput, hpcps (bench/local_training) against PyTorch
(bench/peers/pytorch_mlp.py), side by side in one run: same model (784-256-128-10), batch, learning
rate, optimizer (SGD, momentum 0.9), thread count and environment (OPENBLAS_NUM_THREADS and
OMP_NUM_THREADS set to the thread count for both; OPENBLAS_CORETYPE left as the machine sets it).
With more than one thread PyTorch also runs with one intra-op thread and OpenBLAS on all cores,
and the faster of its two settings counts.
Runs are interleaved; each run's throughput is all its epochs' samples over their training seconds.
Prints a Markdown table and writes JSON (--out).

    /usr/bin/python3 bench/peers/compare_pytorch.py --build build --repeats 5
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def run(cmd, threads, omp_threads=None):
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(omp_threads or threads))
    out = subprocess.run(cmd, check=True, env=env, capture_output=True, text=True, timeout=900).stdout
    epochs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return {"samples_per_second": sum(e["samples"] for e in epochs) / sum(e["seconds"] for e in epochs),
            "final_test_accuracy": epochs[-1]["test_accuracy"], "epochs": epochs}


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--out", default="bench/results/compare_pytorch.json")
    args = p.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    results = []
    for threads in [int(t) for t in args.threads.split(",")]:
        ours, theirs = [], []
        common = ["--epochs", str(args.epochs), "--batch", str(args.batch), "--threads", str(threads)]
        for r in range(args.repeats):
            ours.append(run([os.path.join(args.build, "bench", "local_training")] + common, threads))
            peer = [sys.executable, os.path.join(here, "pytorch_mlp.py"), "--epochs", str(args.epochs), "--batch",
                    str(args.batch)]
            candidates = [run(peer + ["--threads", str(threads)], threads)]
            if threads > 1:
                # PyTorch's own threads and OpenBLAS's fight over the cores; its faster setting here
                # is one intra-op thread with OpenBLAS on all of them. Keep the faster of the two.
                candidates.append(run(peer + ["--threads", "1"], threads, omp_threads=1))
            theirs.append(max(candidates, key=lambda c: c["samples_per_second"]))
            print(f"threads {threads} repeat {r + 1}: hpcps {ours[-1]['samples_per_second']:.0f}, "
                  f"pytorch {theirs[-1]['samples_per_second']:.0f} samples/s", file=sys.stderr, flush=True)
        ratios = [o["samples_per_second"] / t["samples_per_second"] for o, t in zip(ours, theirs)]
        results.append({"threads": threads,
                        "hpcps_samples_per_second": summary([o["samples_per_second"] for o in ours]),
                        "pytorch_samples_per_second": summary([t["samples_per_second"] for t in theirs]),
                        "ratio": summary(ratios),
                        "hpcps_final_test_accuracy": summary([o["final_test_accuracy"] for o in ours]),
                        "pytorch_final_test_accuracy": summary([t["final_test_accuracy"] for t in theirs]),
                        "runs": {"hpcps": ours, "pytorch": theirs}})
    import torch
    out = {"benchmark": "compare_pytorch", "torch_version": torch.__version__, "batch": args.batch,
           "epochs": args.epochs, "repeats": args.repeats,
           "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", ""), "results": results}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print("| threads | hpcps samples/s | PyTorch samples/s | ratio hpcps / PyTorch |")
    print("| --- | --- | --- | --- |")
    for r in results:
        f = lambda s, d=0: f"{s['median']:,.{d}f} ({s['min']:,.{d}f}-{s['max']:,.{d}f})"
        print(f"| {r['threads']} | {f(r['hpcps_samples_per_second'])} | {f(r['pytorch_samples_per_second'])} | "
              f"{f(r['ratio'], 2)} |")


if __name__ == "__main__":
    main()
