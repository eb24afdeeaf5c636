#!/usr/bin/env bash
# Build pinned, real Kubernetes control-plane binaries for integration tests:
# kube-apiserver, kube-scheduler and kube-controller-manager (its resourceclaim controller
# creates the ResourceClaims of pods that use ResourceClaimTemplates) from k8s.io/kubernetes,
# and the etcd server that Kubernetes release pins, all from the Go module proxy with the local
# Go toolchain.
#
# Output: ${FAIRGPU_KUBE_CACHE:-$HOME/.cache/fairgpu/kube}/v<k8s-version>/
#           kube-apiserver  kube-scheduler  kube-controller-manager  etcd
# Only the binaries missing from that directory are built (a cache made before
# kube-controller-manager was added gets just that one); if none is missing the script exits
# at once. The last line printed on stdout is always the binaries directory, so callers can
# do: dir=$(build-control-plane.sh | tail -n1)
#
# Environment:
#   FAIRGPU_KUBE_CACHE     cache root (default ~/.cache/fairgpu/kube)
#   FAIRGPU_K8S_VERSION    Kubernetes release (default below; must be a 1.x.y tag)
#   FAIRGPU_ETCD_VERSION   etcd server release (default: the one that release pins)
#   FAIRGPU_BUILD_JOBS     go build -p value (default 2)
#
# k8s.io/kubernetes is not meant to be consumed as a module: its go.mod requires every
# staging module (k8s.io/api, k8s.io/client-go, ...) at v0.0.0 and replaces it with
# ./staging/src/... . A throwaway wrapper module requires k8s.io/kubernetes and replaces each of
# those staging modules with its published v0.<minor>.<patch> version instead. `go install
# pkg@version` refuses modules with replace directives, so etcd is built from a wrapper too.
set -euo pipefail

# Newest 1.34 patch whose module the Go proxy and checksum database both serve.
K8S_VERSION="${FAIRGPU_K8S_VERSION:-1.34.10}"
# etcd server pinned by that release (hack/lib/etcd.sh, build/dependencies.yaml).
ETCD_VERSION_DEFAULT="3.6.5"
JOBS="${FAIRGPU_BUILD_JOBS:-2}"

K8S_VERSION="${K8S_VERSION#v}"
CACHE_ROOT="${FAIRGPU_KUBE_CACHE:-${HOME}/.cache/fairgpu/kube}"
OUT_DIR="${CACHE_ROOT}/v${K8S_VERSION}"
KUBE_BINARIES=(kube-apiserver kube-scheduler kube-controller-manager)
BINARIES=("${KUBE_BINARIES[@]}" etcd)

log() { printf '[build-control-plane] %s\n' "$*" >&2; }
die() { printf '[build-control-plane] ERROR: %s\n' "$*" >&2; exit 1; }

MISSING=()
KUBE_MISSING=()
for b in "${BINARIES[@]}"; do
  [[ -x "${OUT_DIR}/${b}" ]] && continue
  MISSING+=("${b}")
  [[ "${b}" == etcd ]] || KUBE_MISSING+=("${b}")
done

