# shellcheck shell=bash
# What the test channels' builders share (qemu-tests/e2e-images.sh,
# qemu-tests/upstream-images.sh), sourced by both. Each test channel is
# a few fixed versions, each release assembled in a directory of its own
# under IMAGES_OUT and bundled from there with images/release.sh, signed
# by the test fleets' release key. These are test channels: a release
# whose bytes no longer match its inputs is removed and bundled again,
# which a channel people use must never do.
#
# The caller sets `out` (IMAGES_OUT), `here` (the repository) and
# `target` (liken-init's target triple), with CARGO_TARGET_DIR exported.

# The test fleets' release key, made once with `liken keygen` in
# IMAGES_OUT/e2e-release-key (outside every channel, so `liken serve`
# never serves the private key); the fleets' deployments trust its
# release.pub. Exports LIKEN_RELEASE_KEY, which release.sh signs with.
test_release_key() {
  local keydir=$out/e2e-release-key
  if [ ! -f "$keydir/release.key" ]; then
    rm -rf "$keydir"
    "$out/liken" keygen "$keydir" >&2
  fi
  export LIKEN_RELEASE_KEY=$keydir/release.key
}

# versioned_boot VERSION DIR: liken-init built with LIKEN_VERSION=VERSION,
# so its boot record names the release (a development init knows no
# release, and the machine operator says Blocked rather than guess
# whether it runs the Cluster's target), and its boot.cpio in DIR. The
# cargo profile is its own (release-init-e2e), so the development init
# `make images` builds is never rebuilt because of these; RUSTFLAGS are
# the caller's (the Makefile's STATIC_INIT). Rebuilt only when the
# development boot.cpio (which holds the development init) changed.
versioned_boot() {
  local v=$1 dir=$2 key
  key="$(sha256sum < "$out/boot.cpio" | cut -d' ' -f1) $v"
  if [ "$(cat "$dir/boot.key" 2>/dev/null)" != "$key" ] || [ ! -f "$dir/boot.cpio" ]; then
    echo "test channel: building liken-init $v (release-init-e2e profile) and its boot.cpio" >&2
    LIKEN_VERSION=$v cargo build -q --profile release-init-e2e --target "$target" -p liken-init
    "$here/images/build-boot.sh" "$CARGO_TARGET_DIR/$target/release-init-e2e/liken-init" "$dir"
    # build-boot.sh leaves the unpacked kernel for direct boots too; the
    # releases take vmlinuz.
    rm -f "$dir/vmlinux"
    echo "$key" > "$dir/boot.key"
  fi
}

# link_shared DIR: what every release shares with IMAGES_OUT (kernel,
# liken, loaders, licenses), linked into its assembly directory.
link_shared() {
  local dir=$1 f shared=(vmlinuz kernel-release liken systemd-boot.efi grub-boot.img grub-core.img licenses.md)
  [ -f "$out/microcode.cpio" ] && shared+=(microcode.cpio)
  for f in "${shared[@]}"; do ln -f "$out/$f" "$dir/$f"; done
}

# operator_images VERSION DIR BINARY...: an OCI image of each operator
# binary, tagged liken.sh/<binary name>:VERSION (the tag the release's
# manifests name), in DIR, each appended to the caller's `args` as
# build-system.sh's --image.
operator_images() {
  local v=$1 dir=$2 bin name
  shift 2
  for bin in "$@"; do
    name=$(basename "$bin")
    [ -x "$bin" ] || { echo "test channel: $bin is missing; run make images" >&2; exit 1; }
    "$here/images/oci-image.sh" --tzdata "$bin" "liken.sh/$name:$v" "$dir/$name.tar"
    args+=(--image "$dir/$name.tar")
  done
}

# stale DIR FROM: whether release directory DIR holds artifacts other
# than those in the assembly directory FROM (release.yaml aside). The
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

# release_into CHANNEL VERSION DIR: bundles the release assembled in DIR
# (its system image in DIR/system.squashfs) into CHANNEL as VERSION,
# replacing a stale one, signed by LIKEN_RELEASE_KEY.
release_into() {
  local channel=$1 v=$2 dir=$3
  # release.sh names the system image liken.sqfs in the release.
  ln -f "$dir/system.squashfs" "$dir/liken.sqfs"
  if stale "$channel/$v" "$dir"; then
    echo "test channel: $channel/$v is stale; bundling it again (a test channel)" >&2
    rm -rf "${channel:?}/$v"
  fi
  LIKEN_VERSION=$v "$here/images/release.sh" "$dir" "$channel" system.squashfs
}
