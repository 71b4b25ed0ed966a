#!/usr/bin/env bash
# photon serve and photon_web_server as a user runs them: flags, the listening port, /health before and after
# loading, an API key, a streamed request that SIGTERM lets finish, exit 0 on SIGTERM and SIGINT, and errors for a
# port in use and bad flags.   Usage: serve_test.sh PHOTON PHOTON_WEB_SERVER
set -uo pipefail
photon=$1
web=$2
pass=0
failures=0
ok() { pass=$((pass + 1)); }
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
log=$(mktemp)
trap 'rm -f "$log" "$log".*' EXIT

# start CMD...: runs a server on a free port in the background; sets pid and port once it listens.
start() {
  "$@" --port 0 >"$log" 2>&1 &
  pid=$!
  port=""
  for _ in $(seq 1 200); do
    port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$log" | head -1)
    [ -n "$port" ] && return 0
    sleep 0.05
  done
  fail "no 'listening on' line from $*: $(cat "$log")"
  return 1
}
# http METHOD PATH [BODY] [AUTH]: prints "STATUS BODY".
http() {
  python3 - "$port" "$@" <<'PY'
import sys, urllib.request, urllib.error
port, method, path = sys.argv[1], sys.argv[2], sys.argv[3]
body = sys.argv[4].encode() if len(sys.argv) > 4 and sys.argv[4] else None
req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method=method,
                             headers={"Content-Type": "application/json"})
if len(sys.argv) > 5:
    req.add_header("Authorization", "Bearer " + sys.argv[5])
try:
    with urllib.request.urlopen(req, timeout=60) as r:
        print(r.status, r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
except Exception as e:
    print(0, e)
PY
}
wait_ready() {
  for _ in $(seq 1 400); do
    [ "$(http GET /health | cut -d' ' -f1)" = 200 ] && return 0
    sleep 0.05
  done
  fail "/health never answered 200: $(cat "$log")"
}

# photon_web_server: the original's name; --tokenizer may be omitted for token-id prompts; SIGTERM exits 0.
if start "$web" --model dummy:tiny-llama3 --device cpu --max-model-len 1024 --served-model-name tiny --api-key k1; then
  wait_ready
  out=$(http GET /v1/models "" k1)
  [[ "$out" == 200*'"id":"tiny"'* ]] && ok || fail "/v1/models: $out"
  out=$(http POST /v1/completions '{"prompt":[1,2,3],"max_tokens":3}')
  [[ "$out" == 401* ]] && ok || fail "no key: $out"
  # A long streamed request in flight when SIGTERM arrives still finishes (the grace period), then the process exits 0.
  # The client writes each event as it arrives; SIGTERM goes only once the first one is there, so the request is
  # surely in flight (a connection made after SIGTERM is rightly refused). 600 tokens: long enough that a fast CPU
  # (~1 ms a token for this model) is still streaming when SIGTERM comes, short enough for the 10 s grace period.
  python3 - "$port" >"$log.stream" <<'PY' &
import sys, urllib.request
req = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/v1/completions", method="POST",
                             data=b'{"prompt":[1,2,3],"max_tokens":600,"ignore_eos":true,"stream":true}',
                             headers={"Content-Type": "application/json", "Authorization": "Bearer k1"})
try:
    with urllib.request.urlopen(req, timeout=60) as r:
        for line in r:
            print(line.decode().rstrip(), flush=True)
except Exception as e:
    print(0, e)
PY
  client=$!
  for _ in $(seq 1 400); do
    grep -q '^data: ' "$log.stream" && break
    sleep 0.05
  done
  grep -q 'data: \[DONE\]' "$log.stream" && fail "the stream ended before SIGTERM: the test needs a longer one"
  kill -TERM "$pid"
  wait "$client"
  grep -q 'data: \[DONE\]' "$log.stream" && ok || fail "the in-flight stream did not finish: $(tail -c 300 "$log.stream")"
  wait "$pid"
  rc=$?
  [ "$rc" -eq 0 ] && ok || fail "photon_web_server exit $rc after SIGTERM: $(cat "$log")"
