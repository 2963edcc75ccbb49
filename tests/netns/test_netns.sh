#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Across "hosts": a server in one network namespace, clients in another,
# joined by a veth pair, over TCP only (UCX_TLS=tcp). remora counts a peer in
# another network namespace as another host, so this exercises the cross-host
# data path (active messages) end to end with the real command.
#
# Usage: test_netns.sh PATH/TO/remora
# Exit: 0 pass, 1 fail, 77 skipped (not root, no `ip`, namespaces not allowed).
#
# Everything is private to this run: namespace and interface names carry our
# PID, the addresses (10.231.X.1/.2, /30) exist only inside the two namespaces,
# and the trap removes the namespaces (and with them the veth pair) and kills
# the server whatever happens.
set -u

REMORA=${1:?usage: $0 PATH/TO/remora}
ID=$$
. "$(dirname "$0")/netns_lib.sh"
TMP=$(mktemp -d /tmp/remora-netns-XXXXXX)
SERVER_PID=
WATCHDOG_PID=
FAILED=0

skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAIL: $*"; FAILED=1; }

cleanup() {
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -KILL "$SERVER_PID" 2>/dev/null
        wait "$SERVER_PID" 2>/dev/null
    fi
    if [ -n "$WATCHDOG_PID" ]; then
        kill "$WATCHDOG_PID" 2>/dev/null
        wait "$WATCHDOG_PID" 2>/dev/null
    fi
    netns_pair_del
    if [ "$FAILED" = 0 ]; then rm -rf "$TMP"; else echo "logs kept in $TMP"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

[ -x "$REMORA" ] || { echo "FAIL: $REMORA is not executable"; exit 1; }

netns_pair it 10.231

in1() { ip netns exec "$NS1" env UCX_TLS=tcp "$@"; }
in2() { ip netns exec "$NS2" env UCX_TLS=tcp timeout 60 "$@"; }

# The server, in namespace 1. Started directly (not through a shell
# function, which would run in a subshell): `ip netns exec` and `env` exec, so
# $! is the server itself. A watchdog kills it after 110 s even if this script
# dies before its trap can run.
# One worker: the UCX-port step below takes every other listening port of the
# server for UCX's (more workers would add remora ports of their own).
ip netns exec "$NS1" env UCX_TLS=tcp "$REMORA" serve --listen "$ADDR1:0" --workers 1 --region a=32M \
    --region w=8M:zero --writable >"$TMP/serve.out" 2>"$TMP/serve.err" &
SERVER_PID=$!
(
    trap 'kill "$nap" 2>/dev/null; exit 0' TERM
    sleep 110 & nap=$!
    wait "$nap"
    kill -KILL "$SERVER_PID" 2>/dev/null
) >/dev/null 2>&1 &
WATCHDOG_PID=$!
ADDR=
for _ in $(seq 1 300); do
    ADDR=$(sed -n 's/^listening //p' "$TMP/serve.out")
    [ -n "$ADDR" ] && break
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
done
if [ -z "$ADDR" ]; then
    echo "FAIL: the server did not start"; cat "$TMP/serve.err"; FAILED=1; exit 1
fi
case "$ADDR" in "$ADDR1":*) ;; *) fail "server listens on $ADDR, expected $ADDR1:PORT" ;; esac
echo "server in $NS1 listening on $ADDR"

# Namespace 2 really cannot see the server any other way than over the veth.
in2 "$REMORA" ping "127.0.0.1:${ADDR##*:}" -n 1 --timeout 2000 >/dev/null 2>&1 &&
    fail "the server's port answered on the client namespace's loopback"

# UCX's own TCP ports, from the other host before it ever did remora's
# handshake: the gate (src/engine/gate.h) must leave the TCP handshake
# unanswered. Had one completed, UCX's magic number and a PUT frame to
# address 0x1000 follow: an unguarded server aborts (docs/security.md §2.1).
UCX_PORTS=$(ip netns exec "$NS1" ss -Htlnp 2>/dev/null |
    awk -v pid="pid=$SERVER_PID," -v own=":${ADDR##*:}" \
        'index($0, pid) && $4 !~ own"$" { n = split($4, a, ":"); print a[n] }')
