#!/usr/bin/env python3
"""Which precision PyTorch reads a Python number in, in f16/bf16 arithmetic, on the CPU and the GPU.

ember (runtime/ops/elementwise.cpp, keeps_number_in_f32): x * s and x / s take a number that the
tensor's dtype cannot hold in f32 and divide by it exactly; x + s and x - s round it to the
tensor's dtype first. That follows PyTorch 2.x's CPU kernels as read in their source (mul and div:
original_scalar_value<opmath_t>; add: the common dtype). This prints, per device, dtype, op and
number, how many of the 16-bit values in [-4, 4) give a result other than each rule's:

    f32        op(f32(x), f32(s)) rounded once            (ember's rule for mul and div)
    narrowed   op(f32(x), f32(dtype(s))) rounded once     (ember's rule for add and sub)
    reciprocal f32(x) * (1 / f32(s)) rounded once         (a division by the reciprocal)

A 0 in one column says which rule PyTorch follows there.

    python3 bench/gpu/torch_scalar_rounding.py
"""
import torch

NUMBERS = (1.0 / 3.0, 0.1, 0.3, 257.0)
OPS = {
    "mul": lambda x, s: x * s,
    "div": lambda x, s: x / s,
    "add": lambda x, s: x + s,
    "sub": lambda x, s: x - s,
}


def all_values(dtype):
    """Every finite value of dtype in [-4, 4), as that dtype."""
    bits = torch.arange(0, 1 << 16, dtype=torch.int32).to(torch.int16)
    values = bits.view(dtype).float()
    keep = torch.isfinite(values) & (values >= -4) & (values < 4)
    return values[keep].to(dtype)


def main():
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    print(f"torch {torch.__version__}; devices: {', '.join(devices)}")
    print("| device | dtype | op | number | values | f32 | narrowed | reciprocal |")
    print("|---|---|---|---|---:|---:|---:|---:|")
    for device in devices:
        for dtype in (torch.bfloat16, torch.float16):
            x = all_values(dtype).to(device)
            wide = x.float()
            for name, op in OPS.items():
                for s in NUMBERS:
                    got = op(x, s).float()
                    s32 = torch.tensor(s, dtype=torch.float32, device=device)
                    narrowed = s32.to(dtype).float()
                    rules = {
                        "f32": op(wide, s32),
                        "narrowed": op(wide, narrowed),
                        "reciprocal": wide * (1.0 / s32) if name == "div" else None,
                    }
                    counts = []
                    for rule in ("f32", "narrowed", "reciprocal"):
                        want = rules[rule]
                        if want is None:
                            counts.append("-")
                            continue
                        want = want.to(dtype).float()
                        differ = ~((got == want) | (torch.isnan(got) & torch.isnan(want)))
                        counts.append(str(int(differ.sum())))
                    print(f"| {device} | {str(dtype).replace('torch.', '')} | {name} | {s:.6g} | "
                          f"{x.numel()} | {' | '.join(counts)} |")


if __name__ == "__main__":
    main()
