#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Observability and CLI consistency (issue 17), against real `remora`
# processes over loopback. One case per CTest entry:
#   test_obs.sh REMORA_BIN SRC_DIR CASE
# CASE: counters | token | metrics | metricsslow | connlog | help |
#       didyoumean | notring | portinuse | notransport | json | config
# Every case prints PASS or FAIL lines and exits non-zero on a failure.
set -u
remora=$1
src=$2
case_=$3
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
pass() { echo "PASS: $*"; }

# start NAME ARGS...: run `remora ARGS` in the background, wait for its
# "listening" line; $addr is the address, stderr goes to $tmp/NAME.err.
start() {
  local name=$1; shift
  "$remora" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  pids+=($!)
  last_pid=$!
  for _ in $(seq 200); do grep -q '^listening' "$tmp/$name.out" && break; sleep 0.05; done
  grep -q '^listening' "$tmp/$name.out" || { cat "$tmp/$name.err"; fail "$name did not start"; }
  addr=$(awk '/^listening/ {print $2}' "$tmp/$name.out")
}

# stop PID: SIGTERM and wait; a crash (or sanitizer report) is a failure.
stop() {
  kill -TERM "$1"; wait "$1"; local rc=$?
  [ "$rc" -eq 0 ] || fail "server exited $rc on SIGTERM"
}

# jq-less checks: python3 EXPR over the JSON object in file F ("d").
# wait_line FILE REGEX: until a line of FILE matches (at most 5 s). A client
# that exits has closed its connection, but the server may not have seen it
# yet; a server stopped before then closes it itself, and logs nothing for it.
wait_line() {
  for _ in $(seq 100); do grep -Eq "$2" "$1" && return 0; sleep 0.05; done
  return 1
}

check_json() {
  python3 - "$1" "$2" <<'EOF' || fail "check $2 on $(cat "$1")"
import json, sys
d = json.load(open(sys.argv[1]))
ok = eval(sys.argv[2])
sys.exit(0 if ok else 1)
EOF
}

case "$case_" in
counters)
  start s serve --listen 127.0.0.1:0 --region a=2M --writable
  # Known traffic on the am path: 3 reads of 4096, 8192 and 1 MiB in 64 KiB
  # chunks (1 + 1 + 16 operations), one write of 1000 bytes, one of 100 KiB.
  export REMORA_PATH=am REMORA_CHUNK_SIZE=65536
  "$remora" read "$addr/a" --length 4096 -o "$tmp/r1" || fail "read 1"
  "$remora" read "$addr/a" --offset 4096 --length 8192 -o "$tmp/r2" || fail "read 2"
  "$remora" read "$addr/a" --length 1M --verify || fail "read 3"
  head -c 1000 /dev/zero | "$remora" write "$addr/a" -i - 2>/dev/null || fail "write 1"
  "$remora" write "$addr/a" --offset 1M --pattern --length 100K 2>/dev/null || fail "write 2"
  # A region that is not there: the server answers one error.
  "$remora" read "$addr/nope" -o "$tmp/r4" 2>/dev/null && fail "read of a missing region worked"
  unset REMORA_PATH REMORA_CHUNK_SIZE
  "$remora" stat "$addr" --json >"$tmp/stat.json" || fail "stat"
  python3 -m json.tool "$tmp/stat.json" >/dev/null || fail "stat --json does not parse"
  s='d["stats"]'
  check_json "$tmp/stat.json" "$s['am_read_ops'] == 18 and $s['am_read_bytes'] == 4096 + 8192 + 1048576"
  check_json "$tmp/stat.json" "$s['am_write_ops'] == 3 and $s['am_write_bytes'] == 1000 + 102400"
  check_json "$tmp/stat.json" "$s['staging_read_ops'] == 0 and $s['staging_write_ops'] == 0"
  check_json "$tmp/stat.json" "$s['errors'] == 1"
  check_json "$tmp/stat.json" "$s['lookups'] == 5"
  # 6 clients before, and the stat connection itself, which is the one open now.
  check_json "$tmp/stat.json" "$s['conns_accepted'] == 7 and $s['conns'] == 1"
  check_json "$tmp/stat.json" "$s['conns_refused'] == 0 and $s['auth_failures'] == 0"
  check_json "$tmp/stat.json" "d['connections_total'] == 1 and len(d['connections']) == 1"
  check_json "$tmp/stat.json" "d['connections'][0]['peer'].startswith('127.0.0.1:') and d['connections'][0]['id'] == 7"
  pass "counters match the traffic: 18 reads of 1060864 bytes, 3 writes of 103400, 1 error"
  # The default path on one host maps the region: a grant, no server bytes.
  "$remora" read "$addr/a" --length 4096 -o "$tmp/r5" || fail "read (map)"
  "$remora" stat "$addr" --json >"$tmp/stat2.json" || fail "stat 2"
  check_json "$tmp/stat2.json" "d['stats']['am_read_ops'] == 18 and d['stats']['map_grants'] >= 1"
  pass "a mapped read counts a map grant and no server-side read"
  # The text form names the same counters.
  "$remora" stat "$addr" >"$tmp/stat.txt" || fail "stat (text)"
  grep -Eq '^  am_read_bytes +1060864$' "$tmp/stat.txt" || { cat "$tmp/stat.txt"; fail "stat text"; }
  pass "stat text"
  stop "$last_pid"
  ;;
