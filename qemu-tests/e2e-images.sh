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
#   e2e-images.sh IMAGES_OUT [OPERATOR_BINARY...]
#
# IMAGES_OUT holds what `make qemu-images` built (the stand-in, the
# kernel, boot.cpio, liken, the loaders). Each release is assembled in
# IMAGES_OUT/e2e/<version>/ and bundled from there with release.sh:
#
# - liken-init built with LIKEN_VERSION=<version> and its boot.cpio
#   (test-channel.sh's versioned_boot, which says why).
# - the system image, with LIKEN_VERSION set, so its /etc/os-release
#   VERSION_ID, its manifests and the tags of its images name the
#   release; it carries as OCI archives in /usr/share/liken/images the
#   stand-in's probe workload (liken.sh/liken-standin-probe:<version>)
#   and one image per operator binary given (liken.sh/<binary
#   name>:<version>), and the stand-in's instruction in
#   /usr/share/liken-standin/instruction: `node` (the node stand-in:
#   qemu-tests/src/standin/node/), or `unhealthy` for N+2.
# - the other artifacts (kernel, liken, loaders, licenses) linked from
#   IMAGES_OUT.
#
# Every release and channel.yaml is signed by the test fleets' release
# key (test-channel.sh's test_release_key); channel.yaml is renewed
# whenever it would expire within a week, so a channel built long ago
# stays current.
#
# Cost: a release's init and boot.cpio are rebuilt only when the
# development boot.cpio changed; the system images are left alone by
# build-system.sh when their inputs are unchanged, and compressed at
# zstd level 3 (LIKEN_SQUASHFS_LEVEL) when built.
set -euo pipefail
out=${1:?usage: e2e-images.sh IMAGES_OUT [OPERATOR_BINARY...]}
shift
here=$(cd "$(dirname "$0")/.." && pwd)
channel=$out/channel-e2e
versions=(2026.01.01-001 2026.01.01-002 2026.01.01-003)
export LIKEN_SQUASHFS_LEVEL=${LIKEN_SQUASHFS_LEVEL:-3}
# The Makefile's INIT_TARGET (liken-init links musl statically).
target=${LIKEN_INIT_TARGET:-x86_64-unknown-linux-musl}
: "${CARGO_TARGET_DIR:?e2e-images: CARGO_TARGET_DIR is not set; run it through make e2e-images}"

standin=$out/liken-standin-k3s
for f in "$standin" "$out/boot.cpio"; do
  [ -e "$f" ] || { echo "e2e-images: $f is missing; run make qemu-images" >&2; exit 1; }
done
. "$here/qemu-tests/test-channel.sh"
mkdir -p "$out/e2e" "$channel"
test_release_key
echo node > "$out/e2e/instruction-node"
echo unhealthy > "$out/e2e/instruction-unhealthy"

for i in "${!versions[@]}"; do
  v=${versions[$i]}
  dir=$out/e2e/$v
  mkdir -p "$dir"
  versioned_boot "$v" "$dir"
  link_shared "$dir"

  args=()
  "$here/images/oci-image.sh" "$standin" "liken.sh/liken-standin-probe:$v" "$dir/liken-standin-probe.tar"
  args+=(--image "$dir/liken-standin-probe.tar")
  operator_images "$v" "$dir" "$@"
  instruction=node
  if [ "$i" -eq 2 ]; then instruction=unhealthy; fi
  args+=(--file "$out/e2e/instruction-$instruction:/usr/share/liken-standin/instruction")
  LIKEN_VERSION=$v "$here/images/build-system.sh" "${args[@]}" "$dir/system.squashfs" "$standin"
  release_into "$channel" "$v" "$dir"
done
