#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The main job, live on loopback: installs dependencies, builds, then streams
# 1 MiB frames from a producer process to a consumer process at full speed for
# about 10 seconds, with a live progress line and a verified summary
# (every frame's sequence number and checksum checked: 0 torn, 0 corrupt).
# DEMO_SECONDS changes the duration.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh build
remora=build/tools/remora
secs=${DEMO_SECONDS:-10}

out=$(mktemp)
trap 'kill $srv 2>/dev/null; wait $srv 2>/dev/null; rm -f "$out"' EXIT
# Producer: a ring of 64 slots of 1 MiB, filled in place as fast as it goes.
$remora stream serve --listen 127.0.0.1:0 --ring frames=1Mx64 --rate max >"$out" &
srv=$!
for _ in $(seq 100); do grep -q listening "$out" && break; sleep 0.1; done
addr=$(awk '/listening/ {print $2}' "$out")
[ -n "$addr" ] || { echo "producer did not start" >&2; exit 1; }

echo "== producer at $addr"
$remora ls "$addr"
echo
echo "== consumer: every frame in order for ${secs} s, verified (a slow consumer drops, counted exactly)"
$remora stream read "$addr/frames" --mode every --seconds "$secs" --verify --progress
