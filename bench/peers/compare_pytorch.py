#!/usr/bin/python3
"""Single-process training throughput against PyTorch and against the GEMM-bound ceiling.

Side by side in one run, on the same model (784-256-128-10, ReLU), batch, learning rate, optimizer
(SGD, momentum 0.9, constant rate), thread count and environment (OPENBLAS_NUM_THREADS and
OMP_NUM_THREADS set to the thread count for every program; OPENBLAS_CORETYPE left as the machine
sets it):

  * hpcps without a parameter server: bench/local_training (Batcher, Mlp on backend::Cpu,
    MomentumSgd in place);
  * hpcps through the parameter server in one process, colocated mode:
    `mpiexec -n 1 examples/fashion_mnist_mlp --servers 0 ...` (the path target 1 is measured on);
    its --report file's samples_per_second;
  * PyTorch (bench/peers/pytorch_mlp.py). With more than one thread PyTorch also runs with one
    intra-op thread and OpenBLAS on all cores, and the setting with the higher median over the
    repeats counts (its runs are paired with ours). Taking the faster of the two runs in each
    repeat instead would give PyTorch two draws of this VM's noise against hpcps's one;
  * the GEMM-bound ceiling: bench/gemm_providers times the step's GEMMs back to back (same shapes,
    transposes and threads as Mlp::gradient) with OpenBLAS (backend::Cpu's provider) and Eigen;
    the ceiling rate is the faster of the two. Training FLOPs per sample count GEMMs only:
    forward 2*sum(in*out) over layers, backward 2x that (weight and input gradients) minus the
    first layer's input gradient 2*in0*out0, i.e. 6*sum(in*out) - 2*in0*out0 (1,007,104 for
    784-256-128-10). Fraction of the GEMM ceiling = samples/s * FLOPs/sample / ceiling rate.

Each repeat runs every program once (interleaved; the ceiling is measured in the same repeat).
Throughput of a training run is all its epochs' samples over their training seconds (evaluation
excluded). Prints a Markdown table (median and min-max over repeats), writes JSON (--out) and a
bar plot next to it (same name, .png).

    /usr/bin/python3 bench/peers/compare_pytorch.py --build build --repeats 5 --epochs 3
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

LAYERS = [784, 256, 128, 10]


def thread_env(threads, omp_threads=None):
    return dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(omp_threads or threads),
                UCX_NET_DEVICES="lo")


def run_epochs(cmd, threads, omp_threads=None):
    """Programs that print one JSON line per epoch: samples, seconds, test_accuracy."""
    out = subprocess.run(cmd, check=True, env=thread_env(threads, omp_threads), capture_output=True, text=True,
                         timeout=900).stdout
    epochs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return {"samples_per_second": sum(e["samples"] for e in epochs) / sum(e["seconds"] for e in epochs),
            "final_test_accuracy": epochs[-1]["test_accuracy"], "epochs": epochs}


def run_ps(args, threads, report):
    cmd = [args.mpiexec, "-iface", "lo", "-n", "1", os.path.join(args.build, "examples", "fashion_mnist_mlp"),
           "--servers", "0", "--batch", str(args.batch), "--optimizer", "momentum", "--lr", str(args.lr),
           "--momentum", "0.9", "--schedule", "constant", "--threads", str(threads), "--epochs", str(args.epochs),
           "--report", report]
    env = dict(thread_env(threads), MPIEXEC_TIMEOUT="900")
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, timeout=960)
    with open(report) as f:
        r = json.load(f)
    return {"samples_per_second": r["samples_per_second"], "final_test_accuracy": r["test_accuracy"],
            "train_seconds": r["train_seconds"]}


def run_ceiling(args, threads):
    cmd = [os.path.join(args.build, "bench", "gemm_providers"), "--threads", str(threads), "--batches",
           str(args.batch), "--providers", "openblas,eigen", "--repeats", str(args.ceiling_repeats), "--hidden",
           ",".join(str(s) for s in LAYERS[1:-1])]
    out = subprocess.run(cmd, check=True, env=thread_env(threads), capture_output=True, text=True, timeout=600).stdout
    rates = {r["provider"]: r["gemm_gflops_median"] * 1e9 for r in json.loads(out)["results"]}
    best = max(rates, key=rates.get)
    return {"gemm_flops_per_second": rates[best], "provider": best, "by_provider": rates}


def training_flops_per_sample(layers):
    pairs = sum(i * o for i, o in zip(layers, layers[1:]))
    return 6 * pairs - 2 * layers[0] * layers[1]


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def bars_with_range(ax, xs, stats, width, label, color):
    """One bar per {median, min, max} in stats, at xs, with the min-max range as its error bar."""
    med = [x["median"] for x in stats]
    err = [[m - x["min"] for m, x in zip(med, stats)], [x["max"] - m for m, x in zip(med, stats)]]
    ax.bar(xs, med, width, yerr=err, capsize=3, label=label, color=color)


def finish_thread_plot(fig, ax, results, title, ymax, path):
    """Labels a bar plot of one group per thread count and writes it to path."""
    ax.set_xticks(range(len(results)))
    ax.set_xticklabels([f"{r['threads']} thread{'s' if r['threads'] > 1 else ''}" for r in results])
    ax.set_ylabel("training samples/s (median, min-max)")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left")
    ax.set_ylim(0, ymax)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    series = [("hpcps local_training", "hpcps_samples_per_second", "tab:blue"),
              ("hpcps PS, 1 rank colocated", "hpcps_ps_samples_per_second", "tab:cyan"),
              ("PyTorch (faster setting)", "pytorch_samples_per_second", "tab:orange"),
              ("GEMM-bound ceiling", "ceiling_samples_per_second", "tab:gray")]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.2
    for i, (label, key, color) in enumerate(series):
        xs = [j + (i - 1.5) * width for j in range(len(results))]
        bars_with_range(ax, xs, [r[key] for r in results], width, label, color)
        if key.startswith("hpcps"):
            frac = "hpcps_ceiling_fraction" if key == "hpcps_samples_per_second" else "hpcps_ps_ceiling_fraction"
            ratio = "ratio" if key == "hpcps_samples_per_second" else "ratio_ps"
            for x, r in zip(xs, results):
                ax.annotate(f"{r[ratio]['median']:.2f}x\n{100 * r[frac]['median']:.0f}%", (x, r[key]["max"]),
                            ha="center", va="bottom", fontsize=7)
    finish_thread_plot(fig, ax, results, "784-256-128-10, batch 128, SGD momentum: hpcps vs PyTorch\n"
                       "labels: ratio to PyTorch, fraction of the GEMM-bound ceiling",
                       1.2 * max(r["ceiling_samples_per_second"]["max"] for r in results), path)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--ceiling-repeats", type=int, default=7, help="repeats inside each gemm_providers run")
    p.add_argument("--mpiexec", default="mpiexec")
    p.add_argument("--out", default="bench/results/compare_pytorch.json")
    args = p.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    flops = training_flops_per_sample(LAYERS)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        for threads in [int(t) for t in args.threads.split(",")]:
            ours, ps, settings, ceilings = [], [], [], []
            common = ["--epochs", str(args.epochs), "--batch", str(args.batch), "--threads", str(threads), "--lr",
                      str(args.lr)]
            for r in range(args.repeats):
                ours.append(run_epochs([os.path.join(args.build, "bench", "local_training")] + common, threads))
                ps.append(run_ps(args, threads, report))
                peer = [sys.executable, os.path.join(here, "pytorch_mlp.py"), "--epochs", str(args.epochs), "--batch",
                        str(args.batch), "--lr", str(args.lr)]
                candidates = [dict(run_epochs(peer + ["--threads", str(threads)], threads), intra_op_threads=threads)]
                if threads > 1:
                    # PyTorch's own threads and OpenBLAS's fight over the cores; its faster setting
                    # can be one intra-op thread with OpenBLAS on all of them.
                    candidates.append(dict(run_epochs(peer + ["--threads", "1"], threads, omp_threads=1),
                                           intra_op_threads=1))
                settings.append(candidates)
                ceilings.append(run_ceiling(args, threads))
                c = ceilings[-1]["gemm_flops_per_second"]
                peer_rates = ", ".join(f"{x['samples_per_second']:.0f} ({x['intra_op_threads']} intra-op)"
                                       for x in candidates)
                print(f"threads {threads} repeat {r + 1}: hpcps {ours[-1]['samples_per_second']:.0f}, "
                      f"hpcps PS {ps[-1]['samples_per_second']:.0f}, pytorch {peer_rates} "
                      f"samples/s; GEMM ceiling {c / 1e9:.1f} GFLOP/s ({ceilings[-1]['provider']}) = "
                      f"{c / flops:.0f} samples/s", file=sys.stderr, flush=True)
            sps = lambda runs: [x["samples_per_second"] for x in runs]
            # PyTorch's setting: the one with the higher median over the repeats.
            by_setting = [[rep[i] for rep in settings] for i in range(len(settings[0]))]
            theirs = max(by_setting, key=lambda runs: statistics.median(sps(runs)))
            rates = [c["gemm_flops_per_second"] for c in ceilings]
            results.append({
                "threads": threads,
                "hpcps_samples_per_second": summary(sps(ours)),
                "hpcps_ps_samples_per_second": summary(sps(ps)),
                "pytorch_samples_per_second": summary(sps(theirs)),
                "pytorch_intra_op_threads": theirs[0]["intra_op_threads"],
                "pytorch_settings": {str(runs[0]["intra_op_threads"]): summary(sps(runs)) for runs in by_setting},
                "ratio": summary([o / t for o, t in zip(sps(ours), sps(theirs))]),
                "ratio_ps": summary([o / t for o, t in zip(sps(ps), sps(theirs))]),
                "gemm_ceiling_flops_per_second": summary(rates),
                "ceiling_samples_per_second": summary([c / flops for c in rates]),
                "hpcps_ceiling_fraction": summary([s * flops / c for s, c in zip(sps(ours), rates)]),
                "hpcps_ps_ceiling_fraction": summary([s * flops / c for s, c in zip(sps(ps), rates)]),
                "hpcps_final_test_accuracy": summary([o["final_test_accuracy"] for o in ours]),
                "hpcps_ps_final_test_accuracy": summary([o["final_test_accuracy"] for o in ps]),
                "pytorch_final_test_accuracy": summary([t["final_test_accuracy"] for t in theirs]),
                "runs": {"hpcps": ours, "hpcps_ps": ps, "pytorch": theirs, "pytorch_other_settings":
                         [runs for runs in by_setting if runs is not theirs], "gemm_ceiling": ceilings}})
    import torch
    out = {"benchmark": "compare_pytorch", "torch_version": torch.__version__, "layers": LAYERS, "batch": args.batch,
           "epochs": args.epochs, "repeats": args.repeats, "lr": args.lr, "momentum": 0.9,
           "training_flops_per_sample": flops,
           "training_flops_formula": "6*sum(in*out) - 2*in0*out0 (GEMMs only: forward 2*sum(in*out), backward "
                                     "weight grads 2*sum(in*out) plus input grads of all but the first layer)",
           "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", ""), "results": results}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    png = os.path.splitext(args.out)[0] + ".png"
    plot(results, png)
    f = lambda s, d=0, scale=1: f"{s['median'] * scale:,.{d}f} ({s['min'] * scale:,.{d}f}-{s['max'] * scale:,.{d}f})"
    print(f"training FLOPs per sample: {flops:,} (GEMMs only); {args.repeats} repeats, {args.epochs} epochs, "
          f"median (min-max)")
    print("| threads | hpcps local samples/s | hpcps PS (1 rank) samples/s | PyTorch samples/s | "
          "ratio local / PyTorch | ratio PS / PyTorch | GEMM ceiling GFLOP/s | fraction of ceiling (local, PS) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        print(f"| {r['threads']} | {f(r['hpcps_samples_per_second'])} | {f(r['hpcps_ps_samples_per_second'])} | "
              f"{f(r['pytorch_samples_per_second'])} | {f(r['ratio'], 2)} | {f(r['ratio_ps'], 2)} | "
              f"{f(r['gemm_ceiling_flops_per_second'], 1, 1e-9)} | {f(r['hpcps_ceiling_fraction'], 2)}, "
              f"{f(r['hpcps_ps_ceiling_fraction'], 2)} |")
    print(f"wrote {args.out} and {png}")


if __name__ == "__main__":
    main()
