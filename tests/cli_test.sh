#!/usr/bin/env bash
# The photon CLI as a user meets it: help, errors naming the bad flag, JSON output and statistics.
set -uo pipefail
photon=$1
data=$2
failures=0
pass=0

check() {  # check NAME EXPECTED_EXIT PATTERN -- command...
  local name=$1 want_rc=$2 pattern=$3
  shift 4
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$want_rc" ] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL: $name (exit $rc, wanted $want_rc; pattern '$pattern')"
    echo "$out" | tail -5
    failures=$((failures + 1))
  else
    pass=$((pass + 1))
  fi
}

check "top-level help" 0 "generate" -- "$photon" --help
check "version" 0 "^photon [0-9]+\.[0-9]+\.[0-9]+" -- "$photon" --version
check "unknown command" 2 "unknown command 'frobnicate'" -- "$photon" frobnicate
check "generate help lists every flag" 0 "--prompt-logprobs K" -- "$photon" generate --help
check "unknown flag" 2 "unknown option '--frob'" -- "$photon" generate --frob
check "missing model" 2 "'--model' is required" -- "$photon" generate --prompt-ids 1
check "bad max-tokens" 2 "'--max-tokens' needs an integer" -- "$photon" generate --model dummy:tiny-llama3 --prompt-ids 1 --max-tokens -3
check "bad prompt ids" 2 "'--prompt-ids' needs comma-separated" -- "$photon" generate --model dummy:tiny-llama3 --prompt-ids 1,x
check "bad device" 2 "'--device' must be cpu, cuda or cuda:N" -- "$photon" generate --model dummy:tiny-llama3 --prompt-ids 1 --device tpu
check "unknown preset" 1 "unknown dummy model 'nope'" -- "$photon" generate --model dummy:nope --prompt-ids 1
check "missing folder" 1 "config.json' not found" -- "$photon" generate --model /nonexistent --prompt-ids 1
check "id out of vocab" 1 "outside the vocabulary" -- "$photon" generate --model dummy:tiny-llama3 --prompt-ids 1,999999
check "value missing" 2 "needs a value" -- "$photon" generate --model
check "context overflow" 1 "more than max_model_len" -- "$photon" generate --model dummy:tiny-qwen3 --prompt-ids 1 --max-tokens 50000

# JSON output: the last stdout line is one object with the documented fields.
json=$("$photon" generate --model dummy:tiny-qwen3 --prompt-ids 1,2,3,4 --max-tokens 5 --ignore-eos \
        --prompt-logprobs 2 --logprobs 3 --json 2>/dev/null | tail -1)
if python3 - "$json" <<'PY'
import json, sys
o = json.loads(sys.argv[1])
assert o["prompt_ids"] == [1, 2, 3, 4], o["prompt_ids"]
assert len(o["output_ids"]) == 5 and o["finish_reason"] == "length"
pl = o["prompt_logprobs"]
assert pl[0] is None and len(pl) == 4
for i, e in enumerate(pl[1:], 1):
    assert e["token"] == o["prompt_ids"][i] and len(e["top"]) == 2 and e["logprob"] <= 0
    assert e["top"][0][1] >= e["top"][1][1]
assert len(o["logprobs"]) == 5
for tok, e in zip(o["output_ids"], o["logprobs"]):
    assert e["token"] == tok and len(e["top"]) == 3
    assert e["top"][0][0] == tok  # greedy picks the top entry
PY
then pass=$((pass + 1)); else echo "FAIL: generate --json fields"; failures=$((failures + 1)); fi

