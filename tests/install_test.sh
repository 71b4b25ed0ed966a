#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, builds examples/ against it with find_package(Photon), runs them.
set -euo pipefail
build_dir=$1
examples_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
test -x "$work/prefix/bin/photon"
ls "$work/prefix"/lib*/libphoton.so.0 >/dev/null
cmake -S "$examples_dir" -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/build" >/dev/null
out=$(LD_LIBRARY_PATH="$work/prefix/lib:$work/prefix/lib64" "$work/build/hello_photon")
echo "$out"
grep -q "PhotonInfer headers" <<<"$out"
# Only the public API is exported: no internal photon:: symbols, no fmt or nlohmann symbols.
lib=$(ls "$work/prefix"/lib*/libphoton.so.0)
allowed='^(photon::|photon_|(typeinfo|typeinfo name|vtable) for photon::|_init$|_fini$|PHOTON_[0-9.]*$)'
exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | c++filt)
if grep -v -E "$allowed" <<<"$exported" | grep -q .; then
  echo "unexpected exported symbols:"; grep -v -E "$allowed" <<<"$exported"; exit 1
fi
if grep -E '^photon::(cpu|log)::|Decoder|Tensor|Safetensors' <<<"$exported"; then
  echo "internal symbols are exported"; exit 1
fi
echo "install test passed"
