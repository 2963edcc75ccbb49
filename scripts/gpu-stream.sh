#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Stream-ordered operations on a GPU machine (docs/stream.md): the GPU tests,
# the two-process ping-pongs and the benchmark, with every figure the
# targets of docs/performance.md need and their ratios. Run after
# scripts/gpu-test.sh BUILD_DIR built everything:
#   scripts/gpu-stream.sh BUILD_DIR OUTDIR
# Logs go to OUTDIR (one file per step, summary.txt). Every step has a
# timeout; the whole run takes well under 4 minutes. Exit: 0 when every
# step passed or was skipped (no GPU), 1 otherwise.
#
# Internal mode (CTest's gpu_stream_pingpong_*):
#   scripts/gpu-stream.sh --pingpong STREAM_PINGPONG_BIN ipc|tcp|raw [ITERS] [SIZE]
# Rank 1's output is printed after rank 0's; with REMORA_PP_LOGDIR set both
# ranks' logs are also kept there (pp_<mode>_<iters>_<size>_rank<N>.log).
# Build only (as scripts/gpu-test.sh, without running the tests):
#   scripts/gpu-stream.sh --build BUILD_DIR
set -uo pipefail

have_gpu() { command -v nvidia-smi >/dev/null 2>&1 && grep -q GPU <<<"$(nvidia-smi -L 2>/dev/null)"; }
ngpus() { nvidia-smi -L 2>/dev/null | grep -c '^GPU'; }

# Two ranks on this host; rank 0's line on stdout. Ports from the PID.
pingpong() {
  local bin=$1 mode=$2 iters=${3:-10000} size=${4:-64}
  # below 32768, where Linux's ephemeral ports start: a listen port taken by
  # some connection's local end failed a run ("resource busy")
  local base=$(( 20000 + ($$ * 7 + RANDOM) % 12000 ))
  local p0=$base p1=$((base + 1)) extra=() extra1=() envs=()
  case $mode in
    ipc) envs=(REMORA_PATH=auto) ;;
    tcp) envs=(UCX_TLS=tcp REMORA_PATH=staging) ;;
    raw) extra=(--raw); envs=(REMORA_RAW_SHM=/remora_raw_$$_$RANDOM) ;;
    *) echo "unknown mode $mode" >&2; return 2 ;;
  esac
  have_gpu || { echo "SKIPPED: no GPU"; return 77; }
  if [ "${REMORA_PP_GPU1:-0}" != 0 ] && [ "$(ngpus)" -le "$REMORA_PP_GPU1" ]; then
    echo "SKIPPED: rank 1 on GPU $REMORA_PP_GPU1, $(ngpus) GPU(s) here"
    return 77
  fi
  local tmo=${REMORA_PP_TIMEOUT:-120} log1 log0
  # REMORA_PP_GPU1=N: rank 1 on GPU N (rank 0 stays on GPU 0). REMORA_PP_BARE=1:
  # no kernels in the loop (--bare). Until session 16 --gpu went to both ranks,
  # so the "two GPU" rows ran both on GPU 1.
  [ "${REMORA_PP_GPU1:-0}" != 0 ] && extra1+=(--gpu "$REMORA_PP_GPU1")
  [ "${REMORA_PP_BARE:-0}" != 0 ] && extra+=(--bare)
  log1=$(mktemp /tmp/remora_pp1_XXXXXX); log0=$(mktemp /tmp/remora_pp0_XXXXXX)
  env "${envs[@]}" REMORA_LOG=${REMORA_LOG:-warn} timeout -k 5 "$tmo" "$bin" 1 "$p1" "$p0" "$iters" "$size" "${extra[@]}" "${extra1[@]}" \
      > "$log1" 2>&1 &
  local pid1=$!
  env "${envs[@]}" REMORA_LOG=${REMORA_LOG:-warn} timeout -k 5 "$tmo" "$bin" 0 "$p0" "$p1" "$iters" "$size" "${extra[@]}" \
      > "$log0" 2>&1
  local rc0=$?
  wait "$pid1"; local rc1=$?
  cat "$log0"
  echo "rank0 exit $rc0, rank1 exit $rc1"
  sed 's/^/  rank1: /' "$log1"
  if [ -n "${REMORA_PP_LOGDIR:-}" ]; then
    mkdir -p "$REMORA_PP_LOGDIR"
    cp "$log0" "$REMORA_PP_LOGDIR/pp_${mode}_${iters}_${size}_rank0.log"
    cp "$log1" "$REMORA_PP_LOGDIR/pp_${mode}_${iters}_${size}_rank1.log"
  fi
  rm -f "$log0" "$log1"
  [ "$rc0" = 77 ] && return 77
  [ "$rc0" = 0 ] && [ "$rc1" = 0 ]
}

