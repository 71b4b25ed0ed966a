#!/usr/bin/env bash
# The CPU backend side by side with llama.cpp's CPU backend on the same cores and the same weights: a random
# Llama-3.2-1B-shaped bf16 checkpoint (safetensors for photon, converted to a bf16 GGUF for llama.cpp), then
#   prompt processing: photon's time to first token of one 512-token prompt against llama-bench pp512,
#   batch-1 decode:    photon's time per output token of one request against llama-bench tg64, three runs of each
#                      taken in turn (this comparison is the noisiest: the medians count),
#   16 x (32, 32):     photon bench of 16 requests against llama-batched-bench -npp 32 -ntg 32 -npl 16.
# Writes OUTDIR/summary.md (the table), OUTDIR/*.json and the logs.
# Usage: scripts/cpu-peer-bench.sh LLAMA_CPP_SOURCE OUTDIR
#   LLAMA_CPP_SOURCE: a llama.cpp source tree (kept outside this repository); built here, CPU backend only.
#   WEIGHTS (default bf16): int8 compares photon's group-wise int8 (groups of 32, LM head included) with llama.cpp's
#   Q8_0 (blocks of 32, every matrix) instead of bf16 with bf16.
#   THREADS (default: the number of physical cores), PHOTON_BUILD (default: build; must hold bin/photon),
#   PHOTON_TOKENIZER_CACHE (default ~/.cache/photon/tokenizers, from scripts/fetch-tokenizers.sh: the Llama 3
#   tokenizer the GGUF needs). Needs python3 with torch, transformers and numpy (to write the checkpoint and run
#   llama.cpp's converter).
set -euo pipefail
cd "$(dirname "$0")/.."
peer_src=$(realpath "${1:?usage: scripts/cpu-peer-bench.sh LLAMA_CPP_SOURCE OUTDIR}")
out=$(realpath -m "${2:?usage: scripts/cpu-peer-bench.sh LLAMA_CPP_SOURCE OUTDIR}")
mkdir -p "$out"
photon=${PHOTON_BUILD:-build}/bin/photon
[ -x "$photon" ] || { echo "no $photon: build photon first (scripts/build.sh)" >&2; exit 1; }
cores=$(lscpu -p=CORE,SOCKET | grep -v '^#' | sort -u | wc -l)
threads=${THREADS:-$cores}
weights=${WEIGHTS:-bf16}
case $weights in
  bf16) outtype=bf16 quant=() ;;
  int8) outtype=q8_0 quant=(--quantization int8 --group-size 32 --quantize-lm-head) ;;
  *) echo "WEIGHTS must be bf16 or int8, not '$weights'" >&2; exit 1 ;;
esac
tok_cache=${PHOTON_TOKENIZER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/photon/tokenizers}
work=${PEER_WORK:-/tmp/photon-cpu-peer}
mkdir -p "$work"
summary="$out/summary.md"
{
  echo "# cpu-peer-bench $(date -u +%Y-%m-%dT%H:%MZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "weights: photon $weights${quant:+ (${quant[*]})}, llama.cpp $outtype"
  echo "CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $cores physical cores, $threads threads used"
  if [ "$(git -C "$peer_src" rev-parse --show-toplevel 2>/dev/null)" = "$peer_src" ]; then  # its own repository
    echo "llama.cpp: $(git -C "$peer_src" log -1 --format='%h %cs')"
  else
    echo "llama.cpp: $(cat "$peer_src/VERSION" 2>/dev/null || echo "unknown (not a git checkout)")"
  fi
} | tee "$summary"

echo "== building llama.cpp (CPU backend) in $work/llama-build"
cmake -S "$peer_src" -B "$work/llama-build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_CUDA=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_SERVER=OFF \
  >"$out/llama-build.log" 2>&1
cmake --build "$work/llama-build" --target llama-bench llama-batched-bench --parallel "$(nproc)" \
  >>"$out/llama-build.log" 2>&1
lbin=$work/llama-build/bin

ckpt=$work/llama-3.2-1b-random
if [ ! -f "$ckpt/model.safetensors" ]; then
  echo "== writing a random Llama-3.2-1B-shaped bf16 checkpoint to $ckpt"
  python3 - "$ckpt" "$tok_cache/llama3_2" <<'PY'
import shutil, sys, torch, transformers
out, tok = sys.argv[1], sys.argv[2]
cfg = transformers.LlamaConfig(
    vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
    num_key_value_heads=8, head_dim=64, max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=500000.0,
    rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 8192},
    tie_word_embeddings=True, bos_token_id=128000, eos_token_id=128001, torch_dtype="bfloat16")
torch.manual_seed(0)
model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
model.save_pretrained(out, safe_serialization=True)
for f in ("tokenizer.json", "tokenizer_config.json"):
    shutil.copy(f"{tok}/{f}", f"{out}/{f}")
