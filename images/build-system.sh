#!/usr/bin/env bash
# Builds the squashfs system image a liken slot holds:
#
#   build-system.sh [--image IMAGE.tar]... [--airgap ARCHIVE]... [--file SRC:DEST]... OUT.sqfs [K3S]
#
# K3S is the k3s binary to install as /usr/bin/k3s; without it the image
# has no k3s, and the script says so. (The QEMU tests pass their
# stand-in service here, into an image of its own; images built for
# people never hold it.) Each --image is an OCI image archive
# (oci-image.sh writes the operators' ones) to install in
# /usr/share/liken/images under its own file name. Each --airgap is an
# archive of images for k3s itself (k3s's release asset
# k3s-airgap-images-<arch>.tar.zst holds pause, coredns, local-path,
# metrics-server, traefik), installed there too: init links every file
# there that k3s imports into k3s's agent/images directory, so k3s starts
# its own pods without reaching a registry. The Makefile passes
# K3S_AIRGAP_IMAGES= here.
# Each --file adds the file SRC at the absolute path DEST (0644): the
# QEMU tests tell their stand-in what to be in their own images this way
# (/usr/share/liken-standin/instruction); images built for people take
# none.
#
# The tree, root-owned and /usr-merged like Debian 12's:
#   /bin /sbin /lib /lib64   symlinks to usr/bin, usr/sbin, usr/lib, usr/lib64
#   /usr/lib/modules/<kver>  the kernel's whole module tree with depmod indexes
#   /usr/...                 the files of the packages system-debs.sh lists
#                            (iptables, conntrack, mount, e2fsprogs, kmod, glibc
#                            and the libraries they link), docs pruned
#   /usr/sbin/iptables ...   the nft variants, as Debian's alternatives pick them
#   /etc/ssl/certs/ca-certificates.crt  Mozilla's roots from ca-certificates
#   /usr/share/liken/manifests  images/manifests (the CRDs and the
#                            operators', @LIKEN_VERSION@ replaced by the
#                            release's version), which init gives k3s
#                            to auto-deploy on leaders
#   /usr/share/liken/features   images/features: each feature's manifests,
#                            which init gives k3s only while the Cluster
#                            declares that feature
#   /usr/share/liken/images  the --image and --airgap archives, which init
#                            links into k3s's airgap images directory
#                            (absent without)
#   /etc/os-release, passwd, group, hosts, nsswitch.conf, mtab
#   /etc/resolv.conf -> /run/resolv.conf, /etc/rancher -> /run/rancher
#                            (/etc is read-only; init writes both under /run)
#   /etc/machine-id -> /var/lib/liken/machine-id  (init writes it on the
#                            data partition on the first boot)
#   /proc /sys /dev /run /var /tmp   empty mount points
#
# The image is deterministic (every owner root, every time 0, no
# xattrs): the same inputs give the same bytes. Its inputs are written
# beside it in OUT.inputs; when they match the last build, the image is
# left as it is.
set -euo pipefail
umask 022

