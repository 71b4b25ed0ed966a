#!/usr/bin/env bash
# The web chat page in headless Chromium (tests/web/ui_test.mjs) against `photon serve` on loopback. Exit 77
# (skipped) without /usr/bin/chromium, the tokenizer files or the npm package playwright-core.
# Usage: web_ui_test.sh PHOTON WORKDIR [SCREENSHOT_DIR]
set -uo pipefail
photon=$1
work=$2
shots=${3:-$work}
here=$(cd "$(dirname "$0")" && pwd)
tok="${PHOTON_TOKENIZER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/photon/tokenizers}/qwen3"
[ -x /usr/bin/chromium ] || { echo "SKIP: no /usr/bin/chromium (apt-get install chromium)"; exit 77; }
[ -f "$tok/tokenizer.json" ] || { echo "SKIP: run scripts/fetch-tokenizers.sh"; exit 77; }
mkdir -p "$work" "$shots"
if [ ! -f "$work/node_modules/playwright-core/package.json" ]; then
  (cd "$work" && npm install --silent --no-audit --no-fund --no-save playwright-core@1.65.1 >/dev/null 2>&1) ||
    { echo "SKIP: npm could not install playwright-core"; exit 77; }
fi
cp "$here/web/ui_test.mjs" "$work/"
. "$here/serve_lib.sh"
start_serving "$work/server.log" "$photon" serve --model dummy:tiny-qwen3 --tokenizer "$tok" --device cpu \
  --max-model-len 4096 --port 0 || exit 1
port=$server_port
PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 timeout 240 node "$work/ui_test.mjs" "http://127.0.0.1:$port" "$shots"
