#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Rings under real load (issue 16, docs/ring.md "Fan-out"), with real
# processes over TCP loopback: one `remora stream serve`, many `remora stream
# read --json --verify`.
# Usage: test_fanout.sh CASE REMORA_BIN
#   overrun16  16 subscribers of a 1 MiB ring fed faster than the network:
#              each gets at least a fifth of its fair share (the fair share
#              measured as 16 plain readers of the same server, same run),
#              drops exact, nothing torn or corrupt
#   small64    64 subscribers of 64 B elements at 10 kHz: 0 drops, 0 torn
#   sigstop    16 subscribers; one SIGSTOPped for 2 s: the others keep their
#              pace meanwhile, the stopped one resumes with its gap counted
#   latest     `latest` subscribers on an overrunning producer keep receiving;
#              a producer that outruns every copy gets the subscriber's warning
#   churn      subscribers join and leave 100 times (some killed) while the
#              producer runs: the server's fds and RSS stay flat
#   sigstop2   4 subscribers of pushed 256 KiB elements on one worker; two
#              SIGSTOPped for 2 s hold both push slots with pushes that
#              cannot finish: the other two keep their pace meanwhile (they
#              waited for the peer timeout when nothing but a new wait
#              looked at stalled pushes)
#   killpush   4 subscribers of pushed 256 KiB elements killed mid-stream, then
#              a new one, 60 times: each new one gets its elements (a
#              connection dying in a push's verdict send was counted out
#              twice, and the ring pushed to no one again)
#   workers    --workers N: N workers serve (the server's threads grow with
#              N), 16 subscribers spread over 3 get every element exactly;
#              0 and 9 are refused as usage errors
#   killmany   16 subscribers of pushed 256 KiB elements from an unpaced
#              producer killed at once, 40 times: the server lives and serves
#              a new one (UCX 1.13 aborted the server in 3 of 8 such runs,
#              tcp_iface.c:307, with its default of 16 socket events a pass)
# Sizing for a 2-core CI machine: 16 (not 64) 1 MiB subscribers, since 64
# processes each receiving 1 MiB frames leave each a share too small to say
# anything about fairness within seconds; the 64-subscriber case uses 64 B
# elements, where the server's fan-out, not the bandwidth, is what is tested.
set -euo pipefail
case_=$1
remora=$2
export UCX_TLS=tcp
tmp=$(mktemp -d)
srv=
pids=()
cleanup() {
  for p in "${pids[@]}" $srv; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { # with the server's last words: an abort inside it is otherwise lost with $tmp
  echo "FAIL: $*"
  [ -s "$tmp/s.err" ] && { echo "--- server stderr (last 30 lines)"; tail -30 "$tmp/s.err"; }
  exit 1
}

serve() { # ARGS...: sets $addr, $srv; $SERVE_ENV: VAR=VALUE words for the server only
  # shellcheck disable=SC2086
  env ${SERVE_ENV:-} "$remora" stream serve --listen 127.0.0.1:0 "$@" >"$tmp/s.out" 2>"$tmp/s.err" &
  srv=$!
  for _ in $(seq 200); do grep -q listening "$tmp/s.out" && break; sleep 0.05; done
  addr=$(awk '/listening/ {print $2}' "$tmp/s.out")
  [ -n "$addr" ] || { cat "$tmp/s.err"; fail "stream serve did not start"; }
}
readers() { # N TARGET ARGS...: start N subscribers (pids in $rp)
  local n=$1 t=$2 i; shift 2
  rp=()
  for i in $(seq "$n"); do
    "$remora" stream read "$t" --json --verify "$@" >"$tmp/r.$i" 2>"$tmp/e.$i" &
    rp+=($!); pids+=($!)
  done
}
wait_readers() { # the status of the first that failed, with its stderr shown
  local i=0 p rc=0 r
  for p in "${rp[@]}"; do
    i=$((i + 1)); r=0; wait "$p" || r=$?
    if [ "$r" != 0 ] && [ "$rc" = 0 ]; then
      rc=$r; echo "subscriber $i exited $r:"
      grep -m1 -A25 "ERROR\|runtime error" "$tmp/e.$i" || tail -5 "$tmp/e.$i"; cat "$tmp/r.$i"
    fi
  done
  return $rc
}
field() { grep -o "\"$2\":[0-9.e+-]*" "$1" | head -1 | cut -d: -f2; }
# Every subscriber: exit 0, nothing torn or corrupt, and drops exact: the
# drops counted before the first element plus every gap after it.
check_exact() { # N
  local i
  for i in $(seq "$1"); do
    [ -s "$tmp/r.$i" ] || { cat "$tmp/e.$i"; fail "subscriber $i printed no summary"; }
    python3 - "$tmp/r.$i" "$i" <<'EOF' || { cat "$tmp/e.$i"; fail "subscriber $i: $(cat "$tmp/r.$i")"; }
import json, sys
j = json.loads(open(sys.argv[1]).read())
assert j["torn"] == 0 and j["corrupt"] == 0, "torn/corrupt"
assert j["elements"] > 0, "nothing delivered"
gaps = j["seq_last"] - j["seq_first"] + 1 - j["elements"]
assert j["drops"] == j["drops_first"] + gaps, "drops %d != %d before the first + %d gaps" % (j["drops"], j["drops_first"], gaps)
EOF
  done
}

case $case_ in
overrun16)
  secs=6 n=16
  serve --ring f=1Mx64 --rate max
  # The fair share: 16 plain readers of the same server, same producer running.
  bp=()
  for i in $(seq $n); do
    "$remora" bench "$addr/f" --size 1M --depth 1 --seconds 3 --json >"$tmp/b.$i" 2>/dev/null & bp+=($!)
  done
  wait "${bp[@]}"
  plain=$(cat "$tmp"/b.* | python3 -c 'import sys,json; print(sum(json.loads(l)["gbps"] for l in sys.stdin if l.startswith("{")))')
  readers $n "$addr/f" --seconds $secs
  wait_readers || fail "a subscriber failed"
  check_exact $n
  # A fifth of the fair share in elements, at least 2: a collapse (a few
  # elements in the whole run) fails, CPU noise on 2 cores does not.
  floor=$(awk -v p="$plain" -v n=$n -v s=$secs 'BEGIN { f = 0.2 * p * 1e9 / 1048576 / n * s; printf "%d", f < 2 ? 2 : f }')
  tot=0
  for i in $(seq $n); do
    e=$(field "$tmp/r.$i" elements); tot=$((tot + e))
    [ "$e" -ge "$floor" ] || fail "subscriber $i got $e elements, under the floor $floor (16 plain readers: $plain GB/s)"
  done
  echo "PASS: 16 subscribers, $tot elements in ${secs} s (each >= $floor; 16 plain readers: $plain GB/s), drops exact, none torn"
  ;;
