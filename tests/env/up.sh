#!/usr/bin/env bash
# Starts the local test environment: a real Kubernetes control plane (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler), kwok as the kubelet of simulated nodes, moto's
# AWS server, an OCI registry (distribution) behind ECR, the gap layer in front of moto
# (gap/gap.py: what moto lacks, ECR images from the registry, fault injection, call log) and
# the node-join simulator (gap/nodejoin.py: instances become Nodes; image pulls).
# Everything listens on 127.0.0.1 only.
#
# Idempotent: when the environment is already up and healthy this prints so and exits 0;
# when a previous run left it half up (a process died, a failed start), it is torn down
# with down.sh and started afresh.
#
# Runtime state goes to tests/env/.run/ (PID files, logs, certificates, kubeconfigs, data);
# `source tests/env/.run/env` gives a shell the variables to reach it.
#
# Usage: tests/env/up.sh
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PID_DIR="${RUN_DIR}/pids"
LOG_DIR="${RUN_DIR}/logs"
PKI_DIR="${RUN_DIR}/pki"
KUBECONFIG_ADMIN="${RUN_DIR}/kubeconfig"
KUBECTL="${K8S_BIN}/kubectl"
APISERVER_URL="https://127.0.0.1:${APISERVER_PORT}"
MOTO_URL="http://127.0.0.1:${MOTO_PORT}"
GAP_URL="http://127.0.0.1:${GAP_PORT}"
REGISTRY_URL="http://127.0.0.1:${REGISTRY_PORT}"
REGISTRY_PASSWORD_FILE="${RUN_DIR}/registry.password"
# The processes up.sh starts, in start order.
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok moto registry gap nodejoin)

require_tools curl openssl setsid flock base64
take_env_lock

up_start="$(now_ms)"
phase_start="$up_start"
phase() { # phase NAME: close the previous phase's timer and print its duration
  local t; t="$(now_ms)"
  log "$1 ($(fmt_ms $(( t - phase_start ))))"
  phase_start="$t"
}

# ---- already up? -----------------------------------------------------------------------

apiserver_ready() {
  curl -fsS --max-time 2 --cacert "${PKI_DIR}/ca.crt" \
    --cert "${PKI_DIR}/admin.crt" --key "${PKI_DIR}/admin.key" \
    "${APISERVER_URL}/readyz" > /dev/null 2>&1
}
moto_ready() { curl -fsS --max-time 2 "${MOTO_URL}/moto-api/" > /dev/null 2>&1; }
gap_ready() { curl -fsS --max-time 2 "${GAP_URL}/_gap/health" > /dev/null 2>&1; }
# The registry's API root answers 200 only with valid credentials.
registry_ready() {
  curl -fsS --max-time 2 -u "AWS:$(cat "$REGISTRY_PASSWORD_FILE" 2> /dev/null)" \
    "${REGISTRY_URL}/v2/" > /dev/null 2>&1
}

all_running() {
  local c
  for c in "${COMPONENTS[@]}"; do
    is_our_process "${PID_DIR}/${c}.pid" || return 1
  done
  [[ -f "${RUN_DIR}/env" ]]
}

if [[ -d "$RUN_DIR" ]]; then
  if all_running && apiserver_ready && moto_ready && registry_ready && gap_ready; then
    log "test environment already up (source ${RUN_DIR}/env)"
    exit 0
  fi
  log "found a partial or stale environment in ${RUN_DIR}; tearing it down first"
  "${ENV_DIR}/down.sh"
fi

# ---- build (no-op when cached) ---------------------------------------------------------

"${ENV_DIR}/build.sh"
phase "build: binaries ready"

