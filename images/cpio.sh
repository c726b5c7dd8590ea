#!/usr/bin/env bash
# Packs a directory into a deterministic newc cpio archive:
#
#   cpio.sh DIR ARCHIVE
#
# Paths sorted bytewise, every mtime set to 0, owner and group root,
# inode numbers renumbered (--reproducible), so the same tree gives the
# same bytes on any machine. The kernel unpacks newc; it is also the
# format `liken layer` writes, and archives can be concatenated.
set -euo pipefail
dir=${1:?usage: cpio.sh DIR ARCHIVE}
archive=${2:?usage: cpio.sh DIR ARCHIVE}
archive=$(realpath -m "$archive")
cd "$dir"
find . -mindepth 1 -exec touch -h -d @0 {} +
find . -mindepth 1 -printf '%P\0' | LC_ALL=C sort -z \
  | cpio --quiet --null -o -H newc --reproducible --owner=0:0 > "$archive"
