#!/usr/bin/env bash
# Downloads (does not install) the Debian packages of PCRE2 and utf8proc into .deps/, for machines whose image lacks
# their headers and that reach no package registry; scripts/gpu-check.sh unpacks them into a private prefix there.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps
cd .deps
apt-get download libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libutf8proc-dev libutf8proc2
ls -1 "$PWD"
