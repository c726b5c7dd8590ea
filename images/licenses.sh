#!/usr/bin/env bash
# Writes licenses.md: the license terms of everything a release ships.
#
#   licenses.sh OUT.md [K3S]
#
# - the Rust crates compiled into the shipped binaries (liken-init in
#   boot.cpio, the liken CLI, and the operators in their images in the
#   system image): name, version and license expression,
#   from cargo's dependency graph for the static target, without
#   build-time-only crates (proc macros and their dependencies);
# - k3s, when the system image holds one (K3S);
# - every Debian package whose files the images hold, with its Debian
#   copyright file in full: the kernel and its modules, the system
#   image's packages (system-debs.sh), systemd-boot-efi and grub-pc-bin;
# - musl, the C library liken-init links statically (Rust's musl
#   target), with its MIT terms.
#
# Sorted and free of dates and paths, so the same inputs give the same
# bytes.
set -euo pipefail
umask 022

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
out=${1:?usage: licenses.sh OUT.md [K3S]}
k3s=${2:-}

kdir=$("$here/kernel.sh")
debs=$("$here/system-debs.sh")
read -r _ sdboot_version sdboot < <("$here/deb.sh" systemd-boot-efi)
grub_version=$(dpkg-query -W -f='${Version}' grub-pc-bin 2>/dev/null) || {
  echo "images: grub-pc-bin is not installed; run scripts/setup.sh" >&2
  exit 1
}

crates=$(cd "$root" && cargo tree -q -p liken-init -p liken-cli -p liken-ops -e normal,no-proc-macro \
    --target x86_64-unknown-linux-gnu --prefix none --format '{p}|{l}') || {
  echo "images: cargo tree failed; licenses.md lists the crates from it" >&2
  exit 1
}

# The musl that Rust's musl target links into liken-init: its version is
# the one string of that form in the target's libc.a.
musl_libc=$(rustc --print sysroot)/lib/rustlib/x86_64-unknown-linux-musl/lib/self-contained/libc.a
# (All of strings' output is read: grep -m1 would leave strings writing
# into a closed pipe, which pipefail counts as a failure.)
musl_version=$(strings "$musl_libc" 2>/dev/null | grep -xE '1\.[0-9]+\.[0-9]+') || {
  echo "images: no musl version in $musl_libc; run scripts/setup.sh (it adds the musl target)" >&2
  exit 1
}
musl_version=${musl_version%%$'\n'*}

