#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# GPU targets (issue 4), side by side in one run on one machine:
#   bench/gpu.sh [BUILD_DIR] [REPS]        (defaults: build, 3)
# 1. CUDA IPC read of 256 MiB, same GPU      vs a device-to-device cuMemcpy
# 2. CUDA IPC read, GPU 0 -> GPU 1           vs a peer cuMemcpy (needs 2 GPUs)
# 3. staged GPU -> GPU read over TCP loopback vs remora's host -> host read over TCP
# 4. ring of 1 MiB elements into GPU memory over TCP vs the same into host memory
# Where the loaded UCX handles CUDA memory (a UCX built with CUDA,
# scripts/gpu-ucx.sh; `remora info` says "ucx memory types: host, cuda"),
# also UCX's own GPU paths (issue 19), beside remora's IPC and staging:
# 5. UCX read of 256 MiB, same GPU, two processes (REMORA_PATH=am: rendezvous
#    over cuda_ipc)                            vs a device-to-device cuMemcpy
# 6. UCX GPU -> GPU read over TCP with cuda_copy (UCX_TLS=tcp,cuda_copy,
#    REMORA_PATH=am) vs remora's host -> host read over TCP; with the staging
#    path under the same UCX_TLS beside it
# 7. 64 B reads of a host region while another connection of the same server
#    reads 1 GiB blocks of a GPU region staged: their p99 against the same
#    reads idle (issue 15: <= 2x), with one worker (both connections on it) and
#    with the default workers
# Each result line's "path" says which path remora took.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
REPS=${2:-3}
RESULTS=${RESULTS:-$B/bench-gpu.jsonl}
remora=$B/tools/remora
: >"$RESULTS"
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$ngpu" -ge 1 ] || { echo "no GPU" >&2; exit 77; }

