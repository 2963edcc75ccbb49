#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# UCX with CUDA support for the GPU machine (issue 19), built from Debian's
# own UCX source package (the same 1.13.1 this machine's libucx-dev is).
#   scripts/gpu-ucx.sh fetch                 source into .gpu-deps/ucx-src
#   scripts/gpu-ucx.sh build [--cuda DIR] [--prefix DIR] [-j N]
#                                            configure, patch, build, install
#                                            into .gpu-deps/ucx-cuda (stripped)
#   scripts/gpu-ucx.sh env [--prefix DIR]    print the exports that use it
#   scripts/gpu-ucx.sh check                 the CUDA modules are there and load
#   scripts/gpu-ucx.sh all                   fetch + build
# fetch needs apt (here); build needs a CUDA toolkit (nvcc + headers; no GPU);
# the installed prefix is small enough to carry to the GPU machine as is
# (docs/gpu-ucx.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
deps=$root/.gpu-deps
src=$deps/ucx-src
prefix=$deps/ucx-cuda

# deb-src lines for the suites the system's own Debian sources name, in a
# temporary apt configuration (sources list + lists directory); the system's
# apt configuration and lists are not touched.
fetch() {
  command -v dpkg-source >/dev/null 2>&1 || {
    echo "gpu-ucx: installing dpkg-dev (dpkg-source)" >&2
    apt-get install -y --no-install-recommends dpkg-dev >/dev/null
  }
  local tmp; tmp=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'" RETURN
  mkdir -p "$tmp/lists/partial" "$tmp/archives/partial"
  local list=$tmp/sources.list
  # one-line format: "deb URI SUITE COMP..." -> "deb-src ..."
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    sed -n 's/^[[:space:]]*deb[[:space:]]\+\(.*debian.*\)$/deb-src \1/p' "$f" >>"$list"
  done
  # deb822 format (*.sources): one deb-src line per URI x suite
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk '
      function flush() {
        if (uris != "" && suites != "" && types ~ /deb/) {
          n = split(uris, u, " "); m = split(suites, s, " ")
          for (i = 1; i <= n; i++) for (j = 1; j <= m; j++) {
            if (u[i] !~ /debian/) continue
            opt = signed != "" ? "[signed-by=" signed "] " : ""
            print "deb-src " opt u[i] " " s[j] " " comps
          }
        }
        types = uris = suites = comps = signed = ""
      }
      /^[[:space:]]*#/ { next }
      /^[[:space:]]*$/ { flush(); next }
      { key = $1; sub(/:$/, "", key); $1 = ""; sub(/^ /, "") }
      key == "Types" { types = $0 } key == "URIs" { uris = $0 }
      key == "Suites" { suites = $0 } key == "Components" { comps = $0 }
      key == "Signed-By" { signed = $0 }
      END { flush() }' "$f" >>"$list"
  done
  [ -s "$list" ] || { echo "gpu-ucx: no Debian sources found in /etc/apt" >&2; return 1; }
  echo "gpu-ucx: temporary sources:" >&2; sed 's/^/  /' "$list" >&2
  local opts=(-o Dir::Etc::SourceList="$list" -o Dir::Etc::SourceParts=/dev/null
              -o Dir::State::Lists="$tmp/lists" -o Dir::Cache::Archives="$tmp/archives"
              -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=
              -o APT::Sandbox::User=root)
  apt-get "${opts[@]}" update >&2
  rm -rf "$src" "$deps/ucx-dl"
  mkdir -p "$deps/ucx-dl"
  # --download-only, then dpkg-source -x ourselves (applies debian/patches)
  (cd "$deps/ucx-dl" && apt-get "${opts[@]}" source --download-only ucx >&2)
  local dsc; dsc=$(ls "$deps"/ucx-dl/ucx_*.dsc | head -1)
  dpkg-source --no-check -x "$dsc" "$src" >&2
  echo "gpu-ucx: $(basename "$dsc" .dsc) unpacked in $src (Debian patches applied)" >&2
}

