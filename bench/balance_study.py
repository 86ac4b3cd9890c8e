#!/usr/bin/python3
"""Heterogeneous workers: with one worker computing --slowdown times slower (the examples'
--slow-worker, the last worker), which way of sharing the work keeps the slow worker from setting
the pace, and what does each cost when all speeds are equal? Static and balanced BSP (--balance
speed: each clock's batch split by measured speed) on the colocated layout (2 ranks, both workers)
and the dedicated one (2 workers + 1 server); on the dedicated one also BSP with one backup worker
(--backup-workers 1), and SSP (s = 2) and asynchronous training with static shards and with
workers that draw their parts as they become free (--balance speed). Each configuration
--repeats times, interleaved round-robin so machine noise spreads over all.

Per run: the training seconds of all --epochs epochs (the slowest worker's: an asynchronous
worker's epochs end at its own pace), those of the first 3 epochs (bsp only, whose workers move
together), the training seconds until the test accuracy (evaluated on rank 0
--evaluations-per-epoch times an epoch, evaluation time excluded) first reaches --target, the final
accuracy, and the balanced runs' split over time. Writes JSON (--out),
a PNG (--plot; needs python3-matplotlib) and a Markdown table (median, min-max).

--scenario varying: the straggler comes and goes (--slow-period clocks slow, as many at full
speed), every configuration with the worker slowed only, and the plot is the balanced split
over time with the slow phases shaded: how fast the balancer follows a speed that changes.
--straggler paused: the worker is not made slower at computing but stopped from outside
(bench/pause_rank.py: SIGSTOP for --pause-share of every --pause-period seconds, SIGCONT for the
rest), so the pause falls wherever it is: compute, push or wait. --batch sets the global batch
(the clock's length against the pause's period).
--smoke: one repetition of one epoch, written into the temporary folder, not bench/results.

    /usr/bin/python3 bench/balance_study.py --build build --repeats 5
    /usr/bin/python3 bench/balance_study.py --build build --repeats 5 --scenario varying
"""
import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pause_rank import run_paused  # noqa: E402
from straggler_study import example_env, fmt, pyplot, run_example, summarize  # noqa: E402

# (layout, ranks, servers), then (label, sync flags) per strategy; SSP and async need a server.
LAYOUTS = [("colocated", 2, 0), ("dedicated", 3, 1)]
# "drawn": the workers take the next part of a clock as they become free (--balance speed).
STRATEGIES = [("bsp static", ["--sync", "bsp"]), ("bsp balanced", ["--sync", "bsp", "--balance", "speed"]),
              ("bsp backup 1", ["--sync", "bsp", "--backup-workers", "1"]),
              ("ssp s=2", ["--sync", "ssp", "--staleness", "2"]),
              ("ssp s=2 drawn", ["--sync", "ssp", "--staleness", "2", "--balance", "speed"]),
              ("async", ["--sync", "async"]), ("async drawn", ["--sync", "async", "--balance", "speed"])]


def configs(scenario, strategies=None, slowed_only=False):
    out = []
    for layout, ranks, servers in LAYOUTS:
        for label, flags in STRATEGIES:
            if servers == 0 and label not in ("bsp static", "bsp balanced"):
                continue  # the others need a rank that only serves
            if strategies and label not in strategies:
                continue
            for slowed in (True, False):
                if not slowed and (scenario == "varying" or slowed_only):
                    continue  # equal speeds: measured by the steady scenario
                out.append((layout, ranks, servers, label, tuple(flags), slowed))
    return out