fi

# photon serve: SIGINT exits 0 too.
if start "$photon" serve --model dummy:tiny-llama3 --device cpu --max-model-len 64; then
  wait_ready
  out=$(http POST /v1/completions '{"prompt":[5,6],"max_tokens":2,"model":"dummy:tiny-llama3"}')
  [[ "$out" == 200*'"completion_tokens":2'* ]] && ok || fail "completion: $out"
  # photon bench serve against it: every request completes, the JSON has vLLM's serving figures.
  out=$("$photon" bench serve --url "http://127.0.0.1:$port" --num-prompts 12 --input-len 8 --output-len 4 \
          --max-concurrency 4 --json 2>&1 | tail -1)
  python3 -c '
import json, sys
r = json.loads(sys.argv[1])
assert r["completed"] == 12 and r["failed"] == 0, r
assert abs(r["output_tok_per_s"] * r["duration_s"] - 48) < 1e-6, r
for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
    assert all(r[k][q] > 0 for q in ("mean", "p50", "p90", "p99")), k
' "$out" && ok || fail "bench serve: $out"
  out=$("$photon" bench serve --url "http://127.0.0.1:$port" --num-prompts 5 --input-len 4 --output-len 2 \
          --request-rate 100 --json 2>&1 | tail -1)
  [[ "$out" == *'"completed":5'* ]] && ok || fail "bench serve at a rate: $out"
  busy_port=$port
  # A second server on the same port: a clear error, exit 1.
  "$photon" serve --model dummy:tiny-llama3 --device cpu --port "$busy_port" >"$log.busy" 2>&1
  rc=$?
  [ "$rc" -eq 1 ] && grep -q "cannot listen on 127.0.0.1:$busy_port" "$log.busy" && ok ||
    fail "port in use: exit $rc, $(cat "$log.busy")"
  kill -INT "$pid"
  wait "$pid"
  rc=$?
  [ "$rc" -eq 0 ] && ok || fail "photon serve exit $rc after SIGINT"
fi

# --tokenizer may name the tokenizer.json itself (the original's usage); chat then works.
tok="${PHOTON_TOKENIZER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/photon/tokenizers}/qwen3"
if [ -f "$tok/tokenizer.json" ] &&
   start "$web" --model dummy:tiny-qwen3 --tokenizer "$tok/tokenizer.json" --device cpu --max-model-len 256; then
  wait_ready
  out=$(http POST /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":3}')
  [[ "$out" == 200*'"object":"chat.completion"'* ]] && ok || fail "chat with --tokenizer FILE: $out"
  kill -TERM "$pid"
  wait "$pid"
fi

# Bad flags: exit 2 with the flag named.
"$photon" serve --model dummy:tiny-llama3 --port 99999 >"$log.bad" 2>&1
rc=$?
[ "$rc" -eq 2 ] && grep -q "port" "$log.bad" && ok || fail "bad port: exit $rc $(cat "$log.bad")"
"$photon" bench serve --url http://127.0.0.1:1 --num-prompts 1 --input-len 1 --output-len 1 >"$log.bad" 2>&1
rc=$?
[ "$rc" -eq 1 ] && grep -q "cannot connect" "$log.bad" && ok || fail "bench serve, nothing listening: exit $rc $(cat "$log.bad")"
"$web" --model dummy:tiny-llama3 --host not-an-ip --port 0 >"$log.bad" 2>&1
rc=$?
[ "$rc" -eq 1 ] && grep -q "not an IP address" "$log.bad" && ok || fail "bad host: exit $rc $(cat "$log.bad")"
help=$("$web" --help)
[[ "$help" == *"--served-model-name"*"--api-key"*"--max-queue"*"--chat-template"*"--allowed-origins"* ]] && ok ||
  fail "photon_web_server --help lacks a flag"

echo "$pass passed, $failures failed"
[ "$failures" -eq 0 ]