small64)
  n=64
  # 6.5 s of elements held: a subscriber descheduled for a while on a busy
  # CI machine catches up instead of dropping.
  serve --ring l=64x65536 --rate 10000
  readers $n "$addr/l" --seconds 4
  wait_readers || fail "a subscriber failed"
  check_exact $n
  for i in $(seq $n); do
    d=$(field "$tmp/r.$i" drops); e=$(field "$tmp/r.$i" elements)
    [ "$d" = 0 ] || fail "subscriber $i dropped $d: $(cat "$tmp/r.$i")"
    [ "$e" -ge 20000 ] || fail "subscriber $i got only $e elements in 4 s at 10 kHz"
  done
  echo "PASS: 64 subscribers at 10 kHz, 0 drops, none torn"
  ;;
sigstop)
  n=16 secs=9
  serve --ring f=1Mx64 --rate max
  readers $n "$addr/f" --seconds $secs --progress
  sleep 3
  kill -STOP "${rp[0]}"
  sleep 2
  kill -CONT "${rp[0]}"
  wait_readers || fail "a subscriber failed"
  check_exact $n
  # The others, per progress line (one a second): the rate while one was
  # stopped (lines 4-5) against before (lines 2-3); a queue held up by the
  # stopped one would bring it to ~0.
  before=0 during=0
  for i in $(seq 2 $n); do
    r=$(grep -o '^ *[0-9]* elem/s' "$tmp/e.$i" | awk '{print $1}' | tr '\n' ' ')
    read -r _ a b c d _ <<<"$r"
    before=$((before + ${a:-0} + ${b:-0})); during=$((during + ${c:-0} + ${d:-0}))
  done
  echo "the 15 others: $before elements in the 2 s before the stop, $during during it"
  [ $((during * 10)) -ge $((before * 3)) ] || fail "the others slowed down while one was stopped"
  d=$(field "$tmp/r.1" drops)
  last=$(grep -o '^ *[0-9]* elem/s' "$tmp/e.1" | tail -2 | head -1 | awk '{print $1}')
  [ "$d" -gt 0 ] || fail "the stopped subscriber counted no gap"
  [ "${last:-0}" -gt 0 ] || fail "the stopped subscriber did not resume: $(cat "$tmp/e.1")"
  echo "PASS: a subscriber stopped for 2 s: the others kept their pace, it resumed with $d drops counted"
  ;;
