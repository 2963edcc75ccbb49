#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The cost of --encrypt: plain and encrypted servers side by side in one run
# (both UCX_TLS=tcp, one connection each), alternating for REPS rounds;
# medians of 1 MiB read throughput (depth 4) and of the 64 B round trip.
#   bench/encrypt.sh [BUILD_DIR] [REPS]        (defaults: build, 5)
# JSON lines go to $RESULTS (default: BUILD_DIR/bench-encrypt.jsonl).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
REPS=${2:-5}
RESULTS=${RESULTS:-$B/bench-encrypt.jsonl}
remora=$B/tools/remora
[ -x "$remora" ] || { echo "build first: scripts/build.sh $B" >&2; exit 1; }
: >"$RESULTS"

tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
head -c 32 /dev/urandom | base64 >"$tmp/token"

# start_server NAME ARGS...: prints the address
start_server() {
  local name=$1; shift
  UCX_TLS=tcp "$remora" serve --listen 127.0.0.1:0 --region a=64M --token-file "$tmp/token" "$@" \
    >"$tmp/$name.out" 2>"$tmp/$name.err" &
  pids+=($!)
  for _ in $(seq 100); do
    grep -q listening "$tmp/$name.out" 2>/dev/null && break
    sleep 0.1
  done
  awk '/listening/ {print $2}' "$tmp/$name.out"
}

json_field() { grep -o "\"$2\":[0-9.e+-]*" <<<"$1" | head -1 | cut -d: -f2; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

plain=$(start_server plain)
sealed=$(start_server sealed --encrypt)
[ -n "$plain" ] && [ -n "$sealed" ] || { echo "servers did not start" >&2; cat "$tmp"/*.err >&2; exit 1; }

# run KIND ADDR EXTRA...: one bandwidth and one latency measurement
run() {
  local kind=$1 addr=$2; shift 2
  local j
  j=$(UCX_TLS=tcp "$remora" bench "$addr/a" --size 1M --depth 4 --seconds 1 --json \
        --token-file "$tmp/token" "$@")
  echo "{\"kind\":\"$kind\",\"r\":$j}" >>"$RESULTS"
  json_field "$j" gbps >>"$tmp/${kind}_bw"
  j=$(UCX_TLS=tcp "$remora" bench "$addr/a" --size 64 --depth 1 --seconds 1 --json \
        --token-file "$tmp/token" "$@")
  echo "{\"kind\":\"$kind\",\"r\":$j}" >>"$RESULTS"
  json_field "$j" lat_us_p50 >>"$tmp/${kind}_rtt"
}

for _ in $(seq "$REPS"); do
  run plain "$plain" --path am
  run sealed "$sealed" --encrypt
done

pb=$(median <"$tmp/plain_bw"); sb=$(median <"$tmp/sealed_bw")
pr=$(median <"$tmp/plain_rtt"); sr=$(median <"$tmp/sealed_rtt")
echo "cores: $(nproc)   reps: $REPS   UCX_TLS=tcp, loopback, one connection"
printf '%-28s %12s %12s %8s\n' "" plain encrypted ratio
printf '%-28s %12.3f %12.3f %8.2f\n' "1 MiB read, depth 4 (GB/s)" "$pb" "$sb" "$(awk "BEGIN {print $sb / $pb}")"
printf '%-28s %12.1f %12.1f %8.2f\n' "64 B round trip p50 (us)" "$pr" "$sr" "$(awk "BEGIN {print $sr / $pr}")"
