#!/usr/bin/python3
"""MPI transports for one parameter-server clock, side by side: runs bench/transports (point-to-point
as hpcps does today, RMA put/get, RMA accumulate, a shared-memory window, and an MPI ping-pong as the
reference; the transports interleaved within each run, and checked to compute the same parameters)
for each rank count in --ranks (1 server + W workers: W = ranks - 1), prints a Markdown table of
milliseconds per clock, median (min-max), writes all runs to one JSON file (--out) and a bar chart
next to it (same name, .png).

  /usr/bin/python3 bench/transports.py --build build --ranks 2,3 --parameters 25000000 --repeats 7
"""
import argparse
import json
import os
import subprocess
import tempfile

LABELS = {"point_to_point": "point-to-point", "rma_put_get": "RMA put/get", "rma_accumulate": "RMA accumulate",
          "shared_window": "shared window", "pingpong": "ping-pong (ref.)"}


def plot(runs, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = [t["name"] for t in runs[0]["transports"]]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.8 / len(runs)
    for j, run in enumerate(runs):
        by_name = {t["name"]: t for t in run["transports"]}
        xs, med, lo, hi = [], [], [], []
        for i, n in enumerate(names):
            t = by_name.get(n)
            if t is None:
                continue
            xs.append(i + (j - (len(runs) - 1) / 2) * width)
            med.append(t["seconds_per_clock_median"] * 1e3)
            lo.append(med[-1] - t["seconds_per_clock_min"] * 1e3)
            hi.append(t["seconds_per_clock_max"] * 1e3 - med[-1])
        ax.bar(xs, med, width, yerr=[lo, hi], capsize=3, label=f"1 server + {run['workers']} worker(s)")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([LABELS.get(n, n) + ("" if runs[0]["transports"][i]["floats"] == runs[0]["parameters"]
                                          else f"\n({runs[0]['transports'][i]['floats']:,} floats)")
                        for i, n in enumerate(names)], fontsize=8)
    ax.set_ylabel("ms per clock (push + update + pull)")
    ax.set_yscale("log")
    ax.set_title(f"One parameter-server clock of {runs[0]['parameters']:,} floats: median, min-max")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build")
    p.add_argument("--ranks", default="2,3", help="comma-separated mpiexec -n values (1 server + W workers)")
    p.add_argument("--parameters", type=int, default=25_000_000)
    p.add_argument("--accumulate-parameters", type=int, default=None,
                   help="floats for the RMA accumulate transport (default min(P, 4M): it is slow)")
    p.add_argument("--clocks", type=int, default=10)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--timeout", type=int, default=900, help="MPIEXEC_TIMEOUT per run, seconds")
    p.add_argument("--out", default="bench/results/transports.json")
    args = p.parse_args()
    env = dict(os.environ, UCX_NET_DEVICES="lo", MPIEXEC_TIMEOUT=str(args.timeout), OMP_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1")
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in [int(r) for r in args.ranks.split(",")]:
            out = os.path.join(tmp, f"transports_{n}.json")
            cmd = ["mpiexec", "-iface", "lo", "-n", str(n), os.path.join(args.build, "bench", "transports"),
                   "--parameters", str(args.parameters), "--clocks", str(args.clocks), "--repeats", str(args.repeats),
                   "--out", out]
            if args.accumulate_parameters is not None:
                cmd += ["--accumulate-parameters", str(args.accumulate_parameters)]
            subprocess.run(cmd, check=True, env=env)  # its table goes to stderr as it finishes
            with open(out) as f:
                runs.append(json.load(f))
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"benchmark": "transports", "runs": runs}, f, indent=1)
    fmt = lambda t: (f"{t['seconds_per_clock_median'] * 1e3:.2f} ({t['seconds_per_clock_min'] * 1e3:.2f}-"
                     f"{t['seconds_per_clock_max'] * 1e3:.2f})")
    print("| workers | transport | floats | ms per clock | GB/s | point-to-point / this | server update ms |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for run in runs:
        for t in run["transports"]:
            ratio = t.get("point_to_point_over_this")
            update = t.get("server_update_seconds_per_clock")
            print(f"| {run['workers']} | {LABELS.get(t['name'], t['name'])} | {t['floats']:,} | {fmt(t)} | "
                  f"{t['gbytes_per_second']:.2f} | {'-' if ratio is None else f'{ratio:.2f}'} | "
                  f"{'-' if update is None else f'{update * 1e3:.2f}'} |")
    png = os.path.splitext(args.out)[0] + ".png"
    plot(runs, png)
    print(f"wrote {args.out} and {png}")


if __name__ == "__main__":
    main()
