#!/usr/bin/python3
"""Server aggregation against memory bandwidth (performance target 4: summing W gradient slices and
applying the update runs at >= 70% of the STREAM-style bandwidth measured in the same run).

Runs bench/server_aggregation once (one process, one thread): STREAM-style copy/add/triad on
arrays of N floats, interleaved within every repeat with ps::detail::aggregate_and_step for W = 1..4
contributor slices and three update rules (momentum SGD, plain SGD, Adam), and with the unfused
loop the server used before (sum into a shard-sized buffer, then the rule). Writes the program's
JSON (--out) and a PNG (--plot) of effective GB/s per kernel, with the STREAM rates as reference
and a line at 70% of the reference (the better of add and triad), and prints a Markdown table.

    /usr/bin/python3 bench/server_aggregation.py --build build --floats 25000000 --repeats 7
"""
import argparse
import json
import os
import subprocess
import sys


def plot(result, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kernels = result["kernels"]
    ref = result["reference_gbytes_per_second"]
    stream = [k for k in kernels if k["kind"] == "stream"]
    rules = []
    for k in kernels:
        if k["rule"] and k["rule"] not in rules:
            rules.append(k["rule"])
    fig, axes = plt.subplots(1, 1 + len(rules), figsize=(4 + 4 * len(rules), 4.5), sharey=True,
                             gridspec_kw={"width_ratios": [len(stream)] + [4] * len(rules)})

    def bars(ax, xs, rows, color, label, width=0.8, shift=0.0):
        med = [r["gbytes_per_second_median"] for r in rows]
        err = [[m - r["gbytes_per_second_min"] for m, r in zip(med, rows)],
               [r["gbytes_per_second_max"] - m for m, r in zip(med, rows)]]
        ax.bar([x + shift for x in xs], med, width, yerr=err, capsize=3, color=color, label=label)

    ax = axes[0]
    bars(ax, range(len(stream)), stream, "tab:gray", "STREAM-style")
    ax.set_xticks(range(len(stream)))
    ax.set_xticklabels([k["name"].replace("stream ", "") for k in stream], rotation=30, ha="right")
    ax.set_title("memory bandwidth")
    ax.set_ylabel("GB/s (counted traffic), median, min-max")
    for ax, rule in zip(axes[1:], rules):
        fused = [k for k in kernels if k["rule"] == rule and k["kind"] == "fused"]
        unfused = [k for k in kernels if k["rule"] == rule and k["kind"] == "unfused"]
        xs = range(len(fused))
        bars(ax, xs, fused, "tab:blue", "fused (aggregate_and_step)", 0.4, -0.2)
        bars(ax, xs, unfused, "tab:orange", "unfused (sum buffer, then rule)", 0.4, 0.2)
        ax.set_xticks(list(xs))
        ax.set_xticklabels([f"W={k['contributors']}" for k in fused])
        ax.set_title(rule)
    for ax in axes:
        ax.axhline(ref, color="black", linewidth=1, label=f"reference ({result['reference']}) {ref:.1f} GB/s")
        ax.axhline(0.7 * ref, color="red", linestyle="--", linewidth=1, label="70% of reference")
    handles, labels = axes[-1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=9, frameon=False)
    fig.suptitle(f"Server aggregation, shard of {result['floats']:,} floats, 1 thread, "
                 f"{result['repeats']} interleaved repeats")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=120)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build", help="build directory holding bench/server_aggregation")
    p.add_argument("--floats", type=int, default=25_000_000, help="shard size N in floats")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--out", default="bench/results/server_aggregation.json")
    p.add_argument("--plot", default=None, help="PNG path (default: --out with .png)")
    p.add_argument("--timeout", type=int, default=1800, help="seconds before the run is killed")
    args = p.parse_args()
    plot_path = args.plot or os.path.splitext(args.out)[0] + ".png"
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    exe = os.path.join(args.build, "bench", "server_aggregation")
    # The program's own table goes to stderr, straight through.
    subprocess.run([exe, "--floats", str(args.floats), "--repeats", str(args.repeats), "--out", args.out],
                   check=True, env=env, timeout=args.timeout)
    with open(args.out) as f:
        result = json.load(f)

    ref = result["reference"]
    print(f"\nN = {result['floats']:,} floats, {result['repeats']} repeats; reference = {ref} "
          f"{result['reference_gbytes_per_second']:.1f} GB/s (median)\n")
    print("| kernel | GB/s median (min-max) | / copy | / add | / triad | / reference, paired per repeat (min-max) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for k in result["kernels"]:
        print(f"| {k['name']} | {k['gbytes_per_second_median']:.1f} ({k['gbytes_per_second_min']:.1f}-"
              f"{k['gbytes_per_second_max']:.1f}) | {k['over_copy']:.2f} | {k['over_add']:.2f} | {k['over_triad']:.2f} | "
              f"{k['over_reference_paired_median']:.2f} ({k['over_reference_paired_min']:.2f}-"
              f"{k['over_reference_paired_max']:.2f}) |")
    fused = [k for k in result["kernels"] if k["kind"] == "fused"]
    worst = min(fused, key=lambda k: k["over_reference_paired_median"])
    print(f"\nslowest fused kernel: {worst['name']} at {worst['over_reference_paired_median']:.2f} of the reference "
          f"(target 0.70)")
    try:
        plot(result, plot_path)
        print(f"wrote {args.out} and {plot_path}")
    except ImportError as e:
        print(f"wrote {args.out}; no plot ({e}): run with /usr/bin/python3", file=sys.stderr)


if __name__ == "__main__":
    main()
