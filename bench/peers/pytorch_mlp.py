#!/usr/bin/python3
"""The PyTorch peer: 784-256-128-10 (ReLU) on Fashion-MNIST, SGD with momentum, the same batch
and learning rate as bench/local_training, on a given number of threads. Prints one JSON line per
epoch: training seconds (data already in memory as tensors), samples, test accuracy. Uses Debian's
python3-torch: run with /usr/bin/python3."""
import argparse
import gzip
import json
import os
import time

import numpy as np
import torch


def read_idx(path):
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        data = f.read()
    ndims = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndims).reshape(dims)


def load(folder, prefix):
    images = read_idx(os.path.join(folder, f"{prefix}-images-idx3-ubyte.gz")).reshape(-1, 784)
    labels = read_idx(os.path.join(folder, f"{prefix}-labels-idx1-ubyte.gz"))
    return torch.from_numpy(images.astype(np.float32) / 255.0), torch.from_numpy(labels.astype(np.int64))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    x, y = load(args.data, "train")
    tx, ty = load(args.data, "t10k")
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        order = torch.randperm(x.shape[0])
        start = time.perf_counter()
        for b in range(0, x.shape[0], args.batch):
            idx = order[b:b + args.batch]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
        seconds = time.perf_counter() - start
        with torch.no_grad():
            accuracy = (model(tx).argmax(1) == ty).float().mean().item()
        print(json.dumps({"epoch": epoch + 1, "seconds": seconds, "samples": x.shape[0], "test_accuracy": accuracy}),
              flush=True)


if __name__ == "__main__":
    main()