# A port already taken (another copy of the environment from another work tree, a
# developer's own moto) would make a component fail later with a less obvious error.
check_port_free() { # check_port_free PORT OVERRIDE_VAR
  if (exec 3<> "/dev/tcp/127.0.0.1/$1") 2> /dev/null; then
    die "port 127.0.0.1:$1 is in use; stop whatever listens there or set $2 to another port"
  fi
}
check_port_free "$ETCD_PORT" JOINTER_ETCD_PORT
check_port_free "$ETCD_PEER_PORT" JOINTER_ETCD_PEER_PORT
check_port_free "$APISERVER_PORT" JOINTER_APISERVER_PORT
check_port_free "$KCM_PORT" JOINTER_KCM_PORT
check_port_free "$SCHEDULER_PORT" JOINTER_SCHEDULER_PORT
check_port_free "$KWOK_PORT" JOINTER_KWOK_PORT
check_port_free "$MOTO_PORT" JOINTER_MOTO_PORT
check_port_free "$GAP_PORT" JOINTER_GAP_PORT
check_port_free "$REGISTRY_PORT" JOINTER_REGISTRY_PORT

mkdir -p "$PID_DIR" "$LOG_DIR" "$PKI_DIR"

# On any failure below (a failed command or a die), show the tail of the log of what was
# starting and leave the state in place for inspection; the next up.sh (or down.sh) cleans
# it up. An EXIT trap rather than ERR, because die() exits without a failing command.
current_component=""
up_succeeded=0
on_exit() {
  local rc=$?
  [[ "$up_succeeded" == 1 ]] && return 0
  if [[ -n "$current_component" && -f "${LOG_DIR}/${current_component}.log" ]]; then
    log "last lines of ${LOG_DIR}/${current_component}.log:"
    tail -n 25 "${LOG_DIR}/${current_component}.log" >&2 || true
  fi
  log "up.sh failed (exit ${rc}); logs are in ${LOG_DIR}; run tests/env/down.sh to clean up"
}
trap on_exit EXIT

# ---- certificates ----------------------------------------------------------------------
# One throwaway CA signs the API server's serving certificate and one client certificate
# per identity. Client certificates (not a token file) because every client in the
# project (kubectl, helm, the Rust kube client) supports them through a plain kubeconfig,
# and the organisation field maps straight onto RBAC groups.

openssl_quiet() { openssl "$@" 2> /dev/null; }

openssl_quiet req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout "${PKI_DIR}/ca.key" -out "${PKI_DIR}/ca.crt" -days 3650 \
  -subj "/CN=jointer-testenv-ca"

# issue_cert NAME SUBJECT EXTENSIONS
issue_cert() {
  local name="$1" subj="$2" ext="$3"
  openssl_quiet req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "${PKI_DIR}/${name}.key" -out "${PKI_DIR}/${name}.csr" -subj "$subj"
  openssl_quiet x509 -req -in "${PKI_DIR}/${name}.csr" -CA "${PKI_DIR}/ca.crt" \
    -CAkey "${PKI_DIR}/ca.key" -CAcreateserial -days 3650 -out "${PKI_DIR}/${name}.crt" \
    -extfile <(printf '%s\n' "$ext")
  rm -f "${PKI_DIR}/${name}.csr"
}

# The serving certificate names every way a client may address the API server: the
# loopback address we use, and the in-cluster names/ClusterIP that workloads would use.
issue_cert apiserver "/CN=kube-apiserver" "$(cat <<'EOF'
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:10.96.0.1
EOF
)"
client_ext=$'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth'
# system:masters: the admin (tests, humans) and kwok, which plays the kubelet of any
# number of nodes and so cannot be confined by the per-node Node authorizer.
issue_cert admin "/O=system:masters/CN=jointer-admin" "$client_ext"
issue_cert kwok "/O=system:masters/CN=kwok" "$client_ext"
# These user names are the ones the built-in RBAC bootstrap policy grants rights to.
issue_cert kube-controller-manager "/CN=system:kube-controller-manager" "$client_ext"
issue_cert kube-scheduler "/CN=system:kube-scheduler" "$client_ext"

# The front-proxy (request-header) CA and the client the API server presents to aggregated
# API servers. Without it the controller-manager and scheduler log errors about the
# missing requestheader CA, and an aggregated API could not authenticate requests.
openssl_quiet req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout "${PKI_DIR}/front-proxy-ca.key" -out "${PKI_DIR}/front-proxy-ca.crt" -days 3650 \
  -subj "/CN=jointer-testenv-front-proxy-ca"
