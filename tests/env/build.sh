#!/usr/bin/env bash
# Builds the test environment's binaries into a per-version cache outside the work tree:
#
#   ${JOINTER_CACHE:-$HOME/.cache/jointer/testenv}/<component>-<version>/
#
# No prebuilt Kubernetes/etcd binaries can be downloaded here, only Go modules and PyPI
# packages, so everything is compiled from the module proxy. A Kubernetes cold build takes
# tens of minutes on 2 cores, hence: each component is built only when its versioned
# directory is missing, into a temporary directory renamed into place at the end (a killed
# build never leaves a half-filled cache entry that would be mistaken for a finished one).
#
# Usage: tests/env/build.sh        (safe to run repeatedly; prints what it built and how long)
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ -n "$K8S_VERSION" ]] || die "cannot read the k8s.io/kubernetes version from kube/go.mod"
[[ -n "$ETCD_VERSION" ]] || die "cannot read the etcd version from etcd/go.mod"
[[ -n "$REGISTRY_VERSION" ]] || die "cannot read the distribution version from registry/go.mod"

require_tools go python3 flock nice
mkdir -p "$CACHE_DIR"

# One build at a time per machine: the machines have 2 cores and other work (the Rust
# build) runs beside us, and two concurrent up.sh calls must not both compile.
exec 9> "${CACHE_DIR}/.build.lock"
if ! flock -n 9; then
  log "another build.sh holds ${CACHE_DIR}/.build.lock; waiting for it"
  flock 9
fi

# Module-mode builds pinned by the committed go.sum files; the toolchain on the machine is
# used as is (GOTOOLCHAIN=local: no toolchain download), and static binaries (no cgo) run
# anywhere on the machine. GOWORK=off so a go.work higher up cannot change what we build.
export CGO_ENABLED=0 GOTOOLCHAIN=local GOWORK=off GOFLAGS="-mod=readonly -buildvcs=false"

# `nice -n 19`: the compile must yield to everything else on the machine.
go_quiet() { nice -n 19 go "$@"; }

built_any=0

# build_component NAME VERSION DIR FUNCTION: run FUNCTION TMPDIR unless DIR exists.
build_component() {
  local name="$1" version="$2" dest="$3" fn="$4"
  if [[ -d "$dest" ]]; then
    log "${name} ${version}: cached in ${dest}"
    return 0
  fi
  local tmp="${dest}.partial.$$" start
  rm -rf "$tmp"
  mkdir -p "$tmp"
  # A failed or interrupted build must not leave its partial directory behind.
  trap 'rm -rf "'"$tmp"'"' EXIT
  start="$(now_ms)"
  log "${name} ${version}: building (this can take a while on a cold machine)"
  "$fn" "$tmp"
  printf 'component=%s\nversion=%s\nbuilt=%s\ngo=%s\n' \
    "$name" "$version" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(go env GOVERSION)" > "${tmp}/BUILD_INFO"
  mv "$tmp" "$dest"
  trap - EXIT
  log "${name} ${version}: built in $(fmt_ms $(( $(now_ms) - start )))"
  built_any=1
}

build_etcd() {
  local out="$1"
  (cd "${ENV_DIR}/etcd" && go_quiet build -trimpath -ldflags "-s -w" -o "${out}/etcd" .)
}

build_kubernetes() {
  local out="$1" major minor ldflags pkg bin t
  major="${K8S_VERSION#v}"; major="${major%%.*}"
  minor="${K8S_VERSION#v*.}"; minor="${minor%%.*}"
  # Without these the server reports v0.0.0 from /version and clients that gate features
  # on the server version (kubectl, helm, our own controller) misbehave.
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X ${pkg}.gitVersion=${K8S_VERSION}"
    ldflags+=" -X ${pkg}.gitMajor=${major} -X ${pkg}.gitMinor=${minor}"
    ldflags+=" -X ${pkg}.gitTreeState=clean"
    ldflags+=" -X ${pkg}.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  done
  # One binary per `go build`, sequentially: the shared packages are compiled once into the
  # Go build cache by the first and reused by the others, and per-binary timing is visible.
  for bin in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
    t="$(now_ms)"
    log "  ${bin}: compiling"
    (cd "${ENV_DIR}/kube" && go_quiet build -trimpath -ldflags "$ldflags" -o "${out}/${bin}" "./cmd/${bin}")
    log "  ${bin}: done in $(fmt_ms $(( $(now_ms) - t )))"
  done
}

build_kwok() {
  local out="$1"
  # kwok's module has no replace directives, so a plain `go install pkg@version` works.
  GOBIN="$out" GOFLAGS="-buildvcs=false" go_quiet install -trimpath -ldflags "-s -w" \
    "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}"
}

