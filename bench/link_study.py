#!/usr/bin/python3
"""Time to accuracy across pretend nodes joined by a throttled link (scripts/pretend_nodes: network
namespaces, veth links limited by tc to --rate, 1 Gbit/s by default): which wire format reaches the
accuracy first when the push and the pull cross a slow link, against PyTorch DDP over the same link.

Same model, data, global batch (128), optimizer (SGD, momentum 0.9, constant learning rate 0.02) and
evaluation schedule as bench/time_to_accuracy.py (--model mlp: target 0.88; --model cnn: 0.91), one
thread per process. Configurations (--configs picks some):

  hpcps <wire> colocated   2 nodes, 1 rank each, --servers 0: each node a worker and the server
                           of half the parameters; every clock half of each push and pull crosses
  hpcps <wire> dedicated   3 nodes, --servers 1: 2 worker nodes and 1 server node; every push and
                           pull crosses
  DDP fp32, DDP fp16 hook  bench/peers/pytorch_ddp.py, 2 nodes, 1 process each, gloo over the
                           link; with DDP's fp16_compress_hook or without

An hpcps configuration may end in a fourth word, the ranks' HPCPS_WAIT (adaptive, sleep or spin;
docs/architecture.md#waiting), e.g. "hpcps fp32 dedicated sleep"; its ratios are over hpcps fp32
of the same layout and wait where that runs, else of the same layout.

<wire> is fp32, bf16 or fp16: pushes and pulls in that format (--wire and --pull-wire of the
example); or topk<r>[/<pull>]: top-k pushes of the share r with error feedback (--top-k r) and pulls
in <pull> (fp32 unless named), e.g. "hpcps topk0.01/fp16 colocated"; topk<r>mc adds momentum
correction; or sign[mc][/<pull>]: scaled-sign pushes with error feedback (--sign-push), mc as for top-k,
where <pull> may also be sign: scaled-sign pulls with error feedback on the servers (--sign-pull), or
sign2 .. sign4: that many passes of scaled signs a pull (--sign-pull-passes).
Every run trains at most --max-epochs, or the epochs --epochs-for gives its configuration (a faster
wire may get more epochs for the same wall time; the PyTorch runs stop at the target with
--stop-at-target);
runs are interleaved, the order rotated each repeat; the seed is --seed + repeat for every
configuration. Per configuration: the training seconds to the target (evaluation
excluded), the final accuracy and samples/s, median and min-max; per hpcps configuration its
ratio to hpcps fp32 of the same layout and to the faster DDP, per repeat. JSON (--out) and a PNG
of accuracy against training seconds (--plot).

    /usr/bin/python3 bench/link_study.py --build build --repeats 5
    /usr/bin/python3 bench/link_study.py --build build --repeats 1 --max-epochs 1 --target 0.7   # smoke

Needs root and iproute2 (scripts/pretend_nodes check); the JSON and the plot are rewritten after
every repeat.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from time_to_accuracy import (execute, outcome, peer_evaluations, per_repeat_ratio, plot, print_tables,  # noqa: E402
                              recorded, summarize_runs, summary)  # the same figures as bench/time_to_accuracy.py

NODES = os.path.join(REPO, "scripts", "pretend_nodes")
WIRES = ["fp32", "bf16", "fp16", "topk0.01", "topk0.01/fp16"]
LAYOUTS = {"colocated": (2, 0), "dedicated": (3, 1)}  # nodes, servers
WAITS = ("adaptive", "sleep", "spin")  # HPCPS_WAIT
CONFIGS = [f"hpcps {w} {layout}" for layout in LAYOUTS for w in WIRES] + ["DDP fp32", "DDP fp16 hook"]


def wire_arguments(wire):
    """The example's options for a <wire> token: fp32|bf16|fp16, topk<r>[mc][/<pull>] (mc: with
    momentum correction 0.9 on the workers; see optimizer_arguments), or sign[mc][/<pull>]."""
    if wire in ("fp32", "bf16", "fp16"):
        return ["--wire", wire, "--pull-wire", wire]
    if wire.startswith("sign"):
        rest, _, pull = wire.partition("/")
        if rest in ("sign", "signmc") and pull in ("", "fp32", "bf16", "fp16", "sign", "sign2", "sign3", "sign4"):
            pulls = ["--pull-wire", pull or "fp32"]
            if pull.startswith("sign"):
                pulls = ["--sign-pull", "--sign-pull-passes", pull[len("sign"):] or "1"]
            return ["--wire", "fp32", "--sign-push", *pulls, *(["--top-k-momentum", "0.9"] if rest == "signmc" else [])]
    if wire.startswith("topk"):
        ratio, _, pull = wire[len("topk"):].partition("/")
        corrected = ratio.endswith("mc")
        ratio = ratio[:-2] if corrected else ratio
        if 0.0 < float(ratio) <= 1.0 and pull in ("", "fp32", "bf16", "fp16"):
            return ["--wire", "fp32", "--top-k", ratio, "--pull-wire", pull or "fp32",
                    *(["--top-k-momentum", "0.9"] if corrected else [])]
    raise ValueError(f"unknown wire {wire!r}: fp32, bf16, fp16, topk<r>[mc][/<pull>] or sign[mc][/<pull>]")


def optimizer_arguments(wire):
    """SGD with momentum 0.9 on the servers; with momentum correction the workers keep the
    momentum, and the servers apply plain SGD at the same learning rate."""
    if "--top-k-momentum" in wire_arguments(wire):
        return ["--optimizer", "sgd"]
    return ["--optimizer", "momentum", "--momentum", "0.9"]


def known(name):
    parts = name.split()
    if name in CONFIGS:
        return True
    if len(parts) not in (3, 4) or parts[0] != "hpcps" or parts[2] not in LAYOUTS:
        return False
    if len(parts) == 4 and parts[3] not in WAITS:
        return False
    try:
        wire_arguments(parts[1])
    except ValueError:
        return False
    return True
TARGETS = {"mlp": 0.88, "cnn": 0.91}


def max_epochs(args, name):
    return args.epochs_for.get(name, args.max_epochs)


def link_env(args, **extra):
    return dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MPIEXEC_TIMEOUT=str(args.timeout),
                **extra)


def pretend(args, nodes):
    return [NODES, "run", "--nodes", str(nodes), "--rate", args.rate, "--delay", args.delay, "--"]


def execute_reported(cmd, env, timeout, grace=10.0):
    """Runs an hpcps example across pretend nodes; returns its stdout, wall seconds and whether it
    had to be stopped after writing its report. On 3 or more pretend nodes MPICH 4.0.2 with UCX
    1.13's TCP can hang in MPI_Finalize, also in a program that only calls MPI_Init, MPI_Barrier and
    MPI_Finalize (docs/running.md#pretend-nodes-over-a-throttled-link): once the example has
    printed "report written to", everything measured is on disk, so a job still running `grace`
    seconds later is stopped (pretend_nodes tears its nodes down on SIGTERM) and the run kept."""
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=err, text=True)
        reported_at, hang = None, False
        while proc.poll() is None:
            time.sleep(0.5)
            now = time.perf_counter()
            if reported_at is None:
                out.seek(0)
                if "report written to" in out.read():
                    reported_at = now
            if reported_at is not None and now - reported_at > grace:
                hang = True
                proc.terminate()
                proc.wait(timeout=60)
                break
            if now - started > timeout:
                proc.kill()
                proc.wait()
                raise RuntimeError(f"{' '.join(cmd)} ran past {timeout} s")
        wall = (reported_at if hang else time.perf_counter()) - started
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode != 0 and not hang:
        raise RuntimeError(f"{' '.join(cmd)} failed with exit code {proc.returncode}:\n{stdout[-2000:]}\n{stderr[-2000:]}")
    return stdout, wall, hang


def run_hpcps(args, name, seed, tmp):
    _, wire, layout, *wait = name.split()
    nodes, servers = LAYOUTS[layout]
    report_path = os.path.join(tmp, "hpcps.json")
    if os.path.exists(report_path):
        os.remove(report_path)
    program = os.path.join(args.build, "examples", f"fashion_mnist_{args.model}")
    cmd = pretend(args, nodes) + [
        program, "--servers", str(servers), "--batch", str(args.batch), *optimizer_arguments(wire), "--lr", str(args.lr),
        "--schedule", "constant", *wire_arguments(wire),
        "--evaluations-per-epoch", str(args.evaluations_per_epoch), "--epochs", str(max_epochs(args, name)),
        "--threads", "1",
        "--seed", str(seed), "--report", report_path]
    env = link_env(args, **({"HPCPS_WAIT": wait[0]} if wait else {}))
    stdout, wall, finalize_hang = execute_reported(cmd, env, args.timeout + 60)
    with open(report_path) as f:
        report = json.load(f)
    banner = next((line for line in stdout.splitlines() if line.startswith("hpcps ")), "")
    return outcome(report["evaluations"], args.target, wall,
                   {"command": recorded(cmd), "seed": seed, "banner": banner,
                    "report_samples_per_second": report["samples_per_second"], "finalize_hang": finalize_hang,
                    "hpcps_wait": env.get("HPCPS_WAIT") or "adaptive"})


def run_ddp(args, name, seed):
    cmd = pretend(args, 2) + [
        sys.executable, os.path.join(HERE, "peers", "pytorch_ddp.py"), "--launcher", "mpiexec", "--master-addr",
        "10.223.0.1", "--threads", "1", "--model", args.model, "--epochs", str(max_epochs(args, name)), "--batch",
        str(args.batch), "--lr", str(args.lr), "--seed", str(seed), "--evaluations-per-epoch",
        str(args.evaluations_per_epoch)]
    cmd += ["--fp16-hook"] if name == "DDP fp16 hook" else []
    cmd += ["--target-accuracy", str(args.target)] if args.stop_at_target else []
    stdout, wall, teardown_abort = execute(cmd, link_env(args, GLOO_SOCKET_IFNAME="hpn0"), args.timeout + 60,
                                           finished='"type": "summary"')
    return outcome(peer_evaluations(stdout), args.target, wall,
                   {"command": recorded(cmd), "seed": seed, "teardown_abort": teardown_abort})


def report(args, names, runs, repeats, total):
    results = summarize_runs(names, runs)
    ratios = {}
    for n in names:
        if not n.startswith("hpcps"):
            continue
        base = " ".join(["hpcps", "fp32"] + n.split()[2:])
        base = base if base in names else f"hpcps fp32 {n.split()[2]}"
        if base in names and base != n:
            per_repeat = per_repeat_ratio(runs[n], runs[base])
            ratios[f"{n} / {base}"] = {"summary": summary(per_repeat), "per_repeat": per_repeat}
        ddp = [d for d in ("DDP fp32", "DDP fp16 hook") if d in names]
        if ddp:
            # Per repeat, against the faster of the DDP runs of that repeat.
            best = [min((runs[d][i] for d in ddp), key=lambda r: (r["time_to_target_seconds"] is None,
                                                                   r["time_to_target_seconds"] or 0.0))
                    for i in range(len(runs[n]))]
            per_repeat = per_repeat_ratio(runs[n], best)
            ratios[f"{n} / faster DDP"] = {"summary": summary(per_repeat), "per_repeat": per_repeat}
    out = {"benchmark": "link_study", "model": args.model, "rate": args.rate, "delay": args.delay,
           "target": args.target, "max_epochs": args.max_epochs,
           "max_epochs_per_configuration": {n: max_epochs(args, n) for n in names},
           "evaluations_per_epoch": args.evaluations_per_epoch,
           "batch": args.batch, "lr": args.lr, "momentum": 0.9, "schedule": "constant", "repeats": repeats,
           "seeds": "seed + repeat", "stop_at_target": args.stop_at_target, "build": args.build,
           "torch_version": subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                                           capture_output=True, text=True).stdout.strip(),
           "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", ""), "cpus": os.cpu_count(),
           "total_seconds": total, "results": results, "ratios": ratios, "runs": runs}
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    plot(args.plot or os.path.splitext(args.out)[0] + ".png", runs, args.target,
         f"Fashion-MNIST {args.model.upper()} across pretend nodes, links of {args.rate}: time to {args.target:.2f} "
         "(median run bold)")
    return results, ratios


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build")
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--rate", default="1gbit", help="each node's link, tc's units (scripts/pretend_nodes --rate)")
    p.add_argument("--delay", default="0", help="one-way delay per link (needs netem; 0 here)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--target", type=float, default=None, help="test accuracy to reach (mlp 0.88, cnn 0.91)")
    p.add_argument("--max-epochs", type=int, default=15)
    p.add_argument("--epochs-for", action="append", default=[], metavar="CONFIGURATION=EPOCHS",
                   help="at most EPOCHS for this configuration instead of --max-epochs (repeatable)")
    p.add_argument("--evaluations-per-epoch", type=int, default=4)
    p.add_argument("--batch", type=int, default=128, help="global batch")
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--stop-at-target", action="store_true", help="stop the PyTorch runs at the target")
    p.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset of: " + ", ".join(CONFIGS))
    p.add_argument("--timeout", type=int, default=1200, help="seconds one run may take")
    p.add_argument("--out", default=os.path.join(HERE, "results", "link_study.json"))
    p.add_argument("--plot", default=None, help="PNG path (default: --out with .png)")
    args = p.parse_args()
    args.target = TARGETS[args.model] if args.target is None else args.target
    names = [n.strip() for n in args.configs.split(",")]
    epochs_for = {}
    for item in args.epochs_for:
        name, _, epochs = item.rpartition("=")
        if name.strip() not in names or not epochs.isdigit() or int(epochs) < 1:
            p.error(f"--epochs-for {item!r}: expected CONFIGURATION=EPOCHS with a configuration of --configs")
        epochs_for[name.strip()] = int(epochs)
    args.epochs_for = epochs_for
    unknown = [n for n in names if not known(n)]
    if unknown:
        p.error(f"unknown configurations {unknown}; choose from {CONFIGS}, or another top-k ratio, sign or pull wire")
    check = subprocess.run([NODES, "check"], capture_output=True, text=True)
    if check.returncode != 0:
        p.error(f"cannot make pretend nodes here: {check.stderr.strip()}")
    # Found out now, not after the first repeat's minutes: the plot after every repeat needs
    # matplotlib, the DDP runs torch, both in this interpreter (Debian: python3-matplotlib, python3-torch).
    needed = ["matplotlib"] + (["torch"] if any(n.startswith("DDP") for n in names) else [])
    missing = [m for m in needed if subprocess.run([sys.executable, "-c", f"import {m}"], capture_output=True).returncode]
    if missing:
        p.error(f"{sys.executable} cannot import {', '.join(missing)} (Debian: "
                + ", ".join(f"python3-{m}" for m in missing) + ")")
    runs = {n: [] for n in names}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hpcps_link_") as tmp:
        for r in range(args.repeats):
            seed = args.seed + r
            for name in names[r % len(names):] + names[:r % len(names)]:
                result = run_ddp(args, name, seed) if name.startswith("DDP") else run_hpcps(args, name, seed, tmp)
                result["repeat"] = r + 1
                runs[name].append(result)
                t = result["time_to_target_seconds"]
                print(f"repeat {r + 1} {name}: to {args.target}: " + (f"{t:.2f} s" if t is not None else "not reached")
                      + f", final {result['final_test_accuracy']:.4f}, {result['samples_per_second']:,.0f} samples/s",
                      file=sys.stderr, flush=True)
            results, ratios = report(args, names, runs, r + 1, time.perf_counter() - started)
    print_tables(f"Time to {args.target} across pretend nodes, links of {args.rate}, {args.repeats} repeat(s): "
                 "training seconds, median (min-max)", names, results, ratios, args.repeats)
    print(f"\nJSON: {args.out}; {time.perf_counter() - started:.0f} s in all")


if __name__ == "__main__":
    main()
