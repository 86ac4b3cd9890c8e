#!/usr/bin/python3
"""Time to accuracy on this machine: hpcps against PyTorch, same model (784-256-128-10, ReLU, or with
--model cnn the network of examples/fashion_mnist_cnn),
global batch (128), optimizer (SGD, momentum 0.9, constant learning rate 0.02) and data
(Fashion-MNIST), in one run. --model resnet trains examples/fashion_mnist_resnet's network (width 16)
with that example's recipe on both sides: Nesterov momentum 0.9 at 0.1 with a cosine decay to 0 over
--max-epochs, weight decay 5e-4, training images shifted by up to 2 pixels and mirrored at random.
Configurations:

  hpcps 2 ranks        examples/fashion_mnist_mlp --servers 0 (colocated: every rank a worker and
                       the server of its own shard, synchronous), mpiexec -n 2, 1 thread per rank
  hpcps 1 rank         the same on mpiexec -n 1
  PyTorch DDP 2 proc   bench/peers/pytorch_ddp.py: DistributedDataParallel, gloo, 2 processes x 1 thread
  PyTorch 1 thread     bench/peers/pytorch_mlp.py, one process, 1 thread
  PyTorch 2 threads    the same on 2 threads, run two ways as bench/peers/compare_pytorch.py does
                       (torch and OpenBLAS on 2 threads; torch on 1 intra-op thread with OpenBLAS on
                       2); the faster of the two counts in each repeat

OMP_NUM_THREADS and OPENBLAS_NUM_THREADS are set explicitly for every process (1 for the
two-process runs); OPENBLAS_CORETYPE is left as the machine sets it. Every configuration evaluates
the test set --evaluations-per-epoch times per epoch at the same fractional epochs (the schedule of
hpcps::ps::train, mirrored by the peers) and reports, per evaluation, the training seconds so far
with all evaluation time excluded on both sides. Per run: the training seconds to the first
evaluation with test accuracy >= --target ("not reached" within --max-epochs), the final test
accuracy and samples/s (all samples trained over their training seconds). Every run trains the
full --max-epochs unless --stop-at-target (peers only: the hpcps example has no early stop).
Runs are interleaved, the order rotated each repeat; the seed is --seed + repeat for every
configuration (--fixed-seed: --seed always), so the spread includes initialisation and shuffling.

Prints a Markdown table (median and min-max over repeats; the ratios hpcps 2 ranks / peer are
medians and ranges of the per-repeat ratios), writes JSON (--out) and a PNG plot (--plot) of test
accuracy against training seconds (every run faded, the median run of each configuration bold).

    /usr/bin/python3 bench/time_to_accuracy.py --build build --repeats 5
    /usr/bin/python3 bench/time_to_accuracy.py --build build --repeats 1 --max-epochs 2 --target 0.80  # smoke
    /usr/bin/python3 bench/time_to_accuracy.py --build build --model resnet --max-epochs 10 \
        --configs "hpcps 2 ranks,PyTorch DDP 2 proc" --stop-at-target --out bench/results/time_to_accuracy_resnet.json

The JSON and the plot are rewritten after every repeat, so a run cut short keeps what it measured;
--continue FILE runs the missing repeats of such a study (each run records its date).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TRAIN_SAMPLES = 60000  # Fashion-MNIST training set

# examples/fashion_mnist_resnet's recipe, spelled for the example and for the PyTorch peers.
RESNET_WIDTH = 16
RESNET_HPCPS_FLAGS = ["--optimizer", "nesterov", "--weight-decay", "5e-4", "--schedule", "cosine",
                      "--augment-shift", "2", "--augment-flip", "true"]
RESNET_PEER_FLAGS = ["--width", str(RESNET_WIDTH), "--nesterov", "--weight-decay", "5e-4", "--schedule", "cosine",
                     "--augment-shift", "2", "--augment-flip"]
# Per model: the defaults of --target and --lr.
DEFAULTS = {"mlp": (0.88, 0.02), "cnn": (0.88, 0.02), "resnet": (0.93, 0.1)}

CONFIGS = ["hpcps 2 ranks", "hpcps 1 rank", "PyTorch DDP 2 proc", "PyTorch 1 thread", "PyTorch 2 threads"]
HPCPS_2 = CONFIGS[0]


def thread_env(openblas, omp, **extra):
    return dict(os.environ, OPENBLAS_NUM_THREADS=str(openblas), OMP_NUM_THREADS=str(omp), **extra)


def recorded(cmd):
    """The command as the JSON keeps it: paths inside the repository relative to its root and the
    run's temporary files as $TMPDIR/name, so the results do not name this machine's folders."""
    tmp = tempfile.gettempdir() + os.sep

    def portable(c):
        if os.path.isabs(c) and c.startswith(REPO + os.sep):
            return os.path.relpath(c, REPO)
        if os.path.isabs(c) and c.startswith(tmp):
            return "$TMPDIR/" + os.path.basename(c)
        return c
    return [portable(c) for c in cmd]


def execute(cmd, env, timeout, finished=None):
    """Runs cmd; returns its stdout, wall seconds and, where it exited non-zero after printing
    `finished` (the line that says everything measured is out), that exit's error, else None.
    Any other non-zero exit raises. PyTorch 2.15's DDP once aborted a rank in its teardown after
    printing its summary ("terminate called without an active exception", 2026-12-07): with
    `finished`, such a run keeps its measurements."""
    started = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - started
    if proc.returncode == 0:
        return proc.stdout, wall, None
    if finished is not None and finished in proc.stdout:
        return proc.stdout, wall, f"exit code {proc.returncode}: {proc.stderr[-300:]}"
    raise RuntimeError(f"{' '.join(cmd)} failed with exit code {proc.returncode}:\n"
                       f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")


def outcome(evaluations, target, wall_seconds, detail):
    """One run's figures from its evaluations: dicts with epoch, train_seconds, test_accuracy and
    (optionally) samples, in order."""
    if not evaluations:
        raise RuntimeError(f"a run reported no evaluations ({detail})")
    hit = next((e for e in evaluations if e["test_accuracy"] >= target), None)
    last = evaluations[-1]
    samples = last.get("samples", round(last["epoch"] * TRAIN_SAMPLES))
    return {
        "time_to_target_seconds": hit["train_seconds"] if hit else None,
        "epoch_at_target": hit["epoch"] if hit else None,
        "final_test_accuracy": last["test_accuracy"],
        "best_test_accuracy": max(e["test_accuracy"] for e in evaluations),
        "epochs_trained": last["epoch"],
        "train_seconds": last["train_seconds"],
        "samples_per_second": samples / last["train_seconds"] if last["train_seconds"] > 0 else None,
        "process_wall_seconds": wall_seconds,
        "curve": [[e["train_seconds"], e["epoch"], e["test_accuracy"]] for e in evaluations],
        "detail": detail,
    }


def run_hpcps(args, ranks, seed, tmp):
    report_path = os.path.join(tmp, f"hpcps_{ranks}.json")
    if os.path.exists(report_path):
        os.remove(report_path)
    cmd = ["mpiexec", "-iface", "lo", "-n", str(ranks), os.path.join(args.build, "examples", f"fashion_mnist_{args.model}"),
           "--servers", "0", "--batch", str(args.batch), "--lr", str(args.lr), "--momentum", "0.9"]
    cmd += RESNET_HPCPS_FLAGS if args.model == "resnet" else ["--optimizer", "momentum", "--schedule", "constant"]
    cmd += ["--evaluations-per-epoch", str(args.evaluations_per_epoch),
           "--epochs", str(args.max_epochs), "--threads", "1", "--seed", str(seed), "--report", report_path]
    env = thread_env(1, 1, UCX_NET_DEVICES="lo", MPIEXEC_TIMEOUT=str(args.timeout))
    _, wall, _ = execute(cmd, env, args.timeout + 30)
    with open(report_path) as f:
        report = json.load(f)
    evaluations = report["evaluations"]
    if evaluations and "train_seconds" not in evaluations[0]:
        raise RuntimeError(f"{report_path}: evaluations lack train_seconds; rebuild {args.build} with this tree")
    return outcome(evaluations, args.target, wall, {"command": recorded(cmd), "seed": seed, "threads_per_process": 1,
                                                     "report_samples_per_second": report["samples_per_second"]})


def peer_evaluations(stdout):
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return [e for e in lines if e.get("type") == "evaluation"]


def peer_common(args, seed):
    cmd = ["--model", args.model, "--epochs", str(args.max_epochs), "--batch", str(args.batch), "--lr", str(args.lr),
           "--seed", str(seed), "--evaluations-per-epoch", str(args.evaluations_per_epoch)]
    cmd += RESNET_PEER_FLAGS if args.model == "resnet" else []
    return cmd + (["--target-accuracy", str(args.target)] if args.stop_at_target else [])


def run_ddp(args, seed):
    cmd = [sys.executable, os.path.join(HERE, "peers", "pytorch_ddp.py"), "--processes", "2", "--threads", "1"]
    cmd += peer_common(args, seed)
    stdout, wall, _ = execute(cmd, thread_env(1, 1, GLOO_SOCKET_IFNAME="lo"), args.timeout)
    return outcome(peer_evaluations(stdout), args.target, wall, {"command": recorded(cmd), "seed": seed,
                                                                 "threads_per_process": 1})


def run_single(args, seed, torch_threads, openblas_threads):
    cmd = [sys.executable, os.path.join(HERE, "peers", "pytorch_mlp.py"), "--threads", str(torch_threads)]
    cmd += peer_common(args, seed)
    stdout, wall, _ = execute(cmd, thread_env(openblas_threads, torch_threads), args.timeout)
    return outcome(peer_evaluations(stdout), args.target, wall,
                   {"command": recorded(cmd), "seed": seed, "torch_threads": torch_threads,
                    "openblas_threads": openblas_threads})


def faster(a, b):
    """The run that reached the target sooner; where neither did, the higher throughput."""
    ta, tb = a["time_to_target_seconds"], b["time_to_target_seconds"]
    if ta is not None or tb is not None:
        return a if tb is None or (ta is not None and ta <= tb) else b
    return a if (a["samples_per_second"] or 0) >= (b["samples_per_second"] or 0) else b


def run_config(args, name, seed, tmp):
    if name == "hpcps 2 ranks":
        return run_hpcps(args, 2, seed, tmp)
    if name == "hpcps 1 rank":
        return run_hpcps(args, 1, seed, tmp)
    if name == "PyTorch DDP 2 proc":
        return run_ddp(args, seed)
    if name == "PyTorch 1 thread":
        return run_single(args, seed, 1, 1)
    # PyTorch's own threads and OpenBLAS's fight over the cores; keep its better setting.
    both = run_single(args, seed, 2, 2)
    one_intra = run_single(args, seed, 1, 2)
    best = dict(faster(both, one_intra))
    best["variants"] = {"torch2_openblas2": {k: v for k, v in both.items() if k != "curve"},
                        "torch1_openblas2": {k: v for k, v in one_intra.items() if k != "curve"}}
    return best


def summary(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def fmt(s, digits=2, unit=""):
    if s is None:
        return "not reached"
    return f"{s['median']:,.{digits}f}{unit} ({s['min']:,.{digits}f}-{s['max']:,.{digits}f})"


def median_run(runs):
    """The run whose time to target is the median (the lower middle one for an even count); runs
    that missed the target rank after all that reached it."""
    ordered = sorted(runs, key=lambda r: (r["time_to_target_seconds"] is None,
                                          r["time_to_target_seconds"] or 0.0, -r["final_test_accuracy"]))
    return ordered[(len(ordered) - 1) // 2]


def plot(path, runs, target, title, colors=None):
    """Test accuracy against training seconds: every run faded, each configuration's median run
    bold; `colors` maps a configuration to its matplotlib colour (default: in order)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 5.5))
    lowest = 1.0
    for i, name in enumerate(runs):
        color = (colors or {}).get(name, f"C{i}")
        for r in runs[name]:
            xs, _, ys = zip(*r["curve"])
            ax.plot(xs, ys, color=color, alpha=0.2, linewidth=1)
            lowest = min(lowest, min(ys))
        m = median_run(runs[name])
        xs, _, ys = zip(*m["curve"])
        t = m["time_to_target_seconds"]
        ax.plot(xs, ys, color=color, linewidth=2,
                label=f"{name}: {t:.1f} s" if t is not None else f"{name}: not reached")
    ax.axhline(target, color="gray", linestyle="--", linewidth=1)
    ax.set_ylim(max(lowest - 0.01, target - 0.15), None)
    ax.set_xlabel("training seconds (evaluation excluded)")
    ax.set_ylabel("test accuracy")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build", help="build folder holding the example of --model")
    p.add_argument("--model", choices=["mlp", "cnn", "resnet"], default="mlp",
                   help="mlp: examples/fashion_mnist_mlp's 784-256-128-10; cnn: examples/fashion_mnist_cnn's network "
                        "with its default sizes; resnet: examples/fashion_mnist_resnet's, width 16, with its recipe "
                        "(the peers build the same, bench/peers/pytorch_mlp.py)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--target", type=float, default=None, help="test accuracy to reach (0.88; resnet 0.93)")
    p.add_argument("--max-epochs", type=int, default=15, help="epochs every run trains at most")
    p.add_argument("--evaluations-per-epoch", type=int, default=4)
    p.add_argument("--batch", type=int, default=128, help="global batch")
    p.add_argument("--lr", type=float, default=None, help="learning rate (0.02; resnet 0.1, the start of its cosine)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--fixed-seed", action="store_true", help="the same seed in every repeat")
    p.add_argument("--stop-at-target", action="store_true",
                   help="stop the PyTorch runs at the target (saves time; their final accuracy is then the target's)")
    p.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset of: " + ", ".join(CONFIGS))
    p.add_argument("--timeout", type=int, default=900, help="seconds one run may take")
    p.add_argument("--out", default=os.path.join(HERE, "results", "time_to_accuracy.json"))
    p.add_argument("--plot", default=None, help="PNG path (default: --out with .png)")
    p.add_argument("--continue", dest="continue_from", default=None,
                   help="a JSON this script wrote: keep its repeats and run the rest up to --repeats (same model, "
                        "target, epochs, configurations and build; the per-repeat ratios pair runs of one repeat, so "
                        "a repeat run on another day still compares like with like)")
    args = p.parse_args()
    args.target = DEFAULTS[args.model][0] if args.target is None else args.target
    args.lr = DEFAULTS[args.model][1] if args.lr is None else args.lr
    names = [n.strip() for n in args.configs.split(",")]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        p.error(f"unknown configurations {unknown}; choose from {CONFIGS}")
    program = f"fashion_mnist_{args.model}"
    binary = os.path.join(args.build, "examples", program)
    if any(n.startswith("hpcps") for n in names) and not os.access(binary, os.X_OK):
        p.error(f"{binary} not found: build the {program} target in --build")
    runs = {n: [] for n in names}
    if args.continue_from:
        runs = continued_runs(p, args, names)
    done = len(runs[names[0]])
    load_before = os.getloadavg()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hpcps_tta_") as tmp:
        for r in range(done, args.repeats):
            seed = args.seed if args.fixed_seed else args.seed + r
            order = names[r % len(names):] + names[:r % len(names)]  # rotate: no configuration always first
            for name in order:
                result = run_config(args, name, seed, tmp)
                result["repeat"] = r + 1
                result["date"] = time.strftime("%Y-%m-%d %H:%M")
                runs[name].append(result)
                t = result["time_to_target_seconds"]
                print(f"repeat {r + 1} {name}: to {args.target}: " + (f"{t:.2f} s" if t is not None else "not reached")
                      + f", final {result['final_test_accuracy']:.4f}, {result['samples_per_second']:,.0f} samples/s",
                      file=sys.stderr, flush=True)
            report(args, names, runs, r + 1, load_before, time.perf_counter() - started, last=r + 1 == args.repeats)


