#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Build remora on a GPU machine and run the GPU-tagged tests (CTest label
# "gpu"), then print `remora info` and `remora doctor`. One command:
#   scripts/gpu-test.sh [--ucx system|cuda] [BUILD_DIR]
# Where .gpu-deps/ exists (scripts/gpu-deps.sh) the build uses its UCX headers,
# libsodium, cmocka and, if needed, pkgconf, with the machine's libucp.so.0.
# --ucx cuda (or REMORA_GPU_UCX=cuda): build against and run with the UCX
# built with CUDA in .gpu-deps/ucx-cuda (scripts/gpu-ucx.sh; its headers,
# libraries and modules), default BUILD_DIR build-gpu-ucxcuda.
# --ucx system (the default): the machine's UCX, default BUILD_DIR build-gpu.
# Extra CMake arguments come from $REMORA_CMAKE_ARGS (e.g. -DREMORA_SANITIZE=ON);
# REMORA_JOBS=N limits the build to N jobs.
# Exit status: that of ctest (0 when every GPU test passed or was skipped).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ucx=${REMORA_GPU_UCX:-system}
if [ "${1:-}" = --ucx ]; then ucx=${2:-}; shift 2 || shift; fi
case $ucx in
  system) build=${1:-$root/build-gpu} ;;
  cuda) build=${1:-$root/build-gpu-ucxcuda} ;;
  *) echo "gpu-test: --ucx system|cuda, not '$ucx'" >&2; exit 2 ;;
esac
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
if [ "$ucx" = cuda ]; then
  # after the block above: the CUDA UCX's libraries come first on every path
  uenv=$("$root/scripts/gpu-ucx.sh" env) || exit 1
  eval "$uenv"
  kept=()
  for a in "${args[@]}"; do [[ $a == -DREMORA_UCX_INCLUDE_DIR=* ]] || kept+=("$a"); done
  args=("${kept[@]}" -DREMORA_UCX_INCLUDE_DIR="$deps/ucx-cuda/include")
  echo "== UCX with CUDA ($deps/ucx-cuda)"
  echo "$uenv"
  ucx_info -v
  ucx_info -d | grep -E '^#[[:space:]]+(Component|Transport):' | tr -s ' ' | paste -sd' '
fi

echo "== machine"
nvidia-smi --query-gpu=index,name,driver_version,memory.total,pci.bus_id --format=csv 2>&1
uname -r
echo "== configure and build ($build)"
cmake -S "$root" -B "$build" "${args[@]}" || exit 1
ninja -C "$build" ${REMORA_JOBS:+-j "$REMORA_JOBS"} || exit 1
echo "== libraries: $(ldd "$build/tools/remora" | grep -E 'libuc[ps]' | awk '{print $3}' | paste -sd' ')"
echo "== remora info"
"$build/tools/remora" info
echo "== remora doctor"
"$build/tools/remora" doctor
echo "doctor exit: $?"
"$build/tools/remora" doctor --json
echo "== GPU tests (ctest -L gpu)"
(cd "$build" && ctest -L gpu --output-on-failure -V)
