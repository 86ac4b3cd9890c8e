#!/usr/bin/python3
"""Analytic model of one synchronous clock of the hpcps parameter server, against ring allreduce.

Inputs are measured, not assumed: bench/machine_rates (MPI ping-pong latency alpha and bandwidth
beta, hpcps's GEMM at the network's shapes, STREAM-style memory bandwidth) writes
bench/results/machine_rates.json. From it the model predicts, for W workers, S servers, global
batch B and P parameters, the seconds of one clock:

    T = T_compute + T_push + T_server + T_pull

- T_compute: the measured gradient of the worker's batch (its GEMM FLOPs / measured GEMM rate, plus
  the measured element-wise remainder), interpolated in the batch size;
- T_push, T_pull: messages of t(m) = alpha + m / beta (or the measured ping-pong curve), one per
  worker and server; a rank's link carries its messages one after the other (a server receives W
  pushes, a worker sends S), and on a shared-memory node the copies of all messages also share the
  cores;
- T_server: the bytes the server's kernels touch (W - 1 accumulations, one update that reads and
  writes the parameters and the optimizer state) / measured memory bandwidth of those kernels.

On this machine ranks beyond the core count share cores: every phase is slowed by the ranks of
the busiest core, ceil(ranks / cores), since each rank stays on one core's run queue for a clock
and the clock waits for the slowest (--oversubscription busiest, the default), or by
max(1, ranks / cores), as if the scheduler spread them evenly (all), or only the compute is
(ranks), or each phase by the ranks busy in it (busy); the validation prints all of them.

It then (1) validates the model against the measured scaling study (bench/scaling_study.py ->
bench/results/scaling.json), printing predicted against measured seconds per clock and flagging errors
above 20%, and (2) extrapolates to W = 8 .. 1024 workers, one rank per node, for the parameter server
with S = 1, W/8, W/4 and W servers and the colocated layout against ring allreduce, under this
machine's measured alpha/beta and under an assumed cluster network (--cluster-alpha,
--cluster-gbits), with the work and depth of the aggregation (flat, sharded, tree, ring), and
(3) predicts a clock with workers of different speeds, static split (B/W each) against the
balanced one (samples in proportion to speed), against bench/balance_study.py's runs with one
worker slowed (bench/results/balance.json; --heterogeneous-only does this part alone):

    T = max( max_w s_w t_c(b_w),  f x (1/W) sum_w t_c(b_w) ) + T_comm

with worker w slowed s_w times (its part takes s_w t_c(b_w), fixed costs included), f the measured
oversubscription slowdown (1 when the ranks fit the cores) and T_comm as above, the same for every
split.

    mpiexec -n 2 build/bench/machine_rates --out bench/results/machine_rates.json
    bench/model.py                      # reads bench/results/{machine_rates,scaling,balance}.json
    bench/model.py --heterogeneous-only  # bench/results/model_heterogeneous.json, nothing else written
    bench/model.py --scaling /tmp/fake_scaling.json --out /tmp/model.json   # smoke

Writes JSON (--out), bench/results/model_validation.png and model_extrapolation.png (matplotlib).
See docs/model.md.
"""
import argparse
import bisect
import json
import math
import os
import statistics
import sys

INPUT = 784
CLASSES = 10
FLOAT = 4  # bytes
# Arrays the server's kernels stream, per element (ps/server.hpp, optim/): an accumulation
# sum += slice reads two and writes one; the update reads params, mean gradient and its state and
# writes params and state.
UPDATE_ARRAYS = {"sgd": 3, "momentum": 5, "nesterov": 5, "adam": 7}
UPDATE_KERNEL = {"sgd": "triad", "momentum": "momentum_sgd", "nesterov": "momentum_sgd", "adam": "momentum_sgd"}
THRESHOLD = 0.20


def layer_sizes(hidden):
    if isinstance(hidden, str):
        hidden = [int(x) for x in hidden.replace("-", ",").split(",") if x]
    return [INPUT] + list(hidden) + [CLASSES]


def parameter_count(sizes):
    return sum(sizes[l] * sizes[l + 1] + sizes[l + 1] for l in range(len(sizes) - 1))


def gemm_flops(sizes, batch):
    """FLOPs of nn::Mlp::gradient's GEMMs: forward X W^T and backward dW = D^T A per layer, dX = D W
    for every layer but the first."""
    per_sample = sum(2 * sizes[l] * sizes[l + 1] * (2 if l == 0 else 3) for l in range(len(sizes) - 1))
    return per_sample * batch


def interpolate(xs, ys, x, log=False):
    """Piecewise-linear interpolation (in log-log when `log`), clamped to the end values."""
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    i = bisect.bisect_right(xs, x) - 1
    if log:
        t = (math.log(x) - math.log(xs[i])) / (math.log(xs[i + 1]) - math.log(xs[i]))
        return math.exp(math.log(ys[i]) + t * (math.log(ys[i + 1]) - math.log(ys[i])))
    t = (x - xs[i]) / (xs[i + 1] - xs[i])
    return ys[i] + t * (ys[i + 1] - ys[i])


class Rates:
    """The measured rates of machine_rates.json, as functions of message size, batch and array size."""

    def __init__(self, data):
        self.data = data
        self.cores = data.get("hardware_threads") or 2
        pp = sorted(data["pingpong"], key=lambda r: r["bytes"])
        self.pp_bytes = [r["bytes"] for r in pp]
        self.pp_seconds = [r["seconds_one_way"]["median"] for r in pp]
        fit = data["fit"]
        self.alpha = fit["alpha_seconds"]
        self.beta = fit.get("beta_bytes_per_second") or 0.0
        if not self.beta > 0:
            self.beta = self.pp_bytes[-1] / self.pp_seconds[-1]
        self.bidirectional = data.get("bidirectional", [])
        self.compute = {}
        for net in data.get("compute", []):
            for r in net["results"]:
                self.compute.setdefault((tuple(net["layers"]), r["threads"]), []).append(r)
        for rows in self.compute.values():
            rows.sort(key=lambda r: r["batch"])
        self.memory = {}
        for m in data.get("memory", []):
            self.memory.setdefault(m["threads"], []).append(m)
        for rows in self.memory.values():
            rows.sort(key=lambda r: r["elements"])

    def message_fit(self, nbytes):
        return self.alpha + nbytes / self.beta

    def message_table(self, nbytes):
        """The measured one-way ping-pong time, interpolated in log-log between the measured sizes;
        beyond the largest, its time plus the rest at the fitted beta."""
        if nbytes >= self.pp_bytes[-1]:
            return self.pp_seconds[-1] + (nbytes - self.pp_bytes[-1]) / self.beta
        return interpolate(self.pp_bytes, self.pp_seconds, max(nbytes, self.pp_bytes[0]), log=True)

    def gradient_seconds(self, sizes, batch, threads=1):
        """(seconds, detail) of one worker's gradient of `batch` samples. Between measured batches the
        GEMM and element-wise times are interpolated linearly; outside, the nearest measured batch's
        GEMM rate and per-sample element-wise time are used (optimistic below the smallest batch,
        where the real rate falls)."""
        flops = gemm_flops(sizes, batch)
        key = (tuple(sizes), threads)
        if key not in self.compute:
            same_net = [k for k in self.compute if k[0] == tuple(sizes)]
            if same_net:
                key = min(same_net, key=lambda k: abs(k[1] - threads))
            else:
                key = None
        if key is None:
            # A network machine_rates did not measure: the GEMM rate of the measured network and
            # batch closest in FLOPs per step, no element-wise term.
            rows = [r for v in self.compute.values() for r in v]
            if not rows:
                raise SystemExit("machine_rates.json has no compute measurements")
            r = min(rows, key=lambda r: abs(math.log(r["gemm_flops"] / flops)))
            rate = r["gemm_flops"] / r["gemm_seconds"]["median"]
            return flops / rate, {"gemm_seconds": flops / rate, "elementwise_seconds": 0.0,
                                  "gemm_gflops": rate / 1e9, "source": "other network's GEMM rate"}
        rows = self.compute[key]
        bs = [r["batch"] for r in rows]
        gemm = [r["gemm_seconds"]["median"] for r in rows]
        # GEMMs + element-wise = the measured whole gradient (the element-wise part is its excess over
        # the GEMMs timed alone, which noise can make slightly negative: kept so the sum stays exact).
        elem = [r["gradient_seconds"]["median"] - r["gemm_seconds"]["median"] for r in rows]
        if batch < bs[0] or batch > bs[-1]:
            edge = 0 if batch < bs[0] else -1
            g = gemm[edge] * flops / rows[edge]["gemm_flops"]
            e = elem[edge] * batch / bs[edge]
            source = f"rate at batch {bs[edge]}"
        else:
            g = interpolate(bs, gemm, batch)
            e = interpolate(bs, elem, batch)
            source = "measured" if batch in bs else "interpolated"
        return g + e, {"gemm_seconds": g, "elementwise_seconds": e, "gemm_gflops": flops / g / 1e9,
                       "threads": key[1], "source": source}

    def gradient_seconds_small(self, sizes, batch, threads=1):
        """gradient_seconds, except below the smallest measured batch: there the straight line
        through the whole gradient's times at the two smallest measured batches, which keeps the
        fixed cost of a gradient call (gradient_seconds scales the smallest batch's time down in
        proportion, as if a call cost nothing of its own). A balanced split gives a slow worker a
        few samples, where that fixed cost is most of its time."""
        rows = self.compute.get((tuple(sizes), threads))
        if not rows or len(rows) < 2 or batch >= rows[0]["batch"]:
            return self.gradient_seconds(sizes, batch, threads)[0]
        (b0, t0), (b1, t1) = [(r["batch"], r["gradient_seconds"]["median"]) for r in rows[:2]]
        slope = (t1 - t0) / (b1 - b0)
        return max(t0 - (b0 - batch) * slope, 0.0) if batch > 0 else 0.0

    def kernel_seconds(self, kernel, elements, arrays, threads=1):
        """Seconds of a streaming kernel over `elements` floats per array: its traffic over the
        bandwidth measured for that kernel, interpolated (log-log) in the array size, so a shard
        that fits in cache runs at the cache-resident rate."""
        if elements <= 0:
            return 0.0
        rows = self.memory.get(threads) or self.memory.get(1) or next(iter(self.memory.values()))
        xs = [r["elements"] for r in rows]
        ys = [r[kernel]["gbytes_per_second_median"] * 1e9 for r in rows]
        bw = interpolate(xs, ys, elements, log=True)
        return arrays * elements * FLOAT / bw

    def bandwidth(self, kernel):
        rows = self.memory.get(1) or next(iter(self.memory.values()))
        return rows[-1][kernel]["gbytes_per_second_median"] * 1e9


