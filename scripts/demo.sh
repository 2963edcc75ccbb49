#!/usr/bin/env bash
# The main job, live on loopback: installs dependencies, builds, starts a
# server exposing a region, reads it back and verifies every byte, then prints
# a latency and bandwidth table over TCP and over same-host shared memory.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh build
remora=build/tools/remora

out=$(mktemp)
trap 'kill $srv 2>/dev/null; wait $srv 2>/dev/null; rm -f "$out"' EXIT
$remora serve --listen 127.0.0.1:0 --region frames=256M:pattern --region scratch=64M:zero \
  --writable >"$out" &
srv=$!
for _ in $(seq 100); do grep -q listening "$out" && break; sleep 0.1; done
addr=$(awk '/listening/ {print $2}' "$out")
[ -n "$addr" ] || { echo "server did not start" >&2; exit 1; }

echo "== server at $addr"
$remora ls "$addr"
echo
echo "== read the whole 256 MiB region and verify every byte"
$remora read "$addr/frames" --verify
echo
echo "== round trip (ping), 1000 times"
$remora ping "$addr" -n 1000 | tail -n 1
echo
echo "== read over TCP loopback (active messages, zero-copy rendezvous)"
UCX_TLS=tcp $remora bench "$addr/frames" --size 64,4K,64K,1M,16M --seconds 1
echo
echo "== read on the same host (server memory mapped, no server CPU)"
$remora bench "$addr/frames" --size 64,4K,64K,1M,16M --seconds 1
