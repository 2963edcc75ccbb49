#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Rings under real load (issue 16): many subscribers, producers faster than
# the network, the latency tail. Every row runs `remora stream serve` and N
# `remora stream read --json` processes at once over TCP loopback, and
# compares with plain reads of a region from the same server in the same
# round (the ring's own bytes, read as a region while its producer runs).
#   bench/fanout.sh [BUILD_DIR] [REPS] [SECONDS]      (defaults: build, 3, 4)
#   FANOUT_SUBS="1 16 64"  subscriber counts of the 64 B rows
#   FANOUT_BIG="1 16"      subscriber counts of the 1 MiB rows (either may be empty: no such rows)
#   FANOUT_VERIFY=1        the 1 MiB rows' subscribers check every frame too (--verify:
#                          sequence number and checksum of the whole MiB, 100-200 us of
#                          CPU a frame). Off by default, as the plain readers they are
#                          compared with check nothing (they cannot: the producer
#                          overwrites what they read). The 64 B rows always verify.
# Rows:
#   64 B @ 10 kHz, N subscribers (every): latency p50 (median over
#     subscribers), p99 (the worst subscriber's), drops; ref: 64 B read RTT p50.
#     Latencies from each reader's first second are left out (--warmup 1; the
#     row runs a second longer): N processes starting at once on this host
#     is the benchmark's doing, not the stream's
#   1 MiB unpaced (--rate max, pattern source: every frame written whole), N
#     subscribers: aggregate GB/s and the slowest subscriber; ref: N
#     concurrent plain 1 MiB readers (depth 1) of the same server
#   1 MiB paced at 0.8x the element rate one plain reader reached, N
#     subscribers: the same figures
#   the producer's commit cost (p50/p99) for each 64 B row: flat in N
# Prints medians over the rounds; raw JSON lines go to $RESULTS.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
REPS=${2:-3}
SECS=${3:-4}
SUBS=${FANOUT_SUBS-"1 16 64"}
BIG=${FANOUT_BIG-"1 16"}
RESULTS=${RESULTS:-$B/bench-fanout.jsonl}
VERIFY=${FANOUT_VERIFY-0}; [ "$VERIFY" = 0 ] && VERIFY=''
remora=$B/tools/remora
[ -x "$remora" ] || { echo "build first: scripts/build.sh $B" >&2; exit 1; }
: >"$RESULTS"
export UCX_TLS=tcp
tmp=$(mktemp -d)
srv=
cleanup() { [ -n "$srv" ] && kill "$srv" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

serve() { # ARGS...: start a stream server; sets $addr and $srv
  "$remora" stream serve --listen 127.0.0.1:0 "$@" >"$tmp/s.out" 2>"$tmp/s.err" &
  srv=$!
  for _ in $(seq 200); do grep -q listening "$tmp/s.out" && break; sleep 0.05; done
  addr=$(awk '/listening/ {print $2}' "$tmp/s.out")
  [ -n "$addr" ] || { echo "stream serve did not start" >&2; cat "$tmp/s.err" >&2; exit 1; }
}
unserve() { kill "$srv" 2>/dev/null || true; wait "$srv" 2>/dev/null || true; srv=; }
readers() { # N TARGET ARGS...: N subscribers at once; their JSON lines in $tmp/r.*
  local n=$1 t=$2; shift 2; local p=() i
  rm -f "$tmp"/r.* "$tmp"/er.*
  for i in $(seq "$n"); do "$remora" stream read "$t" --json "$@" >"$tmp/r.$i" 2>"$tmp/er.$i" & p+=($!); done
  wait "${p[@]}" || true
  cat "$tmp"/r.* >>"$RESULTS"
  failed_check r "$n" subscriber
}
# failed_check PREFIX N WHAT: a process that left no JSON line failed; say
# why (its stderr) and count it, so that no row quietly averages over fewer.
failures=0
failed_check() {
  local i
  for i in $(seq "$2"); do
    grep -q '^{' "$tmp/$1.$i" 2>/dev/null && continue
    failures=$((failures + 1))
    echo "  FAILED: $3 $i of $2 gave no result: $(tail -n 3 "$tmp/e$1.$i" 2>/dev/null | tr '\n' ' ')" >&2
  done
}
plains() { # N TARGET SIZE: N concurrent plain readers; their JSON lines in $tmp/b.*
  local n=$1 t=$2 size=$3 p=() i
  rm -f "$tmp"/b.* "$tmp"/eb.*
  for i in $(seq "$n"); do "$remora" bench "$t" --size "$size" --depth 1 --seconds "$SECS" --json >"$tmp/b.$i" 2>"$tmp/eb.$i" & p+=($!); done
  wait "${p[@]}" || true
  cat "$tmp"/b.* >>"$RESULTS"
  failed_check b "$n" "plain reader"
}
agg() { # FIELD FILES... -> sum min median max count
  python3 - "$@" <<'EOF'
import json, sys
f = sys.argv[1]; v = []
for p in sys.argv[2:]:
    for l in open(p):
        if l.startswith('{'):
            v.append(float(json.loads(l).get(f, 0)))
v.sort()
if not v: print("0 0 0 0 0"); sys.exit()
print(round(sum(v), 4), v[0], v[len(v)//2], v[-1], len(v))
EOF
}
produced() { # ELEM_BYTES FILES...: GB/s the producer committed while the subscribers ran
  python3 - "$@" <<'EOF'
import json, sys
es = float(sys.argv[1]); best = 0.0
for p in sys.argv[2:]:
    for l in open(p):
        if l.startswith('{'):
            j = json.loads(l)
            if j.get("seconds", 0) > 0 and "seq_last" in j:
                best = max(best, (j["seq_last"] - j["seq_first"] + 1) * es / j["seconds"] / 1e9)
print(round(best, 3))
EOF
}
put() { echo "$2" >>"$tmp/v.$1"; } # KEY VALUE
med() { sort -g "$tmp/v.$1" | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
all() { xargs printf '%.3g ' <"$tmp/v.$1"; }
commit_cost() { # from the server's shutdown note: p50 p99 (us)
  sed -n 's/.*commit cost p50 \([0-9.]*\) us, p99 \([0-9.]*\) us.*/\1 \2/p' "$tmp/s.err" | tail -1
}

echo "rounds: $REPS, ${SECS} s per row, TCP loopback, $(nproc) cores" >&2
for rnd in $(seq "$REPS"); do
  # 64 B at 10 kHz.
  for n in $SUBS; do
    serve --ring l=64x4096 --rate 10000
    plains 1 "$addr/l" 64
    put "rtt" "$(agg lat_us_p50 "$tmp"/b.* | cut -d' ' -f3)"
    # N reader processes start at once on the server's host: their start-up
    # (exec, UCX, connect) is left out of the latency figures (--warmup).
    readers "$n" "$addr/l" --verify --seconds "$(awk -v s="$SECS" 'BEGIN { print s + 1 }')" --warmup 1
    unserve
    read -r _ _ p50 _ _ < <(agg lat_us_p50 "$tmp"/r.*)
    read -r _ _ _ p99 cnt < <(agg lat_us_p99 "$tmp"/r.*)
    read -r drops _ _ _ _ < <(agg drops "$tmp"/r.*)
    read -r bad _ _ _ _ < <(agg torn "$tmp"/r.*)
    read -r c50 c99 < <(commit_cost)
    if [ "$cnt" -gt 0 ]; then put "l$n.p50" "$p50"; put "l$n.p99" "$p99"; fi
    put "l$n.drops" "$drops"; put "l$n.subs" "$cnt"
    put "l$n.c50" "${c50:-0}"; put "l$n.c99" "${c99:-0}"; put "l$n.bad" "$bad"
    echo "  round $rnd: 64 B @ 10 kHz x $n: p50 $p50 us, worst p99 $p99 us, drops $drops, commit p50/p99 ${c50:-?}/${c99:-?} us" >&2
  done
  # 1 MiB, unpaced and paced.
  for n in $BIG; do
    serve --ring f=1Mx64 --rate max
    plains "$n" "$addr/f" 1M
    read -r pagg _ _ _ _ < <(agg gbps "$tmp"/b.*)
    readers "$n" "$addr/f" ${VERIFY:+--verify} --seconds "$SECS"
    unserve
    read -r ragg rmin _ _ cnt < <(agg gbps "$tmp"/r.*)
    read -r disc _ _ _ _ < <(agg discarded "$tmp"/r.*)
    prod=$(produced 1048576 "$tmp"/r.*)
    put "u$n.plain" "$pagg"; put "u$n.ring" "$ragg"; put "u$n.min" "$rmin"; put "u$n.subs" "$cnt"
    put "u$n.disc" "$disc"; put "u$n.prod" "$prod"
    echo "  round $rnd: 1 MiB unpaced x $n: ring $ragg GB/s (slowest $rmin), plain $pagg GB/s, discarded $disc, produced $prod GB/s" >&2
    if [ "$n" = 1 ]; then one=$pagg; fi
    rate=$(awk -v p="${one:-$pagg}" 'BEGIN { r = 0.8 * p * 1e9 / 1048576; printf "%d", r < 1 ? 1 : r }')
    serve --ring f=1Mx64 --rate "$rate"
    plains "$n" "$addr/f" 1M
    read -r pagg _ _ _ _ < <(agg gbps "$tmp"/b.*)
    readers "$n" "$addr/f" ${VERIFY:+--verify} --seconds "$SECS"
    unserve
    read -r ragg rmin _ _ cnt < <(agg gbps "$tmp"/r.*)
    read -r drops _ _ _ _ < <(agg drops "$tmp"/r.*)
    put "p$n.plain" "$pagg"; put "p$n.ring" "$ragg"; put "p$n.min" "$rmin"; put "p$n.rate" "$rate"
    put "p$n.drops" "$drops"
    echo "  round $rnd: 1 MiB paced at $rate Hz x $n: ring $ragg GB/s (slowest $rmin), plain $pagg GB/s, drops $drops" >&2
  done
done

echo "per-round values:" >&2
for f in "$tmp"/v.*; do printf "  %-12s %s\n" "${f##*/v.}" "$(all "${f##*/v.}")" >&2; done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }'; }
echo
printf "%-44s %12s %12s %8s   %s\n" "measure (medians of $REPS rounds)" "ring" "reference" "ratio" "target (16-core; 2-core)"
rtt=$([ -n "$SUBS" ] && med rtt || echo 0)
for n in $SUBS; do
  printf "%-44s %12.1f %12.1f %8s   %s\n" "64 B @ 10 kHz x $n: p99 us (ref: RTT p50)" "$(med l$n.p99)" "$rtt" \
    "$(ratio "$(med l$n.p99)" "$rtt")" "$([ "$n" = 1 ] && echo '<= 3x; <= 6x' || echo '<= 500 us')"
  printf "%-44s %12.1f %12s %8s   %s\n" "64 B @ 10 kHz x $n: p50 us" "$(med l$n.p50)" "" "" ""
  printf "%-44s %12s %12s %8s   %s\n" "64 B @ 10 kHz x $n: drops (all subscribers)" "$(med l$n.drops)" "" "" "0"
  printf "%-44s %12s %12s %8s   %s\n" "64 B @ 10 kHz x $n: commit cost p50/p99 us" "$(med l$n.c50)/$(med l$n.c99)" "" "" "flat in N"
done
for n in $BIG; do
  fair=$(awk -v a="$(med u$n.plain)" -v n="$n" 'BEGIN { print a / n }')
  printf "%-44s %12.3f %12.3f %8s   %s\n" "1 MiB unpaced x $n: GB/s (ref: $n plain readers)" "$(med u$n.ring)" "$(med u$n.plain)" \
    "$(ratio "$(med u$n.ring)" "$(med u$n.plain)")" "$([ "$n" = 1 ] && echo '>= 0.9x' || echo '>= 0.8x')"
  # Each subscriber's elements against what the producer committed meanwhile:
  # where a plain reader reads faster than the producer writes, this is the
  # ring's share of what there was, and the row above measures the producer.
  [ "$n" = 1 ] && printf "%-44s %12.3f %12.3f %8s   %s\n" "1 MiB unpaced x 1: GB/s (ref: produced)" "$(med u1.ring)" "$(med u1.prod)" \
    "$(ratio "$(med u1.ring)" "$(med u1.prod)")" ""
  [ "$n" = 1 ] || printf "%-44s %12.3f %12.3f %8s   %s\n" "1 MiB unpaced x $n: slowest (ref: fair share)" "$(med u$n.min)" "$fair" \
    "$(ratio "$(med u$n.min)" "$fair")" ">= 0.5x"
  printf "%-44s %12.3f %12.3f %8s   %s\n" "1 MiB paced x $n: GB/s (ref: $n plain readers)" "$(med p$n.ring)" "$(med p$n.plain)" \
    "$(ratio "$(med p$n.ring)" "$(med p$n.plain)")" "(paced at $(med p$n.rate) Hz)"
done
[ "$failures" = 0 ] || echo "FAILED: $failures processes gave no result (their errors above); the medians leave them out"
echo "raw results: $RESULTS"