if [ "${1:-}" = "--build" ]; then
  root=$(cd "$(dirname "$0")/.." && pwd)
  build=${2:?usage: $0 --build BUILD_DIR}
  deps=$root/.gpu-deps
  args=(-G Ninja -DREMORA_WERROR=ON)
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
  cmake -S "$root" -B "$build" "${args[@]}" >/dev/null && ninja -C "$build" >/dev/null
  exit $?
fi

if [ "${1:-}" = "--pingpong" ]; then
  shift
  pingpong "$@"
  exit $?
fi

root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: $0 BUILD_DIR OUTDIR}
out=${2:?usage: $0 BUILD_DIR OUTDIR}
mkdir -p "$out"
gpu=$build/tests/gpu
[ -d "$root/.gpu-deps" ] && export LD_LIBRARY_PATH=$root/.gpu-deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export REMORA_LOG=${REMORA_LOG:-warn}
export REMORA_PP_LOGDIR=$out
summary=$out/summary.txt
: > "$summary"
failed=0
say() { echo "$*" | tee -a "$summary"; }

for b in test_stream stream_pingpong stream_bench stream_wait_probe stream_switch_probe \
         stream_signal_probe; do
  [ -x "$gpu/$b" ] || { say "MISSING $gpu/$b (was nvcc found? see cmake output)"; exit 1; }
done
if ! have_gpu; then
  say "SKIPPED: no GPU here (nvidia-smi lists none)"
  exit 0
fi
nvidia-smi --query-gpu=index,name,driver_version --format=csv > "$out/machine.txt" 2>&1
say "== $(date -u +%FT%TZ) $(head -2 "$out/machine.txt" | tail -1)"

# step NAME TIMEOUT ENV... -- CMD...: run, log, record PASS/FAIL/SKIP.
step() {
  local name=$1 t=$2; shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local t0=$SECONDS
  env "${envs[@]}" timeout -k 5 "$t" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  local verdict=PASS
  case $rc in 0) ;; 77) verdict=SKIP ;; 124|137) verdict="FAIL (timed out after ${t}s)"; failed=1 ;; *) verdict="FAIL (exit $rc)"; failed=1 ;; esac
  say "[$verdict] $name ($((SECONDS - t0)) s) -> $out/$name.log"
}

# 1. Functional: one process through the proxy (staging over TCP).
step test_stream_staging 100 UCX_TLS=tcp REMORA_PATH=staging -- "$gpu/test_stream"
grep -E "^(dead peer|sizes|ring|graph|signals|wait|bad args|two gpus|SKIPPED|FAILED)" "$out/test_stream_staging.log" | sed 's/^/    /' | tee -a "$summary"

