#!/usr/bin/python3
"""Straggler study: synchronous vs stale-synchronous (s = 1, 2, 4) vs asynchronous training of the
Fashion-MNIST MLP, with no worker slowed and with one worker slowed down (3x by default), all in
one run. Each configuration runs --repeats times, interleaved round-robin so machine noise spreads
over all of them; the table gives the median and the range.

Measures, per run: the time until the test accuracy (evaluated on rank 0 several times per epoch)
first reaches --target, the final test accuracy, throughput, and the largest staleness a server
allowed. Writes JSON (--out) and a PNG plot (--plot; needs python3-matplotlib), prints a Markdown
table.

    bench/straggler_study.py --build build --repeats 5
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

STRATEGIES = [("bsp", None), ("ssp", 1), ("ssp", 2), ("ssp", 4), ("async", None)]


def example_env(timeout):
    """An example's environment under mpiexec: loopback, one thread per rank, Hydra's timeout."""
    return dict(os.environ, UCX_NET_DEVICES="lo", MPIEXEC_TIMEOUT=str(timeout), OMP_NUM_THREADS="1")


def run_example(cmd, report_path, timeout):
    """Runs an example under mpiexec on loopback, one thread per rank, and returns its JSON report."""
    subprocess.run(cmd, check=True, env=example_env(timeout), stdout=subprocess.DEVNULL, timeout=timeout + 30)
    with open(report_path) as f:
        return json.load(f)


def label(sync, staleness):
    return f"ssp s={staleness}" if sync == "ssp" else sync


def run_once(args, sync, staleness, slowed, report_path):
    cmd = ["mpiexec", "-iface", "lo", "-n", str(args.ranks), os.path.join(args.build, "examples", "fashion_mnist_mlp"),
           "--servers", "1", "--sync", sync, "--epochs", str(args.epochs), "--evaluations-per-epoch", str(args.evaluations_per_epoch),
           "--report", report_path]
    if staleness is not None:
        cmd += ["--staleness", str(staleness)]
    if slowed:
        # The last worker (rank 0 evaluates, so it is never the one slowed).
        cmd += ["--slow-worker", str(args.ranks - 2), "--slowdown", str(args.slowdown)]
    report = run_example(cmd, report_path, args.timeout)
    hit = next((e["elapsed_seconds"] for e in report["evaluations"] if e["test_accuracy"] >= args.target), None)
    return {
        "time_to_target_seconds": hit,
        "final_test_accuracy": report["test_accuracy"],
        "samples_per_second": report["samples_per_second"],
        "train_seconds": report["train_seconds"],
        "max_staleness": report["server"]["max_staleness"],
        "curve": [[e["elapsed_seconds"], e["test_accuracy"]] for e in report["evaluations"]],
    }


def summarize(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def fmt(summary, unit="", digits=1):
    """'median (min-max)' of a summarize() result, or 'not reached'."""
    if summary is None:
        return "not reached"
    return f"{summary['median']:.{digits}f}{unit} ({summary['min']:.{digits}f}-{summary['max']:.{digits}f})"


def pyplot():
    """matplotlib.pyplot on the Agg backend, or None (with a line on stderr) when it is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not found (apt-get install python3-matplotlib): no plot", file=sys.stderr)
        return None
    return plt


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build")
    p.add_argument("--ranks", type=int, default=4, help="MPI ranks: ranks-1 workers and 1 server")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--evaluations-per-epoch", type=int, default=4)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--slowdown", type=float, default=3.0)
    p.add_argument("--target", type=float, default=0.87)
    p.add_argument("--timeout", type=int, default=600)
    p.add_argument("--out", default="bench/results/straggler.json")
    p.add_argument("--plot", default="bench/results/straggler.png")
    args = p.parse_args()

    configs = [(sync, s, slowed) for slowed in (False, True) for sync, s in STRATEGIES]
    runs = {c: [] for c in configs}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for c in configs:
                sync, s, slowed = c
                result = run_once(args, sync, s, slowed, os.path.join(tmp, "report.json"))
                runs[c].append(result)
                t = result["time_to_target_seconds"]
                print(f"repeat {r + 1}/{args.repeats} {label(sync, s):10} {'slowed' if slowed else 'none':6}: "
                      f"to {args.target}: {'-' if t is None else f'{t:.1f} s'}, final {result['final_test_accuracy']:.4f}, "
                      f"max staleness {result['max_staleness']}", file=sys.stderr, flush=True)

    results = []
    for c in configs:
        sync, s, slowed = c
        rs = runs[c]
        results.append({
            "sync": sync, "staleness": s, "slowed": slowed, "label": label(sync, s),
            "time_to_target": summarize([x["time_to_target_seconds"] for x in rs]),
            "reached_target": sum(x["time_to_target_seconds"] is not None for x in rs),
            "final_test_accuracy": summarize([x["final_test_accuracy"] for x in rs]),
            "samples_per_second": summarize([x["samples_per_second"] for x in rs]),
            "train_seconds": summarize([x["train_seconds"] for x in rs]),
            "max_staleness": max(x["max_staleness"] for x in rs),
            "runs": rs,
        })
    out = {"benchmark": "straggler_study", "ranks": args.ranks, "workers": args.ranks - 1, "servers": 1,
           "epochs": args.epochs, "repeats": args.repeats, "slowdown": args.slowdown, "target": args.target,
           "slow_worker": args.ranks - 2, "results": results}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)

    print(f"| strategy | slowed worker | time to {args.target} (s) | final test accuracy | samples/s | training s | largest staleness |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        reached = "" if r["reached_target"] == args.repeats else f" [{r['reached_target']}/{args.repeats} reached]"
        print(f"| {r['label']} | {f'{args.slowdown:g}x' if r['slowed'] else 'none'} | {fmt(r['time_to_target'])}{reached} | "
              f"{fmt(r['final_test_accuracy'], digits=4)} | {fmt(r['samples_per_second'], digits=0)} | "
              f"{fmt(r['train_seconds'])} | {r['max_staleness']} |")

    plt = pyplot()
    if plt is None:
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8))
    labels = [label(s, k) for s, k in STRATEGIES]
    width = 0.38
    for i, slowed in enumerate((False, True)):
        rows = [r for r in results if r["slowed"] == slowed]
        med = [r["time_to_target"]["median"] if r["time_to_target"] else 0 for r in rows]
        err = [[(r["time_to_target"]["median"] - r["time_to_target"]["min"]) if r["time_to_target"] else 0 for r in rows],
               [(r["time_to_target"]["max"] - r["time_to_target"]["median"]) if r["time_to_target"] else 0 for r in rows]]
        xs = [x + (i - 0.5) * width for x in range(len(rows))]
        left.bar(xs, med, width, yerr=err, capsize=3,
                 label=f"worker {args.ranks - 2} slowed {args.slowdown:g}x" if slowed else "no worker slowed")
    left.set_xticks(range(len(labels)), labels)
    left.set_ylabel(f"seconds to {args.target} test accuracy (median, min-max)")
    left.set_title(f"Time to accuracy, {args.ranks - 1} workers + 1 server, {args.repeats} runs each")
    left.legend()
    for r in results:
        if not r["slowed"]:
            continue
        times = [x["time_to_target_seconds"] or 1e9 for x in r["runs"]]
        median_run = r["runs"][sorted(range(len(times)), key=lambda i: times[i])[len(times) // 2]]
        xs, ys = zip(*median_run["curve"])
        right.plot(xs, ys, marker=".", label=r["label"])
    right.axhline(args.target, color="grey", linestyle=":", linewidth=1)
    right.set_ylim(0.8, 0.9)
    right.set_xlabel("seconds since training started")
    right.set_ylabel("test accuracy")
    right.set_title(f"Test accuracy with worker {args.ranks - 2} slowed {args.slowdown:g}x (median run)")
    right.legend()
    fig.tight_layout()
    fig.savefig(args.plot, dpi=110)
    print(f"plot written to {args.plot}", file=sys.stderr)


if __name__ == "__main__":
    main()
