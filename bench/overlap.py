#!/usr/bin/python3
"""Communication overlapped with backpropagation, on and off, side by side: the parameter server
(examples/fashion_mnist_mlp) with Options::overlap (each gradient piece pushed as soon as
backpropagation has finished it) against --no-overlap (pushed after the whole gradient), same
run otherwise, --repeats interleaved pairs per configuration. Prints a Markdown table (median and
min-max samples/s, and the median of the per-pair ratios on/off) and writes JSON and a PNG.

    /usr/bin/python3 bench/overlap.py --build build --repeats 5
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

# (name, mpiexec ranks, example arguments)
CONFIGS = [
    ("784-4096-4096-10, 1 worker + 1 server, batch 256", 2,
     ["--servers", "1", "--hidden", "4096,4096", "--batch", "256", "--train-samples", "4096", "--epochs", "2"]),
    ("784-4096-4096-10, 2 colocated ranks, batch 256", 2,
     ["--servers", "0", "--hidden", "4096,4096", "--batch", "256", "--train-samples", "4096", "--epochs", "2"]),
    ("784-256-128-10, 1 worker + 1 server, batch 64, pieces of 16k", 2,
     ["--servers", "1", "--batch", "64", "--piece-floats", "16384", "--epochs", "1"]),
]


def run(args, ranks, extra, overlap, report):
    cmd = ["mpiexec", "-iface", "lo", "-n", str(ranks), os.path.join(args.build, "examples", "fashion_mnist_mlp"),
           "--no-evaluation", "--threads", "1", "--report", report] + extra + ([] if overlap else ["--no-overlap"])
    env = dict(os.environ, UCX_NET_DEVICES="lo", MPIEXEC_TIMEOUT=str(args.timeout), OMP_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1")
    subprocess.run(cmd, env=env, check=True, capture_output=True, text=True, timeout=args.timeout + 30)
    with open(report) as f:
        r = json.load(f)
    return {"samples_per_second": r["samples_per_second"], "train_seconds": r["train_seconds"],
            "times_last_epoch": r["epochs"][-1].get("times")}


def summary(v):
    return {"median": statistics.median(v), "min": min(v), "max": max(v)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--timeout", type=int, default=600)
    p.add_argument("--out", default="bench/results/overlap.json")
    args = p.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "r.json")
        for name, ranks, extra in CONFIGS:
            on, off = [], []
            for r in range(args.repeats):
                order = [True, False] if r % 2 == 0 else [False, True]  # alternate who goes first
                for overlap in order:
                    (on if overlap else off).append(run(args, ranks, extra, overlap, report))
            on_rate = [x["samples_per_second"] for x in on]
            off_rate = [x["samples_per_second"] for x in off]
            ratios = [a / b for a, b in zip(on_rate, off_rate)]
            results.append({"config": name, "ranks": ranks, "arguments": extra, "overlap": on, "no_overlap": off,
                            "overlap_samples_per_second": summary(on_rate),
                            "no_overlap_samples_per_second": summary(off_rate), "ratio_on_off": summary(ratios)})
    print("| configuration | overlap samples/s | no overlap samples/s | ratio on/off |")
    print("| --- | --- | --- | --- |")
    for r in results:
        a, b, q = r["overlap_samples_per_second"], r["no_overlap_samples_per_second"], r["ratio_on_off"]
        print(f"| {r['config']} | {a['median']:,.0f} ({a['min']:,.0f}-{a['max']:,.0f}) | "
              f"{b['median']:,.0f} ({b['min']:,.0f}-{b['max']:,.0f}) | {q['median']:.3f} ({q['min']:.3f}-{q['max']:.3f}) |")
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"benchmark": "overlap", "repeats": args.repeats, "load_average": os.getloadavg(),
                   "results": results}, f, indent=1)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(8, 3.5))
        names = [r["config"] for r in results]
        meds = [r["ratio_on_off"]["median"] for r in results]
        err = [[m - r["ratio_on_off"]["min"] for m, r in zip(meds, results)],
               [r["ratio_on_off"]["max"] - m for m, r in zip(meds, results)]]
        ax.barh(range(len(names)), meds, xerr=err, color="tab:blue")
        ax.axvline(1.0, color="gray", linestyle="--")
        ax.set_yticks(range(len(names)), names, fontsize=8)
        ax.set_xlabel("samples/s with overlap / without (median, min-max of pairs)")
        fig.tight_layout()
        fig.savefig(os.path.splitext(args.out)[0] + ".png", dpi=120)
    except ImportError:
        pass
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
