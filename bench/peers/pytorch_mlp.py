#!/usr/bin/python3
"""The PyTorch peer: 784-256-128-10 (ReLU) on Fashion-MNIST, or with --model cnn the CNN of
examples/fashion_mnist_cnn, or with --model resnet the ResNet of examples/fashion_mnist_resnet, SGD
with momentum (--nesterov, --weight-decay, --schedule cosine and --augment-shift/--augment-flip as the ResNet
example uses them), the same batch and learning rate as
bench/local_training, on a given number of threads. Prints one JSON line per
epoch: training seconds (data already in memory as tensors), samples, test accuracy. Uses Debian's
python3-torch: run with /usr/bin/python3.

With --evaluations-per-epoch E it also evaluates the test set at the clocks hpcps::ps::train uses
(every clocks // E batches, and at each epoch's end) and prints one line per evaluation, marked
"type": "evaluation", with the fractional epoch and the training seconds so far, evaluation time
excluded; --target-accuracy then stops at the first evaluation that reaches it (time-to-accuracy,
bench/time_to_accuracy.py). Without these options its output is as it always was."""
import argparse
import gzip
import json
import math
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


def add_model_arguments(p):
    """The network, as hpcps's examples build it: --model mlp is fashion_mnist_mlp's 784-256-128-10
    (ReLU); --model cnn is fashion_mnist_cnn's conv(width, 5x5, pad 2)-relu-maxpool 2-conv(2 width)-
    relu-maxpool 2-flatten-dense(dense)-relu-dropout-dense 10; --model resnet is
    fashion_mnist_resnet's stem and 3 stages of 2 residual blocks (width, 2 width, 4 width channels)."""
    p.add_argument("--model", choices=["mlp", "cnn", "resnet"], default="mlp")
    p.add_argument("--width", type=int, default=32, help="cnn, resnet: channels of the first convolution")
    p.add_argument("--dense", type=int, default=128, help="cnn: units of the hidden dense layer")
    p.add_argument("--dropout", type=float, default=0.25, help="cnn: dropout rate before the last layer")


class ResidualBlock(torch.nn.Module):
    """conv 3x3 - bn - relu - conv 3x3 - bn, + shortcut(x), relu: nn::Residual's block with the ReLU
    that follows it in the example; a 1x1 strided convolution + bn shortcut where it halves the size."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        nn = torch.nn
        self.body = nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1), nn.BatchNorm2d(cout), nn.ReLU(),
                                  nn.Conv2d(cout, cout, 3, 1, 1), nn.BatchNorm2d(cout))
        self.shortcut = nn.Identity() if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, 0), nn.BatchNorm2d(cout))

    def forward(self, x):
        return torch.relu(self.body(x) + self.shortcut(x))


def build_model(args):
    nn = torch.nn
    if args.model == "resnet":
        w = args.width
        return nn.Sequential(nn.Unflatten(1, (1, 28, 28)), nn.Conv2d(1, w, 3, 1, 1), nn.BatchNorm2d(w), nn.ReLU(),
                             ResidualBlock(w, w, 1), ResidualBlock(w, w, 1),
                             ResidualBlock(w, 2 * w, 2), ResidualBlock(2 * w, 2 * w, 1),
                             ResidualBlock(2 * w, 4 * w, 2), ResidualBlock(4 * w, 4 * w, 1),
                             nn.AvgPool2d(7), nn.Flatten(), nn.Linear(4 * w, 10))
    if args.model == "mlp":
        return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    w = args.width
    return nn.Sequential(nn.Unflatten(1, (1, 28, 28)),
                         nn.Conv2d(1, w, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(w, 2 * w, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(2 * w * 49, args.dense), nn.ReLU(), nn.Dropout(args.dropout),
                         nn.Linear(args.dense, 10))


def evaluation_clocks(clocks, evaluations_per_epoch):
    """Batches (counted from 1) of an epoch after which to evaluate: the schedule of
    hpcps::ps::train, so both sides sample their accuracy curves at the same fractional epochs."""
    every = max(1, clocks // max(1, evaluations_per_epoch))
    return {c for c in range(1, clocks + 1) if c == clocks or c % every == 0}


def add_recipe_arguments(p):
    """The update rule, schedule and augmentation of hpcps's examples, so both sides train alike:
    --nesterov and --weight-decay as optim::MomentumSgd takes them, --schedule cosine as
    optim::Schedule::cosine (from --lr to 0 along half a cosine over all the run's steps, one step
    per update), --augment-shift/--augment-flip as data::Augmentation (each image translated by
    -s..s pixels in each direction with zeros shifted in, then mirrored with probability 1/2)."""
    p.add_argument("--nesterov", action="store_true", help="Nesterov momentum (the ResNet example's optimizer)")
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--schedule", choices=["constant", "cosine"], default="constant")
    p.add_argument("--augment-shift", type=int, default=0, help="translate training images by up to N pixels")
    p.add_argument("--augment-flip", action="store_true", help="mirror training images left-right at random")


def make_optimizer(args, parameters, steps):
    """SGD with momentum 0.9 and the recipe's options; the scheduler is stepped once per update."""
    opt = torch.optim.SGD(parameters, lr=args.lr, momentum=0.9, nesterov=args.nesterov,
                          weight_decay=args.weight_decay)
    if args.schedule == "cosine":
        total = max(1, steps)
        factor = lambda s: 0.5 * (1.0 + math.cos(math.pi * s / total)) if s < total else 0.0  # noqa: E731
    else:
        factor = lambda s: 1.0  # noqa: E731
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, factor)