openssl_quiet req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout "${PKI_DIR}/front-proxy-client.key" -out "${PKI_DIR}/front-proxy-client.csr" \
  -subj "/CN=front-proxy-client"
openssl_quiet x509 -req -in "${PKI_DIR}/front-proxy-client.csr" \
  -CA "${PKI_DIR}/front-proxy-ca.crt" -CAkey "${PKI_DIR}/front-proxy-ca.key" -CAcreateserial \
  -days 3650 -out "${PKI_DIR}/front-proxy-client.crt" -extfile <(printf '%s\n' "$client_ext")
rm -f "${PKI_DIR}/front-proxy-client.csr"

# Service-account tokens are signed with RSA (RS256), the algorithm every consumer of
# projected tokens accepts.
openssl_quiet genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "${PKI_DIR}/sa.key"
openssl_quiet pkey -in "${PKI_DIR}/sa.key" -pubout -out "${PKI_DIR}/sa.pub"
chmod 600 "${PKI_DIR}"/*.key

# write_kubeconfig FILE USER: credentials embedded, so the file works from any directory.
write_kubeconfig() {
  local file="$1" user="$2"
  cat > "$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: ${CLUSTER_NAME}
  cluster:
    server: ${APISERVER_URL}
    certificate-authority-data: $(base64 -w0 < "${PKI_DIR}/ca.crt")
users:
- name: ${user}
  user:
    client-certificate-data: $(base64 -w0 < "${PKI_DIR}/${user}.crt")
    client-key-data: $(base64 -w0 < "${PKI_DIR}/${user}.key")
contexts:
- name: ${CLUSTER_NAME}
  context:
    cluster: ${CLUSTER_NAME}
    user: ${user}
current-context: ${CLUSTER_NAME}
EOF
  chmod 600 "$file"
}
write_kubeconfig "$KUBECONFIG_ADMIN" admin
for user in kwok kube-controller-manager kube-scheduler; do
  write_kubeconfig "${RUN_DIR}/${user}.kubeconfig" "$user"
done
# Loopback only, enforced: everything the API server would send into the cluster network
# (admission webhooks and aggregated APIs referenced by Service, the pod/service/node
# "proxy" subresources, kubelet logs/exec) goes through the "cluster" egress selector. It
# is pointed at a Unix socket nothing listens on, so such calls fail on this machine
# instead of dialling a ClusterIP (10.96.x.x) or pod/node address that does not exist here.
# Webhooks by URL (a controller's webhook on 127.0.0.1) use "controlplane" and still work.
no_egress_socket="${RUN_DIR}/no-cluster-egress.sock"
if (( ${#no_egress_socket} > 100 )); then # sockaddr_un paths are limited to 108 bytes
  no_egress_socket="/tmp/jointer-testenv-no-cluster-egress.sock"
fi
cat > "${RUN_DIR}/egress-selector.yaml" <<EOF
apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: ${no_egress_socket}
EOF
# The audit log records every write with its user agent, so tests can prove a converged
# `jointer apply` writes nothing to the API server, and every request of the admin user (which
# jointer runs as in the tests) so its request counts can be measured; other reads are not logged.
cat > "${RUN_DIR}/audit-policy.yaml" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create, update, patch, delete, deletecollection]
- level: Metadata
  users: [jointer-admin]
- level: None
EOF
phase "certificates and kubeconfigs written"

# ---- process management ----------------------------------------------------------------

# start_process NAME EXE [ARGS...]: runs EXE in its own session (a Ctrl-C in the terminal
# that ran up.sh, or the end of the calling shell, must not take the environment down),
# with stdin closed and output in logs/NAME.log (standard output in START_STDOUT instead
# when that is set). The PID is recorded by the process itself right before it execs, so
# the PID file always names the real program, never a wrapper. Every other inherited file
# descriptor is closed first: a daemon must not keep a lock that whatever ran up.sh holds
# (`flock /tmp/some.lock up.sh` would otherwise stay locked for as long as the environment runs).
start_process() {
  local name="$1"; shift
  local pidfile="${PID_DIR}/${name}.pid"
  current_component="$name"
  # shellcheck disable=SC2016 # $$ and $@ are for the inner shell
  setsid bash -c 'for fd in /proc/$$/fd/*; do fd="${fd##*/}"; (( fd > 2 )) && eval "exec ${fd}>&-"; done
    echo "$$ $1" > "$0"; exec "$@"' "$pidfile" "$@" \
    >> "${START_STDOUT:-${LOG_DIR}/${name}.log}" 2>> "${LOG_DIR}/${name}.log" < /dev/null 8<&- &
  for _ in $(seq 1 50); do
    [[ -s "$pidfile" ]] && return 0
    sleep 0.1
  done
  die "${name} did not start"
}

