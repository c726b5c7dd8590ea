#!/usr/bin/env bash
# Installs what `make test` needs on a fresh Debian 12 machine, and does
# nothing on one that has it: each package is checked with dpkg first, so
# a second run costs no apt-get update.
set -euo pipefail

# Debian packages the tests use, with the reason for each.
packages=(
  ca-certificates   # TLS roots for the Go module proxy and crates.io
  openssl           # `openssl verify` checks minted certificate chains
  curl              # Range requests against `liken serve`
  cpio              # `cpio -t` / `cpio -i` read the deployment layer `liken layer` writes
  # make images / qemu-tests (images/README.md). Debian's qemu-utils is
  # not needed and not installed: on some images it would replace a
  # newer preinstalled one (../shared/PLATFORM.md).
  qemu-system-x86   # qemu-tests boot the images under TCG
  kmod              # depmod indexes the kernel's module tree; modprobe lists dependencies
  xz-utils          # images/extract-vmlinux.sh unpacks the bzImage's payload
  file              # images/build-boot.sh checks that liken-init is static
  grub-common       # grub-script-check and grub-editenv check boot/grub.cfg and grubenv (liken-api tests)
)
# Real kubectl for the interop tests: Debian's kubernetes-client, unless
# the machine already has a kubectl (some images ship the Cloud SDK's,
# which owns /usr/bin/kubectl and conflicts with Debian's package).
command -v kubectl >/dev/null || packages+=(kubernetes-client)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing Debian packages: ${missing[*]}; run: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# make images downloads Debian's kernel with apt-get download, which
# needs the package lists even when nothing above was missing.
if ! apt-cache show linux-image-amd64 >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ]; then
    apt-get update -qq
  else
    echo "setup: apt knows no linux-image-amd64; run: sudo apt-get update" >&2
    exit 1
  fi
fi

for tool in cargo rustfmt cargo-clippy go; do
  command -v "$tool" >/dev/null || {
    echo "setup: $tool is not on PATH; install Rust (rustup, with rustfmt and clippy) and Go" >&2
    exit 1
  }
done
