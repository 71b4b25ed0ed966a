#!/usr/bin/env bash
# One command for the GPU machine: build with CUDA on all cores, run every test (CUDA ones included), run
# compute-sanitizer memcheck and racecheck over the CUDA tests, run the accuracy script against transformers
# (tools/parity/gpu_parity.py), measure the HBM roofline and run the standard benchmark set (plus tensor-parallel
# runs where there are several GPUs). Writes OUTDIR/summary.md, OUTDIR/results.jsonl and the logs.
# Usage: scripts/gpu-check.sh OUTDIR [BENCH_FILTER]
# GPU_CHECK_STEPS (default "test sanitize parity bench") picks steps; the build always runs (incrementally).
# Other steps: "tp" (the tensor-parallel tests alone), "profile" (per-kernel GPU time under Nsight Compute for a
# few benchmark shapes, tables in OUTDIR/profile-*.md) and "timeline" (the batch-1 decode step's kernel chain from a
# PHOTON_KERNEL_TRACE build, tables in OUTDIR/timeline-*.md).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu-check.sh OUTDIR}
filter=${2:-}
steps=${GPU_CHECK_STEPS:-test sanitize parity bench}  # "tp" runs only the tensor-parallel tests
mkdir -p "$out"
build=build-gpu
results="$out/results.jsonl"
: >"$results"
summary="$out/summary.md"
status=0
note() { echo "$*" | tee -a "$summary"; }
want() { [[ " $steps " == *" $1 "* ]]; }
: >"$summary"
note "# gpu-check $(date -u +%Y-%m-%dT%H:%MZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | sed 's/^/GPU: /' | tee -a "$summary"
gpus=$(nvidia-smi -L | grep -c '^GPU')
# NVLink multicast (NVLS) stays off on shared hosts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

