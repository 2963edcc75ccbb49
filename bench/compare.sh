#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# remora side by side with ucx_perftest and memcpy, in one run on one machine,
# alternating the two for REPS rounds and comparing medians.
#   bench/compare.sh [BUILD_DIR] [REPS]        (defaults: build, 5)
# REMORA_CM=0 or 1 sets how the TCP server connects clients (worker addresses or
# UCX's connection manager; by default the manager from UCX 1.16 on).
# LANES (default 4): the TCP server serves that many lanes; TCP reads are
# measured on one connection and again spread over LANES (docs/protocol.md 9.6).
# Prints a table of ratios against the targets; JSON lines go to $RESULTS
# (default: BUILD_DIR/bench-results.jsonl).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
REPS=${2:-5}
LANES=${LANES:-4}
RESULTS=${RESULTS:-$B/bench-results.jsonl}
remora=$B/tools/remora
[ -x .gpu-deps/usr/bin/ucx_perftest ] && ! command -v ucx_perftest >/dev/null && PATH=$PWD/.gpu-deps/usr/bin:$PATH
command -v ucx_perftest >/dev/null || { echo "ucx_perftest missing (apt-get install ucx-utils)" >&2; exit 1; }
[ -x "$remora" ] || { echo "build first: scripts/build.sh $B" >&2; exit 1; }
: >"$RESULTS"

tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

# start_server NAME ENV... -- ARGS...: prints the address
start_server() {
  local name=$1; shift
  env "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  pids+=($!)
  echo $! >"$tmp/$name.pid"
  for _ in $(seq 100); do
    grep -q listening "$tmp/$name.out" 2>/dev/null && break
    sleep 0.1
  done
  awk '/listening/ {print $2}' "$tmp/$name.out"
}

port=$((20000 + RANDOM % 20000))
# perftest TEST SIZE ITERS [EXTRA...]: one ucx_perftest run over TCP loopback;
# prints the "Final:" line's fields: iters lat50 latavg latall bwavg bwall rate...
perftest() {
  port=$((port + 1))
  local t=$1 sz=$2 n=$3
  shift 3
  UCX_TLS=tcp ucx_perftest -p $port "$@" >/dev/null 2>&1 &
  local spid=$!
  local line=""
  # The perftest server serves one client and exits: connect only once it listens.
  for _ in $(seq 50); do
    grep -q ":$port " <<<"$(ss -ltn 2>/dev/null)" && break
    sleep 0.05
  done
  for _ in $(seq 50); do
    line=$(UCX_TLS=tcp ucx_perftest 127.0.0.1 -p $port -t "$t" -s "$sz" -n "$n" "$@" 2>/dev/null | grep Final || true)
    [ -n "$line" ] && break
    sleep 0.1
  done
  wait $spid 2>/dev/null || true
  echo "$line" | awk '{print $2, $3, $4, $5, $6, $7}'
}

