#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Clients killed mid-transfer, three at a time, for CHURN_SECONDS (default 45):
# 64 B and 4 MiB read benches and 1 MiB write benches, each SIGKILLed 0.2-0.5 s
# after it starts. The server must keep running, serve a last client
# byte-exact, and shut down cleanly. On UCX 1.13 with zero-copy sends this
# aborted the server in every run measured (docs/security.md 3.5).
# Usage: test_kill_churn.sh REMORA_BIN
set -u
remora=$1
seconds=${CHURN_SECONDS:-45}
dir=$(mktemp -d)
pid=
cleanup() {
  [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { # WHY [FILE]: the verdict, and the end of FILE (the server's log)
  echo "FAIL: $1"
  [ -n "${2:-}" ] && tail -30 "$2"
  exit 1
}

"$remora" serve --listen 127.0.0.1:0 --region big=64M --region wr=16M:zero --writable \
  >"$dir/out" 2>"$dir/log" &
pid=$!
for _ in $(seq 100); do grep -q '^listening' "$dir/out" && break; sleep 0.05; done
addr=$(awk '/^listening/ {print $2}' "$dir/out")
[ -n "$addr" ] || fail "serve did not start" "$dir/log"

# One loop: start a client of the next kind, let it run, kill it.
churn() {
  local n=$1 end=$((SECONDS + seconds)) p args
  while [ $SECONDS -lt $end ] && kill -0 "$pid" 2>/dev/null; do
    case $((n++ % 3)) in
      0) args="$addr/big --size 64 --depth 2" ;;
      1) args="$addr/big --size 4M --depth 8" ;;
      2) args="$addr/wr --op write --size 1M --depth 16" ;;
    esac
    # shellcheck disable=SC2086 # args is split on purpose
    REMORA_PATH=am "$remora" bench $args --seconds 30 >/dev/null 2>&1 &
    p=$!
    sleep "0.$((RANDOM % 4 + 2))"
    kill -9 "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
}
start=$SECONDS
churn 0 & c0=$!
churn 1 & c1=$!
churn 2 & c2=$!
wait "$c0" "$c1" "$c2"

conns=$(grep -c ' connected' "$dir/log")
echo "$conns clients connected and were killed in $((SECONDS - start)) s"
kill -0 "$pid" 2>/dev/null || fail "the server died" "$dir/log"
"$remora" read "$addr/big" --verify >/dev/null 2>"$dir/read" ||
  fail "a client after the churn did not read the region byte-exact" "$dir/read"
kill -TERM "$pid"
wait "$pid"
rc=$?
pid=
if [ $rc -ne 0 ] || grep -q 'leaking' "$dir/log"; then
  fail "the server did not shut down cleanly (exit $rc)" "$dir/log"
fi
echo "PASS: the server survived $conns killed clients and shut down cleanly"
