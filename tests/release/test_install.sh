#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The installed tree is complete and relocatable: install into a temporary
# prefix, move it elsewhere, then build examples/hello_region.c against the
# moved prefix with pkg-config and with CMake's find_package(remora), run
# both, and run the moved bin/remora (--version, info) with no
# LD_LIBRARY_PATH.
#   test_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
B=$1
src=$2
fail() { echo "FAIL: $*"; exit 1; }
command -v pkg-config >/dev/null || { echo "SKIPPED: no pkg-config"; exit 77; }
command -v cc >/dev/null || { echo "SKIPPED: no C compiler"; exit 77; }
unset LD_LIBRARY_PATH
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cmake --install "$B" --prefix "$tmp/staged" >/dev/null
mv "$tmp/staged" "$tmp/moved"       # installed for one place, used from another
P=$tmp/moved

# What a user of the tree finds there.
for f in bin/remora include/remora/remora.h share/man/man1/remora.1 \
         share/bash-completion/completions/remora; do
  [ -e "$P/$f" ] || fail "$f is not installed"
done
pc=$(find "$P" -name remora.pc)
[ -n "$pc" ] || fail "remora.pc is not installed"
libdir=$(cd "$(dirname "$pc")/.." && pwd)
for f in libremora.so libremora.so.0 libremora.a cmake/remora/remoraConfig.cmake \
         cmake/remora/remoraConfigVersion.cmake cmake/remora/remoraTargets.cmake; do
  [ -e "$libdir/$f" ] || fail "lib/$f is not installed"
done
# Nothing installed names the prefix it was installed to.
if grep -rlF "$tmp/staged" "$P" >/dev/null; then
  fail "installed files name the install prefix: $(grep -rlF "$tmp/staged" "$P")"
fi
# ... nor the prefix it was configured for.
conf_prefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$B/CMakeCache.txt")
if grep -rlF "$conf_prefix/" "$libdir/pkgconfig" "$libdir/cmake" >/dev/null; then
  fail "installed .pc or CMake files name $conf_prefix: $(grep -rlF "$conf_prefix/" "$libdir/pkgconfig" "$libdir/cmake")"
fi
grep -q '^prefix=${pcfiledir}/' "$pc" || fail "remora.pc is not relocatable: $(head -1 "$pc")"
rpath=$(readelf -d "$P/bin/remora")
grep -qF 'ORIGIN/../' <<<"$rpath" || fail "bin/remora has no \$ORIGIN-relative RUNPATH: $rpath"

# A sanitizer build's library (ASan+UBSan, not linked to their runtimes
# itself) needs programs built with the same -fsanitize flags.
san=()
undef=$(nm -D --undefined-only "$libdir/libremora.so.0")
if grep -q __asan_ <<<"$undef"; then
  san=(-fsanitize=address,undefined)
fi

# pkg-config
export PKG_CONFIG_PATH=$(dirname "$pc")
[ "$(cd "$(pkg-config --variable=libdir remora)" && pwd -P)" = "$(cd "$libdir" && pwd -P)" ] ||
  fail "pkg-config's libdir $(pkg-config --variable=libdir remora) is not $libdir"
[ "$(pkg-config --modversion remora)" = "$("$P/bin/remora" --version | awk '{print $2}')" ] ||
  fail "remora.pc's version is not the library's"
# shellcheck disable=SC2046
cc "${san[@]}" -Wall -Werror -o "$tmp/hello_pc" "$src/examples/hello_region.c" $(pkg-config --cflags --libs remora) \
   -Wl,-rpath,"$(pkg-config --variable=libdir remora)"
out=$("$tmp/hello_pc") || fail "the pkg-config program failed: $out"
grep -q 'hello from a remora region' <<<"$out" || fail "the pkg-config program printed: $out"
echo "pkg-config build: ok"

# CMake find_package(remora)
mkdir -p "$tmp/cm"
cat >"$tmp/cm/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.20)
project(uses_remora LANGUAGES C)
find_package(remora 0.1 REQUIRED)
add_executable(hello_cmake "$src/examples/hello_region.c")
target_link_libraries(hello_cmake PRIVATE remora::remora)
CM
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S "$tmp/cm" -B "$tmp/cm/build" "${gen[@]}" -DCMAKE_PREFIX_PATH="$P" \
      -DCMAKE_C_FLAGS="${san[*]}" >"$tmp/cm.log" 2>&1 ||
  { cat "$tmp/cm.log"; fail "find_package(remora) failed"; }
grep -q "remora_DIR:PATH=$P/" "$tmp/cm/build/CMakeCache.txt" || fail "find_package found another remora"
cmake --build "$tmp/cm/build" >"$tmp/cm.log" 2>&1 || { cat "$tmp/cm.log"; fail "CMake build failed"; }
out=$("$tmp/cm/build/hello_cmake") || fail "the CMake program failed: $out"
grep -q 'hello from a remora region' <<<"$out" || fail "the CMake program printed: $out"
echo "find_package build: ok"

# The installed command, found through its RUNPATH alone.
v=$("$P/bin/remora" --version) || fail "remora --version failed"
[ "$v" = "remora $(pkg-config --modversion remora)" ] || fail "remora --version: $v"
libs=$(ldd "$P/bin/remora")
loaded=$(awk '$1 == "libremora.so.0" {print $3}' <<<"$libs")
[ -n "$loaded" ] && [ "$(realpath "$loaded")" = "$(realpath "$libdir/libremora.so.0")" ] ||
  fail "bin/remora does not load the moved prefix's libremora: $libs"
info=$("$P/bin/remora" info) || fail "remora info failed: $info"
grep -q "^remora" <<<"$info" || fail "remora info printed: $info"
echo "installed remora: $v: ok"
