# SPDX-License-Identifier: BSD-3-Clause
# Sourced by the tests/netns scripts: two "hosts", network namespaces joined
# by a veth pair, private to this run (names carry the PID, the addresses
# exist only inside the two namespaces).
#
# netns_pair TAG NET: namespaces rm<TAG>-srv-PID and rm<TAG>-cli-PID in NS1
# and NS2, the veth ends in VETH1 (in NS1) and VETH2, addresses ADDR1 and
# ADDR2 in NET.X.0/30 (NET: two octets, e.g. 10.231), all links up. Where
# namespaces cannot be made (not root, no `ip`, not allowed) it calls
# skip (the script's own) with why; it needs TMP for error text.
# netns_pair_del: removes them (the veth pair goes with them); for the trap.
netns_pair() {
    local tag=$1 net=$2 id=$$
    NS1=rm$tag-srv-$id
    NS2=rm$tag-cli-$id
    VETH1=rm$tag$((id % 100000))a # interface names: at most 15 bytes
    VETH2=rm$tag$((id % 100000))b
    ADDR1=$net.$((id % 250 + 1)).1
    ADDR2=$net.$((id % 250 + 1)).2
    [ "$(id -u)" = 0 ] || skip "needs root to create network namespaces"
    command -v ip >/dev/null 2>&1 || skip "no 'ip' command (iproute2)"
    ip netns add "$NS1" 2>"$TMP/err" || skip "cannot create a network namespace: $(cat "$TMP/err")"
    ip netns add "$NS2" 2>"$TMP/err" || skip "cannot create a network namespace: $(cat "$TMP/err")"
    ip link add "$VETH1" type veth peer name "$VETH2" 2>"$TMP/err" ||
        skip "cannot create a veth pair: $(cat "$TMP/err")"
    ip link set "$VETH1" netns "$NS1" &&
        ip link set "$VETH2" netns "$NS2" &&
        ip -n "$NS1" addr add "$ADDR1/30" dev "$VETH1" &&
        ip -n "$NS2" addr add "$ADDR2/30" dev "$VETH2" &&
        ip -n "$NS1" link set lo up &&
        ip -n "$NS2" link set lo up &&
        ip -n "$NS1" link set "$VETH1" up &&
        ip -n "$NS2" link set "$VETH2" up ||
        { echo "FAIL: setting up the namespaces"; exit 1; }
}

netns_pair_del() {
    [ -n "${NS1:-}" ] && ip netns del "$NS1" 2>/dev/null
    [ -n "${NS2:-}" ] && ip netns del "$NS2" 2>/dev/null
    [ -n "${VETH1:-}" ] && ip link del "$VETH1" 2>/dev/null
    return 0
}
