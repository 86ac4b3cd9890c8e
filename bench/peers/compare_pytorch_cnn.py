#!/usr/bin/python3
"""CNN and ResNet training throughput, one process: hpcps against two PyTorch builds, and against
the step's compute-bound ceiling.

Side by side in one run, on the same network (examples/fashion_mnist_cnn's: conv 5x5 --width
channels pad 2, ReLU, max-pool 2, conv 5x5 2 x --width, ReLU, max-pool 2, dense 128, ReLU, dropout
0.25, dense 10), batch, optimizer (SGD, momentum 0.9, constant rate), data in memory on both sides,
thread count and environment (OMP_NUM_THREADS and OPENBLAS_NUM_THREADS set to the thread count for
every program; OPENBLAS_CORETYPE left as the machine sets it):

  * hpcps through the parameter server in one process (colocated):
    `mpiexec -n 1 examples/fashion_mnist_cnn --servers 0 ...`, its report's samples_per_second;
  * each PyTorch of --torch (a Python interpreter each; default Debian's python3-torch 1.13 and the
    PyPI build in build/venv-torch, if present) running bench/peers/pytorch_mlp.py --model cnn;
  * the compute-bound ceiling: the speed of a step in which only the arithmetic of the convolutions
    and dense layers costs time, at the rates they run at here: batch / (oneDNN's convolution
    primitives' time per step, as ONEDNN_VERBOSE=1 reports each execution in bench/cnn_step,
    without the conversions between layouts, + the dense layers' forward and backward time, each
    timed alone by bench/cnn_step in a replica of the step). Pooling, activations, dropout, loss,
    layout conversions and copies cost nothing in it. Fraction of the ceiling = samples/s / ceiling
    samples/s.

With --model resnet the network is examples/fashion_mnist_resnet's (stem, 3 stages of 2 residual
blocks with batch normalization, --width channels in the first stage, global average pooling),
trained with SGD Nesterov momentum 0.9, weight decay 5e-4 and a constant rate on both sides, and
no data augmentation (its cost is not the step's). Its ceiling is batch / the seconds per step of
oneDNN's convolution primitives, as ONEDNN_VERBOSE=1 reports them in a short run of the example
itself (each pass and shape at its median time, times the number of times a step runs it); batch
normalization, additions, activations, pooling and the dense layer cost nothing in it.

Each repeat runs every program once, interleaved. Throughput of a training run is all its epochs'
samples over their training seconds (evaluation excluded). The ratio to "the faster PyTorch" uses,
per thread count, the PyTorch with the higher median. Prints a Markdown table (median and min-max
over repeats), writes JSON (--out) and a bar plot next to it (.png).

    /usr/bin/python3 bench/peers/compare_pytorch_cnn.py --build build --repeats 5 --epochs 1
    /usr/bin/python3 bench/peers/compare_pytorch_cnn.py --model resnet --width 16 --lr 0.1 \
        --train-samples 12800 --out bench/results/compare_pytorch_resnet.json
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# One way to run, summarise and plot.
from compare_pytorch import bars_with_range, finish_thread_plot, run_epochs, summary, thread_env  # noqa: E402

DENSE_LAYERS = ("dense1", "dense2")


# The ResNet example's update rule and no augmentation, on both sides.
RESNET_PS_FLAGS = ["--optimizer", "nesterov", "--weight-decay", "5e-4", "--augment-shift", "0", "--augment-flip", "false"]
RESNET_TORCH_FLAGS = ["--nesterov", "--weight-decay", "5e-4"]


def ps_command(args, threads):
    resnet = args.model == "resnet"
    return [args.mpiexec, "-iface", "lo", "-n", "1",
            os.path.join(args.build, "examples", "fashion_mnist_resnet" if resnet else "fashion_mnist_cnn"),
            "--servers", "0", "--width", str(args.width), "--batch", str(args.batch), "--lr", str(args.lr),
            "--momentum", "0.9", "--schedule", "constant", "--threads", str(threads)] + (
                RESNET_PS_FLAGS if resnet else ["--optimizer", "momentum"])


def run_ps(args, threads, report):
    cmd = ps_command(args, threads) + ["--epochs", str(args.epochs), "--report", report]
    if args.train_samples > 0:
        cmd += ["--train-samples", str(args.train_samples)]
    subprocess.run(cmd, check=True, env=dict(thread_env(threads), MPIEXEC_TIMEOUT="1800"), stdout=subprocess.DEVNULL,
                   timeout=1900)
    with open(report) as f:
        r = json.load(f)
    return {"samples_per_second": r["samples_per_second"], "final_test_accuracy": r["test_accuracy"],
            "train_seconds": r["train_seconds"]}


# The ResNet's memory-bound passes per training sample, by tensor shape (channels per width, side):
# batch norm 8 passes (forward: 2 reads + 1 write; backward: 2 reads for the sums, 2 reads + 1
# write for dx), the ReLU after a batch norm none (fused into its passes both ways), the ReLU after
# a block 3 (its forward fused into the addition; backward: read y and dy, write dx), residual
# addition 6 (read 2, write 1 each way). Stage 1: stem bn + 4 block bns, 2 block relus, 2
# additions; stages 2 and 3: 4 block bns + the shortcut's, 2 block relus, 2 additions.
RESNET_PASSES = [(1, 28, 8 * 5 + 3 * 2 + 6 * 2), (2, 14, 8 * 5 + 3 * 2 + 6 * 2), (4, 7, 8 * 5 + 3 * 2 + 6 * 2)]


def resnet_stream_rates(args, threads):
    """GB/s of backend::Cpu's batch-norm kernels at each stage's shape (bench/batch_norm_providers):
    the model's rate for the memory-bound passes."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bn.json")
        subprocess.run([os.path.join(args.build, "bench", "batch_norm_providers"), "--batch", str(args.batch),
                        "--threads", str(threads), "--repeats", "5", "--out", path], check=True,
                       env=thread_env(threads), capture_output=True, timeout=600)
        with open(path) as f:
            rows = json.load(f)["results"]
    return {r["size"]: r["gb_per_second_median"] for r in rows if r.get("method") == "hpcps"}


