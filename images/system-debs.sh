#!/usr/bin/env bash
# Lists the Debian packages whose files make the system image, fetched
# and unpacked into the cache (deb.sh):
#
#   system-debs.sh
#
# prints `<package> <version> <directory>` per package, sorted by name.
# The set is system-packages.txt plus each one's dependency closure
# (Depends and Pre-Depends; no Recommends or Suggests), and
# ca-certificates, which is taken for its certificate files alone: its
# own dependencies (openssl, debconf, perl) are what a package manager
# needs to regenerate the bundle, and the image carries the bundle
# already generated.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${LIKEN_IMAGES_CACHE:-$HOME/.cache/liken/images}

# Resolving the closure asks apt-cache twice, seconds on a busy machine,
# and each image build asks: the answer is kept until the package lists,
# the list above or these scripts change.
key=$(
  cat "$here/system-packages.txt" "$here/system-debs.sh" "$here/deb.sh"
  find /var/lib/apt/lists -maxdepth 1 -type f -printf '%f %s %T@\n' 2>/dev/null | LC_ALL=C sort
  find /etc/apt -type f -printf '%p %s %T@\n' 2>/dev/null | LC_ALL=C sort
  echo "$cache"
)
key=$(sha256sum <<< "$key" | cut -d' ' -f1)
memo=$cache/debs/system-debs.$key
if [ -f "$memo" ]; then
  complete=1
  while read -r _ _ dir; do [ -f "$dir/done" ] || complete=0; done < "$memo"
  if [ "$complete" -eq 1 ]; then
    cat "$memo"
    exit 0
  fi
fi

mapfile -t roots < <(sed 's/#.*//; s/[[:space:]]//g; /^$/d' "$here/system-packages.txt")

# --recurse prints every package reached, each on an unindented line;
# virtual packages are printed in <angle brackets> and are provided by
# a real package the closure also reaches.
closure=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances "${roots[@]}" 2>/dev/null \
  | grep -v '^[[:space:]<]' | LC_ALL=C sort -u) || true
for r in "${roots[@]}"; do
  grep -qx "$r" <<< "$closure" || {
    echo "images: apt knows no package $r (images/system-packages.txt); run 'apt-get update' (scripts/setup.sh does)" >&2
    exit 1
  }
done

mapfile -t all < <({ echo "$closure"; echo ca-certificates; } | LC_ALL=C sort -u)
list=$("$here/deb.sh" "${all[@]}")
mkdir -p "$cache/debs"
find "$cache/debs" -maxdepth 1 -name 'system-debs.*' ! -name "system-debs.$key*" -delete
printf '%s\n' "$list" > "$memo.$$" && mv "$memo.$$" "$memo"
printf '%s\n' "$list"
