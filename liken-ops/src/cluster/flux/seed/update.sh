#!/usr/bin/env bash
# Regenerates gotk-components.yaml, the Flux engine the cluster operator
# plants when it is absent, from pinned upstream sources. Needs the Go
# module proxy (and testenv's kubectl, for its built-in kustomize). Run
# after changing versions.env, then commit the result.
#
# It does what `flux install --components=<FLUX_COMPONENTS>` does, from
# the same sources, without the network beyond the module proxy:
#
# 1. The Flux release's manifests, from the module
#    github.com/fluxcd/flux2/v2@FLUX_VERSION (its manifests/ directory).
# 2. For each component, the release assets its bases name
#    (<controller>.crds.yaml and <controller>.deployment.yaml on GitHub),
#    rebuilt the way the controllers' release workflow builds them
#    (fluxcd/gha-workflows controller-release.yaml: `kustomize build
#    config/crd` and `kustomize build config/manager`), from the module
#    github.com/fluxcd/<controller>@<the version the base pins>.
# 3. The bundle (manifests/scripts/bundle.sh): each base, rbac.yaml and
#    policies.yaml.
# 4. The install overlay flux renders around the bundle
#    (pkg/manifestgen/install/templates.go and manifests.go) with flux's
#    default options: namespace flux-system, watch all namespaces, log
#    level info, network policies, images from ghcr.io/fluxcd, cluster
#    domain cluster.local, no notification-controller (so no events
#    address), no tolerations; and liken's ownership mark on the
#    Namespace (liken.sh/feature=flux).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../../.." && pwd)
. "$here/versions.env"
export GOWORK=off GOFLAGS=-mod=mod