find_cuda() { # the toolkit nvcc belongs to
  local d
  for d in "${CUDA_HOME:-}" "${CUDA_PATH:-}"; do
    [ -n "$d" ] && [ -f "$d/include/cuda.h" ] && { echo "$d"; return; }
  done
  if command -v nvcc >/dev/null 2>&1; then
    d=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
    [ -f "$d/include/cuda.h" ] && { echo "$d"; return; }
  fi
  for d in /usr/local/cuda /usr/local/cuda-*; do
    [ -f "$d/include/cuda.h" ] && { echo "$d"; return; }
  done
  return 1
}

# nvml.h: UCX's CUDA check requires it (cuda_ipc asks NVML which GPUs an
# NVLink connects). Toolkits assembled from NVIDIA's pip wheels (this
# machine's) lack it; Debian's non-free libnvidia-ml-dev has it (CUDA 11.8's,
# and NVML's API is stable), downloaded, not installed, through the same kind
# of temporary apt configuration as fetch.
nvml_header() { # DEST_INCLUDE_DIR
  local dest=$1 tmp
  [ -f "$dest/nvml.h" ] && return
  tmp=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'" RETURN
  mkdir -p "$tmp/lists/partial" "$tmp/dl" "$dest"
  local suite
  suite=$(. /etc/os-release && echo "$VERSION_CODENAME")
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $suite non-free" >"$tmp/s.list"
  local opts=(-o Dir::Etc::SourceList="$tmp/s.list" -o Dir::Etc::SourceParts=/dev/null
              -o Dir::State::Lists="$tmp/lists" -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=
              -o APT::Sandbox::User=root)
  apt-get "${opts[@]}" update >/dev/null
  chmod 777 "$tmp/dl"
  (cd "$tmp/dl" && apt-get "${opts[@]}" download libnvidia-ml-dev >/dev/null)
  dpkg-deb --fsys-tarfile "$tmp"/dl/libnvidia-ml-dev_*.deb | tar -xO ./usr/include/nvml.h >"$dest/nvml.h"
}

# libnvidia-ml.so belongs to the driver, absent where there is no GPU (and
# the pip toolkit has no stub of it): a link-time stub with the entry points
# UCX 1.13 calls, soname libnvidia-ml.so.1, so that at run time the driver's
# library is the one loaded. Used only while linking; never installed.
nvml_stub() { # DIR
  local dir=$1
  [ -f "$dir/libnvidia-ml.so" ] && return
  mkdir -p "$dir"
  local f
  for f in nvmlInit_v2 nvmlInit nvmlShutdown nvmlErrorString nvmlDeviceGetHandleByIndex_v2 \
           nvmlDeviceGetFieldValues nvmlDeviceGetNvLinkRemotePciInfo_v2; do
    echo "int $f(void) { return 999; /* NVML_ERROR_UNKNOWN: a stub */ }"
  done >"$dir/nvml_stub.c"
  gcc -shared -fPIC -Wl,-soname,libnvidia-ml.so.1 -o "$dir/libnvidia-ml.so" "$dir/nvml_stub.c"
}

# Changes to UCX 1.13.1's source, each needed by this build and nothing more.
# Applied to the unpacked tree (idempotent: each checks before changing).
patch_src() {
  # 1. Build only the libraries, modules and tools (ucx_info, ucx_perftest):
  #    leave out the test apps, examples and language bindings, which nothing
  #    here uses and which need more than a CUDA toolkit to build.
  sed -i -e '/^[[:space:]]*bindings\/go \\$/d' -e '/^[[:space:]]*bindings\/java \\$/d' \
         -e '/^[[:space:]]*test\/apps \\$/d' -e '/^[[:space:]]*examples \\$/d' "$src/Makefile.am"
}

