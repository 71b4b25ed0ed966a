#!/usr/bin/env bash
# ThreadSanitizer over the engine's concurrent paths (CPU build): submit / cancel / poll from many threads while the
# background loop steps, the C ABI, and tensor-parallel ranks running as threads (rank threads, in-memory
# collectives) or joined over loopback TCP (process group, collectives relayed through rank 0, a worker serving an
# engine), and the HTTP server under concurrent clients. Any report fails it.
# OpenMP runs one thread (libgomp is not instrumented, so its own synchronisation would be reported).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh build-tsan -DPHOTON_CUDA=OFF -DPHOTON_SANITIZE=thread -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DPHOTON_BUILD_BENCH=OFF
export OMP_NUM_THREADS=1
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
build-tsan/bin/photon_tests -# "[#test_engine],[#test_tensor_parallel],[#test_process_group]"
build-tsan/bin/photon_capi_test tests/data/parity/llama3-gqa-tied-ropescaled
# The HTTP server under concurrent clients (streams, whole replies, hang-ups), shutdown included.
if [ -x build-tsan/bin/photon_server_tests ]; then build-tsan/bin/photon_server_tests; fi
