#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Many clients on one server (issue 15): CLIENTS `remora bench` processes
# reading 1 MiB blocks at depth 4 over TCP, all at once, against one client
# alone on the same server in the same run; for a server on 1 worker and on
# WORKERS (its connections spread over them, nothing asked by the clients).
#   bench/clients.sh [BUILD_DIR] [CLIENTS] [SECONDS] [REPS]
#     (defaults: build, 64, 3, 3; WORKERS: the server's default for this machine)
# Prints, per worker count, the medians over REPS rounds: one client alone,
# the CLIENTS together (sum of their GB/s), the ratio, and the failed clients;
# JSON lines go to $RESULTS (default BUILD_DIR/bench-clients.jsonl).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
CLIENTS=${2:-64}
SECS=${3:-3}
REPS=${4:-3}
cores=$(nproc)
WORKERS=${WORKERS:-$((cores <= 4 ? 1 : (cores / 2 < 8 ? cores / 2 : 8)))} # the server's default
RESULTS=${RESULTS:-$B/bench-clients.jsonl}
remora=$B/tools/remora
[ -x "$remora" ] || { echo "build first: scripts/build.sh $B" >&2; exit 1; }

tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
: >"$RESULTS"

json_field() { grep -o "\"$2\":[0-9.e+-]*" <<<"$1" | head -1 | cut -d: -f2; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# bench_one ADDR: one client's GB/s
bench_one() {
  local j
  j=$(UCX_TLS=tcp "$remora" bench "$1/a" --size 1M --depth 4 --seconds "$SECS" --json)
  json_field "$j" gbps
}

# bench_many ADDR: "SUM FAILED" over CLIENTS clients started together
bench_many() {
  local i cp=()
  for i in $(seq "$CLIENTS"); do
    UCX_TLS=tcp "$remora" bench "$1/a" --size 1M --depth 4 --seconds "$SECS" --json \
      >"$tmp/c$i.out" 2>"$tmp/c$i.err" &
    cp+=($!)
  done
  local failed=0
  for i in "${!cp[@]}"; do
    if ! wait "${cp[$i]}"; then
      failed=$((failed + 1))
      echo "client $((i + 1)) failed: $(tail -3 "$tmp/c$((i + 1)).err" | tr '\n' ' ')" >&2
    fi
  done
  local sum
  sum=$(cat "$tmp"/c*.out | grep -o '"gbps":[0-9.e+-]*' | cut -d: -f2 | awk '{s += $1} END {printf "%.3f", s}')
  rm -f "$tmp"/c*.out "$tmp"/c*.err
  echo "$sum $failed"
}

printf '%-8s %-14s %-22s %-7s %s\n' workers "alone GB/s" "$CLIENTS clients GB/s" ratio failed
for w in $(printf '%s\n' 1 "$WORKERS" | uniq); do
  UCX_TLS=tcp "$remora" serve --listen 127.0.0.1:0 --workers "$w" --region a=64M \
    >"$tmp/srv.out" 2>"$tmp/srv.err" &
  spid=$!
  pids+=($spid)
  for _ in $(seq 100); do
    grep -q listening "$tmp/srv.out" 2>/dev/null && break
    sleep 0.1
  done
  addr=$(awk '/listening/ {print $2}' "$tmp/srv.out")
  [ -n "$addr" ] || { echo "server did not start" >&2; cat "$tmp/srv.err" >&2; exit 1; }
  : >"$tmp/alone"; : >"$tmp/many"; : >"$tmp/failed"
  for _ in $(seq "$REPS"); do
    bench_one "$addr" >>"$tmp/alone"
    read -r sum failed < <(bench_many "$addr")
    echo "$sum" >>"$tmp/many"
    echo "$failed" >>"$tmp/failed"
  done
  alone=$(median <"$tmp/alone")
  many=$(median <"$tmp/many")
  failed=$(awk '{s += $1} END {print s}' "$tmp/failed")
  ratio=$(awk -v a="$alone" -v m="$many" 'BEGIN {printf "%.2f", (a > 0 ? m / a : 0)}')
  printf '%-8s %-14s %-22s %-7s %s\n' "$w" "$alone" "$many" "${ratio}x" "$failed"
  echo "{\"bench\":\"clients\",\"workers\":$w,\"clients\":$CLIENTS,\"alone_gbps\":$alone,\"many_gbps\":$many,\"ratio\":$ratio,\"failed\":$failed}" >>"$RESULTS"
  kill "$spid" 2>/dev/null || true
  wait "$spid" 2>/dev/null || true
  if [ "$failed" != 0 ]; then
    echo "server log, lines of note:" >&2
    grep -v "connected$\|listening\|disconnected$" "$tmp/srv.err" | sort | uniq -c | sort -rn | head -20 >&2 || true
  fi
done