here=$(cd "$(dirname "$0")" && pwd)
images=()
airgap=()
files=()
while [ $# -gt 0 ]; do
  case "$1" in
    --image) images+=("$(realpath -m "${2:?--image needs an OCI image archive}")"); shift 2 ;;
    --airgap) airgap+=("$(realpath -m "${2:?--airgap needs an image archive}")"); shift 2 ;;
    --file)
      spec=${2:?--file needs SRC:DEST}
      [[ $spec == *:/* && -f ${spec%%:*} ]] || {
        echo "images: --file $spec is not SRC:DEST with SRC a file and DEST an absolute path" >&2
        exit 1
      }
      files+=("$(realpath -m "${spec%%:*}"):${spec#*:}")
      shift 2
      ;;
    *) break ;;
  esac
done
out=${1:?usage: build-system.sh [--image IMAGE.tar]... [--airgap ARCHIVE]... [--file SRC:DEST]... OUT.sqfs [K3S]}
k3s=${2:-}
out=$(realpath -m "$out")
version=${LIKEN_VERSION:-dev}

for tool in mksquashfs unsquashfs depmod; do
  command -v "$tool" >/dev/null || {
    echo "images: $tool is missing; run scripts/setup.sh (it installs squashfs-tools and kmod)" >&2
    exit 1
  }
done
if [ -n "$k3s" ]; then
  [ -f "$k3s" ] && [ -x "$k3s" ] || {
    echo "images: k3s binary $k3s is not an executable file; pass the path of a k3s release binary (K3S_BINARY=)" >&2
    exit 1
  }
fi

# init links only *.tar files whose names do not start with a dot, and
# k3s imports only OCI (or docker save) archives.
declare -A image_names=()
for img in "${images[@]}"; do
  base=$(basename "$img")
  [[ $base == *.tar && $base != .* ]] || {
    echo "images: operator image $img must be named <name>.tar (init links only those into k3s's airgap directory)" >&2
    exit 1
  }
  [ -z "${image_names[$base]:-}" ] || { echo "images: two operator images are named $base" >&2; exit 1; }
  image_names[$base]=1
  entries=$(tar -tf "$img" 2>/dev/null) && grep -qx oci-layout <<< "$entries" && grep -qx index.json <<< "$entries" || {
    echo "images: $img is not an OCI image archive (no oci-layout and index.json); write it with images/oci-image.sh" >&2
    exit 1
  }
done

# k3s imports these from agent/images (pkg/agent/containerd/watcher.go's
# isFileSupported: rancher/wharfie's tarfile.SupportedExtensions and
# .txt), and init links the same (liken-init seed.rs AIRGAP_SUFFIXES).
for a in "${airgap[@]}"; do
  base=$(basename "$a")
  [ -f "$a" ] || { echo "images: K3S_AIRGAP_IMAGES: $a is not a file" >&2; exit 1; }
  shopt -s nocasematch
  case "$base" in
    .*) ok= ;;
    *.tar|*.tar.lz4|*.tar.bz2|*.tbz|*.tar.gz|*.tgz|*.tar.zst|*.tzst|*.txt) ok=1 ;;
    *) ok= ;;
  esac
  shopt -u nocasematch
  [ -n "$ok" ] || {
    echo "images: K3S_AIRGAP_IMAGES: $base is not named as k3s imports it (.tar, .tar.gz/.tgz, .tar.zst/.tzst, .tar.bz2/.tbz, .tar.lz4 or a .txt list)" >&2
    exit 1
  }
  [ -z "${image_names[$base]:-}" ] || { echo "images: two images archives are named $base" >&2; exit 1; }
  image_names[$base]=1
done

# One build of an image at a time (several test runs may start one).
mkdir -p "$(dirname "$out")"
exec 9> "$out.lock"
flock 9

kdir=$("$here/kernel.sh")
kver=$(cat "$kdir/kernel-release")
debs=$("$here/system-debs.sh")

# What the image is made of, to rebuild only when one of these changes.
inputs=$(
  echo "script $(cat "$here/build-system.sh" | sha256sum | cut -d' ' -f1)"
  echo "mksquashfs $(mksquashfs -version 2>/dev/null | head -1)"
  echo "kernel $(cat "$kdir/package")"
  echo "os-release-version $version"
  [ -z "${LIKEN_SQUASHFS_LEVEL:-}" ] || echo "compression-level $LIKEN_SQUASHFS_LEVEL"
  echo "manifests $(cd "$here/manifests" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)"
  echo "features $(cd "$here/features" && find . -type f -name '*.yaml' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)"
  if [ -n "$k3s" ]; then echo "k3s $(sha256sum < "$k3s" | cut -d' ' -f1)"; else echo "k3s none"; fi
  for img in "${images[@]}"; do echo "image $(basename "$img") $(sha256sum < "$img" | cut -d' ' -f1)"; done
  for a in "${airgap[@]}"; do echo "airgap $(basename "$a") $(sha256sum < "$a" | cut -d' ' -f1)"; done
  for f in "${files[@]}"; do echo "file ${f#*:} $(sha256sum < "${f%%:*}" | cut -d' ' -f1)"; done
  awk '{ print "deb " $1 " " $2 }' <<< "$debs"
)
if [ -f "$out" ] && [ -f "$out.inputs" ] && [ "$(cat "$out.inputs")" = "$inputs" ]; then
  echo "images: $out is up to date" >&2
  [ -n "$k3s" ] || echo "images: $(basename "$out") has no k3s (pass K3S_BINARY=<path to a k3s binary> to include one)" >&2
  exit 0
fi

stage=$(mktemp -d "$(dirname "$out")/.system-stage.XXXXXX")
trap 'rm -rf "$stage" "$out.tmp"' EXIT
chmod 0755 "$stage"

# The /usr-merged skeleton first, so package files under /lib, /bin and
# /sbin land in /usr (tar keeps the directory symlinks).
mkdir -p "$stage"/usr/{bin,sbin,lib,lib64} "$stage"/{etc,proc,sys,dev,run,var}
install -d -m 1777 "$stage/tmp"
for d in bin sbin lib lib64; do ln -s "usr/$d" "$stage/$d"; done

while read -r pkg _ dir; do
  if [ "$pkg" = ca-certificates ]; then continue; fi
  tar -C "$dir/root" -cf - . | tar -C "$stage" -xpf - --keep-directory-symlink
done <<< "$debs"

# Debian's alternatives, resolved the way a Debian 12 install has them:
# the nft backend, which the kernel's nf_tables modules serve.
for t in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore \
         arptables arptables-save arptables-restore ebtables ebtables-save ebtables-restore; do
  base=${t%%-*}
  suffix=${t#"$base"}
  [ -e "$stage/usr/sbin/$base-nft$suffix" ] || { echo "images: iptables ships no $base-nft$suffix" >&2; exit 1; }
  ln -sfn "$base-nft$suffix" "$stage/usr/sbin/$t"
done

# Documentation people read on a workstation, not on a machine. The
# copyright files stay: licenses.md is gathered from the same files.
rm -rf "$stage"/usr/share/{man,info,locale,lintian,bug,doc-base,bash-completion,zsh,initramfs-tools}
# glibc's character set converters: nothing here calls iconv.
rm -rf "$stage/usr/lib/x86_64-linux-gnu/gconv"
find "$stage/usr/share/doc" -mindepth 2 ! -name copyright ! -type d -delete 2>/dev/null || true
find "$stage/usr/share/doc" -mindepth 1 -type d -empty -delete 2>/dev/null || true
# Shell scripts and their service and cron units: the image has no
# shell, and init is the only service manager.
rm -f "$stage/usr/sbin/iptables-apply" "$stage/usr/sbin/ip6tables-apply"
rm -rf "$stage"/etc/{init.d,cron.d} "$stage"/usr/lib/{systemd,udev} "$stage/usr/lib/x86_64-linux-gnu/e2fsprogs"

# CA certificates: the bundle update-ca-certificates would generate
# from Debian's default configuration (every Mozilla root), in name order.
ca=$(awk '$1 == "ca-certificates" { print $3 }' <<< "$debs")
mkdir -p "$stage/etc/ssl/certs"
find "$ca/root/usr/share/ca-certificates/mozilla" -name '*.crt' -print0 | LC_ALL=C sort -z \
  | xargs -0 cat > "$stage/etc/ssl/certs/ca-certificates.crt"
mkdir -p "$stage/usr/share/doc/ca-certificates"
cp "$ca/root/usr/share/doc/ca-certificates/copyright" "$stage/usr/share/doc/ca-certificates/copyright"
grep -q "BEGIN CERTIFICATE" "$stage/etc/ssl/certs/ca-certificates.crt" || {
  echo "images: ca-certificates gave no certificates" >&2
  exit 1
}

# The kernel's module tree, with the indexes kernel.sh built.
mkdir -p "$stage/usr/lib/modules"
cp -a "$kdir/modules/lib/modules/$kver" "$stage/usr/lib/modules/$kver"

cat > "$stage/etc/os-release" <<EOF
NAME=liken
ID=liken
PRETTY_NAME="liken $version"
VERSION="$version"
VERSION_ID=$version
HOME_URL=https://github.com/liken-sh/liken
EOF
cat > "$stage/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/usr/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
EOF
cat > "$stage/etc/group" <<'EOF'
root:x:0:
nogroup:x:65534:
EOF
cat > "$stage/etc/nsswitch.conf" <<'EOF'
passwd: files
group: files
hosts: files dns
EOF
cat > "$stage/etc/hosts" <<'EOF'
127.0.0.1 localhost
::1 localhost ip6-localhost ip6-loopback
EOF
ln -s /run/resolv.conf "$stage/etc/resolv.conf"
ln -s /run/rancher "$stage/etc/rancher"
ln -s /var/lib/liken/machine-id "$stage/etc/machine-id"
ln -s ../proc/self/mounts "$stage/etc/mtab"

# The manifests init hands k3s on leaders (liken-init's seed step).
mkdir -p "$stage/usr/share/liken"
cp -r "$here/manifests" "$stage/usr/share/liken/manifests"
# The operators' manifests name their image and template label by the
# release they ship in.
find "$stage/usr/share/liken/manifests" -name '*.yaml' -exec sed -i "s/@LIKEN_VERSION@/$version/g" {} +
# Each feature's manifests, by slug (liken-init's seed step places
# features/<slug>/** only while the Cluster declares <slug>). Only the
# manifests: a feature directory may hold the scripts that generate them.
(cd "$here/features" && find . -type f -name '*.yaml' -print0) |
  while IFS= read -r -d '' f; do
    install -D -m 0644 "$here/features/$f" "$stage/usr/share/liken/features/$f"
  done
# The operator images init preloads into k3s (liken-init's seed step).
if [ $((${#images[@]} + ${#airgap[@]})) -gt 0 ]; then
  mkdir -p "$stage/usr/share/liken/images"
  for img in "${images[@]}" "${airgap[@]}"; do cp "$img" "$stage/usr/share/liken/images/"; done
fi
find "$stage/usr/share/liken" -type f -exec chmod 0644 {} +

if [ -n "$k3s" ]; then
  install -m 0755 "$k3s" "$stage/usr/bin/k3s"
fi
for f in "${files[@]}"; do
  install -D -m 0644 "${f%%:*}" "$stage/${f#*:}"
done

# The closure check: every shared library an ELF file in the tree asks
# for must be in the tree, so a tool never fails on the machine with
# "cannot open shared object file".
missing=$(
  find "$stage/usr" -type f \( -perm -u+x -o -name '*.so*' \) ! -path "$stage/usr/lib/modules/*" \
    | LC_ALL=C sort | while read -r f; do
        { readelf -d "$f" 2>/dev/null || true; } | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | while read -r lib; do
          [ -e "$stage/usr/lib/x86_64-linux-gnu/$lib" ] || [ -e "$stage/usr/lib/$lib" ] || echo "${f#"$stage"} needs $lib"
        done
      done
)
if [ -n "$missing" ]; then
  echo "images: the system image lacks shared libraries its programs need (add their packages to images/system-packages.txt):" >&2
  echo "$missing" >&2
  exit 1
fi

# The tools init and k3s run must start from the tree itself, with its
# own loader and libraries (unshare gives a non-root builder the root a
# chroot needs).
run_in() {
  if [ "$(id -u)" -eq 0 ]; then chroot "$stage" "$@"; else unshare -r chroot "$stage" "$@"; fi
}
for cmd in "iptables --version" "ip6tables-save --version" "mke2fs -V" "mount --version" "modprobe --version" "conntrack --version"; do
  # shellcheck disable=SC2086 # each command is words on purpose
  run_in /usr/sbin/$cmd >/dev/null 2>&1 || run_in /usr/bin/$cmd >/dev/null 2>&1 || {
    echo "images: '$cmd' does not run from the system image tree:" >&2
    run_in /usr/sbin/$cmd >&2 || true
    exit 1
  }
done

# Deterministic: owners root, every time 0, no xattrs of the build
# machine, sorted directories (mksquashfs sorts entries itself).
# zstd decompresses fast, which the boot's squashfs mount and k3s's
# first start on slow machines feel.
rm -f "$out.tmp"
# LIKEN_SQUASHFS_LEVEL (tests only) trades size for build time: the
# end-to-end tests build three images for every change of their
# stand-in; the default is zstd's own level.
level=()
if [ -n "${LIKEN_SQUASHFS_LEVEL:-}" ]; then level=(-Xcompression-level "$LIKEN_SQUASHFS_LEVEL"); fi
mksquashfs "$stage" "$out.tmp" -noappend -all-root -no-xattrs -mkfs-time 0 -all-time 0 \
  -comp zstd "${level[@]}" -quiet -no-progress >/dev/null
mv "$out.tmp" "$out"
printf '%s\n' "$inputs" > "$out.inputs"
echo "images: $out ($(stat -c %s "$out") bytes, kernel $kver modules, $(wc -l <<< "$debs") Debian packages, ${#images[@]} operator images, ${#airgap[@]} k3s airgap archives)" >&2
if [ -n "$k3s" ] && [ ${#airgap[@]} -eq 0 ]; then
  echo "images: $(basename "$out") has no k3s airgap images: k3s will pull pause, coredns and local-path from their registries (pass K3S_AIRGAP_IMAGES=<k3s-airgap-images-amd64.tar.zst>)" >&2
fi
if [ -n "$k3s" ]; then
  echo "images: $(basename "$out") holds k3s from $k3s" >&2
else
  echo "images: $(basename "$out") has no k3s (pass K3S_BINARY=<path to a k3s binary> to include one)" >&2
fi