start() { # OUTFILE ENV... -- ARGS...: start a server, print its address
  local out=$1; shift
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" "$remora" "$@" --listen 127.0.0.1:0 >"$out" 2>"$out.err" &
  pids+=($!); echo $! >"$out.pid"
  for _ in $(seq 300); do grep -q listening "$out" && break; sleep 0.05; done
  awk '/listening/ {print $2}' "$out"
}
stop() { kill "$(cat "$1.pid")" 2>/dev/null || true; wait "$(cat "$1.pid")" 2>/dev/null || true; }
json_field() { grep -o "\"$2\":[0-9.e+-]*" <<<"$1" | head -1 | cut -d: -f2; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
rec() { echo "$1" >>"$RESULTS"; json_field "$1" "$2" >>"$tmp/$3"; }

g0=$(start "$tmp/g0" X=1 -- serve --region g=256M --gpu 0)
tcp_g=$(start "$tmp/tg" UCX_TLS=tcp -- serve --region g=1G --gpu 0)
tcp_h=$(start "$tmp/th" UCX_TLS=tcp -- serve --region h=1G)
[ -n "$g0" ] && [ -n "$tcp_g" ] && [ -n "$tcp_h" ] || { cat "$tmp"/*.err >&2; exit 1; }
busy=$(start "$tmp/busy" UCX_TLS=tcp -- serve --workers 1 --region g=1G --region h=1M:host --gpu 0)
busyw=$(start "$tmp/busyw" UCX_TLS=tcp -- serve --region g=1G --region h=1M:host --gpu 0)
[ -n "$busy" ] && [ -n "$busyw" ] || { cat "$tmp"/*.err >&2; exit 1; }
ucx_cuda=0
"$remora" info | grep -q '^ucx memory types: .*cuda' && ucx_cuda=1
if [ "$ucx_cuda" = 1 ]; then
  cc_g=$(start "$tmp/cg" UCX_TLS=tcp,cuda_copy -- serve --region g=1G --gpu 0)
  [ -n "$cc_g" ] || { cat "$tmp"/*.err >&2; exit 1; }
fi
for r in $(seq "$REPS"); do
  rec "$("$B/bench/cuda_copy_bench" $((256 << 20)) 10 0 0)" gbps dtod
  rec "$("$remora" bench "$g0/g" --size 256M --gpu 0 --iters 10 --json)" gbps ipc
  if [ "$ngpu" -ge 2 ]; then
    rec "$("$B/bench/cuda_copy_bench" $((256 << 20)) 10 0 1)" gbps peer
    rec "$("$remora" bench "$g0/g" --size 256M --gpu 1 --iters 10 --json)" gbps ipc_peer
  fi
  rec "$(UCX_TLS=tcp REMORA_PATH=staging "$remora" bench "$tcp_g/g" --size 16M --depth 4 --gpu 0 --seconds 3 --json)" gbps staged
  rec "$(UCX_TLS=tcp "$remora" bench "$tcp_h/h" --size 16M --depth 4 --seconds 3 --json)" gbps hosthost
  if [ "$ucx_cuda" = 1 ]; then
    rec "$(REMORA_PATH=am "$remora" bench "$g0/g" --size 256M --gpu 0 --iters 10 --json)" gbps ucx_ipc
    rec "$(UCX_TLS=tcp,cuda_copy REMORA_PATH=am "$remora" bench "$cc_g/g" --size 16M --depth 4 --gpu 0 --seconds 3 --json)" gbps ucx_tcp
    rec "$(UCX_TLS=tcp,cuda_copy REMORA_PATH=staging "$remora" bench "$cc_g/g" --size 16M --depth 4 --gpu 0 --seconds 3 --json)" gbps ucx_tcp_staged
  fi
  # small reads idle, then beside a staged 1 GiB reader: on one worker, and on
  # a server with its default workers (the two connections on different ones)
  for w in "" w; do
    srv=$busy; [ -z "$w" ] || srv=$busyw
    rec "$(UCX_TLS=tcp "$remora" bench "$srv/h" --size 64 --seconds 2 --json)" lat_us_p99 small_idle$w
    UCX_TLS=tcp REMORA_PATH=staging "$remora" bench "$srv/g" --size 1G --gpu 0 --seconds 4 \
      --json >"$tmp/big.json" &
    big=$!
    sleep 0.7
    rec "$(UCX_TLS=tcp "$remora" bench "$srv/h" --size 64 --seconds 2 --json)" lat_us_p99 small_busy$w
    wait "$big"
    rec "$(cat "$tmp/big.json")" gbps big_staged$w
  done
  # rings: the same producer, read into host memory, then into GPU memory
  a=$(start "$tmp/ring" UCX_TLS=tcp -- stream serve --ring f=1Mx64 --rate 4000 --source fixed)
  rec "$(UCX_TLS=tcp "$remora" stream read "$a/f" --seconds 3 --json)" gbps ring_host
  rec "$(UCX_TLS=tcp "$remora" stream read "$a/f" --seconds 3 --gpu 0 --json)" gbps ring_gpu
  stop "$tmp/ring"
  # a ring whose elements live in GPU memory, read into GPU memory (no target; for the record)
  a=$(start "$tmp/gring" UCX_TLS=tcp -- stream serve --ring f=1Mx64 --rate 4000 --gpu 0)
  rec "$(UCX_TLS=tcp "$remora" stream read "$a/f" --seconds 3 --gpu 0 --json)" gbps ring_gpu_res
  stop "$tmp/gring"
  echo "  round $r done" >&2
done
m() { median <"$tmp/$1"; }
echo "per-round values:" >&2
for f in dtod ipc peer ipc_peer staged hosthost ucx_ipc ucx_tcp ucx_tcp_staged ring_host ring_gpu ring_gpu_res \
  small_idle small_busy big_staged small_idlew small_busyw big_stagedw; do
  [ -f "$tmp/$f" ] && printf "  %-9s %s\n" "$f" "$(xargs printf '%.2f ' <"$tmp/$f")" >&2
done
row() {
  local ratio; ratio=$(awk -v a="$2" -v b="$3" 'BEGIN { print a / b }')
  local ok; ok=$(echo "$ratio $4" | awk '{ print ($1 >= $2) ? "yes" : "NO" }')
  printf "%-52s %10.2f %10.2f %7.2fx   >= %sx  %s\n" "$1" "$2" "$3" "$ratio" "$4" "$ok"
}
echo
printf "%-52s %10s %10s %8s   %s\n" "measure, GB/s (medians of $REPS)" "remora" "reference" "ratio" "target"
row "IPC read 256 MiB, same GPU (ref: cuMemcpy DtoD)" "$(m ipc)" "$(m dtod)" 0.9
[ -f "$tmp/peer" ] && row "IPC read 256 MiB, GPU0->GPU1 (ref: peer cuMemcpy)" "$(m ipc_peer)" "$(m peer)" 0.9
row "staged GPU->GPU over TCP (ref: host->host TCP)" "$(m staged)" "$(m hosthost)" 0.8
row "ring 1 MiB into GPU over TCP (ref: into host)" "$(m ring_gpu)" "$(m ring_host)" 0.8
tail_row() { # LABEL SUFFIX
  local ratio; ratio=$(awk -v a="$(m small_busy$2)" -v b="$(m small_idle$2)" 'BEGIN { print a / b }')
  printf "%-52s %10.2f %10.2f %7.2fx   <= 2x   %s\n" "$1" "$(m small_busy$2)" "$(m small_idle$2)" \
    "$ratio" "$(awk -v r="$ratio" 'BEGIN { print (r <= 2) ? "yes" : "NO" }')"
  printf "%-52s %10.2f\n" "  the staged 1 GiB reader meanwhile, GB/s" "$(m big_staged$2)"
}
tail_row "64 B p99 us beside a staged 1 GiB read, 1 worker" ""
tail_row "  the same, default workers (ref: idle)" w
if [ -f "$tmp/ucx_ipc" ]; then
  row "UCX cuda_ipc read 256 MiB, same GPU (ref: cuMemcpy)" "$(m ucx_ipc)" "$(m dtod)" 0.9
  row "  remora IPC read (ref: UCX cuda_ipc read)" "$(m ipc)" "$(m ucx_ipc)" 1.0
  row "UCX GPU->GPU over TCP+cuda_copy (ref: host->host)" "$(m ucx_tcp)" "$(m hosthost)" 0.8
  row "  staging, same UCX_TLS (ref: UCX cuda_copy)" "$(m ucx_tcp_staged)" "$(m ucx_tcp)" 1.0
else
  echo "(no UCX CUDA rows: the loaded UCX does not handle CUDA memory)"
fi
echo "raw results: $RESULTS"