build() {
  local cuda="" jobs=2
  while [ $# -gt 0 ]; do
    case $1 in
      --cuda) cuda=$2; shift 2 ;;
      --prefix) prefix=$(realpath -m "$2"); shift 2 ;;
      -j) jobs=$2; shift 2 ;;
      *) echo "gpu-ucx build: unknown argument $1" >&2; exit 2 ;;
    esac
  done
  [ -d "$src" ] || { echo "gpu-ucx: no source in $src: run '$0 fetch' first" >&2; exit 1; }
  [ -n "$cuda" ] || cuda=$(find_cuda) || { echo "gpu-ucx: no CUDA toolkit found (--cuda DIR)" >&2; exit 1; }
  echo "gpu-ucx: CUDA toolkit $cuda ($("$cuda/bin/nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p'))" >&2
  for t in autoreconf automake libtoolize make; do
    command -v $t >/dev/null 2>&1 || {
      echo "gpu-ucx: installing the autotools and UCX's build dependencies" >&2
      apt-get install -y --no-install-recommends autoconf automake libtool make \
        libnuma-dev libibverbs-dev librdmacm-dev >/dev/null
      break
    }
  done
  local bdir=$deps/ucx-build extra=$deps/ucx-build-extra
  mkdir -p "$extra/include" "$extra/lib"
  [ -f "$cuda/include/nvml.h" ] || nvml_header "$extra/include"
  ls "$cuda"/lib64/stubs/libnvidia-ml.so "$cuda"/lib64/libnvidia-ml.so /usr/lib/x86_64-linux-gnu/libnvidia-ml.so \
     >/dev/null 2>&1 || nvml_stub "$extra/lib"
  patch_src
  (cd "$src" && ./autogen.sh >"$deps/ucx-autogen.log" 2>&1) ||
    { tail -20 "$deps/ucx-autogen.log" >&2; exit 1; }
  rm -rf "$bdir" "$prefix"
  mkdir -p "$bdir"
  local verbs=--without-verbs
  [ -f /usr/include/infiniband/verbs.h ] && verbs=--with-verbs
  # Release settings (as contrib/configure-release, but logging kept: UCX_LOG_LEVEL=debug
  # is how a failed GPU run gets explained); the NVML header and link stub
  # found through CPPFLAGS/LDFLAGS; ac_cv_prog_GITBIN=no: the source sits in
  # remora's git checkout, whose branch and commit UCX would report as its own.
  (cd "$bdir" && "$src/configure" --prefix="$prefix" --with-cuda="$cuda" \
      --without-go --without-java --disable-doxygen-doc --enable-mt \
      --disable-debug --disable-assertions --disable-params-check \
      --disable-static --without-rocm --without-gdrcopy --without-xpmem --without-ugni \
      --enable-cma --with-rdmacm "$verbs" \
      ac_cv_prog_GITBIN=no \
      CPPFLAGS="-I$extra/include" LDFLAGS="-L$extra/lib" \
      >"$deps/ucx-configure.log" 2>&1) ||
    { tail -30 "$deps/ucx-configure.log" >&2; echo "gpu-ucx: configure failed ($deps/ucx-configure.log)" >&2; exit 1; }
  grep -q '^#define HAVE_CUDA 1' "$bdir/config.h" ||
    { echo "gpu-ucx: configure did not enable CUDA ($deps/ucx-configure.log)" >&2; exit 1; }
  (cd "$bdir" && make -j"$jobs" >"$deps/ucx-make.log" 2>&1 && make install >>"$deps/ucx-make.log" 2>&1) ||
    { grep -E 'error|Error' "$deps/ucx-make.log" | head -30 >&2; echo "gpu-ucx: build failed ($deps/ucx-make.log)" >&2; exit 1; }
  slim
  check
}

