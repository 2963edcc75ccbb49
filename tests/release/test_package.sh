#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The Debian packages: build them with cpack, check each one's contents and
# Depends with dpkg-deb, unpack them all into a throwaway root and run the
# packaged `remora` from there (no LD_LIBRARY_PATH), and build a program
# against the packaged development files.
#   test_package.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
B=$1
src=$2
fail() { echo "FAIL: $*"; exit 1; }
command -v dpkg-deb >/dev/null || { echo "SKIPPED: no dpkg-deb"; exit 77; }
unset LD_LIBRARY_PATH
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cpack -G DEB --config "$B/CPackConfig.cmake" -B "$tmp/out" >"$tmp/cpack.log" 2>&1 ||
  { cat "$tmp/cpack.log"; fail "cpack failed"; }
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$B/CMakeCache.txt")
[ -n "$version" ] || fail "no project version in $B/CMakeCache.txt"
kiro=0
grep -q 'CPACK_COMPONENTS_ALL .*kiro' "$B/CPackConfig.cmake" && kiro=1

deb() { # the .deb of package $1
  local f
  f=$(find "$tmp/out" -maxdepth 1 -name "${1}_${version}_*.deb")
  [ -n "$f" ] && [ "$(wc -l <<<"$f")" -eq 1 ] || fail "no single package $1 in: $(ls "$tmp/out")"
  printf '%s' "$f"
}
pkgs="libremora0 libremora-dev remora"
[ "$kiro" -eq 1 ] && pkgs="$pkgs libkiro0 libkiro-dev"
n=$(find "$tmp/out" -maxdepth 1 -name '*.deb' | wc -l)
[ "$n" -eq "$(wc -w <<<"$pkgs")" ] || fail "expected packages $pkgs, got: $(ls "$tmp/out")"

# contents PKG: the paths it installs, one a line, without the leading "."
contents() { dpkg-deb -c "$(deb "$1")" | awk '{print $6}' | sed 's|^\.||'; }
has() { # has PKG PATH-REGEX...
  local p=$1 c re
  shift
  c=$(contents "$p")
  for re in "$@"; do
    grep -qE "^$re\$" <<<"$c" || fail "package $p lacks $re; it holds:
$c"
  done
}
lacks() { # lacks PKG PATH-REGEX
  local c
  c=$(contents "$1")
  if grep -qE "$2" <<<"$c"; then fail "package $1 should not hold $2: $(grep -E "$2" <<<"$c")"; fi
}
depends() { # depends PKG REGEX...: each matches one entry of Depends
  local p=$1 d re
  shift
  d=$(dpkg-deb -f "$(deb "$p")" Depends | tr ',' '\n' | sed 's/^ *//')
  for re in "$@"; do
    grep -qE "^($re)\$" <<<"$d" || fail "package $p: no Depends entry like '$re' in:
$d"
  done
}

L='/usr/lib(/[a-z0-9_-]+-linux-gnu)?'
has libremora0 "$L/libremora\.so\.0" "$L/libremora\.so\.$version"
lacks libremora0 '/include/|\.a$|\.pc$|/bin/|libremora\.so$'
depends libremora0 'libc6 .*' 'libucx0 .*' 'libsodium23 .*'

has libremora-dev /usr/include/remora/remora.h "$L/libremora\.so" "$L/libremora\.a" \
    "$L/pkgconfig/remora\.pc" "$L/cmake/remora/remoraConfig\.cmake" \
    "$L/cmake/remora/remoraConfigVersion\.cmake" "$L/cmake/remora/remoraTargets\.cmake"
lacks libremora-dev 'libremora\.so\.0|/bin/'
depends libremora-dev "libremora0 \(= $version\)" 'libucx-dev' 'libsodium-dev' 'pkg-config'

has remora /usr/bin/remora /usr/share/man/man1/remora\.1 \
    /usr/share/bash-completion/completions/remora /usr/share/doc/remora/guide\.md
lacks remora 'libremora|/include/'
depends remora "libremora0 \(= $version\)" 'libc6 .*'

if [ "$kiro" -eq 1 ]; then
  has libkiro0 "$L/libkiro\.so\.0"
  lacks libkiro0 '/include/|\.pc$|libremora'
  depends libkiro0 "libremora0 \(= $version\)" 'libglib2\.0-0 .*'
  has libkiro-dev /usr/include/kiro/kiro-server\.h "$L/libkiro\.so" "$L/pkgconfig/kiro\.pc"
  depends libkiro-dev "libkiro0 \(= $version\)"
fi

# Every path in exactly one package, all under /usr.
all=$(for p in $pkgs; do contents "$p" | grep -v '/$' || true; done)
dup=$(sort <<<"$all" | uniq -d)
[ -z "$dup" ] || fail "paths in more than one package: $dup"
out=$(grep -v '^/usr/' <<<"$all" || true)
[ -z "$out" ] || fail "paths outside /usr: $out"
for p in $pkgs; do
  [ "$(dpkg-deb -f "$(deb "$p")" Package)" = "$p" ] || fail "$(deb "$p") is not named $p"
  [ "$(dpkg-deb -f "$(deb "$p")" Version)" = "$version" ] || fail "$p has version $(dpkg-deb -f "$(deb "$p")" Version)"
done

# Unpacked into a throwaway root, the command runs from there.
root=$tmp/root
for p in $pkgs; do dpkg-deb -x "$(deb "$p")" "$root"; done
v=$("$root/usr/bin/remora" --version) || fail "packaged remora --version failed"
[ "$v" = "remora $version" ] || fail "packaged remora --version: $v"
libs=$(ldd "$root/usr/bin/remora")
loaded=$(awk '$1 == "libremora.so.0" {print $3}' <<<"$libs")
[ -n "$loaded" ] && [[ "$(realpath "$loaded")" == "$(realpath "$root")"/usr/lib* ]] || fail "packaged remora does not load the packaged library: $libs"
info=$("$root/usr/bin/remora" info) || fail "packaged remora info failed: $info"
grep -q "^remora $version" <<<"$info" || fail "packaged remora info printed: $info"

# ... and the development package builds a program (pkg-config, relocated).
if command -v cc >/dev/null && command -v pkg-config >/dev/null; then
  pc=$(find "$root" -name remora.pc)
  export PKG_CONFIG_PATH=$(dirname "$pc")
  libdir=$(pkg-config --variable=libdir remora)
  # A sanitizer build's library needs programs built with the same flags.
  san=()
  undef=$(nm -D --undefined-only "$libdir/libremora.so.0")
  if grep -q __asan_ <<<"$undef"; then san=(-fsanitize=address,undefined); fi
  # shellcheck disable=SC2046
  cc "${san[@]}" -Wall -Werror -o "$tmp/hello" "$src/examples/hello_region.c" $(pkg-config --cflags --libs remora) \
     -Wl,-rpath,"$libdir"
  out=$("$tmp/hello") || fail "a program built against the packages failed: $out"
  grep -q 'hello from a remora region' <<<"$out" || fail "the program printed: $out"
fi
echo "packages $pkgs: ok"
