#!/usr/bin/env bash
# Build (or reuse) a real Kubernetes control plane for liken's integration
# tests: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok,
# and the clients tests and benchmarks compare against: kubectl of the same
# release, and client-go-list (liken-kube's LIST benchmark reference).
#
#   BIN=$(testenv/build.sh | tail -1)
#
# The last stdout line is the bin directory; progress goes to stderr.
# If LIKEN_TESTENV_BIN is set, it is printed and nothing is built.
# Binaries are cached in ${XDG_CACHE_HOME:-~/.cache}/liken/testenv/<key>/bin,
# <key> names the pinned versions and the Go version plus a hash of the
# module files and build flags.
set -euo pipefail

if [[ -n "${LIKEN_TESTENV_BIN:-}" ]]; then
  echo "$LIKEN_TESTENV_BIN"
  exit 0
fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"
. ./versions.env

BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok kubectl client-go-list)

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

# The key names the pinned versions; the hash covers everything else that
# changes the output (module files, wrappers, flags), so edits get a fresh entry.
srchash=$( { cat versions.env go.mod go.sum cmd/*/main.go \
    etcd/go.mod etcd/go.sum etcd/main.go kwok/go.mod kwok/go.sum kwok/main.go
  echo "${BINARIES[*]} CGO_ENABLED=$CGO_ENABLED -trimpath -s -w $kx"; } |
  sha256sum | cut -c1-10)
key="k8s-${KUBE_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_${gover}_${srchash}"
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

gobuild() { go build -trimpath "$@"; }

log "building into $tmp (key $key, $(nproc) CPUs); a cold build takes a long time"
log "etcd $ETCD_VERSION"
(cd etcd && gobuild -ldflags='-s -w' -o "$tmp/etcd" .)
log "kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, client-go-list $KUBE_VERSION"
gobuild -ldflags="-s -w$kx" -o "$tmp/" ./cmd/kube-apiserver ./cmd/kube-controller-manager ./cmd/kube-scheduler \
  ./cmd/kubectl ./cmd/client-go-list
log "kwok $KWOK_VERSION"
(cd kwok && gobuild -ldflags='-s -w' -o "$tmp/kwok" .)

for b in "${BINARIES[@]}"; do [[ -x "$tmp/$b" ]] || { log "missing $b"; exit 1; }; done
chmod 0755 "$tmp"
rm -rf "$bin"          # only a partial/stale dir can be here (have_all failed)
mv -T "$tmp" "$bin"    # atomic rename: readers see all binaries or none
trap - EXIT
log "done in $((SECONDS - start))s: $(du -sh "$bin" | cut -f1) in $bin"
echo "$bin"
