#!/usr/bin/python3
"""Scaling study of the parameter server: strong and weak scaling of examples/fashion_mnist_mlp with W
workers, in two layouts (dedicated: W workers + S server ranks; colocated: `--servers 0`, W ranks
that are each a worker and the server of their shard), for two networks: the communication-bound
784-256-128-10 and the compute-heavy 784-4096-4096-10.

- strong scaling: the global batch B is fixed (128 / 256), split among the W workers; the same
  samples and clocks at every W, so speedup S(p) = T(1) / T(p) with T the time per clock;
- weak scaling: the per-worker batch b is fixed (64 / 128), global batch W x b; each clock does W
  times the work, so the scaled speedup is S(p) = p T(1) / T(p).

p is the number of workers W. For each (model, scaling, layout[, S]) it reports, per W: seconds per
clock (train_seconds / clocks, clocks = epochs x ceil(shard / worker batch) as in
ps::clocks_per_epoch), samples/s, speedup, efficiency S/p, the Karp-Flatt serial fraction
e(p) = (1/S - 1/p) / (1 - 1/p) for p >= 2, a least-squares Amdahl fit of the serial fraction f
over all p (1/S = f + (1 - f)/p, linear in f), and the time per clock split into worker compute,
communicate (posting and completing the push), wait (for the pull), server update and server wait.
In the colocated layout a rank serves its own shard inside its push, so its "communicate" includes
its server's wait and update.

Runs whose ranks exceed the cores (os.sched_getaffinity) are oversubscribed and marked: on a
2-core machine only 2 ranks run truly in parallel. Every configuration runs --repeats times,
interleaved round-robin so machine noise spreads over all of them; tables give the median and the
min-max. The training runs with --no-evaluation (no test-set evaluation: it is not training time,
but in the dedicated layout the server would count rank 0's evaluation as waiting).

Prints Markdown tables, writes JSON (--out, one record per configuration plus the Amdahl fits) and
two PNG plots (--speedup-plot, --breakdown-plot; need python3-matplotlib).

    bench/scaling_study.py --build build                  # the full sweep, --repeats 5
    bench/scaling_study.py --build build --dry-run        # list the runs and a rough duration
    bench/scaling_study.py --build build --repeats 1 --models small --small-samples 4096   # smoke
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

# Figures for the duration estimate only (docs/performance.md and a smoke run, 2-core machine): the
# small model is communication-bound, about this many samples/s whatever W; the big one computes
# at about this many samples/s per core actually used; starting a run (MPI, loading Fashion-MNIST,
# building and sending the model) takes a base plus a part per rank.
NOMINAL = {"small": {"rate": 40000.0, "per_core": False, "startup": 1.5},
           "big": {"rate": 760.0, "per_core": True, "startup": 3.0}}
NOMINAL_STARTUP_PER_RANK_S = 0.5


def shard_size(total, part, parts):
    """data::shard_range(total, part, parts).size(): the first total % parts parts get one more."""
    return total // parts + (1 if part < total % parts else 0)


def clocks_per_epoch(samples, global_batch):
    """ps::clocks_per_epoch: one clock per global batch, the last one short."""
    return -(-samples // global_batch)


def summarize(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def int_list(text):
    return [int(x) for x in text.split(",") if x.strip()]


def default_worker_counts(limit):
    """1..limit when small; otherwise powers of two and the limit itself (a 16-core machine)."""
    if limit <= 4:
        return list(range(1, limit + 1))
    counts, p = [], 1
    while p < limit:
        counts.append(p)
        p *= 2
    return counts + [limit]


class Model:
    def __init__(self, key, hidden, strong_batch, worker_batch, epochs, samples):
        self.key, self.hidden = key, hidden
        self.strong_batch, self.worker_batch = strong_batch, worker_batch
        self.epochs, self.samples = epochs, samples
        self.name = "-".join(str(x) for x in [784] + hidden + [10])


def plan(args, models, cores):
    """Every configuration of the sweep, and the distinct runs they need (strong and weak scaling
    share a run where W x b equals B)."""
    configs = []
    for m in models:
        for scaling in args.scalings:
            for layout in args.layouts:
                server_counts = [0] if layout == "colocated" else args.servers
                for s in server_counts:
                    limit = args.max_ranks - s
                    counts = [w for w in (args.workers or default_worker_counts(limit)) if 1 <= w <= limit]
                    for w in counts:
                        batch = m.strong_batch if scaling == "strong" else w * m.worker_batch
                        if batch < w:
                            continue
                        ranks = w + s
                        configs.append({
                            "model_key": m.key, "model": m.name, "hidden": m.hidden, "scaling": scaling,
                            "layout": layout, "workers": w, "servers": s, "ranks": ranks, "global_batch": batch,
                            # worker 0's share: the largest, and the one that sets the clock count
                            "worker_batch": shard_size(batch, 0, w), "threads": 1,
                            "oversubscribed": ranks > cores, "epochs": m.epochs,
                            "train_samples": m.samples or 60000,
                            "run_key": (m.key, layout, w, s, batch),
                        })
    runs = {}
    for c in configs:
        runs.setdefault(c["run_key"], c)
    return configs, list(runs)


def run_once(args, model, layout, workers, servers, batch, report_path):
    ranks = workers + servers
    cmd = ["mpiexec", "-iface", "lo", "-n", str(ranks), args.binary,
           "--servers", str(servers), "--hidden", ",".join(str(h) for h in model.hidden), "--batch", str(batch),
           "--epochs", str(model.epochs), "--train-samples", str(model.samples), "--threads", "1",
           "--no-evaluation", "--report", report_path]
    env = dict(os.environ, UCX_NET_DEVICES="lo", MPIEXEC_TIMEOUT=str(args.timeout), OMP_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1")
    if os.path.exists(report_path):
        os.remove(report_path)
    for attempt in range(args.retries + 1):
        started = time.monotonic()
        proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              timeout=args.timeout + 30)
        if proc.returncode == 0:
            break
        print(f"run failed (rc {proc.returncode}, attempt {attempt + 1}): {' '.join(cmd)}\n{proc.stderr[-2000:]}",
              file=sys.stderr, flush=True)
    else:
        raise SystemExit(f"giving up on: {' '.join(cmd)}")
    process_seconds = time.monotonic() - started
    with open(report_path) as f:
        report = json.load(f)
    if report["workers"] != workers or (servers > 0 and report["servers"] != servers):
        raise SystemExit(f"report has {report['workers']} workers / {report['servers']} servers, expected "
                         f"{workers} / {servers}: {' '.join(cmd)}")
    samples = report["config"].get("train_samples", model.samples or 60000)
    per_epoch = clocks_per_epoch(samples, batch)
    # Warm-up epochs (--warmup-epochs) are left out of the worker figures; the server figures are
    # totals over the run, so they are always divided by all its clocks.
    epochs = report["epochs"][args.warmup_epochs:]
    clocks = per_epoch * len(epochs)
    all_clocks = per_epoch * len(report["epochs"])
    seconds = sum(e["seconds"] for e in epochs) if args.warmup_epochs else report["train_seconds"]
    trained = sum(e["samples"] for e in epochs)
    return {
        "seconds_per_clock": seconds / clocks,
        "samples_per_second": trained / seconds if args.warmup_epochs else report["samples_per_second"],
        "train_seconds": report["train_seconds"],
        "process_seconds": process_seconds,
        "clocks": clocks,
        "compute": sum(e["time_split"]["compute_seconds"] for e in epochs) / clocks,
        "communicate": sum(e["time_split"]["communicate_seconds"] for e in epochs) / clocks,
        "wait": sum(e["time_split"]["wait_seconds"] for e in epochs) / clocks,
        "server_update": report["server"]["update_seconds"] / all_clocks,
        "server_wait": report["server"]["wait_seconds"] / all_clocks,
        "server_updates": report["server"]["updates"],
        "network": report["config"].get("network"),
        # Whether rank 0 exchanged through shared memory (Options::shared_memory; older reports: no).
        "shared_memory": bool(report["config"].get("shared_memory", False)),
    }


def amdahl_fit(points):
    """Least squares of 1/S = f + (1 - f)/p, i.e. (1/S - 1/p) = f (1 - 1/p): linear in f through
    the origin, so f = sum(xy) / sum(x^2). p = 1 carries no information (x = 0)."""
    xs = [1.0 - 1.0 / p for p, _ in points]
    ys = [1.0 / s - 1.0 / p for p, s in points]
    sxx = sum(x * x for x in xs)
    if sxx == 0:
        return None
    f = sum(x * y for x, y in zip(xs, ys)) / sxx
    predicted = [1.0 / (f + (1.0 - f) / p) if f + (1.0 - f) / p > 0 else float("inf") for p, _ in points]
    rms = math.sqrt(sum((s - q) ** 2 for (_, s), q in zip(points, predicted)) / len(points))
    return {"f": f, "points": len(points), "rms_speedup_residual": rms,
            "max_speedup": (1.0 / f) if f > 0 else None}


def gustafson_fit(points):
    """Least squares of the scaled speedup S = p - f (p - 1): f = sum((p - S)(p - 1)) / sum((p - 1)^2)."""
    sxx = sum((p - 1) ** 2 for p, _ in points)
    if sxx == 0:
        return None
    f = sum((p - s) * (p - 1) for p, s in points) / sxx
    return {"f": f, "points": len(points)}


def analyse(configs):
    """Adds speedup, efficiency and Karp-Flatt to every configuration; returns the fits."""
    groups = {}
    for c in configs:
        groups.setdefault((c["model"], c["scaling"], c["layout"], c["servers"]), []).append(c)
    fits = []
    for (model, scaling, layout, servers), group in groups.items():
        base = next((c for c in group if c["workers"] == 1), None)
        for c in group:
            c["speedup"] = c["efficiency"] = c["karp_flatt"] = c["speedup_range"] = None
            if base is None:
                continue
            t1 = base["seconds_per_clock"]["median"]
            p = c["workers"]
            work = p if scaling == "weak" else 1  # a weak-scaling clock does p times the work
            c["speedup"] = work * t1 / c["seconds_per_clock"]["median"]
            c["speedup_range"] = [work * t1 / c["seconds_per_clock"]["max"], work * t1 / c["seconds_per_clock"]["min"]]
            c["efficiency"] = c["speedup"] / p
            if p >= 2:
                c["karp_flatt"] = (1.0 / c["speedup"] - 1.0 / p) / (1.0 - 1.0 / p)
        points = [(c["workers"], c["speedup"]) for c in group if c["speedup"]]
        fit = {"model": model, "hidden": group[0]["hidden"], "scaling": scaling, "layout": layout, "servers": servers}
        fit["all"] = amdahl_fit(points)
        fit["f"] = fit["all"]["f"] if fit["all"] else None  # the fit over all p, for readers of the JSON
        fit["not_oversubscribed"] = amdahl_fit([(c["workers"], c["speedup"]) for c in group
                                                if c["speedup"] and not c["oversubscribed"]])
        if scaling == "weak":
            fit["gustafson"] = gustafson_fit(points)
        fits.append(fit)
    return fits


def fmt_range(s, scale=1.0, digits=2):
    return f"{s['median'] * scale:.{digits}f} ({s['min'] * scale:.{digits}f}-{s['max'] * scale:.{digits}f})"


def opt(value, digits=2):
    return "-" if value is None else f"{value:.{digits}f}"


def print_tables(configs, fits, cores):
    print(f"Times in ms per clock, median (min-max) of the repeats; * = oversubscribed (more ranks than "
          f"the {cores} cores). Breakdown: worker compute / communicate (push) / wait (pull) per clock, "
          f"mean over workers; server update / wait per clock, mean over servers.\n")
    keys = []
    for c in configs:
        k = (c["model"], c["scaling"])
        if k not in keys:
            keys.append(k)
    for model, scaling in keys:
        rows = [c for c in configs if c["model"] == model and c["scaling"] == scaling]
        what = "fixed global batch" if scaling == "strong" else "fixed per-worker batch"
        print(f"### {model}, {scaling} scaling ({what})\n")
        print("| layout | W | S | ranks | B | b | ms/clock | samples/s | speedup | efficiency | Karp-Flatt | "
              "compute | push | pull wait | server update | server wait |")
        print("| --- " * 16 + "|")
        for c in rows:
            b = c["breakdown_per_clock"]
            print(f"| {c['layout']} | {c['workers']} | {c['servers']} | {c['ranks']}{'*' if c['oversubscribed'] else ''} | "
                  f"{c['global_batch']} | {c['worker_batch']} | {fmt_range(c['seconds_per_clock'], 1e3)} | "
                  f"{c['samples_per_second']['median']:,.0f} | {opt(c['speedup'])} | {opt(c['efficiency'])} | "
                  f"{opt(c['karp_flatt'], 3)} | {b['compute'] * 1e3:.2f} | {b['communicate'] * 1e3:.2f} | "
                  f"{b['wait'] * 1e3:.2f} | {b['server_update'] * 1e3:.2f} | {b['server_wait'] * 1e3:.2f} |")
        print()
    print("### Amdahl fits of the serial fraction f (least squares of 1/S = f + (1-f)/p over all p)\n")
    print("| model | scaling | layout | S | f, all p | rms residual of S | f, not oversubscribed | Gustafson f (weak) |")
    print("| --- " * 8 + "|")
    for fit in fits:
        a, n, g = fit["all"], fit["not_oversubscribed"], fit.get("gustafson")
        print(f"| {fit['model']} | {fit['scaling']} | {fit['layout']} | {fit['servers']} | "
              f"{opt(a and a['f'], 3)} | {opt(a and a['rms_speedup_residual'], 3)} | {opt(n and n['f'], 3)} | "
              f"{opt(g and g['f'], 3)} |")
    print()


def plot(args, configs):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not found (apt-get install python3-matplotlib): no plots", file=sys.stderr)
        return
    scalings = [s for s in ("strong", "weak") if any(c["scaling"] == s for c in configs)]
    series = []
    for c in configs:
        k = (c["model"], c["layout"], c["servers"])
        if k not in series:
            series.append(k)
    fig, axes = plt.subplots(2, len(scalings), figsize=(6.5 * len(scalings), 8.5), squeeze=False)
    for j, scaling in enumerate(scalings):
        top, bottom = axes[0][j], axes[1][j]
        pmax = 1
        for i, (model, layout, servers) in enumerate(series):
            rows = sorted((c for c in configs if c["scaling"] == scaling and (c["model"], c["layout"], c["servers"]) ==
                           (model, layout, servers) and c["speedup"] is not None), key=lambda c: c["workers"])
            if not rows:
                continue
            color = f"C{i}"
            name = f"{model}, {layout}" + (f" S={servers}" if layout == "dedicated" else "")
            ps = [c["workers"] for c in rows]
            pmax = max(pmax, max(ps))
            sp = [c["speedup"] for c in rows]
            err = [[c["speedup"] - c["speedup_range"][0] for c in rows], [c["speedup_range"][1] - c["speedup"] for c in rows]]
            top.errorbar(ps, sp, yerr=err, color=color, marker="o", capsize=3, label=name)
            bottom.plot(ps, [c["efficiency"] for c in rows], color=color, marker="o", label=name)
            over = [c for c in rows if c["oversubscribed"]]
            if over:  # hollow rings: more ranks than cores
                top.scatter([c["workers"] for c in over], [c["speedup"] for c in over], s=140, facecolors="none",
                            edgecolors="black", zorder=5)
                bottom.scatter([c["workers"] for c in over], [c["efficiency"] for c in over], s=140,
                               facecolors="none", edgecolors="black", zorder=5)
        top.plot([1, pmax], [1, pmax], color="grey", linestyle=":", label="ideal")
        bottom.axhline(1.0, color="grey", linestyle=":")
        label = "speedup T(1)/T(p)" if scaling == "strong" else "scaled speedup p T(1)/T(p)"
        top.set_title(f"{scaling} scaling: {label}\n(black rings: oversubscribed, more ranks than cores)")
        top.set_ylabel(label)
        bottom.set_ylabel("efficiency S(p)/p")
        for ax in (top, bottom):
            ax.set_xlabel("workers p")
            ax.set_xticks(range(1, pmax + 1))
            ax.grid(alpha=0.3)
        top.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.speedup_plot, dpi=110)
    plt.close(fig)

    models = []
    for c in configs:
        if c["model"] not in models:
            models.append(c["model"])
    fig, axes = plt.subplots(len(models), len(scalings), figsize=(7 * len(scalings), 4.5 * len(models)), squeeze=False)
    parts = [("compute", "C0"), ("push", "C1"), ("own server clock (colocated)", "C2"), ("pull wait", "C3"),
             ("other", "lightgrey")]
    for i, model in enumerate(models):
        for j, scaling in enumerate(scalings):
            ax = axes[i][j]
            rows = [c for c in configs if c["model"] == model and c["scaling"] == scaling]
            labels, stacks, server = [], [], []
            for c in rows:
                b = c["breakdown_per_clock"]
                own = b["server_update"] + b["server_wait"] if c["layout"] == "colocated" else 0.0
                push = max(b["communicate"] - own, 0.0)
                total = c["seconds_per_clock"]["median"]
                other = max(total - b["compute"] - b["communicate"] - b["wait"], 0.0)
                stacks.append([b["compute"], push, own, b["wait"], other])
                server.append(b["server_update"] if c["layout"] == "dedicated" else None)
                labels.append(f"{'D' if c['layout'] == 'dedicated' else 'C'} W={c['workers']}"
                              + (f" S={c['servers']}" if c["layout"] == "dedicated" else "")
                              + ("*" if c["oversubscribed"] else ""))
            xs = range(len(rows))
            bottom = [0.0] * len(rows)
            for k, (name, color) in enumerate(parts):
                values = [s[k] * 1e3 for s in stacks]
                ax.bar(xs, values, bottom=bottom, color=color, label=name)
                bottom = [b + v for b, v in zip(bottom, values)]
            dx = [x for x, s in zip(xs, server) if s is not None]
            if dx:
                ax.scatter(dx, [s * 1e3 for s in server if s is not None], marker="_", s=300, color="black",
                           zorder=5, label="dedicated server: update per clock")
            ax.set_xticks(list(xs), labels, rotation=45, ha="right", fontsize=8)
            ax.set_ylabel("ms per clock (median run time; parts: means)")
            ax.set_title(f"{model}, {scaling} scaling (D dedicated, C colocated, * oversubscribed)")
            ax.grid(axis="y", alpha=0.3)
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.breakdown_plot, dpi=110)
    plt.close(fig)
    print(f"plots written to {args.speedup_plot} and {args.breakdown_plot}", file=sys.stderr)


def main():
    cores = len(os.sched_getaffinity(0))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build", help="CMake build folder with examples/fashion_mnist_mlp")
    p.add_argument("--max-ranks", type=int, default=max(4, cores),
                   help="most MPI ranks of a run (default: the cores, at least 4, so a 2-core machine also shows "
                        "oversubscribed 3- and 4-rank runs)")
    p.add_argument("--workers", type=int_list, default=None,
                   help="worker counts W, e.g. 1,2,4 (default: 1..max-ranks-S up to 4, else powers of 2 and the limit)")
    p.add_argument("--servers", type=int_list, default=[1], help="server counts S of the dedicated layout, e.g. 1,2")
    p.add_argument("--layouts", type=lambda t: t.split(","), default=["dedicated", "colocated"])
    p.add_argument("--scalings", type=lambda t: t.split(","), default=["strong", "weak"])
    p.add_argument("--models", type=lambda t: t.split(","), default=["small", "big"], help="small, big or both")
    p.add_argument("--small-hidden", type=int_list, default=[256, 128])
    p.add_argument("--small-batch", type=int, default=128, help="small model: global batch of strong scaling")
    p.add_argument("--small-worker-batch", type=int, default=64, help="small model: per-worker batch of weak scaling")
    p.add_argument("--small-epochs", type=int, default=2)
    p.add_argument("--small-samples", type=int, default=0, help="small model: training samples (0: all 60,000)")
    p.add_argument("--big-hidden", type=int_list, default=[4096, 4096])
    p.add_argument("--big-batch", type=int, default=256)
    p.add_argument("--big-worker-batch", type=int, default=128)
    p.add_argument("--big-epochs", type=int, default=1)
    p.add_argument("--big-samples", type=int, default=4096)
    p.add_argument("--warmup-epochs", type=int, default=0,
                   help="leave the first epochs out of the worker figures (needs more epochs than this)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--retries", type=int, default=1, help="reruns of a failed or hung run before giving up")
    p.add_argument("--timeout", type=int, default=300, help="seconds per run (MPIEXEC_TIMEOUT)")
    p.add_argument("--dry-run", action="store_true", help="list the runs and a rough duration, run nothing")
    p.add_argument("--out", default="bench/results/scaling.json")
    p.add_argument("--speedup-plot", default="bench/results/scaling_speedup.png")
    p.add_argument("--breakdown-plot", default="bench/results/scaling_breakdown.png")
    args = p.parse_args()
    args.binary = os.path.join(args.build, "examples", "fashion_mnist_mlp")

    all_models = {
        "small": Model("small", args.small_hidden, args.small_batch, args.small_worker_batch, args.small_epochs,
                       args.small_samples),
        "big": Model("big", args.big_hidden, args.big_batch, args.big_worker_batch, args.big_epochs, args.big_samples),
    }
    for name in args.models:
        if name not in all_models:
            p.error(f"--models: unknown model '{name}' (small, big)")
    for name in args.layouts:
        if name not in ("dedicated", "colocated"):
            p.error(f"--layouts: unknown layout '{name}' (dedicated, colocated)")
    for name in args.scalings:
        if name not in ("strong", "weak"):
            p.error(f"--scalings: unknown scaling '{name}' (strong, weak)")
    if args.repeats < 1 or args.max_ranks < 1 or any(s < 1 for s in args.servers):
        p.error("--repeats, --max-ranks and --servers must be positive")
    models = [all_models[m] for m in args.models]
    if any(args.warmup_epochs >= m.epochs for m in models):
        p.error(f"--warmup-epochs {args.warmup_epochs} leaves no epoch to measure")
    if not args.dry_run and not os.access(args.binary, os.X_OK):
        p.error(f"{args.binary} not found: build the fashion_mnist_mlp target or pass --build")

    configs, run_keys = plan(args, models, cores)
    if not configs:
        p.error("no configuration left: check --workers, --max-ranks and --servers")
    by_key = {m.key: m for m in models}

    estimate = 0.0
    for mkey, layout, w, srv, batch in run_keys:
        m, nominal = by_key[mkey], NOMINAL[mkey]
        rate = nominal["rate"] * (0.85 * min(w, cores) if nominal["per_core"] and w > 1 else 1.0)
        estimate += nominal["startup"] + NOMINAL_STARTUP_PER_RANK_S * (w + srv) + (m.samples or 60000) * m.epochs / rate
    estimate *= args.repeats
    print(f"{len(configs)} configurations, {len(run_keys)} distinct runs x {args.repeats} repeats; "
          f"{cores} cores; rough duration {estimate / 60:.0f} min (quiet machine, nominal rates); "
          f"load average now {os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)
    if args.dry_run:
        for key in run_keys:
            mkey, layout, w, s, batch = key
            print(f"{by_key[mkey].name:>16} {layout:9} W={w} S={s} ranks={w + s} B={batch}")
        return

    measured = {k: [] for k in run_keys}
    started = time.monotonic()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        report_path = os.path.join(tmp, "report.json")
        for r in range(args.repeats):
            for i, key in enumerate(run_keys):
                mkey, layout, w, s, batch = key
                result = run_once(args, by_key[mkey], layout, w, s, batch, report_path)
                measured[key].append(result)
                print(f"repeat {r + 1}/{args.repeats} run {i + 1}/{len(run_keys)}: {by_key[mkey].name} {layout} "
                      f"W={w} S={s} B={batch}: {result['seconds_per_clock'] * 1e3:.2f} ms/clock, "
                      f"{result['samples_per_second']:,.0f} samples/s ({result['process_seconds']:.1f} s)",
                      file=sys.stderr, flush=True)
    elapsed = time.monotonic() - started

    for c in configs:
        rs = measured[c["run_key"]]
        c["seconds_per_clock"] = summarize([x["seconds_per_clock"] for x in rs])
        c["samples_per_second"] = summarize([x["samples_per_second"] for x in rs])
        # Per part, the median over the repeats (the parts of one run need not add up to its total).
        c["breakdown_per_clock"] = {part: statistics.median(x[part] for x in rs)
                                    for part in ("compute", "communicate", "wait", "server_update", "server_wait")}
        c["clocks"] = rs[0]["clocks"]
        c["train_seconds"] = summarize([x["train_seconds"] for x in rs])
        c["network"] = rs[0]["network"]
        c["shared_memory"] = rs[0]["shared_memory"]
    fits = analyse(configs)

    records = []
    for c in configs:
        rec = {k: v for k, v in c.items() if k not in ("run_key", "model_key")}
        records.append(rec)
    out = {
        "benchmark": "scaling_study",
        "program": "examples/fashion_mnist_mlp",
        "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
        "cores": cores, "max_ranks": args.max_ranks, "repeats": args.repeats, "warmup_epochs": args.warmup_epochs,
        "environment": {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "UCX_NET_DEVICES": "lo",
                        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
                        "HPCPS_WAIT": os.environ.get("HPCPS_WAIT", "adaptive (default)")},
        "load_average_before": load_before, "load_average_after": os.getloadavg(),
        "elapsed_seconds": elapsed,
        "notes": ["p = workers W; strong: speedup T(1)/T(p) with T seconds per clock; weak: scaled speedup p T(1)/T(p)",
                  "seconds_per_clock = train_seconds / (epochs x clocks_per_epoch), no test evaluation",
                  "breakdown: worker times are means over workers, server times means over servers; colocated "
                  "'communicate' includes the rank's own server wait and update",
                  "oversubscribed: ranks > cores"],
        "records": records,
        "amdahl": fits,
    }
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print_tables(configs, fits, cores)
    print(f"{len(run_keys) * args.repeats} runs in {elapsed:.0f} s; load average before {load_before[0]:.2f}, "
          f"after {os.getloadavg()[0]:.2f}; JSON written to {args.out}", file=sys.stderr)
    plot(args, configs)


if __name__ == "__main__":
    main()
