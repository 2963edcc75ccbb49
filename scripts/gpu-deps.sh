#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Bundle what building remora needs on a GPU machine that has no package
# access into .gpu-deps/ (ignored by git). Run it here, on a Debian machine
# with apt, in the project root (.gitignore already names /.gpu-deps/); the
# GPU machine then runs scripts/gpu-test.sh.
#   UCX headers (the machine has a UCX runtime, libucp.so.0, but no headers),
#   libsodium and cmocka (headers, libraries, .pc files), and pkgconf in case
#   the machine has no pkg-config; GLib (headers and runtime) for compat/kiro.
# With GPU_DEPS_PERF=1 also Linux's perf and the libraries it loads, in
# DEST/perf (about 30 MB, apart so that .gpu-deps/usr stays small to carry):
# DEST/perf/perf runs it, e.g. PERF=.gpu-deps/perf/perf bench/one-connection.sh.
set -euo pipefail
dest=${1:-.gpu-deps}
pkgs="libucx-dev ucx-utils libsodium-dev libsodium23 libcmocka-dev libcmocka0 pkgconf-bin libpkgconf3
      libglib2.0-dev libglib2.0-0 libffi-dev libffi8 libpcre2-dev libpcre2-8-0"
mkdir -p "$dest"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck disable=SC2086
(cd "$tmp" && apt-get download $pkgs >/dev/null 2>&1) ||
  { apt-get update >/dev/null && (cd "$tmp" && apt-get download $pkgs >/dev/null); }
for f in "$tmp"/*.deb; do dpkg -x "$f" "$dest"; done
# .pc files name /usr (some only in their Cflags/Libs); make them relative
# to where they are.
for pc in "$dest"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc; do
  sed -i -e 's|^prefix=.*|prefix=${pcfiledir}/../../..|' \
         -e 's|-I/usr/|-I${pcfiledir}/../../../|g' -e 's|-L/usr/|-L${pcfiledir}/../../../|g' "$pc"
done
# Only shared libraries are linked there; documentation is not needed.
find "$dest" -name '*.a' -delete
rm -rf "$dest"/usr/share/doc "$dest"/usr/share/man "$dest"/usr/share/gdb "$dest"/usr/share/locale
du -sh "$dest"

bundle_perf() { # DEST: this machine's perf (linux-perf), its libraries but the C library's, a wrapper
  command -v perf >/dev/null || apt-get install -y linux-perf >/dev/null
  local bin lib
  bin=$(readlink -f "$(command -v perf)")
  mkdir -p "$1/perf/lib"
  cp "$bin" "$1/perf/lib/perf.bin"
  ldd "$bin" | awk '/=> \// {print $3}' | while read -r lib; do
    case $lib in */libc.so.*|*/libm.so.*) ;; *) cp -L "$lib" "$1/perf/lib/" ;; esac
  done
  # shellcheck disable=SC2016 # the wrapper expands them when it runs
  printf '%s\n' '#!/bin/sh' 'd=$(dirname "$(readlink -f "$0")")' \
    'LD_LIBRARY_PATH="$d/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$d/lib/perf.bin" "$@"' >"$1/perf/perf"
  chmod +x "$1/perf/perf"
  du -sh "$1/perf"
}
if [ "${GPU_DEPS_PERF:-0}" = 1 ]; then bundle_perf "$dest"; fi
