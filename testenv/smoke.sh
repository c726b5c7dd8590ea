#!/usr/bin/env bash
# Smoke test / reference for the Rust test helper: start etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler and kwok on loopback with self-made
# certs, check the cluster works (readyz, kubectl, a fake node and a pod that
# gets scheduled and Running), then stop everything.
#
#   testenv/smoke.sh            # uses testenv/build.sh (or $LIKEN_TESTENV_BIN)
#   KEEP=1 testenv/smoke.sh     # leave the work dir (logs, certs) in place
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BIN=$("$here/build.sh" | tail -1)
KUBECTL=${KUBECTL:-kubectl}

W=$(mktemp -d /tmp/liken-testenv.XXXXXX)
pids=()
cleanup() {
  local rc=$?
  # Stop in reverse start order, etcd last: kube-apiserver's shutdown blocks
  # (for minutes) removing its endpoint lease if etcd is already gone.
  local i p
  for ((i=${#pids[@]}-1; i>=0; i--)); do
    p=${pids[i]}
    kill "$p" 2>/dev/null || continue
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  if [[ $rc -ne 0 ]]; then
    echo "FAILED (rc=$rc); logs in $W" >&2
    for f in "$W"/*.log; do echo "== $f" >&2; tail -20 "$f" >&2; done
  elif [[ -z "${KEEP:-}" ]]; then
    rm -rf "$W"
  fi
}
trap cleanup EXIT
trap 'exit 143' TERM INT
log() { printf 'smoke: [%s] %s\n' "$(date +%T)" "$*" >&2; }

freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ETCD_PORT=$(freeport) ETCD_PEER_PORT=$(freeport) API_PORT=$(freeport)
KCM_PORT=$(freeport) SCHED_PORT=$(freeport) KWOK_PORT=$(freeport)

# ---------------------------------------------------------------- PKI
log "PKI in $W"
cd "$W"
openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj /CN=liken-testenv-ca \
  -keyout ca.key -out ca.crt 2>/dev/null
cert() { # name subject [san]
  openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$1.key" -out "$1.csr" 2>/dev/null
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n' > "$1.ext"
  if [[ -n "${3:-}" ]]; then
    printf 'extendedKeyUsage=serverAuth\nsubjectAltName=%s\n' "$3" >> "$1.ext"
  else
    printf 'extendedKeyUsage=clientAuth\n' >> "$1.ext"
  fi
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
    -extfile "$1.ext" -out "$1.crt" 2>/dev/null
}
cert apiserver /CN=kube-apiserver \
  "IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
cert admin "/O=system:masters/CN=admin"
cert kcm /CN=system:kube-controller-manager
cert sched /CN=system:kube-scheduler
openssl genrsa -out sa.key 2048 2>/dev/null
openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null

kubeconfig() { # name
  cat > "$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: testenv
  cluster: {server: "https://127.0.0.1:$API_PORT", certificate-authority: "$W/ca.crt"}
users:
- name: $1
  user: {client-certificate: "$W/$1.crt", client-key: "$W/$1.key"}
contexts:
- name: testenv
  context: {cluster: testenv, user: $1}
current-context: testenv
EOF
}
kubeconfig admin; kubeconfig kcm; kubeconfig sched

# ---------------------------------------------------------------- etcd
log "etcd on 127.0.0.1:$ETCD_PORT"
"$BIN/etcd" \
  --name=testenv \
  --data-dir="$W/etcd-data" \
  --listen-client-urls="http://127.0.0.1:$ETCD_PORT" \
  --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster="testenv=http://127.0.0.1:$ETCD_PEER_PORT" \
  --unsafe-no-fsync \
  --log-level=warn \
  > etcd.log 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$ETCD_PORT/health" >/dev/null && break; sleep 0.1
done
curl -sf "http://127.0.0.1:$ETCD_PORT/health" >&2; echo >&2

# ---------------------------------------------------------------- kube-apiserver
log "kube-apiserver on 127.0.0.1:$API_PORT"
t0=$(date +%s.%N)
"$BIN/kube-apiserver" \
  --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
  --bind-address=127.0.0.1 \
  --advertise-address=127.0.0.1 \
  --secure-port="$API_PORT" \
  --tls-cert-file="$W/apiserver.crt" \
  --tls-private-key-file="$W/apiserver.key" \
  --client-ca-file="$W/ca.crt" \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$W/sa.pub" \
  --service-account-signing-key-file="$W/sa.key" \
  --service-cluster-ip-range=10.0.0.0/24 \
  --authorization-mode=Node,RBAC \
  --cert-dir="$W/apiserver-certs" \
  > apiserver.log 2>&1 &
pids+=($!)
CURL=(curl -s --cacert "$W/ca.crt" --cert "$W/admin.crt" --key "$W/admin.key")
for _ in $(seq 600); do
  [[ "$("${CURL[@]}" "https://127.0.0.1:$API_PORT/readyz" || true)" == ok ]] && break; sleep 0.1
done
ready=$("${CURL[@]}" "https://127.0.0.1:$API_PORT/readyz")
log "readyz: $ready after $(python3 -c "print(round($(date +%s.%N)-$t0,1))")s"
[[ "$ready" == ok ]]
[[ "$(curl -sk --cert "$W/admin.crt" --key "$W/admin.key" "https://127.0.0.1:$API_PORT/readyz")" == ok ]]  # -k variant
"${CURL[@]}" "https://127.0.0.1:$API_PORT/version" >&2; echo >&2

# ---------------------------------------------------------------- controller-manager, scheduler
log "kube-controller-manager on 127.0.0.1:$KCM_PORT"
"$BIN/kube-controller-manager" \
  --kubeconfig="$W/kcm.kubeconfig" \
  --authentication-kubeconfig="$W/kcm.kubeconfig" \
  --authorization-kubeconfig="$W/kcm.kubeconfig" \
  --bind-address=127.0.0.1 \
  --secure-port="$KCM_PORT" \
  --cert-dir="$W/kcm-certs" \
  --leader-elect=false \
  --use-service-account-credentials=true \
  --service-account-private-key-file="$W/sa.key" \
  --root-ca-file="$W/ca.crt" \
  --cluster-signing-cert-file="$W/ca.crt" \
  --cluster-signing-key-file="$W/ca.key" \
  --service-cluster-ip-range=10.0.0.0/24 \
  > kcm.log 2>&1 &
pids+=($!)

log "kube-scheduler on 127.0.0.1:$SCHED_PORT"
"$BIN/kube-scheduler" \
  --kubeconfig="$W/sched.kubeconfig" \
  --authentication-kubeconfig="$W/sched.kubeconfig" \
  --authorization-kubeconfig="$W/sched.kubeconfig" \
  --bind-address=127.0.0.1 \
  --secure-port="$SCHED_PORT" \
  --cert-dir="$W/sched-certs" \
  --leader-elect=false \
  > sched.log 2>&1 &
pids+=($!)

# ---------------------------------------------------------------- kwok
log "kwok on 127.0.0.1:$KWOK_PORT"
"$BIN/kwok" \
  --kubeconfig="$W/admin.kubeconfig" \
  --config="$here/kwok/stages.yaml" \
  --server-address="127.0.0.1:$KWOK_PORT" \
  --manage-all-nodes=false \
  --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
  --node-lease-duration-seconds=40 \
  --cidr=10.244.0.0/16 \
  --node-ip=10.244.0.1 \
  > kwok.log 2>&1 &
pids+=($!)

# ---------------------------------------------------------------- checks
export KUBECONFIG="$W/admin.kubeconfig"
k() { "$KUBECTL" "$@"; }
k version >&2 || true
k get --raw=/readyz?verbose | tail -1 >&2
k get ns >&2

k apply -f - >&2 <<'EOF'
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-0
  annotations:
    kwok.x-k8s.io/node: fake
  labels:
    type: kwok
    kubernetes.io/hostname: kwok-node-0
spec:
  taints:
  - {key: kwok.x-k8s.io/node, value: fake, effect: NoSchedule}
EOF
k wait --for=condition=Ready node/kwok-node-0 --timeout=60s >&2

# default ServiceAccount is created by the controller-manager
for _ in $(seq 300); do k get sa default >/dev/null 2>&1 && break; sleep 0.2; done
k get sa default >&2

k apply -f - >&2 <<'EOF'
apiVersion: apps/v1
kind: Deployment
metadata: {name: smoke}
spec:
  replicas: 2
  selector: {matchLabels: {app: smoke}}
  template:
    metadata: {labels: {app: smoke}}
    spec:
      tolerations:
      - {key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}
      containers:
      - {name: c, image: example.invalid/smoke:1}
EOF
k rollout status deploy/smoke --timeout=120s >&2
k get nodes,pods -o wide >&2
log "OK"