sigstop2)
  n=4 secs=8
  # One worker, so that all four share its two push slots; a peer timeout
  # longer than the stop, so that only the stall check can free them.
  SERVE_ENV="REMORA_WORKERS=1 REMORA_PEER_TIMEOUT_MS=15000" serve --ring f=256Kx16 --rate 200
  readers $n "$addr/f" --seconds $secs --progress
  sleep 3
  kill -STOP "${rp[0]}" "${rp[1]}"
  sleep 2
  kill -CONT "${rp[0]}" "${rp[1]}"
  wait_readers || fail "a subscriber failed"
  check_exact $n
  before=0 during=0
  for i in 3 4; do
    r=$(grep -o '^ *[0-9]* elem/s' "$tmp/e.$i" | awk '{print $1}' | tr '\n' ' ')
    read -r _ a b c d _ <<<"$r"
    echo "subscriber $i, elements a second: $r"
    before=$((before + ${a:-0} + ${b:-0})); during=$((during + ${c:-0} + ${d:-0}))
  done
  echo "the 2 others: $before elements in the 2 s before the stop, $during during it"
  [ $((during * 10)) -ge $((before * 5)) ] || fail "the others slowed down while two were stopped"
  # The stopped two came back behind the ring: the server counts those drops.
  sd=$("$remora" stat "$addr" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["stats"]["ring_drops"])')
  echo "server: ring_drops $sd"
  [ "$sd" -gt 0 ] || fail "the server counted no ring drops"
  echo "PASS: two subscribers stopped for 2 s: the other two kept their pace"
  ;;
latest)
  n=4
  serve --ring f=1Mx64 --rate max
  readers $n "$addr/f" --seconds 4 --mode latest --progress
  wait_readers || fail "a subscriber failed"
  for i in $(seq $n); do
    python3 - "$tmp/r.$i" <<'EOF' || fail "latest subscriber $i: $(cat "$tmp/r.$i")"
import json, sys
j = json.loads(open(sys.argv[1]).read())
assert j["torn"] == 0 and j["corrupt"] == 0 and j["elements"] >= 8
EOF
    z=$(grep -o '^ *[0-9]* elem/s' "$tmp/e.$i" | awk '$1 == 0' | wc -l)
    [ "$z" = 0 ] || fail "latest subscriber $i had a second with nothing: $(cat "$tmp/e.$i")"
  done
  kill "$srv"; wait "$srv" 2>/dev/null || true; srv=
  # A producer that restamps 2 slots millions of times a second: no copy can
  # survive; the subscriber must say so.
  serve --ring f=1Mx2 --rate max --source fixed
  readers 1 "$addr/f" --seconds 3
  wait_readers || true
  # On an idle machine nearly every copy is lost; a loaded one deschedules
  # the producer for whole pushes, and some survive. The warning is owed
  # once half the copies are lost (per second; here: over the run).
  [ "$(field "$tmp/r.1" torn)" = 0 ] || fail "torn elements delivered"
  disc=$(field "$tmp/r.1" discarded); got=$(field "$tmp/r.1" elements)
  [ "$disc" -gt 0 ] || fail "a producer restamping 2 slots at full speed, yet no copy discarded: $(cat "$tmp/r.1")"
  if [ "$disc" -ge "$got" ]; then
    grep -q "overwrites elements before they arrive" "$tmp/e.1" ||
      fail "$disc copies discarded, $got delivered, and no warning: $(cat "$tmp/e.1")"
    note="the warning: $(grep -m1 -o 'arrive: [0-9]* copies/s discarded ([0-9]*%' "$tmp/e.1")"
  else
    note="$disc copies discarded, $got delivered (a busy machine: fewer than half lost, no warning owed)"
  fi
  echo "PASS: latest subscribers kept receiving on an overrunning producer; outrunning producer: $note"
  ;;