class Network:
    """How messages cost: t(m) and whether ranks share cores (a single node) or each has its own."""

    def __init__(self, name, message, cores=None):
        self.name, self.message, self.cores = name, message, cores

    def phase(self, link_messages, total_messages, m, extra_per_link=0.0):
        """A communication phase: the busiest link carries `link_messages` one after the other; on a
        node with `cores` cores every message's copy also needs a core, so the phase takes at least
        total_messages x t(m) / cores."""
        t = self.message(m)
        busiest = link_messages * t + extra_per_link
        if self.cores is None:
            return busiest
        return max(busiest, (total_messages * t + extra_per_link) / self.cores)


class SchedulerRates:
    """bench/scheduler_rates.py's measurement: seconds of a superstep (c seconds of GEMM per rank,
    then empty messages and hpcps's wait) on R ranks, pattern "server" (rank 0 waits, the dedicated
    layout) or "peers" (every rank computes, colocated). factor() is how much slower R ranks make a
    superstep than the same pattern on no more ranks than cores: the oversubscription slowdown
    measured on this machine, with nothing of the parameter server in it."""

    def __init__(self, data):
        self.cores = data["cores"]
        self.curves = {}
        for run in data["runs"]:
            points = sorted(run["points"], key=lambda q: q["compute_seconds"])
            self.curves[(run["pattern"], run["ranks"])] = (
                [q["compute_seconds"] for q in points], [q["step_seconds"]["median"] for q in points])

    def step(self, pattern, ranks, compute):
        xs, ys = self.curves[(pattern, ranks)]
        return interpolate(xs, ys, compute, log=True)

    def factor(self, layout, ranks, compute):
        """None when not measured for this many ranks (the caller falls back to a rule)."""
        if ranks <= self.cores:
            return 1.0
        pattern = "server" if layout == "dedicated" else "peers"
        if (pattern, ranks) not in self.curves or (pattern, self.cores) not in self.curves:
            return None
        return self.step(pattern, ranks, compute) / self.step(pattern, self.cores, compute)


def share(busy, cores, whole=False):
    """How much slower a phase runs with `busy` runnable ranks on `cores` cores: busy / cores when
    the scheduler spreads them evenly over the phase, ceil(busy / cores) (`whole`) when each rank
    stays on one core's run queue and the clock waits for the busiest core."""
    if cores is not None and whole:
        return max(1.0, float(math.ceil(busy / cores)))
    return 1.0 if cores is None else max(1.0, busy / cores)


def server_seconds(rates, shard, workers, optimizer):
    """One server clock over a shard of `shard` floats. hpcps sums and updates block by block
    (ps/detail/aggregate.hpp), so the sum never goes to memory: the traffic is the W slices read
    once plus the update rule's own arrays except the gradient (params and state, read and
    written), at the update kernel's measured bandwidth. A lone slice is read in place."""
    arrays = max(1, workers) + UPDATE_ARRAYS[optimizer] - 1
    return rates.kernel_seconds(UPDATE_KERNEL[optimizer], shard, arrays)


PIECE_FLOATS = 1 << 20  # ps::Layout::default_piece_floats: a shard travels as messages of at most 4 MiB


def ps_clock(rates, net, params, workers, servers, compute, optimizer, threads=1, oversubscription="busy",
             pipelined=False, piece_floats=PIECE_FLOATS, shared_memory=False, measured_factor=None):
    """Seconds of one synchronous clock. servers = 0: the colocated layout (every rank a worker and the
    server of P/W). `compute` is one worker's gradient time on a core of its own. `shared_memory`:
    the ranks share a node and hpcps's shared-memory transport (Options::shared_memory): a push is
    an empty message (the server reads the gradient where it is), a pull is the worker's copy of
    the shards out of the servers' memory, at the measured copy bandwidth."""
    cores = net.cores
    colocated = servers == 0
    shards = workers if colocated else servers
    shard = params / shards
    m = FLOAT * (shard + 1)  # the push carries the sample count in front of the slice
    ranks = workers if colocated else workers + servers
    # Oversubscription (more ranks than cores): "busy" slows a phase by the ranks that work in it;
    # "ranks" slows the compute by all ranks, since the waiting ones poll and stay runnable; "all"
    # slows every phase by all ranks (the same reason, for every phase); "busiest" does what "all"
    # does by the ranks of the busiest core, ceil(ranks / cores).
    # "measured" slows every phase by `measured_factor`, the slowdown bench/scheduler_rates measured
    # for a superstep of this compute on this many ranks (1 when they fit the cores).
    whole = oversubscription == "busiest"
    if oversubscription == "measured":
        if measured_factor is None:
            raise ValueError("ps_clock: oversubscription 'measured' needs measured_factor")
        slow = lambda busy, cores: measured_factor
    else:
        slow = lambda busy, cores: share(busy, cores, whole)
    busy_compute = ranks * threads if (oversubscription != "busy" or colocated) else workers * threads
    t_compute = compute * slow(busy_compute, cores)
    everyone = slow(ranks, cores) if oversubscription in ("all", "busiest", "measured") else 1.0
    if shared_memory and colocated:
        # Each rank is told by W - 1 others that their gradients are ready, sums W slices of its
        # shard in place, then copies the W - 1 other shards out of their owners' memory.
        t_push = (workers - 1) * net.message(FLOAT)
        t_server = server_seconds(rates, shard, workers, optimizer) * slow(workers, cores)
        t_pull = rates.kernel_seconds("copy", params - shard, 2) * slow(workers, cores)
    elif shared_memory:
        # A server hears from W workers; each worker copies all S shards, every worker at once.
        t_push = max(workers, servers) * net.message(FLOAT) * everyone
        t_server = server_seconds(rates, shard, workers, optimizer) * max(slow(servers, cores), everyone)
        t_pull = rates.kernel_seconds("copy", params, 2) * max(slow(workers, cores), everyone)
    elif colocated:
        # W - 1 messages out and in on every rank, plus the slice to itself (a local copy).
        self_copy = rates.kernel_seconds("copy", shard, 2)
        t_push = net.phase(workers - 1, workers * (workers - 1), m, self_copy)
        t_server = server_seconds(rates, shard, workers, optimizer) * slow(workers, cores)
    else:
        # A server receives W pushes one after the other; a worker sends S.
        t_push = net.phase(max(workers, servers), workers * servers, m) * everyone
        t_server = server_seconds(rates, shard, workers, optimizer) * max(slow(servers, cores), everyone)
    if not shared_memory:
        t_pull = t_push
    stages = (t_push, t_server, t_pull)
    if shared_memory and colocated:
        # One core serves its shard and then copies the others': nothing to overlap.
        t_comm = sum(stages)
    elif pipelined:
        # Infinitely fine pieces: the slowest stage alone sets the time (a bound).
        t_comm = max(stages)
    else:
        # hpcps sends a shard as K pieces (ps/layout.hpp) and the server sums, updates and answers
        # piece k while piece k+1 arrives: a K-piece pipeline of three stages takes one piece
        # through every stage, then K - 1 more pieces at the slowest stage's pace. K = 1 (a small
        # model) is push, then update, then pull.
        pieces = max(1, math.ceil(shard / piece_floats))
        t_comm = sum(stages) / pieces + (pieces - 1) * max(stages) / pieces
    total = t_compute + t_comm
    return {"compute": t_compute, "push": t_push, "server": t_server, "pull": t_pull, "total": total}


