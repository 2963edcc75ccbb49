#!/usr/bin/env bash
# Configure and build into DIR (default build/) with warnings as errors.
# Extra arguments go to cmake, e.g. scripts/build.sh build-asan -DREMORA_SANITIZE=ON
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREMORA_WERROR=ON "$@" >/dev/null
ninja -C "$dir" >/dev/null
