#!/usr/bin/env python3
"""SASS instructions per kernel of a cubin, without a disassembler (none on the CPU machines).

Every sm_70+ instruction is 16 bytes, so a kernel's .text section size / 16 is its instruction
count (the trailing padding, repeated identical words, left out). It counts code, not executed
instructions: compare straight-line kernels, or variants with a rare path taken out.

    nvcc -std=c++20 -I. -O3 -DNDEBUG -arch=sm_90 -cubin -x cu kernels/cuda/batch_norm.cu -o new.cubin
    python3 bench/gpu/sass_count.py new.cubin                 # every kernel
    python3 bench/gpu/sass_count.py old.cubin new.cubin       # the kernels whose count changed

bench/gpu/NOTES.md ("Without a GPU (2026-11-29)") has the counts this gave.
"""
import argparse
import re
import shutil
import struct
import subprocess
import sys


def kernel_sizes(path):
    """{mangled kernel name: instruction count} of an ELF cubin."""
    data = open(path, "rb").read()
    if data[:4] != b"\x7fELF":
        raise ValueError(f"{path}: not an ELF cubin (nvcc -cubin makes one)")
    section_offset, = struct.unpack_from("<Q", data, 0x28)
    entry_size, count, names_index = struct.unpack_from("<HHH", data, 0x3a)
    sections = [struct.unpack_from("<IIQQQQ", data, section_offset + i * entry_size)
                for i in range(count)]
    names_offset = sections[names_index][4]

    def name_at(offset):
        end = data.index(b"\0", names_offset + offset)
        return data[names_offset + offset:end].decode()

    sizes = {}
    for name, _, _, _, offset, size in sections:
        section = name_at(name)
        if not section.startswith(".text."):
            continue
        words = [data[offset + k:offset + k + 16] for k in range(0, size, 16)]
        while len(words) > 1 and words[-1] == words[-2]:
            words.pop()
        sizes[section[len(".text."):]] = len(words)
    return sizes


def readable(names):
    """Demangled names (c++filt when present), without ember's namespaces and anonymous
    namespaces, so that two builds' kernels match by name."""
    names = list(names)
    if shutil.which("c++filt"):
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
        names = out.stdout.splitlines() or names
    return [re.sub(r"ember::kernels::cuda::|\(anonymous namespace\)::|ember::|\s+", "", n)
            for n in names]


def by_readable_name(path):
    sizes = kernel_sizes(path)
    return dict(zip(readable(sizes), sizes.values()))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cubins", nargs="+", metavar="CUBIN", help="one cubin, or before and after")
    args = parser.parse_args()
    if len(args.cubins) > 2:
        parser.error("one cubin, or two to compare")
    try:
        tables = [by_readable_name(path) for path in args.cubins]
    except (OSError, ValueError) as error:
        print(f"sass_count.py: {error}", file=sys.stderr)
        return 1
    if len(tables) == 1:
        for name, n in sorted(tables[0].items()):
            print(f"{n:6d}  {name}")
    else:
        before, after = tables
        for name in sorted(set(before) & set(after)):
            if before[name] != after[name]:
                print(f"{before[name]:6d} -> {after[name]:6d}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