token)
  printf 'a-token-of-twenty-bytes\n' >"$tmp/tok"
  printf 'another-wrong-token-xx\n' >"$tmp/bad"
  start s serve --listen 127.0.0.1:0 --region a=64K --token-file "$tmp/tok"
  "$remora" stat "$addr" >/dev/null 2>&1 && fail "stat without the token worked"
  "$remora" stat "$addr" --token-file "$tmp/bad" >/dev/null 2>&1 && fail "stat with a wrong token worked"
  "$remora" stat "$addr" --token-file "$tmp/tok" --json >"$tmp/stat.json" || fail "stat with the token"
  check_json "$tmp/stat.json" "d['stats']['auth_failures'] == 1"
  pass "stat needs the token; the wrong one is counted as an authentication failure"
  stop "$last_pid"
  ;;
metrics)
  start s serve --listen 127.0.0.1:0 --region a=1M --metrics 0
  url=$(grep -o 'http://[^ ]*/metrics' "$tmp/s.err") || fail "no metrics address on stderr"
  port=${url#http://127.0.0.1:}; port=${port%/metrics}
  REMORA_PATH=am "$remora" read "$addr/a" --length 12345 -o "$tmp/r" || fail "read"
  PYTHONPATH="$src/tests" python3 - "$port" <<'EOF' || fail "metrics endpoint"
import re, socket, sys, time
from functools import partial
import metrics_http
from metrics_http import status
port = int(sys.argv[1])
http = partial(metrics_http.http, port)

r = http(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
assert status(r) == 200, r[:200]
head, body = r.split(b"\r\n\r\n", 1)
assert b"text/plain; version=0.0.4" in head, head
text = body.decode()
assert "# HELP remora_read_bytes_total " in text and "# TYPE remora_read_bytes_total counter" in text, text
assert re.search(r'^remora_read_bytes_total\{path="am"\} 12345$', text, re.M), text
assert re.search(r'^remora_read_ops_total\{path="am"\} 1$', text, re.M), text
assert re.search(r'^remora_connections_accepted_total 1$', text, re.M), text
for line in text.splitlines():  # the exposition format, line by line
    assert line.startswith("# HELP remora_") or line.startswith("# TYPE remora_") or \
        re.match(r'^remora_[a-z_]+(\{[a-z]+="[a-z]+"\})? [0-9.]+$', line), line
print("PASS: GET /metrics: HELP, TYPE and the counters of the traffic")

assert status(http(b"GET /other HTTP/1.0\r\n\r\n")) == 404
assert status(http(b"POST /metrics HTTP/1.0\r\n\r\n")) == 405
assert status(http(b"\x00\x01\x02garbage\r\n\r\n")) == 400
assert status(http(b"GET /metrics\r\n\r\n")) == 400
assert status(http(b"GET /metrics HTTP/1.0\r\nX: " + b"a" * 100000 + b"\r\n\r\n")) == 400
assert status(http(bytes(range(256)) * 64)) == 400
print("PASS: 404, 405, 400 for garbage, a bad request line and an oversized request")
# A client that says nothing is dropped after the timeout, and others follow.
t = time.time()
s = socket.create_connection(("127.0.0.1", port), timeout=10)
assert s.recv(100) == b"" and time.time() - t < 8
s.close()
r = http(b"GET /metrics?x=1 HTTP/1.1\r\n\r\n")
assert status(r) == 200
print("PASS: a silent client is dropped; scrapes go on")
EOF
  kill -0 "$last_pid" || fail "serve died"
  stop "$last_pid"
  # A bare port means loopback; a port in use is said so.
  "$remora" serve --listen 127.0.0.1:0 --region a=4K --metrics '' >/dev/null 2>&1; rc=$?
  [ $rc -eq 2 ] || fail "--metrics '' exited $rc, not 2"
  "$remora" serve --listen 127.0.0.1:0 --region a=4K --metrics 'x:y' >/dev/null 2>&1; rc=$?
  [ $rc -eq 2 ] || fail "--metrics x:y exited $rc, not 2"
  start s2 serve --listen 127.0.0.1:0 --region a=4K --metrics 0
  url2=$(grep -o 'http://[^ ]*/metrics' "$tmp/s2.err")
  case "$url2" in http://127.0.0.1:*) ;; *) fail "--metrics PORT is not on loopback: $url2";; esac
  p2=${url2#http://127.0.0.1:}; p2=${p2%/metrics}
  "$remora" serve --listen 127.0.0.1:0 --region a=4K --metrics "127.0.0.1:$p2" >/dev/null 2>"$tmp/inuse.err" &&
    fail "a second --metrics on the same port worked"
  grep -q 'port in use' "$tmp/inuse.err" || { cat "$tmp/inuse.err"; fail "no 'port in use'"; }
  pass "--metrics PORT binds 127.0.0.1; a taken port says 'port in use'"
  stop "$last_pid"
  # With a token, only a scraper holding it (as a bearer token) is answered.
  printf 'metrics-token-0123456789abcdef\n' >"$tmp/tok"
  start s3 serve --listen 127.0.0.1:0 --region a=4K --token-file "$tmp/tok" --metrics 0
  url3=$(grep -o 'http://[^ ]*/metrics' "$tmp/s3.err") || fail "no metrics address (token)"
  p3=${url3#http://127.0.0.1:}; p3=${p3%/metrics}
  PYTHONPATH="$src/tests" python3 - "$p3" <<'EOF' || fail "metrics endpoint with a token"
import sys
from metrics_http import get_metrics
port = int(sys.argv[1])
def get(extra):
    return get_metrics(port, extra)
assert get(b"")[0] == 401
assert get(b"Authorization: Bearer wrong-token-0123456789abcd\r\n")[0] == 401
assert get(b"Authorization: Bearer metrics-token-0123456789abcde\r\n")[0] == 401  # a prefix
assert get(b"Authorization: Basic metrics-token-0123456789abcdef\r\n")[0] == 401
code, body = get(b"authorization: bearer metrics-token-0123456789abcdef\r\n")
assert code == 200 and b"remora_" in body, body[:200]
print("PASS: with a token: 401 without it, a wrong one or a prefix; 200 with it")
EOF
  stop "$last_pid"
  # Absent unless asked for: no endpoint announced.
  start s4 serve --listen 127.0.0.1:0 --region a=4K
  grep -q metrics "$tmp/s4.err" "$tmp/s4.out" && fail "a metrics endpoint without --metrics"
  pass "without --metrics: no endpoint"
  stop "$last_pid"
  ;;
metricsslow)
  # Silent and dripping peers of the metrics endpoint do not delay a scrape
  # (served one at a time, 6 idle sockets held each scrape 15 s), whether
  # they stay under the bound on connections or go over it.
  printf 'metrics-token-0123456789abcdef\n' >"$tmp/tok"
  start s serve --listen 127.0.0.1:0 --region a=4K --token-file "$tmp/tok" --metrics 0
  url=$(grep -o 'http://[^ ]*/metrics' "$tmp/s.err") || fail "no metrics address on stderr"
  port=${url#http://127.0.0.1:}; port=${port%/metrics}
  PYTHONPATH="$src/tests" python3 - "$port" "$last_pid" <<'EOF' || fail "metrics endpoint with slow peers"
import os, select, signal, socket, sys, threading, time
from metrics_http import get_metrics
port, pid = int(sys.argv[1]), int(sys.argv[2])
auth = b"Authorization: Bearer metrics-token-0123456789abcdef\r\n"

def conn():
    return socket.create_connection(("127.0.0.1", port), timeout=30)

def scrape(extra=auth):
    t = time.time()
    code = get_metrics(port, extra, timeout=30)[0]
    return code, time.time() - t

def closed_by_server(s, limit):
    """Whether the server closes s within limit seconds (s reads nothing)."""
    t = time.time()
    while time.time() - t < limit:
        if select.select([s], [], [], 0.05)[0]:
            try:
                return s.recv(100) == b""
            except ConnectionResetError:
                return True
    return False

for n in (6, 40):  # under the bound of 16 connections, and over it
    idle = [conn() for _ in range(n)]
    code, dt = scrape()
    assert code == 200 and dt < 1.0, (n, code, dt)
    code, dt401 = scrape(b"")
    assert code == 401 and dt401 < 1.0, (n, code, dt401)
    print("PASS: %d idle connections: scrape answered in %.3f s" % (n, dt))
    for s in idle:
        s.close()

# Slowloris: a byte of headers every 100 ms, never the end of them.
dropped = []
def drip():
    s = conn()
    s.sendall(b"GET /metrics HTTP/1.0\r\n")
    t = time.time()
    while time.time() - t < 10:
        try:
            s.sendall(b"a")
        except OSError:
            break
        if closed_by_server(s, 0.1):
            break
    dropped.append(time.time() - t)
    s.close()
drips = [threading.Thread(target=drip) for _ in range(4)]
for d in drips:
    d.start()
time.sleep(0.5)
code, dt = scrape()
assert code == 200 and dt < 1.0, (code, dt)
for d in drips:
    d.join()
assert len(dropped) == 4 and max(dropped) < 4, dropped
print("PASS: 4 dripping peers: scrape answered in %.3f s; each dropped after %.1f s at most"
      % (dt, max(dropped)))

# SIGTERM with connections open: the server closes them and stops.
idle = [conn() for _ in range(4)]
os.kill(pid, signal.SIGTERM)
assert all(closed_by_server(s, 5) for s in idle)
print("PASS: SIGTERM with idle metrics connections open closes them")
EOF
  wait "$last_pid"; rc=$?
  [ "$rc" -eq 0 ] || fail "server exited $rc on SIGTERM"
  ;;
connlog)
  start s serve --listen 127.0.0.1:0 --region a=64K
  "$remora" ping "$addr" -n 1 >/dev/null || fail "ping"
  wait_line "$tmp/s.err" '^remora serve: client 127\.0\.0\.1:[0-9]+ disconnected'
  stop "$last_pid"
  grep -Eq '^remora serve: client 127\.0\.0\.1:[0-9]+ connected' "$tmp/s.err" || { cat "$tmp/s.err"; fail "no connect line"; }
  grep -Eq '^remora serve: client 127\.0\.0\.1:[0-9]+ disconnected' "$tmp/s.err" || { cat "$tmp/s.err"; fail "no disconnect line"; }
  start t stream serve --listen 127.0.0.1:0 --ring r=64x16 --rate 100
  "$remora" stream read "$addr/r" --count 3 >/dev/null || fail "stream read"
  wait_line "$tmp/t.err" '^remora stream serve: client 127\.0\.0\.1:[0-9]+ disconnected'
  stop "$last_pid"
  grep -Eq '^remora stream serve: client 127\.0\.0\.1:[0-9]+ connected' "$tmp/t.err" || { cat "$tmp/t.err"; fail "no stream connect line"; }
  grep -Eq '^remora stream serve: client 127\.0\.0\.1:[0-9]+ disconnected' "$tmp/t.err" || { cat "$tmp/t.err"; fail "no stream disconnect line"; }
  pass "serve and stream serve log connections and disconnections with the peer's address"
  ;;
help)
  cmds=$("$remora" --help | awk '/^Commands:/ {on=1; next} on && /^  [a-z]/ {print $1} on && /^$/ {exit}')
  [ "$(echo "$cmds" | wc -l)" -ge 11 ] || fail "command list: $cmds"
  for c in $cmds "stream serve" "stream read" "stream clone"; do
    # shellcheck disable=SC2086
    out=$("$remora" $c --help 2>&1); rc=$?
    [ $rc -eq 0 ] || fail "'remora $c --help' exited $rc"
    echo "$out" | grep -q "^usage: remora $c" || fail "'remora $c --help' has no usage line"
    echo "$out" | grep -q -- '--help' || fail "'remora $c --help' does not list --help"
    # Every long option the usage line shows is explained below it.
    for o in $(echo "$out" | sed -n '1,/^$/p' | grep -o -- '--[a-z-]*' | sort -u); do
      echo "$out" | sed '1,/^$/d' | grep -q -- "$o" || fail "'remora $c --help' does not explain $o"
    done
  done
  out=$("$remora" stream serve --help)
  echo "$out" | grep -q -- '--listen HOST:PORT  address' || fail "stream serve --help: --listen"
  echo "$out" | grep -q -- '--token-file F' || fail "stream serve --help: --token-file"
  [ "$(echo "$out" | grep -c -- '  --token-file')" -eq 1 ] || fail "stream serve --help: --token-file twice"
  "$remora" --help | grep -q '10^9 bytes' || fail "remora --help does not say what GB/s is"
  pass "every command's --help exits 0 and explains each option it lists"
  ;;
didyoumean)
  "$remora" sevre 2>"$tmp/e"; rc=$?
  [ $rc -eq 2 ] || fail "exit $rc"
  grep -q "did you mean 'serve'" "$tmp/e" || { cat "$tmp/e"; fail "no suggestion for sevre"; }
  "$remora" stats 2>"$tmp/e"
  grep -q "did you mean 'stat'" "$tmp/e" || { cat "$tmp/e"; fail "no suggestion for stats"; }
  "$remora" stream raed 2>"$tmp/e"; rc=$?
  [ $rc -eq 2 ] || fail "stream raed: exit $rc"
  grep -q "did you mean 'stream read'" "$tmp/e" || { cat "$tmp/e"; fail "no suggestion for stream raed"; }
  "$remora" xyzzy 2>"$tmp/e"
  grep -q "did you mean" "$tmp/e" && fail "a suggestion for xyzzy"
  pass "mistyped commands get 'did you mean'"
  ;;
notring)
  start s serve --listen 127.0.0.1:0 --region plain=64K
  "$remora" stream read "$addr/plain" --count 1 >/dev/null 2>"$tmp/e"; rc=$?
  [ $rc -eq 1 ] || fail "exit $rc"
  grep -q "not a ring" "$tmp/e" || { cat "$tmp/e"; fail "no 'not a ring'"; }
  pass "stream read of a plain region says 'not a ring'"
  stop "$last_pid"
  ;;
