#!/usr/bin/env bash
# Every flag of nightshift-scheduler, nightshift-worker and each `nightshift`
# subcommand, as its --help lists it, against the list kept in flags.txt: a
# flag lost or renamed fails here, and so does a --help that stops telling
# the truth. Usage: flag_sets_test.sh BIN_DIR
set -euo pipefail
bin=${1:?usage: flag_sets_test.sh BIN_DIR}
want=$(dirname "$0")/flags.txt

# The long flags a help text lists: option lines start with spaces, then
# "-h, " or "--name", negations (", --no-name") and --help left out.
listed() {
  grep -oE '^ +(-[a-zA-Z], )?--[a-z0-9][a-z0-9-]*' |
    sed -E 's/^ +(-[a-zA-Z], )?--//' | grep -vx 'help' | sort -u | tr '\n' ' ' | sed 's/ $//'
}

got=$(mktemp)
trap 'rm -f "$got"' EXIT
{
  for b in nightshift-scheduler nightshift-worker; do
    echo "$b: $("$bin/$b" --help | listed)"
  done
  # The command table as `nightshift --help` prints it.
  commands=$("$bin/nightshift" --help | awk '/^commands:/ {on = 1; next} on && /^  [a-z]/ {print $1}')
  [[ -n $commands ]] || { echo "nightshift --help lists no commands" >&2; exit 1; }
  for c in $commands; do
    echo "nightshift $c: $("$bin/nightshift" "$c" --help | listed)"
  done
} >"$got"

if ! diff <(grep -v '^#' "$want") "$got"; then
  echo "FAIL: the flags the binaries' --help lists differ from $want (< kept, > now)" >&2
  exit 1
fi
echo "PASS: $(wc -l <"$got") binaries and subcommands list exactly the kept flags"
