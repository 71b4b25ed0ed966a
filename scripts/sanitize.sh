#!/usr/bin/env bash
# The whole test suite under AddressSanitizer + UndefinedBehaviorSanitizer (CPU build). Any report fails it.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh build-asan -DPHOTON_CUDA=OFF -DPHOTON_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DPHOTON_BUILD_BENCH=OFF
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# The install test loads the instrumented library into an uninstrumented Python; it runs in the normal build.
ctest --test-dir build-asan --output-on-failure --parallel "$(nproc)" -E install_and_example
