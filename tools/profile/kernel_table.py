#!/usr/bin/env python3
"""Summarises an Nsight Compute CSV (ncu --csv --metrics gpu__time_duration.sum) into a per-kernel time table.

Usage: kernel_table.py NCU_CSV [--top N]
Kernels are grouped by their name without template arguments or parameters; the table lists total time, share,
launch count and mean duration, largest first. Times come from serialised launches (ncu runs one kernel at a time),
so they measure each kernel alone, without the launch gaps or overlap of a real run.
"""
import argparse
import csv
import collections
import re
import sys


def short_name(name: str) -> str:
    name = re.sub(r"\(.*$", "", name)  # parameters
    depth, out = 0, []
    for ch in name:  # drop template arguments
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    name = "".join(out).strip()
    return name.split("::")[-1] if "cutlass" not in name and "sm90" not in name else name[:70]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("csv_path")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    with open(args.csv_path, newline="", errors="replace") as f:
        lines = f.read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        print(f"{args.csv_path}: no ncu CSV table found", file=sys.stderr)
        return 1
    total = collections.Counter()
    count = collections.Counter()
    for row in csv.DictReader(lines[start:]):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(row["Metric Value"].replace(",", ""))
        unit = row.get("Metric Unit", "ns")
        scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}.get(unit, 1e-3)
        name = short_name(row["Kernel Name"])
        total[name] += value * scale
        count[name] += 1
    grand = sum(total.values())
    print(f"| kernel | total ms | share | launches | mean us |")
    print(f"| --- | --- | --- | --- | --- |")
    for name, us in total.most_common(args.top):
        print(f"| {name} | {us / 1e3:.2f} | {100 * us / grand:.1f}% | {count[name]} | {us / count[name]:.1f} |")
    print(f"| all kernels | {grand / 1e3:.2f} | 100% | {sum(count.values())} | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
