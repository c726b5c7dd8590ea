#!/usr/bin/env bash
# Bundles the built images into a local channel with `liken bundle`:
#
#   release.sh IMAGES_OUT CHANNEL SYSTEM [SYSTEM...]
#
# IMAGES_OUT holds the inputs (vmlinuz, boot.cpio, liken, systemd-boot.efi,
# grub-boot.img, grub-core.img, licenses.md, and microcode.cpio when one
# was built); each SYSTEM is a system image's file name in it
# (liken.sqfs, or the tests' system-standin-*.squashfs). One release is
# bundled per SYSTEM, under successive versions, each with that system
# image and the same other files: the tests take two stand-in images
# that differ (each its own VERSION_ID), so they have a newer release,
# with other bytes, to write into slot B.
#
# The version is LIKEN_VERSION when set (one SYSTEM only). Otherwise it
# is today's date (UTC) and the next serial the channel has not used, as
# liken-api's Version wants: yyyy.mm.dd-nnn. Versions are immutable, so
# nothing is bundled when the channel's newest releases already hold
# exactly these files, in this order; a change to any input gives new
# versions.
#
# With LIKEN_RELEASE_KEY set to a release.key (`liken keygen`), every
# release is bundled `-sign`ed, and the channel is kept signed by that
# key: a release already in the channel that carries no signature by it
# (bundled before, or by another key) is signed with `liken sign`, and
# channel.yaml is signed again, which renews it, whenever its signature
# is not this key's over its bytes or it expires within a week, so a
# channel built weeks ago never reads as stopped.
set -euo pipefail

