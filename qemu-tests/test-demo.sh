#!/usr/bin/env bash
# `make test-demo`: the demo as a person (or a script) runs it.
#
#   1. `make demo </dev/null`: with no terminal it must print the
#      `get machines` table with node-1 Ready and return, the fleet left
#      running;
#   2. `liken kubectl <dir>/home get machines` from this shell, with the
#      demo's bin directory on PATH, as the printed hints say: Ready;
#   3. `make demo-stop`, then nothing of the demo may be left: no process
#      in the daemon's session, none naming the demo's directory or its
#      control plane's, no pid file, no control-plane directory.
#
#   test-demo.sh DEMO_DIR
#
# Cost: about 4 minutes under TCG on two cores once `make e2e-images`
# has built the images (one install from the stick, one boot, the control
# plane's start), so `make test` does not run it. On any failure the demo
# is stopped before the script exits.
set -euo pipefail
dir=${1:?usage: test-demo.sh DEMO_DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
out=$(mktemp)
began=$SECONDS
say() { printf '[test-demo %4ds] %s\n' $((SECONDS - began)) "$*"; }
fail() {
  echo "test-demo: FAILED: $*" >&2
  make -s demo-stop DEMO_DIR="$dir" || true
  exit 1
}
trap 'rm -f "$out" "$out.ps"' EXIT

say "make demo </dev/null"
make -s demo DEMO_DIR="$dir" </dev/null 2>&1 | tee "$out" || fail "make demo failed"
grep -Eq '^node-1[[:space:]].*Ready' "$out" || fail "make demo printed no table with node-1 Ready"
grep -q 'make demo-stop' "$out" || fail "make demo printed no hint how to stop it"
[ -s "$dir/demo.pid" ] || fail "make demo returned but left no daemon"
pid=$(cat "$dir/demo.pid")
kill -0 "$pid" 2>/dev/null || fail "the demo's daemon ($pid) is not running after make demo returned"
say "make demo returned; the fleet runs (daemon $pid):"
ps -s "$pid" -o pid=,args= | cut -c1-160

say "liken kubectl $dir/home get machines (from a shell, as a person would)"
table=$(PATH="$dir/bin:$PATH" liken kubectl "$dir/home" get machines) ||
  fail "liken kubectl get machines failed"
echo "$table"
echo "$table" | grep -Eq '^node-1[[:space:]].*Ready' || fail "node-1 is not Ready from the shell"

say "make demo-stop"
make -s demo-stop DEMO_DIR="$dir" || fail "make demo-stop failed"
[ ! -e "$dir/demo.pid" ] || fail "make demo-stop left $dir/demo.pid"
# ps first into a file, so the search does not find itself.
ps -eo pid=,sid=,args= > "$out.ps"
left=$(awk -v sid="$pid" '$2 == sid' "$out.ps"
  grep -F -e "$dir/" -e "liken-testenv/$pid-" "$out.ps" | grep -v -e "test-demo.sh" || true)
[ -z "$left" ] || fail "left running after make demo-stop:
$left"
if compgen -G "${TMPDIR:-/tmp}/liken-testenv/$pid-*" >/dev/null; then
  fail "the control plane's directory is left: $(echo "${TMPDIR:-/tmp}/liken-testenv/$pid-"*)"
fi
say "nothing of the demo is left running; passed"
