#!/usr/bin/python3
"""Does a compressed push train to the accuracy of fp32 pushes, in every synchronization strategy?

For each strategy (BSP, SSP, async) and each wire (fp32, and the compressed ones: topk<r>,
topk<r>mc with momentum correction on the workers and plain SGD on the server, sign[mc] for
scaled-sign pushes, bf16, fp16, as bench/link_study.py spells them), trains
examples/fashion_mnist_<model> on 2 workers + 1 dedicated server (mpiexec -n 3 --servers 1; --layout colocated: 2 ranks, --servers 0) for --epochs
with the link study's recipe (momentum 0.9, constant learning rate, global batch 128; --schedule
cosine decays it to 0 over the run instead) and records
the final test accuracy. Repeat r uses seed --seed + r for every (strategy, wire), so each
compressed run pairs with the fp32 run of its strategy and repeat: the figure is the per-repeat
difference in accuracy points (compressed - fp32), median and min-max, against the 0.5-point
tolerance of issue 25. Over loopback: this asks about accuracy, not time (bench/link_study.py asks
about time on a throttled link); the async and SSP runs' interleaving, and so their accuracy,
still depends on the machine's load.

    /usr/bin/python3 bench/compression_accuracy.py --build build --repeats 3 \\
        --out bench/results/compression_accuracy.json
    /usr/bin/python3 bench/compression_accuracy.py --build build --repeats 1 --epochs 1  # smoke

The JSON is rewritten after every run, so a study cut short keeps what it measured.
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from link_study import optimizer_arguments, wire_arguments  # noqa: E402  the wires' spelling, shared with the link study
from time_to_accuracy import execute  # noqa: E402

TOLERANCE_POINTS = 0.5


def run(args, strategy, wire, seed, tmp):
    report_path = os.path.join(tmp, "report.json")
    if os.path.exists(report_path):
        os.remove(report_path)
    ranks, servers = (3, 1) if args.layout == "dedicated" else (2, 0)
    cmd = ["mpiexec", "-iface", "lo", "-n", str(ranks), os.path.join(args.build, "examples", f"fashion_mnist_{args.model}"),
           "--servers", str(servers), "--sync", strategy, "--batch", "128", *optimizer_arguments(wire), "--lr",
           str(args.lr), "--schedule", args.schedule, *wire_arguments(wire), "--epochs",
           str(args.epochs), "--evaluations-per-epoch", "1", "--threads", "1", "--seed", str(seed), "--report",
           report_path]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", UCX_NET_DEVICES="lo",
               MPIEXEC_TIMEOUT=str(args.timeout))
    _, wall, _ = execute(cmd, env, args.timeout + 60)
    with open(report_path) as f:
        report = json.load(f)
    evaluations = report["evaluations"]
    return {"strategy": strategy, "wire": wire, "seed": seed, "date": datetime.datetime.now(datetime.timezone.utc)
            .isoformat(timespec="seconds"), "final_test_accuracy": evaluations[-1]["test_accuracy"],
            "curve": [[e["epoch"], e["test_accuracy"]] for e in evaluations], "wall_seconds": wall,
            "samples_per_second": report["samples_per_second"], "command": " ".join(cmd)}


def spread(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)} if values else None


def summarize(args, runs):
    rows = []
    for strategy in args.strategies:
        fp32 = {r["seed"]: r["final_test_accuracy"] for r in runs if r["strategy"] == strategy and r["wire"] == "fp32"}
        for wire in args.wires:
            mine = {r["seed"]: r["final_test_accuracy"] for r in runs if r["strategy"] == strategy and r["wire"] == wire}
            if not mine:
                continue
            row = {"strategy": strategy, "wire": wire, "repeats": len(mine), "final_test_accuracy": spread(list(mine.values()))}
            if wire != "fp32":
                diffs = [100.0 * (mine[s] - fp32[s]) for s in mine if s in fp32]
                row["points_vs_fp32"] = spread(diffs)
                if diffs:
                    row["within_tolerance"] = statistics.median(diffs) >= -TOLERANCE_POINTS
            rows.append(row)
    return rows


def print_table(rows):
    print("| strategy | wire | runs | final accuracy, median (min-max) | points vs fp32, per repeat median (min-max) |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        a = r["final_test_accuracy"]
        d = r.get("points_vs_fp32")
        diff = "-" if not d else f"{d['median']:+.2f} ({d['min']:+.2f} to {d['max']:+.2f})"
        print(f"| {r['strategy']} | {r['wire']} | {r['repeats']} | {a['median']:.4f} ({a['min']:.4f}-{a['max']:.4f}) | {diff} |")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default="build")
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--layout", choices=["dedicated", "colocated"], default="dedicated")
    p.add_argument("--strategies", default="bsp,ssp,async")
    p.add_argument("--wires", default="fp32,topk0.01,topk0.1")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--schedule", choices=["constant", "cosine"], default="constant")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=int, default=1800, help="seconds per run (MPIEXEC_TIMEOUT)")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    args.strategies = args.strategies.split(",")
    args.wires = args.wires.split(",")
    if "fp32" not in args.wires:
        args.wires.insert(0, "fp32")
    for w in args.wires:
        wire_arguments(w)  # refuses an unknown wire before anything runs
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for strategy in args.strategies:
                for wire in args.wires:
                    result = run(args, strategy, wire, args.seed + r, tmp)
                    runs.append(result)
                    print(f"repeat {r + 1}: {strategy} {wire}: final {result['final_test_accuracy']:.4f}, "
                          f"{result['samples_per_second']:,.0f} samples/s", file=sys.stderr, flush=True)
                    if args.out:
                        with open(args.out, "w") as f:
                            json.dump({"benchmark": "compression_accuracy", "started": started, "model": args.model,
                                       "layout": args.layout, "epochs": args.epochs, "lr": args.lr, "schedule": args.schedule,
                                       "tolerance_points": TOLERANCE_POINTS, "summary": summarize(args, runs),
                                       "runs": runs}, f, indent=1)
    print_table(summarize(args, runs))


if __name__ == "__main__":
    main()