def ring_allreduce_clock(rates, net, params, workers, compute, optimizer):
    """Ring allreduce of P floats on n ranks, one per node: 2(n - 1) steps of P/n floats each
    (reduce-scatter, then all-gather), every link carrying 2(n-1)/n of the model; (n - 1) additions
    of P/n per rank; then every rank applies the update to the whole model (replicated)."""
    n = workers
    chunk = params / n
    t_comm = 2 * (n - 1) * net.message(FLOAT * chunk) if n > 1 else 0.0
    t_reduce = (n - 1) * rates.kernel_seconds("add", chunk, 3)
    t_update = rates.kernel_seconds(UPDATE_KERNEL[optimizer], params, UPDATE_ARRAYS[optimizer])
    return {"compute": compute, "communicate": t_comm, "reduce": t_reduce, "update": t_update,
            "total": compute + t_comm + t_reduce + t_update}


def work_depth(rates, net, params, workers, servers_list):
    """Work (additions) and depth (sequential additions per element) of summing W gradients of P
    floats, and what it costs in time (memory-bound additions at the measured 'add' bandwidth)."""
    w = workers
    log_w = math.ceil(math.log2(w)) if w > 1 else 0
    add = lambda elements: rates.kernel_seconds("add", elements, 3)
    out = {
        "flat": {"work": (w - 1) * params, "depth": w - 1,
                 "seconds": (w - 1) * add(params),
                 "note": "one server sums W slices of P in rank order (hpcps, S = 1)"},
        "flat_tree_order": {"work": (w - 1) * params, "depth": log_w,
                            "seconds": (w - 1) * add(params),
                            "note": "one server, pairwise order: depth log2 W, same work and time on one core"},
        "sharded": {},
        "tree": {"work": (w - 1) * params, "depth": log_w,
                 "seconds": log_w * (net.message(FLOAT * params) + add(params)),
                 "note": "binary reduction tree over the workers: log2 W levels, each a message of P and an add"},
        "ring_reduce_scatter": {"work": (w - 1) * params, "depth": w - 1,
                                "seconds": (w - 1) * (net.message(FLOAT * params / w) + add(params / w)),
                                "note": "each rank adds (W-1) chunks of P/W, W-1 steps"},
    }
    for s in servers_list:
        out["sharded"][str(s)] = {"work": (w - 1) * params, "work_per_server": (w - 1) * params / s,
                                  "depth": w - 1, "seconds": (w - 1) * add(params / s)}
    return out


# ---------------------------------------------------------------------------------------------
# Validation against the scaling study


def validate(rates, records, optimizer, cores, variants, scheduler=None):
    rows = []
    for rec in records:
        sizes = layer_sizes(rec["hidden"]) if "hidden" in rec else layer_sizes(rec["model"].split("-")[1:-1])
        params = parameter_count(sizes)
        w, s = rec["workers"], rec["servers"]
        b = rec.get("worker_batch") or math.ceil(rec["global_batch"] / w)
        threads = rec.get("threads", 1)
        compute, detail = rates.gradient_seconds(sizes, b, threads)
        measured = rec["seconds_per_clock"]["median"] if isinstance(rec["seconds_per_clock"], dict) \
            else rec["seconds_per_clock"]
        row = {"model": rec.get("model", "-".join(map(str, sizes))), "scaling": rec.get("scaling"),
               "layout": rec.get("layout", "colocated" if s == 0 else "dedicated"), "workers": w, "servers": s,
               "ranks": rec.get("ranks", w + s), "worker_batch": b, "parameters": params,
               "oversubscribed": rec.get("ranks", w + s) > cores, "measured": measured,
               "measured_range": [rec["seconds_per_clock"].get("min"), rec["seconds_per_clock"].get("max")]
               if isinstance(rec["seconds_per_clock"], dict) else None,
               "measured_breakdown": rec.get("breakdown_per_clock"), "compute_detail": detail, "variants": {}}
        ranks = row["ranks"]
        factor = None
        if scheduler is not None and threads == 1:
            factor = scheduler.factor(row["layout"], ranks, compute)
        row["scheduler_factor"] = factor
        for name, (comm, over) in variants.items():
            message = rates.message_table if comm == "table" else rates.message_fit
            net = Network("this machine", message, cores)
            rule = over
            if over == "measured" and factor is None:
                rule = "busiest"  # not measured for these ranks or threads: the rule it replaces
            p = ps_clock(rates, net, params, w, s, compute, optimizer, threads, rule,
                         shared_memory=rec.get("shared_memory", False), measured_factor=factor)
            row["variants"][name] = {"predicted": p["total"], "parts": p, "rule": rule,
                                     "relative_error": (p["total"] - measured) / measured}
        rows.append(row)
    return rows


def print_validation(rows, primary):
    print(f"\nValidation ({primary}): seconds per clock, predicted vs measured (median); * = error above 20%")
    header = (f"{'model':>16} {'scaling':>7} {'layout':>9} {'W':>3} {'S':>2} {'b':>4}  {'measured ms':>11} "
              f"{'predicted':>9} {'error':>7}   {'pred comp/push/srv/pull ms':>28}  {'meas comp/comm/wait/srv ms':>28}")
    print(header)
    for r in rows:
        v = r["variants"][primary]
        p = v["parts"]
        mb = r["measured_breakdown"] or {}
        flag = "*" if abs(v["relative_error"]) > THRESHOLD else " "
        pred_parts = "/".join(f"{p[k] * 1e3:.2f}" for k in ("compute", "push", "server", "pull"))
        meas_parts = "/".join(f"{mb[k] * 1e3:.2f}" if mb.get(k) is not None else "-"
                              for k in ("compute", "communicate", "wait", "server_update"))
        print(f"{r['model']:>16} {str(r['scaling']):>7} {r['layout']:>9} {r['workers']:>3} {r['servers']:>2} "
              f"{r['worker_batch']:>4}  {r['measured'] * 1e3:>11.3f} {v['predicted'] * 1e3:>9.3f} "
              f"{v['relative_error'] * 100:>6.1f}%{flag}  {pred_parts:>28}  {meas_parts:>28}")


def summarize_variants(rows, variants):
    out = {}
    for name in variants:
        errors = [abs(r["variants"][name]["relative_error"]) for r in rows]
        if not errors:
            continue
        out[name] = {"rows": len(errors), "within_20_percent": sum(e <= THRESHOLD for e in errors),
                     "median_abs_error": statistics.median(errors), "max_abs_error": max(errors)}
    return out


# ---------------------------------------------------------------------------------------------
# Extrapolation