# wait_until NAME TIMEOUT_SECONDS COMMAND...: polls COMMAND until it succeeds, failing
# early if NAME's process has exited (its log says why).
wait_until() {
  local name="$1" timeout="$2"; shift 2
  local deadline=$(( $(date +%s) + timeout ))
  until "$@" > /dev/null 2>&1; do
    # Twice, a moment apart: while the starter shell execs the program, /proc/PID/cmdline can
    # read empty for an instant, and a live process must not be taken for a dead one.
    if ! is_our_process "${PID_DIR}/${name}.pid"; then
      sleep 0.3
      is_our_process "${PID_DIR}/${name}.pid" || die "${name} exited during startup"
    fi
    if (( $(date +%s) >= deadline )); then
      die "${name} not ready after ${timeout}s"
    fi
    sleep 0.2
  done
}

# ---- etcd ------------------------------------------------------------------------------
# --unsafe-no-fsync: the data is thrown away with the environment, and fsync dominates
# apiserver write latency on a shared disk.
start_process etcd "${ETCD_BIN}/etcd" \
  --name=testenv \
  --data-dir="${RUN_DIR}/etcd-data" \
  --listen-client-urls="http://127.0.0.1:${ETCD_PORT}" \
  --advertise-client-urls="http://127.0.0.1:${ETCD_PORT}" \
  --listen-peer-urls="http://127.0.0.1:${ETCD_PEER_PORT}" \
  --initial-advertise-peer-urls="http://127.0.0.1:${ETCD_PEER_PORT}" \
  --initial-cluster="testenv=http://127.0.0.1:${ETCD_PEER_PORT}" \
  --unsafe-no-fsync=true \
  --log-level=warn
wait_until etcd 30 curl -fsS --max-time 2 "http://127.0.0.1:${ETCD_PORT}/health"
phase "etcd ${ETCD_VERSION} ready on 127.0.0.1:${ETCD_PORT}"

# ---- kube-apiserver --------------------------------------------------------------------
# --endpoint-reconciler-type=none: the API server would otherwise publish its own address
#   as the endpoints of the `kubernetes` Service, and a loopback address is invalid there.
# --service-cluster-ip-range: only a range to allocate ClusterIPs from; nothing routes it.
# Node,RBAC: the authorizers of a real cluster, so RBAC mistakes in our manifests show up.
APISERVER_COMMAND=("${K8S_BIN}/kube-apiserver" \
  --etcd-servers="http://127.0.0.1:${ETCD_PORT}" \
  --bind-address=127.0.0.1 \
  --advertise-address=127.0.0.1 \
  --secure-port="${APISERVER_PORT}" \
  --tls-cert-file="${PKI_DIR}/apiserver.crt" \
  --tls-private-key-file="${PKI_DIR}/apiserver.key" \
  --client-ca-file="${PKI_DIR}/ca.crt" \
  --authorization-mode=Node,RBAC \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="${PKI_DIR}/sa.pub" \
  --service-account-signing-key-file="${PKI_DIR}/sa.key" \
  --service-cluster-ip-range=10.96.0.0/16 \
  --allow-privileged=true \
  --endpoint-reconciler-type=none \
  --egress-selector-config-file="${RUN_DIR}/egress-selector.yaml" \
  --audit-policy-file="${RUN_DIR}/audit-policy.yaml" \
  --audit-log-path="${RUN_DIR}/audit.log" \
  --audit-log-maxsize=1000 \
  --audit-log-maxbackup=1 \
  --requestheader-client-ca-file="${PKI_DIR}/front-proxy-ca.crt" \
  --requestheader-allowed-names=front-proxy-client \
  --requestheader-username-headers=X-Remote-User \
  --requestheader-group-headers=X-Remote-Group \
  --requestheader-extra-headers-prefix=X-Remote-Extra- \
  --proxy-client-cert-file="${PKI_DIR}/front-proxy-client.crt" \
  --proxy-client-key-file="${PKI_DIR}/front-proxy-client.key" \
  --profiling=false \
  --v=1)
