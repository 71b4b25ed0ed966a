#!/usr/bin/env bash
# The main job from a fresh machine: build, generate from a real (tiny) checkpoint with logprobs, then a short
# throughput run on the built-in dummy Llama-3.2-1B shape.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh build
photon=build/bin/photon
device=cpu

echo
echo "== photon generate: a tiny Llama 3 checkpoint (tests/data/parity), greedy, with logprobs"
"$photon" generate --model tests/data/parity/llama3-gqa-tied-ropescaled --device "$device" \
  --prompt-ids 1,450,917,33,21 --max-tokens 12 --ignore-eos --logprobs 2 --json

echo
echo "== throughput: dummy:llama-3.2-1b (1.24 B parameters, bf16 weights), 64 tokens of decode"
stats=$("$photon" generate --model dummy:llama-3.2-1b --device "$device" --prompt-ids 128000,791,6864,315,9822,374 \
  --max-tokens 64 --ignore-eos --stats 2>&1 >/dev/null | tail -1)
python3 - "$stats" <<'PY'
import json, sys
s = json.loads(sys.argv[1])
print(f"weights {s['weight_bytes'] / 1e9:.2f} GB on {s['device']} ({s['threads']} threads), ready in {s['load_s']:.1f} s")
print(f"prefill {s['prompt_tokens']} tokens: {s['prefill_tok_per_s']:.1f} tok/s")
print(f"decode  {s['output_tokens']} tokens: {s['decode_tok_per_s']:.2f} tok/s"
      f" = {s['decode_tok_per_s'] * s['weight_bytes'] / 1e9:.1f} GB/s of weights streamed")
PY
