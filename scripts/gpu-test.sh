#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Build remora on a GPU machine and run the GPU-tagged tests (CTest label
# "gpu"), then print `remora info` and `remora doctor`. One command:
#   scripts/gpu-test.sh [BUILD_DIR]          (default build-gpu)
# Where .gpu-deps/ exists (scripts/gpu-deps.sh) the build uses its UCX headers,
# libsodium, cmocka and, if needed, pkgconf, with the machine's libucp.so.0.
# Extra CMake arguments come from $REMORA_CMAKE_ARGS (e.g. -DREMORA_SANITIZE=ON).
# Exit status: that of ctest (0 when every GPU test passed or was skipped).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-gpu}
deps=$root/.gpu-deps
# shellcheck disable=SC2206
args=(-G Ninja -DREMORA_WERROR=ON ${REMORA_CMAKE_ARGS:-})

if [ -d "$deps" ]; then
  lib=$deps/usr/lib/x86_64-linux-gnu
  export PKG_CONFIG_PATH=$lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export LIBRARY_PATH=$lib${LIBRARY_PATH:+:$LIBRARY_PATH}
  args+=(-DREMORA_UCX_INCLUDE_DIR="$deps/usr/include")
  if ! command -v pkg-config >/dev/null 2>&1 && [ -x "$deps/usr/bin/pkgconf" ]; then
    args+=(-DPKG_CONFIG_EXECUTABLE="$deps/usr/bin/pkgconf")
  fi
fi

echo "== machine"
nvidia-smi --query-gpu=index,name,driver_version,memory.total,pci.bus_id --format=csv 2>&1
uname -r
echo "== configure and build ($build)"
cmake -S "$root" -B "$build" "${args[@]}" || exit 1
ninja -C "$build" || exit 1
echo "== remora info"
"$build/tools/remora" info
echo "== remora doctor"
"$build/tools/remora" doctor
echo "doctor exit: $?"
"$build/tools/remora" doctor --json
echo "== GPU tests (ctest -L gpu)"
(cd "$build" && ctest -L gpu --output-on-failure -V)