def run_once(args, config, report_path):
    layout, ranks, servers, label, flags, slowed = config
    workers = ranks - servers
    cmd = ["mpiexec", "-iface", "lo", "-n", str(ranks), os.path.join(args.build, "examples", "fashion_mnist_mlp"),
           "--servers", str(servers), "--epochs", str(args.epochs),
           "--evaluations-per-epoch", str(args.evaluations_per_epoch), "--report", report_path, *flags]
    cmd += ["--batch", str(args.batch)] if args.batch else []
    pause = None
    if slowed and args.straggler == "paused":
        # Workers are the first ranks: the last worker is rank workers - 1 (rank 0 evaluates).
        _, pause = run_paused(cmd, example_env(args.timeout), workers - 1, args.pause_period, args.pause_share,
                              args.timeout + 30)
        with open(report_path) as f:
            report = json.load(f)
    else:
        if slowed:
            cmd += ["--slow-worker", str(workers - 1), "--slowdown", str(args.slowdown)]
            if args.scenario == "varying":
                cmd += ["--slow-period", str(args.slow_period)]
        report = run_example(cmd, report_path, args.timeout)
    hit = next((e["train_seconds"] for e in report["evaluations"] if e["test_accuracy"] >= args.target), None)
    return {
        "three_epochs_seconds": sum(e["seconds"] for e in report["epochs"][:3]),
        "time_to_target_seconds": hit,
        "final_test_accuracy": report["test_accuracy"],
        "train_seconds": report["train_seconds"],
        "splits": report.get("splits", []),
        "clocks": report["checkpoints"]["clocks"],
        "curve": [[e["train_seconds"], e["test_accuracy"]] for e in report["evaluations"]],
        "pause": pause,
        # Each worker's own compute / communicate / wait seconds, where the build reports them.
        "worker_times": report.get("worker_times", []),
    }


