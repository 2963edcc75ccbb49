#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# remora(1) renders without warnings; the bash completion loads and completes;
# and both know every command, stream subcommand and option that the
# command's own --help prints (so they stay in sync with the code).
#   test_man_completion.sh PATH/TO/remora SOURCE_DIR
set -euo pipefail
remora=$1
src=$2
man_page=$src/docs/man/remora.1
completion=$src/tools/completion/remora.bash
fail() { echo "FAIL: $*"; exit 1; }

command -v groff >/dev/null || { echo "SKIPPED: no groff (Debian: groff-base, scripts/deps.sh)"; exit 77; }

# 1. Renders, non-empty, no warnings: with man(1) where it exists, and with
#    groff itself at the strictest warning level.
if command -v man >/dev/null; then
  err=$(MANWIDTH=80 man --warnings -l "$man_page" 2>&1 >/dev/null) || fail "man -l failed: $err"
  [ -z "$err" ] || fail "man -l warns: $err"
  out=$(MANWIDTH=80 man -l "$man_page" 2>/dev/null)
  [ "$(wc -l <<<"$out")" -gt 100 ] || fail "man -l rendered only: $out"
fi
err=$(groff -man -Tutf8 -ww -z "$man_page" 2>&1) || fail "groff failed: $err"
[ -z "$err" ] || fail "groff warns: $err"
# Plain text, wide, unhyphenated: for the checks below.
text=$(groff -man -Tascii -rLL=250n -rHY=0 -P-cbou "$man_page" 2>/dev/null)
grep -q '^NAME' <<<"$text" || fail "no NAME section"
for sec in SYNOPSIS DESCRIPTION COMMANDS ENVIRONMENT "EXIT STATUS"; do
  grep -q "^$sec" <<<"$text" || fail "no $sec section"
done

# 2. The completion loads in a clean bash and registers for `remora`.
reg=$(bash --norc --noprofile -c "source '$completion' && complete -p remora") ||
  fail "sourcing the completion failed"
grep -q -- '-F _remora remora' <<<"$reg" || fail "complete -p remora: $reg"

# complete WORD... : what the completion offers after `remora WORD...`
complete_words() {
  bash --norc --noprofile -c '
    source "$1"; shift
    COMP_WORDS=(remora "$@"); COMP_CWORD=$#
    _remora
    printf "%s\n" "${COMPREPLY[@]}"' _ "$completion" "$@"
}

# 3. Every command of `remora --help` and every stream subcommand.
help=$("$remora" --help)
cmds=$(awk '/^Commands:/ {on = 1; next} on && /^$/ {exit} on && /^  [a-z]/ {print $1}' <<<"$help")
[ "$(wc -w <<<"$cmds")" -ge 9 ] || fail "could not read the commands from remora --help: $help"
subs=$("$remora" stream --help 2>&1 | awk '/^  (serve|read|clone|[a-z]+) +[a-z]/ {print $1}')
[ -n "$subs" ] || fail "could not read the stream subcommands"
offered=$(complete_words "")
offered_stream=$(complete_words stream "")
for c in $cmds; do
  grep -qE "^       $c( |$)" <<<"$text" || fail "command '$c' is not in the man page's COMMANDS"
  grep -qx -- "$c" <<<"$offered" || fail "command '$c' is not completed"
done
for s in $subs; do
  grep -qE "^       stream $s( |$)" <<<"$text" || fail "'stream $s' is not in the man page"
  grep -qx -- "$s" <<<"$offered_stream" || fail "'stream $s' is not completed"
done

# 4. Every option of every command's --help, in the man page and completed
#    for that command.
options_of() {
  { "$remora" "$@" --help 2>&1 || true; } |
    grep -oE '(^|[][ (|,])--?[a-zA-Z][a-zA-Z-]*' | sed -E 's/^[][ (|,]//' | sort -u
}
n=0
check_command() {
  local opts o
  opts=$(options_of "$@")
  offered=$(complete_words "$@" -)
  for o in $opts; do
    grep -qE -- "(^|[^a-zA-Z-])$o([^a-zA-Z-]|$)" <<<"$text" ||
      fail "option $o of 'remora $*' is not in the man page"
    grep -qx -- "$o" <<<"$offered" || fail "option $o of 'remora $*' is not completed"
    n=$((n + 1))
  done
}
for c in $cmds; do
  [ "$c" = stream ] && continue
  check_command "$c"
done
for s in $subs; do
  check_command stream "$s"
done
[ "$n" -ge 60 ] || fail "only $n options checked"

# 5. Every REMORA_* environment variable the code reads is documented.
vars=$(grep -rhoE '"REMORA_[A-Z0-9_]+"' "$src/src" "$src/tools" | tr -d '"' | sort -u)
[ -n "$vars" ] || fail "found no REMORA_* variables in the sources"
env_section=$(awk '/^ENVIRONMENT/ {on = 1; next} on && /^[A-Z]/ {exit} on' <<<"$text")
for v in $vars; do
  grep -qE "^       $v\$" <<<"$env_section" || fail "environment variable $v is not in the man page"
done
echo "man page and completion: $(wc -w <<<"$cmds") commands, $(wc -w <<<"$subs") stream subcommands, $n options, $(wc -w <<<"$vars") variables: ok"
