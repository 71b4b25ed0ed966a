#!/usr/bin/env bash
# Runs the CPU benchmarks and prints each result against the memory bandwidth measured in the same run.
# Usage: scripts/cpu-bench.sh [BUILD_DIR]   (default: build; builds photon_bench_cpu first)
set -euo pipefail
build=${1:-build}
cmake --build "$build" --target photon_bench_cpu >/dev/null
json=$(mktemp)
trap 'rm -f "$json"' EXIT
"$build/bin/photon_bench_cpu" --benchmark_format=json --benchmark_out="$json" --benchmark_out_format=json >/dev/null
python3 - "$json" <<'PY'
import json, sys
runs = {b["name"].split("/real_time")[0].split("/min_time")[0]: b for b in json.load(open(sys.argv[1]))["benchmarks"]}
copy = runs["BM_MemcpyBandwidth"]["bytes_per_second"]
read = runs["BM_ReadBandwidth"]["bytes_per_second"]
print(f"memcpy bandwidth (read + write): {copy / 1e9:6.1f} GB/s")
print(f"read-only bandwidth:             {read / 1e9:6.1f} GB/s")
for name, b in runs.items():
    if name.startswith("BM_MatmulBf16Gemv") or name.startswith("BM_MatmulInt8Gemv"):
        bw = b["bytes_per_second"]
        print(f"{name:40s} {bw / 1e9:6.1f} GB/s = {100 * bw / copy:5.1f}% of memcpy, {100 * bw / read:5.1f}% of read")
    if name.startswith("BM_DecodeDummyModel"):
        tps = b["items_per_second"]
        per_token = b["weight_bytes_per_token"]
        print(f"{name:40s} {tps:6.2f} tok/s; roofline {copy / per_token:6.2f} tok/s (memcpy) = {100 * tps * per_token / copy:5.1f}%,"
              f" {read / per_token:6.2f} tok/s (read) = {100 * tps * per_token / read:5.1f}%")
PY
