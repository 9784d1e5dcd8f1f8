#!/usr/bin/env python3
"""Whole epochs of a plain PyTorch loop on Fashion-MNIST: the reference for `ember train`'s images/s.

The same ResNet9 as torch_train_loop.py (nn/models.cpp's), batch, optimizer (Adam, lr 2e-3,
fused where PyTorch has it) and augmentation as `ember train` (apps/training.cpp: pad 2, random
crop 32 with padding 2, horizontal flip with p 0.5, normalise to mean 0.5, std 0.5; shuffled,
the last partial batch dropped). What differs, in PyTorch's favour: the images live on the GPU
from the start and are augmented there, in a few batched kernels, where ember's loader builds
each batch on the CPU in a worker thread and copies it over. An epoch is timed as ember's runner
times it: from the first batch to the last step's completion, loss and accuracy summed on the
device and read once at the end.

    python3 bench/gpu/torch_epochs.py --data DIR [--amp none,none-tf32,bf16,fp16,bf16+compile]
        [--epochs 4] [--limit 20480] [--size 64] [--batch 512] [--json FILE]

`none` is f32 as ember computes it: cuDNN's convolutions without TF32
(torch.backends.cudnn.allow_tf32 = False; ember's f32 convolutions are exact f32, like its CPU).
`none-tf32` is PyTorch's default, which rounds the convolutions' inputs to TF32 (10-bit mantissa).
Matrix products stay f32 in both (float32_matmul_precision 'highest', PyTorch's default).
A precision followed by `+compile` (e.g. `bf16+compile`) runs the same loop with the model wrapped
in torch.compile (its default mode); its epoch 1 includes the compilation, and a failure to
compile is reported as that precision's error.

Prints one line per precision: the median images/s of epochs 2.. (the first pays for cuDNN's and
cuBLAS's set-up and the allocator's growth, in both libraries), and the last epoch's accuracy.
"""
import argparse
import gzip
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_train_loop import AMP_DTYPES, resnet9  # noqa: E402  (the same model)


def read_idx(path, header_ints):
    """The payload of an IDX .gz file after its magic number and header_ints sizes."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    sizes = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(header_ints)]
    payload = bytearray(data[4 + 4 * header_ints:])
    return torch.frombuffer(payload, dtype=torch.uint8).view(*sizes)


def load_fashion_mnist(folder, limit):
    """(images uint8 (N, 28, 28), labels int64 (N,)): the first `limit` training images."""
    images = read_idx(os.path.join(folder, "train-images-idx3-ubyte.gz"), 3)
    labels = read_idx(os.path.join(folder, "train-labels-idx1-ubyte.gz"), 1)
    n = min(limit, images.shape[0])
    return images[:n].clone(), labels[:n].long()


def augment(images, generator):
    """uint8 (B, 28, 28) -> f32 (B, 1, 32, 32): pad 2, random 32-crop of the image padded by 2
    more, horizontal flip with p 0.5, (x - 0.5) / 0.5; all on the images' device."""
    b, device = images.shape[0], images.device
    x = F.pad(images.float().div_(255), (4, 4, 4, 4))  # (B, 36, 36): pad 2, then the crop's 2
    top = torch.randint(0, 5, (b,), device=device, generator=generator)
    left = torch.randint(0, 5, (b,), device=device, generator=generator)
    steps = torch.arange(32, device=device)
    rows = (top[:, None] + steps)[:, :, None]  # (B, 32, 1)
    cols = (left[:, None] + steps)[:, None, :]  # (B, 1, 32)
    x = x[torch.arange(b, device=device)[:, None, None], rows, cols]  # (B, 32, 32)
    flip = torch.rand(b, device=device, generator=generator) < 0.5
    x = torch.where(flip[:, None, None], x.flip(-1), x)
    return x.sub_(0.5).div_(0.5).unsqueeze(1)


def make_scaler(enabled, device):
    """A GradScaler for fp16 on the GPU (torch.amp's, or torch.cuda.amp's before PyTorch 2.3)."""
    if device.type != "cuda":
        enabled = False
    try:
        return torch.amp.GradScaler(device.type, enabled=enabled)
    except (AttributeError, TypeError):
        return torch.cuda.amp.GradScaler(enabled=enabled)


