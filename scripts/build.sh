#!/usr/bin/env bash
# Installs dependencies (scripts/setup.sh), then configures and builds PhotonInfer into BUILD_DIR (default: build).
# Extra arguments go to CMake, e.g. scripts/build.sh build-asan -DPHOTON_SANITIZE=address,undefined
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
./scripts/setup.sh
cmake -S . -B "$build" -G Ninja "$@" >/dev/null
cmake --build "$build" --parallel "$(nproc)"