tmp=$(mktemp "$out.XXXXXX")
trap 'rm -f "$tmp"' EXIT
{
  echo "# Licenses"
  echo
  echo "What a liken release ships and the terms it ships under. liken itself"
  echo "is Apache-2.0. The sections below list the Rust crates compiled into"
  echo "its binaries, then each Debian package whose files are in the images"
  echo "with that package's copyright file as Debian publishes it."
  echo
  echo "## Rust crates"
  echo
  echo "Compiled into liken-init (boot.cpio), the liken CLI and the operators (liken-ops)."
  echo
  echo "| crate | version | license |"
  echo "| --- | --- | --- |"
  # "name vX.Y.Z [(path)] [(*)]|license": drop cargo's markers, keep one
  # line per crate and version.
  while IFS='|' read -r pkg license; do
    [ -n "$pkg" ] || continue
    read -r name ver _ <<< "$pkg"
    echo "| $name | ${ver#v} | ${license:-see the crate license file} |"
  done <<< "$(sed 's/ (\*)$//' <<< "$crates")" | LC_ALL=C sort -u
  echo
  echo "## musl"
  echo
  echo "liken-init (boot.cpio) links musl $musl_version, the C library of Rust's"
  echo "x86_64-unknown-linux-musl target, statically. musl is under the MIT license:"
  echo
  echo '```text'
  echo "Copyright © 2005-2020 Rich Felker, et al."
  echo
  echo "Permission is hereby granted, free of charge, to any person obtaining"
  echo "a copy of this software and associated documentation files (the"
  echo "\"Software\"), to deal in the Software without restriction, including"
  echo "without limitation the rights to use, copy, modify, merge, publish,"
  echo "distribute, sublicense, and/or sell copies of the Software, and to"
  echo "permit persons to whom the Software is furnished to do so, subject to"
  echo "the following conditions:"
  echo
  echo "The above copyright notice and this permission notice shall be"
  echo "included in all copies or substantial portions of the Software."
  echo
  echo "THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND,"
  echo "EXPRESS OR IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF"
  echo "MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT."
  echo "IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY"
  echo "CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT,"
  echo "TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE"
  echo "SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE."
  echo '```'
  echo
  if [ -n "$k3s" ]; then
    echo "## k3s"
    echo
    echo "The system image holds k3s (sha256 $(sha256sum < "$k3s" | cut -d' ' -f1)) at /usr/bin/k3s,"
    echo "an upstream release of https://github.com/k3s-io/k3s under Apache-2.0; the"
    echo "components it bundles carry their own licenses, listed in that project."
    echo
  fi
  echo "## Debian packages"
  echo
  echo "| package | version | in |"
  echo "| --- | --- | --- |"
  {
    read -r kpkg kversion < "$kdir/package"
    echo "| $kpkg | $kversion | vmlinuz, boot.cpio, liken.sqfs (modules) |"
    while read -r pkg version _; do
      echo "| $pkg | $version | liken.sqfs |"
    done <<< "$debs"
    echo "| systemd-boot-efi | $sdboot_version | systemd-boot.efi |"
    echo "| grub-pc-bin | $grub_version | grub-boot.img, grub-core.img |"
  } | LC_ALL=C sort
  section() { # section PACKAGE VERSION COPYRIGHT-FILE
    echo
    echo "### $1 $2"
    echo
    echo '```text'
    cat "$3"
    echo '```'
  }
  {
    read -r kpkg kversion < "$kdir/package"
    printf '%s\t%s\t%s\n' "$kpkg" "$kversion" "$kdir/copyright"
    declare -A dir_of=()
    while read -r pkg _ dir; do dir_of[$pkg]=$dir; done <<< "$debs"
    while read -r pkg version dir; do
      doc=$dir/root/usr/share/doc/$pkg
      # Binary packages of one source may share its doc directory: theirs
      # is a symlink to the package that holds the copyright file.
      if [ -L "$doc" ]; then
        other=$(basename "$(readlink "$doc")")
        [ -n "${dir_of[$other]:-}" ] || { echo "images: $pkg's doc directory points at $other, which is not in the image" >&2; exit 1; }
        doc=${dir_of[$other]}/root/usr/share/doc/$other
      fi
      printf '%s\t%s\t%s\n' "$pkg" "$version" "$doc/copyright"
    done <<< "$debs"
    printf '%s\t%s\t%s\n' systemd-boot-efi "$sdboot_version" "$sdboot/root/usr/share/doc/systemd-boot-efi/copyright"
    printf '%s\t%s\t%s\n' grub-pc-bin "$grub_version" /usr/share/doc/grub-pc-bin/copyright
  } | LC_ALL=C sort | {
    # Packages built from one source ship one copyright file: print its
    # text once and point the others at it.
    declare -A first=()
    while IFS=$'\t' read -r pkg version file; do
      [ -f "$file" ] || { echo "images: $pkg ships no copyright file at $file" >&2; exit 1; }
      sum=$(sha256sum < "$file" | cut -d' ' -f1)
      if [ -n "${first[$sum]:-}" ]; then
        printf '\n### %s %s\n\nThe same copyright file as %s.\n' "$pkg" "$version" "${first[$sum]}"
      else
        first[$sum]=$pkg
        section "$pkg" "$version" "$file"
      fi
    done
  }
} > "$tmp"
cmp -s "$tmp" "$out" 2>/dev/null || { chmod 0644 "$tmp"; mv "$tmp" "$out"; }
echo "images: $out ($(stat -c %s "$out") bytes)" >&2
