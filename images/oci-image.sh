#!/usr/bin/env bash
# Writes a minimal OCI image archive around one static binary:
#
#   oci-image.sh [--tzdata] BINARY NAME OUT.tar
#
# NAME is the image's full reference, registry host included
# (`liken.sh/liken-ops:2026.12.02-001`), because containerd names an
# imported image by it verbatim and a pod spec names the image the same
# way. The image has no base: one layer holding BINARY at
# /usr/bin/<its file name>, which is the entrypoint.
#
# --tzdata adds the tz database from Debian's tzdata package (fetched by
# deb.sh) at /usr/share/zoneinfo, with its copyright file: the operators
# read maintenance windows' time zones there (liken-ops/src/windows.rs).
# The image carries it rather than mount the host's, because the
# operators take no host paths and the database then travels with the
# release: every copy of an operator judges a window by the same rules.
# The right/ tree (leap-second zones, which liken refuses) and the
# posix/ duplicates are left out. This is what the
# operators ship as: the system image carries the archives in
# /usr/share/liken/images, and liken-init links them into k3s's airgap
# images directory, from which k3s imports them into containerd.
#
# OUT.tar is an OCI image layout (image-spec v1.0) packed as a tar:
#   oci-layout                 {"imageLayoutVersion":"1.0.0"}
#   index.json                 the one manifest, its platform, and its name:
#                              io.containerd.image.name = NAME (containerd's
#                              import names images by this annotation alone),
#                              org.opencontainers.image.ref.name = the tag
#                              (OCI's own convention, which skopeo and
#                              podman select by)
#   blobs/sha256/<digest>      the manifest, the config and the layer
# Every digest is the sha256 of the exact bytes stored. The layer is an
# uncompressed tar: the squashfs that carries it is zstd-compressed as a
# whole, so gzip here would only cost time at import.
#
# Deterministic: every owner 0:0, every time 0, entries sorted, JSON
# written with fixed key order and no build time, so the same BINARY and
# NAME give the same bytes. When OUT.tar already holds exactly these
# bytes it is left alone.
set -euo pipefail
umask 022

usage="usage: oci-image.sh [--tzdata] BINARY NAME OUT.tar (NAME like liken.sh/liken-ops:<version>)"
here=$(cd "$(dirname "$0")" && pwd)
tzdata=
if [ "${1:-}" = --tzdata ]; then
  tzdata=1
  shift
fi
binary=${1:?$usage}
name=${2:?$usage}
out=${3:?$usage}
[ $# -eq 3 ] || { echo "$usage" >&2; exit 2; }

for tool in file tar sha256sum; do
  command -v "$tool" >/dev/null || {
    echo "images: $tool is missing; run scripts/setup.sh (it installs file; tar and coreutils come with Debian)" >&2
    exit 1
  }
done

[ -f "$binary" ] && [ -x "$binary" ] || {
  echo "images: $binary is not an executable file; pass the path of the operator's static binary" >&2
  exit 1
}
kind=$(file -b "$binary")
case $kind in
  ELF\ 64-bit\ LSB*x86-64*) ;;
  *)
    echo "images: $binary is not an x86-64 ELF program ($kind); the image is for linux/amd64" >&2
    exit 1
    ;;
esac
case $kind in
  *"statically linked"* | *"static-pie linked"*) ;;
  *)
    echo "images: $binary is not static ($kind); an image with no base has no libraries to load." >&2
    echo "images: build it with RUSTFLAGS=\"-C target-feature=+crt-static\" --target x86_64-unknown-linux-gnu (the Makefile's STATIC)" >&2
    exit 1
    ;;
esac

prog=$(basename "$binary")
[[ $prog =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]] || {
  echo "images: the binary's file name '$prog' is not a plain program name (letters, digits, . _ -)" >&2
  exit 1
}

# NAME: host (with a dot, a port or localhost, so no tool prepends
# docker.io), path, tag. Only the characters a reference allows, which
# also keeps the JSON below free of anything to escape.
component='[a-z0-9]+([._-][a-z0-9]+)*'
host='([a-z0-9-]+\.)+[a-z0-9-]+(:[0-9]+)?|localhost(:[0-9]+)?|[a-z0-9-]+:[0-9]+'
if ! [[ $name =~ ^($host)/$component(/$component)*:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]]; then
  echo "images: image name '$name' is not a full reference host/path:tag (for example liken.sh/liken-ops:2026.12.02-001)" >&2
  exit 1
