#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Listeners where asked: a server told to listen on 127.0.0.1 has every TCP
# listening socket of its process -- its own and the ones UCX opens for its
# transports -- on 127.0.0.1, none on another interface (docs/security.md).
# Usage: test_listen.sh REMORA_BIN. Exit 77 when `ss` is missing or the machine
# has no interface besides loopback (nothing to tell apart).
set -u
remora=$1
command -v ss >/dev/null || { echo "no ss: skipped"; exit 77; }
others=$(ip -o -4 addr show 2>/dev/null | awk '$4 !~ /^127\./ {print $4}' | head -1)
[ -n "$others" ] || { echo "only loopback here: skipped"; exit 77; }

out=$(mktemp)
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$out"' EXIT
"$remora" serve --listen 127.0.0.1:0 --region a=1M >"$out" 2>/dev/null &
pid=$!
for _ in $(seq 100); do grep -q '^listening' "$out" && break; sleep 0.05; done
grep -q '^listening' "$out" || { echo "FAIL: serve did not start"; exit 1; }

listens=$(ss -Hltnp | grep "pid=$pid," | awk '{print $4}')
echo "listening sockets of remora serve:"; echo "$listens"
[ "$(echo "$listens" | grep -c .)" -ge 2 ] || { echo "FAIL: expected the bootstrap and UCX's listener"; exit 1; }
if echo "$listens" | grep -vq '^127\.0\.0\.1:'; then
  echo "FAIL: a listener is not on 127.0.0.1"; exit 1
fi
echo "PASS: every listener on 127.0.0.1"