churn)
  serve --ring l=64x1024 --ring f=256Kx16 --rate 500
  sample() { echo "$(ls /proc/$srv/fd | wc -l) $(awk '/VmRSS/ {print $2}' /proc/$srv/status)"; }
  for c in $(seq 100); do
    if [ "$c" = 20 ]; then read -r fd0 rss0 < <(sample); fi
    ring=l; [ $((c % 2)) = 0 ] && ring=f
    if [ $((c % 10)) = 0 ]; then # leaves without a goodbye
      "$remora" stream read "$addr/$ring" --seconds 5 >/dev/null 2>&1 &
      p=$!; sleep 0.3; kill -9 $p; wait $p 2>/dev/null || true
    else
      "$remora" stream read "$addr/$ring" --count 20 --verify >/dev/null 2>"$tmp/e.c" ||
        fail "cycle $c: $(cat "$tmp/e.c")"
    fi
  done
  sleep 3 # the killed ones' connections time out (heartbeats) and are freed
  read -r fd1 rss1 < <(sample)
  echo "server after 20 cycles: $fd0 fds, $rss0 KiB; after 100: $fd1 fds, $rss1 KiB"
  [ "$fd1" -le $((fd0 + 2)) ] || fail "fds grew from $fd0 to $fd1"
  # AddressSanitizer holds freed memory in quarantine (256 MiB): RSS grows by
  # design there, and LeakSanitizer judges the server at its exit instead.
  if [ -n "${ASAN_OPTIONS:-}" ]; then
    echo "AddressSanitizer build: RSS not bounded; leaks checked at the server's exit"
  else
    [ "$rss1" -le $((rss0 + 8192)) ] || fail "RSS grew from $rss0 to $rss1 KiB"
  fi
  kill "$srv"; rc=0; wait "$srv" || rc=$?; srv=
  [ "$rc" = 0 ] || fail "the server exited $rc after SIGTERM"
  echo "PASS: 100 subscribers joined and left, fds and RSS flat, the server exited cleanly"
  ;;
killpush)
  serve --ring f=256Kx16 --rate 500
  for c in $(seq 60); do
    kp=()
    for _ in 1 2 3 4; do
      "$remora" stream read "$addr/f" --seconds 5 >/dev/null 2>&1 &
      kp+=($!)
    done
    for p in "${kp[@]}"; do sleep "0.0$((RANDOM % 9 + 1))"; kill -9 "$p"; done
    wait "${kp[@]}" 2>/dev/null || true
    "$remora" stream read "$addr/f" --count 5 --verify --timeout 5000 >/dev/null 2>"$tmp/e.c" ||
      fail "cycle $c: $(cat "$tmp/e.c")"
  done
  kill -0 "$srv" || fail "the server died"
  echo "PASS: 240 subscribers of pushed elements killed, 60 served after them"
  ;;
killmany)
  serve --ring f=256Kx16 --rate max
  for c in $(seq 40); do
    kp=()
    for _ in $(seq 16); do
      "$remora" stream read "$addr/f" --seconds 5 >/dev/null 2>&1 &
      kp+=($!)
    done
    sleep "0.$((RANDOM % 4 + 2))"
    kill -9 "${kp[@]}" 2>/dev/null || true
    wait "${kp[@]}" 2>/dev/null || true
    kill -0 "$srv" 2>/dev/null || fail "the server died at cycle $c"
  done
  "$remora" stream read "$addr/f" --count 5 --verify --timeout 5000 >/dev/null 2>"$tmp/e.c" ||
    fail "after the kills: $(cat "$tmp/e.c")"
  echo "PASS: 640 subscribers of pushed elements killed 16 at a time, the server lived"
  ;;
workers)
  for bad in 0 9; do
    rc=0; "$remora" stream serve --listen 127.0.0.1:0 --workers $bad >/dev/null 2>"$tmp/e.c" || rc=$?
    [ "$rc" = 2 ] || fail "--workers $bad: exit $rc (want 2, a usage error): $(cat "$tmp/e.c")"
  done
  threads() { ls "/proc/$srv/task" | wc -l; }
  serve --workers 1 --ring l=64x1024 --rate 1000
  t1=$(threads); kill "$srv"; wait "$srv" 2>/dev/null || true
  serve --workers 3 --ring l=64x1024 --rate 1000
  t3=$(threads)
  echo "server threads: $t1 with 1 worker, $t3 with 3"
  [ "$t3" -ge $((t1 + 2)) ] || fail "3 workers: $t3 threads, 1 worker: $t1"
  readers 16 "$addr/l" --count 300 --timeout 10000
  wait_readers || fail "a subscriber of a 3-worker server failed"
  check_exact 16
  echo "PASS: --workers sets the server's workers; 16 subscribers over 3 exact"
  ;;
*)
  fail "unknown case $case_"
  ;;
esac