portinuse)
  start s serve --listen 127.0.0.1:0 --region a=4K
  for c in serve "stream serve"; do
    # shellcheck disable=SC2086
    "$remora" $c --listen "$addr" >/dev/null 2>"$tmp/e"; rc=$?
    [ $rc -eq 1 ] || fail "$c: exit $rc"
    grep -q "port in use" "$tmp/e" || { cat "$tmp/e"; fail "$c: no 'port in use'"; }
    grep -q '^remora\[' "$tmp/e" && { cat "$tmp/e"; fail "$c: an internal log line"; }
    [ "$(wc -l <"$tmp/e")" -eq 1 ] || { cat "$tmp/e"; fail "$c: more than one line"; }
  done
  pass "a port in use is said in one line, without internal log lines"
  stop "$last_pid"
  ;;
notransport)
  # A client whose UCX keeps only transports that cannot report a dead peer
  # (shared memory): refused at connect, saying why; the server serves the
  # next client. With worker addresses the server's endpoint to the client
  # is refused, and the server says why too; through the connection manager
  # (UCX 1.16's default) the client's own endpoint finds no lane, and the
  # server never hears of it.
  start s serve --listen 127.0.0.1:0 --region a=4K
  UCX_TLS=sm,self timeout 30 "$remora" ls "$addr" >/dev/null 2>"$tmp/e"; rc=$?
  [ $rc -eq 1 ] || { cat "$tmp/e"; fail "exit $rc"; }
  grep -Eq "no UCX transport here reaches|a transport in common that reports a dead peer" "$tmp/e" || { cat "$tmp/e"; fail "client: no reason"; }
  grep -q "UCX  WARN" "$tmp/e" && { cat "$tmp/e"; fail "client: UCX warned of settings no transport took"; }
  "$remora" ls "$addr" >/dev/null 2>"$tmp/e2" || { cat "$tmp/e2"; fail "the next client was not served"; }
  if grep -q "the server could not open a UCX endpoint" "$tmp/e"; then
    grep -q "no UCX transport here reaches that peer" "$tmp/s.err" || { cat "$tmp/s.err"; fail "server: no reason"; }
  fi
  pass "a client with only shared-memory transports is refused at connect, saying why"
  stop "$last_pid"
  ;;