# Greedy decoding is deterministic and --stats reports weight_bytes on the last stderr line.
a=$("$photon" generate --model dummy:tiny-llama3 --prompt-ids 5,6,7 --max-tokens 4 --ignore-eos --json 2>/dev/null | tail -1)
b=$("$photon" generate --model dummy:tiny-llama3 --prompt-ids 5,6,7 --max-tokens 4 --ignore-eos --json --stats 2>"${TMPDIR:-/tmp}/photon_stats.$$" | tail -1)
stats=$(tail -1 "${TMPDIR:-/tmp}/photon_stats.$$"); rm -f "${TMPDIR:-/tmp}/photon_stats.$$"
if [ "$a" = "$b" ] && python3 -c "import json,sys; s=json.loads(sys.argv[1]); assert s['weight_bytes'] > 16e6" "$stats"; then
  pass=$((pass + 1))
else
  echo "FAIL: determinism or --stats ($stats)"; failures=$((failures + 1))
fi

# A real checkpoint folder, and the same folder as --load-format dummy.
ckpt=$(ls -d "$data"/parity/*/ | head -1)
check "checkpoint folder" 0 '"finish_reason"' -- "$photon" generate --model "$ckpt" --prompt-ids 1,2 --max-tokens 2 --json
check "load-format dummy" 0 '"finish_reason"' -- "$photon" generate --model "$ckpt" --load-format dummy --prompt-ids 1,2 --max-tokens 2 --json
check "bad load-format" 2 "'--load-format' must be" -- "$photon" generate --model "$ckpt" --load-format gguf --prompt-ids 1

# A folder holding only config.json: dummy weights on request, else an error that says how to get them.
only_config=$(mktemp -d)
cp "$ckpt/config.json" "$only_config/"
check "config-only folder, dummy" 0 '"finish_reason"' -- "$photon" generate --model "$only_config" --load-format dummy --prompt-ids 3 --max-tokens 1 --json
check "config-only folder" 1 "no model.safetensors.*--load-format dummy" -- "$photon" generate --model "$only_config" --prompt-ids 3
echo '{"architectures": ["LlamaForCausalLM"], "vocab_size": 10' > "$only_config/config.json"
check "malformed config.json" 1 "config.json: not well-formed JSON" -- "$photon" generate --model "$only_config" --load-format dummy --prompt-ids 3
rm -rf "$only_config"

# Batch mode: every reference prompt twice under tight KV and token budgets; greedy ids must equal transformers'
# (float32 on the CPU: a GPU's bf16 may pick other tokens, and its two processes below would need two GPUs).
ref_dir="$data/parity/llama3-gqa-tied-ropescaled"
reqs=$(mktemp)
python3 - "$ref_dir/reference.json" >"$reqs" <<'PY'
import json, sys
ref = json.load(open(sys.argv[1]))
for copy in range(2):
    for c in ref["cases"]:
        print(json.dumps({"prompt_ids": c["prompt_ids"], "max_tokens": 24, "ignore_eos": True, "temperature": 0}))
PY
batch_err=$(mktemp)
batch_out=$("$photon" generate --model "$ref_dir" --device cpu --requests "$reqs" --block-size 4 --num-kv-blocks 24 \
            --max-model-len 64 --max-num-batched-tokens 16 --max-num-seqs 8 --stats 2>"$batch_err")
if python3 - "$ref_dir/reference.json" "$batch_out" "$(tail -1 "$batch_err")" <<'PY'
import json, sys
ref = json.load(open(sys.argv[1]))
lines = [json.loads(l) for l in sys.argv[2].splitlines()]
stats = json.loads(sys.argv[3])
assert len(lines) == 6, len(lines)
for i, o in enumerate(lines):
    c = ref["cases"][i % 3]
    assert o["prompt_ids"] == c["prompt_ids"]
    assert o["output_ids"] == c["output_ids"], (i, o["output_ids"], c["output_ids"])
    assert o["finish_reason"] == "length"
for k in ("num_preemptions", "prefix_cache_hit_tokens", "num_steps", "weight_bytes"):
    assert k in stats, k
assert stats["num_preemptions"] > 0 and stats["prefix_cache_hit_tokens"] > 0 and stats["num_steps"] > 6
PY
then pass=$((pass + 1)); else echo "FAIL: batch mode"; cat "$batch_err" | tail -3; failures=$((failures + 1)); fi
printf '{"prompt_ids":[1,2]}\n{"prompt_ids":[1,2],"temperature":"hot"}\n' >"$reqs"
check "bad request line" 2 "$reqs:2: 'temperature' must be a number" -- "$photon" generate --model "$ref_dir" --requests "$reqs"
printf '{"prompt_ids":[1,2],"colour":1}\n' >"$reqs"
check "unknown request field" 2 "unknown field 'colour'" -- "$photon" generate --model "$ref_dir" --requests "$reqs"
printf '{"prompt_ids":[1,2]}\n{"prompt_ids":[1,2],"max_tokens":5000}\n' >"$reqs"
check "one rejected request" 0 'max_model_len.*"finish_reason":"error"' -- "$photon" generate --model "$ref_dir" --requests "$reqs"
check "both prompt forms" 2 "exactly one of" -- "$photon" generate --model "$ref_dir" --requests "$reqs" --prompt-ids 1
printf '{"prompt_ids":[1,2],"max_tokens":4,"temperature":0,"ignore_eos":true,"logit_bias":{"33":100}}\n' >"$reqs"
check "a logit bias" 0 '"output_ids":\[33,33,33,33\]' -- "$photon" generate --model "$ref_dir" --requests "$reqs"
printf '{"prompt_ids":[1,2],"logit_bias":{"-3":1}}\n' >"$reqs"
check "a bad logit bias" 2 "'logit_bias' must map token ids to numbers, not \"-3\": 1" -- \
  "$photon" generate --model "$ref_dir" --requests "$reqs"
rm -f "$reqs" "$batch_err"

# Tensor parallelism over two processes: rank 1 serves rank 0 over loopback; the tokens equal one process's.
port=$(python3 -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
tp_args=(generate --model "$ref_dir" --device cpu --prompt-ids 1,2,3,4,5,6,7,8,9,10 --max-tokens 12 --ignore-eos --json
         --tensor-parallel-size 2)
single=$("$photon" "${tp_args[@]}" 2>&1)
PHOTON_RANK=1 "$photon" "${tp_args[@]}" --dist-init-addr "127.0.0.1:$port" >/dev/null 2>&1 &
worker=$!
multi=$("$photon" "${tp_args[@]}" --dist-init-addr "127.0.0.1:$port" --rank 0 2>&1)
wait "$worker"
worker_rc=$?
if [ "$worker_rc" -eq 0 ] && [ -n "$single" ] && grep -q '"output_ids"' <<<"$single" &&
   [ "$(grep -o '"output_ids":\[[0-9,]*\]' <<<"$single")" = "$(grep -o '"output_ids":\[[0-9,]*\]' <<<"$multi")" ]; then
  pass=$((pass + 1))
else
  echo "FAIL: two-process tensor parallelism (worker exit $worker_rc)"; echo "$single" | tail -2; echo "$multi" | tail -2
  failures=$((failures + 1))
fi
check "rank without address" 2 "'--rank' needs '--dist-init-addr" -- "$photon" "${tp_args[@]}" --rank 1
check "rank out of range" 2 "'--rank'" -- "$photon" "${tp_args[@]}" --dist-init-addr "127.0.0.1:$port" --rank 2
check "address without size" 2 "needs '--tensor-parallel-size' of 2" -- "$photon" generate --model "$ref_dir" --prompt-ids 1 --dist-init-addr "127.0.0.1:$port" --rank 0
check "bad address" 1 "must be host:port" -- "$photon" "${tp_args[@]}" --dist-init-addr "nowhere" --rank 0
check "rank from the launcher" 2 "SLURM_PROCID is 'x'" -- env SLURM_PROCID=x "$photon" "${tp_args[@]}" --dist-init-addr "127.0.0.1:$port"

# tokenize / detokenize against the golden ids (when the tokenizer files have been fetched).
tok_dir="${PHOTON_TOKENIZER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/photon/tokenizers}/llama3"
if [ -f "$tok_dir/tokenizer.json" ]; then
  got=$(head -5 "$data/tokenizer/corpus.jsonl" | "$photon" tokenize --tokenizer "$tok_dir")
  want=$(head -5 "$data/tokenizer/llama3.golden.jsonl" | python3 -c "import json,sys; [print(json.dumps(json.loads(l)['ids'], separators=(',', ':'))) for l in sys.stdin]")
  if [ "$got" = "$want" ]; then pass=$((pass + 1)); else echo "FAIL: photon tokenize ids"; failures=$((failures + 1)); fi
  check "tokenize with BOS" 0 "^\[128000,9906\]" -- bash -c "echo '\"Hello\"' | '$photon' tokenize --tokenizer '$tok_dir' --add-special-tokens"
  check "detokenize" 0 '^"<\|begin_of_text\|>Hello world!"$' -- bash -c "echo '[128000,9906,1917,0]' | '$photon' detokenize --tokenizer '$tok_dir'"
  check "tokenize bad line" 1 "stdin line 2: expected one JSON string" -- bash -c "printf '\"ok\"\\n[1]\\n' | '$photon' tokenize --tokenizer '$tok_dir'"
  check "detokenize bad id" 1 "outside the vocabulary" -- bash -c "echo '[1,99999999]' | '$photon' detokenize --tokenizer '$tok_dir'"
  qwen_dir="$(dirname "$tok_dir")/qwen3"
  req=$(mktemp)
  printf '{"messages":[{"role":"user","content":"Hi"}],"add_generation_prompt":true,"extra":{"enable_thinking":false}}' >"$req"
  want=$(printf '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n'; echo x)
  got=$("$photon" template --tokenizer "$qwen_dir" --request "$req"; echo x)
  if [ "$got" = "$want" ]; then pass=$((pass + 1)); else echo "FAIL: photon template output"; failures=$((failures + 1)); fi
  printf '{"messages":"oops"}' >"$req"
  check "template bad request" 1 "messages must be a JSON array" -- "$photon" template --tokenizer "$qwen_dir" --request "$req"
  rm -f "$req"
  check "generate --chat" 0 '"prompt_ids":\[151644,872,198,9707' -- "$photon" generate --model dummy:tiny-qwen3 --tokenizer "$qwen_dir" --prompt Hello --chat --max-tokens 2 --json
  # perplexity: the chunks, BOS and scored positions of llama.cpp's method, checked against generate's prompt
  # logprobs of the same chunks built here (context 32: each chunk's positions 17..31 are scored).
  text="$data/tokenizer/corpus.jsonl"
  ppl=$("$photon" perplexity --model dummy:tiny-llama3 --tokenizer "$tok_dir" --file "$text" --context-len 32 \
        --max-chunks 3 --json 2>/dev/null | tail -1)
  ids=$(python3 -c 'import json,sys; print(json.dumps(open(sys.argv[1]).read()))' "$text" |
        "$photon" tokenize --tokenizer "$tok_dir" --add-special-tokens)
  reqs=$(mktemp)
  python3 -c '
import json, sys
ids = json.loads(sys.argv[1])
for c in range(3):
    chunk = [128000] + ids[c * 32 + 1:(c + 1) * 32]
    print(json.dumps({"prompt_ids": chunk, "prompt_logprobs": 0, "max_tokens": 1}))' "$ids" >"$reqs"
  gen=$("$photon" generate --model dummy:tiny-llama3 --requests "$reqs" 2>/dev/null)
  rm -f "$reqs"
  if python3 - "$ppl" "$gen" "$ids" <<'PY'; then pass=$((pass + 1)); else echo "FAIL: perplexity against generate: $ppl"; failures=$((failures + 1)); fi
import json, math, sys
r = json.loads(sys.argv[1])
lines = [json.loads(l) for l in sys.argv[2].splitlines()]
nll = [-e["logprob"] for o in lines for e in o["prompt_logprobs"][17:]]
assert len(lines) == 3 and len(nll) == 45, (len(lines), len(nll))
assert r["chunks"] == 3 and r["tokens_scored"] == 45 and r["context_len"] == 32, r
assert r["file_tokens"] == len(json.loads(sys.argv[3])), r
mean = sum(nll) / len(nll)
assert abs(r["mean_nll"] - mean) < 1e-4 * mean, (r["mean_nll"], mean)
assert abs(r["perplexity"] - math.exp(r["mean_nll"])) < 1e-9 * r["perplexity"], r
assert 0 < r["perplexity_stderr"] < r["perplexity"], r
assert r["quantization"] == "none" and r["device"] == "cpu", r
PY
  check "perplexity text output" 0 "^perplexity [0-9.]+ \+/- [0-9.]+ \(15 tokens scored in 1 chunk of 32" -- \
    "$photon" perplexity --model dummy:tiny-llama3 --tokenizer "$tok_dir" --file "$text" --context-len 32 --max-chunks 1
  check "perplexity text too short" 1 "holds 2 tokens, fewer than one chunk of 512" -- bash -c \
    "printf 'Hi' >/tmp/photon-ppl-short.txt && '$photon' perplexity --model dummy:tiny-llama3 --tokenizer '$tok_dir' --file /tmp/photon-ppl-short.txt"
else
  echo "SKIP: tokenizer CLI checks (run scripts/fetch-tokenizers.sh)"
fi
# photon bench: the JSON contract on a tiny CPU model (greedy and sampled), and its argument errors.
for extra in "" "--temperature 0.8 --top-k 20 --top-p 0.9" "--repetition-penalty 1.2 --presence-penalty 0.5 --frequency-penalty 0.3"; do
  # shellcheck disable=SC2086
  line=$("$photon" bench --model dummy:tiny-llama3 --device cpu --num-prompts 3 --input-len 5 --output-len 4 --json $extra 2>/dev/null | tail -1)
  if python3 - "$line" <<'PY'; then pass=$((pass + 1)); else echo "FAIL: photon bench --json $extra: $line"; failures=$((failures + 1)); fi
import json, sys
r = json.loads(sys.argv[1])
assert (r["num_prompts"], r["input_len"], r["output_len"]) == (3, 5, 4), r
for key in ("elapsed_s", "output_tok_per_s", "total_tok_per_s", "peak_device_bytes"):
    assert r[key] > 0, key
for key in ("ttft_ms", "tpot_ms"):
    assert set(r[key]) == {"p50", "p90", "p99"}, key
assert r["device"].startswith("cpu"), r["device"]
assert (r["max_num_seqs"], r["max_num_batched_tokens"]) == (256, 8192), r  # the CPU's defaults
assert abs(r["output_tok_per_s"] * r["elapsed_s"] - 12) < 1e-6 * 12 + 1e-9, r  # exactly 3 x 4 tokens
PY
done
# One output token (shorter than the warm-up's) fits the max_model_len the bench derives from the lengths.
line=$("$photon" bench --model dummy:tiny-llama3 --device cpu --num-prompts 2 --input-len 3 --output-len 2 --max-num-seqs 1 --max-num-batched-tokens 4 --json 2>/dev/null | tail -1)
if python3 -c 'import json, sys; r = json.loads(sys.argv[1]); assert (r["max_num_seqs"], r["max_num_batched_tokens"]) == (1, 4), r' "$line"; then
  pass=$((pass + 1))
else
  echo "FAIL: photon bench --max-num-seqs 1 --max-num-batched-tokens 4: $line"; failures=$((failures + 1))
fi
check "bench one output token" 0 "output tokens/s" -- "$photon" bench --model dummy:tiny-llama3 --device cpu --num-prompts 2 --input-len 8 --output-len 1
check "bench missing flag" 2 "'--input-len' is required" -- "$photon" bench --model dummy:tiny-llama3 --num-prompts 1 --output-len 1
check "bench bad top-p" 2 "'--top-p' needs a number from" -- "$photon" bench --model dummy:tiny-llama3 --num-prompts 1 --input-len 1 --output-len 1 --top-p 1.5
check "bench bad penalty" 2 "'--presence-penalty' needs a number from" -- "$photon" bench --model dummy:tiny-llama3 --num-prompts 1 --input-len 1 --output-len 1 --presence-penalty 3
check "bench bad quantization" 2 "'--quantization' must be none" -- "$photon" bench --model dummy:tiny-llama3 --num-prompts 1 --input-len 1 --output-len 1 --quantization fp4
check "bad group size" 2 "'--group-size' must be 32, 64 or 128" -- "$photon" generate --model dummy:tiny-llama3 --prompt-ids 1 --quantization int8 --group-size 48
check "lm head without int8" 2 "'--quantize-lm-head' needs '--quantization int8'" -- "$photon" generate --model dummy:tiny-llama3 --prompt-ids 1 --quantize-lm-head
check "group size without int8" 2 "'--group-size' needs '--quantization int8'" -- "$photon" generate --model dummy:tiny-llama3 --prompt-ids 1 --group-size 64
check "int8 groups across ranks" 1 "does not divide" -- "$photon" generate --model dummy:tiny-llama3 --prompt-ids 1 --quantization int8 --group-size 32 --tensor-parallel-size 4
# Int8 weights: fewer weight bytes than bf16, and the bench says how it ran.
tiny_bench=("$photon" bench --model dummy:tiny-qwen3 --device cpu --num-prompts 1 --input-len 4 --output-len 4 --json)
bf16_bytes=$("${tiny_bench[@]}" 2>/dev/null | tail -1)
int8_bytes=$("${tiny_bench[@]}" --quantization int8 --group-size 32 2>/dev/null | tail -1)
if python3 - "$bf16_bytes" "$int8_bytes" <<'PY'; then pass=$((pass + 1)); else echo "FAIL: int8 bench"; failures=$((failures + 1)); fi
import json, sys
bf16, int8 = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert int8["quantization"] == "int8" and int8["group_size"] == 32 and not int8["quantize_lm_head"], int8
assert bf16["quantization"] == "none" and bf16["group_size"] == 0, bf16
assert int8["weight_bytes"] < bf16["weight_bytes"], (int8["weight_bytes"], bf16["weight_bytes"])
assert int8["load_s"] > 0
# 2 layers x (K, V) x 2 KV heads x head dim 32 x 4 bytes (the CPU's f32 cache); weights do not change it.
assert bf16["kv_bytes_per_token"] == 1024 and int8["kv_bytes_per_token"] == 1024, (bf16, int8)
PY
check "chat without prompt" 2 "'--chat' needs '--prompt TEXT'" -- "$photon" generate --model dummy:tiny-qwen3 --chat --prompt-ids 1
check "perplexity missing file flag" 2 "'--file' is required" -- "$photon" perplexity --model dummy:tiny-llama3
check "perplexity missing file" 1 "cannot open text file '/nonexistent.txt'" -- "$photon" perplexity --model dummy:tiny-llama3 --file /nonexistent.txt
check "perplexity bad context" 2 "'--context-len' needs an integer" -- "$photon" perplexity --model dummy:tiny-llama3 --file /dev/null --context-len 2
check "perplexity context beyond max-model-len" 2 "'--context-len 64' needs '--max-model-len' of at least 65" -- "$photon" perplexity --model dummy:tiny-llama3 --file /dev/null --context-len 64 --max-model-len 64
check "perplexity without tokenizer" 1 "perplexity needs a tokenizer" -- "$photon" perplexity --model dummy:tiny-llama3 --file /dev/null
check "tokenize missing flag" 2 "'--tokenizer' is required" -- "$photon" tokenize
check "tokenize missing file" 1 "no tokenizer.json" -- "$photon" tokenize --tokenizer /tmp

echo "$pass passed, $failures failed"
[ "$failures" -eq 0 ]
