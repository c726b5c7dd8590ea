#!/usr/bin/env bash
# Smoke check of the node's parts (`testenv/build.sh node`): each binary
# (hyperkube under each of its six names, through a link as the upstream
# node's bundle names it) runs and reports the version node/versions.env
# and versions.env pin,
# runc reports (and has) seccomp support, and every binary is static, as
# it must be to run in a liken guest that has no C library for it.
# Starts nothing.
#
#   testenv/smoke-node.sh      # uses testenv/build.sh node (or $LIKEN_TESTENV_NODE_BIN)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BIN=$("$here/build.sh" node | tail -1)
. "$here/versions.env"
. "$here/node/versions.env"

failed=0
say() { printf 'smoke-node: %s\n' "$*"; }
# check NAME EXPECTED OUTPUT: OUTPUT must contain EXPECTED (its line is shown).
check() {
  if [[ "$3" == *"$2"* ]]; then
    say "ok   $1: $(grep -F -m1 -- "$2" <<<"$3" | sed 's/^[[:space:]]*//')"
  else
    say "FAIL $1: wanted \"$2\", got:"; sed 's/^/    /' <<<"$3"; failed=1
  fi
}
run() { "$@" 2>&1 || true; } # output of a command, whatever its exit status

say "binaries in $BIN"
links=$(mktemp -d)
trap 'rm -rf "$links"' EXIT
for c in kubelet kube-proxy kube-apiserver kube-controller-manager kube-scheduler; do
  ln -s "$BIN/hyperkube" "$links/$c"
  check "hyperkube as $c" "Kubernetes $KUBE_VERSION" "$(run "$links/$c" --version)"
done
ln -s "$BIN/hyperkube" "$links/kubectl"
check "hyperkube as kubectl" "Client Version: $KUBE_VERSION" "$(run "$links/kubectl" version --client)"
# Under any other name it names its commands and does nothing.
check "hyperkube as itself" "none of its commands" "$(run "$BIN/hyperkube")"
check containerd "containerd github.com/containerd/containerd/v2 $CONTAINERD_VERSION" \
  "$(run "$BIN/containerd" --version)"
check ctr "ctr github.com/containerd/containerd/v2 $CONTAINERD_VERSION" "$(run "$BIN/ctr" --version)"
check containerd-shim-runc-v2 "Version:  $CONTAINERD_VERSION" "$(run "$BIN/containerd-shim-runc-v2" -v)"

out=$(run "$BIN/runc" --version)
check runc "runc version ${RUNC_VERSION#v}" "$out"
# runc prints the libseccomp line only when built with the seccomp tag and
# the library answers; `runc features` says whether it can load filters.
check "runc seccomp" "libseccomp: " "$(grep libseccomp <<<"$out" || true)"
check "runc features" '"enabled":true' "$(run "$BIN/runc" features | python3 -c '
import json, sys
s = json.load(sys.stdin)["linux"]["seccomp"]
print(json.dumps({"enabled": s["enabled"], "actions": len(s["actions"]), "archs": len(s["archs"])}, separators=(",", ":")))')"

for p in bridge host-local loopback portmap; do
  # The CNI VERSION verb (stdout: the spec versions it speaks), and with no
  # CNI_COMMAND the plugin's about line (stderr: its release stamp).
  check "$p VERSION" '"supportedVersions":' "$(CNI_COMMAND=VERSION run "$BIN/$p" </dev/null)"
  check "$p" "CNI $p plugin $CNI_PLUGINS_VERSION" "$(run env -u CNI_COMMAND "$BIN/$p" </dev/null)"
done

# Static: `file` says so and the dynamic loader refuses it.
for b in hyperkube containerd containerd-shim-runc-v2 ctr runc bridge host-local loopback portmap; do
  f=$(file -b "$BIN/$b")
  l=$(run ldd "$BIN/$b")
  if [[ "$f" == *"statically linked"* && ( "$l" == *"not a dynamic executable"* || "$l" == *"statically linked"* ) ]]; then
    say "ok   $b static: ${f%%, Go BuildID*}, ldd: $(head -1 <<<"$l" | sed 's/^[[:space:]]*//')"
  else
    say "FAIL $b is not static: $f; ldd: $l"; failed=1
  fi
done

if [[ $failed -ne 0 ]]; then say "FAILED"; exit 1; fi
say "OK: $(du -sh "$BIN" | cut -f1) in $BIN"