# Headers the GPU machine's image lacks (PCRE2, utf8proc) come as Debian packages carried in .deps/
# (scripts/fetch-gpu-deps.sh), unpacked into a private prefix, never into /.
if ! pkg-config --exists libpcre2-8 libutf8proc 2>/dev/null && ls .deps/*.deb >/dev/null 2>&1; then
  prefix=/tmp/photon-deps
  for deb in .deps/*.deb; do dpkg -x "$deb" "$prefix"; done
  export PKG_CONFIG_SYSROOT_DIR=$prefix
  export PKG_CONFIG_PATH=$prefix/usr/lib/x86_64-linux-gnu/pkgconfig
  export LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  note "dependencies: PCRE2 and utf8proc unpacked from .deps into $prefix"
fi

# NCCL: the CUDA toolkit's if it has one, else the one PyTorch's pip wheels bring.
nccl_root=
if [ ! -e /usr/local/cuda/include/nccl.h ] && [ ! -e /usr/include/nccl.h ]; then
  nccl_root=$(python3 -c "import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])" 2>/dev/null)
  [ -n "$nccl_root" ] && export LD_LIBRARY_PATH=$nccl_root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
note "GPUs: $gpus; NCCL: ${nccl_root:-system}"

t0=$(date +%s)
if ! { cmake -S . -B "$build" -G Ninja -DPHOTON_CUDA=ON -DPHOTON_CUDA_ARCHS=90a -DCMAKE_BUILD_TYPE=Release \
         ${nccl_root:+-DNCCL_ROOT=$nccl_root} &&
       cmake --build "$build" --parallel "$(nproc)"; } >"$out/build.log" 2>&1; then
  note "BUILD FAILED (see build.log)"; tail -30 "$out/build.log"; exit 1
fi
note "build: $(( $(date +%s) - t0 )) s"

grep -m1 "NCCL" "$out/build.log" | tee -a "$summary"
if want tp; then
  timeout 90 "$build/bin/photon_tests" "[tp]" >"$out/tp-tests.log" 2>&1
  note "tensor-parallel GPU tests (exit $?): $(grep -E 'test cases|skipped|All tests' "$out/tp-tests.log" | tail -2 | tr '\n' ' ')"
  if [ "$gpus" -ge 2 ]; then
    # One process per GPU (NCCL joined through the unique id) must give the tokens of one process with two threads.
    args=(generate --model tests/data/parity/llama3-gqa-tied-ropescaled --device cuda --prompt-ids 1,2,3,4,5,6,7,8,9
          --max-tokens 16 --ignore-eos --json --tensor-parallel-size 2)
    threads=$(timeout 60 "$build/bin/photon" "${args[@]}" 2>&1 | grep -o '"output_ids":\[[0-9,]*\]')
    PHOTON_RANK=1 timeout 60 "$build/bin/photon" "${args[@]}" --dist-init-addr 127.0.0.1:29511 >"$out/tp-worker.log" 2>&1 &
    procs=$(timeout 60 "$build/bin/photon" "${args[@]}" --dist-init-addr 127.0.0.1:29511 --rank 0 2>&1 |
            grep -o '"output_ids":\[[0-9,]*\]')
    wait $!
    worker_rc=$?
    if [ -n "$threads" ] && [ "$threads" = "$procs" ] && [ "$worker_rc" -eq 0 ]; then
      note "two processes (NCCL unique-id bootstrap) give the tokens of two threads: $procs"
    else
      status=1; note "two-process TP FAILED (worker exit $worker_rc): threads $threads, processes $procs"
    fi
  fi
fi
if want test; then
  t0=$(date +%s)
  if timeout 300 ctest --test-dir "$build" --output-on-failure --parallel 4 >"$out/ctest.log" 2>&1; then
    note "ctest: $(grep -m1 'tests passed' "$out/ctest.log") ($(( $(date +%s) - t0 )) s)"
  else
    status=1; note "ctest FAILED:"; grep -E "Failed|FAILED|\*\*\*" "$out/ctest.log" | head -20 | tee -a "$summary"
    grep -B2 -A12 "FAILED:" "$out/ctest.log" | head -80
  fi
  "$build/bin/photon_tests" "[cuda]" 2>&1 | grep -E "mean .delta|greedy prefix" | tee -a "$summary"
fi
if want sanitize; then
  # Single-GPU CUDA tests (the NCCL ones use several processes' worth of GPU state the tools do not model).
  for tool in memcheck racecheck; do
    t0=$(date +%s)
    if ! command -v compute-sanitizer >/dev/null; then note "$tool: compute-sanitizer not found"; continue; fi
    if timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 "$build/bin/photon_tests" "[cuda]~[tp]" \
         >"$out/$tool.log" 2>&1; then
      note "$tool: clean ($(( $(date +%s) - t0 )) s)"
    else
      status=1; note "$tool FAILED (exit $?):"; grep -m20 -E "Invalid|ERROR|error|hazard" "$out/$tool.log" | tee -a "$summary"
      # Name the cases: each on its own under the tool (a failed assertion under it counts too).
      "$build/bin/photon_tests" "[cuda]~[tp]" --list-tests --verbosity quiet | while IFS= read -r case; do
        spec=$(printf '%s' "$case" | sed 's/[],[\\*]/\\&/g')  # a name as a test spec: , [ ] * \ escaped
        if ! timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 "$build/bin/photon_tests" "$spec" \
             >"$out/$tool-case.log" 2>&1; then
          note "  $tool fails in: $case"
          grep -m5 -E "Invalid|ERROR|hazard|FAILED|with expansion" "$out/$tool-case.log" | tee -a "$summary"
        fi
      done
    fi
  done
fi
if want parity; then
  # 512 positions (with tensor parallelism where there are several GPUs), then one long prompt of 8,192 positions:
  # the accuracy of chunked prefill and of decode attention far into the context.
  for positions in 512 8192; do
    t0=$(date +%s)
    tp_args=(); [ "$gpus" -ge 2 ] && [ "$positions" -eq 512 ] && tp_args=(--tp 2)
    log="$out/parity-$positions.log"
    if PYTHONUNBUFFERED=1 timeout 300 python3 tools/parity/gpu_parity.py --photon "$build/bin/photon" \
         --workdir /tmp/photon-parity --positions "$positions" --out "$out/parity-$positions.jsonl" "${tp_args[@]}" \
         >"$log" 2>&1; then
      note "parity vs transformers float32 ($(( $(date +%s) - t0 )) s), mean |delta logprob| over $positions positions:"
    else
      status=1; note "parity at $positions positions FAILED (exit $?; ratio above 1.25, or an error: see $log):"
    fi
    grep "^|" "$log" | tee -a "$summary"
    grep -E "^\[|Error|error" "$log" | tail -12
  done
  rm -rf /tmp/photon-parity
fi
if want profile; then
  profile() {  # profile NAME ARGS...: kernel time table of one photon bench run
    local name=$1
    shift
    [ -n "$filter" ] && ! grep -qE -- "$filter" <<<"$name" && return
    if timeout 200 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --log-file "/tmp/ncu-$name.csv" \
         "$build/bin/photon" bench --device cuda "$@" >"$out/profile-$name.log" 2>&1 &&
       python3 tools/profile/kernel_table.py "/tmp/ncu-$name.csv" >"$out/profile-$name.md"; then
      note "profile $name ($*): $(tail -1 "$out/profile-$name.md")"
    else
      note "profile $name FAILED: $(tail -3 "$out/profile-$name.log" | tr '\n' ' ')"
    fi
    rm -f "/tmp/ncu-$name.csv"
  }
  # ncu serialises and instruments every launch (milliseconds each), so long runs are sampled: --launch-skip and
  # --launch-count pick a window of the run (a few steps of one phase).
  profile llama1b-b1 --model dummy:llama-3.2-1b --num-prompts 1 --input-len 128 --output-len 8
  profile llama1b-256x2048-decode --model dummy:llama-3.2-1b --num-prompts 256 --input-len 2048 --output-len 2 --max-num-batched-tokens 65536
  profile llama1b-256x2048-prefill --model dummy:llama-3.2-1b --num-prompts 64 --input-len 2048 --output-len 1
fi
if want timeline; then
  # The decode step's kernel chain as it runs (CUDA graph, PDL): a second build that stamps every kernel's PDL wait
  # (PHOTON_KERNEL_TRACE, src/cuda/kernel_trace.hpp), one batch-1 run per model, a table per model.
  t0=$(date +%s)
  if cmake -S . -B build-trace -G Ninja -DPHOTON_CUDA=ON -DPHOTON_CUDA_ARCHS=90a -DCMAKE_BUILD_TYPE=Release \
       -DPHOTON_KERNEL_TRACE=ON -DPHOTON_BUILD_TESTS=OFF -DPHOTON_BUILD_BENCH=OFF ${nccl_root:+-DNCCL_ROOT=$nccl_root} \
       >"$out/trace-build.log" 2>&1 && cmake --build build-trace --target photon_cli --parallel "$(nproc)" >>"$out/trace-build.log" 2>&1; then
    for model in qwen3-0.6b llama-3.2-1b; do
      [ -n "$filter" ] && ! grep -qE -- "$filter" <<<"timeline-$model" && continue
      PHOTON_KERNEL_TRACE=/tmp/photon-$model.trace build-trace/bin/photon bench --model "dummy:$model" --device cuda \
        --num-prompts 1 --input-len 128 --output-len 256 >"$out/timeline-$model.log" 2>&1 &&
        python3 tools/profile/kernel_timeline.py /tmp/photon-$model.trace >"$out/timeline-$model.md" 2>&1
      note "timeline $model (exit $?): $(sed -n 's/^per layer: //p' "$out/timeline-$model.md")"
      rm -f /tmp/photon-$model.trace
    done
  else
    status=1; note "trace build FAILED (see trace-build.log)"
  fi
  note "timeline: $(( $(date +%s) - t0 )) s"
fi
want bench || exit $status

"$build/bin/photon_hbm_bandwidth" | tee -a "$results"
hbm=$(tail -1 "$results" | python3 -c "import json,sys; print(json.load(sys.stdin)['hbm_copy_gb_per_s'])" 2>/dev/null || echo 0)
note "HBM copy bandwidth (read + write): $hbm GB/s"
# The decode matmul kernels alone, at the models' projection shapes (weights read per second).
if [ -z "$filter" ] || grep -qE -- "$filter" <<<"gemv"; then
  "$build/bin/photon_gemv_bandwidth" 1 4 8 16 >"$out/gemv.jsonl" 2>&1
  python3 - "$out/gemv.jsonl" <<'PY' | tee -a "$summary"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
ms = sorted({r["m"] for r in rows})
print("| GEMV (weights streamed) | M=" + " | M=".join(str(m) for m in ms) + " |")
print("| --- |" + " --- |" * len(ms))
def key_of(r):
    return (r["model"], r["matrix"], r.get("weights", "bf16"), r.get("kernel", "gemv"), r["rows"], r["k"])
for key in dict.fromkeys(key_of(r) for r in rows):
    by_m = {r["m"]: r for r in rows if key_of(r) == key}
    cells = [f'{by_m[m]["us"]:.1f} us, {by_m[m]["gb_per_s"]:.0f} GB/s' if m in by_m else "-" for m in ms]
    print(f"| {key[0]} {key[1]} {key[2]} {key[3]} {key[4]}x{key[5]} | " + " | ".join(cells) + " |")
PY
fi

# Decode attention alone (keys and values read per second) at batch 1 over short and long contexts and at batch 64.
if [ -z "$filter" ] || grep -qE -- "$filter" <<<"attention"; then
  "$build/bin/photon_attention_bandwidth" 1x384 1x8192 1x32768 64x4096 1024x192 >"$out/attention.jsonl" 2>&1
  python3 - "$out/attention.jsonl" "$hbm" <<'PY' | tee -a "$summary"
import json, sys
hbm = float(sys.argv[2])
print("| decode attention | batch x context | splits | us | KV GB/s | of HBM copy |")
print("| --- | --- | --- | --- | --- | --- |")
for l in open(sys.argv[1]):
    if not l.startswith("{"):
        print(l.strip()); continue
    r = json.loads(l)
    print(f'| {r["model"]} | {r["batch"]}x{r["context"]} | {r["splits"]} | {r["us"]:.1f} | {r["gb_per_s"]:.0f} | '
          f'{100 * r["gb_per_s"] / hbm:.0f}% |' if hbm > 0 else "")
PY
fi

# Prompt attention alone (causal tensor-core work per second): one 8192-token chunk as 4 x 2048 and 8 x 1024 prompts
# and as one prompt.
if [ -z "$filter" ] || grep -qE -- "$filter" <<<"prefill-attention"; then
  "$build/bin/photon_prefill_attention" 4x2048 8x1024 1x8192 >"$out/prefill-attention.jsonl" 2>&1
  python3 - "$out/prefill-attention.jsonl" <<'PY' | tee -a "$summary"
import json, sys
print("| prompt attention | prompts x tokens | us | TFLOP/s |")
print("| --- | --- | --- | --- |")
for l in open(sys.argv[1]):
    if not l.startswith("{"):
        print(l.strip()); continue
    r = json.loads(l)
    print(f'| {r["model"]} | {r["seqs"]}x{r["len"]} | {r["us"]:.1f} | {r["tflops"]:.1f} |')
PY
fi

# The tensor-parallel all-reduce alone: microseconds per call at decode message sizes, peer path vs NCCL.
if [ "$gpus" -ge 2 ] && { [ -z "$filter" ] || grep -qE -- "$filter" <<<"all_reduce"; }; then
  timeout 120 "$build/bin/photon_all_reduce_latency" 8192 16384 65536 262144 1048576 >"$out/all_reduce.jsonl" 2>&1
  python3 - "$out/all_reduce.jsonl" <<'PY' | tee -a "$summary"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
for size in dict.fromkeys(r["bytes"] for r in rows):
    cells = ", ".join(f'{r["path"]} {r["us"]:.1f} us' for r in rows if r["bytes"] == size)
    print(f"- all-reduce of {size} bytes over {rows[0]['gpus']} GPUs: {cells}")
PY
fi

bench() {  # bench NAME TIMEOUT_S ARGS...
  local name=$1 limit=$2
  shift 2
  [ -n "$filter" ] && ! grep -qE -- "$filter" <<<"$name" && return
  local line rc tmp
  tmp=$(mktemp)
  timeout "$limit" "$build/bin/photon" bench --device cuda --json "$@" >"$tmp" 2>"$tmp.err"
  rc=$?
  line=$(tail -1 "$tmp")
  { echo "== $name (exit $rc): $*"; cat "$tmp" "$tmp.err"; } >>"$out/bench.log"
  if [ "$rc" -eq 0 ] && [ -n "$line" ]; then
    echo "{\"name\":\"$name\",\"args\":\"$*\",\"result\":$line}" >>"$results"
    python3 - "$name" "$line" "$hbm" <<'PY' | tee -a "$summary"
import json, sys
name, r, hbm = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3])
roof = ""
if r["num_prompts"] == 1 and hbm > 0:
    # Batch-1 decode reads every weight byte per token: the roofline is bandwidth / weight bytes (each of N
    # tensor-parallel GPUs reads its 1/N).
    cap = hbm * 1e9 * r.get("tensor_parallel_size", 1) / r["weight_bytes"]
    roof = f", roofline {cap:.0f} tok/s ({100 * r['output_tok_per_s'] / cap:.0f}%)"
    if r["input_len"] >= 2048 and r.get("kv_bytes_per_token") and r["tpot_ms"]["p50"]:
        # Long contexts: each step also reads the context's keys and values (on average input + output / 2
        # tokens); decode speed from the median time per output token, against weights + KV over bandwidth.
        ctx = r["input_len"] + r["output_len"] / 2
        cap_kv = hbm * 1e9 * r.get("tensor_parallel_size", 1) / (r["weight_bytes"] + ctx * r["kv_bytes_per_token"])
        decode = 1e3 / r["tpot_ms"]["p50"]
        roof += f"; decode {decode:.0f} tok/s, roofline with KV {cap_kv:.0f} tok/s ({100 * decode / cap_kv:.0f}%)"
print(f"- {name}: {r['output_tok_per_s']:.1f} out tok/s, {r['total_tok_per_s']:.1f} total tok/s, "
      f"TTFT p50/p90/p99 {r['ttft_ms']['p50']:.1f}/{r['ttft_ms']['p90']:.1f}/{r['ttft_ms']['p99']:.1f} ms, "
      f"TPOT p50 {r['tpot_ms']['p50'] if r['tpot_ms']['p50'] is not None else float('nan'):.2f} ms{roof}")
PY
  else
    status=1; note "- $name: FAILED (exit $rc; 124 is a timeout after $limit s): $(tail -3 "$tmp.err" | tr '\n' ' ')"
  fi
  rm -f "$tmp" "$tmp.err"
}
bench llama1b-b1 120 --model dummy:llama-3.2-1b --num-prompts 1 --input-len 128 --output-len 256
bench qwen06b-b1 120 --model dummy:qwen3-0.6b --num-prompts 1 --input-len 128 --output-len 256
bench llama8b-b1 180 --model dummy:llama-3.1-8b --num-prompts 1 --input-len 128 --output-len 256
bench llama1b-1024x128 240 --model dummy:llama-3.2-1b --num-prompts 1024 --input-len 128 --output-len 128
# Long contexts: batch-1 decode after prompts of 8,192 and 32,768 tokens (the first TTFT is one long prompt's).
bench llama1b-b1-ctx8k 180 --model dummy:llama-3.2-1b --num-prompts 1 --input-len 8192 --output-len 256
bench llama1b-b1-ctx32k 240 --model dummy:llama-3.2-1b --num-prompts 1 --input-len 32768 --output-len 256
bench llama1b-64x4096 300 --model dummy:llama-3.2-1b --num-prompts 64 --input-len 4096 --output-len 128
# The same with sampling (temperature 0.8, top-p 0.95: selected on the GPU), against greedy above.
bench llama1b-1024x128-topp 240 --model dummy:llama-3.2-1b --num-prompts 1024 --input-len 128 --output-len 128 \
  --temperature 0.8 --top-p 0.95
# And with penalties on top (applied on the GPU over each request's prompt and output tokens).
bench llama1b-1024x128-penalties 240 --model dummy:llama-3.2-1b --num-prompts 1024 --input-len 128 --output-len 128 \
  --temperature 0.8 --top-p 0.95 --repetition-penalty 1.1 --presence-penalty 0.2 --frequency-penalty 0.2
bench llama1b-256x2048 300 --model dummy:llama-3.2-1b --num-prompts 256 --input-len 2048 --output-len 128
bench qwen06b-1024x128 240 --model dummy:qwen3-0.6b --num-prompts 1024 --input-len 128 --output-len 128
bench llama8b-256x1024 420 --model dummy:llama-3.1-8b --num-prompts 256 --input-len 1024 --output-len 128
# Int8 weights (group 128, quantized at load): batch 1 against the int8 bytes roofline, then the batch shapes.
bench llama1b-b1-int8 120 --model dummy:llama-3.2-1b --num-prompts 1 --input-len 128 --output-len 256 --quantization int8
bench llama1b-b1-int8-lmhead 120 --model dummy:llama-3.2-1b --num-prompts 1 --input-len 128 --output-len 256 \
  --quantization int8 --quantize-lm-head
bench qwen06b-b1-int8 120 --model dummy:qwen3-0.6b --num-prompts 1 --input-len 128 --output-len 256 --quantization int8
bench llama8b-b1-int8 180 --model dummy:llama-3.1-8b --num-prompts 1 --input-len 128 --output-len 256 --quantization int8
# Small batches (4 and 16 requests in flight: decode steps of 4 and 16 rows), bf16 and int8.
bench llama1b-4x128 120 --model dummy:llama-3.2-1b --num-prompts 4 --input-len 128 --output-len 256
bench llama1b-4x128-int8 120 --model dummy:llama-3.2-1b --num-prompts 4 --input-len 128 --output-len 256 \
  --quantization int8
bench llama1b-16x128 120 --model dummy:llama-3.2-1b --num-prompts 16 --input-len 128 --output-len 256
bench llama1b-16x128-int8 120 --model dummy:llama-3.2-1b --num-prompts 16 --input-len 128 --output-len 256 \
  --quantization int8
bench llama8b-4x128 180 --model dummy:llama-3.1-8b --num-prompts 4 --input-len 128 --output-len 256
bench llama8b-4x128-int8 180 --model dummy:llama-3.1-8b --num-prompts 4 --input-len 128 --output-len 256 \
  --quantization int8
bench llama1b-1024x128-int8 240 --model dummy:llama-3.2-1b --num-prompts 1024 --input-len 128 --output-len 128 \
  --quantization int8
bench llama1b-256x2048-int8 300 --model dummy:llama-3.2-1b --num-prompts 256 --input-len 2048 --output-len 128 \
  --quantization int8
if [ "$gpus" -ge 2 ]; then
  bench llama8b-b1-tp2 240 --model dummy:llama-3.1-8b --num-prompts 1 --input-len 128 --output-len 256 \
    --tensor-parallel-size 2
  # The same with every all-reduce through NCCL (no one-shot peer all-reduce), for comparison.
  bench llama8b-b1-tp2-nccl 240 --model dummy:llama-3.1-8b --num-prompts 1 --input-len 128 \
    --output-len 256 --tensor-parallel-size 2 --disable-custom-all-reduce
  # The same with one process per GPU: rank 1 serves in the background, rank 0 runs the benchmark.
  if [ -z "$filter" ] || grep -qE -- "$filter" <<<"llama8b-b1-tp2-procs"; then
    PHOTON_RANK=1 timeout 240 "$build/bin/photon" bench --device cuda --model dummy:llama-3.1-8b --num-prompts 1 \
      --input-len 128 --output-len 256 --tensor-parallel-size 2 --dist-init-addr 127.0.0.1:29512 \
      >"$out/tp-procs-worker.log" 2>&1 &
    bench llama8b-b1-tp2-procs 240 --model dummy:llama-3.1-8b --num-prompts 1 --input-len 128 --output-len 256 \
      --tensor-parallel-size 2 --dist-init-addr 127.0.0.1:29512 --rank 0
    wait
  fi
fi
exit $status
