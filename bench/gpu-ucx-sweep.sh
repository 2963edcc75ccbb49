#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Issue 19's sweep on a GPU machine, against a remora built with the CUDA UCX
# (scripts/gpu-test.sh --ucx cuda; run with scripts/gpu-ucx.sh env applied):
#   bench/gpu-ucx-sweep.sh [BUILD_DIR] [PASSES]   (defaults: build-gpu-ucxcuda, 2)
# 1. UCX cuda_ipc reads of 256 MiB, same GPU, two processes (REMORA_PATH=am),
#    by chunk size and window (REMORA_CHUNK_SIZE / REMORA_WINDOW: these only
#    raise remora's own choice, 64 MiB and 16), one and two reads in flight,
#    and with UCX's GET forced; cuda_copy_bench device-to-device beside them.
# 2. UCX GPU->GPU over TCP with cuda_copy (16 MiB, depth 4) under rendezvous
#    fragment settings, beside host->host and remora's staging.
# Prints one line per measurement, GB/s. docs/gpu-ucx.md has the results.
set -uo pipefail
B=${1:-build-gpu-ucxcuda}
PASSES=${2:-2}
remora=$B/tools/remora
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
start() { # OUT ENV... -- ARGS...: start a server, print its address
  local out=$1; shift
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" "$remora" "$@" --listen 127.0.0.1:0 >"$out" 2>"$out.err" &
  pids+=($!)
  for _ in $(seq 300); do grep -q listening "$out" && break; sleep 0.05; done
  awk '/listening/ {print $2}' "$out"
}
gbps() { grep -o '"gbps":[0-9.e+-]*' | head -1 | cut -d: -f2; }
"$remora" info | grep -q '^ucx memory types: .*cuda' || { echo "this UCX does not handle CUDA memory" >&2; exit 77; }
g0=$(start "$tmp/g0" X=1 -- serve --region g=256M --gpu 0)
gz=$(start "$tmp/gz" UCX_CUDA_IPC_ENABLE_GET_ZCOPY=on UCX_RNDV_SCHEME=get_zcopy -- serve --region g=256M --gpu 0)
cg=$(start "$tmp/cg" UCX_TLS=tcp,cuda_copy -- serve --region g=1G --gpu 0)
th=$(start "$tmp/th" UCX_TLS=tcp -- serve --region h=1G)
[ -n "$g0" ] && [ -n "$gz" ] && [ -n "$cg" ] && [ -n "$th" ] || { cat "$tmp"/*.err >&2; exit 1; }
M=1048576
for _ in $(seq "$PASSES"); do
  echo "dtod: $("$B/bench/cuda_copy_bench" $((256 << 20)) 10 0 0 | gbps)"
  for cw in "32 16" "64 16" "128 16" "256 16" "32 32" "64 32"; do
    read -r c w <<<"$cw"
    for d in 1 2; do
      echo "ucx_ipc chunk=${c}M window=$w depth=$d: $(REMORA_PATH=am REMORA_CHUNK_SIZE=$((c * M)) \
        REMORA_WINDOW="$w" "$remora" bench "$g0/g" --size 256M --depth "$d" --gpu 0 --iters 20 --json | gbps)"
    done
  done
  echo "ucx_ipc GET forced: $(UCX_CUDA_IPC_ENABLE_GET_ZCOPY=on UCX_RNDV_SCHEME=get_zcopy REMORA_PATH=am \
    "$remora" bench "$gz/g" --size 256M --gpu 0 --iters 20 --json | gbps)"
done
echo "hosthost 16M: $(UCX_TLS=tcp "$remora" bench "$th/h" --size 16M --depth 4 --seconds 2 --json | gbps)"
tcp=(env "UCX_TLS=tcp,cuda_copy" REMORA_PATH=am)
echo "ucx_tcp default: $("${tcp[@]}" "$remora" bench "$cg/g" --size 16M --depth 4 --gpu 0 --seconds 2 --json | gbps)"
for f in host:2M,cuda:4M host:4M,cuda:4M host:8M,cuda:8M; do
  echo "ucx_tcp UCX_RNDV_FRAG_SIZE=$f: $("${tcp[@]}" UCX_RNDV_FRAG_SIZE=$f "$remora" bench "$cg/g" \
    --size 16M --depth 4 --gpu 0 --seconds 2 --json | gbps)"
done
echo "ucx_tcp UCX_RNDV_PIPELINE_SEND_THRESH=0: $("${tcp[@]}" UCX_RNDV_PIPELINE_SEND_THRESH=0 "$remora" \
  bench "$cg/g" --size 16M --depth 4 --gpu 0 --seconds 2 --json | gbps)"
echo "staging, same UCX_TLS: $(UCX_TLS=tcp,cuda_copy REMORA_PATH=staging "$remora" bench "$cg/g" \
  --size 16M --depth 4 --gpu 0 --seconds 2 --json | gbps)"
echo "hosthost 16M again: $(UCX_TLS=tcp "$remora" bench "$th/h" --size 16M --depth 4 --seconds 2 --json | gbps)"