moddir() { go mod download -json "$1" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p'; }
kubectl=${KUBECTL:-"$("$root/testenv/build.sh" | tail -1)/kubectl"}
kustomize() { "$kubectl" kustomize "$@"; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

flux=$(moddir "github.com/fluxcd/flux2/v2@${FLUX_VERSION}")
[ -d "$flux/manifests" ] || { echo "update.sh: $flux has no manifests/" >&2; exit 1; }
cp -r "$flux/manifests" "$work/manifests"
chmod -R u+w "$work"

bundle="$work/bundle"
mkdir -p "$bundle"
pins=()
for c in $FLUX_COMPONENTS; do
  base="$work/manifests/bases/$c"
  v=$(sed -n "s|.*/fluxcd/$c/releases/download/\(v[^/]*\)/$c\.crds\.yaml$|\1|p" "$base/kustomization.yaml")
  [ -n "$v" ] || { echo "update.sh: no $c version in $base/kustomization.yaml" >&2; exit 1; }
  src=$(moddir "github.com/fluxcd/$c@$v")
  kustomize "$src/config/crd" > "$base/$c.crds.yaml"
  kustomize "$src/config/manager" > "$base/$c.deployment.yaml"
  sed -i "s|https://github.com/fluxcd/$c/releases/download/$v/||" "$base/kustomization.yaml"
  if grep -q 'https://' "$base/kustomization.yaml"; then
    echo "update.sh: $base/kustomization.yaml still names a remote resource" >&2; exit 1
  fi
  kustomize "$base" > "$bundle/$c.yaml"
  pins+=("$c $v")
done
kustomize "$work/manifests/rbac" > "$bundle/rbac.yaml"
kustomize "$work/manifests/policies" > "$bundle/policies.yaml"

# The install overlay, as templates.go renders it for these options.
ns=flux-system
# liken's one addition: the ownership mark. The flux feature's own
# manifest creates the namespace with it first; if the seed ever creates
# the namespace itself, liken planted it, and the mark says so.
cat > "$bundle/namespace.yaml" <<NS
---
apiVersion: v1
kind: Namespace
metadata:
  name: $ns
  annotations:
    liken.sh/feature: flux
  labels:
    pod-security.kubernetes.io/warn: restricted
    pod-security.kubernetes.io/warn-version: latest
NS
cat > "$bundle/labels.yaml" <<LABELS
---
apiVersion: builtin
kind: LabelTransformer
metadata:
  name: labels
labels:
  app.kubernetes.io/instance: $ns
  app.kubernetes.io/version: "$FLUX_VERSION"
  app.kubernetes.io/part-of: flux
fieldSpecs:
  - path: metadata/labels
    create: true
  - kind: Deployment
    path: spec/template/metadata/labels
    create: true
LABELS
cat > "$bundle/node-selector.yaml" <<'SELECTOR'
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: all
spec:
  template:
    spec:
      nodeSelector:
        kubernetes.io/os: linux
SELECTOR
mkdir -p "$bundle/roles"
mv "$bundle/rbac.yaml" "$bundle/roles/rbac.yaml"
cat > "$bundle/roles/kustomization.yaml" <<ROLES
---
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: $ns
resources:
  - rbac.yaml
nameSuffix: -$ns
ROLES
{
  echo "---"
  echo "apiVersion: kustomize.config.k8s.io/v1beta1"
  echo "kind: Kustomization"
  echo "namespace: $ns"
  echo "transformers:"
  echo "  - labels.yaml"
  echo "resources:"
  echo "  - namespace.yaml"
  echo "  - policies.yaml"
  echo "  - roles"
  for c in $FLUX_COMPONENTS; do echo "  - $c.yaml"; done
  echo "patches:"
  echo "- path: node-selector.yaml"
  echo "  target:"
  echo "    kind: Deployment"
  for c in $FLUX_COMPONENTS; do
    echo "- target:"
    echo "    group: apps"
    echo "    version: v1"
    echo "    kind: Deployment"
    echo "    name: $c"
    echo "  patch: |-"
    echo "    - op: replace"
    echo "      path: /spec/template/spec/containers/0/args/0"
    echo "      value: --events-addr="
    echo "    - op: replace"
    echo "      path: /spec/template/spec/containers/0/args/1"
    echo "      value: --watch-all-namespaces=true"
    echo "    - op: replace"
    echo "      path: /spec/template/spec/containers/0/args/2"
    echo "      value: --log-level=info"
    if [ "$c" = source-controller ]; then
      echo "    - op: replace"
      echo "      path: /spec/template/spec/containers/0/args/6"
      echo "      value: --storage-adv-addr=$c.\$(RUNTIME_NAMESPACE).svc.cluster.local."
    fi
  done
  echo "images:"
  for c in $FLUX_COMPONENTS; do
    echo "  - name: fluxcd/$c"
    echo "    newName: ghcr.io/fluxcd/$c"
  done
} > "$bundle/kustomization.yaml"

# The engine's RBAC (its ClusterRoles, and the bindings that give
# kustomize-controller cluster-admin) goes to the flux feature's
# manifests, which k3s applies with its own authority; the seed keeps
# the rest, which the cluster operator plants without holding `bind` or
# `escalate` (liken-ops/src/cluster/flux/engine.rs).
kustomize "$bundle" > "$work/all.yaml"
awk -v rbac="$work/rbac.yaml" -v rest="$work/seed.yaml" '
  function flush() {
    if (doc == "") return
    out = (kind ~ /^(ClusterRole|ClusterRoleBinding|Role|RoleBinding)$/) ? rbac : rest
    printf "%s%s", (seen[out]++ ? "---\n" : ""), doc > out
    doc = ""; kind = ""
  }
  /^---$/ { flush(); next }
  /^kind: / { kind = $2 }
  { doc = doc $0 "\n" }
  END { flush() }
' "$work/all.yaml"
provenance() {
  echo "# Generated by update.sh from github.com/fluxcd/flux2/v2@$FLUX_VERSION and"
  for p in "${pins[@]}"; do echo "# github.com/fluxcd/${p% *}@${p#* } (config/crd, config/manager),"; done
  echo "# rendered as \`flux install --components=${FLUX_COMPONENTS// /,}\` renders them."
}

out="$here/gotk-components.yaml"
{
  provenance
  echo "# Do not edit by hand: change versions.env and run update.sh."
  cat "$work/seed.yaml"
} > "$out.tmp"
mv "$out.tmp" "$out"
echo "update.sh: wrote $out ($(grep -c '^kind:' "$out") objects)" >&2

rbac="$root/images/features/flux/manifests/flux-engine-rbac.yaml"
{
  echo "# The Flux engine's RBAC: its ClusterRoles and the bindings that make"
  echo "# kustomize-controller cluster-admin (Flux applies whatever the"
  echo "# repository holds). k3s applies this file, with its own authority,"
  echo "# while the Cluster declares spec.features.flux, so the cluster"
  echo "# operator, which plants the rest of the engine"
  echo "# (liken-ops/src/cluster/flux/seed/gotk-components.yaml), holds no"
  echo "# \`bind\` or \`escalate\`."
  provenance
  echo "# Do not edit by hand: change liken-ops/src/cluster/flux/seed/versions.env"
  echo "# and run liken-ops/src/cluster/flux/seed/update.sh."
  cat "$work/rbac.yaml"
} > "$rbac.tmp"
mv "$rbac.tmp" "$rbac"
echo "update.sh: wrote $rbac ($(grep -c '^kind:' "$rbac") objects)" >&2
