#!/usr/bin/env bash
# Build (or reuse from the cache) the kube-apiserver, kube-scheduler and etcd binaries that the
# integration tests run. Prints the binaries directory on the last line of stdout.
# Cold build: roughly 5-10 minutes on a 2-core machine; cached: instant.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec bash tools/kube/build-control-plane.sh
