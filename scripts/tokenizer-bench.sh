#!/usr/bin/env bash
# Encodes the same 1 MB of prose and code with PhotonInfer and with Hugging Face `tokenizers` (its native Node
# binding), single-threaded, for the Llama 3 and Qwen3 tokenizers; prints both, with load times.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
cache=$(scripts/fetch-tokenizers.sh)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 tools/tokenizer_ref/make_bench_input.py "$work/input.txt"
(cd "$work" && npm install --silent --no-save @anush008/tokenizers@0.6.0 >/dev/null)
cmake --build "$build" --target photon_bench_tokenizer >/dev/null
for name in llama3 qwen3; do
  echo "$name: $("$build/bin/photon_bench_tokenizer" "$cache/$name" "$work/input.txt")"
  echo "$name: $(NODE_PATH="$work/node_modules" node tools/tokenizer_ref/bench_encode.js "$cache/$name/tokenizer.json" "$work/input.txt")"
done