def parse_precision(name):
    """'bf16+compile' -> ('bf16', True); 'none-tf32' -> ('none-tf32', False). ValueError for a
    name that is not one of none, none-tf32, bf16, fp16 with or without '+compile'."""
    amp, plus, suffix = name.partition("+")
    if (amp not in ("none-tf32", *AMP_DTYPES)) or (plus and suffix != "compile"):
        raise ValueError(f"{name}: expected none, none-tf32, bf16 or fp16, optionally +compile")
    return amp, bool(plus)


def run_epochs(images, labels, precision, epochs, size=64, batch=512, seed=42, device="cuda"):
    """[{seconds, images_per_s, accuracy, loss}] for each epoch of training from scratch."""
    amp, compile_model = parse_precision(precision)
    device = torch.device(device)
    torch.manual_seed(seed)
    model = resnet9(1, 10, size).to(device).train()
    # The optimizer holds the eager module's parameters, which the compiled one shares.
    forward = torch.compile(model) if compile_model else model
    try:
        optimizer = torch.optim.Adam(model.parameters(), lr=2e-3, fused=device.type == "cuda")
    except (TypeError, RuntimeError):
        optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    # A run changes the process-wide switch; each run sets it, so their order does not matter.
    torch.backends.cudnn.allow_tf32 = amp == "none-tf32"
    dtype = AMP_DTYPES["none" if amp == "none-tf32" else amp]
    scaler = make_scaler(dtype == torch.float16, device)
    loss_fn = nn.CrossEntropyLoss()
    images, labels = images.to(device), labels.to(device)
    n = images.shape[0]
    steps = n // batch
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    results = []
    for _ in range(epochs):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        order = torch.randperm(n, device=device, generator=generator)
        correct = torch.zeros((), device=device)
        loss_sum = torch.zeros((), device=device)
        for step in range(steps):
            chosen = order[step * batch:(step + 1) * batch]
            x, y = augment(images[chosen], generator), labels[chosen]
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(device.type, dtype=dtype or torch.bfloat16,
                                enabled=dtype is not None):
                logits = forward(x)
                loss = loss_fn(logits, y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            correct += (logits.argmax(1) == y).sum()
            loss_sum += loss.detach().float()
        seen = steps * batch
        accuracy, mean_loss = correct.item() / seen, loss_sum.item() / steps  # waits for the GPU
        seconds = time.perf_counter() - start
        results.append({"seconds": seconds, "images_per_s": seen / seconds,
                        "accuracy": accuracy, "loss": mean_loss})
    return results


def summarise(epochs):
    """Median images/s of epochs 2.. (of the one epoch when there is only one)."""
    later = epochs[1:] or epochs
    return statistics.median(e["images_per_s"] for e in later)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="folder of Fashion-MNIST's IDX .gz files")
    parser.add_argument("--amp", default="none,none-tf32,bf16,fp16",
                        help="comma-separated: none, none-tf32, bf16, fp16; +compile after one "
                             "(bf16+compile) wraps the model in torch.compile")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--limit", type=int, default=20480, help="training images used")
    parser.add_argument("--size", type=int, default=64, help="ResNet9 base width")
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--device", default="cuda", help="cuda (or cpu, to try the script)")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    precisions = args.amp.split(",")
    for name in precisions:
        try:
            parse_precision(name)
        except ValueError as error:
            parser.error(f"--amp: {error}")
    if args.device == "cuda" and not torch.cuda.is_available():
        print("torch_epochs.py: no CUDA device visible", file=sys.stderr)
        return 1
    images, labels = load_fashion_mnist(args.data, args.limit)
    out = {"torch": torch.__version__, "size": args.size, "batch": args.batch,
           "epochs": args.epochs, "images": int(images.shape[0]), "runs": {}}
    if args.device == "cuda":
        out["gpu"] = torch.cuda.get_device_name(0)
    for amp in precisions:
        try:
            epochs = run_epochs(images, labels, amp, args.epochs, args.size, args.batch,
                                device=args.device)
            run = {"epochs": epochs, "images_per_s": summarise(epochs)}
            print(f"torch epochs amp {amp}: {run['images_per_s']:.0f} images/s (median of epochs "
                  f"2..{args.epochs}; epoch 1: {epochs[0]['images_per_s']:.0f}), accuracy "
                  f"{100 * epochs[-1]['accuracy']:.2f}% in epoch {args.epochs}")
        except Exception as error:  # report and go on with the next precision
            run = {"error": f"{type(error).__name__}: {error}"}
            print(f"torch epochs amp {amp}: failed: {run['error']}")
        out["runs"][amp] = run
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
