#!/usr/bin/env bash
# Builds the bootloader artifacts of a release:
#
#   build-loaders.sh OUT_DIR
#
# OUT_DIR receives:
#   systemd-boot.efi  Debian's systemd-boot (systemd-boot-efi), the UEFI
#                     path: installed as EFI/BOOT/BOOTX64.EFI
#   grub-boot.img     GRUB's boot.img (grub-pc-bin), the 440 bytes of MBR
#                     code that load core.img on BIOS machines
#   grub-core.img     GRUB's core.img for i386-pc, written to the
#                     LIKEN-BIOS partition; its prefix is (,gpt1)/grub,
#                     the ESP of the disk it booted from, on both the
#                     installed and the stick layout
#
# systemd-boot is downloaded with `apt-get download` (deb.sh; nothing
# is installed). GRUB's images come from the grub-pc-bin the build
# machine has installed (scripts/setup.sh), because grub-mkimage must
# be the same GRUB version as the modules it packs, and apt keeps
# grub-common and grub-pc-bin at one version.
set -euo pipefail
umask 022

here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: build-loaders.sh OUT_DIR}
grub_dir=/usr/lib/grub/i386-pc

# What core.img must hold to read the ESP and run boot/'s grub.cfg
# (liken_api::bootloader::render_grub_cfg): the BIOS disk driver, GPT
# (and MBR) partition maps, FAT, the script engine and menu (normal),
# load_env/save_env (loadenv), [ and test (test), linux/initrd (linux),
# boot, echo for messages, search to find a disk by label, and serial
# plus terminal so a machine with only a serial console can be watched.
modules=(biosdisk part_gpt part_msdos fat ext2 normal configfile linux boot echo test
         loadenv search search_label serial terminal reboot halt)
# The BIOS boot partition is 1 MiB (the install layout's LIKEN-BIOS).
core_max=$((1024 * 1024))

command -v grub-mkimage >/dev/null || {
  echo "images: grub-mkimage is missing; run scripts/setup.sh (it installs grub-common and grub-pc-bin)" >&2
  exit 1
}
[ -f "$grub_dir/boot.img" ] || {
  echo "images: $grub_dir/boot.img is missing; run scripts/setup.sh (it installs grub-pc-bin)" >&2
  exit 1
}

mkdir -p "$out"
put() { # put SRC NAME: copy unless the output already has these bytes
  local t
  cmp -s "$1" "$out/$2" 2>/dev/null || { t=$(mktemp "$out/.$2.XXXXXX") && cp "$1" "$t" && mv "$t" "$out/$2"; }
  chmod 0644 "$out/$2"
}

read -r _ _ sdboot < <("$here/deb.sh" systemd-boot-efi)
put "$sdboot/root/usr/lib/systemd/boot/efi/systemd-bootx64.efi" systemd-boot.efi

put "$grub_dir/boot.img" grub-boot.img

tmp=$(mktemp "$out/.grub-core.XXXXXX")
trap 'rm -f "$tmp"' EXIT
grub-mkimage -d "$grub_dir" -O i386-pc -p '(,gpt1)/grub' -o "$tmp" "${modules[@]}"
size=$(stat -c %s "$tmp")
if [ "$size" -gt "$core_max" ]; then
  echo "images: grub-core.img is $size bytes, more than the $core_max-byte BIOS boot partition; drop modules from images/build-loaders.sh" >&2
  exit 1
fi
put "$tmp" grub-core.img
echo "images: $out/systemd-boot.efi ($(stat -c %s "$out/systemd-boot.efi") bytes), grub-boot.img ($(stat -c %s "$out/grub-boot.img") bytes), grub-core.img ($size bytes)" >&2
