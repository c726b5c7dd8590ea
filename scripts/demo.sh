#!/usr/bin/env bash
# `make demo`: liken's main job end to end, as far as it is built today.
# It writes a two-machine deployment with the workstation CLI, mints its
# identity, packs the deployment layer and prints an admin kubeconfig;
# then liken-demo (qemu-tests/src/bin/liken-demo.rs) writes a `liken
# stick` install stick from the newest release `make images` bundled,
# installs node-1 from it under QEMU with OVMF onto a blank 4 GiB disk
# (pulling the stick and pressing Enter when install mode asks), and
# boots the installed disk to liken-init's supervisor, printing the
# machine's `liken:` console lines as they arrive. The stick, the disk
# and the deployment live in a temporary directory, removed at the end;
# the console logs are kept under <cargo target dir>/qemu-logs/.
#
# usage: scripts/demo.sh <liken binary> <images dir> <liken-demo binary>
set -euo pipefail
liken=$1
images=$2
demo=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/liken-demo.XXXXXX")
trap 'rm -rf "$work"' EXIT

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

# The stick, the install under QEMU and the installed machine's boot;
# liken-demo stops QEMU itself, on success or on a missed deadline.
"$demo" "$liken" "$images" "$work/home" "$work"
