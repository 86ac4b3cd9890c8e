#!/usr/bin/python3
"""Wire formats: what 16-bit pushes (and pulls) cost in accuracy and buy in speed.

Trains the Fashion-MNIST MLP (examples/fashion_mnist_mlp) with gradients pushed as fp32, as bf16,
and as bf16 with the parameters pulled as bf16 too, in two layouts of 2 ranks: one worker plus one
dedicated server (--servers 1) and two colocated worker-servers (--servers 0). Each configuration
runs --repeats times, interleaved round-robin so machine noise spreads over all of them; repeat r
uses seed --seed + r in every configuration, so the accuracy cost is also given as the median of
the paired differences to fp32 (same initialisation, same sample order). Reports the final test
accuracy and the training throughput (median and min-max), then the communication alone: one
clock of bench/push_pull (push + pull of a --pp-parameters model, no computation) per format, and
for fp32 also with shared memory off. fp32 is the only format that shares memory between the ranks
of a node (Options::shared_memory): a 16-bit wire exists to halve bytes on a link.

Prints a table, writes JSON (--out) and a PNG plot (--plot, if matplotlib is there).

    bench/wire_format.py --build build --epochs 10 --repeats 5
    bench/wire_format.py --build build --repeats 1 --epochs 1 --pp-parameters 1000000   # smoke run
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

# (label, --wire, --pull-wire)
WIRES = [("fp32", "fp32", "fp32"), ("bf16", "bf16", "fp32"), ("bf16 both", "bf16", "bf16")]
LAYOUTS = [("1 worker + 1 server", 1), ("2 colocated", 0)]


def environment(args):
    # One compute thread per rank on both sides of every comparison.
    return dict(os.environ, UCX_NET_DEVICES="lo", MPIEXEC_TIMEOUT=str(args.timeout), OMP_NUM_THREADS="1",
                OPENBLAS_NUM_THREADS="1")


def train_once(args, servers, wire, pull_wire, seed, report_path):
    cmd = ["mpiexec", "-iface", "lo", "-n", "2", os.path.join(args.build, "examples", "fashion_mnist_mlp"),
           "--servers", str(servers), "--epochs", str(args.epochs), "--seed", str(seed), "--wire", wire,
           "--pull-wire", pull_wire, "--report", report_path]
    subprocess.run(cmd, check=True, env=environment(args), stdout=subprocess.DEVNULL, timeout=args.timeout + 30)
    with open(report_path) as f:
        report = json.load(f)
    if report["config"].get("wire") != wire or report["config"].get("pull_wire") != pull_wire:
        sys.exit(f"wire_format.py: the report does not record --wire {wire} --pull-wire {pull_wire}; "
                 "rebuild fashion_mnist_mlp")
    return {
        "seed": seed,
        "final_test_accuracy": report["test_accuracy"],
        "samples_per_second": report["samples_per_second"],
        "train_seconds": report["train_seconds"],
        # fp32 exchanges through shared memory on one node (Options::shared_memory); 16-bit wires cannot.
        "shared_memory": bool(report["config"].get("shared_memory", False)),
    }


def push_pull(args, wire, pull_wire):
    cmd = ["mpiexec", "-iface", "lo", "-n", "2", os.path.join(args.build, "bench", "push_pull"),
           "--parameters", str(args.pp_parameters), "--repeats", str(args.repeats), "--clocks", str(args.pp_clocks),
           "--wire", wire, "--pull-wire", pull_wire]
    out = subprocess.run(cmd, check=True, env=environment(args), capture_output=True, text=True,
                         timeout=args.timeout + 30)
    result = json.loads(out.stdout)
    if result.get("wire") != wire:
        sys.exit("wire_format.py: bench/push_pull does not know --wire; rebuild it")
    return result


def summarize(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def fmt_range(s, digits, scale=1.0):
    return f"{s['median'] * scale:.{digits}f} ({s['min'] * scale:.{digits}f}-{s['max'] * scale:.{digits}f})"


def plot(results, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not found: no plot", file=sys.stderr)
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    labels = [f"{'1w+1s' if c['servers'] else 'coloc.'}\n{c['wire_label']}" for c in results]
    x = range(len(results))
    for ax, key, title in ((axes[0], "final_test_accuracy", "final test accuracy"),
                           (axes[1], "samples_per_second", "training samples/s")):
        med = [c[key]["median"] for c in results]
        low = [c[key]["median"] - c[key]["min"] for c in results]
        high = [c[key]["max"] - c[key]["median"] for c in results]
        ax.bar(x, med, yerr=[low, high], capsize=4, color=["C0", "C1", "C2"] * len(LAYOUTS))
        ax.set_xticks(list(x))
        ax.set_xticklabels(labels, fontsize=8)
        ax.set_title(f"{title} (median, min-max)", fontsize=10)
        if key == "final_test_accuracy":
            lo = min(c[key]["min"] for c in results)
            hi = max(c[key]["max"] for c in results)
            ax.set_ylim(lo - 0.01, hi + 0.005)
    fig.suptitle("Fashion-MNIST MLP on 2 ranks: 1 worker + 1 server (1w+1s) or colocated", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot written to {path}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build", help="CMake build folder with examples/ and bench/")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--repeats", type=int, default=5, help="runs per configuration (and push_pull repeats)")
    p.add_argument("--seed", type=int, default=1, help="repeat r trains with seed + r")
    p.add_argument("--pp-parameters", type=int, default=25_000_000, help="model size of the push_pull runs")
    p.add_argument("--pp-clocks", type=int, default=10, help="clocks per push_pull repeat")
    p.add_argument("--timeout", type=int, default=600, help="seconds before one run is killed")
    p.add_argument("--out", default="bench/results/wire_format.json")
    p.add_argument("--plot", default="bench/results/wire_format.png")
    args = p.parse_args()

    configs = [(layout, servers, label, wire, pull) for layout, servers in LAYOUTS for label, wire, pull in WIRES]
    runs = {c: [] for c in configs}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for c in configs:
                layout, servers, label, wire, pull = c
                result = train_once(args, servers, wire, pull, args.seed + r, os.path.join(tmp, "report.json"))
                runs[c].append(result)
                print(f"repeat {r + 1}/{args.repeats} {layout}, {label}: accuracy {result['final_test_accuracy']:.4f}, "
                      f"{result['samples_per_second']:.0f} samples/s", file=sys.stderr)

    results = []
    for c in configs:
        layout, servers, label, wire, pull = c
        fp32 = runs[(layout, servers, "fp32", "fp32", "fp32")]
        by_seed = {x["seed"]: x for x in fp32}
        paired = [x["final_test_accuracy"] - by_seed[x["seed"]]["final_test_accuracy"] for x in runs[c]]
        speedup = [x["samples_per_second"] / by_seed[x["seed"]]["samples_per_second"] for x in runs[c]]
        results.append({
            "layout": layout, "servers": servers, "wire_label": label, "wire": wire, "pull_wire": pull,
            "final_test_accuracy": summarize([x["final_test_accuracy"] for x in runs[c]]),
            "accuracy_minus_fp32_same_seed": summarize(paired),
            "samples_per_second": summarize([x["samples_per_second"] for x in runs[c]]),
            "samples_per_second_over_fp32_same_repeat": summarize(speedup),
            "train_seconds": summarize([x["train_seconds"] for x in runs[c]]),
            "runs": runs[c],
        })

    comm = []
    for label, wire, pull in WIRES:
        r = push_pull(args, wire, pull)
        # "ps": as composed by default (shared memory on the node where the wire allows it, i.e. fp32);
        # "ps_point_to_point": the same run with Options::shared_memory off.
        for prefix, transport in (("ps", None), ("ps_point_to_point", "point-to-point")):
            if transport and r[prefix + "_shared_memory"] == r["ps_shared_memory"]:
                continue  # the 16-bit wires use point-to-point either way
            comm.append({"wire_label": label + (f", {transport}" if transport else ""), "wire": wire, "pull_wire": pull,
                         "shared_memory": r[prefix + "_shared_memory"],
                         "clock_seconds": {"median": r[prefix + "_clock_seconds_median"],
                                           "min": r[prefix + "_clock_seconds_min"],
                                           "max": r[prefix + "_clock_seconds_max"], "n": args.repeats},
                         "server_update_seconds_per_clock": r[prefix + "_server_update_seconds_per_clock"],
                         "wire_bytes_per_clock": 0.0 if r[prefix + "_shared_memory"] else r["ps_wire_bytes_per_clock"],
                         "push_pull": r})

    print(f"\nFashion-MNIST MLP, {args.epochs} epoch(s), {args.repeats} repeat(s) (median, min-max); "
          "accuracy cost = median over seeds of (accuracy - fp32 accuracy, same seed)")
    print(f"| {'layout':<20} | {'wire':<9} | {'final test accuracy':<26} | {'cost vs fp32':<12} | "
          f"{'samples/s':<22} | {'speed vs fp32':<13} |")
    print(f"|{'-' * 22}|{'-' * 11}|{'-' * 28}|{'-' * 14}|{'-' * 24}|{'-' * 15}|")
    for c in results:
        cost = c["accuracy_minus_fp32_same_seed"]["median"]
        print(f"| {c['layout']:<20} | {c['wire_label']:<9} | {fmt_range(c['final_test_accuracy'], 4):<26} | "
              f"{cost:+12.4f} | {fmt_range(c['samples_per_second'], 0):<22} | "
              f"{c['samples_per_second_over_fp32_same_repeat']['median']:>12.3f}x |")
    print(f"\npush_pull: one clock of 1 worker + 1 server, {args.pp_parameters} parameters, no computation")
    print(f"| {'wire':<25} | {'bytes/clock':>12} | {'clock ms':<22} | {'server update ms':>16} |")
    print(f"|{'-' * 27}|{'-' * 14}|{'-' * 24}|{'-' * 18}|")
    for c in comm:
        print(f"| {c['wire_label']:<25} | {c['wire_bytes_per_clock']:>12.0f} | {fmt_range(c['clock_seconds'], 2, 1e3):<22} | "
              f"{c['server_update_seconds_per_clock'] * 1e3:>16.2f} |")

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"benchmark": "wire_format", "epochs": args.epochs, "repeats": args.repeats, "seed": args.seed,
                   "ranks": 2, "threads_per_rank": 1, "training": results, "push_pull_parameters": args.pp_parameters,
                   "push_pull": comm}, f, indent=2)
    print(f"\nJSON written to {args.out}")
    if args.plot:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
