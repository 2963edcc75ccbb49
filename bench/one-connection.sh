#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# One connection, 1 MiB reads at depth 4 over TCP, under UCX protocol
# settings, each round beside a `ucp_am_bw` (issue 15: where one
# connection's time goes). One server per setting, started once; the client
# runs under the same environment. Also depth 8, and 1 MiB blocks of a
# 256 MiB region (the source out of the caches), under the default; and, for
# a cost per block against a cost per byte, 256 KiB blocks at depth 16 and
# 4 (4 MiB and 1 MiB of the client's buffers in flight; `ucp_am_bw`'s
# receiver lands every message in one buffer) and 4 MiB blocks at depth 4,
# each beside a `ucp_am_bw` of that size; and the default's 1 MiB reads cut
# by the client into 512 KiB and 256 KiB chunks (REMORA_CHUNK_SIZE: the same
# buffers, twice and four times the rendezvous in flight).
# A second reference, am_bw_lo_v1, is `ucp_am_bw` on the loopback interface
# alone with UCX's protocols v1: one TCP connection, as remora's server bound
# to 127.0.0.1 has (the default `ucp_am_bw` splits its rendezvous data over
# every interface; docs/performance.md, Session 41).
#   bench/one-connection.sh [BUILD_DIR] [REPS]      (defaults: build, 5)
# Prints one line per round (GB/s), then each setting's median and its
# ratio to the median `ucp_am_bw`; then, REPS times, where the CPU goes: the
# share of a core each side spent in user space and in the kernel, for a
# longer `ucp_am_bw` (its client sends, its server receives) and for remora's
# default (the server sends, the client receives), each over its wall time.
# With PERF set (a perf binary, e.g. PERF=perf; the GPU hosts have none:
# GPU_DEPS_PERF=1 scripts/gpu-deps.sh bundles Debian's), last: where each side's time
# goes, a `perf record` of 3 s of each of the four processes, printed as the
# share of its samples per library and its top symbols.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
REPS=${2:-5}
remora=$B/tools/remora
[ -x .gpu-deps/usr/bin/ucx_perftest ] && ! command -v ucx_perftest >/dev/null && PATH=$PWD/.gpu-deps/usr/bin:$PATH
command -v ucx_perftest >/dev/null || { echo "ucx_perftest missing (apt-get install ucx-utils)" >&2; exit 1; }
[ -x "$remora" ] || { echo "build first: scripts/build.sh $B" >&2; exit 1; }
export UCX_TLS=tcp
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

names=(default rndv_am proto_n proto_y eager flush)
declare -A envs=([default]="" [rndv_am]="UCX_RNDV_SCHEME=am" [proto_n]="UCX_PROTO_ENABLE=n"
                 [proto_y]="UCX_PROTO_ENABLE=y" [eager]="UCX_RNDV_THRESH=inf"
                 [flush]="UCX_RNDV_PUT_FORCE_FLUSH=y"
                 [chunk512k]="REMORA_CHUNK_SIZE=524288" [chunk256k]="REMORA_CHUNK_SIZE=262144")
declare -A addr
for n in "${names[@]}"; do
  # shellcheck disable=SC2086
  env ${envs[$n]} "$remora" serve --listen 127.0.0.1:0 --region hot=1M --region a=256M \
    --region q=256K --region big=4M \
    >"$tmp/$n.out" 2>"$tmp/$n.err" &
  pids+=($!)
done
for n in "${names[@]}"; do
  for _ in $(seq 100); do grep -q listening "$tmp/$n.out" && break; sleep 0.1; done
  addr[$n]=$(awk '/listening/ {print $2}' "$tmp/$n.out")
  [ -n "${addr[$n]}" ] || { echo "server '$n' did not start:" >&2; cat "$tmp/$n.err" >&2; exit 1; }
done

port=$((20000 + RANDOM % 20000))
# am_bw [ITERS [SIZE]]: GB/s of one `ucp_am_bw` of ITERS messages of SIZE
# bytes (defaults 2000, 1 MiB), under $AM_ENV; each side's user, kernel and
# wall seconds go to $tmp/t.send and $tmp/t.recv
TIMEFORMAT='%U %S %R'
AM_ENV=
am_bw() {
  port=$((port + 1))
  # shellcheck disable=SC2086
  ( time env $AM_ENV ucx_perftest -p $port >/dev/null 2>&1 ) 2>"$tmp/t.recv" &
  local s=$!
  for _ in $(seq 50); do grep -q ":$port " <<<"$(ss -ltn 2>/dev/null)" && break; sleep 0.05; done
  # shellcheck disable=SC2086
  { time env $AM_ENV ucx_perftest 127.0.0.1 -p $port -t ucp_am_bw -s "${2:-1048576}" \
      -n "${1:-2000}" >"$tmp/t.out" 2>/dev/null ; } 2>"$tmp/t.send"
  wait $s 2>/dev/null || true
  awk '/Final/ {printf "%.3f\n", $6 * 1048576 / 1e9}' "$tmp/t.out"
}
# read ENVNAME TARGET DEPTH [SECONDS [SIZE]]: GB/s of `remora bench` (1 second
# of 1 MiB blocks by default)
rd() {
  # shellcheck disable=SC2086
  env ${envs[$1]} "$remora" bench "$2" --size "${5:-1M}" --depth "$3" --seconds "${4:-1}" --json |
    grep -o '"gbps":[0-9.]*' | cut -d: -f2
}
# keep NAME VALUE: one round's value of NAME, also on the round's line
keep() { echo "${2:-0}" >>"$tmp/v.$1"; line="$line $1 ${2:-failed}"; }
for r in $(seq "$REPS"); do
  line="round $r"
  keep am_bw "$(am_bw)"
  for n in "${names[@]}"; do
    keep "$n" "$(rd "$n" "${addr[$n]}/hot" 4)"
  done
  keep depth8 "$(rd default "${addr[default]}/hot" 8)"
  keep chunk512k "$(rd chunk512k "${addr[default]}/hot" 4)"
  keep chunk256k "$(rd chunk256k "${addr[default]}/hot" 4)"
  keep cold "$(rd default "${addr[default]}/a" 4)"
  keep am_bw_lo_v1 "$(AM_ENV="UCX_NET_DEVICES=lo UCX_PROTO_ENABLE=n" am_bw)"
  keep am_bw_256k "$(am_bw 8000 262144)"
  keep blocks_256k "$(rd default "${addr[default]}/q" 16 1 256K)"
  keep blocks_256k_d4 "$(rd default "${addr[default]}/q" 4 1 256K)"
  keep am_bw_4m "$(am_bw 500 4194304)"
  keep blocks_4m "$(rd default "${addr[default]}/big" 4 1 4M)"
  echo "$line"
