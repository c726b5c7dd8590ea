#!/usr/bin/env bash
# Fetches Debian's kernel and lays it out for the image build, once per
# kernel version, in a cache directory:
#
#   ~/.cache/liken/images/<kernel release>/
#     vmlinuz                     the bzImage machines boot (EFI stub)
#     vmlinux                     the same kernel uncompressed, for QEMU's PVH entry
#     modules/lib/modules/<kver>  the module tree with depmod's indexes
#     kernel-release              the release string (6.1.0-57-amd64)
#     package                     the Debian package and version it came from
#     copyright                   the package's Debian copyright file
#
# Nothing is installed on the build machine: the package is downloaded
# with `apt-get download` and unpacked with `dpkg-deb -x`. Debian's
# package ships no modules.dep or modules.alias (its postinst runs
# depmod), so depmod runs here against the unpacked tree.
#
# Prints the cache directory on stdout. A second run with the same
# kernel does nothing. LIKEN_IMAGES_CACHE overrides the cache root.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${LIKEN_IMAGES_CACHE:-$HOME/.cache/liken/images}

# linux-image-amd64 is a metapackage; the real package is its dependency.
pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }')
if [ -z "$pkg" ]; then
  echo "images: apt knows no linux-image-amd64; run 'apt-get update' (scripts/setup.sh does) and retry" >&2
  exit 1
fi
kver=${pkg#linux-image-}
dir=$cache/$kver
if [ -f "$dir/kernel-release" ] && [ -f "$dir/copyright" ]; then
  echo "$dir"
  exit 0
fi

mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.kernel.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "images: downloading $pkg" >&2
(cd "$tmp" && apt-get download -q "$pkg" >&2) || {
  echo "images: 'apt-get download $pkg' failed; check that Debian's package archive is reachable" >&2
  exit 1
}
deb=$(ls "$tmp"/*.deb)
if [ -f "$dir/kernel-release" ]; then
  # A cache from before the copyright file was kept: add it alone,
  # leaving the tree other builds may be reading in place.
  dpkg-deb --fsys-tarfile "$deb" | tar -xO "./usr/share/doc/$pkg/copyright" > "$tmp/copyright"
  mv "$tmp/copyright" "$dir/copyright"
  echo "$dir"
  exit 0
fi
dpkg-deb -x "$deb" "$tmp/root"
version=$(dpkg-deb -f "$deb" Version)

mkdir -p "$tmp/out/modules/lib"
mv "$tmp/root/lib/modules" "$tmp/out/modules/lib/modules"
depmod -b "$tmp/out/modules" "$kver"
cp "$tmp/root/boot/vmlinuz-$kver" "$tmp/out/vmlinuz"
"$here/extract-vmlinux.sh" "$tmp/out/vmlinuz" > "$tmp/out/vmlinux"
echo "$pkg $version" > "$tmp/out/package"
# The package's license terms, which licenses.md gathers.
cp "$tmp/root/usr/share/doc/$pkg/copyright" "$tmp/out/copyright"
# Written last: its presence is what marks the directory complete.
echo "$kver" > "$tmp/out/kernel-release"

rm -rf "$dir"
mv "$tmp/out" "$dir"
echo "images: kernel $kver ready in $dir" >&2
echo "$dir"
