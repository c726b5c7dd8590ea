#!/usr/bin/env bash
# `make demo`: liken's main job as far as it is built today. It writes a
# two-machine deployment with the workstation CLI, mints its identity,
# packs the deployment layer, and boots the generic boot image plus that
# layer under QEMU until liken-init's supervisor is up, printing the
# machine's console as it goes. Everything happens in a temporary
# directory; nothing outside it is touched.
#
# usage: scripts/demo.sh <liken binary> <images dir>
set -euo pipefail
liken=$1
images=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/liken-demo.XXXXXX")
qemu_pid=
cleanup() {
  if [ -n "$qemu_pid" ]; then kill "$qemu_pid" 2>/dev/null || true; wait "$qemu_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "liken new: a cluster 'home' with a leader and a follower"
"$liken" new -name home -endpoint https://10.0.0.10:6443 \
  -machine node-1=leader -machine node-2=follower "$work/home"
ls -R "$work/home"

step "liken mint: the cluster's identity (keys 0600)"
"$liken" mint "$work/home/identity"
find "$work/home/identity" -type f -printf '%m %p\n' | sed "s|$work/||" | sort -k2

step "liken layer: the deployment layer (deterministic newc cpio)"
"$liken" layer "$work/home" "$work/home/identity" "$work/home.cpio"
cpio -t -H newc < "$work/home.cpio" 2>/dev/null
sha256sum "$work/home.cpio" | sed "s|$work/||"

step "liken kubeconfig: an admin credential for kubectl"
"$liken" kubeconfig "$work/home"

step "boot node-1 under QEMU (TCG): generic boot.cpio + the layer"
cat "$images/boot.cpio" "$work/home.cpio" > "$work/initrd.cpio"
console=$work/console.log
qemu-system-x86_64 -machine q35 -accel tcg -m 512 -smp 1 \
  -nodefaults -no-user-config -display none -no-reboot -net none \
  -serial "file:$console" \
  -kernel "$images/vmlinux" -initrd "$work/initrd.cpio" \
  -append "console=ttyS0 panic=-1 quiet liken.machine=node-1" 2>"$work/qemu.err" &
qemu_pid=$!
deadline=$((SECONDS + 120))
shown=0
while :; do
  if [ -f "$console" ]; then
    lines=$(wc -l < "$console")
    if [ "$lines" -gt "$shown" ]; then
      sed -n "$((shown + 1)),${lines}p" "$console" | grep '^liken' || true
      shown=$lines
    fi
    if grep -q '^liken: supervisor: ' "$console"; then break; fi
  fi
  if ! kill -0 "$qemu_pid" 2>/dev/null; then
    echo "demo: QEMU exited before the supervisor started; the console is above" >&2
    exit 1
  fi
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "demo: the supervisor did not start within 120 s; the console is above" >&2
    exit 1
  fi
  sleep 0.5
done

step "done"
echo "node-1 booted liken-init from the initramfs with its layer and reached the supervisor."
echo "This image carries no k3s (the build takes it from K3S_BINARY=, and system images,"
echo "installed disks and k3s seeding are not built yet), so there is nothing to supervise."