def augment(args, images, side=28):
    """The batch `images` (rows of side*side floats) translated and mirrored at random; the rows
    themselves when the recipe has no augmentation."""
    shift = args.augment_shift
    if shift <= 0 and not args.augment_flip:
        return images
    b = images.shape[0]
    padded = torch.nn.functional.pad(images.view(b, side, side), (shift, shift, shift, shift))
    ar = torch.arange(side)
    dy = torch.randint(-shift, shift + 1, (b, 1))
    dx = torch.randint(-shift, shift + 1, (b, 1))
    cols = ar.expand(b, side)
    if args.augment_flip:
        cols = torch.where(torch.rand(b, 1) < 0.5, side - 1 - cols, cols)
    rows = ar.expand(b, side) + dy + shift
    cols = cols + dx + shift
    return padded[torch.arange(b).view(b, 1, 1), rows.view(b, side, 1), cols.view(b, 1, side)].reshape(b, side * side)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--train-samples", type=int, default=0, help="train on the first N samples only; 0: all")
    p.add_argument("--evaluations-per-epoch", type=int, default=0,
                   help="0: evaluate once per epoch, print epoch lines only (the default output)")
    p.add_argument("--target-accuracy", type=float, default=None,
                   help="stop at the first evaluation with at least this test accuracy")
    add_model_arguments(p)
    add_recipe_arguments(p)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    x, y = load(args.data, "train")
    if args.train_samples > 0:
        x, y = x[:args.train_samples], y[:args.train_samples]
    tx, ty = load(args.data, "t10k")
    model = build_model(args)
    loss_fn = torch.nn.CrossEntropyLoss()
    clocks = (x.shape[0] + args.batch - 1) // args.batch
    opt, schedule = make_optimizer(args, model.parameters(), args.epochs * clocks)
    at = evaluation_clocks(clocks, args.evaluations_per_epoch) if args.evaluations_per_epoch > 0 else {clocks}
    train_seconds, samples = 0.0, 0
    for epoch in range(args.epochs):
        order = torch.randperm(x.shape[0])
        seconds = 0.0
        start = time.perf_counter()
        reached = False
        for c, b in enumerate(range(0, x.shape[0], args.batch), start=1):
            idx = order[b:b + args.batch]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(augment(args, x[idx])), y[idx])
            loss.backward()
            opt.step()
            schedule.step()
            samples += idx.shape[0]
            if c not in at:
                continue
            seconds += time.perf_counter() - start
            train_seconds_now = train_seconds + seconds
            model.eval()  # dropout off, batch normalization by its running statistics
            with torch.no_grad():
                out = model(tx)
                accuracy = (out.argmax(1) == ty).float().mean().item()
                test_loss = loss_fn(out, ty).item()
            model.train()
            if args.evaluations_per_epoch > 0:
                print(json.dumps({"type": "evaluation", "epoch": epoch + c / clocks, "train_seconds": train_seconds_now,
                                  "samples": samples, "test_accuracy": accuracy, "test_loss": test_loss}), flush=True)
                reached = args.target_accuracy is not None and accuracy >= args.target_accuracy
                if reached:
                    break
            start = time.perf_counter()
        if reached:
            break
        train_seconds += seconds
        print(json.dumps({"epoch": epoch + 1, "seconds": seconds, "samples": x.shape[0], "test_accuracy": accuracy}),
              flush=True)


if __name__ == "__main__":
    main()