# One argument per line, for the test that starts a second API server on the same etcd and
# restarts it under a running controller (controller/tests/it/outage.rs).
printf '%s\n' "${APISERVER_COMMAND[@]}" > "${RUN_DIR}/kube-apiserver.command"
start_process kube-apiserver "${APISERVER_COMMAND[@]}"
wait_until kube-apiserver 90 apiserver_ready
phase "kube-apiserver ${K8S_VERSION} ready on ${APISERVER_URL}"

# ---- kube-controller-manager and kube-scheduler ----------------------------------------
# --use-service-account-credentials: each controller acts as its own service account, the
#   way kubeadm runs it; the bootstrap RBAC rights are granted per controller.
# --cluster-signing-*: lets CertificateSigningRequests be signed (kubelet-style joins).
# --kube-api-qps/burst (both components): the scale harness creates thousands of pods at once,
#   and the client defaults (20 QPS for the ReplicaSet controller, 50 for kube-scheduler's
#   bindings) would measure those rate limits instead of the controller under test.
# --node-monitor-grace-period: a node is NotReady when its Lease has not been renewed for
#   this long. kwok renews every 30 s (kwok/config.yaml); at 1,000 nodes on two cores a renewal
#   can come minutes late, and the default 50 s had hundreds of healthy nodes' pods evicted.
#   No test relies on a node going NotReady by itself.
start_process kube-controller-manager "${K8S_BIN}/kube-controller-manager" \
  --kubeconfig="${RUN_DIR}/kube-controller-manager.kubeconfig" \
  --authentication-kubeconfig="${RUN_DIR}/kube-controller-manager.kubeconfig" \
  --authorization-kubeconfig="${RUN_DIR}/kube-controller-manager.kubeconfig" \
  --bind-address=127.0.0.1 \
  --secure-port="${KCM_PORT}" \
  --leader-elect=false \
  --use-service-account-credentials=true \
  --service-account-private-key-file="${PKI_DIR}/sa.key" \
  --root-ca-file="${PKI_DIR}/ca.crt" \
  --cluster-signing-cert-file="${PKI_DIR}/ca.crt" \
  --cluster-signing-key-file="${PKI_DIR}/ca.key" \
  --cluster-name="${CLUSTER_NAME}" \
  --kube-api-qps=200 \
  --kube-api-burst=400 \
  --node-monitor-grace-period=240s \
  --profiling=false \
  --v=1
start_process kube-scheduler "${K8S_BIN}/kube-scheduler" \
  --kubeconfig="${RUN_DIR}/kube-scheduler.kubeconfig" \
  --authentication-kubeconfig="${RUN_DIR}/kube-scheduler.kubeconfig" \
  --authorization-kubeconfig="${RUN_DIR}/kube-scheduler.kubeconfig" \
  --bind-address=127.0.0.1 \
  --secure-port="${SCHEDULER_PORT}" \
  --leader-elect=false \
  --kube-api-qps=200 \
  --kube-api-burst=400 \
  --profiling=false \
  --v=1