def continued_runs(p, args, names):
    """The runs of an earlier study to continue (--continue), after checking it measured the same."""
    with open(args.continue_from) as f:
        earlier = json.load(f)
    same = {"model": args.model, "target": args.target, "max_epochs": args.max_epochs, "batch": args.batch,
            "lr": args.lr, "evaluations_per_epoch": args.evaluations_per_epoch, "stop_at_target": args.stop_at_target,
            "seeds": "fixed" if args.fixed_seed else "seed + repeat"}
    differ = [k for k, v in same.items() if earlier.get(k) != v]
    if differ or sorted(earlier["runs"]) != sorted(names):
        p.error(f"{args.continue_from} measured something else: {differ or 'other configurations'}")
    runs = {n: earlier["runs"][n] for n in names}
    if len({len(rs) for rs in runs.values()}) != 1:
        p.error(f"{args.continue_from}: its configurations have different numbers of repeats")
    return runs


def summarize_runs(names, runs):
    """Per configuration: median and range of the time to target, epoch at target, final accuracy
    and samples/s over its runs, and how many runs reached the target."""
    return {name: {"time_to_target_seconds": summary([x["time_to_target_seconds"] for x in runs[name]]),
                   "reached": sum(x["time_to_target_seconds"] is not None for x in runs[name]),
                   "epoch_at_target": summary([x["epoch_at_target"] for x in runs[name]]),
                   "final_test_accuracy": summary([x["final_test_accuracy"] for x in runs[name]]),
                   "samples_per_second": summary([x["samples_per_second"] for x in runs[name]])} for name in names}


