#!/usr/bin/env bash
# The whole test suite from a fresh machine: dependencies, build, then every test through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh build
ctest --test-dir build --output-on-failure --parallel "$(nproc)"