usage="usage: release.sh IMAGES_OUT CHANNEL SYSTEM [SYSTEM...]"
out=${1:?$usage}
channel=${2:?$usage}
shift 2
[ $# -ge 1 ] || { echo "$usage" >&2; exit 1; }
systems=("$@")
count=${#systems[@]}
liken=$out/liken

# Input paths in the order bundle takes them, the system image second
# (one per release, filled in by inputs_for), and the file name each
# gets in the release (liken-cli/src/releases/layout.rs).
common=("$out/vmlinuz" "" "$out/boot.cpio" "$liken" "$out/systemd-boot.efi"
        "$out/grub-boot.img" "$out/grub-core.img" "$out/licenses.md")
names=(vmlinuz liken.sqfs boot.cpio liken systemd-boot.efi grub-boot.img grub-core.img licenses.md)
flags=()
if [ -f "$out/microcode.cpio" ]; then
  flags=(-microcode "$out/microcode.cpio")
  common+=("$out/microcode.cpio")
  names+=(microcode.cpio)
fi
# inputs_for N: the inputs of the Nth release (from 0), in `inputs`.
inputs_for() {
  inputs=("${common[@]}")
  inputs[1]=$out/${systems[$1]}
}
for i in "${!systems[@]}"; do
  inputs_for "$i"
  for f in "${inputs[@]}"; do
    [ -f "$f" ] || { echo "images: $f is missing; run make images" >&2; exit 1; }
  done
done

components=("linux=$(cat "$out/kernel-release")")

# Whether release directory $1 holds exactly the inputs of release $2.
same() {
  local dir=$1 i
  inputs_for "$2"
  [ -f "$dir/release.yaml" ] || return 1
  for i in "${!inputs[@]}"; do
    if [ "$i" -eq 1 ]; then
      # bundle appends the dm-verity tree to the system image and takes
      # the image's sha256 as the tree's salt (liken-cli's bundle.rs):
      # the release holds this image when its file starts with it and
      # release.yaml's salt is its digest. One bundled before the tree
      # has no salt, and is bundled again.
      cmp -s -n "$(stat -c %s "${inputs[$i]}")" "${inputs[$i]}" "$dir/${names[$i]}" || return 1
      grep -q "^  salt: $(sha256sum < "${inputs[$i]}" | cut -d' ' -f1)\$" "$dir/release.yaml" || return 1
      continue
    fi
    cmp -s "${inputs[$i]}" "$dir/${names[$i]}" || return 1
  done
  # No artifact beyond these (a microcode.cpio that is gone since).
  [ "$(find "$dir" -mindepth 1 ! -name release.yaml ! -name release.yaml.sig | wc -l)" -eq "${#names[@]}" ]
}

key=${LIKEN_RELEASE_KEY:-}
key_id=
if [ -n "$key" ]; then
  pub=$(dirname "$key")/release.pub
  [ -f "$key" ] && [ -f "$pub" ] || { echo "images: LIKEN_RELEASE_KEY: $key or $pub is missing (liken keygen <dir>)" >&2; exit 1; }
  key_id=$(sed -n 's/^id: *//p' "$pub")
  flags+=(-sign "$key")
fi

# Whether file $1's detached signature is by the key, over its bytes.
signed_by_key() {
  local sig=$1.sig
  [ -f "$sig" ] || return 1
  [ "$(sed -n 's/^keyId: *//p' "$sig")" = "$key_id" ] || return 1
  [ "$(sed -n 's/^sha256: *//p' "$sig")" = "$(sha256sum < "$1" | cut -d' ' -f1)" ]
}

# Signs what the channel holds unsigned by the key, and renews
# channel.yaml when its signature is not the key's over its bytes or it
# expires within a week.
sign_channel() {
  [ -n "$key" ] || return 0
  local dir expires
  for dir in "$channel"/*/; do
    [ -f "$dir/release.yaml" ] || continue
    signed_by_key "$dir/release.yaml" || "$liken" sign -key "$key" "$dir/release.yaml" >&2
  done
  [ -f "$channel/channel.yaml" ] || return 0
  expires=$(sed -n 's/^expires: *//p' "$channel/channel.yaml")
  if ! signed_by_key "$channel/channel.yaml" || [ -z "$expires" ] ||
     [ "$(date -u -d "$expires" +%s)" -lt "$(( $(date -u +%s) + 7 * 86400 ))" ]; then
    "$liken" sign -key "$key" "$channel/channel.yaml" >&2
  fi
}

# One build at a time per channel: two would pick the same serial.
mkdir -p "$channel"
exec 9> "$channel/.release.lock"
flock 9

mapfile -t existing < <(find "$channel" -mindepth 1 -maxdepth 1 -type d -regextype posix-extended \
  -regex '.*/[0-9]{4}\.[0-9]{2}\.[0-9]{2}-[0-9]{3}' -printf '%f\n' 2>/dev/null | LC_ALL=C sort)

if [ -n "${LIKEN_VERSION:-}" ]; then
  [ "$count" -eq 1 ] || { echo "images: LIKEN_VERSION names one release; $channel takes $count" >&2; exit 1; }
  if same "$channel/$LIKEN_VERSION" 0; then
    echo "images: $channel/$LIKEN_VERSION is up to date" >&2
    sign_channel
    exit 0
  fi
  versions=("$LIKEN_VERSION")
else
  n=${#existing[@]}
  if [ "$n" -ge "$count" ]; then
    fresh=1
    i=0
    for v in "${existing[@]:n-count}"; do same "$channel/$v" "$i" || fresh=0; i=$((i + 1)); done
    if [ "$fresh" -eq 1 ]; then
      echo "images: $channel is up to date (${existing[*]:n-count})" >&2
      sign_channel
      exit 0
    fi
  fi
  today=$(date -u +%Y.%m.%d)
  serial=0
  for v in "${existing[@]}"; do
    [ "${v%-*}" = "$today" ] && serial=$((10#${v#*-}))
  done
  versions=()
  for _ in $(seq "$count"); do
    serial=$((serial + 1))
    [ "$serial" -le 999 ] || { echo "images: $channel has used every serial of $today; set LIKEN_VERSION" >&2; exit 1; }
    versions+=("$(printf '%s-%03d' "$today" "$serial")")
  done
fi

# Bundle prints its progress and the catalog entry; the build shows one
# line per release and keeps bundle's output for a failure.
previous=
[ ${#existing[@]} -eq 0 ] || previous=${existing[-1]}
for i in "${!versions[@]}"; do
  v=${versions[$i]}
  inputs_for "$i"
  log=$("$liken" bundle "${flags[@]}" "${inputs[@]:0:8}" "$channel" "$v" "${components[@]}" 2>&1) || {
    echo "$log" >&2
    echo "images: liken bundle into $channel failed" >&2
    exit 1
  }
  echo "images: released $v into $channel ($(grep -o 'digest: .*' <<< "$log"))" >&2
  # A build channel gains a release whenever any input changes, and
  # most files stay the same: share identical ones with the release
  # before as hard links (renamed into place, so the name never goes
  # missing), which keeps a day of rebuilds from filling the disk.
  if [ -n "$previous" ]; then
    for name in "${names[@]}"; do
      new=$channel/$v/$name old=$channel/$previous/$name
      if [ -f "$old" ] && [ ! "$new" -ef "$old" ] && cmp -s "$new" "$old"; then
        ln "$old" "$new.link" && mv -f "$new.link" "$new"
      fi
    done
  fi
  previous=$v
done

# A build channel is scratch, not a published one: keep the newest few
# releases (the tests use the newest two) and drop the rest, so months
# of rebuilds cannot fill the disk. channel.yaml names only the latest.
keep=$((count * 2 > 4 ? count * 2 : 4))
mapfile -t all < <(find "$channel" -mindepth 1 -maxdepth 1 -type d -regextype posix-extended \
  -regex '.*/[0-9]{4}\.[0-9]{2}\.[0-9]{2}-[0-9]{3}' -printf '%f\n' 2>/dev/null | LC_ALL=C sort)
if [ ${#all[@]} -gt "$keep" ]; then
  for v in "${all[@]:0:${#all[@]}-keep}"; do
    rm -rf -- "${channel:?}/$v"
    echo "images: pruned $v from $channel (build channels keep the newest $keep)" >&2
  done
fi
sign_channel
