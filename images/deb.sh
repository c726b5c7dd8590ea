#!/usr/bin/env bash
# Fetches Debian packages and unpacks each into a cache directory keyed
# by package and version, without installing anything:
#
#   deb.sh PACKAGE...
#
# Prints one line per package, in the order given:
#
#   <package> <version> <directory>
#
# where <directory>/root is the package's files (`dpkg-deb -x`) and
# <directory>/package.deb the archive itself. The version is apt's
# candidate, so the cache follows the package lists: after an
# `apt-get update` brings a new version, the next build fetches it and
# the old directory stays until someone removes it.
#
# The cache root is LIKEN_IMAGES_CACHE (default ~/.cache/liken/images);
# packages go under debs/. A directory is complete once its `done` file
# exists, so an interrupted fetch is redone rather than used.
set -euo pipefail
umask 022

cache=${LIKEN_IMAGES_CACHE:-$HOME/.cache/liken/images}/debs
[ $# -gt 0 ] || { echo "usage: deb.sh PACKAGE..." >&2; exit 2; }
mkdir -p "$cache"
# As root, apt's download sandbox user cannot enter a private cache
# directory; it warns and downloads as root anyway. Say so up front.
sandbox=()
[ "$(id -u)" -ne 0 ] || sandbox=(-o APT::Sandbox::User=root)

# One apt-cache call for every candidate version: it prints a block per
# package, "<name>:" then "  Candidate: <version>".
declare -A candidate=()
current=
while IFS= read -r line; do
  case "$line" in
    [!\ ]*:) current=${line%:} ;;
    "  Candidate: "*) candidate[$current]=${line#  Candidate: } ;;
  esac
done < <(apt-cache policy "$@" 2>/dev/null)

for pkg in "$@"; do
  version=${candidate[$pkg]:-}
  if [ -z "$version" ] || [ "$version" = "(none)" ]; then
    echo "images: apt has no candidate for package $pkg; run 'apt-get update' (scripts/setup.sh does) and check the package name" >&2
    exit 1
  fi
  # Epochs hold a colon; keep directory names plain.
  dir=$cache/${pkg}_${version//:/%3a}
  if [ ! -f "$dir/done" ]; then
    # One fetch at a time, so two builds never replace a directory the
    # other is reading; the second finds the first's result.
    exec 8> "$cache/.fetch.lock"
    flock 8
  fi
  if [ ! -f "$dir/done" ]; then
    tmp=$(mktemp -d "$cache/.fetch.XXXXXX")
    # shellcheck disable=SC2064 # the path is fixed now, on purpose
    trap "rm -rf '$tmp'" EXIT
    echo "images: downloading $pkg $version" >&2
    (cd "$tmp" && apt-get download -q "${sandbox[@]}" "$pkg=$version" >&2) || {
      echo "images: 'apt-get download $pkg=$version' failed; check that Debian's package archive is reachable" >&2
      exit 1
    }
    mv "$tmp"/*.deb "$tmp/package.deb"
    dpkg-deb -x "$tmp/package.deb" "$tmp/root"
    touch "$tmp/done"
    rm -rf "$dir"
    mv "$tmp" "$dir"
    trap - EXIT
  fi
  echo "$pkg $version $dir"
done