[ -n "$UCX_PORTS" ] || fail "no UCX listening port found for the server"
for port in $UCX_PORTS; do
    in2 python3 - "$ADDR1" "$port" <<'PY' >>"$TMP/ucx_attack.out" 2>&1
import socket, struct, sys
s = socket.socket()
s.settimeout(2)
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
except OSError as e:
    print("refused or unanswered:", e); sys.exit(0)
s.sendall(struct.pack("<QBI", 0xCAFEBABE12345678, 33, 20) + struct.pack("<QQI", 0x1000, 8, 1) + b"x" * 8)
print("CONNECTED"); sys.exit(1)
PY
    [ $? = 0 ] || fail "UCX's port $port answered a host that never authenticated"
done
sleep 0.3
kill -0 "$SERVER_PID" 2>/dev/null || fail "the server died of a raw frame to UCX's port: $(cat "$TMP/serve.err")"
echo "UCX ports $(echo $UCX_PORTS) unanswered to $NS2 before its handshake"

# ls
if in2 "$REMORA" ls "$ADDR" >"$TMP/ls.out" 2>"$TMP/ls.err"; then
    grep -q '^a ' "$TMP/ls.out" || fail "ls does not list region a: $(cat "$TMP/ls.out")"
else
    fail "ls: $(cat "$TMP/ls.err")"
fi

# read --verify of the whole region, and of an unaligned range
in2 "$REMORA" read "$ADDR/a" --verify 2>"$TMP/read.err" || fail "read --verify: $(cat "$TMP/read.err")"
in2 "$REMORA" read "$ADDR/a" --verify --offset 12345 --length 7000001 2>"$TMP/read2.err" ||
    fail "read --verify of a range: $(cat "$TMP/read2.err")"

# write a file, read it back byte-exact
head -c 5000003 /dev/urandom >"$TMP/in.bin"
in2 "$REMORA" write "$ADDR/w" --offset 7 -i "$TMP/in.bin" 2>"$TMP/write.err" ||
    fail "write: $(cat "$TMP/write.err")"
in2 "$REMORA" read "$ADDR/w" --offset 7 --length 5000003 -o "$TMP/out.bin" 2>"$TMP/read3.err" ||
    fail "read -o: $(cat "$TMP/read3.err")"
cmp -s "$TMP/in.bin" "$TMP/out.bin" || fail "write/read round trip differs"

# bench: must run and report the active-message path (another host, TCP only)
if in2 "$REMORA" bench "$ADDR/a" --size 64K,4M --seconds 0.5 --json >"$TMP/bench.out" \
    2>"$TMP/bench.err"; then
    [ "$(grep -c '"gbps"' "$TMP/bench.out")" = 2 ] || fail "bench output: $(cat "$TMP/bench.out")"
    grep -q '"path":"am"' "$TMP/bench.out" || fail "bench did not use the am path: $(cat "$TMP/bench.out")"
    cat "$TMP/bench.out"
else
    fail "bench: $(cat "$TMP/bench.err")"
fi

# ping
in2 "$REMORA" ping "$ADDR" -n 5 >"$TMP/ping.out" 2>"$TMP/ping.err" || fail "ping: $(cat "$TMP/ping.err")"
grep -q "5 pings" "$TMP/ping.out" || fail "ping output: $(cat "$TMP/ping.out")"
tail -1 "$TMP/ping.out"

# A region that is not there, across hosts too: one clear line, exit 1.
in2 "$REMORA" read "$ADDR/nope" >/dev/null 2>"$TMP/nope.err"
rc=$?
[ "$rc" = 1 ] || fail "read of a missing region exited $rc"
grep -q "region not found" "$TMP/nope.err" || fail "missing region message: $(cat "$TMP/nope.err")"

# Clean shutdown.
kill -TERM "$SERVER_PID"
wait "$SERVER_PID"
rc=$?
SERVER_PID=
[ "$rc" = 0 ] || { fail "server exited $rc after SIGTERM"; cat "$TMP/serve.err"; }

[ "$FAILED" = 0 ] && echo "PASS"
exit "$FAILED"
