# shellcheck shell=bash disable=SC2034 # variables here are used by the scripts sourcing this file
# Shared settings for the test-environment scripts (sourced, not executed).
#
# Everything that names a version, a path or a port lives here so build.sh, up.sh,
# down.sh and world.sh can never disagree about them.

ENV_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
RUN_DIR="${ENV_DIR}/.run"

# Built binaries and the Python venv live outside the work tree: a fresh clone (CI, a new
# work tree) must not rebuild Kubernetes when the machine already has it.
CACHE_DIR="${JOINTER_CACHE:-${HOME:?set HOME or JOINTER_CACHE}/.cache/jointer/testenv}"

# --- versions ---------------------------------------------------------------------------
# Kubernetes and etcd versions are read from the committed wrapper go.mod files, so the
# module pins and the cache directory names cannot drift apart.
gomod_version() { # gomod_version FILE MODULE
  sed -nE "s#^[[:space:]]*(require[[:space:]]+)?$2[[:space:]]+(v[^[:space:]]+).*#\\2#p" "$1" | head -n1
}
K8S_VERSION="$(gomod_version "${ENV_DIR}/kube/go.mod" k8s.io/kubernetes)"
ETCD_VERSION="$(gomod_version "${ENV_DIR}/etcd/go.mod" go.etcd.io/etcd/server/v3)"
KWOK_VERSION="v0.7.0"   # v0.8.0 needs a newer Go than the machines have
HELM_VERSION="v3.19.5"  # same k8s.io client libraries (v0.34) as the control plane
MOTO_VERSION="5.2.5"    # keep in sync with requirements.txt
# Upstream Karpenter's AWS provider, whose own CRDs jointer's API is measured against (read
# from the committed upstream-crds/go.mod). Its module needs a newer Go than the machines':
# the module proxy serves this toolchain.
KARPENTER_VERSION="$(gomod_version "${ENV_DIR}/upstream-crds/go.mod" github.com/aws/karpenter-provider-aws)"
UPSTREAM_GOTOOLCHAIN="go1.27.3"
# Upstream Karpenter's controller itself, built from karpenter/go.mod: v1.15.0, the newest
# release whose core module (sigs.k8s.io/karpenter) the module proxy serves.
UPSTREAM_CONTROLLER_VERSION="$(gomod_version "${ENV_DIR}/karpenter/go.mod" github.com/aws/karpenter-provider-aws)"
# The CNCF distribution registry behind the gap layer's ECR (read from registry/go.mod).
REGISTRY_VERSION="$(gomod_version "${ENV_DIR}/registry/go.mod" github.com/distribution/distribution/v3)"

K8S_BIN="${CACHE_DIR}/kubernetes-${K8S_VERSION}"
ETCD_BIN="${CACHE_DIR}/etcd-${ETCD_VERSION}"
KWOK_BIN="${CACHE_DIR}/kwok-${KWOK_VERSION}"
HELM_BIN="${CACHE_DIR}/helm-${HELM_VERSION}"
MOTO_DIR="${CACHE_DIR}/moto-${MOTO_VERSION}"
UPSTREAM_CRDS_DIR="${CACHE_DIR}/karpenter-crds-${KARPENTER_VERSION}"
UPSTREAM_CONTROLLER_DIR="${CACHE_DIR}/karpenter-${UPSTREAM_CONTROLLER_VERSION}"
REGISTRY_BIN="${CACHE_DIR}/registry-${REGISTRY_VERSION}"
MOTO_PYTHON="${MOTO_DIR}/venv/bin/python"

# --- ports (loopback only) -------------------------------------------------------------
# Fixed defaults away from the components' usual ports so a developer's own cluster or
# moto on 5000 does not collide; each can be overridden from the environment.
ETCD_PORT="${JOINTER_ETCD_PORT:-23790}"
ETCD_PEER_PORT="${JOINTER_ETCD_PEER_PORT:-23791}"
APISERVER_PORT="${JOINTER_APISERVER_PORT:-26443}"
KCM_PORT="${JOINTER_KCM_PORT:-20257}"
SCHEDULER_PORT="${JOINTER_SCHEDULER_PORT:-20259}"
KWOK_PORT="${JOINTER_KWOK_PORT:-20247}"
MOTO_PORT="${JOINTER_MOTO_PORT:-25000}"
# The gap layer (gap/gap.py) in front of moto; AWS_ENDPOINT_URL points here.
GAP_PORT="${JOINTER_GAP_PORT:-25001}"
# The OCI registry (distribution) that ECR's GetAuthorizationToken points clients at.
REGISTRY_PORT="${JOINTER_REGISTRY_PORT:-25002}"

# --- node-join simulator (gap/nodejoin.py) ---------------------------------------------
# How long after its launch a cluster instance registers its Node, and how often moto is
# polled for instances. Read when up.sh starts the simulator.
NODE_JOIN_DELAY_MS="${JOINTER_NODE_JOIN_DELAY_MS:-2000}"
NODE_JOIN_POLL_MS="${JOINTER_NODE_JOIN_POLL_MS:-1000}"

CLUSTER_NAME="jointer-test"
AWS_REGION_DEFAULT="us-east-1"

# --- helpers ----------------------------------------------------------------------------
log() { printf '[testenv %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# require_tools TOOL...: fail early, naming what is missing, instead of midway through.
require_tools() {
  local t missing=()
  for t in "$@"; do command -v "$t" > /dev/null 2>&1 || missing+=("$t"); done
  (( ${#missing[@]} == 0 )) || die "missing tools: ${missing[*]}"
}

# Millisecond clock for phase timings.
now_ms() { date +%s%3N; }
fmt_ms() { awk -v ms="$1" 'BEGIN { printf "%.1fs", ms / 1000 }'; }

# is_our_process PIDFILE: the recorded PID is alive *and* still runs the program we
# started (its path is one of the command-line words: argv[0], or argv[1] for a script run
# by an interpreter). This guards against a stale PID file whose number the kernel has
# since given to something else: we only ever signal processes we can prove are ours.
is_our_process() {
  local pidfile="$1" pid exe_expected
  [[ -f "$pidfile" ]] || return 1
  read -r pid exe_expected < "$pidfile" || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  [[ -r "/proc/${pid}/cmdline" ]] || return 1
  # Zombies still have /proc entries but are not running.
  [[ "$(awk '{print $3}' "/proc/${pid}/stat" 2>/dev/null)" != "Z" ]] || return 1
  tr '\0' '\n' < "/proc/${pid}/cmdline" | grep -qxF -- "$exe_expected"
}

# take_env_lock: serialises up.sh and down.sh of this work tree, so two test processes that
# both call up.sh start one environment (the second waits, then finds it up). The lock is
# on lib.sh itself (no lock file to clean up), held on fd 8 until the script exits; up.sh
# calling down.sh already holds it, hence the variable. Started daemons must not inherit
# fd 8 (start_process closes it), or they would hold the lock forever.
take_env_lock() {
  [[ "${JOINTER_TESTENV_LOCKED:-}" == 1 ]] && return 0
  exec 8< "${ENV_DIR}/lib.sh"
  if ! flock -n 8; then
    log "waiting for another up.sh/down.sh of this work tree to finish"
    flock 8
  fi
  export JOINTER_TESTENV_LOCKED=1
}
