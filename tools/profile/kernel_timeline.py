#!/usr/bin/env python3
"""Summarises a kernel timeline written by a PHOTON_KERNEL_TRACE build (src/cuda/kernel_trace.hpp).

Usage: kernel_timeline.py TRACE [--gap-us G] [--csv FILE]

Each kernel launched through launch() stamps, per block, when it reached its PDL wait (arrive) and when the wait
released it (release: the kernel before it had finished). The script orders the kernels by their first release,
cuts the sequence into steps at gaps longer than G µs (default 40: the host's work between steps) and prints one
row per kernel of the last step of at least half the longest one's kernels — a graph's kernels keep their grid ids
across replays, so the trace holds each graph's latest replay, and the decode graph's is the last one the program
ran:

  chain   the next kernel's first release - this kernel's first release (µs): this kernel's share of the step (its
          work after the wait, its completion and the next kernel's release); the rows add up to the step
  ready   this kernel's first arrival - the previous kernel's first release (µs): when its first block was resident
          and through its loads before the wait, counted from the start of the previous kernel's work
  late    this kernel's last arrival - its first release (µs; > 0: blocks were still arriving when it could start)
  spread  last release - first release (µs)
  blocks  blocks recorded / blocks in the grid (blocks that leave before the wait are not recorded)

Then the kernels of the repeating layer are averaged per position over every layer of the step.
"""
import argparse
import collections
import statistics
import struct
import sys


def load(path):
    grids = collections.defaultdict(list)
    with open(path, "rb") as f:
        data = f.read()
    for grid, arrive, release, where in struct.iter_unpack("<4Q", data):
        if grid != 0:
            grids[grid].append((arrive, release, where))
    rows = []
    for grid, recs in grids.items():
        where = recs[0][2]
        rows.append({
            "grid": grid, "threads": (where >> 28) & 0x7FF, "blocks": where >> 39, "recorded": len(recs),
            "first_arrive": min(r[0] for r in recs), "last_arrive": max(r[0] for r in recs),
            "first_release": min(r[1] for r in recs), "last_release": max(r[1] for r in recs),
        })
    rows.sort(key=lambda r: r["first_release"])
    return rows


def sig(r):
    return (r["threads"], r["blocks"])


def layer_period(sigs):
    """The period of the longest repeating run of kernel shapes (the decoder layer), or 0."""
    best, best_cover = 0, 0
    for p in range(2, 17):
        cover = sum(1 for i in range(len(sigs) - p) if sigs[i] == sigs[i + p])
        if cover > best_cover * 1.2:
            best, best_cover = p, cover
    return best if best_cover >= len(sigs) // 2 else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--gap-us", type=float, default=40.0)
    ap.add_argument("--csv", help="also write every recorded kernel, in order, to this file")
    args = ap.parse_args()
    rows = load(args.trace)
    if not rows:
        sys.exit(f"{args.trace}: no kernel recorded; was the program built with PHOTON_KERNEL_TRACE=ON?")
    if args.csv:
        with open(args.csv, "w") as f:
            keys = list(rows[0].keys())
            f.write(",".join(keys) + "\n")
            for r in rows:
                f.write(",".join(str(r[k]) for k in keys) + "\n")
    steps, current = [], [rows[0]]
    for prev, r in zip(rows, rows[1:]):
        if r["first_release"] - prev["first_release"] > args.gap_us * 1000:
            steps.append(current)
            current = []
        current.append(r)
    steps.append(current)
    longest = max(len(st) for st in steps)
    if longest < 8:
        sys.exit(f"no step of 8 or more kernels between gaps of {args.gap_us} µs")
    # The last step of at least half the longest one's kernels: a decode step fuses more of its operations (its norms
    # ride in its matmuls; int8 weights need no widening) than the program's eager prompt steps, and launches fewer.
    step = [st for st in steps if len(st) * 2 >= longest][-1]
    shape = [sig(r) for r in step]
    n = len(step)

    def us(ns):
        return ns / 1000.0

    table = [(k, shape[k][0], f"{step[k]['recorded']}/{shape[k][1]}",
              us(step[k + 1]["first_release"] - step[k]["first_release"]) if k + 1 < n else float("nan"),
              us(step[k]["first_arrive"] - step[k - 1]["first_release"]) if k > 0 else float("nan"),
              us(step[k]["last_arrive"] - step[k]["first_release"]),
              us(step[k]["last_release"] - step[k]["first_release"])) for k in range(n)]
    total = sum(t[3] for t in table[:-1])
    print(f"# kernel timeline: {args.trace}\n")
    print(f"the last step of {n} kernels ({len(rows)} kernels recorded); first to last release {total:.1f} µs\n")
    header = "| # | threads | blocks | chain µs | ready µs | late µs | spread µs |\n| --- | --- | --- | --- | --- | --- | --- |"
    print(header)
    for t in table:
        print(f"| {t[0]} | {t[1]} | {t[2]} | " + " | ".join(f"{v:.2f}" for v in t[3:]) + " |")
    p = layer_period(shape)
    if p:
        # Layers: the positions where the p-long pattern that repeats most often starts.
        starts = collections.Counter(tuple(shape[i:i + p]) for i in range(n - p + 1))
        pattern = max(starts.items(), key=lambda kv: kv[1])[0]
        at = [i for i in range(n - p) if tuple(shape[i:i + p]) == pattern]
        layers, last = [], -p
        for i in at:
            if i >= last + p:
                layers.append(i)
                last = i
        print(f"\nper layer: {p} kernels, averaged over {len(layers)} layers; chain sum "
              f"{sum(statistics.mean(table[i + q][3] for i in layers) for q in range(p)):.2f} µs\n")
        print(header.replace("| # |", "| position |"))
        for q in range(p):
            vals = [statistics.mean(table[i + q][c] for i in layers) for c in (3, 4, 5, 6)]
            print(f"| {q} | {pattern[q][0]} | {table[layers[0] + q][2]} | " + " | ".join(f"{v:.2f}" for v in vals) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
