#!/usr/bin/env bash
# Makes the upstream node launcher a single file, as k3s is one: the
# launcher, then a tar of the node's programs, then a trailer naming the
# tar's SHA-256 and length (qemu-tests/src/upstream/bundle.rs reads it and
# unpacks the programs into <data-dir>/data/<sha256>/bin, as k3s does).
#
#   upstream-bundle.sh LAUNCHER NODE_BIN CONTROL_PLANE_BIN OUT
#
# NODE_BIN is `testenv/build.sh node`'s directory (containerd, its runc
# shim, ctr, runc, the CNI plugins, and hyperkube: the kubelet, kube-proxy,
# kube-apiserver, kube-controller-manager, kube-scheduler and kubectl in
# one program, which the archive names six times as links, as k3s's own
# archive links kubectl, crictl and the rest to k3s: k3s-io/k3s
# scripts/package-cli); CONTROL_PLANE_BIN is `testenv/build.sh`'s, for
# etcd (qemu-tests/src/upstream/server.rs). The tar is deterministic
# (sorted, owner root, time 0), so the same programs give the same digest
# and the same data directory.
set -euo pipefail
launcher=${1:?usage: upstream-bundle.sh LAUNCHER NODE_BIN CONTROL_PLANE_BIN OUT}
node=${2:?node bin dir}
cp=${3:?control plane bin dir}
out=${4:?output}

node_programs=(hyperkube containerd containerd-shim-runc-v2 ctr runc bridge host-local loopback portmap)
# The names hyperkube answers to (testenv/node/kube/hyperkube/main.go).
hyperkube_names=(kubelet kube-proxy kube-apiserver kube-controller-manager kube-scheduler kubectl)
stage=$(mktemp -d)
trap 'rm -rf "$stage" "$out.tmp"' EXIT
mkdir "$stage/bin"
for p in "${node_programs[@]}"; do
  [ -x "$node/$p" ] || { echo "upstream-bundle: $node/$p is missing; run make testenv-node" >&2; exit 1; }
  cp "$node/$p" "$stage/bin/$p"
done
[ -x "$cp/etcd" ] || { echo "upstream-bundle: $cp/etcd is missing; run testenv/build.sh" >&2; exit 1; }
cp "$cp/etcd" "$stage/bin/etcd"
for n in "${hyperkube_names[@]}"; do ln -s hyperkube "$stage/bin/$n"; done

tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 --mode=0755 \
  --format=gnu -C "$stage" -cf "$stage/programs.tar" bin
sha=$(sha256sum < "$stage/programs.tar" | cut -d' ' -f1)
len=$(stat -c %s "$stage/programs.tar")
{
  cat "$launcher" "$stage/programs.tar"
  printf 'LIKENUPB%s%016x' "$sha" "$len"
} > "$out.tmp"
chmod 0755 "$out.tmp"
mv "$out.tmp" "$out"
echo "upstream-bundle: $out: launcher $(stat -c %s "$launcher") bytes + programs $len bytes (sha256 $sha)" >&2
