#!/usr/bin/env bash
# The main job from a fresh machine: build, generate from a real (tiny) checkpoint with logprobs, then a short
# throughput run on the built-in dummy Llama-3.2-1B shape — on the GPU when there is one, else on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh build
photon=build/bin/photon
device=cpu
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && "$photon" --help | grep -q "CUDA"; then
  device=cuda
fi

echo
echo "== photon generate on $device: a tiny Llama 3 checkpoint (tests/data/parity), greedy, with logprobs"
"$photon" generate --model tests/data/parity/llama3-gqa-tied-ropescaled --device "$device" \
  --prompt-ids 1,450,917,33,21 --max-tokens 12 --ignore-eos --logprobs 2 --json

echo
echo "== photon bench on $device: dummy:llama-3.2-1b (1.24 B parameters, bf16), 4 requests of 32 tokens in, 32 out"
"$photon" bench --model dummy:llama-3.2-1b --device "$device" --num-prompts 4 --input-len 32 --output-len 32
