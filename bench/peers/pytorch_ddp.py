#!/usr/bin/python3
"""The data-parallel PyTorch peer: DistributedDataParallel with the gloo backend on N processes of
this machine (default 2), launched by this script, each with --threads intra-op threads (default 1).
Same models (784-256-128-10 ReLU, or --model cnn or resnet), data loading, optimizer and recipe options as
bench/peers/pytorch_mlp.py: global batch --batch split evenly across the processes (each takes its
DistributedSampler shard, reshuffled every epoch), SGD with momentum 0.9, by default a constant
learning rate (--nesterov, --weight-decay, --schedule cosine, --augment-shift, --augment-flip as the
ResNet example trains); DDP averages gradients, so one step equals a single-process step on the
global batch. Batch normalization normalizes each process's share of the batch by its own statistics,
and the running statistics are rank 0's (DDP broadcasts its buffers before each forward pass).

Rank 0 evaluates the test set --evaluations-per-epoch times per epoch, at the clocks
hpcps::ps::train uses (the other ranks wait for it at their next allreduce, as hpcps workers wait
for worker 0), and prints one JSON line per evaluation: fractional epoch, training seconds so far
excluding evaluation time, samples trained (all ranks), test accuracy and loss. A last line,
"type": "summary", gives the totals. --target-accuracy stops all ranks at the first evaluation
that reaches it. --fp16-hook sends the gradients in fp16 (DDP's fp16_compress_hook).
--launcher mpiexec makes each process one rank of an mpiexec launch instead, so the processes can
run on different (pretend) nodes: bench/link_study.py. Uses Debian's python3-torch:

    /usr/bin/python3 bench/peers/pytorch_ddp.py --processes 2 --epochs 15 --evaluations-per-epoch 4
"""
import argparse
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_mlp import (add_model_arguments, add_recipe_arguments, augment, build_model,  # noqa: E402  (same data,
                         evaluation_clocks, load, make_optimizer)  # models, update rules and evaluation clocks)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, args, port):
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"tcp://{args.master_addr}:{port}", rank=rank,
                            world_size=args.processes)
    try:
        train(rank, args)
    finally:
        dist.destroy_process_group()


def train(rank, args):
    n = args.processes
    torch.manual_seed(args.seed)
    x, y = load(args.data, "train")
    tx, ty = load(args.data, "t10k") if rank == 0 else (None, None)
    if args.batch % n:
        raise ValueError(f"global batch {args.batch} does not split evenly across {n} processes")
    batch = args.batch // n
    model = build_model(args)
    ddp = torch.nn.parallel.DistributedDataParallel(model)  # broadcasts rank 0's parameters
    if args.fp16_hook:
        # Gradients travel as fp16 and are averaged in it (PyTorch's own compression hook).
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    loss_fn = torch.nn.CrossEntropyLoss()
    sampler = torch.utils.data.distributed.DistributedSampler(range(x.shape[0]), num_replicas=n, rank=rank,
                                                              shuffle=True, seed=args.seed, drop_last=False)
    clocks = (len(sampler) + batch - 1) // batch  # the same on every rank: shards are padded to equal size
    opt, schedule = make_optimizer(args, ddp.parameters(), args.epochs * clocks)
    torch.manual_seed(args.seed * 1000 + rank)  # each rank its own augmentation draws
    at = evaluation_clocks(clocks, args.evaluations_per_epoch)
    stop = torch.zeros(1)
    train_seconds, samples = 0.0, 0
    dist.barrier()  # start the clock together
    start = time.perf_counter()
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        order = torch.tensor(list(iter(sampler)))
        for c, b in enumerate(range(0, order.shape[0], batch), start=1):
            idx = order[b:b + batch]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(ddp(augment(args, x[idx])), y[idx])
            loss.backward()
            opt.step()
            schedule.step()
            samples += idx.shape[0] * n  # every rank trains an equal share
            if c not in at:
                continue
            # Evaluation (and agreeing whether to stop) is not training time.
            train_seconds += time.perf_counter() - start
            if rank == 0:
                model.eval()  # dropout off, batch normalization by its running statistics
                with torch.no_grad():
                    out = model(tx)
                    accuracy = (out.argmax(1) == ty).float().mean().item()
                    test_loss = loss_fn(out, ty).item()
                model.train()
                print(json.dumps({"type": "evaluation", "epoch": epoch + c / clocks, "train_seconds": train_seconds,
                                  "samples": samples, "test_accuracy": accuracy, "test_loss": test_loss}), flush=True)
                stop[0] = 1.0 if args.target_accuracy is not None and accuracy >= args.target_accuracy else 0.0
            if args.target_accuracy is not None:
                dist.broadcast(stop, 0)
            start = time.perf_counter()
            if stop[0] > 0:
                break
        if stop[0] > 0:
            break
    if rank == 0:
        print(json.dumps({"type": "summary", "processes": n, "threads": args.threads, "batch": args.batch,
                          "lr": args.lr, "train_seconds": train_seconds, "samples": samples,
                          "samples_per_second": samples / train_seconds if train_seconds > 0 else 0.0,
                          "test_accuracy": accuracy, "torch_version": torch.__version__}), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--launcher", choices=["spawn", "mpiexec"], default="spawn",
                   help="spawn: this script starts --processes processes here; mpiexec: this process is one "
                        "rank of an mpiexec launch (PMI_RANK, PMI_SIZE), e.g. across scripts/pretend_nodes")
    p.add_argument("--master-addr", default="127.0.0.1", help="where rank 0 listens (the address of node 1)")
    p.add_argument("--master-port", type=int, default=29533, help="with --launcher mpiexec (spawn picks a free one)")
    p.add_argument("--fp16-hook", action="store_true", help="DDP's fp16_compress_hook: gradients travel as fp16")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per process")
    p.add_argument("--epochs", type=int, default=15, help="at most this many epochs")
    p.add_argument("--batch", type=int, default=128, help="global batch, split evenly across the processes")
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--evaluations-per-epoch", type=int, default=4)
    p.add_argument("--target-accuracy", type=float, default=None,
                   help="stop at the first evaluation with at least this test accuracy")
    add_model_arguments(p)
    add_recipe_arguments(p)
    args = p.parse_args()
    # The children are fresh interpreters (spawn): OpenBLAS and OpenMP read these when they load.
    # A caller's explicit setting wins; otherwise one thread pool of --threads per process.
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(args.threads))
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    if args.launcher == "mpiexec":
        if "PMI_RANK" not in os.environ or "PMI_SIZE" not in os.environ:
            sys.exit("pytorch_ddp.py: --launcher mpiexec needs PMI_RANK and PMI_SIZE (run it under mpiexec)")
        args.processes = int(os.environ["PMI_SIZE"])
        worker(int(os.environ["PMI_RANK"]), args, args.master_port)
        return
    mp.spawn(worker, args=(args, free_port()), nprocs=args.processes, join=True)


if __name__ == "__main__":
    main()
