#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# GPU sockets on a GPU machine: tests and benchmark, every figure the targets
# of docs/gpunet.md need, with ratios. Run after scripts/gpu-test.sh BUILD_DIR
# built everything (nvcc present: gpu_echo_client, gpu_echo_server,
# gpunet_bench, test_gpunet exist).
#   scripts/gpu-gpunet.sh BUILD_DIR OUTDIR
# Every step has a timeout; the whole run stays under 4 minutes. Logs go to
# OUTDIR; a summary is printed and kept in OUTDIR/summary.txt.
# Exit status: the number of failed steps.
set -uo pipefail
build=${1:?usage: $0 BUILD_DIR OUTDIR}
out=${2:?usage: $0 BUILD_DIR OUTDIR}
mkdir -p "$out"
export REMORA_LOG=${REMORA_LOG:-warn}
root=$(cd "$(dirname "$0")/.." && pwd)
deps=$root/.gpu-deps/usr/lib/x86_64-linux-gnu
[ -d "$deps" ] && export LD_LIBRARY_PATH=$deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fails=0
summary=$out/summary.txt
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
pids=()
cleanup() { for p in "${pids[@]:-}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null; done; }
trap cleanup EXIT

for b in gpu_echo_client gpu_echo_server gpunet_bench test_gpunet; do
  if [ ! -x "$build/$b" ]; then
    say "MISSING $build/$b (was nvcc found when $build was configured?)"
    exit 1
  fi
done
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader >"$out/gpus.txt" 2>&1
say "== GPUs: $(tr '\n' ';' <"$out/gpus.txt")"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# step NAME TIMEOUT CMD...: run with a timeout, log to OUTDIR/NAME.log
step() {
  local name=$1 t=$2; shift 2
  local t0=$SECONDS
  timeout -k 5 "$t" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  if [ $rc -eq 0 ]; then say "PASSED $name ($((SECONDS - t0)) s)";
  elif [ $rc -eq 77 ]; then say "SKIPPED $name (no GPU)";
  else say "FAILED $name (exit $rc$([ $rc -eq 124 ] && echo ', timed out'); $out/$name.log)"; fails=$((fails + 1)); fi
  return $rc
}

# 1. The GPU test program: CPU remora peer, TCP peer, 64 blocks, GPU server
#    with 3 CPU clients, GPU peer in another process, peer killed, proxy
#    destroyed, bad arguments (two-GPU case waived with one GPU).
step test_gpunet 120 "$build/test_gpunet" "$build/gpu_echo_server"
if [ $? -eq 77 ]; then say "no CUDA device here: nothing else to run"; exit 77; fi
grep -E '^(PASSED|FAILED|WAIVED)|check failed|->' "$out/test_gpunet.log" | sed 's/^/    /' | tee -a "$summary"
# 1a. Queued transfers between two processes on one GPU (time-sliced).
if [ -x "$build/test_gpunet_queued" ]; then
  step test_gpunet_queued 150 "$build/test_gpunet_queued"
  grep -E '^(PASSED|FAILED)|check failed' "$out/test_gpunet_queued.log" | sed 's/^/    /' | tee -a "$summary"
fi

# 2. GPUnet's README echo client (verbatim kernel), against plain TCP peers:
#    a Python echo server, then nc (if present), 8 blocks, checked variant too.
port=$(free_port)
python3 - "$port" >"$out/python_echo.log" 2>&1 <<'PY' &
import socket, sys, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(64)
def serve(c):
    while True:
        d = c.recv(65536)
        if not d: break
        c.sendall(d)
    c.close()
s.settimeout(90)
while True:
    try: c, _ = s.accept()
    except socket.timeout: break
    threading.Thread(target=serve, args=(c,), daemon=True).start()
PY
pids+=("$!")
sleep 0.5
step readme_client_python 60 "$build/gpu_echo_client" 127.0.0.1 "$port" 8
step readme_client_python_checked 60 "$build/gpu_echo_client" 127.0.0.1 "$port" 8 --check
if command -v nc >/dev/null 2>&1 && command -v mkfifo >/dev/null 2>&1; then
  port=$(free_port)
  fifo=$out/nc.fifo; rm -f "$fifo"; mkfifo "$fifo"
  # nc as a one-connection echo server: its output fed back to its input.
  (timeout 60 nc -l 127.0.0.1 "$port" <"$fifo" >"$fifo" 2>"$out/nc.log" || timeout 60 nc -l -p "$port" <"$fifo" >"$fifo" 2>>"$out/nc.log") &
  pids+=("$!")
  sleep 0.5
  step readme_client_nc_checked 60 "$build/gpu_echo_client" 127.0.0.1 "$port" 1 --check
else
  say "SKIPPED readme_client_nc_checked (no nc)"
fi

# 3. GPU <-> GPU, two processes on one GPU: the GPU echo server and the
#    checked GPU client, 16 blocks.
port=$(free_port)
GPU_ECHO_TIMEOUT_MS=60000 timeout -k 5 70 "$build/gpu_echo_server" "$port" 16 >"$out/gpu_echo_server.log" 2>&1 &
spid=$!; pids+=("$spid")
for _ in $(seq 1 300); do grep -q listening "$out/gpu_echo_server.log" 2>/dev/null && break; sleep 0.1; done
step gpu_to_gpu_echo_checked 60 "$build/gpu_echo_client" 127.0.0.1 "$port" 16 --check
if wait "$spid"; then say "PASSED gpu_echo_server (served 16)"; else say "FAILED gpu_echo_server ($out/gpu_echo_server.log)"; fails=$((fails + 1)); fi

# 4. The benchmark: CPU and GPU side by side, ratios against the targets.
step gpunet_bench 150 "$build/gpunet_bench" --iters 20000 --blocks 64 --mib-per-stream 64
grep -E '_us|_GBps|failed' "$out/gpunet_bench.log" | sed 's/^/    /' | tee -a "$summary"

# 4a. Large sends to a CPU sink: the kernel's threads copying into the ring
#     (REMORA_GPUNET_BOUNCE_MIN=0) against the proxy copying the buffer out
#     with the copy engine (bounce buffer; the minimum set to the send size),
#     alternating, two rounds each of 1 GiB (loopback TCP moves +-30 %
#     between rounds: compare medians of several runs).
if [ -z "${GPUNET_SKIP_BOUNCE:-}" ]; then
  for kib in 256 1024 4096 16384; do
    for round in 1 2; do
      for mode in ring bounce; do
        bmin=0; [ "$mode" = bounce ] && bmin=$((kib * 1024))
        REMORA_GPUNET_BOUNCE_MIN=$bmin step "gpunet_bench_${kib}KiB_${mode}_$round" 60 \
          "$build/gpunet_bench" --only stream --msg-kib "$kib" --mib-per-stream 256
        grep -E '_GBps|failed' "$out/gpunet_bench_${kib}KiB_${mode}_$round.log" |
          sed "s/^/    $mode: /" | tee -a "$summary"
      done
    done
  done
fi

# 4b. GPU <-> GPU between two GPUs (sender on GPU 0, receiver on GPU 1):
#     peer copies against cudaMemcpyPeer. Skipped with one GPU.
if [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -ge 2 ]; then
  for mib in 4 16; do
    step "gpunet_bench_2gpu_${mib}MiB" 90 "$build/gpunet_bench" --only gpu-gpu --gg-mib "$mib" --sink-gpu 1
    grep -E '_GBps|failed' "$out/gpunet_bench_2gpu_${mib}MiB.log" | sed 's/^/    two GPUs: /' | tee -a "$summary"
  done
else
  say "SKIPPED gpunet_bench_2gpu_* (fewer than two GPUs)"
fi

# 5. GPU <-> GPU again under MPS. Without it two processes on one GPU
#    time-slice: a kernel waiting on a socket keeps its slice, so each
#    message waits for a switch (milliseconds). With MPS (how services that
#    share a GPU are run) both kernels run at once. The daemon is ours,
#    started only if none runs, and stopped at the end; no GPU setting
#    changes.
if command -v nvidia-cuda-mps-control >/dev/null 2>&1 && ! pgrep -x nvidia-cuda-mps >/dev/null; then
  export CUDA_MPS_PIPE_DIRECTORY=$out/mps CUDA_MPS_LOG_DIRECTORY=$out/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d; then
    # A full queue (8 in flight, the bench's default), then half of one.
    for run in 4:8 16:8 4:4; do
      mib=${run%:*} n=${run#*:}
      step "gpunet_bench_mps_${mib}MiB_${n}q" 90 "$build/gpunet_bench" --only gpu-gpu --gg-mib "$mib" \
        --gg-inflight "$n"
      grep -E '_GBps|in flight|failed' "$out/gpunet_bench_mps_${mib}MiB_${n}q.log" | sed 's/^/    MPS: /' |
        tee -a "$summary"
    done
    echo quit | nvidia-cuda-mps-control
  else
    say "SKIPPED gpunet_bench under MPS (the daemon did not start)"
  fi
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
else
  say "SKIPPED gpunet_bench under MPS (no nvidia-cuda-mps-control, or MPS already running)"
fi

say "== $fails failed step(s); logs in $out"
exit "$fails"
