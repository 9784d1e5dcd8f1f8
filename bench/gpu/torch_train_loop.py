#!/usr/bin/env python3
"""A plain PyTorch training loop of the same ResNet9 as ember's nn::resnet9, for images/s.

The model is nn/models.cpp's, layer for layer: conv_block = Conv2d(3x3, padding 1, bias) +
BatchNorm2d + ReLU (+ MaxPool2d(2)); resnet9 = conv_block(in, s), conv_block(s, 2s, pool),
Residual(conv_block(2s, 2s) x2), conv_block(2s, 4s, pool), conv_block(4s, 8s, pool),
Residual(conv_block(8s, 8s) x2), MaxPool2d(4), Flatten, Dropout(0.2), Linear(8s, classes).

Inputs are RANDOM images of Fashion-MNIST's padded shape (N, 1, 32, 32) and random labels: the GPU
machine has no dataset unless one is carried, and throughput does not depend on the values. The
step is `ember train`'s: zero_grad, forward and loss under autocast, backward, Adam step (lr 2e-3,
fused, as ember's optim::Adam by default). cuDNN picks its algorithms by heuristics (cudnn.benchmark
off, PyTorch's default), as ember does (cudnnGetConvolution*Algorithm_v7); --cudnn-benchmark times
them instead.

    python3 bench/gpu/torch_train_loop.py --size 64 --batch 512 --amp bf16 --steps 50 \
        --json $OUT/torch_train_loop.json
"""
import argparse
import json
import sys
import time

import torch
from torch import nn


def conv_block(in_channels, out_channels, pool=False):
    layers = [
        nn.Conv2d(in_channels, out_channels, 3, padding=1),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(inplace=True),
    ]
    if pool:
        layers.append(nn.MaxPool2d(2))
    return nn.Sequential(*layers)


class Residual(nn.Module):
    def __init__(self, body):
        super().__init__()
        self.body = body

    def forward(self, x):
        return x + self.body(x)


def resnet9(in_channels=1, num_classes=10, size=16):
    s1, s2, s4, s8 = size, 2 * size, 4 * size, 8 * size
    return nn.Sequential(
        conv_block(in_channels, s1),
        conv_block(s1, s2, pool=True),
        Residual(nn.Sequential(conv_block(s2, s2), conv_block(s2, s2))),
        conv_block(s2, s4, pool=True),
        conv_block(s4, s8, pool=True),
        Residual(nn.Sequential(conv_block(s8, s8), conv_block(s8, s8))),
        nn.MaxPool2d(4),
        nn.Flatten(),
        nn.Dropout(0.2),
        nn.Linear(s8, num_classes),
    )


AMP_DTYPES = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def make_step(size=64, batch=512, amp="bf16", channels_last=False, compile_model=False):
    """Returns (step, images per step): step() runs one training step on random data."""
    device = torch.device("cuda")
    torch.manual_seed(42)
    model = resnet9(1, 10, size).to(device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    model.train()
    # ember's optim::Adam is fused by default (one kernel over all parameters): so is this one.
    try:
        optimizer = torch.optim.Adam(model.parameters(), lr=2e-3, fused=True)
    except (TypeError, RuntimeError):  # a PyTorch without fused Adam: its default (foreach)
        optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    images = torch.randn(batch, 1, 32, 32, device=device)
    if channels_last:
        images = images.to(memory_format=torch.channels_last)
    labels = torch.randint(0, 10, (batch,), device=device)
    forward = torch.compile(model) if compile_model else model
    dtype = AMP_DTYPES[amp]
    scaler = torch.amp.GradScaler("cuda", enabled=dtype == torch.float16)
    loss_fn = nn.CrossEntropyLoss()

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss = loss_fn(forward(images), labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        return loss

    return step, batch


def time_steps(step, steps, warmup):
    """Median and mean milliseconds per step, each step timed with CUDA events."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(steps):
        start.record()
        step()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return times[len(times) // 2], sum(times) / len(times)


def time_back_to_back(step, steps):
    """Mean milliseconds per step over `steps` steps run back to back (host waits included)."""
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        step()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / max(steps, 1)


def run_profiler_range(step, steps):
    """`steps` steps inside cudaProfilerStart/Stop: what `ncu --profile-from-start off` times."""
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=64, help="ResNet9 base width (default 64)")
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--amp", choices=sorted(AMP_DTYPES), default="bf16")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--channels-last", action="store_true")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model too")
    parser.add_argument("--cudnn-benchmark", action="store_true",
                        help="torch.backends.cudnn.benchmark = True (ember: --cudnn-benchmark)")
    parser.add_argument("--tf32", choices=["on", "off"],
                        help="torch.backends.cudnn.allow_tf32 and "
                        "torch.backends.cuda.matmul.allow_tf32 both on (ember: --tf32) or both "
                        "off (ember's exact f32); default: PyTorch's (cuDNN on, matmul off)")
    parser.add_argument("--profile-steps", type=int, default=0,
                        help="then this many steps inside torch.cuda.profiler.start/stop, for "
                        "ncu --profile-from-start off (bench/gpu/run.sh's profile step)")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("torch_train_loop.py: no CUDA device visible", file=sys.stderr)
        return 1

    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    if args.tf32:
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = args.tf32 == "on"
    results = []
    variants = [("eager", False)] + ([("compile", True)] if args.compile else [])
    for name, compile_model in variants:
        try:
            wall = time.perf_counter()
            step, images = make_step(args.size, args.batch, args.amp, args.channels_last,
                                     compile_model)
            median_ms, mean_ms = time_steps(step, args.steps, args.warmup)
            back_to_back_ms = time_back_to_back(step, args.steps)
            if args.profile_steps > 0 and not compile_model:
                run_profiler_range(step, args.profile_steps)
            result = {"variant": name, "median_ms": median_ms, "mean_ms": mean_ms,
                      "back_to_back_ms": back_to_back_ms,
                      "images_per_s": images / (median_ms / 1e3),
                      "wall_s": time.perf_counter() - wall}
        except Exception as error:  # torch.compile may fail on this machine: report, go on
            result = {"variant": name, "error": f"{type(error).__name__}: {error}"}
        results.append(result)
        if "error" in result:
            print(f"torch resnet9 {name}: failed: {result['error']}")
        else:
            print(f"torch resnet9 {name}: size {args.size}, batch {args.batch}, amp {args.amp}: "
                  f"{result['median_ms']:.2f} ms/step (median of {args.steps}), "
                  f"{result['back_to_back_ms']:.2f} ms/step (mean of {args.steps} back to back), "
                  f"{result['images_per_s']:.0f} images/s (random data)")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
                       "size": args.size, "batch": args.batch, "amp": args.amp,
                       "cudnn_benchmark": args.cudnn_benchmark, "data": "random",
                       "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
                       "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                       "results": results}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