calc() { awk "BEGIN { print $1 }"; }
json_field() { grep -o "\"$2\":[0-9.e+-]*" <<<"$1" | head -1 | cut -d: -f2; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
record() { echo "$1" >>"$RESULTS"; }

# ucx_perftest sends one buffer over and over, so its source stays in cache.
# Regions "hot" and "hot16" give remora the same: every request of a depth
# reads the one block again, from the region of exactly that size.
# Region "a" (256 MiB) streams from memory instead, reported beside it.
tcp_addr=$(start_server tcp UCX_TLS=tcp ${REMORA_CM:+REMORA_CM=$REMORA_CM} "$remora" serve --listen 127.0.0.1:0 \
  --lanes "$LANES" --region a=256M --region hot=1M --region hot16=16M)
shm_addr=$(start_server shm "$remora" serve --listen 127.0.0.1:0 --region a=256M)
[ -n "$tcp_addr" ] && [ -n "$shm_addr" ] || { echo "servers did not start" >&2; cat "$tmp"/*.err >&2; exit 1; }

echo "rounds: $REPS (each alternates ucx_perftest and remora)" >&2
for r in $(seq "$REPS"); do
  # 1 MiB bandwidth over TCP
  read -r _ _ _ _ bw _ < <(perftest ucp_am_bw 1048576 2000)
  calc "$bw * 1048576 / 1000000000" >>"$tmp/pt_bw"
  # the same with UCX's peer-failure handling on (-e), as remora's endpoints have it
  read -r _ _ _ _ bw _ < <(perftest ucp_am_bw 1048576 2000 -e)
  calc "$bw * 1048576 / 1000000000" >>"$tmp/pt_bw_e"
  j=$(UCX_TLS=tcp "$remora" bench "$tcp_addr/hot" --size 1M --depth 4 --seconds 1 --json)
  record "$j"; json_field "$j" gbps >>"$tmp/rm_bw"
  j=$(UCX_TLS=tcp "$remora" bench "$tcp_addr/hot16" --size 16M --depth 2 --seconds 1 --json)
  record "$j"; json_field "$j" gbps >>"$tmp/rm_bw16"
  j=$(UCX_TLS=tcp "$remora" bench "$tcp_addr/a" --size 1M --depth 4 --seconds 1 --json)
  record "$j"; json_field "$j" gbps >>"$tmp/rm_bw_cold"
  # the same three spread over the server's lanes
  j=$(UCX_TLS=tcp "$remora" bench "$tcp_addr/hot" --size 1M --depth 4 --seconds 1 --lanes "$LANES" --json)
  record "$j"; json_field "$j" gbps >>"$tmp/rm_bw_l"
  j=$(UCX_TLS=tcp "$remora" bench "$tcp_addr/hot16" --size 16M --depth 2 --seconds 1 --lanes "$LANES" --json)
  record "$j"; json_field "$j" gbps >>"$tmp/rm_bw16_l"
  j=$(UCX_TLS=tcp "$remora" bench "$tcp_addr/a" --size 1M --depth 4 --seconds 1 --lanes "$LANES" --json)
  record "$j"; json_field "$j" gbps >>"$tmp/rm_bw_cold_l"
  # 64-byte round trip over TCP (perftest reports one-way latency)
  read -r _ lat50 _ _ _ _ < <(perftest ucp_am_lat 64 50000)
  calc "$lat50 * 2" >>"$tmp/pt_rtt"
  j=$(UCX_TLS=tcp "$remora" bench "$tcp_addr/a" --size 64 --depth 1 --seconds 1 --json)
  record "$j"; json_field "$j" lat_us_p50 >>"$tmp/rm_rtt"
  # UCX's own RMA get over TCP, for reference
  read -r _ _ _ _ gbw _ < <(perftest ucp_get 1048576 200)
  calc "$gbw * 1048576 / 1000000000" >>"$tmp/pt_get"
  # same host: 256 MiB read of a library-allocated region vs memcpy
  j=$("$B/bench/memcpy_bench" $((256 << 20)) 5)
  record "$j"; json_field "$j" gbps >>"$tmp/memcpy"
  j=$("$remora" bench "$shm_addr/a" --size 256M --depth 1 --iters 5 --json)
  record "$j"; json_field "$j" gbps >>"$tmp/rm_map"
  echo "  round $r done" >&2
done

# Idle: a connected client that does nothing, and the server it is connected to.
srv_pid=$(cat "$tmp/tcp.pid")
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
"$B/bench/idle_client" "$tcp_addr" 5 >"$tmp/idle.json" &
ic=$!
sleep 0.5
t0=$(ticks "$srv_pid"); s0=$(date +%s.%N)
wait $ic
t1=$(ticks "$srv_pid"); s1=$(date +%s.%N)
hz=$(getconf CLK_TCK)
srv_idle=$(calc "100 * ($t1 - $t0) / $hz / ($s1 - $s0)")
cli_idle=$(json_field "$(cat "$tmp/idle.json")" cpu_pct)
record "{\"op\":\"idle\",\"server_cpu_pct\":$(printf %.3f "$srv_idle"),\"client_cpu_pct\":$cli_idle}"

m() { median <"$tmp/$1"; }
echo "per-round values (spread shows how noisy the machine is):" >&2
for f in pt_bw pt_bw_e rm_bw rm_bw16 rm_bw_cold rm_bw_l rm_bw16_l rm_bw_cold_l pt_rtt rm_rtt pt_get memcpy rm_map; do
  printf "  %-8s %s\n" "$f" "$(xargs printf '%.2f ' <"$tmp/$f")" >&2
done
row() { # what remora reference ratio target-op target
  local ratio; ratio=$(calc "$2 / $3")
  local ok; ok=$(echo "$ratio $4 $5" | awk '{ if (($2 == ">=" && $1 >= $3) || ($2 == "<=" && $1 <= $3)) print "yes"; else print "NO" }')
  printf "%-44s %10.3f %10.3f %7.2fx   %s %sx  %s\n" "$1" "$2" "$3" "$ratio" "$4" "$5" "$ok"
}
echo
printf "%-44s %10s %10s %8s   %s\n" "measure (medians of $REPS)" "remora" "reference" "ratio" "target"
row "read 1 MiB TCP, $LANES lanes (ref: ucp_am_bw)"    "$(m rm_bw_l)"   "$(m pt_bw)"  ">=" 1.0
row "read 16 MiB TCP, $LANES lanes (ref: am_bw 1MiB)"  "$(m rm_bw16_l)" "$(m pt_bw)"  ">=" 1.0
row "read 1 MiB from 256 MiB, $LANES lanes (am_bw)"    "$(m rm_bw_cold_l)" "$(m pt_bw)" ">=" 1.0
row "read 1 MiB TCP, 1 lane (ref: ucp_am_bw)"       "$(m rm_bw)"   "$(m pt_bw)"  ">=" 1.0
row "read 16 MiB TCP, 1 lane (ref: am_bw 1MiB)"     "$(m rm_bw16)" "$(m pt_bw)"  ">=" 1.0
row "read 1 MiB from 256 MiB, 1 lane (am_bw)"       "$(m rm_bw_cold)" "$(m pt_bw)" ">=" 1.0
row "read 1 MiB TCP, GB/s (ref: ucp_am_bw -e)"    "$(m rm_bw)"   "$(m pt_bw_e)" ">=" 1.0
row "read 16 MiB TCP, GB/s (ref: ucp_am_bw -e)"   "$(m rm_bw16)" "$(m pt_bw_e)" ">=" 1.0
row "read 1 MiB TCP vs ucp_get over TCP, GB/s"    "$(m rm_bw)"   "$(m pt_get)" ">=" 1.0
row "64 B read round trip TCP, us (ref: am_lat)"  "$(m rm_rtt)"  "$(m pt_rtt)" "<=" 1.3
row "same-host read 256 MiB, GB/s (ref: memcpy)"  "$(m rm_map)"  "$(m memcpy)" ">=" 0.8
printf "%-44s %10.3f %10s\n" "idle server CPU, % of one core (< 2)" "$srv_idle" ""
printf "%-44s %10.3f %10s\n" "idle client CPU, % of one core (< 2)" "$cli_idle" ""
echo "raw results: $RESULTS"
