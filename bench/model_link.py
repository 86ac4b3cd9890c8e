"""bench/model.py's model of a synchronous clock on a throttled link between nodes (model.py --link-only).

Inputs, all measured: the link's one-way message time t(m) (MPI ping-pong) and the time x(m) of an
exchange in which both ranks send m at once, from bench/machine_rates run across 2 pretend nodes
(scripts/pretend_nodes; bench/results/link_rates.json); the gradient and the server kernels of
bench/machine_rates on one node (machine_rates.json); the top-k selection of bench/top_k_rates
(top_k_rates.json). One clock of W workers, each with its share b of the global batch, over P
parameters in S shards (colocated: S = W, every rank a worker and a server):

    T = T_compute(b) + T_encode + T_push + T_server + T_pull
    colocated: T_push = (W - 1) t(m_push),  T_pull = (W - 1) t(m_pull)   (a rank sends and receives
               W - 1 messages; its own shard is a local copy); with W = 2, where x is measured,
               T_push = x(m_push) and T_pull = x(m_pull): both ranks send at once
    dedicated: T_push = max(W, S) t(m_push), T_pull = max(W, S) t(m_pull) (a server's link carries W)

with m_push = 4 P/S + 4 bytes (fp32), 2 P/S + 4 (fp16, bf16), 8 ceil(r P/S) (top-k r: an index and a
value per element sent), 4 ceil(P/S / 32) + 4 ceil(P/S / 1024) + 4 (scaled sign: a bit per element,
an fp32 scale per block of 1024) and m_pull = 4 or 2 bytes x P/S, or a scaled sign's bytes times its passes (sign
pulls, ps/sign_pull.hpp); T_encode the top-k selection (or the scaled-sign or 16-bit encoding) of the
P floats a worker pushes, at the measured rate; a sign pull adds the server's encoding of its shard
(once a clock: one view for every worker) to T_server and the worker's decoding of the P floats to
T_encode (bench/top_k_rates: "sign pull encode", "sign pull add"). Ring allreduce: 2 (n - 1) t(bytes x P/n) plus the
same compute and update.

The pretend nodes are network namespaces of one machine: the dedicated layout runs 3 processes on
2 cores. Given bench/scheduler_rates' measurement of that machine, one per wait mode of the runs
(model.py --link-scheduler), the workers' compute and encoding are multiplied by its
oversubscription factor at the worker's compute time: what the scheduler does to a superstep of 3
ranks that compute and then wait for one another. The link's phases and the server's kernels are
not (the link keeps its pace; the server works while the workers wait).

It predicts samples/s of the runs of bench/link_study.py and their time to the target (the run's
own epochs to the target, which the model does not predict, over the predicted rate), and
extrapolates to 64-1024 workers at 1-100 Gbit/s (assumed latency) for two model sizes: which wire,
and the parameter server or ring allreduce, gives the shortest clock.
"""
import math

FLOAT = 4
TRAIN_SAMPLES = 60000


def link_message(link_rates):
    """x(m), the time of an exchange in which both ranks send m at once on the link (bench/machine_rates
    across 2 pretend nodes), interpolated in log-log between the measured sizes; beyond the largest,
    plus the rest at the bandwidth of the two largest. The one-way time t(m) is the same run's
    Rates.message_table."""
    from model import interpolate  # noqa: E402 (model.py imports this module)
    rows = sorted((r["bytes"], r["seconds"]["median"]) for r in link_rates["bidirectional"])
    xs, ys = [r[0] for r in rows], [r[1] for r in rows]
    beta = (xs[-1] - xs[-2]) / (ys[-1] - ys[-2])

    def exchange(m):
        if m >= xs[-1]:
            return ys[-1] + (m - xs[-1]) / beta
        return interpolate(xs, ys, max(m, xs[0]), log=True)
    return exchange, {"bytes": xs, "seconds": ys, "beta_bytes_per_second": beta}


SIGN_BLOCK = 1024  # elements per scale of a scaled-sign push (ps/sign_push.hpp's sign_block)