# /healthz is served without credentials (always-allowed path); the certificates are
# self-signed in memory, hence -k on these loopback-only probes.
current_component=kube-controller-manager
wait_until kube-controller-manager 60 curl -fsSk --max-time 2 "https://127.0.0.1:${KCM_PORT}/healthz"
current_component=kube-scheduler
wait_until kube-scheduler 60 curl -fsSk --max-time 2 "https://127.0.0.1:${SCHEDULER_PORT}/healthz"
# The service-account controller creating default/default is the sign that the
# controllers run and can write; pods cannot be admitted in a namespace before it.
current_component=kube-controller-manager
wait_until kube-controller-manager 60 \
  "$KUBECTL" --kubeconfig="$KUBECONFIG_ADMIN" -n default get serviceaccount default
phase "kube-controller-manager and kube-scheduler ready (default/default ServiceAccount exists)"

# ---- kwok ------------------------------------------------------------------------------
# Node Leases (kwok/config.yaml): kwok then renews them the way a kubelet does; without them
#   its status heartbeat (about once a minute) is slower than the controller-manager's grace
#   period and nodes flap NotReady for a few seconds every minute.
# Manages only nodes annotated kwok.x-k8s.io/node=fake, so a test can also create Node
# objects that nothing answers for (a node that never becomes Ready). A clean HOME keeps
# a developer's ~/.kwok configuration out of the run. kwok/stages.yaml: kwok's default pod
# stages plus the image-pull gate for the test world's ECR images (the node-join simulator
# annotates such pods once it has looked their images up in the registry).
mkdir -p "${RUN_DIR}/kwok-home"
HOME="${RUN_DIR}/kwok-home" start_process kwok "${KWOK_BIN}/kwok" \
  --kubeconfig="${RUN_DIR}/kwok.kubeconfig" \
  --manage-all-nodes=false \
  --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
  --server-address="127.0.0.1:${KWOK_PORT}" \
  --config="${ENV_DIR}/kwok/config.yaml" \
  --config="${ENV_DIR}/kwok/stages.yaml" \
  --cidr=10.244.0.1/16
wait_until kwok 30 curl -fsS --max-time 2 "http://127.0.0.1:${KWOK_PORT}/healthz"
phase "kwok ${KWOK_VERSION} ready"

# ---- moto ------------------------------------------------------------------------------
# MOTO_IAM_LOAD_MANAGED_POLICIES: without it AWS-managed policies (AmazonEKSWorkerNodePolicy,
#   ...) do not exist and cannot be attached.
# MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION: RunInstances/CreateFleet reject unknown
#   instance types, as AWS does.
# gap/moto_server.py is moto's server with its per-resource tag lookup made a table read
#   (moto scans every tag in the region for each resource it lists; see the file).
MOTO_IAM_LOAD_MANAGED_POLICIES=true MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION=true \
  start_process moto "$MOTO_PYTHON" "${ENV_DIR}/gap/moto_server.py" -H 127.0.0.1 -p "$MOTO_PORT"
wait_until moto 60 moto_ready
phase "moto ${MOTO_VERSION} ready on ${MOTO_URL}"

# ---- the registry (distribution) -------------------------------------------------------
# Where clients push the images of ECR repositories: the gap layer's GetAuthorizationToken
# answers proxyEndpoint = this registry and a token for user AWS with a password made for
# this start (htpasswd, bcrypt). Filesystem storage under .run/registry/, deletes enabled,
# and no blob descriptor cache, so the gap layer's reset (which empties the storage) is seen
# at once. Its access log (standard output, combined format) goes to .run/registry.log, where
# the gap layer reads the requests since the last reset; its own log to logs/registry.log.
# OTEL_TRACES_EXPORTER=none: no trace exporter dialling a collector.
mkdir -p "${RUN_DIR}/registry"
(umask 077 && openssl rand -hex 24 > "$REGISTRY_PASSWORD_FILE")
printf 'AWS:%s\n' "$("${REGISTRY_BIN}/registry" bcrypt < "$REGISTRY_PASSWORD_FILE")" \
  > "${RUN_DIR}/registry.htpasswd"