# 2. Ping-pongs between two processes on GPU 0, 10,000 round trips, 64 B.
step pingpong_ipc 130 -- "$0" --pingpong "$gpu/stream_pingpong" ipc 10000 64
step pingpong_raw 130 -- "$0" --pingpong "$gpu/stream_pingpong" raw 10000 64
step pingpong_raw_local 60 -- "$gpu/stream_pingpong" 0 0 0 64 64 --raw-local
step pingpong_tcp 130 -- "$0" --pingpong "$gpu/stream_pingpong" tcp 10000 64
step pingpong_ipc_1MiB 60 -- "$0" --pingpong "$gpu/stream_pingpong" ipc 1000 1048576
# Bare (a stream wait and a put_signal a round, no kernels): two processes on
# one GPU switch contexts only for kernels, not for stream memory operations.
step pingpong_ipc_bare 130 REMORA_PP_BARE=1 -- "$0" --pingpong "$gpu/stream_pingpong" ipc 10000 64
step pingpong_tcp_bare 130 REMORA_PP_BARE=1 -- "$0" --pingpong "$gpu/stream_pingpong" tcp 10000 64
# The TCP ping-pong with both ranks as threads of one process (one GPU
# context: no switching between two processes' contexts), with the kernels
# and bare (a stream wait and a put_signal per round).
lp=$(( 20000 + ($$ * 13) % 20000 ))
step pingpong_tcp_local 100 UCX_TLS=tcp REMORA_PATH=staging -- "$gpu/stream_pingpong" 0 "$lp" $((lp + 1)) 10000 64 --local
step pingpong_tcp_local_bare 100 UCX_TLS=tcp REMORA_PATH=staging -- "$gpu/stream_pingpong" 0 $((lp + 2)) $((lp + 3)) 10000 64 --local --bare

# 2b. The same between two processes on GPU 0 and GPU 1 (skipped with one
#     GPU): no context switching between the ranks, peer copies over NVLink.
if [ "$(ngpus)" -ge 2 ]; then
  step pingpong2_ipc 130 REMORA_PP_GPU1=1 -- "$0" --pingpong "$gpu/stream_pingpong" ipc 10000 64
  step pingpong2_raw 130 REMORA_PP_GPU1=1 -- "$0" --pingpong "$gpu/stream_pingpong" raw 10000 64
  step pingpong2_tcp 130 REMORA_PP_GPU1=1 -- "$0" --pingpong "$gpu/stream_pingpong" tcp 10000 64
  step pingpong2_ipc_1MiB 60 REMORA_PP_GPU1=1 -- "$0" --pingpong "$gpu/stream_pingpong" ipc 1000 1048576
  step pingpong2_raw_1MiB 60 REMORA_PP_GPU1=1 -- "$0" --pingpong "$gpu/stream_pingpong" raw 1000 1048576
  step pingpong2_ipc_bare 130 REMORA_PP_GPU1=1 REMORA_PP_BARE=1 -- "$0" --pingpong "$gpu/stream_pingpong" ipc 10000 64
  step pingpong2_tcp_bare 130 REMORA_PP_GPU1=1 REMORA_PP_BARE=1 -- "$0" --pingpong "$gpu/stream_pingpong" tcp 10000 64
  step pingpong2_ipc_bare_1MiB 60 REMORA_PP_GPU1=1 REMORA_PP_BARE=1 -- "$0" --pingpong "$gpu/stream_pingpong" ipc 1000 1048576
  # NVSHMEM's put-with-signal ping-pong, where a wheel (nvidia-nvshmem-cu13)
  # brings it: compiled here against the wheel (bench/nvshmem_pingpong.cu).
  nv=$(python3 -c 'import nvidia.nvshmem as m; print(list(m.__path__)[0])' 2>/dev/null)
  if [ -n "$nv" ] && [ -f "$nv/lib/libnvshmem_device.a" ]; then
    nvcc -rdc=true -arch=native -O2 "$root/bench/nvshmem_pingpong.cu" -I"$nv/include" -L"$nv/lib" \
      -l:libnvshmem_host.so.3 "$nv/lib/libnvshmem_device.a" -lcuda -o "$out/nvshmem_pingpong" \
      >"$out/nvshmem_build.log" 2>&1
    for s in 64 1048576; do
      step nvshmem_pingpong_$s 60 LD_LIBRARY_PATH="$nv/lib:${LD_LIBRARY_PATH:-}" NVSHMEM_DISABLE_NVLS=1 \
        NVSHMEM_REMOTE_TRANSPORT=none NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=lo -- "$out/nvshmem_pingpong" 10000 $s
    done
  else
    say "[SKIP] nvshmem_pingpong: no NVSHMEM wheel (python3 -c 'import nvidia.nvshmem')"
  fi