json)
  start s serve --listen 127.0.0.1:0 --region a=1M --writable
  start t stream serve --listen 127.0.0.1:0 --ring r=64x16 --rate 1000
  raddr=$addr
  addr=$(awk '/^listening/ {print $2}' "$tmp/s.out")
  j() { # j NAME [--json-lines] -- ARGS...: run, then parse stdout
    local name=$1 mode=$2; shift 3
    "$@" >"$tmp/$name.json" 2>"$tmp/$name.err" || { cat "$tmp/$name.err"; fail "$name exited $?"; }
    python3 -m json.tool $mode "$tmp/$name.json" >/dev/null || { cat "$tmp/$name.json"; fail "$name --json does not parse"; }
    echo "ok: $name"
  }
  j ls --json-lines -- "$remora" ls "$addr" --json
  j ping "" -- "$remora" ping "$addr" -n 2 --json
  j read "" -- "$remora" read "$addr/a" --length 4K -o "$tmp/x" --json
  j readv "" -- "$remora" read "$addr/a" --verify --json
  j write "" -- "$remora" write "$addr/a" --pattern --length 4K --json
  j bench "" -- "$remora" bench "$addr/a" --size 4K --iters 10 --json
  j benchw "" -- "$remora" bench "$addr/a" --size 4K --depth 2 --iters 10 --work-us 500 --json
  check_json "$tmp/benchw.json" "d['work_us'] == 500 and d['iters'] == 10"
  "$remora" bench "$addr/a" --work-us x >/dev/null 2>&1 && fail "bench --work-us x accepted"
  j info "" -- "$remora" info --json
  j infocfg "" -- "$remora" info --config --json
  j config "" -- "$remora" config --json
  j stat "" -- "$remora" stat "$addr" --json
  j doctor "" -- "$remora" doctor --json
  j sread "" -- "$remora" stream read "$raddr/r" --count 5 --json
  j sclone "" -- "$remora" stream clone --json "$raddr/r" "$tmp/clone.img"
  for c in serve "stream serve"; do
    # shellcheck disable=SC2086
    "$remora" $c --listen 127.0.0.1:0 --json >"$tmp/ready.json" 2>/dev/null &
    p=$!; pids+=($p)
    for _ in $(seq 200); do [ -s "$tmp/ready.json" ] && break; sleep 0.05; done
    check_json "$tmp/ready.json" "d['listening'].startswith('127.0.0.1:')"
    stop $p
    echo "ok: $c"
  done
  pass "--json parses for serve, ls, ping, read, write, bench, info, config, stat, doctor, stream serve/read/clone"
  ;;
