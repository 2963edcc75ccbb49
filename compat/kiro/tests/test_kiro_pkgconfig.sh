#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Install the tree into a temporary prefix and build a small KIRO program
# with nothing but `pkg-config --cflags --libs kiro`, in both include
# styles; run it; check that libkiro exports only kiro_* symbols.
#   test_kiro_pkgconfig.sh BUILD_DIR
set -euo pipefail
B=$1
command -v pkg-config >/dev/null || { echo "SKIPPED: no pkg-config"; exit 77; }
command -v cc >/dev/null || { echo "SKIPPED: no C compiler"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$B" --prefix "$tmp/prefix" >/dev/null
pc=$(find "$tmp/prefix" -name kiro.pc)
[ -n "$pc" ] || { echo "kiro.pc not installed"; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc")
libdir=$(pkg-config --variable=libdir kiro)
# relocatable: the .pc names the temp prefix without having been configured for it
grep -q -- "-I$tmp/prefix" <<<"$(pkg-config --cflags kiro)" || [ "$(cd "$libdir" && pwd -P)" = "$(cd "$tmp/prefix" && pwd -P)/$(basename "$libdir")" ]
test -f "$tmp/prefix/include/kiro/kiro-server.h"

cat >"$tmp/a.c" <<'C'
#include "kiro-server.h"
#include "kiro-client.h"
#include <kiro/kiro-trb.h>
#include <kiro/kiro-sb.h>
#include <stdio.h>
#include <stdlib.h>
int main (int argc, char **argv)
{
    KiroTrb *t = kiro_trb_new ();
    if (kiro_trb_reshape (t, 16, 4) != 0)
        return 1;
    KiroServer *s = kiro_server_new ();
    if (kiro_server_start (s, "127.0.0.1", argv[1], kiro_trb_get_raw_buffer (t), kiro_trb_get_raw_size (t)) != 0)
        return 2;
    KiroClient *c = kiro_client_new ();
    if (kiro_client_connect (c, "127.0.0.1", argv[1]) != 0 || kiro_client_sync (c) != 0)
        return 3;
    if (kiro_client_get_memory_size (c) != kiro_trb_get_raw_size (t))
        return 4;
    GTimer *timer = g_timer_new (); /* glib.h comes with the headers, as in KIRO */
    g_timer_destroy (timer);
    kiro_client_free (c);
    kiro_server_free (s);
    kiro_trb_free (t);
    puts ("pkg-config program: ok");
    return argc == 2 ? 0 : 5;
}
C
# shellcheck disable=SC2046
cc -Wall -Werror -o "$tmp/a" "$tmp/a.c" $(pkg-config --cflags --libs kiro)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# A sanitizer build's libraries need the ASan runtime loaded first; a plain
# program built with pkg-config does not link it.  (Capture ldd's output
# before matching: `ldd | grep -q` under pipefail fails whenever grep exits
# before ldd has finished writing.)
preload=
deps=$(LD_LIBRARY_PATH=$libdir ldd "$tmp/a")
if grep -q libasan <<<"$deps"; then
  preload=$(cc -print-file-name=libasan.so)
fi
LD_PRELOAD=$preload LD_LIBRARY_PATH=$libdir "$tmp/a" "$port"

# only kiro_* exported
bad=$(nm -D --defined-only "$libdir/libkiro.so.0" | awk '$2 != "A" {print $3}' | grep -v '^kiro_' || true)
[ -z "$bad" ] || { echo "libkiro exports non-kiro symbols: $bad"; exit 1; }
n=$(nm -D --defined-only "$libdir/libkiro.so.0" | awk '$2 == "T" {print $3}' | grep -c '^kiro_')
[ "$n" -eq 50 ] || { echo "expected 50 kiro_* functions, found $n"; exit 1; }
grep -q 'SONAME.*libkiro.so.0' <<<"$(readelf -d "$libdir/libkiro.so.0")"
echo "kiro pkg-config: ok"
