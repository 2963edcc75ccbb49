#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# `remora stream clone` onto a full file system leaves the existing image as
# it was and no temporary file behind.
#
# A 1 MiB tmpfs, mounted in a private mount namespace (unshare -m: nothing
# outside this test sees it, and it goes away with the namespace), holds a
# good 300 000-byte image; cloning a 2 MiB ring into it must fail (exit 1,
# "No space left on device"), the image must still be byte-identical, and the
# directory must hold nothing else. Then, with room, the same clone succeeds.
#
# Usage: test_clone_full_disk.sh PATH/TO/remora
# Exit: 0 pass, 1 fail, 77 skipped (not root, no unshare, mounts not allowed).
set -u

REMORA=${1:?usage: $0 PATH/TO/remora}
TMP=$(mktemp -d /tmp/remora-full-disk-XXXXXX)
SERVER_PID=
FAILED=0

skip() { echo "SKIPPED: $*"; exit 77; }

cleanup() {
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -KILL "$SERVER_PID" 2>/dev/null
        wait "$SERVER_PID" 2>/dev/null
    fi
    if [ "$FAILED" = 0 ]; then rm -rf "$TMP"; else echo "logs kept in $TMP"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

[ "$(id -u)" = 0 ] || skip "needs root to mount a tmpfs"
command -v unshare >/dev/null 2>&1 || skip "no 'unshare' command (util-linux)"
unshare -m --propagation private true 2>"$TMP/err" ||
    skip "cannot make a mount namespace: $(cat "$TMP/err")"
[ -x "$REMORA" ] || { echo "FAIL: $REMORA is not executable"; FAILED=1; exit 1; }

# A 2 MiB ring (512 x 4 KiB), full after a moment at 2000 Hz.
"$REMORA" stream serve --listen 127.0.0.1:0 --ring r=4Kx512 --rate 2000 \
    >"$TMP/server.out" 2>"$TMP/server.err" &
SERVER_PID=$!
for _ in $(seq 300); do
    grep -q '^listening ' "$TMP/server.out" 2>/dev/null && break
    sleep 0.1
done
ADDR=$(sed -n 's/^listening //p' "$TMP/server.out")
[ -n "$ADDR" ] || { echo "FAIL: the server did not start"; cat "$TMP/server.err"; FAILED=1; exit 1; }
sleep 0.3

head -c 300000 /dev/urandom >"$TMP/good.img"

# Everything that needs the small file system runs inside the namespace;
# its output is the verdict, one line per check.
unshare -m --propagation private bash -s "$REMORA" "$ADDR/r" "$TMP" >"$TMP/verdict" 2>&1 <<'EOF'
REMORA=$1 TARGET=$2 TMP=$3
MNT=$TMP/mnt
mkdir -p "$MNT"
mount -t tmpfs -o size=1M tmpfs "$MNT" || { echo "FAIL: cannot mount a tmpfs"; exit 0; }
cp "$TMP/good.img" "$MNT/image"
chmod 0600 "$MNT/image"

"$REMORA" stream clone "$TARGET" "$MNT/image" >"$TMP/clone.out" 2>"$TMP/clone.err"
rc=$?
[ "$rc" = 1 ] && echo "ok: exit 1" || echo "FAIL: clone onto a full disk exited $rc, expected 1"
grep -q 'No space left on device' "$TMP/clone.err" &&
    echo "ok: says no space" || echo "FAIL: no 'No space left on device' in: $(cat "$TMP/clone.err")"
cmp -s "$TMP/good.img" "$MNT/image" &&
    echo "ok: image intact" || echo "FAIL: the existing image was changed"
left=$(ls -A "$MNT")
[ "$left" = image ] && echo "ok: nothing left behind" || echo "FAIL: $MNT holds: $left"
[ "$(stat -c %a "$MNT/image")" = 600 ] || echo "FAIL: the image's mode changed"

# With room (a bigger tmpfs over the same place), the same clone replaces it.
umount "$MNT"
mount -t tmpfs -o size=8M tmpfs "$MNT" || { echo "FAIL: cannot mount a tmpfs"; exit 0; }
cp "$TMP/good.img" "$MNT/image"
chmod 0600 "$MNT/image"
"$REMORA" stream clone "$TARGET" "$MNT/image" >"$TMP/clone2.out" 2>"$TMP/clone2.err"
rc=$?
[ "$rc" = 0 ] && echo "ok: clone with room" ||
    echo "FAIL: clone with room exited $rc: $(cat "$TMP/clone2.err")"
[ "$(stat -c %s "$MNT/image")" -gt 2097152 ] &&
    echo "ok: replaced by the clone" || echo "FAIL: the image was not replaced"
[ "$(stat -c %a "$MNT/image")" = 600 ] && echo "ok: mode kept" || echo "FAIL: the image's mode changed"
[ "$(ls -A "$MNT")" = image ] || echo "FAIL: $MNT holds: $(ls -A "$MNT")"
umount "$MNT"
EOF

cat "$TMP/verdict"
if ! grep -q '^ok: ' "$TMP/verdict" || grep -q '^FAIL' "$TMP/verdict"; then
    FAILED=1
    echo "---- clone stderr ----"; cat "$TMP/clone.err" 2>/dev/null
    exit 1
fi
echo PASSED