fi
tag=${name##*:}

out=$(realpath -m "$out")
mkdir -p "$(dirname "$out")"
work=$(mktemp -d "$(dirname "$out")/.oci-image.XXXXXX")
trap 'rm -rf "$work"' EXIT

# tar flags that leave nothing of the build machine in an archive.
det=(--sort=name --format=ustar --owner=0 --group=0 --numeric-owner --mtime=@0 --no-acls --no-xattrs --no-selinux)

digest() { sha256sum "$1" | cut -d' ' -f1; }
size() { stat -c %s "$1"; }
blobs=$work/layout/blobs/sha256
mkdir -p "$blobs"
# Moves a finished blob to its content address; prints the digest.
store() {
  local d
  d=$(digest "$1")
  mv "$1" "$blobs/$d"
  echo "$d"
}

# The layer: /usr/bin/<prog>, with its parent directories.
mkdir -p "$work/root/usr/bin"
cp "$binary" "$work/root/usr/bin/$prog"
chmod 0755 "$work/root/usr" "$work/root/usr/bin" "$work/root/usr/bin/$prog"
if [ -n "$tzdata" ]; then
  read -r _ tz_version tz_dir < <("$here/deb.sh" tzdata)
  [ -f "$tz_dir/root/usr/share/zoneinfo/Europe/Berlin" ] || {
    echo "images: tzdata $tz_version has no usr/share/zoneinfo/Europe/Berlin; is it Debian's tzdata?" >&2
    exit 1
  }
  mkdir -p "$work/root/usr/share/doc/tzdata"
  cp -a "$tz_dir/root/usr/share/zoneinfo" "$work/root/usr/share/zoneinfo"
  rm -rf "$work/root/usr/share/zoneinfo/right" "$work/root/usr/share/zoneinfo/posix"
  cp "$tz_dir/root/usr/share/doc/tzdata/copyright" "$work/root/usr/share/doc/tzdata/copyright"
  find "$work/root/usr/share" -type d -exec chmod 0755 {} +
  find "$work/root/usr/share" -type f -exec chmod 0644 {} +
  echo "images: adding tzdata $tz_version at /usr/share/zoneinfo" >&2
fi
tar -C "$work/root" "${det[@]}" -cf "$work/layer" usr
layer_size=$(size "$work/layer")
# Uncompressed, so the layer's digest is also its diff_id.
layer=$(store "$work/layer")

printf '%s' \
  '{"architecture":"amd64","os":"linux","created":"1970-01-01T00:00:00Z",' \
  '"config":{"Entrypoint":["/usr/bin/'"$prog"'"],' \
  '"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]},' \
  '"rootfs":{"type":"layers","diff_ids":["sha256:'"$layer"'"]}}' > "$work/config"
config_size=$(size "$work/config")
config=$(store "$work/config")

printf '%s' \
  '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",' \
  '"config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:'"$config"'","size":'"$config_size"'},' \
  '"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:'"$layer"'","size":'"$layer_size"'}]}' \
  > "$work/manifest"
manifest_size=$(size "$work/manifest")
manifest=$(store "$work/manifest")

printf '%s' '{"imageLayoutVersion":"1.0.0"}' > "$work/layout/oci-layout"
printf '%s' \
  '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[' \
  '{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:'"$manifest"'","size":'"$manifest_size"',' \
  '"platform":{"architecture":"amd64","os":"linux"},' \
  '"annotations":{"io.containerd.image.name":"'"$name"'","org.opencontainers.image.ref.name":"'"$tag"'"}}]}' \
  > "$work/layout/index.json"

chmod 0644 "$work/layout/oci-layout" "$work/layout/index.json" "$blobs"/*
chmod 0755 "$work/layout/blobs" "$blobs"
# oci-layout first: importers that stream the archive learn its format
# before the blobs.
mapfile -t names < <(cd "$work/layout" && find blobs/sha256 -type f | LC_ALL=C sort)
tar -C "$work/layout" "${det[@]}" --no-recursion -cf "$work/out.tar" \
  oci-layout index.json blobs blobs/sha256 "${names[@]}"

if cmp -s "$work/out.tar" "$out"; then
  echo "images: $out is up to date ($name)" >&2
else
  mv "$work/out.tar" "$out"
  echo "images: $out ($(size "$out") bytes, $name, manifest sha256:$manifest)" >&2
fi
