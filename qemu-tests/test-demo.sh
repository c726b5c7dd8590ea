#!/usr/bin/env bash
# `make test-demo`: the demo as a person (or a script) runs it.
#
#   1. `make demo </dev/null`: with no terminal it must print the
#      `get machines` table with node-1 Ready and what to try next, and
#      return, the fleet left running;
#   2. `make demo` again on a terminal (a pty from util-linux `script`):
#      it must open its shell, where `liken kubectl home get machines`,
#      typed in, prints node-1 Ready, and `exit` returns with the fleet
#      still running;
#   3. every "Try next" hint, taken from what step 1 printed (never
#      retyped here, so a hint that rots fails this test), run as
#      printed in the demo's directory after the printed
#      `cd <dir> && export PATH=...` line (the hints name the deployment
#      `home`, as typed in the demo's shell), each outcome read back
#      from the API:
#      - `get machines -w` runs in the background throughout and must
#        have shown node-1 UpdatePending, Updating and Ready;
#      - `liken request-reboot`: a new boot, Ready, same release, slot A;
#      - rebootPolicy Manual, `liken request-reboot`: UpdatePending with
#        a Reboot entry pending, still on the same boot 30 s later;
#        `liken approve-reboot`: then a new boot, Ready;
#      - rebootPolicy back to Auto: Auto, and Ready;
#      - the Cluster patched to the channel's next release: Ready on it,
#        in slot B, on a new boot;
#   4. `make demo-stop`, then nothing of the demo may be left: no process
#      in the daemon's session, none naming the demo's directory or its
#      control plane's, no pid file, no control-plane directory;
#   5. the failure path: `make demo` with the demo's test-only knob
#      LIKEN_DEMO_TEST_ONLY_UNHEALTHY=150 (node-1 installed from the test
#      channel's N+2, whose k3s stand-in exits at once, so no Node ever
#      registers; each wait gives up after 150 s) must exit non-zero,
#      print what it waited for, the machine's last console lines and
#      what to do, and leave nothing running (as in 4).
#
#   test-demo.sh DEMO_DIR
#
# Cost: about 11 minutes under TCG on two cores once `make e2e-images`
# has built the images (647 s measured: two installs from the stick,
# three reboots, one of them into the next release after writing it to
# slot B, the 150 s failing wait, two control plane starts), so `make
# test` does not run it. On any failure the demo
# is stopped before the script exits.
set -euo pipefail
dir=${1:?usage: test-demo.sh DEMO_DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
# Absolute, so the hints' `cd` line and this script name one directory.
dir=$(realpath -m "$dir")
out=$(mktemp)
pty=$(mktemp)
watch=$(mktemp)
fifo=$(mktemp -u)
began=$SECONDS
watch_pid=
console=
say() { printf '[test-demo %4ds] %s\n' $((SECONDS - began)) "$*"; }
fail() {
  echo "test-demo: FAILED: $*" >&2
  if [ -n "$console" ] && [ -f "$console" ]; then
    echo "--- node-1's last 40 console lines (all in $console):" >&2
    tail -n 40 "$console" >&2
  fi
  [ -z "$watch_pid" ] || kill "$watch_pid" 2>/dev/null || true
  make -s -C "$here" demo-stop DEMO_DIR="$dir" || true
  exit 1
}
trap 'rm -f "$out" "$out.ps" "$pty" "$watch" "$fifo"' EXIT

# Fails unless nothing of the demo whose daemon was pid $1 is left.
nothing_left() {
  local pid=$1 left
  [ ! -e "$dir/demo.pid" ] || fail "$dir/demo.pid is left"
  # ps first into a file, so the search does not find itself; a zombie
  # (an ended process its reaper has not collected yet) runs nothing.
  ps -eo pid=,sid=,stat=,args= | awk '$3 !~ /^Z/' > "$out.ps"
  left=$(awk -v sid="$pid" '$2 == sid' "$out.ps"
    grep -F -e "$dir/" -e "liken-testenv/$pid-" "$out.ps" | grep -v -e "test-demo.sh" || true)
  [ -z "$left" ] || fail "left running:
$left"
  if compgen -G "${TMPDIR:-/tmp}/liken-testenv/$pid-*" >/dev/null; then
    fail "the control plane's directory is left: $(echo "${TMPDIR:-/tmp}/liken-testenv/$pid-"*)"
  fi
}

# await WHAT SECONDS CHECK: runs the function CHECK every 5 s until it
# succeeds, saying every minute what it waits for and CHECK's last
# answer ($last); fails after SECONDS.
last=
await() {
  local what=$1 within=$2 check=$3 t0=$SECONDS said=$SECONDS
  say "waiting for $what (up to ${within} s)"
  until $check; do
    ((SECONDS - t0 <= within)) || fail "$what: not within ${within} s; last: $last"
    if ((SECONDS - said >= 60)); then
      say "still waiting for $what ($((SECONDS - t0)) s): $last"
      said=$SECONDS
    fi
    sleep 5
  done
  say "$what: done in $((SECONDS - t0)) s"
}

say "make demo </dev/null"
make -s demo DEMO_DIR="$dir" </dev/null 2>&1 | tee "$out" || fail "make demo failed"
grep -Eq '^node-1[[:space:]].*Ready' "$out" || fail "make demo printed no table with node-1 Ready"
grep -q 'make demo-stop' "$out" || fail "make demo printed no hint how to stop it"
[ -s "$dir/demo.pid" ] || fail "make demo returned but left no daemon"
pid=$(cat "$dir/demo.pid")
kill -0 "$pid" 2>/dev/null || fail "the demo's daemon ($pid) is not running after make demo returned"
console=$(sed -n "s/^The machine's console: //p" "$out")
[ -f "$console" ] || fail "make demo named no console log that exists (${console:-none})"
say "make demo returned; the fleet runs (daemon $pid):"
ps -s "$pid" -o pid=,args= | cut -c1-160

# 2. The interactive path: a terminal on standard input.
say "make demo on a terminal (script's pty): its shell, liken kubectl home get machines, exit"
mkfifo "$fifo"
script -qfec "make -s demo DEMO_DIR='$dir'" /dev/null <"$fifo" >"$pty" 2>&1 &
script_pid=$!
exec 3>"$fifo"
ready_lines() { grep -Ec '^node-1[[:space:]]+Ready' "$pty" || true; }
prompt() {
  last="$(tail -n 1 "$pty" | cut -c1-120)"
  grep -Fq '(liken demo) ' "$pty"
}
await "the demo's shell prompt" 600 prompt
before=$(ready_lines)
printf 'liken kubectl home get machines\n' >&3
typed() {
  last="$(tail -n 1 "$pty" | cut -c1-120)"
  (($(ready_lines) > before))
}
await "node-1 Ready from the command typed into the demo's shell" 60 typed
printf 'exit\n' >&3
exec 3>&-
for _ in $(seq 60); do kill -0 "$script_pid" 2>/dev/null || break; sleep 1; done
kill -0 "$script_pid" 2>/dev/null && fail "the demo's shell did not end on exit: $(tail -n 5 "$pty")"
wait "$script_pid" || fail "make demo on a terminal failed: $(tail -n 20 "$pty")"
sed -n '/^NAME/,$p' "$pty" | tr -d '\r' | tail -n 8
kill -0 "$pid" 2>/dev/null || fail "the fleet stopped when the demo's shell ended"
say "the shell showed node-1 Ready; exit left the fleet running"

# 3. The hints, as printed, in the demo's directory (from here on this
# script runs there, so make is given the checkout with -C).
export_line=$(sed -n 's/^  \(cd .* && export PATH=.*\)$/\1/p' "$out")
[ -n "$export_line" ] || fail "make demo printed no 'cd <dir> && export PATH=...' line for another shell"
say "$ $export_line"
eval "$export_line"
[ "$(pwd)" = "$dir" ] || fail "after '$export_line', the shell is in $(pwd), not $dir"
[ "$(command -v liken)" = "$dir/bin/liken" ] || fail "after '$export_line', liken is $(command -v liken)"
mapfile -t hints < <(grep -E '^  liken ' "$out" | sed 's/^  //')
patterns=(
  '^liken kubectl home get machines -w$'
  '^liken request-reboot home node-1$'
  '^liken kubectl home patch machine node-1 .*"rebootPolicy":"Manual"'
  '^liken request-reboot home node-1$'
  '^liken approve-reboot home node-1$'
  '^liken kubectl home patch machine node-1 .*"rebootPolicy":"Auto"'
  '^liken kubectl home patch cluster home --type json .*"/spec/version"'
)
((${#hints[@]} == ${#patterns[@]})) ||
  fail "make demo printed ${#hints[@]} commands to try, this test knows ${#patterns[@]}: ${hints[*]}"
for i in "${!patterns[@]}"; do
  [[ ${hints[$i]} =~ ${patterns[$i]} ]] || fail "hint $((i + 1)) is '${hints[$i]}'; expected /${patterns[$i]}/"
done
home=$dir/home
next=$(grep -o '"path":"/spec/version","value":"[^"]*"' <<<"${hints[6]}" | sed 's/.*"value":"//; s/"$//')
[ -n "$next" ] || fail "the upgrade hint names no version: ${hints[6]}"

# What the API says of node-1: phase, slot, version, boot time, on one
# line (jsonpath prints no newline, which read needs).
state() {
  liken kubectl "$home" get machine node-1 -o 'jsonpath={.status.phase} {.status.boot.slot} {.status.boot.version} {.status.boot.time}'
  echo
}
field() { liken kubectl "$home" get machine node-1 -o "jsonpath=$1"; }
read -r phase slot n boot < <(state)
[ -n "$boot" ] || fail "cannot read node-1 from the API: $phase $slot $n $boot"
[ "$phase $slot" = "Ready A" ] || fail "node-1 is $phase in slot $slot before the hints"
say "node-1: $phase on $n in slot $slot, booted $boot"
run() {
  say "\$ $1"
  eval "$1" 2>&1 | sed 's/^/    /' || fail "'$1' failed"
}
# A new boot than $boot, Ready on $1 in slot $2.
want_version= want_slot=
booted_again() {
  local p s v b
  read -r p s v b < <(state) || true
  last="$p $s $v $b"
  [ "$p" = Ready ] && [ "$b" != "$boot" ] && [ "$v" = "$want_version" ] && [ "$s" = "$want_slot" ]
}

say "\$ ${hints[0]} (in the background, to the end of the hints)"
bash -c "exec ${hints[0]}" >"$watch" 2>&1 &
watch_pid=$!

run "${hints[1]}"
want_version=$n want_slot=A
await "node-1 Ready on a new boot after request-reboot" 900 booted_again
read -r _ _ _ boot < <(state)

run "${hints[2]}"
[ "$(field '{.spec.rebootPolicy}')" = Manual ] || fail "node-1's rebootPolicy is not Manual"
run "${hints[3]}"
waiting() {
  local p s v b
  read -r p s v b < <(state) || true
  last="$p $s $v $b; pending $(field '{.status.pending[*].kind}')"
  [ "$p" = UpdatePending ] && [ "$b" = "$boot" ] && [ "$(field '{.status.pending[*].kind}')" = Reboot ]
}
await "node-1 UpdatePending with its reboot pending, not rebooted" 300 waiting
sleep 30
waiting || fail "node-1 did not keep waiting for approval: $last"
say "node-1 still waits after 30 s: $last"
run "${hints[4]}"
await "node-1 Ready on a new boot after approve-reboot" 900 booted_again
read -r _ _ _ boot < <(state)

run "${hints[5]}"
[ "$(field '{.spec.rebootPolicy}')" = Auto ] || fail "node-1's rebootPolicy is not Auto"
ready() {
  last="$(state || true)"
  [ "${last%% *}" = Ready ]
}
await "node-1 Ready with rebootPolicy Auto" 120 ready

run "${hints[6]}"
want_version=$next want_slot=B
await "node-1 Ready on $next in slot B" 1800 booted_again

kill "$watch_pid" 2>/dev/null || true
wait "$watch_pid" 2>/dev/null || true
watch_pid=
say "what '${hints[0]}' showed:"
sed 's/^/    /' "$watch"
for p in UpdatePending Updating Ready; do
  grep -Eq "^node-1[[:space:]]+$p[[:space:]]" "$watch" || fail "the watch never showed node-1 $p"
done
grep -Eq "^node-1[[:space:]]+Ready[[:space:]].*$next" "$watch" || fail "the watch never showed node-1 Ready on $next"
say "every hint did what it says"

say "make demo-stop"
make -s -C "$here" demo-stop DEMO_DIR="$dir" || fail "make demo-stop failed"
nothing_left "$pid"
say "nothing of the demo is left running"

# 5. The failure path.
say "make demo with LIKEN_DEMO_TEST_ONLY_UNHEALTHY=150 (no Node ever registers): it must fail"
if LIKEN_DEMO_TEST_ONLY_UNHEALTHY=150 make -s -C "$here" demo DEMO_DIR="$dir" </dev/null >"$out" 2>&1; then
  cat "$out"
  fail "make demo succeeded with a machine whose Node never registers"
fi
tail -n 60 "$out"
pid=$(sed -n "s/.*the demo's daemon runs as pid \([0-9]*\) .*/\1/p" "$out" | head -n 1)
[ -n "$pid" ] || fail "make demo's output names no daemon pid"
grep -q 'Node node-1 Ready (the node stand-in registers it): not within 150 s' "$out" ||
  fail "make demo did not say what it waited for"
sed -n '/^--- node-1 (last 40 console lines/,$p' "$out" |
  grep -q '^liken-standin-k3s: started as k3s server: this release is built never to become healthy' ||
  fail "make demo printed no console lines of node-1 (the stand-in's, saying why it fails)"
grep -q '^demo: failed before the machine was Ready' "$out" || fail "make demo did not say it failed"
grep -q 'everything the demo started is stopped; run make demo again' "$out" ||
  fail "make demo did not say what to do"
nothing_left "$pid"
say "the failure printed node-1's console and what to do, and left nothing running; passed"
