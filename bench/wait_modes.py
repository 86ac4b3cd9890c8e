#!/usr/bin/python3
"""Which way of waiting (HPCPS_WAIT, comm::WaitMode) is faster where: the same jobs under
HPCPS_WAIT=adaptive (spin 50 us, then sched_yield between polls: the default) and HPCPS_WAIT=sleep
(the same for 1 ms, then 50 us naps between polls), interleaved, --repeats times each, order
rotated each repeat.

Cases (one thread per process, UCX_NET_DEVICES=lo):
  cnn dedicated, one node      mpiexec -n 3 fashion_mnist_cnn --servers 1, 200 clocks of batch 128,
                               no evaluation: 3 processes on the machine's 2 cores
  cnn dedicated, 1 Gbit/s      the same across 3 pretend nodes (scripts/pretend_nodes, needs root;
                               skipped with a line where it cannot run), fp32 and scaled signs
                               with momentum correction and fp16 pulls (bench/link_study.py's
                               "sign mc/fp16")
  mlp colocated / 3+1          fashion_mnist_mlp, one epoch, no evaluation: mpiexec -n 2
                               (--servers 0) and -n 4 --servers 1
  push_pull point-to-point     mpiexec -n 2 bench/push_pull, 25M parameters, whole messages: the
                               case where a waiting rank drives a large transfer on shared memory

Per case and mode: samples/s (push_pull: seconds per clock), and for the examples worker 0's
compute and wait seconds; per repeat the speed of sleep over adaptive (> 1: sleep is faster).
JSON (--out) and a PNG of the ratios (--plot).

    /usr/bin/python3 bench/wait_modes.py --build build --repeats 5      # about 15 minutes on 2 cores
    /usr/bin/python3 bench/wait_modes.py --repeats 1 --cases mlp_colocated --out /tmp/w.json   # smoke
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from link_study import NODES, execute_reported  # noqa: E402  (the pretend nodes' 3-node finalize hang)
from time_to_accuracy import recorded, summary  # noqa: E402

CNN_CLOCKS = ["--servers", "1", "--batch", "128", "--lr", "0.02", "--schedule", "constant", "--no-evaluation",
              "--epochs", "1", "--train-samples", "25600", "--threads", "1"]
FP32 = ["--optimizer", "momentum", "--momentum", "0.9", "--wire", "fp32", "--pull-wire", "fp32"]
SIGNS = ["--optimizer", "sgd", "--wire", "fp32", "--sign-push", "--pull-wire", "fp16", "--top-k-momentum", "0.9"]
LINK = [NODES, "run", "--nodes", "3", "--rate", "1gbit", "--delay", "0", "--"]
# name: (launcher + program-relative arguments, needs pretend nodes, what it reports)
CASES = {
    "cnn_dedicated_one_node": (["mpiexec", "-n", "3", "{cnn}", *CNN_CLOCKS, *FP32], False, "report"),
    "cnn_dedicated_link_fp32": ([*LINK, "{cnn}", *CNN_CLOCKS, *FP32], True, "report"),
    "cnn_dedicated_link_signs": ([*LINK, "{cnn}", *CNN_CLOCKS, *SIGNS], True, "report"),
    "mlp_colocated": (["mpiexec", "-n", "2", "{mlp}", "--servers", "0", "--epochs", "1", "--no-evaluation",
                       "--threads", "1"], False, "report"),
    "mlp_3_workers_1_server": (["mpiexec", "-n", "4", "{mlp}", "--servers", "1", "--epochs", "1",
                                "--no-evaluation", "--threads", "1"], False, "report"),
    "push_pull_point_to_point": (["mpiexec", "-n", "2", "{push_pull}", "--repeats", "5"], False, "push_pull"),
}


def run_case(args, name, mode, seed, tmp):
    template, _, kind = CASES[name]
    programs = {"cnn": os.path.join(args.build, "examples", "fashion_mnist_cnn"),
                "mlp": os.path.join(args.build, "examples", "fashion_mnist_mlp"),
                "push_pull": os.path.join(args.build, "bench", "push_pull")}
    cmd = [c.format(**programs) for c in template]
    env = dict(os.environ, HPCPS_WAIT=mode, UCX_NET_DEVICES="lo", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               MPIEXEC_TIMEOUT=str(args.timeout))
    if kind == "push_pull":
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout + 60)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
        result = json.loads(done.stdout)
        return {"command": recorded(cmd), "clock_seconds": result["ps_point_to_point_clock_seconds_median"]}
    report_path = os.path.join(tmp, "report.json")
    if os.path.exists(report_path):
        os.remove(report_path)
    cmd += ["--seed", str(seed), "--report", report_path]
    _, wall, hang = execute_reported(cmd, env, args.timeout + 60)
    with open(report_path) as f:
        report = json.load(f)
    split = report["epochs"][-1]["time_split"]
    return {"command": recorded(cmd), "samples_per_second": report["samples_per_second"],
            "worker0_compute_seconds": split["compute_seconds"], "worker0_wait_seconds": split["wait_seconds"],
            "server_wait_seconds": report["server"]["wait_seconds"], "finalize_hang": hang,
            "train_loss": report["epochs"][-1]["train_loss"]}  # the same under every wait, seed for seed


def speed(run):
    """Higher is faster, whichever figure the case reports."""
    return run["samples_per_second"] if "samples_per_second" in run else 1.0 / run["clock_seconds"]


def write(args, cases, runs, repeats, started):
    results, ratios = {}, {}
    for name in cases:
        results[name] = {}
        for mode in args.modes:
            rs = runs[name][mode]
            figure = "samples_per_second" if rs and "samples_per_second" in rs[0] else "clock_seconds"
            results[name][mode] = {figure: summary([r[figure] for r in rs])}
            if figure == "samples_per_second":
                results[name][mode]["worker0_compute_seconds"] = summary([r["worker0_compute_seconds"] for r in rs])
                results[name][mode]["worker0_wait_seconds"] = summary([r["worker0_wait_seconds"] for r in rs])
        for mode in args.modes[1:]:
            per_repeat = [speed(b) / speed(a) for a, b in zip(runs[name][args.modes[0]], runs[name][mode])]
            ratios[f"{name}: {mode} / {args.modes[0]}"] = {"summary": summary(per_repeat), "per_repeat": per_repeat}
    out = {"benchmark": "wait_modes", "modes": args.modes, "repeats": repeats, "cpus": os.cpu_count(),
           "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", ""), "build": args.build,
           "total_seconds": time.perf_counter() - started, "results": results,
           "ratios (speed, > 1: the second mode is faster)": ratios, "runs": runs}
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    return ratios


def plot(path, ratios):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(ratios)
    med = [ratios[n]["summary"]["median"] for n in names]
    lo = [m - ratios[n]["summary"]["min"] for m, n in zip(med, names)]
    hi = [ratios[n]["summary"]["max"] - m for m, n in zip(med, names)]
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(names) + 1.5))
    ax.barh(range(len(names)), med, xerr=[lo, hi], color="tab:blue", capsize=3)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels([n.split(":")[0] for n in names])
    ax.invert_yaxis()
    ax.set_xlabel(f"speed, {names[0].split(': ')[1]} (median, min-max over repeats; > 1: faster)")
    ax.set_title("HPCPS_WAIT: which wait is faster where (2 cores)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--modes", default="adaptive,sleep", help="HPCPS_WAIT values; ratios are over the first")
    p.add_argument("--cases", default=",".join(CASES), help="comma-separated subset of: " + ", ".join(CASES))
    p.add_argument("--timeout", type=int, default=300, help="seconds one run may take")
    p.add_argument("--out", default=os.path.join(HERE, "results", "wait_modes.json"))
    p.add_argument("--plot", default=None, help="PNG path (default: --out with .png)")
    args = p.parse_args()
    args.modes = [m.strip() for m in args.modes.split(",")]
    cases = [c.strip() for c in args.cases.split(",")]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        p.error(f"unknown cases {unknown}; choose from {list(CASES)}")
    if any(CASES[c][1] for c in cases):
        check = subprocess.run([NODES, "check"], capture_output=True, text=True)
        if check.returncode != 0:
            print(f"wait_modes.py: skipping the cases across pretend nodes: {check.stderr.strip()}", file=sys.stderr)
            cases = [c for c in cases if not CASES[c][1]]
    runs = {c: {m: [] for m in args.modes} for c in cases}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hpcps_wait_") as tmp:
        for r in range(args.repeats):
            for name in cases:
                modes = args.modes[r % len(args.modes):] + args.modes[:r % len(args.modes)]
                for mode in modes:
                    run = run_case(args, name, mode, r + 1, tmp)
                    run["repeat"] = r + 1
                    runs[name][mode].append(run)
                    shown = (f"{run['samples_per_second']:,.0f} samples/s" if "samples_per_second" in run
                             else f"{run['clock_seconds'] * 1e3:.2f} ms a clock")
                    print(f"repeat {r + 1} {name} {mode}: {shown}", file=sys.stderr, flush=True)
            ratios = write(args, cases, runs, r + 1, started)
    plot(args.plot or os.path.splitext(args.out)[0] + ".png", ratios)
    for n, v in ratios.items():
        s = v["summary"]
        print(f"{n}: {s['median']:.2f} ({s['min']:.2f}-{s['max']:.2f})")
    print(f"JSON: {args.out}; {time.perf_counter() - started:.0f} s in all")


if __name__ == "__main__":
    main()
