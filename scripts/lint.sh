#!/usr/bin/env bash
# Static checks: every C/C++/CUDA source follows .clang-format, and clang-tidy (.clang-tidy: bugprone, performance,
# selected modernize and cppcoreguidelines checks) reports nothing over src/ and capi/. Needs a configured build/
# (compile_commands.json); scripts/test.sh makes one.
set -euo pipefail
cd "$(dirname "$0")/.."
# Version 14 (Debian 12's) defines the format; other versions format a few constructs differently.
format=$(command -v clang-format-14 || command -v clang-format)
tidy_bin=$(command -v clang-tidy-14 || command -v clang-tidy)
mapfile -t sources < <(git ls-files '*.cpp' '*.hpp' '*.h' '*.c' '*.cu' '*.cuh')
"$format" --style=file --dry-run --Werror "${sources[@]}"
echo "lint: clang-format clean (${#sources[@]} files)"
# The files this configuration compiles (CUDA and NCCL sources only where their toolkits were found).
mapfile -t tidy < <(git ls-files 'src/*.cpp' 'capi/*.cpp' | while read -r f; do
  grep -q "\"file\": \"$PWD/$f\"" build/compile_commands.json && echo "$f"; done)
# One file per process, two at a time: clang-tidy is single-threaded.
printf '%s\n' "${tidy[@]}" | xargs -P "$(nproc)" -n 1 "$tidy_bin" -p build --quiet 2>/dev/null
echo "lint: clang-tidy clean (${#tidy[@]} files)"
