#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Bundle what building remora needs on a GPU machine that has no package
# access into .gpu-deps/ (ignored by git). Run it here, on a Debian machine
# with apt, in the project root (.gitignore already names /.gpu-deps/); the
# GPU machine then runs scripts/gpu-test.sh.
#   UCX headers (the machine has a UCX runtime, libucp.so.0, but no headers),
#   libsodium and cmocka (headers, libraries, .pc files), and pkgconf in case
#   the machine has no pkg-config; GLib (headers and runtime) for compat/kiro.
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