else
  say "[SKIP] pingpong2_*: fewer than two GPUs here (two processes on GPU 0 and GPU 1)"
fi

# 2c. How late a stream notices a CPU-written word after waiting a while,
#     and whether a memop on another stream of its context makes it look
#     sooner (docs/stream.md, "Round trips between two processes").
step wait_probe 120 -- "$gpu/stream_wait_probe" 2000
grep -h '^wait_probe' "$out/wait_probe.log" | sed 's/^/    /' | tee -a "$summary"

# 2d. What a two-process round trip costs with nothing of remora, by what a
#     round asks of the GPU (memory operations only, a kernel, a copy).
step switch_probe 120 -- "$gpu/stream_switch_probe" 2000
grep -h '^switch_probe' "$out/switch_probe.log" | sed 's/^/    /' | tee -a "$summary"

# 2e. A staged 64 B write and its signal, from the message to the waiting
#     stream: the CPU setting the signal after the copy (what the server
#     does) against the copy's stream setting it (docs/stream.md).
step signal_probe 120 -- "$gpu/stream_signal_probe" 2000
grep -h '^stream_signal' "$out/signal_probe.log" | sed 's/^/    /' | tee -a "$summary"

# 3. Benchmark: TCP (staging) and the same-host default.
step bench_tcp 100 UCX_TLS=tcp REMORA_PATH=staging -- "$gpu/stream_bench"
step bench_am 100 REMORA_PATH=am -- "$gpu/stream_bench" 0.5

val() { grep -ho "$2=[^ ]*" "$out/$1.log" 2>/dev/null | head -1 | cut -d= -f2; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "n/a"; else printf "%.3f", a / b }'; }
diff_() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "") print "n/a"; else printf "%.2f", a - b }'; }
check() { # check LABEL VALUE OP LIMIT
  awk -v v="$2" -v l="$4" -v op="$3" -v n="$1" 'BEGIN {
    if (v == "n/a" || v == "") { printf "  %-62s %10s   (no figure)\n", n, "n/a"; exit }
    ok = (op == "<=") ? (v + 0 <= l + 0) : (v + 0 >= l + 0)
    printf "  %-62s %10s   target %s %s: %s\n", n, v, op, l, ok ? "met" : "NOT MET" }' | tee -a "$summary"
}

ipc=$(val pingpong_ipc rtt_us); raw=$(val pingpong_raw rtt_us); tcp=$(val pingpong_tcp rtt_us)
rd=$(val bench_tcp host_read64_rtt_us)
say ""
say "== figures (docs/performance.md, stream-ordered operations)"
say "  same-host put_signal ping-pong RTT, 64 B (path $(val pingpong_ipc path)): ${ipc:-n/a} us"
say "  raw cuMemcpyAsync + stream memop ping-pong RTT, 64 B: ${raw:-n/a} us"
check "ratio remora / raw" "$(ratio "$ipc" "$raw")" "<=" 1.5
say "  the same raw round trip with both ranks in one process (no switching between"
say "  two processes' GPU contexts), 64 B: $(val pingpong_raw_local rtt_us) us"
tcpl=$(val pingpong_tcp_local rtt_us); tcpb=$(val pingpong_tcp_local_bare rtt_us)
say "  TCP (staging) put_signal ping-pong RTT, 64 B, two processes: ${tcp:-n/a} us; host 64 B read RTT: ${rd:-n/a} us"
say "  the same, both ranks threads of one process: ${tcpl:-n/a} us with the kernels, ${tcpb:-n/a} us bare"
check "TCP ping-pong RTT (one process, bare) - host read RTT (us)" "$(diff_ "$tcpb" "$rd")" "<=" 10
check "TCP ping-pong RTT (one process, with kernels) - host read RTT (us)" "$(diff_ "$tcpl" "$rd")" "<=" 10
check "TCP ping-pong RTT (two processes) - host read RTT (us)" "$(diff_ "$tcp" "$rd")" "<=" 10
for b in bench_tcp bench_am; do
  say "  [$b, path $(val $b path)]"
  check "queued stream signals per second, one client" "$(val $b stream_signals_per_s)" ">=" 500000
  check "proxy added per op (stream put 64 B - host write 64 B), us" "$(val $b proxy_added_us)" "<=" 2
  check "  the same against host writes with 64 in flight, us" "$(val $b proxy_added_nb_us)" "<=" 2
  for s in 1 16 256; do
    check "stream/host put bandwidth ${s} MiB ($(val $b stream_put_GBps_${s}MiB) / $(val $b host_put_GBps_${s}MiB) GB/s)" "$(val $b put_ratio_${s}MiB)" ">=" 0.9
    say "    the 9 rounds' own ratios: $(val $b put_ratio_rounds_${s}MiB)"
  done
