#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Ring (issue 3) targets, side by side in one run: each round measures remora's
# plain 1 MiB read and 64 B read round trip over TCP loopback, then the ring
# figures, and the table compares medians.
#   bench/ring.sh [BUILD_DIR] [REPS]          (defaults: build, 5)
# Method notes:
# - Everything runs with UCX_TLS=tcp on both ends (TCP loopback).
# - 1 MiB ring: the producer is paced at 1.25x the element rate the plain read
#   reached in the same round, so the ring never runs dry and the consumer, not
#   the producer, is what is measured; its frames use `--source fixed` (each
#   slot's payload written once, every frame restamps its header), since a
#   producer writing 1 MiB per frame spends a whole core on it, which on a
#   2-core machine starves the transfer being measured.
# - 64 B elements/s: producer at full speed, consumer `every`, 3 s.
# - 64 B latency: producer at 10 kHz; end-to-end = consumer's clock minus the
#   frame's timestamp (same host, same clock).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
REPS=${2:-5}
RESULTS=${RESULTS:-$B/bench-ring.jsonl}
remora=$B/tools/remora
[ -x "$remora" ] || { echo "build first: scripts/build.sh $B" >&2; exit 1; }
: >"$RESULTS"
export UCX_TLS=tcp
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

start() { # OUTFILE ARGS...: start a remora server, print its address
  local out=$1; shift
  "$remora" "$@" --listen 127.0.0.1:0 >"$out" 2>/dev/null &
  pids+=($!); echo $! >"$out.pid"
  for _ in $(seq 100); do grep -q listening "$out" && break; sleep 0.05; done
  awk '/listening/ {print $2}' "$out"
}
stop() { kill "$(cat "$1.pid")" 2>/dev/null || true; wait "$(cat "$1.pid")" 2>/dev/null || true; }
# stream RING RATE SECONDS [SERVE ARGS...]: one producer, one consumer; prints the consumer's JSON
stream() {
  local a; a=$(start "$tmp/s.out" stream serve --ring "$1" --rate "$2" "${@:4}")
  "$remora" stream read "$a/${1%%=*}" --seconds "$3" --json
  stop "$tmp/s.out"
}
json_field() { grep -o "\"$2\":[0-9.e+-]*" <<<"$1" | head -1 | cut -d: -f2; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

plain=$(start "$tmp/p.out" serve --region a=256M)
[ -n "$plain" ] || { echo "server did not start" >&2; exit 1; }
echo "rounds: $REPS" >&2
for r in $(seq "$REPS"); do
  j=$("$remora" bench "$plain/a" --size 1M --depth 4 --seconds 2 --json); echo "$j" >>"$RESULTS"
  p=$(json_field "$j" gbps); echo "$p" >>"$tmp/plain"
  rate=$(awk -v p="$p" 'BEGIN { printf "%d", 1.25 * p * 1e9 / 1048576 }')
  j=$(stream f=1Mx64 "$rate" 3 --source fixed); echo "$j" >>"$RESULTS"
  json_field "$j" gbps >>"$tmp/ring1m"
  j=$(stream s=64x65536 max 3); echo "$j" >>"$RESULTS"
  awk -v e="$(json_field "$j" elements)" -v s="$(json_field "$j" seconds)" 'BEGIN { print e / s }' >>"$tmp/rate64"
  j=$("$remora" bench "$plain/a" --size 64 --depth 1 --seconds 1 --json); echo "$j" >>"$RESULTS"
  json_field "$j" lat_us_p50 >>"$tmp/rtt"
  json_field "$j" lat_us_p99 >>"$tmp/rtt99"
  j=$(stream l=64x4096 10000 3); echo "$j" >>"$RESULTS"
  json_field "$j" lat_us_p99 >>"$tmp/lat99"
  json_field "$j" lat_us_p50 >>"$tmp/lat50"
  echo "  round $r: plain $p GB/s, ring paced at $rate Hz" >&2
done
m() { median <"$tmp/$1"; }
echo "per-round values:" >&2
for f in plain ring1m rate64 rtt rtt99 lat50 lat99; do
  printf "  %-7s %s\n" "$f" "$(xargs printf '%.2f ' <"$tmp/$f")" >&2
done
row() { # what value reference op target
  local ratio; ratio=$(awk -v a="$2" -v b="$3" 'BEGIN { print a / b }')
  local ok; ok=$(echo "$ratio $4 $5" | awk '{ if (($2 == ">=" && $1 >= $3) || ($2 == "<=" && $1 <= $3)) print "yes"; else print "NO" }')
  printf "%-50s %12.3f %12.3f %8.2fx   %s %sx  %s\n" "$1" "$2" "$3" "$ratio" "$4" "$5" "$ok"
}
echo
printf "%-50s %12s %12s %9s   %s\n" "measure (medians of $REPS, TCP loopback)" "ring" "reference" "ratio" "target"
row "1 MiB every, GB/s (ref: plain 1 MiB read)"        "$(m ring1m)" "$(m plain)" ">=" 0.9
row "64 B every, elements/s (ref: 1,000,000)"          "$(m rate64)" 1000000      ">=" 1.0
row "64 B at 10 kHz, latency p99 us (ref: 64 B RTT p50)" "$(m lat99)" "$(m rtt)"  "<=" 3.0
row "64 B at 10 kHz, latency p99 us (ref: 64 B RTT p99)" "$(m lat99)" "$(m rtt99)" "<=" 3.0
printf "%-50s %12.3f\n" "64 B at 10 kHz, latency p50 us" "$(m lat50)"
echo "raw results: $RESULTS"