build_helm() {
  local out="$1" ldflags="-s -w" pkg
  # The same variables helm's own Makefile sets: its version, and the Kubernetes version
  # its client libraries implement (used for chart kubeVersion checks and linting).
  ldflags+=" -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
  ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ldflags+=" -X ${pkg}.k8sVersionMajor=1 -X ${pkg}.k8sVersionMinor=34"
  done
  GOBIN="$out" GOFLAGS="-buildvcs=false" go_quiet install -trimpath -ldflags "$ldflags" \
    "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
}

# Upstream's CRDs as its module embeds them, plus the CapacityBuffer CRD it ships beside them.
build_upstream_crds() {
  local out="$1" dir
  (cd "${ENV_DIR}/upstream-crds" && GOTOOLCHAIN="$UPSTREAM_GOTOOLCHAIN" \
    go_quiet build -trimpath -ldflags "-s -w" -o "${out}/upstream-crds" .)
  "${out}/upstream-crds" > "${out}/crds.yaml"
  dir="$(cd "${ENV_DIR}/upstream-crds" && GOTOOLCHAIN="$UPSTREAM_GOTOOLCHAIN" \
    go list -m -f '{{.Dir}}' github.com/aws/karpenter-provider-aws)"
  printf -- '---\n' >> "${out}/crds.yaml"
  cat "${dir}/pkg/apis/crds/autoscaling.x-k8s.io_capacitybuffers.yaml" >> "${out}/crds.yaml"
}

# Upstream Karpenter's AWS controller, and its chart as upstream's release packages it: the
# module's charts/karpenter with crds/ filled from pkg/apis/crds (in the repository crds/ holds
# symlinks, which module zips drop), versioned like the controller.
build_upstream_controller() {
  local out="$1" dir version="${UPSTREAM_CONTROLLER_VERSION#v}"
  (cd "${ENV_DIR}/karpenter" && GOTOOLCHAIN="$UPSTREAM_GOTOOLCHAIN" \
    go_quiet build -trimpath -ldflags "-s -w" -o "${out}/controller" \
    github.com/aws/karpenter-provider-aws/cmd/controller)
  dir="$(cd "${ENV_DIR}/karpenter" && GOTOOLCHAIN="$UPSTREAM_GOTOOLCHAIN" \
    go list -m -f '{{.Dir}}' github.com/aws/karpenter-provider-aws)"
  mkdir -p "${out}/src"
  cp -R "${dir}/charts/karpenter" "${out}/src/karpenter"
  chmod -R u+w "${out}/src"
  rm -rf "${out}/src/karpenter/crds"
  mkdir "${out}/src/karpenter/crds"
  cp "${dir}"/pkg/apis/crds/*.yaml "${out}/src/karpenter/crds/"
  "${HELM_BIN}/helm" package --version "$version" --app-version "$version" \
    --destination "$out" "${out}/src/karpenter" > /dev/null
  rm -rf "${out}/src"
}

# The CNCF distribution registry, through the wrapper module (only the storage drivers and
# the auth the test environment uses); the same binary hashes the htpasswd password.
build_registry() {
  local out="$1"
  (cd "${ENV_DIR}/registry" && go_quiet build -trimpath \
    -ldflags "-s -w -X github.com/distribution/distribution/v3/version.version=${REGISTRY_VERSION}" \
    -o "${out}/registry" .)
}

build_moto() {
  local out="$1"
  # The venv is built in the temporary directory and then moved; that is fine because we
  # only ever run it as `venv/bin/python -m ...` (the interpreter finds its venv from its
  # own location), never through the console scripts whose shebangs hold the build path.
  # Pins for moto and every transitive dependency are committed in requirements.txt.
  python3 -m venv "${out}/venv"
  "${out}/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    -r "${ENV_DIR}/requirements.txt"
}

build_component etcd "$ETCD_VERSION" "$ETCD_BIN" build_etcd
build_component kubernetes "$K8S_VERSION" "$K8S_BIN" build_kubernetes
build_component kwok "$KWOK_VERSION" "$KWOK_BIN" build_kwok
build_component helm "$HELM_VERSION" "$HELM_BIN" build_helm
build_component moto "$MOTO_VERSION" "$MOTO_DIR" build_moto
build_component karpenter-crds "$KARPENTER_VERSION" "$UPSTREAM_CRDS_DIR" build_upstream_crds
build_component registry "$REGISTRY_VERSION" "$REGISTRY_BIN" build_registry
build_component karpenter "$UPSTREAM_CONTROLLER_VERSION" "$UPSTREAM_CONTROLLER_DIR" build_upstream_controller

if [[ "$built_any" == 0 ]]; then
  log "all components cached under ${CACHE_DIR}"
fi
