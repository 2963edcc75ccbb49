#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# KIRO compatibility (issue 12) targets, side by side in one run, TCP loopback
# on this host, medians of REPS rounds:
#   1. KIRO-style full-block kiro_client_sync of 4 MiB in a loop vs `remora
#      bench` reading the same region (the KiroServer's "kiro") of the same
#      server, one read at a time (--depth 1): same region, same path.
#   2. kiro_client_ping_server vs `remora ping` to the same server (p50 µs).
#   3. KiroSb clone of 1 MiB elements pushed at 1 kHz (serving KiroSb) vs
#      `remora stream read --mode latest` of a 1 MiB ring at 1 kHz: every
#      push seen, end-to-end latency p99 (consumer clock minus the stamp
#      taken just before the push; same host, same clock).
#   bench/kiro.sh [BUILD_DIR] [REPS]        (defaults: build, 3)
# Each round alternates remora and KIRO three times for 1 and 2 (1 s of
# syncs, 500 pings each), then runs 3 once each for 5 s; the table shows
# medians over all runs.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
REPS=${2:-3}
remora=$B/tools/remora
kb=$B/bench/kiro/kiro_bench
for x in "$remora" "$kb"; do [ -x "$x" ] || { echo "build first: missing $x" >&2; exit 1; }; done
export REMORA_LOG=${REMORA_LOG:-warn}
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_line() { for _ in $(seq 200); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done; echo "no '$2' in $1" >&2; exit 1; }
json_field() { grep -o "\"$2\":[0-9.e+-]*" <<<"$1" | head -1 | cut -d: -f2; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# 1 + 2: one KiroServer serving 4 MiB
port=$(free_port)
"$kb" serve "$port" 4194304 >"$tmp/serve.out" & pids+=($!)
wait_line "$tmp/serve.out" ready
addr=127.0.0.1:$port
# 3: a serving KiroSb at 1 kHz and a remora stream at 1 kHz (one at a time)
echo "rounds: $REPS" >&2
for r in $(seq "$REPS"); do
  # A and B alternate in short runs, so that load from elsewhere hits both alike
  for _ in 1 2 3; do
    j=$("$remora" bench "$addr/kiro" --size 4M --depth 1 --seconds 1 --json)
    json_field "$j" gbps >>"$tmp/rsync"
    j=$("$kb" sync 127.0.0.1 "$port" 1)
    json_field "$j" gbps >>"$tmp/ksync"
    "$remora" ping "$addr" -n 500 | awk -F'= ' '/pings to/ {split($2, v, "/"); print v[3]}' >>"$tmp/rping"
    j=$("$kb" ping 127.0.0.1 "$port" 500)
    json_field "$j" p50_us >>"$tmp/kping"
  done
  sport=$(free_port)
  "$kb" sb-serve "$sport" 1048576 1000 >"$tmp/sb.out" & sbp=$!; pids+=($sbp)
  wait_line "$tmp/sb.out" ready
  j=$("$kb" sb-clone 127.0.0.1 "$sport" 5)
  kill "$sbp"; wait "$sbp" 2>/dev/null || true
  json_field "$j" lat_us_p99 >>"$tmp/ksb99"
  json_field "$j" lat_us_p50 >>"$tmp/ksb50"
  json_field "$j" missed >>"$tmp/ksbmiss"
  json_field "$j" seen >>"$tmp/ksbseen"

  "$remora" stream serve --listen 127.0.0.1:0 --ring r=1Mx8 --rate 1000 >"$tmp/st.out" 2>/dev/null & stp=$!; pids+=($stp)
  wait_line "$tmp/st.out" listening
  saddr=$(awk '/listening/ {print $2}' "$tmp/st.out")
  j=$("$remora" stream read "$saddr/r" --mode latest --seconds 5 --json)
  kill "$stp"; wait "$stp" 2>/dev/null || true
  json_field "$j" lat_us_p99 >>"$tmp/rsb99"
  json_field "$j" lat_us_p50 >>"$tmp/rsb50"
  json_field "$j" drops >>"$tmp/rsbdrops"
  echo "  round $r: sync $(tail -1 "$tmp/ksync")/$(tail -1 "$tmp/rsync") GB/s, ping $(tail -1 "$tmp/kping")/$(tail -1 "$tmp/rping") us," \
       "sb p99 $(tail -1 "$tmp/ksb99")/$(tail -1 "$tmp/rsb99") us, sb seen $(tail -1 "$tmp/ksbseen") missed $(tail -1 "$tmp/ksbmiss")" >&2
done
m() { median <"$tmp/$1"; }
echo "per-round values:" >&2
for f in ksync rsync kping rping ksb50 rsb50 ksb99 rsb99 ksbseen ksbmiss rsbdrops; do
  printf "  %-8s %s\n" "$f" "$(xargs printf '%.2f ' <"$tmp/$f")" >&2
done
row() { # what kiro reference op target
  local ratio ok
  ratio=$(awk -v a="$2" -v b="$3" 'BEGIN { print a / b }')
  ok=$(echo "$ratio $4 $5" | awk '{ if (($2 == ">=" && $1 >= $3) || ($2 == "<=" && $1 <= $3)) print "yes"; else print "NO" }')
  printf "%-58s %10.2f %10.2f %8.2fx   %s %sx  %s\n" "$1" "$2" "$3" "$ratio" "$4" "$5" "$ok"
}
echo
printf "%-58s %10s %10s %9s   %s\n" "measure (medians, $REPS rounds, loopback)" "kiro" "remora" "ratio" "target"
row "4 MiB full sync, GB/s (ref: remora bench --depth 1)" "$(m ksync)" "$(m rsync)" ">=" 0.9
row "ping p50, us (ref: remora ping p50)"                 "$(m kping)" "$(m rping)" "<=" 1.2
row "1 MiB @ 1 kHz latency p99, us (ref: stream read latest)" "$(m ksb99)" "$(m rsb99)" "<=" 2.0
missed=$(awk '{s += $1} END {print s}' "$tmp/ksbmiss")
printf "%-58s %10s\n" "KiroSb pushes missed by the clone, all rounds (target 0)" "$missed"
[ "$missed" -eq 0 ] && echo "every push seen: yes" || echo "every push seen: NO"
