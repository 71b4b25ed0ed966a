#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, builds examples/ against it with find_package(Photon), and runs
# the C++, C and Python (ctypes) examples; the Python one must reproduce transformers' greedy ids.
set -euo pipefail
build_dir=$1
examples_dir=$2
model=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
test -x "$work/prefix/bin/photon"
test -f "$work/prefix/include/photon.h"
lib=$(ls "$work/prefix"/lib*/libphoton.so.0)
libdir=$(dirname "$lib")
cmake -S "$examples_dir" -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/build" >/dev/null
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$work/build/generate_cpp" "$model" | tee "$work/cpp.out"
grep -q "\[length\]" "$work/cpp.out"
"$work/build/generate_c" "$model" | tee "$work/c.out"
grep -q "finish reason 2" "$work/c.out"
ref_prompt=$(python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['cases'][0]['prompt_ids'])))" "$model/reference.json")
py_out=$(PHOTON_LIBRARY="$lib" python3 "$examples_dir/generate.py" "$model" "$ref_prompt")
echo "python: $py_out"
python3 -c "import json,sys; assert json.loads(sys.argv[1]) == json.load(open(sys.argv[2]))['cases'][0]['output_ids']" \
  "$py_out" "$model/reference.json"

# Only the public API is exported: no internal photon:: symbols, no fmt, nlohmann or standard-library ones.
allowed='^(photon::|photon_|(typeinfo|typeinfo name|vtable) for photon::|_init$|_fini$)'
exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | c++filt)
if grep -v -E "$allowed" <<<"$exported" | grep -q .; then
  echo "unexpected exported symbols:"; grep -v -E "$allowed" <<<"$exported"; exit 1
fi
if grep -E '^photon::(cpu|log)::|Decoder|Tensor|Safetensors|Scheduler|BlockManager' <<<"$exported"; then
  echo "internal symbols are exported"; exit 1
fi
echo "install test passed"