def run_resnet_ceiling(args, threads):
    steps = 12
    cmd = ps_command(args, threads) + ["--epochs", "1", "--train-samples", str(steps * args.batch), "--no-evaluation"]
    log = subprocess.run(cmd, check=True, env=dict(thread_env(threads), ONEDNN_VERBOSE="1", MPIEXEC_TIMEOUT="600"),
                         capture_output=True, text=True, timeout=700).stdout
    times, reorder = {}, 0.0
    for line in log.splitlines():
        fields = line.split(",")
        if len(fields) < 7 or fields[1] != "exec":
            continue
        if fields[3] == "reorder":
            reorder += float(fields[-1]) / 1e3
        if fields[3] != "convolution":
            continue
        shape = next((x for x in fields if x.startswith("mb")), "")
        times.setdefault((fields[5], shape), []).append(float(fields[-1]) / 1e3)
    if not times:
        raise SystemExit("compare_pytorch_cnn: ONEDNN_VERBOSE=1 printed no convolution of the step (not oneDNN?)")
    # Several layers share a shape: a pass and shape runs len(v) / steps times a step.
    conv = sum(statistics.median(v) * len(v) / steps for v in times.values())
    # The analytic model of the step: the convolutions' and the layout conversions' measured time,
    # plus the memory-bound passes' bytes at the rate the batch-norm kernels stream.
    rates = resnet_stream_rates(args, threads)
    stream = sum(passes * 4.0 * args.batch * k * args.width * side * side / (rates[side] * 1e9)
                 for k, side, passes in RESNET_PASSES)
    model = conv + reorder / steps + stream
    return {"ceiling_samples_per_second": args.batch / conv, "convolution_primitive_seconds": conv,
            "convolution_passes": sorted(f"{' '.join(k)} x{len(v) // steps}" for k, v in times.items()),
            "model": {"samples_per_second": args.batch / model, "step_seconds": model, "convolution_seconds": conv,
                      "reorder_seconds": reorder / steps, "memory_bound_seconds": stream,
                      "stream_gb_per_second": rates}}


