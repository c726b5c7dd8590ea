#!/usr/bin/env bash
# Builds the upstream fleet's release channel, IMAGES_OUT/channel-upstream:
# two releases whose k3s is the upstream node launcher (a real kubelet,
# containerd, runc and, as a server, the control plane), N and N+1:
#
#   2026.02.01-001  N: what the upstream fleet is installed with
#   2026.02.01-002  N+1: the upgrade its rollout takes
#
#   upstream-images.sh IMAGES_OUT LAUNCHER PAUSE WORKLOAD OPERATOR_BINARY...
#
# LAUNCHER is the bundled launcher (qemu-tests/upstream-bundle.sh's
# output); PAUSE and WORKLOAD are the static programs of the pod sandbox
# image containerd pins and of the tests' workload, named by the
# environment's UPSTREAM_PAUSE and UPSTREAM_WORKLOAD (the Makefile's,
# which tests hold equal to the launcher's DEFAULT_PAUSE_IMAGE and
# real_node.rs's WORKLOAD_IMAGE); their tags name no release, since a
# pod must find them on a machine of either release. Each release is assembled in
# IMAGES_OUT/upstream/<version>/ and bundled from there:
#
# - liken-init built with the release's version and its boot.cpio
#   (test-channel.sh's versioned_boot), so the machine operator knows
#   which release a machine runs and a rollout can be judged;
# - the system image, LIKEN_VERSION set, carrying the operators' images
#   tagged liken.sh/<binary name>:<version> (the tag its manifests name),
#   the pause and workload images;
# - the rest linked from IMAGES_OUT.
#
# Both releases and channel.yaml are signed by the test fleets' release
# key (test-channel.sh). A channel holding any other version is started
# over (a test channel). Cost: the system images
# are rebuilt only when an input changed (build-system.sh), each about a
# minute under zstd level 3 for the launcher's 600 MB of programs.
set -euo pipefail
usage="usage: upstream-images.sh IMAGES_OUT LAUNCHER PAUSE WORKLOAD OPERATOR_BINARY..."
out=${1:?$usage}
launcher=${2:?$usage}
pause=${3:?$usage}
workload=${4:?$usage}
shift 4
[ $# -ge 1 ] || { echo "$usage" >&2; exit 1; }
here=$(cd "$(dirname "$0")/.." && pwd)
channel=$out/channel-upstream
versions=(2026.02.01-001 2026.02.01-002)
export LIKEN_SQUASHFS_LEVEL=${LIKEN_SQUASHFS_LEVEL:-3}
target=${LIKEN_INIT_TARGET:-x86_64-unknown-linux-musl}
: "${CARGO_TARGET_DIR:?upstream-images: CARGO_TARGET_DIR is not set; run it through make upstream-images}"
: "${UPSTREAM_PAUSE:?upstream-images: UPSTREAM_PAUSE is not set; run it through make upstream-images}"
: "${UPSTREAM_WORKLOAD:?upstream-images: UPSTREAM_WORKLOAD is not set; run it through make upstream-images}"
for f in "$launcher" "$pause" "$workload" "$out/boot.cpio" "$out/liken"; do
  [ -e "$f" ] || { echo "upstream-images: $f is missing; run make upstream-images" >&2; exit 1; }
done

. "$here/qemu-tests/test-channel.sh"
mkdir -p "$out/upstream" "$channel"
test_release_key

# A release of another version (an earlier layout of this channel had
# dated ones) makes the whole channel another's: channel.yaml may name
# it latest, and bundle never moves latest back. Start the channel over.
for d in "$channel"/*/; do
  [ -d "$d" ] || continue
  case " ${versions[*]} " in
    *" $(basename "$d") "*) ;;
    *) echo "upstream-images: $channel holds $(basename "$d"), not one of this test channel's releases; starting it over" >&2
       rm -rf "${channel:?}" && mkdir -p "$channel"
       break ;;
  esac
done

"$here/images/oci-image.sh" "$pause" "$UPSTREAM_PAUSE" "$out/upstream/liken-upstream-pause.tar"
"$here/images/oci-image.sh" "$workload" "$UPSTREAM_WORKLOAD" "$out/upstream/liken-upstream-workload.tar"
for v in "${versions[@]}"; do
  dir=$out/upstream/$v
  mkdir -p "$dir"
  versioned_boot "$v" "$dir"
  link_shared "$dir"
  args=(--image "$out/upstream/liken-upstream-pause.tar" --image "$out/upstream/liken-upstream-workload.tar")
  operator_images "$v" "$dir" "$@"
  LIKEN_VERSION=$v "$here/images/build-system.sh" "${args[@]}" "$dir/system.squashfs" "$launcher"
  release_into "$channel" "$v" "$dir"
done