PY
fi
gguf=$work/llama-3.2-1b-random-$outtype.gguf
if [ ! -f "$gguf" ]; then
  echo "== converting it to $gguf"
  python3 "$peer_src/convert_hf_to_gguf.py" "$ckpt" --outtype "$outtype" --outfile "$gguf" >"$out/convert.log" 2>&1
fi

export OMP_NUM_THREADS=$threads
pbench() {  # NAME ARGS...: one photon bench run, JSON to OUTDIR/NAME.json
  local name=$1
  shift
  "$photon" bench --model "$ckpt" --device cpu --threads "$threads" "${quant[@]}" "$@" --json >"$out/$name.log" 2>&1
  tail -1 "$out/$name.log" >"$out/$name.json"
}
photon_set() {  # SUFFIX: the three photon workloads (two prompt runs, the faster counts)
  pbench "photon-pp512$1" --num-prompts 1 --input-len 512 --output-len 1
  pbench "photon-pp512$1-2" --num-prompts 1 --input-len 512 --output-len 1
  pbench "photon-tg64$1" --num-prompts 1 --input-len 8 --output-len 64
  pbench "photon-16x32$1" --num-prompts 16 --input-len 32 --output-len 32
}
echo "== llama.cpp"
"$lbin/llama-bench" -m "$gguf" -t "$threads" -p 512 -n 64 -r 3 -o json >"$out/llama-bench.json" 2>"$out/llama-bench.log"
"$lbin/llama-batched-bench" -m "$gguf" -t "$threads" -c 2048 -b 512 -ub 512 -npp 32 -ntg 32 -npl 16 \
  --output-format jsonl >"$out/llama-batched.log" 2>&1
grep '^{' "$out/llama-batched.log" | tail -1 >"$out/llama-batched.json"
echo "== photon (OpenMP's default placement, as llama.cpp's threads are left to the scheduler)"
photon_set ""
echo "== batch-1 decode, photon and llama.cpp in turn"
for rep in 1 2 3; do
  pbench "photon-tg64-$rep" --num-prompts 1 --input-len 8 --output-len 64
  "$lbin/llama-bench" -m "$gguf" -t "$threads" -p 0 -n 64 -r 1 -o json >"$out/llama-tg64-$rep.json" 2>>"$out/llama-bench.log"
done
echo "== photon, threads pinned one per core (OMP_PROC_BIND=close OMP_PLACES=cores)"
OMP_PROC_BIND=close OMP_PLACES=cores photon_set "-pinned"

python3 - "$out" >>"$summary" <<'PY'
import json, sys
out = sys.argv[1]
j = lambda n: json.load(open(f"{out}/{n}.json"))
lb = {("pp" if t["n_prompt"] else "tg"): t["avg_ts"] for t in j("llama-bench")}
bb = j("llama-batched")
def figures(suffix):
    pp = max(512 / (j(f"photon-pp512{suffix}{r}")["ttft_ms"]["p50"] / 1e3) for r in ("", "-2"))
    b16 = j(f"photon-16x32{suffix}")
    return [pp, 1e3 / j(f"photon-tg64{suffix}")["tpot_ms"]["p50"], 16 * 1e3 / b16["tpot_ms"]["p50"],
            b16["total_tok_per_s"]]
plain, pinned = figures(""), figures("-pinned")
names = ["prompt of 512 tokens (tok/s)", "batch-1 decode (tok/s)", "16 x (32, 32): decode (out tok/s)",
         "16 x (32, 32): whole run (total tok/s)"]
peer = [lb["pp"], lb["tg"], bb["speed_tg"], bb["speed"]]
print("\n| work | photon | photon, pinned | llama.cpp | ratio | ratio, pinned |\n| --- | --- | --- | --- | --- | --- |")
for name, a, p, b in zip(names, plain, pinned, peer):
    print(f"| {name} | {a:,.1f} | {p:,.1f} | {b:,.1f} | {a / b:.2f}x | {p / b:.2f}x |")
mine = sorted([1e3 / j(f"photon-tg64{r}")["tpot_ms"]["p50"] for r in ("", "-1", "-2", "-3")])
theirs = sorted([lb["tg"]] + [j(f"llama-tg64-{r}")[0]["avg_ts"] for r in (1, 2, 3)])
med = lambda v: (v[1] + v[2]) / 2
print(f"\nbatch-1 decode, four runs each (tok/s): photon {', '.join(f'{v:.1f}' for v in mine)}; llama.cpp "
      f"{', '.join(f'{v:.1f}' for v in theirs)}; medians {med(mine):.1f} vs {med(theirs):.1f} = "
      f"**{med(mine) / med(theirs):.2f}x**")
PY
cat "$summary"