def run_ceiling(args, threads):
    if args.model == "resnet":
        return run_resnet_ceiling(args, threads)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "cnn_step.json")
        cmd = [os.path.join(args.build, "bench", "cnn_step"), "--widths", str(args.width), "--batch", str(args.batch),
               "--threads", str(threads), "--methods", "onednn", "--repeats", "5", "--out", path]
        # oneDNN prints a line per primitive executed, ending in its time in ms.
        log = subprocess.run(cmd, check=True, env=dict(thread_env(threads), ONEDNN_VERBOSE="1"), capture_output=True,
                             text=True, timeout=900).stdout
        with open(path) as f:
            step = json.load(f)["results"][0]
    # Each step (fused or in the replica) runs every convolution primitive once: one pass
    # (forward, backward-data, backward-weights) of one shape. The ceiling takes each one's median
    # time, so a step that lost its core counts no more than in the step's own median.
    times = {}
    for line in log.splitlines():
        fields = line.split(",")
        if len(fields) < 7 or fields[1] != "exec" or fields[3] != "convolution":
            continue
        shape = next((x for x in fields if x.startswith(f"mb{args.batch}_")), "")
        times.setdefault((fields[5], shape), []).append(float(fields[-1]) / 1e3)
    if not times:
        raise SystemExit("compare_pytorch_cnn: ONEDNN_VERBOSE=1 printed no convolution of the step (not oneDNN?)")
    conv = sum(statistics.median(v) for v in times.values())
    layers = {l["layer"]: l for l in step["layers"]}
    dense = sum(layers[name]["forward_seconds_median"] + layers[name]["backward_seconds_median"] for name in DENSE_LAYERS)
    return {"ceiling_samples_per_second": args.batch / (conv + dense), "convolution_primitive_seconds": conv,
            "dense_layer_seconds": dense, "convolution_passes": sorted(" ".join(k) for k in times),
            "step_samples_per_second": step["samples_per_second_median"], "flops_per_sample": step["flops_per_sample"]}


def torch_version(python):
    return subprocess.run([python, "-c", "import torch; print(torch.__version__)"], check=True, capture_output=True,
                          text=True).stdout.strip()