def server_counts(w):
    counts = {"PS S=1": 1, "PS S=W/8": max(1, w // 8), "PS S=W/4": max(1, w // 4), "PS S=W": w}
    return counts


def extrapolate(rates, scenarios, models, workers_list, optimizer):
    out = []
    for scenario in scenarios:
        for model in models:
            sizes = model["sizes"]
            params = parameter_count(sizes)
            b = model["worker_batch"]
            compute, detail = rates.gradient_seconds(sizes, b, 1)
            net = scenario["network"]
            series = {}
            for w in workers_list:
                entries = {}
                for label, s in server_counts(w).items():
                    entries[label] = ps_clock(rates, net, params, w, s, compute, optimizer)
                    entries[label]["servers"] = s
                entries["PS S=W pipelined (bound)"] = ps_clock(rates, net, params, w, w, compute, optimizer,
                                                               pipelined=True)
                entries["PS S=W pipelined (bound)"]["servers"] = w
                entries["PS colocated"] = ps_clock(rates, net, params, w, 0, compute, optimizer)
                entries["PS colocated"]["servers"] = 0
                entries["ring allreduce"] = ring_allreduce_clock(rates, net, params, w, compute, optimizer)
                for label, e in entries.items():
                    e["samples_per_second"] = w * b / e["total"]
                    e["scaled_speedup"] = w * compute / e["total"]  # against one worker that only computes
                    e["efficiency"] = compute / e["total"]
                    series.setdefault(label, []).append(dict(e, workers=w))
            wd = {str(w): work_depth(rates, net, params, w, sorted(set(server_counts(w).values())))
                  for w in workers_list}
            bytes_per_link = {str(w): {"ring_allreduce_each_direction": 2 * (w - 1) / w * FLOAT * params,
                                       "ps_worker_each_direction": FLOAT * params,
                                       "ps_server_in_S1": w * FLOAT * params,
                                       "ps_colocated_each_direction": 2 * (w - 1) / w * FLOAT * params}
                              for w in workers_list}
            out.append({"scenario": scenario["name"], "assumption": scenario["assumption"],
                        "alpha_seconds": scenario["alpha"], "beta_bytes_per_second": scenario["beta"],
                        "model": "-".join(map(str, sizes)), "parameters": params, "worker_batch": b,
                        "compute_seconds": compute, "compute_detail": detail, "series": series,
                        "work_depth": wd, "bytes_per_link": bytes_per_link})
    return out


def print_extrapolation(ext, workers_list):
    for e in ext:
        print(f"\nExtrapolation, {e['scenario']} (alpha {e['alpha_seconds'] * 1e6:.2f} us, beta "
              f"{e['beta_bytes_per_second'] / 1e9:.2f} GB/s), {e['model']} (P = {e['parameters']:,}), "
              f"weak scaling b = {e['worker_batch']}/worker, compute {e['compute_seconds'] * 1e3:.2f} ms: "
              f"ms per clock")
        labels = list(e["series"])
        print(f"{'W':>5} " + " ".join(f"{l:>14}" for l in labels))
        for i, w in enumerate(workers_list):
            print(f"{w:>5} " + " ".join(f"{e['series'][l][i]['total'] * 1e3:>14.3f}" for l in labels))


def print_work_depth(ext, workers_list):
    e = ext[0]
    print(f"\nWork / depth of summing W gradients of P = {e['parameters']:,} floats ({e['model']}); "
          f"work in additions, depth in sequential additions per element")
    print(f"{'W':>5} {'work (all)':>14} {'flat depth':>10} {'tree depth':>10} {'sharded S=W/8: work/server':>27}")
    for w in workers_list:
        wd = e["work_depth"][str(w)]
        s8 = str(max(1, w // 8))
        print(f"{w:>5} {wd['flat']['work']:>14.3g} {wd['flat']['depth']:>10} {wd['tree']['depth']:>10} "
              f"{wd['sharded'][s8]['work_per_server']:>27.3g}")


# ---------------------------------------------------------------------------------------------
# Heterogeneous workers: the static and the balanced split of a global batch


def static_split(batch, workers):
    """The static split (data::shard_range): B/W each, the first B mod W workers one more."""
    return [batch // workers + (1 if w < batch % workers else 0) for w in range(workers)]


def proportional_split(total, weights, low=1):
    """ps::proportional_split without a cap: each part `low` samples (when total >= parts x low),
    the rest in proportion to `weights`, whole samples by largest remainders, ties to the lower
    index."""
    parts = len(weights)
    if total < parts * low:
        low = 0
    left = total - parts * low
    weight = sum(max(w, 0.0) for w in weights)
    share = [left * max(w, 0.0) / weight if weight > 0 else left / parts for w in weights]
    extra = [int(s) for s in share]
    given = sum(extra)
    for p in sorted(range(parts), key=lambda p: (-(share[p] - extra[p]), p)):
        if given >= left:
            break
        extra[p] += 1
        given += 1
    return [low + e for e in extra]


def equal_time_split(total, part_seconds, workers, low=1):
    """The whole-sample split whose slowest part is shortest: every worker `low` samples, then one
    sample at a time to the worker whose part, with it, would still end first (greedy; optimal for
    part times that grow with the samples). This is where ps::SpeedBalancer settles: it moves
    samples until the measured part times are equal, fixed costs included."""
    split = [low] * workers
    for _ in range(total - low * workers):
        w = min(range(workers), key=lambda w: (part_seconds(w, split[w] + 1), w))
        split[w] += 1
    return split


def balancer_rule_split(total, part_seconds, start, hysteresis=0.1, low=1):
    """Where ps::SpeedBalancer's rule stops when every part takes exactly part_seconds(w, b): from
    the split `start`, speeds v_w = b_w / part_seconds(w, b_w), a candidate split in proportion to
    them (whole samples, each >= low), adopted only when its predicted clock max_w b'_w / v_w is
    more than `hysteresis` below the current max_w b_w / v_w; repeated until it is not. No noise
    and no window (the balancer's speeds are medians over its last 20 clocks: with steady part
    times, this is where they converge). With fixed costs the rule stops short of equal times: a speed in samples per second
    overstates what fewer samples save."""
    split = list(start)
    for _ in range(4 * total):
        times = [part_seconds(w, b) for w, b in enumerate(split)]
        speeds = [b / t if t > 0 else 0.0 for b, t in zip(split, times)]
        candidate = proportional_split(total, speeds, low)
        predicted = lambda sp: max(b / v for b, v in zip(sp, speeds) if b > 0)
        if candidate == split or not predicted(candidate) < (1.0 - hysteresis) * predicted(split):
            break
        split = candidate
    return split


def heterogeneous_clock(rates, net, scheduler, sizes, split, slowdowns, servers, optimizer, cores,
                        shared_memory=True, factor=None):
    """Seconds of one synchronous clock in which worker w computes split[w] samples slowdowns[w]
    times slower than the measured gradient t_c(b) (Rates.gradient_seconds_small). The examples'
    --slowdown s sleeps (s - 1) x the measured gradient seconds after each gradient, so a slowed
    part takes s x t_c(b), fixed costs included:

        T = max( max_w s_w t_c(b_w),  f x (1/W) sum_w t_c(b_w) ) + T_comm

    The first term is the slowest part. The second is the workers' CPU work over the cores it
    gets: f is the measured oversubscription slowdown of a superstep (bench/scheduler_rates) at
    c = the mean work, 1 when the ranks fit the cores (then the term never binds). Only the
    computing counts: a sleeping worker holds no core. T_comm (push, server, pull: ps_clock with
    that f) does not depend on the split: a server sums W slices of its shard whatever samples
    they came from. `factor` replaces the measured f."""
    workers = len(split)
    layout = "colocated" if servers == 0 else "dedicated"
    ranks = workers + servers
    params = parameter_count(sizes)
    work = [rates.gradient_seconds_small(sizes, b) for b in split]
    parts = [s * t for s, t in zip(slowdowns, work)]
    mean_work = sum(work) / workers
    rule = "given" if factor is not None else "measured"
    if factor is None and scheduler is not None:
        factor = scheduler.factor(layout, ranks, mean_work)
    if factor is None:
        factor, rule = share(ranks, cores, whole=True), "busiest"
    clock = ps_clock(rates, net, params, workers, servers, mean_work, optimizer, 1, "measured",
                     shared_memory=shared_memory, measured_factor=factor)
    comm = clock["total"] - clock["compute"]
    slowest, cores_bound = max(parts), factor * mean_work
    compute = max(slowest, cores_bound)
    return {"split": list(split), "parts": parts, "work": work, "slowest_part": slowest,
            "cores_bound": cores_bound, "bound": "slowest part" if slowest >= cores_bound else "cores",
            "oversubscription_factor": factor, "oversubscription_rule": rule, "compute": compute,
            "push": clock["push"], "server": clock["server"], "pull": clock["pull"], "comm": comm,
            "total": compute + comm}


def measured_split_prediction(predict, run, clocks):
    """The model at the splits a balanced run actually used (its split history, each split
    weighted by the clocks it lasted): the mean predicted clock."""
    history = sorted(run.get("splits") or [], key=lambda s: s["clock"])
    if not history:
        return None
    total = 0.0
    for here, after in zip(history, history[1:] + [{"clock": clocks}]):
        total += max(0, min(after["clock"], clocks) - here["clock"]) * predict(here["split"])["total"]
    return total / clocks


def heterogeneous(rates, scheduler, balance, optimizer, cores, sizes, global_batch, train_samples,
                  comm="table"):
    """Predicted against measured seconds per clock of bench/balance_study.py's BSP runs (static
    and balanced split, one worker slowed or none). Measured: each run's training seconds over its
    clocks (the run's `clocks`, else epochs x ceil(train_samples / global_batch), the example's
    ps::clocks_per_epoch)."""
    if balance.get("slow_period"):
        return None  # a straggler that comes and goes: not modelled (one speed per worker)
    net = Network("this machine", rates.message_table if comm == "table" else rates.message_fit, cores)
    slowdown = float(balance.get("slowdown", 1.0))
    default_clocks = balance["epochs"] * math.ceil(train_samples / global_batch)
    t_c = lambda b: rates.gradient_seconds_small(sizes, b)
    rows = []
    for r in balance["results"]:
        if r["strategy"] not in ("bsp static", "bsp balanced"):
            continue  # SSP and async have no clock that waits for every worker; backups wait for W - b
        servers = r["servers"]
        workers = r["ranks"] - servers
        slowdowns = [1.0] * workers
        if r["slowed"]:
            slowdowns[-1] = slowdown  # balance_study slows the last worker
        predict = lambda split: heterogeneous_clock(rates, net, scheduler, sizes, split, slowdowns, servers,
                                                    optimizer, cores)
        static = static_split(global_batch, workers)
        per_clock = [run["train_seconds"] / (run.get("clocks") or default_clocks) for run in r["runs"]]
        row = {"layout": r["layout"], "ranks": r["ranks"], "workers": workers, "servers": servers,
               "strategy": r["strategy"], "slowdowns": slowdowns, "global_batch": global_batch,
               "clocks": r["runs"][0].get("clocks") or default_clocks,
               "measured": statistics.median(per_clock), "measured_range": [min(per_clock), max(per_clock)],
               "static": predict(static)}
        if r["strategy"] == "bsp balanced":
            # Speeds as the balancer first sees them: samples per second of each part of the static split.
            speeds = [b / (s * t_c(b)) for b, s in zip(static, slowdowns)]
            part = lambda w, b: slowdowns[w] * t_c(b)
            settled = predict(equal_time_split(global_batch, part, workers))
            proportional = predict(proportional_split(global_batch, speeds))
            rule = predict(balancer_rule_split(global_batch, part, static))
            runs = [measured_split_prediction(predict, run, run.get("clocks") or default_clocks) for run in r["runs"]]
            runs = [x for x in runs if x is not None]
            row.update({
                "predicted": settled,
                "speeds_samples_per_second": speeds,
                "ideal": global_batch / sum(speeds) + settled["comm"],
                "proportional": proportional,
                "balancer_rule": rule,
                "at_measured_splits": statistics.median(runs) if runs else None,
                "at_measured_splits_runs": runs,
                "final_splits": [run["splits"][-1]["split"] for run in r["runs"] if run.get("splits")],
            })
        else:
            row["predicted"] = row["static"]
        row["relative_error"] = (row["predicted"]["total"] - row["measured"]) / row["measured"]
        if "balancer_rule" in row:
            row["balancer_rule_error"] = (row["balancer_rule"]["total"] - row["measured"]) / row["measured"]
        if row.get("at_measured_splits"):
            row["at_measured_splits_error"] = (row["at_measured_splits"] - row["measured"]) / row["measured"]
        rows.append(row)
    # Oversubscribed layouts: the factor f that this study's own equal-speed static clock implies
    # (measured / the prediction with f = 1), and every row of the layout again with it: the
    # oversubscription input measured in the same campaign, where scheduler_rates.json is of another.
    for row in rows:
        if row["ranks"] <= cores:
            continue
        base = next((x for x in rows if x["layout"] == row["layout"] and x["strategy"] == "bsp static"
                     and max(x["slowdowns"]) == 1), None)
        if base is None:
            continue
        unslowed = heterogeneous_clock(rates, net, scheduler, sizes, base["predicted"]["split"], base["slowdowns"],
                                       base["servers"], optimizer, cores, factor=1.0)
        implied = base["measured"] / unslowed["total"]
        again = heterogeneous_clock(rates, net, scheduler, sizes, row["predicted"]["split"], row["slowdowns"],
                                    row["servers"], optimizer, cores, factor=implied)
        row["implied_factor"] = implied
        row["predicted_implied_factor"] = again["total"]
        row["implied_factor_error"] = (again["total"] - row["measured"]) / row["measured"]
    speedups = []
    for layout in dict.fromkeys(x["layout"] for x in rows):
        for slowed in (True, False):
            pick = {x["strategy"]: x for x in rows if x["layout"] == layout and (max(x["slowdowns"]) > 1) == slowed}
            if "bsp static" not in pick or "bsp balanced" not in pick:
                continue
            st, ba = pick["bsp static"]["predicted"], pick["bsp balanced"]["predicted"]
            phi = st["comm"] / st["total"]  # the share of the static clock that balancing cannot touch
            speedups.append({
                "layout": layout, "slowed": slowed, "predicted": st["total"] / ba["total"],
                "measured": pick["bsp static"]["measured"] / pick["bsp balanced"]["measured"],
                "ideal_compute_only": st["slowest_part"] / (global_batch / sum(pick["bsp balanced"]["speeds_samples_per_second"])),
                "compute_speedup": st["compute"] / ba["compute"], "comm_share_static": phi,
            })
    return {"rows": rows, "speedups": speedups, "slowdown": slowdown, "global_batch": global_batch,
            "model": "-".join(map(str, sizes)), "train_samples": train_samples, "comm": comm,
            "equations": {
                "part": "worker w's part of b_w samples takes s_w t_c(b_w): t_c the measured gradient "
                        "(interpolated; below the smallest measured batch the line through the two smallest), "
                        "s_w its slowdown (the examples sleep (s_w - 1) t_c(b_w) after each gradient)",
                "clock": "T = max( max_w s_w t_c(b_w), f (1/W) sum_w t_c(b_w) ) + T_comm; f = measured "
                         "oversubscription slowdown (1 when ranks <= cores); T_comm as in the homogeneous "
                         "model, independent of the split",
                "static": "b_w = B/W: T = s_max t_c(B/W) + T_comm (with f: max(s_max, f) t_c(B/W) + T_comm)",
                "balanced_constant_speeds": "v_w = b/(s_w t_c(b)) at b = B/W; b_w proportional to v_w (whole "
                                            "samples, at least 1); ideal T = B / sum_w v_w + T_comm",
                "balanced_settled": "the whole-sample split (each >= 1) minimising max_w s_w t_c(b_w): "
                                    "equal part times, fixed costs included (where the balancer settles)",
                "speedup": "S = T_static / T_balanced = 1 / ((1 - phi) / S_K + phi) with phi = T_comm / T_static "
                           "and S_K the ratio of the compute terms (T_comm the same in both): the communication "
                           "is not balanced away (Amdahl)",
            }}


def print_heterogeneous(het):
    ms = lambda x: f"{x * 1e3:.3f}"
    pct = lambda x: f"{x * 100:+.1f}%"
    split = lambda c: "/".join(map(str, c["split"]))
    print(f"\nHeterogeneous workers ({het['model']}, global batch {het['global_batch']}, the last worker "
          f"slowed {het['slowdown']:g}x or none): ms per clock, predicted vs measured (median of the runs)")
    print(f"{'layout':>9} {'W':>2} {'S':>2} {'s_w':>5} {'strategy':>12}  {'measured (min-max)':>22} {'predicted':>9} "
          f"{'error':>7}  {'split':>6} {'bound':>12} {'parts':>12} {'comm':>6} {'f':>5}")
    for r in het["rows"]:
        p = r["predicted"]
        meas = f"{ms(r['measured'])} ({ms(r['measured_range'][0])}-{ms(r['measured_range'][1])})"
        print(f"{r['layout']:>9} {r['workers']:>2} {r['servers']:>2} {'/'.join(f'{x:g}' for x in r['slowdowns']):>5} "
              f"{r['strategy']:>12}  {meas:>22} {ms(p['total']):>9} {pct(r['relative_error']):>7}  {split(p):>6} "
              f"{p['bound']:>12} {'/'.join(ms(x) for x in p['parts']):>12} {ms(p['comm']):>6} "
              f"{p['oversubscription_factor']:>5.2f}")
    print("\nBalanced rows, the split by rule: constant speeds (B / sum v + T_comm, and b proportional to v in whole "
          "samples), the balancer's rule on the model's part times (10% hysteresis, no noise), equal part times "
          "(the prediction above), the runs' own splits")
    print(f"{'layout':>9} {'s_w':>5}  {'ideal':>6}  {'constant speeds':>16}  {'balancer rule':>22}  "
          f"{'equal times':>13}  {'at measured splits':>19}  {'measured':>8}")
    for r in het["rows"]:
        if "ideal" not in r:
            continue
        q, u, p = r["proportional"], r["balancer_rule"], r["predicted"]
        at = r.get("at_measured_splits")
        at_text = f"{ms(at)} {pct(r['at_measured_splits_error'])}" if at else "-"
        print(f"{r['layout']:>9} {'/'.join(f'{x:g}' for x in r['slowdowns']):>5}  {ms(r['ideal']):>6}  "
              f"{split(q) + ': ' + ms(q['total']):>16}  {split(u) + ': ' + ms(u['total']) + ' ' + pct(r['balancer_rule_error']):>22}  "
              f"{split(p) + ': ' + ms(p['total']):>13}  {at_text:>19}  {ms(r['measured']):>8}")
    implied = [r for r in het["rows"] if "implied_factor" in r]
    if implied:
        print("\nOversubscribed rows again with the f that the study's own equal-speed static clock implies")
        for r in implied:
            print(f"{r['layout']:>9} {'/'.join(f'{x:g}' for x in r['slowdowns']):>5} {r['strategy']:>12}: f "
                  f"{r['implied_factor']:.2f} (measured input {r['predicted']['oversubscription_factor']:.2f}), "
                  f"predicted {ms(r['predicted_implied_factor'])} ms, {pct(r['implied_factor_error'])}")
    print()
    for s in het["speedups"]:
        print(f"balanced/static, {s['layout']}, {'slowed' if s['slowed'] else 'equal speeds'}: predicted "
              f"{s['predicted']:.2f}x, measured {s['measured']:.2f}x (constant speeds, no communication: "
              f"{s['ideal_compute_only']:.2f}x; the compute terms alone {s['compute_speedup']:.2f}x; communication "
              f"{s['comm_share_static'] * 100:.1f}% of the static clock)")


# ---------------------------------------------------------------------------------------------
# Plots


def plot_validation(rows, primary, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not available: no validation plot", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(6.5, 6))
    markers = {"dedicated": "o", "colocated": "s"}
    models = sorted({r["model"] for r in rows})
    colors = dict(zip(models, ["tab:blue", "tab:orange", "tab:green", "tab:red"]))
    for r in rows:
        v = r["variants"][primary]
        ax.scatter(r["measured"] * 1e3, v["predicted"] * 1e3, marker=markers.get(r["layout"], "x"),
                   color=colors[r["model"]], edgecolor="k" if r["oversubscribed"] else "none", s=40)
        ax.annotate(f"{r['workers']}" + (f"+{r['servers']}" if r["servers"] else "c"),
                    (r["measured"] * 1e3, v["predicted"] * 1e3), fontsize=6, xytext=(3, 3),
                    textcoords="offset points")
    values = [r["measured"] * 1e3 for r in rows] + [r["variants"][primary]["predicted"] * 1e3 for r in rows]
    lo, hi = min(values) / 1.5, max(values) * 1.5
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.8, label="predicted = measured")
    ax.plot([lo, hi], [lo * 1.2, hi * 1.2], "k:", lw=0.8, label="+-20%")
    ax.plot([lo, hi], [lo * 0.8, hi * 0.8], "k:", lw=0.8)
    for model, c in colors.items():
        ax.scatter([], [], color=c, label=model)
    for layout, mk in markers.items():
        ax.scatter([], [], marker=mk, color="gray", label=layout)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured ms per clock (median)")
    ax.set_ylabel("predicted ms per clock")
    ax.set_title(f"Model vs scaling study ({primary});\nlabels W+S (c: colocated), black edge: oversubscribed",
                 fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def plot_extrapolation(ext, workers_list, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not available: no extrapolation plot", file=sys.stderr)
        return
    scenarios = list(dict.fromkeys(e["scenario"] for e in ext))
    models = list(dict.fromkeys(e["model"] for e in ext))
    fig, axes = plt.subplots(len(models), len(scenarios), figsize=(6 * len(scenarios), 4.5 * len(models)),
                             squeeze=False)
    styles = {"PS S=1": ("tab:red", "-"), "PS S=W/8": ("tab:orange", "-"), "PS S=W/4": ("tab:olive", "-"),
              "PS S=W": ("tab:green", "-"), "PS S=W pipelined (bound)": ("tab:green", ":"),
              "PS colocated": ("tab:purple", "--"), "ring allreduce": ("k", "-")}
    for e in ext:
        ax = axes[models.index(e["model"])][scenarios.index(e["scenario"])]
        for label, points in e["series"].items():
            color, ls = styles.get(label, (None, "-"))
            ax.plot(workers_list, [p["total"] * 1e3 for p in points], ls, color=color, marker=".", label=label)
        ax.axhline(e["compute_seconds"] * 1e3, color="gray", lw=0.6, ls="--", label="compute only")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("workers W (one per node), weak scaling")
        ax.set_ylabel("ms per clock")
        ax.set_title(f"{e['model']}, b = {e['worker_batch']}/worker\n{e['scenario']}: alpha "
                     f"{e['alpha_seconds'] * 1e6:.1f} us, beta {e['beta_bytes_per_second'] / 1e9:.1f} GB/s", fontsize=9)
        ax.grid(True, which="both", lw=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def link_only(args, rates):
    import model_link
    with open(args.link_rates) as f:
        link_data = json.load(f)
    # The runs' message times, compute and server kernels from one machine_rates run across the
    # link: the VM's host, and so its rates, change from day to day.
    link_rates = Rates(link_data)
    message = link_rates.message_table
    exchange, exchange_table = model_link.link_message(link_data)
    table = {"one_way": {"bytes": link_rates.pp_bytes, "seconds": link_rates.pp_seconds,
                         "beta_bytes_per_second": link_rates.beta}, "exchange": exchange_table}
    with open(args.top_k_rates) as f:
        top_k_rates = json.load(f)
    studies = []
    for path in args.link_studies.split(","):
        if os.path.exists(path):
            with open(path) as f:
                studies.append((path, json.load(f)))
        else:
            print(f"{path} not found: skipped", file=sys.stderr)
    sizes = layer_sizes(args.small_hidden)
    cnn_steps = None
    if args.cnn_step:
        with open(args.cnn_step) as f:
            cnn_steps = json.load(f)
    schedulers = {}
    for path in filter(None, args.link_scheduler.split(",")):
        with open(path) as f:
            data = json.load(f)
        schedulers[data.get("wait_mode", "adaptive")] = SchedulerRates(data)
    rows = model_link.validate_link(link_rates, message, exchange, top_k_rates, studies, sizes, parameter_count(sizes),
                                    args.optimizer, cnn_steps, schedulers)
    model_link.print_link_validation(rows)
    errors = [abs(r["samples_per_second_error"]) for r in rows]
    within = sum(e <= 0.15 for e in errors)
    print(f"  within 15%: {within}/{len(rows)}; median |error| {statistics.median(errors) * 100:.0f}%, "
          f"max {max(errors) * 100:.0f}%")
    models = [{"sizes": layer_sizes(args.small_hidden), "worker_batch": args.small_worker_batch},
              {"sizes": layer_sizes(args.big_hidden), "worker_batch": args.big_worker_batch}]
    if cnn_steps is not None:
        params, compute = model_link.cnn_step_seconds(cnn_steps, args.small_worker_batch)
        models.insert(1, {"name": "cnn", "parameters": params, "compute": compute,
                          "worker_batch": args.small_worker_batch})
    ext = model_link.extrapolate_link(rates, top_k_rates, models, [int(w) for w in args.link_workers.split(",")],
                                      [float(g) for g in args.link_gbits.split(",")], args.link_alpha, args.optimizer)
    model_link.print_link_extrapolation(ext, args.link_alpha)
    plot = os.path.splitext(args.out)[0] + ".png"
    model_link.plot_link(rows, ext, plot)
    out = {"benchmark": "model_link", "rates_file": args.rates, "link_rates_file": args.link_rates,
           "top_k_rates_file": args.top_k_rates, "cnn_step_file": args.cnn_step,
           "link_scheduler_files": [p for p in args.link_scheduler.split(",") if p],
           "studies": [p for p, _ in studies], "optimizer": args.optimizer,
           "link_table": table, "equations": model_link.__doc__, "validation": rows,
           "validation_within_15_percent": f"{within}/{len(rows)}",
           "extrapolation_assumed_alpha_seconds": args.link_alpha, "extrapolation": ext, "plot": plot}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {args.out}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rates", default="bench/results/machine_rates.json", help="bench/machine_rates output")
    p.add_argument("--scaling", default="bench/results/scaling.json", help="bench/scaling_study.py output")
    p.add_argument("--optimizer", default="momentum", choices=sorted(UPDATE_ARRAYS),
                   help="server update rule of the runs (fashion_mnist_mlp's default: momentum)")
    p.add_argument("--cores", type=int, default=0, help="cores of this machine (0: from machine_rates.json)")
    p.add_argument("--comm", default="table", choices=["table", "fit"],
                   help="validation: message time from the measured ping-pong curve or from alpha + m/beta")
    p.add_argument("--scheduler", default="bench/results/scheduler_rates.json",
                   help="bench/scheduler_rates.py output: the measured oversubscription slowdown")
    p.add_argument("--oversubscription", default="measured", choices=["measured", "busy", "ranks", "all", "busiest"],
                   help="validation, ranks > cores: slow every phase by the slowdown --scheduler measured for a "
                        "superstep of the same compute on as many ranks (measured; busiest where not measured), "
                        "by the busiest core's ranks, ceil(ranks / cores) (busiest), by ranks / cores (all), the "
                        "compute only by ranks / cores (ranks), or each phase by its busy ranks / cores (busy)")
    p.add_argument("--workers", default="8,16,32,64,128,256,512,1024", help="extrapolated worker counts")
    p.add_argument("--small-hidden", default="256,128")
    p.add_argument("--small-worker-batch", type=int, default=64, help="extrapolation: per-worker batch (weak scaling)")
    p.add_argument("--big-hidden", default="4096,4096")
    p.add_argument("--big-worker-batch", type=int, default=128)
    p.add_argument("--cluster-alpha", type=float, default=2e-6, help="assumed cluster latency, seconds")
    p.add_argument("--cluster-gbits", type=float, default=100.0, help="assumed cluster link, Gbit/s per direction")
    p.add_argument("--balance", default="bench/results/balance.json",
                   help="bench/balance_study.py output: measured clocks with a slowed worker, static and balanced split")
    p.add_argument("--balance-batch", type=int, default=64, help="the balance study's global batch (the example's default)")
    p.add_argument("--balance-train-samples", type=int, default=60000,
                   help="training samples per epoch of the balance study (Fashion-MNIST), for its clock count")
    p.add_argument("--balance-hidden", default="256,128", help="the balance study's hidden layers")
    p.add_argument("--heterogeneous-only", action="store_true",
                   help="only the heterogeneous-workers prediction against --balance: no validation, no "
                        "extrapolation, no plots; JSON to --out (default bench/results/model_heterogeneous.json)")
    p.add_argument("--link-only", action="store_true",
                   help="only the model on a throttled link (bench/model_link.py): --link-rates, --link-studies; "
                        "JSON to --out (default bench/results/model_link.json)")
    p.add_argument("--link-rates", default="bench/results/link_rates.json",
                   help="bench/machine_rates run across 2 pretend nodes (its ping-pong and exchange tables)")
    p.add_argument("--link-studies", default="bench/results/link_study_mlp_packed.json,"
                   "bench/results/link_study_mlp_packed_sign.json",
                   help="bench/link_study.py results to predict (comma-separated; missing ones are skipped), "
                        "measured the day of --link-rates")
    p.add_argument("--top-k-rates", default="bench/results/top_k_rates_link.json",
                   help="bench/top_k_rates output, measured the day of --link-rates")
    p.add_argument("--cnn-step", default=None,
                   help="bench/cnn_step output at the CNN runs' worker batch, one thread, measured the day of "
                        "--link-rates: the compute of the CNN link studies (bench/link_study.py --model cnn)")
    p.add_argument("--link-scheduler", default="",
                   help="--link-only: comma-separated bench/scheduler_rates.py outputs measured on the machine of "
                        "--link-rates, one per HPCPS_WAIT of the runs: where the pretend nodes' processes outnumber "
                        "its cores, the workers' compute and encoding are slowed by the measured factor")
    p.add_argument("--link-alpha", type=float, default=25e-6, help="extrapolation: ASSUMED one-way latency, seconds")
    p.add_argument("--link-gbits", default="1,10,25,100", help="extrapolation: link bandwidths, Gbit/s")
    p.add_argument("--link-workers", default="64,256,1024", help="extrapolation: worker counts")
    p.add_argument("--out", default=None, help="default: bench/results/model.json "
                   "(bench/results/model_heterogeneous.json with --heterogeneous-only)")
    p.add_argument("--validation-plot", default=None, help="default: model_validation.png next to --out")
    p.add_argument("--extrapolation-plot", default=None, help="default: model_extrapolation.png next to --out")
    args = p.parse_args()
    if args.out is None:
        args.out = ("bench/results/model_heterogeneous.json" if args.heterogeneous_only else
                    "bench/results/model_link.json" if args.link_only else "bench/results/model.json")

    with open(args.rates) as f:
        rates = Rates(json.load(f))
    cores = args.cores or rates.cores
    out_dir = os.path.dirname(args.out) or "."
    validation_plot = args.validation_plot or os.path.join(out_dir, "model_validation.png")
    extrapolation_plot = args.extrapolation_plot or os.path.join(out_dir, "model_extrapolation.png")

    print(f"Inputs ({args.rates}): alpha {rates.alpha * 1e6:.2f} us, beta {rates.beta / 1e9:.2f} GB/s (ping-pong fit); "
          f"memory add {rates.bandwidth('add') / 1e9:.1f} GB/s, triad {rates.bandwidth('triad') / 1e9:.1f} GB/s "
          f"(largest arrays, 1 thread); {cores} cores")
    for (layers, threads), rows in sorted(rates.compute.items()):
        print(f"  {'-'.join(map(str, layers))}, {threads} thread(s): " + ", ".join(
            f"b={r['batch']}: {r['gemm_gflops_median']:.0f} GFLOP/s, {r['gradient_seconds']['median'] * 1e3:.2f} ms"
            for r in rows))

    if args.link_only:
        link_only(args, rates)
        return

    scheduler = None
    if os.path.exists(args.scheduler):
        with open(args.scheduler) as f:
            scheduler = SchedulerRates(json.load(f))
        if scheduler.cores != cores:
            print(f"warning: {args.scheduler} was measured on {scheduler.cores} cores, the rates on {cores}",
                  file=sys.stderr)
    elif args.oversubscription == "measured":
        print(f"{args.scheduler} not found (run bench/scheduler_rates.py): oversubscribed rows use 'busiest'",
              file=sys.stderr)
    rules = ("measured", "all", "busiest", "ranks", "busy") if scheduler else ("all", "busiest", "ranks", "busy")
    variants = {f"{c}+{o}": (c, o) for c in ("table", "fit") for o in rules}
    primary = f"{args.comm}+{args.oversubscription}"
    if primary not in variants:
        primary = f"{args.comm}+busiest"
    result = {"benchmark": "model", "rates_file": args.rates, "optimizer": args.optimizer, "cores": cores,
              "scheduler_file": args.scheduler if scheduler else None,
              "inputs": {"alpha_seconds": rates.alpha, "beta_bytes_per_second": rates.beta,
                         "memory_add_bytes_per_second": rates.bandwidth("add"),
                         "memory_triad_bytes_per_second": rates.bandwidth("triad")},
              "equations": {
                  "clock": "T = T_compute + (T_push + T_server + T_pull) / K + (K - 1) max(T_push, T_server, T_pull) / K "
                           "with K = ceil(shard / 2^20) pieces (synchronous; K = 1: no overlap)",
                  "compute": "T_compute = GEMM_FLOPs(b) / GEMM_rate(b) + elementwise(b)",
                  "oversubscription": "on this machine with ranks > cores, each phase x step_R(c) / step_cores(c), "
                                      "the measured slowdown of a superstep of c = T_compute seconds of GEMM per rank on R "
                                      "ranks (bench/scheduler_rates; variant 'measured'); the rules it replaces: x ceil(ranks / "
                                      "cores) ('busiest'), x max(1, ranks / cores) ('all'), compute only ('ranks'), the ranks "
                                      "working in the phase ('busy')",
                  "message": "t(m) = alpha + m / beta",
                  "push_dedicated": "T_push = max(link: max(W, S) x t(4P/S), node: W S t(4P/S) / cores); "
                                    "cores = infinity for one rank per node",
                  "push_colocated": "T_push = max((W-1) t(4P/W), W (W-1) t(4P/W) / cores) + copy(P/W)",
                  "server": "T_server = (W + 4) 4 (P/S) / BW_momentum x max(1, S / cores) (fused, cache-blocked sum + update)",
                  "pull": "T_pull = T_push (point-to-point)",
                  "shared_memory_dedicated": "one node, Options::shared_memory: T_push = max(W, S) t(4), T_server as above, "
                                             "T_pull = copy(P) x max(1, W / cores), pipelined over the K pieces",
                  "shared_memory_colocated": "T_comm = (W-1) t(4) + T_server x max(1, W / cores) + "
                                             "copy(P (W-1) / W) x max(1, W / cores), one after the other",
                  "ring_allreduce": "T = T_compute + 2(n-1) t(4P/n) + (n-1) 12 (P/n) / BW_add + 20 P / BW_momentum",
                  "pipelined_bound": "T = T_compute + max(T_push, T_server, T_pull) (pieces of size -> 0)",
              },
              "primary_variant": primary}

    het = None
    if os.path.exists(args.balance):
        with open(args.balance) as f:
            het = heterogeneous(rates, scheduler, json.load(f), args.optimizer, cores, layer_sizes(args.balance_hidden),
                                args.balance_batch, args.balance_train_samples, args.comm)
        if het is None:
            print(f"\n{args.balance}: a straggler that comes and goes (slow_period) is not modelled", file=sys.stderr)
    else:
        print(f"\n{args.balance} not found: no heterogeneous prediction (run bench/balance_study.py)", file=sys.stderr)
    if het is not None:
        het["balance_file"] = args.balance
        print_heterogeneous(het)
        result["heterogeneous"] = het
    if args.heterogeneous_only:
        if het is None:
            raise SystemExit("--heterogeneous-only: nothing to predict")
        out = {"benchmark": "model_heterogeneous", "rates_file": args.rates, "scheduler_file": result["scheduler_file"],
               "optimizer": args.optimizer, "cores": cores, **het}
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
        print(f"\nwrote {args.out}")
        return

    records = None
    if os.path.exists(args.scaling):
        with open(args.scaling) as f:
            scaling = json.load(f)
        records = scaling["records"] if isinstance(scaling, dict) else scaling
    else:
        print(f"\n{args.scaling} not found: no validation (run bench/scaling_study.py first)", file=sys.stderr)
    if records:
        rows = validate(rates, records, args.optimizer, cores, variants, scheduler)
        print_validation(rows, primary)
        summary = summarize_variants(rows, variants)
        print("\nVariants (message time + oversubscription rule): rows within 20%, median and max |error|")
        for name, s in summary.items():
            print(f"  {name:>12}{' (primary)' if name == primary else '          '}: {s['within_20_percent']}/{s['rows']}"
                  f", median {s['median_abs_error'] * 100:.1f}%, max {s['max_abs_error'] * 100:.1f}%")
        # The same summary for the primary variant over rows that fit the cores, and by model.
        subsets = {"ranks <= cores": [r for r in rows if not r["oversubscribed"]],
                   "ranks > cores": [r for r in rows if r["oversubscribed"]]}
        for model_name in sorted({r["model"] for r in rows}):
            subsets[model_name] = [r for r in rows if r["model"] == model_name]
        subset_summary = {k: summarize_variants(v, [primary]).get(primary) for k, v in subsets.items() if v}
        for name, s in subset_summary.items():
            print(f"  primary, {name}: {s['within_20_percent']}/{s['rows']}, median {s['median_abs_error'] * 100:.1f}%, "
                  f"max {s['max_abs_error'] * 100:.1f}%")
        result["validation_summary_primary_subsets"] = subset_summary
        result["scaling_file"] = args.scaling
        result["validation"] = rows
        result["validation_summary"] = summary
        plot_validation(rows, primary, validation_plot)
        result["validation_plot"] = validation_plot

    workers_list = [int(x) for x in args.workers.split(",")]
    models = [{"sizes": layer_sizes(args.small_hidden), "worker_batch": args.small_worker_batch},
              {"sizes": layer_sizes(args.big_hidden), "worker_batch": args.big_worker_batch}]
    cluster_beta = args.cluster_gbits * 1e9 / 8
    scenarios = [
        {"name": "this machine's alpha/beta", "alpha": rates.alpha, "beta": rates.beta,
         "assumption": "one rank per node, every link with the ping-pong alpha and beta measured between two "
                       "ranks of this machine (shared memory), full-bisection network, full-duplex links",
         "network": Network("measured", rates.message_fit)},
        {"name": f"assumed cluster ({args.cluster_gbits:g} Gb/s)", "alpha": args.cluster_alpha, "beta": cluster_beta,
         "assumption": f"ASSUMED, not measured: alpha {args.cluster_alpha * 1e6:g} us, {args.cluster_gbits:g} Gbit/s "
                       "per direction per node, full-bisection network, one rank per node; compute and memory "
                       "rates of this machine's core",
         "network": Network("cluster", lambda m: args.cluster_alpha + m / cluster_beta)},
    ]
    ext = extrapolate(rates, scenarios, models, workers_list, args.optimizer)
    print_extrapolation(ext, workers_list)
    print_work_depth(ext, workers_list)
    result["extrapolation"] = ext
    result["work_depth_formulas"] = {
        "flat": "one server: work (W-1) P additions, depth W-1 (rank order; log2 W in a pairwise order), "
                "time (W-1) 12P / BW_add",
        "sharded": "S servers: work (W-1) P in all, (W-1) P/S per server, depth W-1, time (W-1) 12 (P/S) / BW_add",
        "tree": "binary tree over workers: work (W-1) P, depth ceil(log2 W) levels, time log2 W (t(4P) + 12P / BW_add)",
        "ring_reduce_scatter": "work (W-1) P, (W-1) P/W per rank, depth W-1 steps",
    }
    plot_extrapolation(ext, workers_list, extrapolation_plot)
    result["extrapolation_plot"] = extrapolation_plot

    os.makedirs(out_dir, exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"\nwrote {args.out}, {extrapolation_plot}" + (f", {validation_plot}" if records else ""))


if __name__ == "__main__":
    main()
