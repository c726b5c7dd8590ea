#!/usr/bin/env bash
# Build (or reuse) a real Kubernetes control plane for liken's integration
# tests: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok,
# and the clients tests and benchmarks compare against: kubectl of the same
# release, and client-go-list (liken-kube's LIST benchmark reference).
#
# With the argument `node` it builds a Kubernetes node's parts instead, at
# the versions node/versions.env pins: hyperkube (node/kube/hyperkube: the
# kubelet, kube-proxy, kube-apiserver, kube-controller-manager,
# kube-scheduler and kubectl of the same release in one program, chosen by
# the name it is started under, as k3s carries them), containerd v2 with
# its runc shim and ctr, runc (cgo, static against libseccomp.a), and the
# CNI plugins bridge, host-local, loopback and portmap. The two have
# separate cache entries.
#
#   BIN=$(testenv/build.sh | tail -1)
#   NODE_BIN=$(testenv/build.sh node | tail -1)
#
# The last stdout line is the bin directory; progress goes to stderr, with
# each component's wall time.
# If LIKEN_TESTENV_BIN (for `node`, LIKEN_TESTENV_NODE_BIN) is set, it is
# printed and nothing is built.
# Binaries are cached in ${XDG_CACHE_HOME:-~/.cache}/liken/testenv/<key>/bin,
# <key> names the pinned versions and the Go version plus a hash of the
# module files and build flags.
set -euo pipefail

what=${1:-control-plane}
case "$what" in
  control-plane) prebuilt=${LIKEN_TESTENV_BIN:-} ;;
  node) prebuilt=${LIKEN_TESTENV_NODE_BIN:-} ;;
  *) echo "usage: $0 [node]" >&2; exit 2 ;;
esac
if [[ -n "$prebuilt" ]]; then
  echo "$prebuilt"
  exit 0
fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"
. ./versions.env