if (( ${#MISSING[@]} == 0 )); then
  log "binaries already present"
  echo "${OUT_DIR}"
  exit 0
fi
log "missing: ${MISSING[*]}"

[[ "${K8S_VERSION}" =~ ^1\.([0-9]+)\.([0-9]+)$ ]] \
  || die "FAIRGPU_K8S_VERSION must look like 1.34.10, got '${K8S_VERSION}'"
K8S_MINOR="${BASH_REMATCH[1]}"
K8S_PATCH="${BASH_REMATCH[2]}"
STAGING_VERSION="v0.${K8S_MINOR}.${K8S_PATCH}"

command -v go >/dev/null 2>&1 || die "the Go toolchain ('go') is not on PATH"

export GOFLAGS=-mod=mod
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export CGO_ENABLED="${CGO_ENABLED:-0}"
# Keep the default GOPATH / GOMODCACHE / GOCACHE so downloads and compiled packages persist.

mkdir -p "${OUT_DIR}" || die "cannot create ${OUT_DIR}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/fairgpu-kube-build.XXXXXX")"
STAGE="$(mktemp -d "${OUT_DIR}/.staging.XXXXXX")"
cleanup() { rm -rf "${WORK}" "${STAGE}"; }
trap cleanup EXIT

start_ts=$(date +%s)
log "go: $(go version)"
log "building Kubernetes v${K8S_VERSION} (staging ${STAGING_VERSION}) into ${OUT_DIR}"

# --- locate k8s.io/kubernetes' own go.mod to learn its staging modules and etcd pin -------
k8s_json="$(go mod download -json "k8s.io/kubernetes@v${K8S_VERSION}")" \
  || die "cannot download k8s.io/kubernetes@v${K8S_VERSION} from the module proxy"
k8s_dir="$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"${k8s_json}")"
k8s_gomod="${k8s_dir}/go.mod"
[[ -f "${k8s_gomod}" ]] || die "k8s.io/kubernetes go.mod not found (looked at '${k8s_gomod}')"

mapfile -t STAGING < <(sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\) => \./staging/.*#\1#p' \
  "${k8s_gomod}" | sort -u)
(( ${#STAGING[@]} > 0 )) || die "found no staging replace directives in ${k8s_gomod}"
log "${#STAGING[@]} staging modules pinned to ${STAGING_VERSION}"

pinned_etcd="$(sed -n 's/^ETCD_VERSION=\${ETCD_VERSION:-\([0-9.]*\)}.*/\1/p' \
  "${k8s_dir}/hack/lib/etcd.sh" 2>/dev/null || true)"
ETCD_VERSION="${FAIRGPU_ETCD_VERSION:-${pinned_etcd:-${ETCD_VERSION_DEFAULT}}}"
ETCD_VERSION="${ETCD_VERSION#v}"
log "etcd v${ETCD_VERSION} (release pins: ${pinned_etcd:-unknown})"

go_version_line="$(sed -n 's/^go \([0-9.]*\)$/\1/p' "${k8s_gomod}" | head -n1)"
go_version_line="${go_version_line:-1.24.0}"

# --- Kubernetes wrapper module ------------------------------------------------------------
K8S_MOD="${WORK}/kube"
mkdir -p "${K8S_MOD}"
{
  echo "module fairgpu.local/kubebuild"
  echo
  echo "go ${go_version_line}"
  echo
  echo "require k8s.io/kubernetes v${K8S_VERSION}"
  echo
  echo "replace ("
  for m in "${STAGING[@]}"; do
    echo "	${m} => ${m} ${STAGING_VERSION}"
  done
  echo ")"
} > "${K8S_MOD}/go.mod"
{
  echo "//go:build tools"
  echo
  echo "package kubebuild"
  echo
  echo "import ("
  for b in "${KUBE_BINARIES[@]}"; do
    echo "	_ \"k8s.io/kubernetes/cmd/${b}\""
  done
  echo ")"
} > "${K8S_MOD}/tools.go"
KUBE_PKGS=()
for b in "${KUBE_MISSING[@]}"; do
  KUBE_PKGS+=("k8s.io/kubernetes/cmd/${b}")
done

build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
version_pkgs=(k8s.io/component-base/version k8s.io/client-go/pkg/version)
k8s_ldflags="-s -w"
for p in "${version_pkgs[@]}"; do
  k8s_ldflags+=" -X ${p}.gitVersion=v${K8S_VERSION}"
  k8s_ldflags+=" -X ${p}.gitMajor=1 -X ${p}.gitMinor=${K8S_MINOR}"
  k8s_ldflags+=" -X ${p}.gitTreeState=clean -X ${p}.buildDate=${build_date}"
done

if (( ${#KUBE_PKGS[@]} > 0 )); then
  (
    cd "${K8S_MOD}"
    log "resolving Kubernetes dependencies"
    go mod download k8s.io/kubernetes >&2 \
      || die "go mod download failed for the Kubernetes wrapper module"
    log "compiling ${KUBE_MISSING[*]} (-p ${JOBS})"
    go build -p "${JOBS}" -tags providerless -trimpath -ldflags="${k8s_ldflags}" \
      -o "${STAGE}/" "${KUBE_PKGS[@]}" >&2 \
      || die "go build of ${KUBE_MISSING[*]} failed"
  )
fi

# --- etcd wrapper module ------------------------------------------------------------------
ETCD_MOD="${WORK}/etcd"
mkdir -p "${ETCD_MOD}"
if [[ ! -x "${OUT_DIR}/etcd" ]]; then
  (
    cd "${ETCD_MOD}"
    go mod init fairgpu.local/etcdbuild >/dev/null 2>&1 || die "go mod init failed"
    log "resolving go.etcd.io/etcd/server/v3@v${ETCD_VERSION}"
    go get "go.etcd.io/etcd/server/v3@v${ETCD_VERSION}" >&2 \
      || die "go get go.etcd.io/etcd/server/v3@v${ETCD_VERSION} failed"
    log "compiling etcd"
    go build -p "${JOBS}" -trimpath \
      -ldflags="-s -w" \
      -o "${STAGE}/etcd" go.etcd.io/etcd/server/v3 >&2 \
      || die "go build of etcd failed"
  )
fi

# --- sanity check, then move into place atomically ----------------------------------------
for b in "${MISSING[@]}"; do
  "${STAGE}/${b}" --version >&2 || die "built ${b} does not run"
done

for b in "${MISSING[@]}"; do
  [[ -f "${STAGE}/${b}" ]] || die "expected ${b} in build output"
  chmod 0755 "${STAGE}/${b}"
  mv -f "${STAGE}/${b}" "${OUT_DIR}/${b}"
done
cat > "${OUT_DIR}/VERSIONS" <<TXT
kubernetes v${K8S_VERSION}
etcd v${ETCD_VERSION}
$(go version)
TXT

log "done in $(( $(date +%s) - start_ts ))s"
echo "${OUT_DIR}"