def straggler_label(args):
    if args.straggler == "paused":
        return f"paused {args.pause_share:.0%} of {args.pause_period:g} s"
    return f"{args.slowdown:g}x slower"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build")
    p.add_argument("--scenario", choices=["steady", "varying"], default="steady")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--evaluations-per-epoch", type=int, default=4)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--smoke", action="store_true", help="1 repetition of 1 epoch, results into the temporary folder")
    p.add_argument("--slowdown", type=float, default=4.0)
    p.add_argument("--straggler", choices=["compute", "paused"], default="compute",
                   help="compute: the example's --slow-worker/--slowdown; paused: stopped from outside")
    p.add_argument("--pause-period", type=float, default=0.2, help="paused: seconds of one stop-continue cycle")
    p.add_argument("--pause-share", type=float, default=0.75, help="paused: fraction of each period stopped")
    p.add_argument("--batch", type=int, default=0, help="global batch (0: the example's, 64)")
    # 150 clocks: an epoch (938 clocks) sees six phases, each long enough for the split to settle
    # (the speeds are averaged over about 20 clocks) before the speed turns again.
    p.add_argument("--slow-period", type=int, default=150, help="varying: clocks slow, then as many at full speed")
    p.add_argument("--strategies", help="comma-separated labels of STRATEGIES to run (default: all); "
                   "'bsp static' is always run, every ratio is against it")
    p.add_argument("--slowed-only", action="store_true", help="no runs with equal speeds")
    p.add_argument("--target", type=float, default=0.88)
    p.add_argument("--timeout", type=int, default=600)
    p.add_argument("--out", help="default: bench/results/balance.json, balance_varying.json with --scenario varying")
    p.add_argument("--plot", help="default: --out with .png")
    p.add_argument("--from-json", help="no runs: the table and plot again from a JSON this script wrote")
    args = p.parse_args()
    if args.straggler == "paused":
        if args.scenario == "varying":
            p.error("--straggler paused runs the steady scenario only")
        # As fast as a worker that computes 1 / (1 - share) times slower, on average.
        args.slowdown = 1.0 / (1.0 - args.pause_share)
    name = "balance" if args.scenario == "steady" else "balance_varying"
    if args.straggler == "paused":
        name = "balance_paused"
    if args.smoke:
        # A smoke run is no measurement: it must not replace the results in bench/results.
        args.repeats, args.epochs = 1, 1
        args.out = args.out or os.path.join(tempfile.gettempdir(), f"{name}_smoke.json")
    args.out = args.out or f"bench/results/{name}.json"
    args.plot = args.plot or os.path.splitext(args.out)[0] + ".png"

    strategies = None
    if args.strategies:
        strategies = {x.strip() for x in args.strategies.split(",")} | {"bsp static"}
        unknown = strategies - {label for label, _ in STRATEGIES}
        if unknown:
            p.error(f"--strategies: unknown {sorted(unknown)}; known: {[label for label, _ in STRATEGIES]}")
    runs = {c: [] for c in configs(args.scenario, strategies, args.slowed_only)}
    if args.from_json:
        with open(args.from_json) as f:
            saved = json.load(f)
        args.repeats, args.epochs = saved["repeats"], saved["epochs"]
        for r in saved["results"]:
            key = next(c for c in runs if c[0] == r["layout"] and c[3] == r["strategy"] and c[5] == r["slowed"])
            runs[key] = r["runs"]
        runs = {c: rs for c, rs in runs.items() if rs}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(0 if args.from_json else args.repeats):
            for c in runs:
                result = run_once(args, c, os.path.join(tmp, "report.json"))
                runs[c].append(result)
                t = result["time_to_target_seconds"]
                print(f"repeat {r + 1}/{args.repeats} {c[0]:9} {c[3]:12} {'slowed' if c[5] else 'equal':6}: "
                      f"training {result['train_seconds']:.1f} s, to {args.target}: "
                      f"{'-' if t is None else f'{t:.1f} s'}, final {result['final_test_accuracy']:.4f}",
                      file=sys.stderr, flush=True)

    results = []
    for c, rs in runs.items():
        layout, ranks, servers, label, flags, slowed = c
        results.append({
            "layout": layout, "ranks": ranks, "servers": servers, "strategy": label, "flags": list(flags),
            "slowed": slowed,
            "train_seconds": summarize([x["train_seconds"] for x in rs]),
            "three_epochs_seconds": summarize([x["three_epochs_seconds"] for x in rs]),
            "time_to_target": summarize([x["time_to_target_seconds"] for x in rs]),
            "reached_target": sum(x["time_to_target_seconds"] is not None for x in rs),
            "final_test_accuracy": summarize([x["final_test_accuracy"] for x in rs]),
            "runs": rs,
        })
    out = {"benchmark": "balance_study", "scenario": args.scenario, "epochs": args.epochs, "repeats": args.repeats,
           "straggler": args.straggler, "batch": args.batch or 64,
           "pause_period": args.pause_period if args.straggler == "paused" else 0,
           "pause_share": args.pause_share if args.straggler == "paused" else 0,
           "slowdown": args.slowdown, "slow_period": args.slow_period if args.scenario == "varying" else 0,
           "target": args.target, "slow_worker": "the last worker", "results": results}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)

    def static_of(r, slowed=None):
        slowed = r["slowed"] if slowed is None else slowed
        return next(x for x in results if x["layout"] == r["layout"] and x["strategy"] == "bsp static"
                    and x["slowed"] == slowed)

    # The ideal with one worker slowed, from the speeds: the static clock is the slow worker's
    # B/W samples at 1/slowdown of a fast worker's speed; at the sum of the speeds, W - 1 +
    # 1/slowdown fast workers' worth, the same B samples take (slowdown (W - 1) + 1) / W times
    # less (2.5x for 2 workers and 4x). Assumes compute-bound clocks and a core per rank.
    out["ideal_seconds"] = {}
    for layout, ranks, servers in LAYOUTS:
        workers = ranks - servers
        static = static_of({"layout": layout, "slowed": True})["train_seconds"]["median"]
        out["ideal_seconds"][layout] = static * workers / (args.slowdown * (workers - 1) + 1)
        print(f"ideal with the worker slowed, {layout}: {out['ideal_seconds'][layout]:.2f} s ({args.epochs} epochs)")
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)

    print(f"| layout | strategy | worker slowed | {args.epochs} epochs, s | vs static bsp | first 3 epochs, s | "
          f"to {args.target}, s | final test accuracy |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        base = static_of(r)["train_seconds"]["median"]
        speedup = base / r["train_seconds"]["median"]
        reached = "" if r["reached_target"] == args.repeats else f" [{r['reached_target']}/{args.repeats}]"
        three = fmt(r["three_epochs_seconds"]) if r["strategy"].startswith("bsp") else "-"
        print(f"| {r['layout']} ({r['ranks']} ranks) | {r['strategy']} | "
              f"{straggler_label(args) if r['slowed'] else 'none'} | {fmt(r['train_seconds'])} | {speedup:.2f}x | "
              f"{three} | {fmt(r['time_to_target'])}{reached} | {fmt(r['final_test_accuracy'], digits=4)} |")

    plt = pyplot()
    if plt is None:
        return
    if args.scenario == "varying":
        plot_varying(plt, args, results)
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8))
    rows = [r for r in results if r["slowed"]] + [r for r in results if not r["slowed"]]
    med = [r["train_seconds"]["median"] for r in rows]
    err = [[r["train_seconds"]["median"] - r["train_seconds"]["min"] for r in rows],
           [r["train_seconds"]["max"] - r["train_seconds"]["median"] for r in rows]]
    colors = ["tab:red" if r["slowed"] else "tab:blue" for r in rows]
    left.bar(range(len(rows)), med, yerr=err, capsize=3, color=colors)
    left.set_xticks(range(len(rows)),
                    [f"{r['layout'][:5]}\n{r['strategy']}\n{'slowed' if r['slowed'] else 'equal'}" for r in rows],
                    fontsize=7)
    left.set_ylabel(f"training seconds, {args.epochs} epochs (median, min-max)")
    left.set_title(f"Worker {straggler_label(args)} (red) and equal speeds (blue), {args.repeats} runs each")
    for r in results:
        if r["strategy"] != "bsp balanced" or not r["slowed"]:
            continue
        splits = r["runs"][len(r["runs"]) // 2]["splits"]
        if not splits:
            continue
        clocks = [s["clock"] for s in splits]
        share = [s["split"][-1] / sum(s["split"]) for s in splits]
        right.step(clocks, share, where="post", marker=".", label=f"{r['layout']} ({r['ranks']} ranks)")
    right.axhline(1 / (args.slowdown + 1), color="grey", linestyle=":", linewidth=1,
                  label=f"speed share 1/{args.slowdown + 1:g} (2 workers)")
    right.set_xlabel("clock")
    right.set_ylabel("slowed worker's share of the global batch")
    right.set_title("Balanced split over time (one run)")
    right.legend()
    fig.tight_layout()
    fig.savefig(args.plot, dpi=110)
    print(f"plot written to {args.plot}", file=sys.stderr)


def plot_varying(plt, args, results):
    """The slowed worker's share of the global batch over the clocks of the median balanced run of
    each layout, with the clocks at which it is slow shaded."""
    fig, ax = plt.subplots(figsize=(11, 4.8))
    last_clock = 0
    for r in results:
        if r["strategy"] != "bsp balanced":
            continue
        ordered = sorted(r["runs"], key=lambda x: x["train_seconds"])
        run = ordered[len(ordered) // 2]
        splits, end = run["splits"], run["clocks"]
        last_clock = max(last_clock, end)
        clocks = [s["clock"] for s in splits] + [end]
        share = [s["split"][-1] / sum(s["split"]) for s in splits]
        ax.step(clocks, share + share[-1:], where="post", label=f"{r['layout']} ({r['ranks']} ranks)")
    for start in range(0, last_clock, 2 * args.slow_period):
        ax.axvspan(start, min(start + args.slow_period, last_clock), color="tab:red", alpha=0.12, linewidth=0)
    ax.axhline(0.5, color="grey", linestyle=":", linewidth=1, label="static split (1/2)")
    ax.set_xlim(0, last_clock)
    ax.set_ylim(0, 0.6)
    ax.set_xlabel(f"clock (shaded: worker slowed {args.slowdown:g}x, {args.slow_period} clocks on, "
                  f"{args.slow_period} off)")
    ax.set_ylabel("slowed worker's share of the global batch")
    ax.set_title(f"Balanced split under a straggler that comes and goes (median run of {args.repeats})")
    ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(args.plot, dpi=110)
    print(f"plot written to {args.plot}", file=sys.stderr)


if __name__ == "__main__":
    main()
