#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Faults across "hosts" (issue 11): servers in one network namespace, clients
# in another, joined by a veth pair, TCP only (UCX_TLS=tcp).
#
#   link     the server side of the veth is set DOWN (no reset: packets just
#            stop). `remora bench --op read`, `remora bench --op write` and
#            `remora stream read --no-reconnect` must each exit non-zero
#            within 2.5 s of the link going down, saying "disconnected".
#   stop     the same with both servers SIGSTOPped (SIGCONT before cleanup).
#   restart  a `remora stream serve` on a fixed address is SIGKILLed and
#            started again RESTARTS times (default 100) while 4 reconnecting
#            `remora stream read --verify --json --seconds N` subscribers run
#            across all of them. Asserted: every subscriber exits 0 with a
#            summary; reconnects == RESTARTS exactly (each one lives through
#            every restart); torn == corrupt == 0; every restart is followed
#            by all 4 within 2 s (server log: `listening` to the 4th
#            "client ... connected"); elements + drops matches the elements
#            the producers committed during its life (see check_counts); the
#            subscribers' fds grow by at most 8 and VmRSS by at most 8 MiB
#            between restart 10 and the last restart.
#
# Usage: test_netns_faults.sh PATH/TO/remora
# Environment: NETNS_FAULTS="link stop restart" (phases to run),
#   NETNS_RESTARTS=100, NETNS_PERIOD_S=0.5 (one server instance's life;
#   the 4 subscribers follow a restart in under 100 ms; 1.0 until session 29,
#   which took 50 s more of CI's serial time),
#   REMORA_HEARTBEAT_MS / REMORA_PEER_TIMEOUT_MS pass through to every process
#   (REMORA_HEARTBEAT_MS=0 must make the link and stop phases fail).
# Exit: 0 pass, 1 fail, 77 skipped (not root, no `ip`, namespaces not allowed).
#
# Everything is private to this run: namespace and interface names carry our
# PID, the addresses exist only inside the two namespaces, and the trap kills
# every process we started (by PID) and removes the namespaces.
set -u
export LC_ALL=C # $EPOCHREALTIME with a '.'

REMORA=${1:?usage: $0 PATH/TO/remora}
PHASES=${NETNS_FAULTS:-link stop restart}
RESTARTS=${NETNS_RESTARTS:-100}
PERIOD=${NETNS_PERIOD_S:-0.5}
RATE=2000
NSUB=4
EXIT_BOUND_MS=2500
FOLLOW_BOUND_MS=2000
FD_SLACK=8
RSS_SLACK_KB=$((8 * 1024))
ID=$$
. "$(dirname "$0")/netns_lib.sh"
# Below the kernel's ephemeral range (32768..), so no UCX listener or client
# socket in the namespace can already hold them.
PORT_SERVE=27101
PORT_STREAM=27102
PORT_RESTART=27103
TMP=$(mktemp -d /tmp/remora-netns-faults-XXXXXX)
PIDS=() # every process we started, killed by PID in the trap
FAILED=0

skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAIL: $*"; FAILED=1; }
now_ms() { local t=$EPOCHREALTIME; echo $((${t%.*} * 1000 + 10#${t#*.} / 1000)); }

cleanup() {
    local p
    for p in "${PIDS[@]}"; do
        kill -CONT "$p" 2>/dev/null
        kill -KILL "$p" 2>/dev/null
    done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
    netns_pair_del
    if [ "$FAILED" = 0 ]; then rm -rf "$TMP"; else echo "logs kept in $TMP"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

command -v perl >/dev/null 2>&1 || skip "no perl (line time stamps)"
[ -x "$REMORA" ] || { echo "FAIL: $REMORA is not executable"; exit 1; }

netns_pair ft 10.232

# Each line of stdin, prefixed with the wall clock in microseconds (perl:
# a bash read loop reads a pipe byte by byte and lags under load).
stamp() {
    perl -MTime::HiRes=time -ne 'BEGIN { $| = 1 } printf "%d %s", time() * 1e6, $_'
}

# wait_line FILE REGEX COUNT TIMEOUT_S PID: until FILE has COUNT lines
# matching REGEX; fails early if PID dies.
wait_line() {
    local i n
    for i in $(seq 1 $(($4 * 50))); do
        n=$(grep -cE "$2" "$1" 2>/dev/null)
        [ "${n:-0}" -ge "$3" ] && return 0
        [ -n "$5" ] && ! kill -0 "$5" 2>/dev/null && return 1
        sleep 0.02
    done
    return 1
}

# ---------------------------------------------------------------- servers

# start_servers TAG: `remora serve --writable` and `remora stream serve` in
# namespace 1 (ip netns exec and env exec, so $! is remora itself).
start_servers() {
    ip netns exec "$NS1" env UCX_TLS=tcp "$REMORA" serve --listen "$ADDR1:$PORT_SERVE" \
        --region a=64M --region w=64M:zero --writable >"$TMP/$1.serve.out" 2>"$TMP/$1.serve.err" &
    SERVE_PID=$!
    PIDS+=("$SERVE_PID")
    ip netns exec "$NS1" env UCX_TLS=tcp "$REMORA" stream serve --listen "$ADDR1:$PORT_STREAM" \
        --ring s=4Kx256 --rate "$RATE" >"$TMP/$1.stream.out" 2>"$TMP/$1.stream.err" &
    STREAM_PID=$!
    PIDS+=("$STREAM_PID")
    wait_line "$TMP/$1.serve.out" '^listening ' 1 30 "$SERVE_PID" &&
        wait_line "$TMP/$1.stream.out" '^listening ' 1 30 "$STREAM_PID" || {
        fail "$1: servers did not start: $(cat "$TMP/$1.serve.err" "$TMP/$1.stream.err")"
        return 1
    }
}

stop_servers() {
    kill -CONT "$SERVE_PID" "$STREAM_PID" 2>/dev/null
    kill -KILL "$SERVE_PID" "$STREAM_PID" 2>/dev/null
    wait "$SERVE_PID" "$STREAM_PID" 2>/dev/null
}

# ---------------------------------------------------- link down, SIGSTOP

# client NAME CMD...: run CMD in namespace 2 in the background; when it ends
# its status and end time (ms) go to $TMP/NAME.end.
client() {
    local name=$1
    shift
    (
        ip netns exec "$NS2" env UCX_TLS=tcp timeout -s KILL 90 "$REMORA" "$@" \
            >"$TMP/$name.out" 2>"$TMP/$name.err"
        echo "$? $(now_ms)" >"$TMP/$name.end"
    ) &
    PIDS+=("$!")
}

# fault_phase TAG: start servers and clients, let the clients run, inject
# the fault (fault_$TAG), then check every client's exit.
fault_phase() {
    local tag=$1 c t0 rc tend lat n
    local clients="bread bwrite sread"
    start_servers "$tag" || return
    client "$tag.bread" bench "$ADDR1:$PORT_SERVE/a" --op read --size 64K --depth 2 --seconds 60
    client "$tag.bwrite" bench "$ADDR1:$PORT_SERVE/w" --op write --size 64K --depth 2 --seconds 60
    client "$tag.sread" stream read "$ADDR1:$PORT_STREAM/s" --no-reconnect --seconds 60 --verify --json
    # Running: the stream server sees the subscriber, the serve server both
    # benches, and nothing has ended yet.
    sleep 2
    for c in $clients; do
        [ -e "$TMP/$tag.$c.end" ] && fail "$tag: $c ended before the fault: $(cat "$TMP/$tag.$c.err")"
    done
    t0=$(now_ms)
    "fault_$tag"
    echo "$tag: fault injected"
    # Wait for all of them (well past the bound, so a miss is measured).
    for n in $(seq 1 750); do
        rc=0
        for c in $clients; do [ -e "$TMP/$tag.$c.end" ] || rc=1; done
        [ "$rc" = 0 ] && break
        sleep 0.02
    done
    for c in $clients; do
        if [ ! -e "$TMP/$tag.$c.end" ]; then
            fail "$tag: $c still running 15 s after the fault"
            continue
        fi
        read -r rc tend <"$TMP/$tag.$c.end"
        lat=$((tend - t0))
        echo "$tag: $c exited $rc after $lat ms: $(head -c 200 "$TMP/$tag.$c.err" | tr '\n' ' ')"
        echo "$tag $c $lat" >>"$TMP/latencies"
        [ "$rc" != 0 ] || fail "$tag: $c exited 0 after the fault"
        [ "$lat" -le "$EXIT_BOUND_MS" ] || fail "$tag: $c took $lat ms to exit (bound $EXIT_BOUND_MS ms)"
        grep -qi 'disconnected' "$TMP/$tag.$c.err" ||
            fail "$tag: $c does not say disconnected: $(cat "$TMP/$tag.$c.err")"
    done
    # The stream reader still printed its summary, and saw only good frames.
    grep -q '"torn":0,"corrupt":0' "$TMP/$tag.sread.out" ||
        fail "$tag: stream read summary: $(cat "$TMP/$tag.sread.out")"
    "unfault_$tag"
    stop_servers
}

fault_link() { ip -n "$NS1" link set "$VETH1" down; }
unfault_link() { ip -n "$NS1" link set "$VETH1" up; }
fault_stop() { kill -STOP "$SERVE_PID" "$STREAM_PID"; }
unfault_stop() { kill -CONT "$SERVE_PID" "$STREAM_PID"; }

# ---------------------------------------------------------------- restarts

# start_instance I: the ring server of instance I, its stdout and stderr
# (REMORA_LOG=info: "client ADDR connected") stamped line by line.
start_instance() {
    ip netns exec "$NS1" env UCX_TLS=tcp REMORA_LOG=info "$REMORA" stream serve \
        --listen "$ADDR1:$PORT_RESTART" --ring r=4Kx256 --rate "$RATE" \
        > >(stamp >"$TMP/inst.$1.log") 2>&1 &
    INST_PID=$!
    PIDS+=("$INST_PID")
    echo "$(now_ms)000" >"$TMP/inst.$1.start"
}

# sample I: fds and VmRSS (kB) of every subscriber, as "fds rss" lines.
sample() {
    local s p
    for s in $(seq 1 $NSUB); do
        p=${SUB_PIDS[$s]}
        echo "$(ls /proc/"$p"/fd 2>/dev/null | wc -l) $(awk '/^VmRSS:/ {print $2}' /proc/"$p"/status 2>/dev/null)"
    done >"$TMP/sample.$1"
}

restart_phase() {
    local i s t_kill t_sched lst cnt follow secs need
    local period_ms
    period_ms=$(awk -v p="$PERIOD" 'BEGIN {printf "%d", p * 1000}')
    # Instance 0, then the subscribers; they live through all RESTARTS.
    start_instance 0
    wait_line "$TMP/inst.0.log" ' listening ' 1 30 "$INST_PID" ||
        { fail "restart: the ring server did not start: $(cat "$TMP/inst.0.log")"; return; }
    # The subscribers must outlive the last restart: a loaded machine makes
    # the restarts drift behind their schedule (a CI run under load fell
    # 8 s behind over 100 of them), hence the margin.
    secs=$(awk -v n="$RESTARTS" -v p="$PERIOD" 'BEGIN {printf "%d", n * p + 20}')
    SUB_PIDS=()
    for s in $(seq 1 $NSUB); do
        ip netns exec "$NS2" env UCX_TLS=tcp "$REMORA" stream read "$ADDR1:$PORT_RESTART/r" \
            --json --verify --seconds "$secs" > >(stamp >"$TMP/sub.$s.out") 2>"$TMP/sub.$s.err" &
        SUB_PIDS[$s]=$!
        PIDS+=("$!")
    done
    wait_line "$TMP/inst.0.log" ' client .* connected' "$NSUB" 30 "$INST_PID" ||
        { fail "restart: the subscribers did not connect: $(cat "$TMP/inst.0.log")"; return; }
    sleep 1
    echo "restart: $NSUB subscribers for ${secs} s, $RESTARTS restarts, one every $PERIOD s"
    LAST=0 # the last instance started
    t_sched=$(now_ms) # restart i at t_sched + i x PERIOD (no drift)
    for i in $(seq 1 "$RESTARTS"); do
        while [ $(($(now_ms) - t_sched)) -lt $((i * period_ms)) ]; do sleep 0.02; done
        t_kill=$(now_ms)
        kill -KILL "$INST_PID"
        echo "${t_kill}000" >"$TMP/inst.$((i - 1)).kill"
        wait "$INST_PID" 2>/dev/null
        # A subscriber that died is reported below; the rest go on being
        # restarted under, so the figures of a failing run are still there.
        need=0
        for s in $(seq 1 $NSUB); do kill -0 "${SUB_PIDS[$s]}" 2>/dev/null && need=$((need + 1)); done
        [ "$need" -gt 0 ] || { fail "restart $i: no subscriber left"; break; }
        start_instance "$i"
        LAST=$i
        echo "$need" >"$TMP/inst.$i.need"
        if ! wait_line "$TMP/inst.$i.log" ' client .* connected' "$need" 10 "$INST_PID"; then
            fail "restart $i: not all $need live subscribers came back within 10 s"
            continue
        fi
        # fds and VmRSS of the subscribers from restart 10 on, once they
        # are streaming again.
        [ "$i" -ge 10 ] && { sleep 0.2; sample "$i"; }
    done
    # The last instance stays up until every subscriber's --seconds is over.
    for s in $(seq 1 $NSUB); do
        wait "${SUB_PIDS[$s]}"
        echo $? >"$TMP/sub.$s.rc"
    done
    for s in $(seq 1 $NSUB); do wait_line "$TMP/sub.$s.out" '"elements"' 1 5 ""; done
    t_kill=$(now_ms)
    kill -KILL "$INST_PID"
    wait "$INST_PID" 2>/dev/null
    echo "${t_kill}000" >"$TMP/inst.$LAST.kill"
    check_restarts
}

# Follow time of every restart: `listening` to the NSUB-th "connected".
check_follow() {
    local i lst cnt
    for i in $(seq 1 "$LAST"); do
        lst=$(awk '$2 == "listening" {print $1; exit}' "$TMP/inst.$i.log")
        cnt=$(awk -v n="$(cat "$TMP/inst.$i.need")" '/ client .* connected/ {if (++k == n) {print $1; exit}}' "$TMP/inst.$i.log")
        [ -n "$lst" ] && [ -n "$cnt" ] || { fail "restart $i: not every live subscriber connected" >&2; continue; }
        echo "$i $(((cnt - lst) / 1000))"
    done >"$TMP/follow"
    awk -v b="$FOLLOW_BOUND_MS" '
        {n++; s += $2; if ($2 > m) m = $2; if ($2 > b) bad = bad " " $1 "(" $2 " ms)"}
        END {printf "restart: follow time (listening -> every live subscriber connected, %s at the start) over %d restarts: max %d ms, mean %.0f ms\n", "'"$NSUB"'", n, m, s / n
             if (bad != "") {print "FAIL: restarts followed later than " b " ms:" bad; exit 1}}' "$TMP/follow" ||
        FAILED=1
}

# elements + drops against what the producers committed (the protocol's
# sequence numbers). By remora.h (remora_sub_next) a subscriber's
# elements + drops is: on the instance it subscribed to, the span from the
# head at subscribe time to the last element it got; on every later instance
# the first sequence number it got from it (the gap, counted as drops) plus
# what it got after that. Elements an old instance committed after the last
# one delivered, before SIGKILL, are counted nowhere (nobody can know them).
# What an instance committed is taken from its paced producer: RATE elements
# a second from its `listening` line (the producer starts just before it) to
# the SIGKILL, clipped to the subscriber's life (its summary line less its
# "seconds"). This cannot be exact from outside: the undelivered tail at each
# kill (a subscriber behind by a few ms on this loaded machine) and the clock
# readings of `listening` lines are each worth up to ~10 ms = 20 elements. So
# asserted: |elements + drops - committed| <= COUNT_SLACK_PER x (instances
# lived through) + 20, default 80 (40 ms) per instance: the producer's first
# elements come before its `listening` line is stamped, which under load
# (2 cores, 4 subscribers, a restart every 1.8 s) was measured at 15-55
# elements per instance. A gap not counted as drops (hundreds of elements per
# restart once the follow time is past the 128 ms the ring holds) or counted
# twice breaks it.
COUNT_SLACK_PER=${NETNS_COUNT_SLACK:-80}
check_counts() {
    local s end secs elements drops lo expect diff i a b lst kl tol
    for s in $(seq 1 $NSUB); do
        elements=$(sed -n 's/.*"elements":\([0-9]*\).*/\1/p' "$TMP/sub.$s.out")
        drops=$(sed -n 's/.*"drops":\([0-9]*\).*/\1/p' "$TMP/sub.$s.out")
        secs=$(sed -n 's/.*"seconds":\([0-9.]*\).*/\1/p' "$TMP/sub.$s.out")
        [ -n "$elements" ] && [ -n "$drops" ] && [ -n "$secs" ] || continue
        # The subscriber's life: it ends when its summary line comes (its
        # stdout is stamped too) and began "seconds" before.
        end=$(awk '/"elements"/ {print $1; exit}' "$TMP/sub.$s.out")
        lo=$((end - $(awk -v x="$secs" 'BEGIN {printf "%d", x * 1e6}')))
        expect=0
        for i in $(seq 0 "$LAST"); do
            lst=$(awk '$2 == "listening" {print $1; exit}' "$TMP/inst.$i.log")
            kl=$(cat "$TMP/inst.$i.kill")
            a=$((lst > lo ? lst : lo))
            b=$((kl < end ? kl : end))
            [ "$b" -gt "$a" ] && expect=$((expect + (b - a) * RATE / 1000000))
        done
        diff=$((elements + drops - expect))
        tol=$((COUNT_SLACK_PER * (LAST + 1) + 20))
        echo "restart: subscriber $s: elements $elements + drops $drops = $((elements + drops)), committed during its life $expect (diff $diff, tolerance $tol)"
        [ "${diff#-}" -le "$tol" ] ||
            fail "subscriber $s: elements + drops $((elements + drops)) vs $expect committed: off by $diff (> $tol)"
    done
}

check_restarts() {
    local s rc rec f1 r1 f2 r2 end lo lived late i k last rnew rsame
    for s in $(seq 1 $NSUB); do
        rc=$(cat "$TMP/sub.$s.rc")
        echo "restart: subscriber $s exited $rc: $(cat "$TMP/sub.$s.out")"
        [ "$rc" = 0 ] || fail "subscriber $s exited $rc: $(tail -3 "$TMP/sub.$s.err")"
        grep -q ' {"elements"' "$TMP/sub.$s.out" || { fail "subscriber $s: no summary"; continue; }
        rec=$(sed -n 's/.*"reconnects":\([0-9]*\).*/\1/p' "$TMP/sub.$s.out")
        # The restarts it lived through: kills of instances 0..LAST-1 between
        # its start (summary time less "seconds") and its end; all of them
        # when the schedule held. Exact, except that a kill in its last 2 s
        # may not have been followed yet (then one less is accepted).
        end=$(awk '/"elements"/ {print $1; exit}' "$TMP/sub.$s.out")
        lo=$((end - $(sed -n 's/.*"seconds":\([0-9.]*\).*/\1/p' "$TMP/sub.$s.out" |
            awk '{printf "%d", $1 * 1e6}')))
        lived=0 late=0
        for i in $(seq 0 $((LAST - 1))); do
            k=$(cat "$TMP/inst.$i.kill")
            [ "$k" -gt "$lo" ] && [ "$k" -lt "$end" ] && lived=$((lived + 1))
            [ "$k" -gt $((end - 2000000)) ] && [ "$k" -lt "$end" ] && late=1
        done
        # Reconnects to a new instance are the restarts followed; one to the
        # same instance means the link was taken for dead with the server up
        # (a process stalled past the 2 s peer timeout on a loaded machine):
        # counted in the summary, reported, not a restart.
        rnew=$(grep -c 'reconnected (a new server instance)' "$TMP/sub.$s.err")
        rsame=$(grep -c 'reconnected (the same server instance)' "$TMP/sub.$s.err")
        echo "restart: subscriber $s: $rec reconnects ($rnew to a new instance, $rsame to the same), lived through $lived restarts (of $RESTARTS)"
        [ "$rnew" = "$lived" ] || { [ "$late" = 1 ] && [ "$rnew" = $((lived - 1)) ]; } ||
            fail "subscriber $s: followed $rnew restarts, lived through $lived"
        [ "$rec" = $((rnew + rsame)) ] ||
            fail "subscriber $s: summary says $rec reconnects, its stderr $((rnew + rsame))"
        grep -q '"torn":0,"corrupt":0' "$TMP/sub.$s.out" || fail "subscriber $s: torn or corrupt frames"
    done
    check_follow
    check_counts
    last=$(ls "$TMP" | sed -n 's/^sample\.\([0-9]*\)$/\1/p' | sort -n | tail -1)
    if [ -e "$TMP/sample.10" ] && [ -n "$last" ] && [ "$last" -gt 10 ]; then
        for s in $(seq 1 $NSUB); do
            read -r f1 r1 < <(sed -n "${s}p" "$TMP/sample.10")
            read -r f2 r2 < <(sed -n "${s}p" "$TMP/sample.$last")
            [ -n "$r1" ] && [ -n "$r2" ] || { echo "restart: subscriber $s: gone before restart $last"; continue; }
            echo "restart: subscriber $s: fds $f1 -> $f2, VmRSS $r1 -> $r2 kB (restart 10 -> $last)"
            [ "$f2" -le $((f1 + FD_SLACK)) ] || fail "subscriber $s: fds grew $f1 -> $f2"
            [ "$r2" -le $((r1 + RSS_SLACK_KB)) ] || fail "subscriber $s: VmRSS grew $r1 -> $r2 kB"
        done
    elif [ "$RESTARTS" -gt 10 ]; then
        fail "restart: no fd/RSS samples"
    fi
}

rm -f "$TMP/latencies"
for phase in $PHASES; do
    case "$phase" in
    link | stop) fault_phase "$phase" ;;
    restart) restart_phase ;;
    *) fail "unknown phase '$phase'" ;;
    esac
done
if [ -e "$TMP/latencies" ]; then
    awk '{n++; s += $3; if ($3 > m) m = $3}
         END {printf "exit latency after the fault over %d clients: max %d ms, mean %.0f ms\n", n, m, s / n}' \
        "$TMP/latencies"
fi

[ "$FAILED" = 0 ] && echo "PASS"
exit "$FAILED"
