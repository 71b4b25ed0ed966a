#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) and runs each for SECONDS (default 60) over its seed corpus in
# tests/fuzz/corpus/TARGET. A crash fails the run and leaves the input in build-fuzz/crashes/: add it to the corpus
# (it becomes a regression test) and fix the bug.   Usage: scripts/fuzz.sh [SECONDS|ci] [TARGET...]
# `ci` runs a fixed number of executions from a fixed seed (about 30-60 s per target on two cores), so a CI run is
# reproducible: the same commit explores the same inputs.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(safetensors model_config tokenizer_json encode chat_template server_request)
./scripts/setup.sh >/dev/null
CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz -G Ninja -DPHOTON_FUZZ=ON -DPHOTON_CUDA=OFF \
  -DPHOTON_BUILD_TESTS=OFF -DPHOTON_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz --parallel "$(nproc)" --target $(printf 'fuzz_%s ' "${targets[@]}")
mkdir -p build-fuzz/crashes
status=0
declare -A ci_runs=([safetensors]=600000 [model_config]=350000 [tokenizer_json]=80000 [encode]=25000
                   [chat_template]=12000 [server_request]=60000)
for t in "${targets[@]}"; do
  if [ "$seconds" = ci ]; then
    budget=(-runs="${ci_runs[$t]}" -seed=1)
  else
    budget=(-max_total_time="$seconds")
  fi
  work=$(mktemp -d)
  cp -r "tests/fuzz/corpus/$t/." "$work/" 2>/dev/null || true
  echo "== fuzz_$t (${budget[*]})"
  if ! ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1 \
       "build-fuzz/bin/fuzz_$t" "${budget[@]}" -timeout=10 -rss_limit_mb=4096 -max_len=65536 \
       -artifact_prefix="build-fuzz/crashes/${t}-" -print_final_stats=1 "$work" 2>"build-fuzz/fuzz_$t.log"; then
    status=1
    echo "fuzz_$t FAILED:"; grep -E "ERROR|SUMMARY|Test unit written" "build-fuzz/fuzz_$t.log" | head -5
  fi
  grep -E "stat::number_of_executed_units|stat::new_units_added" "build-fuzz/fuzz_$t.log" | tr '\n' ' '; echo
  rm -rf "$work"
done
exit $status