done
# CPU: user and kernel seconds per wall second of each side.
hz=$(getconf CLK_TCK)
ticks() { awk '{print $14, $15}' "/proc/$1/stat"; }
share() { awk "BEGIN { printf \"%.2f+%.2f\", ($1) / ($3), ($2) / ($3) }"; } # U S WALL (expressions)
cpu_am_bw() {
  local g; g=$(am_bw 10000)
  read -r su ss sw <"$tmp/t.send"; read -r ru rs rw <"$tmp/t.recv"
  echo "am_bw $g GB/s: sender $(share "$su" "$ss" "$sw") receiver $(share "$ru" "$rs" "$rw")"
}
cpu_remora() {
  local p=${pids[0]} t0 t1 w0 w1 # pids[0]: the default setting's server
  read -r -a t0 < <(ticks "$p"); w0=$(date +%s.%N)
  { time rd default "${addr[default]}/hot" 4 3 >"$tmp/t.out" ; } 2>"$tmp/t.recv"
  read -r -a t1 < <(ticks "$p"); w1=$(date +%s.%N)
  read -r ru rs rw <"$tmp/t.recv"
  echo "remora $(cat "$tmp/t.out") GB/s: server (sender)" \
       "$(share "$((t1[0] - t0[0])) / $hz" "$((t1[1] - t0[1])) / $hz" "$w1 - $w0")" \
       "client (receiver) $(share "$ru" "$rs" "$rw")"
}
for r in $(seq "$REPS"); do
  echo "cpu round $r (user+kernel cores): $(cpu_am_bw); $(cpu_remora)"
done

med() { sort -g "$tmp/v.$1" | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
ref=$(med am_bw)
printf '%-15s %8s %8s\n' setting GB/s "x am_bw"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { print (b > 0 ? a / b : 0) }'; }
for n in am_bw am_bw_lo_v1 "${names[@]}" depth8 chunk512k chunk256k cold; do
  m=$(med "$n")
  printf '%-15s %8.3f %7.2fx\n' "$n" "$m" "$(ratio "$m" "$ref")"
done
# against NAME REF: NAME's median and its ratio to REF's, named with REF's median
against() {
  printf '%-15s %8.3f %7.2fx of %s (%.3f)\n' "$1" "$(med "$1")" "$(ratio "$(med "$1")" "$(med "$2")")" \
    "$2" "$(med "$2")"
}
against default am_bw_lo_v1
against blocks_256k am_bw_256k
against blocks_256k_d4 am_bw_256k
against blocks_4m am_bw_4m

# profile NAME PID: 3 s of PID's samples; its shares per library and top symbols
profile() {
  $PERF record -q -F 1999 -o "$tmp/$1.data" -p "$2" -- sleep 3 >/dev/null 2>&1 || { echo "  $1: perf record failed"; return; }
  echo "  $1 (share of its samples per library, then its top symbols):"
  $PERF report -i "$tmp/$1.data" --no-children --sort dso --stdio 2>/dev/null | awk '/%/ && n++ < 6 { print "    " $0 }'
  $PERF report -i "$tmp/$1.data" --no-children --sort dso,sym --stdio 2>/dev/null | awk '/%/ && n++ < 10 { print "    " $0 }'
}
if [ -n "${PERF:-}" ]; then
  echo "where the time goes (perf, 3 s of each side at full load):"
  ( sleep 0.5; profile remora_server "${pids[0]}" ) &
  pf=$!
  "$remora" bench "${addr[default]}/hot" --size 1M --depth 4 --seconds 5 --json >/dev/null &
  rb=$!
  sleep 0.5; profile remora_client "$rb" >"$tmp/p.client"
  wait "$pf" "$rb"; cat "$tmp/p.client"
  port=$((port + 1))
  ucx_perftest -p $port >/dev/null 2>&1 &
  pr=$!
  sleep 0.4
  # long enough on any machine; stopped once both sides are profiled
  ucx_perftest 127.0.0.1 -p $port -t ucp_am_bw -s 1048576 -n 10000000 >/dev/null 2>&1 &
  ps=$!
  sleep 0.5; profile am_bw_receiver "$pr" >"$tmp/p.recv" & pf=$!
  profile am_bw_sender "$ps"
  wait "$pf"
  kill "$ps" "$pr" 2>/dev/null || true
  wait "$ps" "$pr" 2>/dev/null || true
  cat "$tmp/p.recv"
fi
