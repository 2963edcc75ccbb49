#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Configure and build into DIR (default build/) with warnings as errors.
# Extra arguments go to cmake, e.g. scripts/build.sh build-asan -DREMORA_SANITIZE=ON
# Quiet when it works; on a failure the compiler's (or cmake's) output is shown.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREMORA_WERROR=ON "$@" >"$log" 2>&1 ||
   ! ninja -C "$dir" >>"$log" 2>&1; then
  echo "build in $dir failed:" >&2
  tail -n 200 "$log" >&2
  exit 1
fi