def plot(results, peers, path, width, model):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    series = [("hpcps PS, 1 rank colocated", "hpcps", "tab:blue")]
    series += [(f"PyTorch {p['version']}", p["label"], c) for p, c in zip(peers, ["tab:orange", "tab:red", "tab:brown"])]
    series += [("compute-bound ceiling", "ceiling", "tab:gray")]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    bar = 0.8 / len(series)
    for i, (label, key, color) in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * bar for j in range(len(results))]
        bars_with_range(ax, xs, [r["samples_per_second"][key] for r in results], bar, label, color)
        if key == "hpcps":
            for x, r in zip(xs, results):
                ax.annotate(f"{r['ratio_to_faster_pytorch']['median']:.2f}x\n"
                            f"{100 * r['ceiling_fraction']['median']:.0f}%",
                            (x, r["samples_per_second"]["hpcps"]["max"]), ha="center", va="bottom", fontsize=7)
    name = "ResNet" if model == "resnet" else "CNN"
    rule = "SGD Nesterov momentum" if model == "resnet" else "SGD momentum"
    finish_thread_plot(fig, ax, results, f"{name} (width {width}), batch 128, {rule}: hpcps vs PyTorch\n"
                       "labels: ratio to the faster PyTorch, fraction of the compute-bound ceiling",
                       1.25 * max(r["samples_per_second"]["ceiling"]["max"] for r in results), path)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=["cnn", "resnet"], default="cnn")
    p.add_argument("--build", default="build")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--train-samples", type=int, default=0,
                   help="each epoch on the first N training samples only, on both sides (0: all 60,000)")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--torch", default=None,
                   help="comma-separated Python interpreters, one per PyTorch build (default: /usr/bin/python3 and "
                        "BUILD/venv-torch/bin/python where it exists)")
    p.add_argument("--mpiexec", default="mpiexec")
    p.add_argument("--out", default="bench/results/compare_pytorch_cnn.json")
    args = p.parse_args()
    pythons = args.torch.split(",") if args.torch else [
        x for x in ["/usr/bin/python3", os.path.join(args.build, "venv-torch", "bin", "python")] if os.path.exists(x)]
    peers = [{"python": py, "version": torch_version(py), "label": f"pytorch_{i}"} for i, py in enumerate(pythons)]
    load_before = os.getloadavg()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        for threads in [int(t) for t in args.threads.split(",")]:
            runs = {"hpcps": [], "ceiling": [], **{peer["label"]: [] for peer in peers}}
            for r in range(args.repeats):
                runs["hpcps"].append(run_ps(args, threads, report))
                for peer in peers:
                    cmd = [peer["python"], os.path.join(HERE, "pytorch_mlp.py"), "--model", args.model, "--width",
                           str(args.width), "--epochs", str(args.epochs), "--batch", str(args.batch), "--lr",
                           str(args.lr), "--threads", str(threads)] + (
                               RESNET_TORCH_FLAGS if args.model == "resnet" else []) + (
                               ["--train-samples", str(args.train_samples)] if args.train_samples > 0 else [])
                    runs[peer["label"]].append(run_epochs(cmd, threads))
                runs["ceiling"].append(run_ceiling(args, threads))
                line = ", ".join(f"{k} {v[-1].get('samples_per_second', v[-1].get('ceiling_samples_per_second')):.0f}"
                                 for k, v in runs.items())
                print(f"threads {threads} repeat {r + 1}: {line} samples/s", file=sys.stderr, flush=True)
            sps = {k: [x["samples_per_second"] for x in v] for k, v in runs.items() if k != "ceiling"}
            sps["ceiling"] = [x["ceiling_samples_per_second"] for x in runs["ceiling"]]
            faster = max((peer["label"] for peer in peers), key=lambda k: statistics.median(sps[k]))
            results.append({
                "threads": threads,
                "samples_per_second": {k: summary(v) for k, v in sps.items()},
                "faster_pytorch": next(peer["version"] for peer in peers if peer["label"] == faster),
                "ratio_to_faster_pytorch": summary([o / t for o, t in zip(sps["hpcps"], sps[faster])]),
                "ratio_to": {peer["version"]: summary([o / t for o, t in zip(sps["hpcps"], sps[peer["label"]])])
                             for peer in peers},
                "ceiling_fraction": summary([o / c for o, c in zip(sps["hpcps"], sps["ceiling"])]),
                **({"model_samples_per_second": summary([x["model"]["samples_per_second"] for x in runs["ceiling"]]),
                    "measured_over_model": summary([o / x["model"]["samples_per_second"]
                                                    for o, x in zip(sps["hpcps"], runs["ceiling"])])}
                   if args.model == "resnet" else {}),
                "final_test_accuracy": {k: summary([x["final_test_accuracy"] for x in v])
                                        for k, v in runs.items() if k != "ceiling"},
                "runs": runs})
    out = {"benchmark": "compare_pytorch_cnn", "model": args.model, "width": args.width, "batch": args.batch,
           "epochs": args.epochs, "train_samples": args.train_samples or 60000,
           "repeats": args.repeats, "lr": args.lr, "momentum": 0.9, "peers": peers,
           "flops_per_sample": results[0]["runs"]["ceiling"][0].get("flops_per_sample"),
           "ceiling": "batch / (oneDNN's convolution primitives' seconds per step as ONEDNN_VERBOSE=1 reports them in "
                      "bench/cnn_step, + forward + backward seconds of dense1 and dense2, each timed alone by "
                      "bench/cnn_step in a replica of the step)" if args.model == "cnn" else
                      "batch / oneDNN's convolution primitives' seconds per step, as ONEDNN_VERBOSE=1 reports them in "
                      "a 12-step run of examples/fashion_mnist_resnet (median per pass and shape, times its count)",
           "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", ""), "cpus": os.cpu_count(),
           "load_average_before": load_before, "load_average_after": os.getloadavg(), "results": results}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    png = os.path.splitext(args.out)[0] + ".png"
    plot(results, peers, png, args.width, args.model)
    f = lambda s, d=0: f"{s['median']:,.{d}f} ({s['min']:,.{d}f}-{s['max']:,.{d}f})"
    flops = f", {out['flops_per_sample']:,} FLOPs per sample" if out["flops_per_sample"] else ""
    print(f"{args.model} width {args.width}{flops}; {args.repeats} repeats of "
          f"{args.epochs} epoch(s), median (min-max)")
    head = " | ".join(f"PyTorch {peer['version']}" for peer in peers)
    print(f"| threads | hpcps PS (1 rank) | {head} | ratio to the faster PyTorch | ceiling | fraction of ceiling |")
    print("| --- " * (5 + len(peers)) + "|")
    for r in results:
        s = r["samples_per_second"]
        cols = " | ".join(f(s[peer["label"]]) for peer in peers)
        print(f"| {r['threads']} | {f(s['hpcps'])} | {cols} | {f(r['ratio_to_faster_pytorch'], 2)} | "
              f"{f(s['ceiling'])} | {f(r['ceiling_fraction'], 2)} |")
    if args.model == "resnet":
        print("| threads | model samples/s | measured / model |\n| --- | --- | --- |")
        for r in results:
            print(f"| {r['threads']} | {f(r['model_samples_per_second'])} | {f(r['measured_over_model'], 2)} |")
    print(f"wrote {args.out} and {png}")


if __name__ == "__main__":
    main()