def parse_wire(token):
    """fp32 | fp16 | bf16 | topk<r>[mc][/<pull>] | sign[mc][/<pull>] (bench/link_study.py's tokens;
    <pull> fp32, fp16, bf16, or sign, sign2 .. sign4: scaled-sign pulls of that many passes)."""
    if token in ("fp32", "fp16", "bf16"):
        return {"top_k": 0.0, "sign": False, "push_bytes": FLOAT if token == "fp32" else 2,
                "pull_bytes": FLOAT if token == "fp32" else 2, "sign_pull": 0}
    head, _, pull = token.partition("/")
    pull_bytes = 2 if pull in ("fp16", "bf16") else FLOAT
    sign_pull = int(pull[len("sign"):] or 1) if pull.startswith("sign") else 0  # passes a pull
    if head in ("sign", "signmc"):
        return {"top_k": 0.0, "sign": True, "push_bytes": None, "pull_bytes": pull_bytes, "sign_pull": sign_pull}
    ratio = head[len("topk"):]
    ratio = ratio[:-2] if ratio.endswith("mc") else ratio
    return {"top_k": float(ratio), "sign": False, "push_bytes": 8, "pull_bytes": pull_bytes, "sign_pull": sign_pull}


def sign_message_bytes(elements):
    """Scaled signs of `elements`: a bit each, an fp32 scale per block."""
    return 4 * math.ceil(elements / 32) + FLOAT * math.ceil(elements / SIGN_BLOCK)


def push_message_bytes(wire, shard):
    """A worker's push to one shard: top-k's index and value per element sent; scaled signs' bit per
    element and fp32 scale per block; otherwise the elements in the wire format; plus the count."""
    if wire["top_k"] > 0:
        return 8 * math.ceil(wire["top_k"] * shard)
    if wire["sign"]:
        return sign_message_bytes(shard) + FLOAT
    return wire["push_bytes"] * shard + FLOAT


def encode_seconds(top_k_rates, wire, floats):
    """The worker's top-k selection (interpolated in the ratio), scaled-sign or 16-bit encoding of `floats`."""
    from model import interpolate  # noqa: E402
    kernels = top_k_rates["kernels"]
    per_float = None
    if wire["top_k"] > 0:
        rows = sorted((k["ratio"], k["seconds_median"]) for k in kernels if k["name"] == "top-k compress")
        # Linear in the logarithm of the ratio, clamped to the measured ratios.
        per_float = interpolate([math.log(r) for r, _ in rows], [t for _, t in rows],
                                math.log(wire["top_k"])) / top_k_rates["floats"]
    elif wire["sign"]:
        per_float = next(k["seconds_median"] for k in kernels if k["name"] == "sign compress") / top_k_rates["floats"]
    elif wire["push_bytes"] == 2:
        per_float = next(k["seconds_median"] for k in kernels if k["name"] == "bf16 encode") / top_k_rates["floats"]
    return (per_float or 0.0) * floats


def sign_pull_seconds(top_k_rates, kernel, floats):
    """A scaled-sign pull's kernel ("sign pull encode" on the server, "sign pull add" on the worker)
    over `floats`, at the measured rate; rates measured before the kernel existed give the push's
    encoding for both."""
    kernels = top_k_rates["kernels"]
    seconds = next((k["seconds_median"] for k in kernels if k["name"] == kernel), None)
    if seconds is None:
        seconds = next(k["seconds_median"] for k in kernels if k["name"] == "sign compress")
    return seconds / top_k_rates["floats"] * floats


