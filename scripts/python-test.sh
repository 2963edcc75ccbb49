#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Build the Python binding (python/) against BUILD_DIR's libremora with -Werror,
# install it into a virtual environment under BUILD_DIR, and run its pytest suite
# against in-process servers and `remora serve` processes of BUILD_DIR.
#   scripts/python-test.sh [BUILD_DIR] [pytest args...]     (default build)
# Offline: pip uses Debian's setuptools (--no-build-isolation --no-index).
# PYTHON picks the interpreter (default /usr/bin/python3, Debian's, which has
# python3-numpy and python3-pytest). Extra environment for the tests (e.g.
# LD_PRELOAD for a sanitized library) passes through. Exit status: pytest's.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
shift || true
py=${PYTHON:-/usr/bin/python3}
venv=$build/.venv-test

[ -x "$venv/bin/python" ] || "$py" -m venv --system-site-packages "$venv"
echo "== python binding: build and install into $venv (CFLAGS -Werror)"
# The build runs in python/build: start clean, so that a build against another
# libremora (build-asan) is never reused.
rm -rf "$root/python/build"
REMORA_BUILD_DIR=$build CFLAGS="-Werror ${CFLAGS:-}" \
  "$venv/bin/python" -m pip install -q --no-build-isolation --no-index --no-deps \
  --force-reinstall "$root/python"
echo "== python tests ($build)"
# From the build directory, so that the checkout's python/remora cannot shadow the install.
cd "$build"
REMORA_BIN=$build/tools/remora exec "$venv/bin/python" -m pytest -q -p no:cacheprovider \
  -rs --durations=5 "$root/python/tests" "$@"
