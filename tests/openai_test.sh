#!/usr/bin/env bash
# The official `openai` npm client (tests/openai/client_test.mjs) against `photon serve` on loopback, over a
# Qwen3-shaped tiny model with the real Qwen3 tokenizer. Exit 77 (skipped) when the tokenizer files or the npm
# package cannot be had.   Usage: openai_test.sh PHOTON WORKDIR
set -uo pipefail
photon=$1
work=$2
here=$(cd "$(dirname "$0")" && pwd)
tok="${PHOTON_TOKENIZER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/photon/tokenizers}/qwen3"
[ -f "$tok/tokenizer.json" ] || { echo "SKIP: run scripts/fetch-tokenizers.sh"; exit 77; }
command -v node >/dev/null || { echo "SKIP: no Node.js"; exit 77; }
mkdir -p "$work"
if [ ! -f "$work/node_modules/openai/package.json" ]; then
  (cd "$work" && npm install --silent --no-audit --no-fund --no-save openai@6.49.0 >/dev/null 2>&1) ||
    { echo "SKIP: npm could not install openai"; exit 77; }
fi
cp "$here/openai/client_test.mjs" "$work/"
. "$here/serve_lib.sh"
start_serving "$work/server.log" "$photon" serve --model dummy:tiny-qwen3 --tokenizer "$tok" --device cpu \
  --max-model-len 256 --port 0 \
  --served-model-name tiny-qwen --api-key test-key || exit 1
port=$server_port
node "$work/client_test.mjs" "$port" test-key tiny-qwen