# What the GPU machine needs of the install, and no more: libraries, modules,
# ucx_info and ucx_perftest, headers and .pc files; no libtool archives,
# static libraries, examples or docs; stripped. The CUDA runtime the modules
# link against (libcudart.so.13, 0.7 MiB) goes with them so that the prefix
# is whole wherever the toolkit's lib directory is not on the library path.
slim() {
  rm -rf "$prefix/share/doc" "$prefix/share/ucx/examples"
  find "$prefix" \( -name '*.la' -o -name '*.a' \) -delete
  find "$prefix/lib" "$prefix/bin" -type f \( -name '*.so*' -o -perm -u+x \) \
    -exec strip --strip-unneeded {} + 2>/dev/null || true
  local cuda cudart
  cuda=$(find_cuda || true)
  cudart=$(ls "$cuda"/lib64/libcudart.so.[0-9]* 2>/dev/null | head -1 || true)
  [ -n "$cudart" ] && cp -L "$cudart" "$prefix/lib/" && strip --strip-unneeded "$prefix/lib/$(basename "$cudart")"
  # the .pc files and ucx_perftest's config name the build's absolute prefix: make
  # the .pc files relative to where they are (the GPU machine's checkout path differs)
  sed -i 's|^prefix=.*|prefix=${pcfiledir}/../..|' "$prefix"/lib/pkgconfig/*.pc
  du -sh "$prefix" >&2
}

check() {
  local ok=0
  for m in libuct_cuda.so libucm_cuda.so libucx_perftest_cuda.so; do
    if [ -e "$prefix/lib/ucx/$m" ]; then echo "gpu-ucx: have lib/ucx/$m" >&2
    else echo "gpu-ucx: MISSING lib/ucx/$m" >&2; ok=1; fi
  done
  eval "$(env_lines)"
  "$prefix/bin/ucx_info" -v >&2 || ok=1
  "$prefix/bin/ucx_info" -v | grep -q -- '--with-cuda' || { echo "gpu-ucx: ucx_info -v lacks --with-cuda" >&2; ok=1; }
  # loads every module; on a machine without a GPU the cuda components are
  # listed with no resources (their md open finds no device)
  "$prefix/bin/ucx_info" -d >/dev/null || { echo "gpu-ucx: ucx_info -d failed" >&2; ok=1; }
  echo "gpu-ucx: components: $("$prefix/bin/ucx_info" -d | sed -n 's/^#[[:space:]]*Component: //p' | sort -u | tr '\n' ' ')" >&2
  return $ok
}

env_lines() {
  local lib=$prefix/lib
  echo "export LD_LIBRARY_PATH=$lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
  echo "export PKG_CONFIG_PATH=$lib/pkgconfig\${PKG_CONFIG_PATH:+:\$PKG_CONFIG_PATH}"
  echo "export LIBRARY_PATH=$lib\${LIBRARY_PATH:+:\$LIBRARY_PATH}"
  # modules are found next to libucs.so anyway; named so that a UCX_MODULE_DIR
  # set for another UCX (the system's 1.16) does not mix modules of two versions
  echo "export UCX_MODULE_DIR=$lib/ucx"
  echo "export PATH=$prefix/bin:\$PATH"
  cat <<'NOTE'
# CUDA memory with UCX 1.13 (docs/gpu-ucx.md):
# - UCX_PROTO_ENABLE: leave it unset (n). 1.13's new protocols are experimental;
#   its default ones carry CUDA memory (cuda_copy, cuda_ipc, rendezvous pipelines).
# - UCX_MEMTYPE_CACHE=n: needed by programs whose GPU allocations UCX's hooks do not
#   see (the cache takes unknown addresses for host memory); remora sets it itself
#   unless UCX_MEMTYPE_CACHE is set.
# - UCX_TLS: the default (all) includes cuda_copy and cuda_ipc; a list given by hand
#   must name them (e.g. UCX_TLS=tcp,cuda_copy) for UCX to move GPU memory.
NOTE
}

usage() { sed -n '3,14p' "$0" | sed 's/^# \{0,1\}//'; }

cmd=${1:-}; [ $# -gt 0 ] && shift
case $cmd in
  fetch) fetch ;;
  build) build "$@" ;;
  all) fetch; build "$@" ;;
  env)
    [ "${1:-}" = --prefix ] && prefix=$(realpath -m "$2")
    [ -d "$prefix/lib/ucx" ] || { echo "gpu-ucx: no UCX in $prefix (run '$0 build')" >&2; exit 1; }
    env_lines ;;
  check) check ;;
  *) usage; exit 2 ;;
esac