export GOWORK=off CGO_ENABLED=0
gover=$(go env GOVERSION)
# Version stamping as in kubernetes' hack/lib/version.sh, so /version and
# `kubectl version` report the real release instead of v0.0.0-master.
kv=${KUBE_VERSION#v}
kmajor=${kv%%.*}; kminor=${kv#*.}; kminor=${kminor%%.*}
kx=""
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
  kx+=" -X '$pkg.gitVersion=$KUBE_VERSION' -X '$pkg.gitMajor=$kmajor' -X '$pkg.gitMinor=$kminor'"
  kx+=" -X '$pkg.gitTreeState=clean' -X '$pkg.buildDate=1970-01-01T00:00:00Z'"
done

if [[ $what == control-plane ]]; then
BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok kubectl client-go-list)
# The key names the pinned versions; the hash covers everything else that
# changes the output (module files, wrappers, flags), so edits get a fresh entry.
srchash=$( { cat versions.env go.mod go.sum cmd/*/main.go \
    etcd/go.mod etcd/go.sum etcd/main.go kwok/go.mod kwok/go.sum kwok/main.go
  echo "${BINARIES[*]} CGO_ENABLED=$CGO_ENABLED -trimpath -s -w $kx"; } |
  sha256sum | cut -c1-10)
key="k8s-${KUBE_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_${gover}_${srchash}"
else
. ./node/versions.env
BINARIES=(hyperkube containerd containerd-shim-runc-v2 ctr runc bridge host-local loopback portmap)
# containerd as its static release is built (its Makefile with STATIC=1:
# these tags, the shim with no_grpc too), stamped as `make VERSION=` does.
ctags="urfave_cli_no_docs osusergo netgo static_build"
cpkg=github.com/containerd/containerd/v2
cx="-X $cpkg/version.Version=$CONTAINERD_VERSION -X $cpkg/version.Package=$cpkg"
# runc as its Makefile's `static` target, less the libpathrs tag (a Rust
# library Debian 12 does not ship; runc falls back to its Go pathrs-lite)
# and less -buildmode=pie. runc reads its version from its VERSION file.
rtags="seccomp urfave_cli_no_docs netgo osusergo"
rld="-s -w -extldflags -static"
# The CNI plugins as their release.sh stamps them.
nx="-X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$CNI_PLUGINS_VERSION"
# runc links libseccomp.a statically, so its bytes are an input too.
seccomp_a="$(pkg-config --variable=libdir libseccomp 2>/dev/null || true)/libseccomp.a"
if [[ ! -f "$seccomp_a" ]] || ! command -v cc >/dev/null; then
  echo "testenv: runc needs a C compiler, pkg-config and Debian's libseccomp-dev (libseccomp.a); run scripts/setup.sh" >&2
  exit 1
fi
srchash=$( { cat versions.env node/versions.env node/*/go.mod node/*/go.sum node/kube/hyperkube/main.go "$seccomp_a"
  echo "${BINARIES[*]} CGO_ENABLED=$CGO_ENABLED -trimpath -s -w $kx | $ctags | $cx | $rtags | $rld | $nx"; } |
  sha256sum | cut -c1-10)
key="node-k8s-${KUBE_VERSION}_containerd-${CONTAINERD_VERSION}_runc-${RUNC_VERSION}_cni-${CNI_PLUGINS_VERSION}_${gover}_${srchash}"
fi
root="${XDG_CACHE_HOME:-$HOME/.cache}/liken/testenv/$key"
bin="$root/bin"

have_all() {
  local b
  for b in "${BINARIES[@]}"; do [[ -x "$bin/$b" ]] || return 1; done
}

if have_all; then
  echo "$bin"
  exit 0
fi

mkdir -p "$root"
# Serialise concurrent builds of the same key.
exec 9>"$root/.lock"
if command -v flock >/dev/null && ! flock -n 9; then
  echo "testenv: another build of $key is running; waiting for it" >&2
  flock 9
fi
if have_all; then
  echo "$bin"
  exit 0
fi

log() { printf 'testenv: [%s] %s\n' "$(date +%T)" "$*" >&2; }
start=$SECONDS
tmp=$(mktemp -d "$root/bin.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

gobuild() { local dir=$1; shift; go build -C "$dir" -trimpath "$@"; } # dir args...
build_containerd() {
  gobuild node/containerd -tags "$ctags" -ldflags="-s -w $cx" -o "$tmp/" $cpkg/cmd/containerd $cpkg/cmd/ctr
  gobuild node/containerd -tags "$ctags no_grpc" -ldflags="-s -w $cx" -o "$tmp/containerd-shim-runc-v2" \
    $cpkg/cmd/containerd-shim-runc-v2
}

# Each component's wall time, so a cold build's cost can be read per part.
step() { # name command...
  local name=$1 t=$SECONDS; shift
  log "$name"
  "$@"
  log "$name: $((SECONDS - t))s"
}

log "building into $tmp (key $key, $(nproc) CPUs); a cold build takes a long time"
if [[ $what == control-plane ]]; then
step "etcd $ETCD_VERSION" \
  gobuild etcd -ldflags='-s -w' -o "$tmp/etcd" .
step "kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, client-go-list $KUBE_VERSION" \
  gobuild . -ldflags="-s -w$kx" -o "$tmp/" ./cmd/kube-apiserver ./cmd/kube-controller-manager ./cmd/kube-scheduler \
  ./cmd/kubectl ./cmd/client-go-list
step "kwok $KWOK_VERSION" \
  gobuild kwok -ldflags='-s -w' -o "$tmp/kwok" .
else
# hyperkube from node/kube, stamped as the control plane; the rest are
# upstream's own main packages, built from the node/* modules that pin
# them (go.mod `tool` lines).
step "hyperkube (kubelet, kube-proxy, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl) $KUBE_VERSION" \
  gobuild node/kube -ldflags="-s -w$kx" -o "$tmp/hyperkube" ./hyperkube
step "containerd, ctr, containerd-shim-runc-v2 $CONTAINERD_VERSION" \
  build_containerd
step "runc $RUNC_VERSION (cgo, static, seccomp)" \
  env CGO_ENABLED=1 go build -C node/runc -trimpath -tags "$rtags" -ldflags "$rld" -o "$tmp/runc" github.com/opencontainers/runc
step "CNI plugins bridge, host-local, loopback, portmap $CNI_PLUGINS_VERSION" \
  gobuild node/cni -ldflags="-s -w $nx" -o "$tmp/" \
  github.com/containernetworking/plugins/plugins/{main/bridge,ipam/host-local,main/loopback,meta/portmap}
fi

for b in "${BINARIES[@]}"; do [[ -x "$tmp/$b" ]] || { log "missing $b"; exit 1; }; done
chmod 0755 "$tmp"
rm -rf "$bin"          # only a partial/stale dir can be here (have_all failed)
mv -T "$tmp" "$bin"    # atomic rename: readers see all binaries or none
trap - EXIT
log "done in $((SECONDS - start))s: $(du -sh "$bin" | cut -f1) in $bin"
echo "$bin"
