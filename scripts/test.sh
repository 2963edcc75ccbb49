#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The whole test suite: installs dependencies, builds with -Werror, runs every
# test (the C suites, then the Python binding's pytest suite), builds again
# under AddressSanitizer + UndefinedBehaviorSanitizer and runs every test again,
# then fuzzes each wire decoder for a bounded time.
#   FUZZ_SECONDS=N   fuzzing time (default 60; 0 skips fuzzing)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh

jobs=$(nproc)
run_suite() { # DIR LABEL [CTEST ARGS...]
  local dir=$1 label=$2
  shift 2
  echo "== tests ($label)"
  ctest --test-dir "$dir" --output-on-failure --timeout 300 -j "$jobs" "$@"
}

scripts/build.sh build
run_suite build "release, -Werror"
scripts/python-test.sh build

scripts/build.sh build-asan -DREMORA_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug
# Left to the release pass: the long stress runs, CPU-time measurements, and
# packaging and docs checks (they test no code of the library's).
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  run_suite build-asan "ASan + UBSan; stress, cputime, package, docs: release pass only" \
  -LE "stress|cputime|package|docs"
# The Python tests again over the sanitized library. The interpreter is not
# sanitized, so the runtimes are preloaded, and leak detection is off (CPython
# keeps its memory until exit); the C suites above check leaks. The extension
# is sanitized too.
echo "== python tests (ASan + UBSan library and extension)"
LD_PRELOAD="$(cc -print-file-name=libasan.so):$(cc -print-file-name=libubsan.so)" \
  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  CFLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
  LDFLAGS="-fsanitize=address,undefined" \
  scripts/python-test.sh build-asan

if [ "${FUZZ_SECONDS:-60}" != 0 ] && [ -x tests/fuzz/run.sh ]; then
  echo "== fuzzing wire decoders for ${FUZZ_SECONDS:-60} s"
  tests/fuzz/run.sh "${FUZZ_SECONDS:-60}"
fi
echo "== all tests passed"
