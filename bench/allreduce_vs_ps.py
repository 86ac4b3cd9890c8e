#!/usr/bin/python3
"""The parameter server (colocated layout, `fashion_mnist_mlp --servers 0`) against the allreduce
baseline (`bench/allreduce_training`, Horovod-style), side by side in one run: same model, data
shards, batch, update rule and schedule, 1 and 2 ranks, --repeats interleaved runs each. Prints a
Markdown table (median and range of samples/s, and the test accuracy) and writes JSON (--out)."""
import argparse
import json
import os
import statistics
import subprocess
import tempfile


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--build", default="build")
    p.add_argument("--ranks", default="1,2")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", default="bench/results/allreduce_vs_ps.json")
    args = p.parse_args()
    env = dict(os.environ, UCX_NET_DEVICES="lo", MPIEXEC_TIMEOUT="600", OMP_NUM_THREADS="1")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "r.json")
        for n in [int(r) for r in args.ranks.split(",")]:
            runs = {"ps_colocated": [], "allreduce": []}
            for _ in range(args.repeats):
                subprocess.run(["mpiexec", "-iface", "lo", "-n", str(n), os.path.join(args.build, "examples", "fashion_mnist_mlp"),
                                "--servers", "0", "--epochs", str(args.epochs), "--report", report],
                               check=True, env=env, stdout=subprocess.DEVNULL)
                with open(report) as f:
                    r = json.load(f)
                runs["ps_colocated"].append({"samples_per_second": r["samples_per_second"], "test_accuracy": r["test_accuracy"]})
                out = subprocess.run(["mpiexec", "-iface", "lo", "-n", str(n), os.path.join(args.build, "bench", "allreduce_training"),
                                      "--epochs", str(args.epochs)], check=True, env=env, capture_output=True, text=True).stdout
                r = json.loads(out.strip().splitlines()[-1])
                runs["allreduce"].append({"samples_per_second": r["samples_per_second"], "test_accuracy": r["test_accuracy"]})
            row = {"ranks": n, "runs": runs}
            for k, v in runs.items():
                s = [x["samples_per_second"] for x in v]
                row[k] = {"median": statistics.median(s), "min": min(s), "max": max(s), "test_accuracy": v[0]["test_accuracy"]}
            ratios = [a["samples_per_second"] / b["samples_per_second"] for a, b in zip(runs["ps_colocated"], runs["allreduce"])]
            row["ratio_ps_over_allreduce"] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}
            results.append(row)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"benchmark": "allreduce_vs_ps", "epochs": args.epochs, "repeats": args.repeats, "results": results}, f, indent=1)
    fmt = lambda s, d=0: f"{s['median']:,.{d}f} ({s['min']:,.{d}f}-{s['max']:,.{d}f})"
    print("| ranks | PS colocated samples/s | allreduce samples/s | ratio PS / allreduce | test accuracy (PS, allreduce) |")
    print("| --- | --- | --- | --- | --- |")
    for r in results:
        print(f"| {r['ranks']} | {fmt(r['ps_colocated'])} | {fmt(r['allreduce'])} | {fmt(r['ratio_ps_over_allreduce'], 2)} | "
              f"{r['ps_colocated']['test_accuracy']:.4f}, {r['allreduce']['test_accuracy']:.4f} |")


if __name__ == "__main__":
    main()