config)
  "$remora" config --json >"$tmp/c.json" || fail "config --json"
  "$remora" config >"$tmp/c.txt" || fail "config"
  names=$(grep -rhoE '"REMORA_[A-Z0-9_]+"' "$src/src" "$src/tools" | tr -d '"' | sort -u)
  [ -n "$names" ] || fail "no REMORA_ names found in the sources"
  for n in $names; do
    grep -q "^$n " "$tmp/c.txt" || fail "$n not in 'remora config'"
  done
  echo "$names" >"$tmp/names"
  check_json "$tmp/c.json" "set(open('$tmp/names').read().split()) <= set(v['name'] for v in d)"
  # And no stale entries: every row is read somewhere.
  for n in $(python3 -c 'import json,sys; print(" ".join(v["name"] for v in json.load(open(sys.argv[1]))))' "$tmp/c.json"); do
    echo "$names" | grep -qx "$n" || fail "$n is in the table but no source reads it"
  done
  check_json "$tmp/c.json" "all(v['default'] and v['meaning'] for v in d)"
  REMORA_WINDOW=7 "$remora" config --json >"$tmp/c2.json"
  check_json "$tmp/c2.json" "[v for v in d if v['name'] == 'REMORA_WINDOW'][0]['value'] == '7' and [v for v in d if v['name'] == 'REMORA_WINDOW'][0]['set']"
  pass "remora config lists all $(echo "$names" | wc -l) REMORA_* variables the sources read, with values"
  ;;
*)
  fail "unknown case $case_"
  ;;
esac
exit 0