def ps_link_clock(rates, message, top_k_rates, sizes, params, workers, servers, worker_batch, wire, optimizer,
                  exchange=None, compute=None):
    """One clock. `exchange`, where measured, times a colocated phase with 2 ranks, in which both
    send at once over the two directions of one link; otherwise (W - 1) t(m). `compute`, where
    given, is the measured gradient seconds of the worker's batch (the CNN's, from bench/cnn_step);
    otherwise the MLP of `sizes` from the GEMM rates."""
    from model import server_seconds  # noqa: E402
    colocated = servers == 0
    shards = workers if colocated else servers
    shard = params / shards
    m_push = push_message_bytes(wire, shard)
    m_pull = wire["sign_pull"] * sign_message_bytes(shard) if wire["sign_pull"] else wire["pull_bytes"] * shard
    links = (workers - 1) if colocated else max(workers, servers)
    if compute is None:
        compute = rates.gradient_seconds(sizes, worker_batch)[0]
    encode = encode_seconds(top_k_rates, wire, params)  # the worker's S (or W) shards, P floats in all
    if colocated and workers == 2 and exchange is not None:
        push, pull = exchange(m_push), exchange(m_pull)
    else:
        push, pull = links * message(m_push), links * message(m_pull)
    server = server_seconds(rates, shard, workers, optimizer)
    if wire["sign_pull"]:
        server += wire["sign_pull"] * sign_pull_seconds(top_k_rates, "sign pull encode", shard)
        encode += wire["sign_pull"] * sign_pull_seconds(top_k_rates, "sign pull add", params)
    total = compute + encode + push + server + pull
    return {"compute": compute, "encode": encode, "push": push, "server": server, "pull": pull, "total": total,
            "push_bytes": m_push, "pull_bytes": m_pull}


def ring_clock(rates, message, sizes, params, workers, worker_batch, element_bytes, optimizer, compute=None):
    from model import UPDATE_ARRAYS, UPDATE_KERNEL  # noqa: E402
    n = workers
    if compute is None:
        compute = rates.gradient_seconds(sizes, worker_batch)[0]
    comm = 2 * (n - 1) * message(element_bytes * params / n) if n > 1 else 0.0
    reduce = (n - 1) * rates.kernel_seconds("add", params / n, 3)
    update = rates.kernel_seconds(UPDATE_KERNEL[optimizer], params, UPDATE_ARRAYS[optimizer])
    return {"compute": compute, "communicate": comm, "reduce": reduce, "update": update,
            "total": compute + comm + reduce + update}


def cnn_step_seconds(cnn_steps, worker_batch):
    """The CNN's parameters and the median seconds of its gradient on `worker_batch` samples, one
    thread, oneDNN convolutions: bench/cnn_step's run at that batch (no interpolation: the step is
    not linear in the batch at these sizes, so the run must be at the runs' own worker batch)."""
    for r in cnn_steps["results"]:
        if r["method"] == "onednn" and r["threads"] == 1 and r["batch"] == worker_batch:
            return r["parameters"], r["step_seconds_median"]
    raise SystemExit(f"the CNN step file has no one-thread oneDNN step at batch {worker_batch}: run "
                     f"build/bench/cnn_step --widths 32 --batch {worker_batch} --threads 1 --methods onednn --out FILE")


def shared_cores_factor(schedulers, layout, wait, processes, compute):
    """The pretend nodes of one machine share its cores: 3 processes (2 workers and a server) on 2
    cores. `schedulers` maps a wait mode (HPCPS_WAIT) to bench/scheduler_rates' measurement of this
    machine (model.SchedulerRates) taken with that wait; its factor at the worker's compute is how
    much slower the scheduler makes a compute-then-exchange superstep of that many ranks than on
    one core each. None where no measurement of that wait is given or the processes fit the cores."""
    scheduler = schedulers.get(wait) if schedulers else None
    if scheduler is None or processes <= scheduler.cores:
        return None
    return scheduler.factor(layout, processes, compute)