cat > "${RUN_DIR}/registry.yaml" <<EOF
version: 0.1
log:
  level: info
  formatter: json
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: ${RUN_DIR}/registry
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: 127.0.0.1:${REGISTRY_PORT}
  secret: $(openssl rand -hex 16)
  headers:
    X-Content-Type-Options: [nosniff]
auth:
  htpasswd:
    realm: jointer-testenv-registry
    path: ${RUN_DIR}/registry.htpasswd
EOF
OTEL_TRACES_EXPORTER=none START_STDOUT="${RUN_DIR}/registry.log" \
  start_process registry "${REGISTRY_BIN}/registry" serve "${RUN_DIR}/registry.yaml"
wait_until registry 30 registry_ready
phase "registry ${REGISTRY_VERSION} ready on ${REGISTRY_URL}"

# ---- the gap layer and the node-join simulator (gap/) -----------------------------------
# The gap layer answers what moto lacks (EKS access entries, pod identity, add-ons, a
# DescribeCluster pointing here, pricing, EKS AMI parameters, a price-aware CreateFleet)
# and forwards everything else to moto; clients reach AWS only through it. The simulator
# turns the cluster's running instances into Nodes (kwok then makes them Ready).
start_process gap "$MOTO_PYTHON" "${ENV_DIR}/gap/gap.py" \
  --port="$GAP_PORT" \
  --moto-url="$MOTO_URL" \
  --apiserver-url="$APISERVER_URL" \
  --ca-file="${PKI_DIR}/ca.crt" \
  --world-file="${RUN_DIR}/world.json" \
  --region="$AWS_REGION_DEFAULT" \
  --registry-url="$REGISTRY_URL" \
  --registry-password-file="$REGISTRY_PASSWORD_FILE" \
  --registry-storage="${RUN_DIR}/registry" \
  --registry-access-log="${RUN_DIR}/registry.log"
start_process nodejoin "$MOTO_PYTHON" "${ENV_DIR}/gap/nodejoin.py" \
  --moto-url="$MOTO_URL" \
  --apiserver-url="$APISERVER_URL" \
  --ca-file="${PKI_DIR}/ca.crt" \
  --client-cert="${PKI_DIR}/admin.crt" \
  --client-key="${PKI_DIR}/admin.key" \
  --cluster="$CLUSTER_NAME" \
  --region="$AWS_REGION_DEFAULT" \
  --kubelet-version="$K8S_VERSION" \
  --delay-ms="$NODE_JOIN_DELAY_MS" \
  --poll-ms="$NODE_JOIN_POLL_MS" \
  --registry-url="$REGISTRY_URL" \
  --registry-password-file="$REGISTRY_PASSWORD_FILE" \
  --ready-file="${RUN_DIR}/nodejoin.ready"
current_component=gap
wait_until gap 30 gap_ready
phase "gap layer ready on ${GAP_URL}"

# ---- the system node -------------------------------------------------------------------
# Stands for the managed node group that runs cluster add-ons and the controller in a real
# EKS cluster (m5.xlarge-sized). Status is sent on create, as a kubelet does when it
# registers; kwok keeps the capacity it finds and adds conditions and heartbeats.
current_component=kwok
"$KUBECTL" --kubeconfig="$KUBECONFIG_ADMIN" create -f - > /dev/null <<EOF
apiVersion: v1
kind: Node
metadata:
  name: system-0
  annotations:
    kwok.x-k8s.io/node: fake
  labels:
    jointer.dev/system: "true"
    kubernetes.io/hostname: system-0
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    node.kubernetes.io/instance-type: m5.xlarge
    topology.kubernetes.io/region: ${AWS_REGION_DEFAULT}
    topology.kubernetes.io/zone: ${AWS_REGION_DEFAULT}a