done
say "  same-host 1 MiB put_signal ping-pong RTT: $(val pingpong_ipc_1MiB rtt_us) us"
say "  two processes on one GPU, bare (no kernels): IPC $(val pingpong_ipc_bare rtt_us) us, TCP $(val pingpong_tcp_bare rtt_us) us"
check "TCP ping-pong RTT (two processes, bare) - host read RTT (us)" "$(diff_ "$(val pingpong_tcp_bare rtt_us)" "$rd")" "<=" 10
if [ -f "$out/pingpong2_ipc.log" ]; then
  ipc2=$(val pingpong2_ipc rtt_us); raw2=$(val pingpong2_raw rtt_us); tcp2=$(val pingpong2_tcp rtt_us)
  say "  two GPUs (ranks on GPU 0 and GPU 1), 64 B: IPC ${ipc2:-n/a} us (path $(val pingpong2_ipc path)), raw ${raw2:-n/a} us, TCP ${tcp2:-n/a} us"
  check "two GPUs: ratio remora / raw, 64 B" "$(ratio "$ipc2" "$raw2")" "<=" 1.5
  check "two GPUs: TCP ping-pong RTT - host read RTT (us)" "$(diff_ "$tcp2" "$rd")" "<=" 10
  say "  two GPUs, 1 MiB: IPC $(val pingpong2_ipc_1MiB rtt_us) us, raw $(val pingpong2_raw_1MiB rtt_us) us"
  check "two GPUs: ratio remora / raw, 1 MiB" "$(ratio "$(val pingpong2_ipc_1MiB rtt_us)" "$(val pingpong2_raw_1MiB rtt_us)")" "<=" 1.5
  say "  two GPUs, bare (no kernels), 64 B: IPC $(val pingpong2_ipc_bare rtt_us) us, TCP $(val pingpong2_tcp_bare rtt_us) us; 1 MiB IPC $(val pingpong2_ipc_bare_1MiB rtt_us) us"
  nv64=$(val nvshmem_pingpong_64 rtt_us); nv1m=$(val nvshmem_pingpong_1048576 rtt_us)
  say "  NVSHMEM putmem_signal_on_stream ping-pong, two GPUs: 64 B ${nv64:-n/a} us, 1 MiB ${nv1m:-n/a} us (NCCL's ncclPutSignal needs NCCL >= 2.29)"
  check "two GPUs, bare: remora IPC / NVSHMEM RTT, 64 B" "$(ratio "$(val pingpong2_ipc_bare rtt_us)" "$nv64")" "<=" 1.2
  check "two GPUs, bare: remora IPC / NVSHMEM RTT, 1 MiB" "$(ratio "$(val pingpong2_ipc_bare_1MiB rtt_us)" "$nv1m")" "<=" 1.2
  check "two GPUs, bare: TCP ping-pong RTT - host read RTT (us)" "$(diff_ "$(val pingpong2_tcp_bare rtt_us)" "$rd")" "<=" 10
fi
say ""
[ "$failed" = 0 ] && say "ALL STEPS PASSED (or skipped)" || say "SOME STEPS FAILED: see the logs in $out"
exit $failed