def per_repeat_ratio(runs, others):
    """Time to target of runs[i] over that of others[i], repeat by repeat (None where either missed)."""
    return [a["time_to_target_seconds"] / b["time_to_target_seconds"]
            if a["time_to_target_seconds"] is not None and b["time_to_target_seconds"] is not None else None
            for a, b in zip(runs, others)]


def print_tables(title, names, results, ratios, repeats):
    """The Markdown tables of a time-to-accuracy study: per configuration, and the per-repeat ratios."""
    print(title + "\n")
    print("| configuration | time to target s | reached | epoch at target | final test accuracy | samples/s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in names:
        s = results[name]
        print(f"| {name} | {fmt(s['time_to_target_seconds'])} | {s['reached']}/{repeats} | "
              f"{fmt(s['epoch_at_target'])} | {fmt(s['final_test_accuracy'], 4)} | {fmt(s['samples_per_second'], 0)} |")
    if ratios:
        print("\n| time-to-target ratio (per repeat) | median (min-max) |")
        print("| --- | --- |")
        for k, v in ratios.items():
            print(f"| {k} | {fmt(v['summary'])} |")


def report(args, names, runs, repeats, load_before, total, last):
    """Writes the JSON and the plot of the repeats so far; prints the tables after the last."""
    results = summarize_runs(names, runs)
    ratios = {}
    if HPCPS_2 in names:
        for peer in names:
            if peer == HPCPS_2:
                continue
            per_repeat = per_repeat_ratio(runs[HPCPS_2], runs[peer])
            ratios[f"{HPCPS_2} / {peer}"] = {"summary": summary(per_repeat), "per_repeat": per_repeat}

    out = {"benchmark": "time_to_accuracy", "model": args.model, "python": recorded([sys.executable])[0],
           "torch_version": subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                                           capture_output=True, text=True).stdout.strip(),
           "target": args.target, "max_epochs": args.max_epochs,
           "evaluations_per_epoch": args.evaluations_per_epoch, "batch": args.batch, "lr": args.lr, "momentum": 0.9,
           "schedule": "cosine" if args.model == "resnet" else "constant",
           "recipe": RESNET_HPCPS_FLAGS if args.model == "resnet" else None, "repeats": repeats,
           "seeds": "fixed" if args.fixed_seed else "seed + repeat",
           "stop_at_target": args.stop_at_target, "build": args.build,
           "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", ""), "cpus": os.cpu_count(),
           "load_average_before": load_before, "load_average_after": os.getloadavg(), "total_seconds": total,
           "results": results, "ratios": ratios, "runs": runs}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    plot_path = args.plot or os.path.splitext(args.out)[0] + ".png"
    rule = "Nesterov 0.9, cosine, weight decay, augmentation" if args.model == "resnet" else "SGD momentum 0.9"
    plot(plot_path, runs, args.target,
         f"Fashion-MNIST {'ResNet' if args.model == 'resnet' else args.model.upper()}, batch {args.batch}, {rule}: "
         f"time to {args.target:.2f} (median run bold)", {name: f"C{CONFIGS.index(name)}" for name in runs})
    if not last:
        return

    print_tables(f"Time to {args.target} test accuracy (training seconds, evaluation excluded), {repeats} repeat(s), "
                 f"at most {args.max_epochs} epochs: median (min-max)", names, results, ratios, repeats)
    print(f"\nJSON: {args.out}, plot: {plot_path}; {total:.0f} s in all, load average {load_before[0]:.1f} "
          f"before, {os.getloadavg()[0]:.1f} after")


if __name__ == "__main__":
    main()
