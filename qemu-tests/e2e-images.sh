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
# - liken-init built with LIKEN_VERSION=<version>, so its boot record
#   names the release (a development init knows no release, and the
#   machine operator says Blocked rather than guess whether it runs the
#   Cluster's target), in a cargo profile of its own
#   (release-init-e2e), so the development init `make images` builds is
#   never rebuilt because of these; RUSTFLAGS are the Makefile's
#   STATIC_INIT. Its boot.cpio by images/build-boot.sh (modules and
#   kernel as the development one).
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
# Every release and channel.yaml is signed (release.sh with
# LIKEN_RELEASE_KEY) by the test fleets' release key, made once with
# `liken keygen` in IMAGES_OUT/e2e-release-key (outside the channel, so
# `liken serve` never serves the private key); the fleets' deployments
# trust its release.pub. channel.yaml is renewed whenever it would
# expire within a week, so a channel built long ago stays current.
#
# Cost: a release's init and boot.cpio are rebuilt only when the
# development boot.cpio (which holds the development init) changed; the
# system images are left alone by build-system.sh when their inputs
# are unchanged, and compressed at zstd level 3 (LIKEN_SQUASHFS_LEVEL)
# when built. The versions are fixed, and a release is immutable, so a
# release of this test channel whose bytes no longer match its inputs
# is removed and bundled again (never do that to a channel people use).
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
mkdir -p "$out/e2e" "$channel"
keydir=$out/e2e-release-key
if [ ! -f "$keydir/release.key" ]; then
  rm -rf "$keydir"
  "$out/liken" keygen "$keydir" >&2
fi
export LIKEN_RELEASE_KEY=$keydir/release.key
echo node > "$out/e2e/instruction-node"
echo unhealthy > "$out/e2e/instruction-unhealthy"

# What every release shares with IMAGES_OUT, linked into its directory.
shared=(vmlinuz kernel-release liken systemd-boot.efi grub-boot.img grub-core.img licenses.md)
[ -f "$out/microcode.cpio" ] && shared+=(microcode.cpio)

# Whether release directory $1 holds artifacts other than those in the
# assembly directory $2 (release.yaml aside): then it is stale. The
# release's liken.sqfs is the assembled image with bundle's dm-verity
# tree appended and the image's sha256 as the tree's salt (as
# images/release.sh judges it): it holds the image when it starts with
# it and release.yaml's salt is its digest.
stale() {
  local dir=$1 from=$2 f name
  [ -d "$dir" ] || return 1
  for f in "$dir"/*; do
    name=$(basename "$f")
    case $name in
      release.yaml | release.yaml.sig) continue ;;
      liken.sqfs)
        cmp -s -n "$(stat -c %s "$from/$name")" "$from/$name" "$f" || return 0
        grep -q "^  salt: $(sha256sum < "$from/$name" | cut -d' ' -f1)\$" "$dir/release.yaml" || return 0
        continue
        ;;
    esac
    cmp -s "$f" "$from/$name" || return 0
  done
  return 1
}

dev_boot=$(sha256sum < "$out/boot.cpio" | cut -d' ' -f1)
for i in "${!versions[@]}"; do
  v=${versions[$i]}
  dir=$out/e2e/$v
  mkdir -p "$dir"
  key="$dev_boot $v"
  if [ "$(cat "$dir/boot.key" 2>/dev/null)" != "$key" ] || [ ! -f "$dir/boot.cpio" ]; then
    echo "e2e-images: building liken-init $v (release-init-e2e profile) and its boot.cpio" >&2
    LIKEN_VERSION=$v cargo build -q --profile release-init-e2e --target "$target" -p liken-init
    "$here/images/build-boot.sh" "$CARGO_TARGET_DIR/$target/release-init-e2e/liken-init" "$dir"
    # build-boot.sh leaves the unpacked kernel for direct boots too; the
    # releases take vmlinuz.
    rm -f "$dir/vmlinux"
    echo "$key" > "$dir/boot.key"
  fi
  for f in "${shared[@]}"; do ln -f "$out/$f" "$dir/$f"; done

  args=()
  "$here/images/oci-image.sh" "$standin" "liken.sh/liken-standin-probe:$v" "$dir/liken-standin-probe.tar"
  args+=(--image "$dir/liken-standin-probe.tar")
  for bin in "$@"; do
    name=$(basename "$bin")
    [ -x "$bin" ] || { echo "e2e-images: $bin is missing; run make images" >&2; exit 1; }
    "$here/images/oci-image.sh" --tzdata "$bin" "liken.sh/$name:$v" "$dir/$name.tar"
    args+=(--image "$dir/$name.tar")
  done
  instruction=node
  if [ "$i" -eq 2 ]; then instruction=unhealthy; fi
  args+=(--file "$out/e2e/instruction-$instruction:/usr/share/liken-standin/instruction")
  LIKEN_VERSION=$v "$here/images/build-system.sh" "${args[@]}" "$dir/system.squashfs" "$standin"
  # release.sh names the system image liken.sqfs in the release.
  ln -f "$dir/system.squashfs" "$dir/liken.sqfs"
  if stale "$channel/$v" "$dir"; then
    echo "e2e-images: $channel/$v is stale; bundling it again (a test channel)" >&2
    rm -rf "${channel:?}/$v"
  fi
  LIKEN_VERSION=$v "$here/images/release.sh" "$dir" "$channel" system.squashfs
done
