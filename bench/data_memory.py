#!/usr/bin/python3
"""Memory of the data path: peak resident memory of every rank of the Fashion-MNIST MLP demo, and of
the node, for 2, 3 and 4 ranks, dedicated (--servers 1) and colocated (--servers 0), one epoch with
the test-set evaluation, in up to four variants:

  before       a build of the tree before one copy per node (--before-build DIR): every rank reads
               both sets and keeps them as fp32
  private      this tree with --no-shared-data: each rank that needs a set reads a private copy of
               its bytes (uint8); servers read nothing
  node         this tree (the default): one copy of the bytes per node in a shared-memory window
  PyTorch DDP  bench/peers/pytorch_ddp.py, 2 processes (and its launcher), 1 epoch, same data

each also under MPIR_CVAR_ODD_EVEN_CLIQUES=1 (odd and even ranks on two pretend nodes: two copies).

How it measures: the script starts the job and, every --interval seconds until it ends, reads
/proc of each of its processes. Per rank: the peak resident set (VmHWM: the kernel's high-water
mark, so the polling misses nothing but the last interval before exit); it counts the pages of a
shared window the rank touched, in full, in every rank. Per node: the largest sum over the ranks
of their proportional set size (Pss, /proc/PID/smaps_rollup: a page shared by k processes counts
1/k in each), so a node's one copy counts once; polled, so a peak shorter than the interval may
be missed. The table also gives the sum of the ranks' VmHWM (what a per-process view adds up to).
mpiexec and Hydra's proxy are left out (the same in every variant). Runs are interleaved; each
configuration runs --repeats times; figures are medians with the min-max range.

    /usr/bin/python3 bench/data_memory.py --build build --before-build /tmp/build-before --repeats 3

The training throughput of the same runs is in the table too, but the polling disturbs it; for
throughput alone poll rarely and repeat more:

    /usr/bin/python3 bench/data_memory.py --build build --before-build /tmp/build-before --variants before,node \
        --ranks 2,4 --nodes one --repeats 5 --interval 2 --no-ddp --out bench/results/data_throughput.json

--before-build: a build of a tree before one copy per node, where every rank reads both sets as
fp32 (the results in bench/results/ used ce397ac): `git archive ce397ac | tar -x -C /tmp/before &&
cmake --preset release -S /tmp/before -B /tmp/build-before -DHPCPS_CUDA=OFF &&
cmake --build /tmp/build-before --target fashion_mnist_mlp`.

--demo measures the README's demo as a user runs it instead (scripts/setup demo: `mpiexec -iface lo
-n 4 build/examples/fashion_mnist_mlp --servers 1`, all 10 epochs, OMP_NUM_THREADS=1): each rank
under `/usr/bin/time -f %M` (its peak RSS as the kernel's rusage reports it) as well as polled for
VmHWM and Pss, for each program of --programs (default the CPU program and, where the build has
it, its CUDA twin fashion_mnist_mlp_cuda, which links cuBLAS and the CUDA runtime: the demo's
program before they were separated), with PyTorch DDP (2 processes, the same epochs) beside them:

    /usr/bin/python3 bench/data_memory.py --demo --repeats 5 --out bench/results/demo_memory.json
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
from straggler_study import fmt, summarize  # noqa: E402  (median and range; 'median (min-max)')
from time_to_accuracy import recorded, thread_env  # noqa: E402  (portable commands; thread settings)

MB = 1e6


def children(pid):
    """Every descendant of `pid` (from /proc/*/stat's parent field)."""
    parent = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            parent[int(entry)] = int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
    found, frontier = [], [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        found += kids
        frontier += kids
    return found


def read_kb(path, keys):
    values = {}
    try:
        with open(path) as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name in keys:
                    values[name] = int(rest.split()[0]) * 1024
    except OSError:
        return None
    return values


def process_name(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return None


def mpi_rank(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            for item in f.read().split(b"\0"):
                if item.startswith(b"PMI_RANK="):
                    return int(item[9:])
    except (OSError, ValueError):
        pass
    return None


def measure(cmd, env, is_rank, interval, timeout):
    """Runs `cmd`, polls its processes, returns (stdout, per-process peaks, node peak of the summed Pss)."""
    log = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    peaks = {}  # pid -> {"name", "rank", "vmhwm", "rss_shmem"}
    node_pss = 0
    started = time.perf_counter()
    while True:
        done = proc.poll() is not None
        pss_sum = 0
        for pid in children(proc.pid):
            name = process_name(pid)
            if name is None or not is_rank(name):
                continue
            status = read_kb(f"/proc/{pid}/status", {"VmHWM", "RssShmem"})
            rollup = read_kb(f"/proc/{pid}/smaps_rollup", {"Pss"})
            if not status or not rollup:
                continue
            entry = peaks.setdefault(pid, {"name": name, "rank": mpi_rank(pid), "vmhwm": 0, "rss_shmem": 0})
            entry["vmhwm"] = max(entry["vmhwm"], status.get("VmHWM", 0))
            entry["rss_shmem"] = max(entry["rss_shmem"], status.get("RssShmem", 0))
            pss_sum += rollup.get("Pss", 0)
        node_pss = max(node_pss, pss_sum)
        if done:
            break
        if time.perf_counter() - started > timeout:
            proc.kill()
            raise RuntimeError(f"{' '.join(cmd)}: no end after {timeout} s")
        time.sleep(interval)
    log.seek(0)
    text = log.read()
    log.close()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed with exit code {proc.returncode}:\n{text[-3000:]}")
    return text, list(peaks.values()), node_pss


def hpcps_run(args, build, ranks, servers, extra, cliques, tmp):
    report = os.path.join(tmp, "report.json")
    if os.path.exists(report):
        os.remove(report)
    program = os.path.join(build, "examples", "fashion_mnist_mlp")
    cmd = ["mpiexec", "-iface", "lo", "-n", str(ranks), program, "--servers", str(servers), "--epochs", "1",
           "--report", report] + extra
    env = thread_env(1, 1, UCX_NET_DEVICES="lo", MPIEXEC_TIMEOUT=str(args.timeout))
    if cliques:
        env["MPIR_CVAR_ODD_EVEN_CLIQUES"] = "1"
    _, procs, node_pss = measure(cmd, env, lambda name: name.startswith("fashion_mnist"), args.interval,
                                 args.timeout + 30)
    with open(report) as f:
        rep = json.load(f)
    workers = ranks - servers if servers > 0 else ranks
    for p in procs:
        p["role"] = ("worker" if servers == 0 or p["rank"] < workers else "server") if p["rank"] is not None else "?"
    procs.sort(key=lambda p: p["rank"] if p["rank"] is not None else 1 << 30)
    return {"command": recorded(cmd), "ranks": procs, "node_pss": node_pss,
            "samples_per_second": rep["samples_per_second"], "test_accuracy": rep["test_accuracy"]}


def write_json(path, out):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)


def demo_run(args, program, tmp):
    """The README's demo, each rank under /usr/bin/time -f %M (KiB) as well as polled."""
    report = os.path.join(tmp, "report.json")
    for f in os.listdir(tmp):
        os.remove(os.path.join(tmp, f))
    path = os.path.join(args.build, "examples", program)
    # PMI_RANK names each rank's file; sh passes the program its arguments unchanged.
    wrapped = ["sh", "-c", f'exec /usr/bin/time -f %M -o "{tmp}/maxrss.$PMI_RANK" "$0" "$@"', path]
    cmd = ["mpiexec", "-iface", "lo", "-n", "4"] + wrapped + ["--servers", "1", "--report", report]
    env = thread_env(1, 1, UCX_NET_DEVICES="lo", MPIEXEC_TIMEOUT=str(args.timeout))
    _, procs, node_pss = measure(cmd, env, lambda name: name.startswith("fashion_mnist"), args.interval,
                                 args.timeout + 30)
    with open(report) as f:
        rep = json.load(f)
    maxrss = []
    for rank in range(4):
        with open(os.path.join(tmp, f"maxrss.{rank}")) as f:
            maxrss.append(int(f.read().split()[-1]) * 1024)  # GNU time's %M is in KiB
    procs.sort(key=lambda p: p["rank"] if p["rank"] is not None else 1 << 30)
    for p in procs:
        p["role"] = "server" if p["rank"] == 3 else "worker"
    return {"command": recorded(cmd), "program": program, "ranks": procs, "node_pss": node_pss, "maxrss": maxrss,
            "samples_per_second": rep["samples_per_second"], "test_accuracy": rep["test_accuracy"]}


def demo_main(args):
    programs = args.programs.split(",") if args.programs else [
        p for p in ("fashion_mnist_mlp", "fashion_mnist_mlp_cuda")
        if os.path.exists(os.path.join(args.build, "examples", p))]
    runs = {p: [] for p in programs}
    ddp = []
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for program in programs[repeat % len(programs):] + programs[:repeat % len(programs)]:
                r = demo_run(args, program, tmp)
                runs[program].append(r)
                print(f"{program}: /usr/bin/time %M {[round(m / MB) for m in r['maxrss']]} MB (sum "
                      f"{sum(r['maxrss']) / MB:.0f}), node Pss {r['node_pss'] / MB:.0f} MB, "
                      f"{r['samples_per_second']:.0f} samples/s, accuracy {r['test_accuracy']:.4f}", file=sys.stderr)
            if not args.no_ddp:
                r = ddp_run(args, tmp, epochs=10)
                ddp.append(r)
                print(f"PyTorch DDP: node Pss {r['node_pss'] / MB:.0f} MB, processes "
                      f"{[round(p['vmhwm'] / MB) for p in r['ranks']]} MB", file=sys.stderr)
    results = []
    for program, rs in runs.items():
        results.append({
            "program": program, "runs": rs,
            "per_rank_maxrss_mb": [summarize([r["maxrss"][i] / MB for r in rs]) for i in range(4)],
            "sum_maxrss_mb": summarize([sum(r["maxrss"]) / MB for r in rs]),
            "per_rank_vmhwm_mb": [summarize([r["ranks"][i]["vmhwm"] / MB for r in rs if len(r["ranks"]) == 4])
                                  for i in range(4)],
            "node_pss_mb": summarize([r["node_pss"] / MB for r in rs]),
            "samples_per_second": summarize([r["samples_per_second"] for r in rs]),
            "test_accuracy": summarize([r["test_accuracy"] for r in rs]),
        })
    if ddp:
        results.append({
            "program": "PyTorch DDP (2 processes)", "runs": ddp,
            "per_process_vmhwm_mb": [summarize([r["ranks"][i]["vmhwm"] / MB for r in ddp if len(r["ranks"]) == len(ddp[0]["ranks"])])
                                     for i in range(len(ddp[0]["ranks"]))],
            "sum_vmhwm_mb": summarize([sum(p["vmhwm"] for p in r["ranks"]) / MB for r in ddp]),
            "node_pss_mb": summarize([r["node_pss"] / MB for r in ddp]),
        })
    out = {"date": time.strftime("%Y-%m-%d"), "repeats": args.repeats, "interval_seconds": args.interval,
           "command": "mpiexec -iface lo -n 4 build/examples/PROGRAM --servers 1 (the README's demo, 10 epochs)",
           "results": results}
    write_json(args.out, out)
    print("| program | peak RSS per rank, MB (/usr/bin/time %M; rank 3 the server) | sum of the 4, MB | node Pss peak, MB | samples/s |")
    print("| --- | --- | --- | --- | --- |")
    for e in results:
        if "per_rank_maxrss_mb" in e:
            ranks = " / ".join(fmt(s, digits=0) for s in e["per_rank_maxrss_mb"])
            print(f"| {e['program']} | {ranks} | {fmt(e['sum_maxrss_mb'], digits=0)} | {fmt(e['node_pss_mb'], digits=0)} | "
                  f"{fmt(e['samples_per_second'], digits=0)} |")
        else:
            ranks = " / ".join(fmt(s, digits=0) for s in e["per_process_vmhwm_mb"])
            print(f"| {e['program']} | {ranks} (VmHWM, + launcher) | {fmt(e['sum_vmhwm_mb'], digits=0)} | "
                  f"{fmt(e['node_pss_mb'], digits=0)} | |")
    print(f"JSON written to {args.out}", file=sys.stderr)


def ddp_run(args, tmp, epochs=1):
    cmd = [args.torch_python, os.path.join(HERE, "peers", "pytorch_ddp.py"), "--processes", "2", "--threads", "1",
           "--epochs", str(epochs), "--batch", "64", "--evaluations-per-epoch", "1"]
    text, procs, node_pss = measure(cmd, thread_env(1, 1, GLOO_SOCKET_IFNAME="lo"),
                                    lambda name: name.startswith("python") or name.startswith("pt_"), args.interval,
                                    args.timeout + 30)
    procs.sort(key=lambda p: p["vmhwm"])
    for i, p in enumerate(procs):
        p["role"] = "process"
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    summary = next((e for e in lines if e.get("type") == "summary"), {})
    return {"command": recorded(cmd), "ranks": procs, "node_pss": node_pss,
            "samples_per_second": summary.get("samples_per_second"), "test_accuracy": summary.get("test_accuracy")}


def configurations(args):
    variants = [("node", args.build, [])]
    variants.append(("private", args.build, ["--no-shared-data"]))
    if args.before_build:
        variants.insert(0, ("before", args.before_build, []))
    variants = [v for v in variants if v[0] in args.variants.split(",")]
    configs = []
    for cliques in {"both": (False, True), "one": (False,), "two": (True,)}[args.nodes]:
        for ranks in args.ranks:
            for servers in [s for s in (1, 0) if ("dedicated" if s else "colocated") in args.layouts.split(",")]:
                for name, build, extra in variants:
                    configs.append({"variant": name, "build": build, "extra": extra, "ranks": ranks,
                                    "servers": servers, "cliques": cliques})
    return configs


def key(c):
    return (c["variant"], c["ranks"], "dedicated" if c["servers"] else "colocated", "two nodes" if c["cliques"] else "one node")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=os.path.join(os.path.dirname(HERE), "build"))
    parser.add_argument("--before-build", help="build folder of the tree before one copy per node (fp32 per rank)")
    parser.add_argument("--ranks", default="2,3,4")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between polls of /proc")
    parser.add_argument("--timeout", type=int, default=240)
    parser.add_argument("--torch-python", default="/usr/bin/python3", help="Python with torch, for PyTorch DDP")
    parser.add_argument("--no-ddp", action="store_true")
    parser.add_argument("--variants", default="before,private,node", help="which of before, private, node to run")
    parser.add_argument("--layouts", default="dedicated,colocated")
    parser.add_argument("--nodes", choices=["both", "one", "two"], default="both",
                        help="one node, two pretend nodes (MPIR_CVAR_ODD_EVEN_CLIQUES=1), or both")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "data_memory.json"))
    parser.add_argument("--plot", default=os.path.join(HERE, "results", "data_memory.png"),
                        help="bar chart of the node's total memory (empty: none)")
    parser.add_argument("--from-json", help="redraw the plot from this JSON instead of running anything")
    parser.add_argument("--demo", action="store_true", help="the README's demo, each rank under /usr/bin/time -f %%M")
    parser.add_argument("--programs", help="--demo: programs in build/examples to run (default: the MLP and its CUDA twin)")
    args = parser.parse_args()
    if args.demo:
        demo_main(args)
        return
    if args.from_json:
        with open(args.from_json) as f:
            plot(json.load(f)["results"], args.plot)
        return
    args.ranks = [int(r) for r in args.ranks.split(",")]
    configs = configurations(args)
    runs = {key(c): [] for c in configs}
    ddp = []
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            order = configs[repeat % len(configs):] + configs[:repeat % len(configs)]
            for c in order:
                r = hpcps_run(args, c["build"], c["ranks"], c["servers"], c["extra"], c["cliques"], tmp)
                runs[key(c)].append(r)
                print(f"{key(c)}: node Pss {r['node_pss'] / MB:.0f} MB, ranks "
                      f"{[round(p['vmhwm'] / MB) for p in r['ranks']]} MB, {r['samples_per_second']:.0f} samples/s",
                      file=sys.stderr)
            if not args.no_ddp:
                r = ddp_run(args, tmp)
                ddp.append(r)
                print(f"PyTorch DDP: node Pss {r['node_pss'] / MB:.0f} MB, processes "
                      f"{[round(p['vmhwm'] / MB) for p in r['ranks']]} MB", file=sys.stderr)

    def figures(all_runs):
        # A run shorter than the polling interval may have been seen by no poll: no memory figures.
        rs = [r for r in all_runs if r["ranks"]] or all_runs
        n = len(rs[0]["ranks"])
        per_rank = [summarize([r["ranks"][i]["vmhwm"] / MB for r in rs if len(r["ranks"]) == n]) for i in range(n)]
        return {
            "per_rank_vmhwm_mb": per_rank,
            "roles": [p.get("role") for p in rs[0]["ranks"]],
            "per_rank_rss_shmem_mb": [summarize([r["ranks"][i]["rss_shmem"] / MB for r in rs if len(r["ranks"]) == n])
                                      for i in range(n)],
            "node_pss_mb": summarize([r["node_pss"] / MB for r in rs]),
            "sum_vmhwm_mb": summarize([sum(p["vmhwm"] for p in r["ranks"]) / MB for r in rs]),
            "samples_per_second": summarize([r["samples_per_second"] for r in all_runs if r["samples_per_second"]]),
            "test_accuracy": summarize([r["test_accuracy"] for r in all_runs if r["test_accuracy"] is not None]),
        }

    results = []
    for c in configs:
        rs = runs[key(c)]
        entry = {"variant": c["variant"], "ranks": c["ranks"], "layout": "dedicated" if c["servers"] else "colocated",
                 "servers": c["servers"], "pretend_nodes": 2 if c["cliques"] else 1, "runs": rs}
        entry.update(figures(rs))
        results.append(entry)
    if ddp:
        entry = {"variant": "PyTorch DDP", "ranks": 2, "layout": "data-parallel", "servers": 0, "pretend_nodes": 1,
                 "runs": ddp}
        entry.update(figures(ddp))
        results.append(entry)
    out = {"date": time.strftime("%Y-%m-%d"), "repeats": args.repeats, "interval_seconds": args.interval,
           "results": results}
    write_json(args.out, out)

    print("| variant | ranks | layout | nodes | per rank VmHWM, MB (median) | sum of VmHWM, MB | node Pss peak, MB | samples/s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for e in results:
        ranks = " / ".join(f"{s['median']:.0f}{'s' if role == 'server' else ''}"
                           for s, role in zip(e["per_rank_vmhwm_mb"], e["roles"]))
        print(f"| {e['variant']} | {e['ranks']} | {e['layout']} | {e['pretend_nodes']} | {ranks} | "
              f"{fmt(e['sum_vmhwm_mb'], digits=0)} | {fmt(e['node_pss_mb'], digits=0)} | "
              f"{fmt(e['samples_per_second'], digits=0)} |")
    print(f"JSON written to {args.out}", file=sys.stderr)
    if args.plot:
        plot(results, args.plot)


def plot(results, path):
    """The node's total (Pss peak, median and range) per layout and variant, one node; PyTorch DDP
    as a line."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    one = [e for e in results if e["pretend_nodes"] == 1 and e["variant"] != "PyTorch DDP"]
    groups = sorted({(e["ranks"], e["layout"]) for e in one})
    variants = [v for v in ("before", "private", "node") if any(e["variant"] == v for e in one)]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / max(1, len(variants))
    for i, v in enumerate(variants):
        xs, ys, lo, hi = [], [], [], []
        for g, (ranks, layout) in enumerate(groups):
            e = next((e for e in one if e["variant"] == v and (e["ranks"], e["layout"]) == (ranks, layout)), None)
            if e is None:
                continue
            m = e["node_pss_mb"]
            xs.append(g + (i - (len(variants) - 1) / 2) * width)
            ys.append(m["median"])
            lo.append(m["median"] - m["min"])
            hi.append(m["max"] - m["median"])
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=3, label=v)
    ddp = next((e for e in results if e["variant"] == "PyTorch DDP"), None)
    if ddp:
        ax.axhline(ddp["node_pss_mb"]["median"], color="gray", linestyle="--",
                   label=f"PyTorch DDP, 2 processes ({ddp['node_pss_mb']['median']:.0f} MB)")
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([f"{r} ranks\n{layout}" for r, layout in groups])
    ax.set_ylabel("node total, MB (peak of summed Pss)")
    ax.set_title("MLP demo, 1 epoch: memory of the node, one copy of the data per node vs before")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot written to {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