spec: {}
status:
  capacity: {cpu: "4", memory: 16Gi, pods: "110"}
  allocatable: {cpu: "4", memory: 16Gi, pods: "110"}
EOF
wait_until kwok 60 "$KUBECTL" --kubeconfig="$KUBECONFIG_ADMIN" wait node/system-0 \
  --for=condition=Ready --timeout=5s
phase "node system-0 Ready"
# The simulator is ready after its first pass over moto's instances (it started above, so
# its start-up overlaps the system node's).
current_component=nodejoin
wait_until nodejoin 30 test -f "${RUN_DIR}/nodejoin.ready"
phase "node-join simulator running (registration delay ${NODE_JOIN_DELAY_MS} ms, poll ${NODE_JOIN_POLL_MS} ms)"

# ---- env file --------------------------------------------------------------------------
# Written last: its presence is part of what "up" means to the next up.sh.
# The AWS variables point every SDK at the gap layer (in front of moto) with dummy
# credentials; MOTO_URL is moto itself, for tests that must bypass the gap layer. Metadata
# lookups are disabled so nothing ever tries the instance metadata address, and profile/role
# variables from the caller's shell are dropped so real credentials can never be picked up.
{
  echo "# Generated by tests/env/up.sh: source this file to use the test environment."
  printf 'export KUBECONFIG=%q\n' "$KUBECONFIG_ADMIN"
  printf 'export AWS_ENDPOINT_URL=%q\n' "$GAP_URL"
  # Named for STS too: the Go SDK builds the STS client of its web-identity (IRSA) credentials
  # before it applies AWS_ENDPOINT_URL, and then reads only the service's own variable.
  printf 'export AWS_ENDPOINT_URL_STS=%q\n' "$GAP_URL"
  printf 'export JOINTER_GAP_URL=%q\n' "$GAP_URL"
  printf 'export MOTO_URL=%q\n' "$MOTO_URL"
  printf 'export AWS_REGION=%q\n' "$AWS_REGION_DEFAULT"
  printf 'export AWS_DEFAULT_REGION=%q\n' "$AWS_REGION_DEFAULT"
  echo 'export AWS_ACCESS_KEY_ID=testing'
  echo 'export AWS_SECRET_ACCESS_KEY=testing'
  echo 'export AWS_EC2_METADATA_DISABLED=true'
  echo 'unset AWS_PROFILE AWS_SESSION_TOKEN AWS_ROLE_ARN AWS_WEB_IDENTITY_TOKEN_FILE AWS_CONTAINER_CREDENTIALS_FULL_URI AWS_CONTAINER_CREDENTIALS_RELATIVE_URI'
  printf 'export JOINTER_TEST_CLUSTER=%q\n' "$CLUSTER_NAME"
  printf 'export JOINTER_TESTENV_RUN_DIR=%q\n' "$RUN_DIR"
  printf 'export JOINTER_TESTENV_PYTHON=%q\n' "$MOTO_PYTHON"
  printf 'export JOINTER_UPSTREAM_CRDS=%q\n' "${UPSTREAM_CRDS_DIR}/crds.yaml"
  printf 'export JOINTER_UPSTREAM_CONTROLLER=%q\n' "${UPSTREAM_CONTROLLER_DIR}/controller"
  printf 'export JOINTER_UPSTREAM_CHART=%q\n' "${UPSTREAM_CONTROLLER_DIR}/karpenter-${UPSTREAM_CONTROLLER_VERSION#v}.tgz"
  printf 'export JOINTER_TESTENV_REGISTRY=%q\n' "127.0.0.1:${REGISTRY_PORT}"
  # shellcheck disable=SC2016 # $PATH is expanded when the env file is sourced
  printf 'export PATH=%q:"$PATH"\n' "${K8S_BIN}:${ETCD_BIN}:${KWOK_BIN}:${HELM_BIN}"
} > "${RUN_DIR}/env"

up_succeeded=1
log "test environment up in $(fmt_ms $(( $(now_ms) - up_start ))): source ${RUN_DIR}/env"
