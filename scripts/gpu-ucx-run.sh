#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Issue 19's run on the GPU machine, one command from the repository root:
#   scripts/gpu-ucx-run.sh OUTDIR
# with .gpu-deps/usr (scripts/gpu-deps.sh) and .gpu-deps/ucx-cuda
# (scripts/gpu-ucx.sh build) carried there. Logs into OUTDIR:
#   ucx.log     the CUDA UCX: ucx_info -v, -d (cuda_copy/cuda_ipc devices)
#   test.log    scripts/gpu-test.sh --ucx cuda: remora built against it,
#               remora info/doctor, ctest -L gpu (it_gpu covers the automatic
#               choice and the forced am/staging/ipc paths, every host/GPU
#               buffer x region, large and small, GPU rings, server killed)
#   it_gpu_debug.log  it_gpu alone with REMORA_LOG=debug (paths, UCX lanes)
#   perftest.log  ucx_perftest -m cuda ucp_get 256 MiB, two processes
#               (UCX's own cuda_ipc, for reference)
#   bench.log   bench/gpu.sh: UCX cuda_ipc and TCP+cuda_copy rows beside
#               remora's IPC and staging, medians of REPS (default 3)
# Every step is bounded (timeouts sum to 580 s: within a 600 s device call).
# Exit status: 0 when the GPU suite passed and the benchmark ran.
set -uo pipefail
out=${1:?usage: scripts/gpu-ucx-run.sh OUTDIR}
reps=${REPS:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
mkdir -p "$out"
build=$root/build-gpu-ucxcuda
rc=0
export REMORA_JOBS=${REMORA_JOBS:-16}
lib=$root/.gpu-deps/usr/lib/x86_64-linux-gnu
[ -d "$lib" ] && export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
uenv=$(scripts/gpu-ucx.sh env) || { echo "no .gpu-deps/ucx-cuda" | tee "$out/ucx.log"; exit 1; }
eval "$uenv"

{ echo "$uenv"; ucx_info -v; ucx_info -d; } >"$out/ucx.log" 2>&1
echo "ucx: $(grep -E '^#[[:space:]]+Transport:' "$out/ucx.log" | awk '{print $3}' | sort -u | paste -sd' ')"

timeout 300 scripts/gpu-test.sh --ucx cuda "$build" >"$out/test.log" 2>&1
t=$?; echo "gpu-test --ucx cuda: exit $t"; [ $t = 0 ] || rc=1
grep -E '^(ucx|gpu paths|ucx gpu transports|ucx memory types)|ucx_cuda|tests passed|\(Failed\)|\*\*\*' "$out/test.log"

(cd "$build" && REMORA_LOG=debug timeout 90 tests/integration/it_gpu) 2>&1 | tail -c 4000000 >"$out/it_gpu_debug.log"
echo "it_gpu (debug log): exit ${PIPESTATUS[0]}"

p=$((20000 + RANDOM % 20000))
UCX_MEMTYPE_CACHE=n timeout 40 ucx_perftest -t ucp_get -m cuda -s 268435456 -n 20 -p $p >"$out/perftest-server.log" 2>&1 &
sleep 2
UCX_MEMTYPE_CACHE=n timeout 35 ucx_perftest 127.0.0.1 -t ucp_get -m cuda -s 268435456 -n 20 -p $p >"$out/perftest.log" 2>&1
echo "ucx_perftest ucp_get -m cuda 256 MiB: exit $? ($(tail -1 "$out/perftest.log"))"
wait

RESULTS=$out/bench-gpu.jsonl timeout 150 bench/gpu.sh "$build" "$reps" >"$out/bench.log" 2>&1
t=$?; echo "bench/gpu.sh: exit $t"; [ $t = 0 ] || rc=1
cat "$out/bench.log"
exit $rc
