#!/usr/bin/env bash
# Writes the uncompressed kernel (an ELF vmlinux) held inside a Debian
# bzImage to stdout.
#
# Why: QEMU boots an ELF vmlinux through its PVH entry point directly,
# which skips the bzImage's real-mode setup and its decompressor; under
# TCG that saves seconds per boot (../shared/PLATFORM.md). The test boots
# use it; machines keep booting the bzImage through their bootloader.
#
# How: the bzImage carries its payload as one XZ stream somewhere after
# the setup code. Every offset where the XZ magic appears is a candidate;
# the first one that decompresses into an ELF image is the kernel (the
# same search the kernel tree's scripts/extract-vmlinux makes).
set -euo pipefail

image=${1:?usage: extract-vmlinux.sh BZIMAGE > vmlinux}
[ -r "$image" ] || { echo "extract-vmlinux: cannot read $image" >&2; exit 1; }

tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT

# The XZ stream header magic: FD '7zXZ' 00.
for offset in $(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$image" | cut -d: -f1); do
  # --single-stream stops at the end of the payload, so the bytes that
  # follow it in the bzImage are not read as a second, broken stream.
  # xz then stops reading early and tail dies of SIGPIPE, which is why
  # tail's status is ignored and only xz's and the ELF magic count.
  if { tail -c +"$((offset + 1))" "$image" || true; } | xz -dcq --single-stream > "$tmp" 2>/dev/null \
     && [ "$(head -c 4 "$tmp" | od -An -tx1 | tr -d ' \n')" = "7f454c46" ]; then
    cat "$tmp"
    exit 0
  fi
done
echo "extract-vmlinux: no XZ-compressed ELF kernel found in $image" >&2
exit 1
