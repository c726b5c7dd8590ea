#!/usr/bin/env bash
# Builds the end-to-end tests' release channel, IMAGES_OUT/channel-e2e:
# three releases of the test system image (the node stand-in as k3s),
# N, N+1 and N+2, each its own:
#
#   2026.01.01-001  N: what the fleet is installed with
#   2026.01.01-002  N+1: the upgrade the rollout takes
#   2026.01.01-003  N+2: built never to become healthy (its stand-in's
#                   instruction is `unhealthy`, so its k3s fails)
#
# Each system image is built with LIKEN_VERSION set to its release's
# version, so its /etc/os-release VERSION_ID, its manifests and the tags
# of its operator images name it, and carries as OCI archives in
# /usr/share/liken/images: the stand-in's probe workload
# (liken.sh/liken-standin-probe:<version>) and one image per operator
# binary given (liken.sh/<binary name>:<version>); and the stand-in's
# instruction in /usr/share/liken-standin/instruction: `node` (the node
# stand-in: qemu-tests/src/standin/node/), or `unhealthy` for N+2.
#
#   e2e-images.sh IMAGES_OUT [OPERATOR_BINARY...]
#
# IMAGES_OUT holds what `make qemu-images` built (the stand-in, the
# kernel, boot.cpio, ...). The versions are fixed, and a release is
# immutable, so a release of this test channel whose bytes no longer
# match its inputs is removed and bundled again (never do that to a
# channel people use). The images are compressed at zstd level 3
# (LIKEN_SQUASHFS_LEVEL): three of them are built for every change of
# the stand-in.
set -euo pipefail
out=${1:?usage: e2e-images.sh IMAGES_OUT [OPERATOR_BINARY...]}
shift
here=$(cd "$(dirname "$0")/.." && pwd)
channel=$out/channel-e2e
versions=(2026.01.01-001 2026.01.01-002 2026.01.01-003)
export LIKEN_SQUASHFS_LEVEL=${LIKEN_SQUASHFS_LEVEL:-3}

standin=$out/liken-standin-k3s
[ -x "$standin" ] || { echo "e2e-images: $standin is missing; run make qemu-images" >&2; exit 1; }
mkdir -p "$out/e2e" "$channel"
echo node > "$out/e2e/instruction-node"
echo unhealthy > "$out/e2e/instruction-unhealthy"

# Whether release directory $1 holds artifacts other than these inputs
# (system image $2): then it is stale.
stale() {
  local dir=$1 system=$2 f name src
  [ -d "$dir" ] || return 1
  for f in "$dir"/*; do
    name=$(basename "$f")
    case $name in
      release.yaml) continue ;;
      liken.sqfs) src=$system ;;
      *) src=$out/$name ;;
    esac
    cmp -s "$f" "$src" || return 0
  done
  return 1
}

for i in "${!versions[@]}"; do
  v=${versions[$i]}
  dir=$out/e2e/$v
  mkdir -p "$dir"
  args=()
  "$here/images/oci-image.sh" "$standin" "liken.sh/liken-standin-probe:$v" "$dir/liken-standin-probe.tar"
  args+=(--image "$dir/liken-standin-probe.tar")
  for bin in "$@"; do
    name=$(basename "$bin")
    "$here/images/oci-image.sh" "$bin" "liken.sh/$name:$v" "$dir/$name.tar"
    args+=(--image "$dir/$name.tar")
  done
  instruction=node
  if [ "$i" -eq 2 ]; then instruction=unhealthy; fi
  args+=(--file "$out/e2e/instruction-$instruction:/usr/share/liken-standin/instruction")
  LIKEN_VERSION=$v "$here/images/build-system.sh" "${args[@]}" "$out/e2e/system-$v.squashfs" "$standin"
  if stale "$channel/$v" "$out/e2e/system-$v.squashfs"; then
    echo "e2e-images: $channel/$v is stale; bundling it again (a test channel)" >&2
    rm -rf "${channel:?}/$v"
  fi
  LIKEN_VERSION=$v "$here/images/release.sh" "$out" "$channel" "e2e/system-$v.squashfs"
done