def validate_link(rates, message, exchange, top_k_rates, studies, sizes, params, optimizer, cnn_steps=None,
                  schedulers=None):
    """Predicted against measured for every hpcps configuration of the link studies. A CNN study
    (study["model"] == "cnn") needs `cnn_steps`, bench/cnn_step's JSON, for its compute and size.
    With `schedulers` (see shared_cores_factor), a layout with more processes than the machine's
    cores has its workers' own work (compute and encoding) slowed by the measured factor; the link's
    phases and the server's kernels are not (the link's time is the link's, and the server works
    while the workers wait)."""
    rows = []
    for path, study in studies:
        batch = study["batch"]
        workers = 2  # every layout of bench/link_study.py has 2 workers
        compute, study_params = None, params
        if study.get("model") == "cnn":
            if cnn_steps is None:
                raise SystemExit(f"{path} trains the CNN: pass --cnn-step (bench/cnn_step's JSON)")
            study_params, compute = cnn_step_seconds(cnn_steps, batch // workers)
        for name, res in study["results"].items():
            parts = name.split()
            if parts[0] != "hpcps":
                continue
            wire = parse_wire(parts[1])
            servers = 0 if parts[2] == "colocated" else 1
            clock = ps_link_clock(rates, message, top_k_rates, sizes, study_params, workers, servers, batch / workers,
                                  wire, "sgd" if "mc" in parts[1] else optimizer, exchange, compute)
            layout = "colocated" if servers == 0 else "dedicated"
            wait = parts[3] if len(parts) > 3 else "adaptive"
            factor = shared_cores_factor(schedulers, layout, wait, workers + servers, clock["compute"])
            clock["alone_total"] = clock["total"]
            clock["shared_cores_factor"] = factor
            if factor is not None:
                clock["total"] += (factor - 1.0) * (clock["compute"] + clock["encode"])
            predicted = batch / clock["total"]
            measured = res["samples_per_second"]["median"]
            epochs = res["epoch_at_target"]["median"] if res.get("epoch_at_target") else None
            time_measured = res["time_to_target_seconds"]["median"] if res.get("time_to_target_seconds") else None
            time_predicted = epochs * TRAIN_SAMPLES / predicted if epochs else None
            rows.append({"study": path, "model": study.get("model", "mlp"), "configuration": name,
                         "target": study["target"], "parameters": study_params,
                         "measured_samples_per_second": measured, "predicted_samples_per_second": predicted,
                         "samples_per_second_error": predicted / measured - 1.0,
                         "measured_clock_seconds": batch / measured, "predicted_clock": clock,
                         "epochs_to_target_measured": epochs, "time_to_target_measured": time_measured,
                         "time_to_target_predicted": time_predicted,
                         "time_to_target_error": (time_predicted / time_measured - 1.0) if time_measured else None})
    return rows


def print_link_validation(rows):
    print("\nThe model on the link: samples/s and time to the target (with the run's measured epochs to it)")
    print(f"  {'configuration':<34} {'measured':>9} {'model':>9} {'error':>7}   {'clock ms':>8} {'model ms':>8}   "
          f"{'to target s':>11} {'model s':>8}")
    for r in rows:
        c = r["predicted_clock"]
        tt = (f"{r['time_to_target_measured']:>11.1f} {r['time_to_target_predicted']:>8.1f}"
              if r["time_to_target_measured"] else f"{'-':>11} {'-':>8}")
        label = r["configuration"] + (" (CNN)" if r.get("model") == "cnn" else "")
        print(f"  {label:<34} {r['measured_samples_per_second']:>9,.0f} {r['predicted_samples_per_second']:>9,.0f} "
              f"{r['samples_per_second_error'] * 100:>+6.0f}%   {r['measured_clock_seconds'] * 1e3:>8.2f} "
              f"{c['total'] * 1e3:>8.2f}   {tt}   (compute {c['compute'] * 1e3:.2f}, encode {c['encode'] * 1e3:.2f}, "
              f"push {c['push'] * 1e3:.2f}, server {c['server'] * 1e3:.2f}, pull {c['pull'] * 1e3:.2f} ms"
              + (f"; shared cores x{c['shared_cores_factor']:.2f} on compute and encode, "
                 f"{c['alone_total'] * 1e3:.2f} ms without)" if c.get("shared_cores_factor") else ")"))


EXTRAPOLATED_WIRES = ["fp32", "fp16", "topk0.01", "topk0.01/fp16", "sign/fp16"]


def extrapolate_link(rates, top_k_rates, models, workers_list, gbits_list, alpha, optimizer):
    """Per model, bandwidth and W: the clock of the colocated parameter server with each wire and of
    ring allreduce in fp32 and fp16, one rank per node, t(m) = alpha + m / beta."""
    out = []
    for model in models:
        # An MLP by its layer sizes (compute from the GEMM rates), or a network by its parameter
        # count and measured gradient seconds at the worker batch (the CNN, from bench/cnn_step).
        sizes, batch, compute = model.get("sizes"), model["worker_batch"], model.get("compute")
        from model import parameter_count  # noqa: E402
        params = model["parameters"] if compute is not None else parameter_count(sizes)
        name = model.get("name") or "-".join(map(str, sizes))
        for gbits in gbits_list:
            beta = gbits * 1e9 / 8
            message = (lambda a, b: (lambda m: a + m / b))(alpha, beta)
            for w in workers_list:
                row = {"model": name, "parameters": params, "worker_batch": batch,
                       "gbits": gbits, "workers": w, "clocks": {}}
                for token in EXTRAPOLATED_WIRES:
                    row["clocks"][f"PS {token}"] = ps_link_clock(rates, message, top_k_rates, sizes, params, w, 0,
                                                                 batch, parse_wire(token), optimizer,
                                                                 compute=compute)["total"]
                for ring, eb in (("ring fp32", FLOAT), ("ring fp16", 2)):
                    row["clocks"][ring] = ring_clock(rates, message, sizes, params, w, batch, eb, optimizer,
                                                     compute)["total"]
                row["fastest"] = min(row["clocks"], key=row["clocks"].get)
                row["ps_fp32_over_ring_fp32"] = row["clocks"]["PS fp32"] / row["clocks"]["ring fp32"]
                row["best_ps_over_best_ring"] = (min(v for k, v in row["clocks"].items() if k.startswith("PS"))
                                                 / min(v for k, v in row["clocks"].items() if k.startswith("ring")))
                out.append(row)
    return out


def print_link_extrapolation(rows, alpha):
    print(f"\nExtrapolated, one rank per node, colocated parameter server against ring allreduce, ASSUMED latency "
          f"{alpha * 1e6:g} us: clock ms per configuration, the fastest marked")
    names = list(rows[0]["clocks"])
    print(f"  {'model':<18} {'Gb/s':>5} {'W':>5} " + " ".join(f"{n:>16}" for n in names))
    for r in rows:
        cells = " ".join(f"{r['clocks'][n] * 1e3:>15.2f}{'*' if n == r['fastest'] else ' '}" for n in names)
        print(f"  {r['model']:<18} {r['gbits']:>5g} {r['workers']:>5} {cells}")


def plot_link(rows, ext, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not found: no link plot")
        return
    names = sorted({r["model"] for r in ext}, key=lambda m: [r["parameters"] for r in ext if r["model"] == m][0])
    fig, axes = plt.subplots(1, 1 + len(names), figsize=(5.7 * (1 + len(names)), 5))
    ax = axes[0]
    labels = [r["configuration"].replace("hpcps ", "") + (" CNN" if r.get("model") == "cnn" else "") for r in rows]
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [r["measured_samples_per_second"] for r in rows], 0.4, label="measured (median)")
    ax.bar([x + 0.2 for x in xs], [r["predicted_samples_per_second"] for r in rows], 0.4, label="model")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("samples/s")
    ax.set_title("2 pretend nodes, 1 Gbit/s: the model against the runs")
    ax.legend()
    for ax, model in zip(axes[1:], names):
        sel = [r for r in ext if r["model"] == model and r["workers"] == max(x["workers"] for x in ext)]
        for name in sel[0]["clocks"]:
            ax.plot([r["gbits"] for r in sel], [r["clocks"][name] * 1e3 for r in sel], marker="o", label=name)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("link, Gbit/s")
        ax.set_ylabel("clock, ms")
        ax.set_title(f"{model} ({sel[0]['parameters']:,} parameters), W = {sel[0]['workers']}")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")
