#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Run one step of docs/guide.md as a user would: servers in the background on
# a free loopback port, clients against them, output checked.
#   run_guide.sh server_client|ring|region_events|gpu BIN_DIR
set -euo pipefail
step=$1
bin=$2
tmp=$(mktemp -d)
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$tmp"/*.out; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done; exit 1; }

# start PROGRAM: in the background; sets server_pid and addr.
start() {
  : >"$tmp/server.out" # the background job opens it only once it runs: sed below may come first
  "$bin/$1" 127.0.0.1:0 >"$tmp/server.out" 2>&1 &
  server_pid=$!
  for _ in $(seq 200); do
    addr=$(sed -n 's/^listening //p' "$tmp/server.out")
    [ -n "$addr" ] && return 0
    kill -0 "$server_pid" 2>/dev/null || fail "$1 exited before listening"
    sleep 0.05
  done
  fail "$1 did not print 'listening' within 10 s"
}
# stop: SIGTERM, which the servers take as a clean shutdown (exit 0).
stop() {
  kill -TERM "$server_pid"
  wait "$server_pid" || fail "the server exited $? after SIGTERM"
  server_pid=
}

case $step in
server_client)
  start guide_server
  out=$("$bin/guide_client" "$addr" 2>&1) || fail "guide_client: $out"
  echo "$out"
  grep -q '^region greeting: 65536 bytes, writable, generation 1$' <<<"$out" || fail "no region line"
  grep -q 'hello from the guide server (version 1)' <<<"$out" || fail "no greeting read"
  grep -q '^wrote and read back at 4096: a client was here$' <<<"$out" || fail "no write"
  stop ;;
ring)
  start guide_ring_producer
  out=$("$bin/guide_ring_subscriber" "$addr" 500 2>&1) || fail "guide_ring_subscriber: $out"
  echo "$out"
  grep -qE '^received 500 frames of 4096 bytes, seq [0-9]+\.\.[0-9]+, [0-9]+ dropped, 0 bad$' <<<"$out" ||
    fail "unexpected summary"
  stop
  grep -qE '^pushed [0-9]+ frames$' "$tmp/server.out" || fail "the producer printed no total" ;;
region_events)
  start guide_server
  : >"$tmp/watch.out"
  "$bin/guide_watch" "$addr" >"$tmp/watch.out" 2>&1 &
  watch_pid=$!
  for _ in $(seq 200); do
    grep -q '^watching' "$tmp/watch.out" && break
    sleep 0.05
  done
  grep -q '^watching greeting (65536 bytes, generation 1)$' "$tmp/watch.out" || fail "guide_watch is not watching"
  kill -USR1 "$server_pid"
  wait "$watch_pid" || fail "guide_watch exited $?"
  cat "$tmp/watch.out"
  grep -q '^changed: 131072 bytes, generation 2$' "$tmp/watch.out" || fail "no change event"
  grep -q '^now reads: hello from the guide server (version 2)$' "$tmp/watch.out" || fail "did not read the new version"
  stop ;;
gpu)
  set +e
  out=$("$bin/guide_gpu" 2>&1)
  rc=$?
  set -e
  echo "$out"
  [ "$rc" -eq 77 ] && exit 77
  [ "$rc" -eq 0 ] || fail "guide_gpu exited $rc"
  grep -q 'wrote from the host, over the [a-z]* path: ok$' <<<"$out" || fail "unexpected output" ;;
*)
  echo "unknown step $step" >&2; exit 2 ;;
esac
echo "guide step $step: ok"
