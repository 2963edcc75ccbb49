#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The API reference: `cmake --build BUILD --target docs` runs Doxygen over
# include/remora/*.h without a warning, and every public function is in the
# HTML and in the man3 pages.
#   test_docs.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
B=$1
src=$2
fail() { echo "FAIL: $*"; exit 1; }
command -v doxygen >/dev/null || { echo "SKIPPED: no doxygen (Debian: doxygen)"; exit 77; }
grep -q '^DOXYGEN_EXECUTABLE:FILEPATH=/' "$B/CMakeCache.txt" ||
  { echo "SKIPPED: $B was configured without doxygen (re-run cmake)"; exit 77; }
api=$B/docs/api
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
log=$(cmake --build "$B" --target docs 2>&1) || fail "the docs target failed: $log"
[ -f "$api/html/index.html" ] || fail "no $api/html/index.html"
[ ! -s "$api/warnings.log" ] || fail "Doxygen warns: $(cat "$api/warnings.log")"
[ -f "$api/man/man3/remora.h.3" ] || fail "no man3 page of remora.h: $(ls "$api/man/man3")"

funcs=$(cat "$src"/include/remora/*.h | tr '\n' ' ' |
        grep -oE 'REMORA_API [^;(]*\(' | grep -oE 'remora_[a-z_0-9]+ *\($' | tr -d ' (' | sort -u)
[ "$(wc -w <<<"$funcs")" -ge 80 ] || fail "found only $(wc -w <<<"$funcs") public functions"
cat "$api"/html/*.html >"$tmp/html.txt"
cat "$api"/man/man3/*.3 >"$tmp/man3.txt"
missing_html=$(comm -23 <(printf '%s\n' $funcs) <(grep -owF -f <(printf '%s\n' $funcs) "$tmp/html.txt" | sort -u))
[ -z "$missing_html" ] || fail "not in the HTML reference: $missing_html"
missing_man=$(comm -23 <(printf '%s\n' $funcs) <(grep -owF -f <(printf '%s\n' $funcs) "$tmp/man3.txt" | sort -u))
[ -z "$missing_man" ] || fail "not in the man3 pages: $missing_man"
# The comments render: a documented call carries its text.
grep -q 'say hello and (if needed) authenticate' "$tmp/man3.txt" ||
  fail "remora_client_connect's comment is not rendered"
if command -v man >/dev/null; then
  out=$(MANWIDTH=80 man -l "$api/man/man3/remora_client.3" 2>&1) || fail "man -l remora_client.3 failed"
  grep -q 'remora_client_read' <<<"$out" || fail "remora_client.3 renders without remora_client_read"
fi
echo "API reference: $(wc -w <<<"$funcs") functions: ok"
