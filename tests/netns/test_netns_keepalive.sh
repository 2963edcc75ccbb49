#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# A peer that goes silent on an idle plain TCP connection (GPU sockets to
# plain TCP peers: src/gpu/gpunet.c, tuned by rm_tcp_keepalive): a server in
# one network namespace, the probe's client in another, joined by a veth pair.
# Once the client waits in recv(), the server side of the link goes DOWN
# (packets just stop; nothing is reset). With rm_tcp_keepalive(2000) the
# client's recv() must fail within 6 s; untuned (MS 0), TCP would wait for as
# long as the peer stays silent (checked for 6 s, with KEEPALIVE_CONTROL=1).
#
# Usage: test_netns_keepalive.sh PATH/TO/keepalive_probe
# Exit: 0 pass, 1 fail, 77 skipped (not root, no `ip`, namespaces not allowed).
set -u
PROBE=${1:?usage: $0 PATH/TO/keepalive_probe}
ID=$$
. "$(dirname "$0")/netns_lib.sh"
TMP=$(mktemp -d /tmp/remora-netns-ka-XXXXXX)
PIDS=()
FAILED=0

skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAIL: $*"; FAILED=1; }
cleanup() {
    for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    netns_pair_del
    if [ "$FAILED" = 0 ]; then rm -rf "$TMP"; else echo "logs kept in $TMP"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

netns_pair ka 10.233

# case NAME MS LIMIT_S: one connection; the link dies under its idle recv().
# Prints the client's last line; returns 0 if recv() failed within LIMIT_S.
run_case() {
    local name=$1 ms=$2 limit=$3 port=$((20000 + ID % 20000)) t0 line
    ip -n "$NS1" link set "$VETH1" up
    ip netns exec "$NS1" "$PROBE" listen "$ADDR1" "$port" >"$TMP/$name.srv" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 50); do grep -q listening "$TMP/$name.srv" && break; sleep 0.1; done
    ip netns exec "$NS2" timeout $((limit + 5)) "$PROBE" connect "$ADDR1" "$port" "$ms" \
        >"$TMP/$name.cli" 2>&1 &
    local cli=$!
    PIDS+=($cli)
    for _ in $(seq 50); do grep -q connected "$TMP/$name.cli" && break; sleep 0.1; done
    grep -q connected "$TMP/$name.cli" || { echo "$name: no connection: $(cat "$TMP/$name.cli")"; return 1; }
    sleep 0.5
    ip -n "$NS1" link set "$VETH1" down
    t0=$(date +%s%N)
    while kill -0 "$cli" 2>/dev/null && [ $(( ($(date +%s%N) - t0) / 1000000 )) -lt $((limit * 1000)) ]; do
        sleep 0.1
    done
    line=$(tail -1 "$TMP/$name.cli")
    echo "$name: $line ($(( ($(date +%s%N) - t0) / 1000000 )) ms after the link went down)"
    kill -0 "$cli" 2>/dev/null && return 1
    case $line in "recv failed: Connection timed out"*) return 0 ;; esac
    return 1
}

run_case keepalive 2000 6 || fail "recv() on a silent peer did not fail within 6 s with keepalive"
if [ "${KEEPALIVE_CONTROL:-0}" = 1 ]; then
    run_case untuned 0 6 && fail "recv() failed without keepalive: the case does not test it"
fi
[ "$FAILED" = 0 ] && echo "PASS"
exit "$FAILED"
