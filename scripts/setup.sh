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
  zstd              # images/build-boot.sh compresses boot.cpio
  file              # images/build-boot.sh checks that liken-init is static
  grub-common       # grub-script-check and grub-editenv check boot/grub.cfg and grubenv (liken-api tests); grub-mkimage builds grub-core.img
  squashfs-tools    # images/build-system.sh packs liken.sqfs with mksquashfs; the images test lists it with unsquashfs
  binutils          # images/build-system.sh checks with readelf that every shared library the image's programs need is in it; `liken bundle -secureboot-key` adds a UKI's sections with objcopy, and its test reads them back with objdump
  e2fsprogs         # the images test reads the ext4 volume the image's own mke2fs formats (dumpe2fs)
  # liken-disk and `liken stick` tests check the images they write with
  # the standard tools (nothing here is used at run time).
  gdisk             # sgdisk -v / -p / -i check GPT tables
  dosfstools        # fsck.vfat -n checks FAT32 volumes
  mtools            # mdir / mtype / mlabel list and read FAT volumes without mounting
  grub-pc-bin       # boot.img and i386-pc modules for grub-mkimage (core.img tests, images/build-loaders.sh)
  cryptsetup-bin    # veritysetup verify checks the dm-verity trees liken-disk builds (liken-disk/tests/verity.rs)
  efitools          # cert-to-efi-sig-list and sign-efi-sig-list: the Secure Boot lists and .auth files `liken keygen -secureboot` writes must be their bytes (liken-cli/src/secureboot/tests.rs)
  sbsigntool        # sbsign signs systemd-boot, the kernel and `liken bundle -secureboot-key`'s unified kernel images with the fleet's db key; sbverify checks them (liken-cli/src/releases/bundle.rs, qemu-tests/tests/secureboot.rs, liken-cli/tests/media/stick.rs)
  python3-venv      # the venv virt-firmware is installed into (below)
  # qemu-tests/tests/slots.rs boots an installed disk it makes with sgdisk,
  # mkfs.vfat and mtools (above) under UEFI.
  ovmf              # UEFI firmware for QEMU: OVMF_CODE.fd and a per-test copy of OVMF_VARS.fd
  systemd-boot-efi  # systemd-bootx64.efi, used by the UEFI tests when IMAGES_OUT has no systemd-boot.efi; linuxx64.efi.stub, the stub `liken bundle -secureboot-key` builds unified kernel images on
  # qemu-tests/tests/oci.rs checks the operator image archives
  # images/oci-image.sh writes with tools that did not write them.
  skopeo            # reads an oci-archive: and copies it into a registry
  docker-registry   # a real registry, started by the test on loopback
  chrony            # chronyd serves NTP on loopback to init's SNTP client (liken-init/tests/chrony_dnsmasq.rs)
  dnsmasq-base      # dnsmasq answers init's DNS stub resolver on loopback (the same test)
  iproute2          # ip netns, tap devices and bridges for the QEMU network tests' own namespace (qemu-tests/tests/network.rs, which also runs dnsmasq's DHCP and RA there)
  prometheus        # promtool check metrics reads every exposition liken-kube serves (liken-kube/tests/exposition.rs)
  # The benchmarks' references (`make bench`; `make test` runs each once
  # at a tiny size) and the tests that fetch releases from a real web
  # server: each starts its own nginx on loopback with its own config.
  nginx             # the reference static file server (plain HTTP and https)
  wrk               # the HTTP load generator both servers are measured with
  python3           # arithmetic and free-port picking in scripts/bench/releases.sh
  openssh-client    # ssh-keygen reads the flux deploy key the cluster operator mints (liken-ops/tests/upkeep/key.rs)
  time              # GNU time: kubectl's peak RSS, the reference of the cluster operator's (liken-ops/benches/cluster.rs)
  # make testenv-node (testenv/build.sh node) builds runc with cgo and
  # its seccomp support, linked statically so it runs in a liken guest.
  libseccomp-dev    # libseccomp.a and seccomp.h, which runc's seccomp build tag links in
  pkgconf           # pkg-config: libseccomp-golang's cgo directive asks it for libseccomp's flags
  gcc               # the C compiler runc's cgo parts (nsenter, libseccomp-golang) need
  libc6-dev         # libc.a and the C headers for runc's static link
)
# No kubectl package: the tests run the kubectl testenv/build.sh builds
# from the control plane's own Kubernetes release (Debian 12's
# kubernetes-client is 1.20, too old to complete plugins).

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
  # Some of these packages would start system services on every
  # interface; the tests start their own on loopback. Keep maintainer
  # scripts from starting any service during the install (Debian's
  # policy-rc.d protocol: 101 means "not allowed").
  policy=/usr/sbin/policy-rc.d
  made_policy=
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy"
    chmod 755 "$policy"
    made_policy=1
  fi
  trap '[ -n "$made_policy" ] && rm -f "$policy"' EXIT
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
  [ -z "$made_policy" ] || rm -f "$policy"
  trap - EXIT
  # They also enable their service for the next boot (a registry on
  # port 5000, a web server on port 80, a Prometheus server on 9090, of
  # every interface, and chronyd steering this machine's clock from the
  # Internet); the tests need none of them, so they are disabled.
  for service in docker-registry nginx prometheus chrony; do
    if [[ " ${missing[*]} " == *" $service "* ]] && [ -d /run/systemd/system ]; then
      systemctl disable --now "$service.service" >/dev/null 2>&1 \
        || echo "setup: could not stop the $service service; stop it with: systemctl disable --now $service" >&2
    fi
  done
fi

# virt-fw-vars reads OVMF's variable store back after systemd-boot
# enrolled the fleet's Secure Boot keys (qemu-tests/tests/secureboot.rs).
# It is PyPI's virt-firmware, which Debian 12 does not package: installed
# once, pinned, into a venv in the cache, where the test looks for it
# first.
virt_firmware_version=26.10
virt_firmware=$HOME/.cache/liken/tools/virt-firmware-$virt_firmware_version
if [ ! -x "$virt_firmware/bin/virt-fw-vars" ]; then
  echo "setup: installing virt-firmware $virt_firmware_version from PyPI into $virt_firmware" >&2
  rm -rf "$virt_firmware"
  python3 -m venv "$virt_firmware"
  "$virt_firmware/bin/pip" install -q --disable-pip-version-check "virt-firmware==$virt_firmware_version" \
    || { rm -rf "$virt_firmware"; echo "setup: pip could not install virt-firmware $virt_firmware_version" >&2; exit 1; }
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

# liken-init is built for the musl target (the Makefile's INIT_TARGET):
# rustup fetches its standard library, with musl's C library, once.
init_target=x86_64-unknown-linux-musl
if ! rustup target list --installed 2>/dev/null | grep -qx "$init_target"; then
  command -v rustup >/dev/null || {
    echo "setup: liken-init needs Rust's $init_target target, and rustup is not on PATH to add it" >&2
    exit 1
  }
  echo "setup: adding Rust's $init_target target (liken-init links musl statically)" >&2
  rustup target add "$init_target" >&2
fi
