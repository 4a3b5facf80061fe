#!/usr/bin/env bash
# Installs what Airlock needs on Debian 12 and builds it: Debian packages, the pinned gVisor runsc (built
# static from the Go module proxy), and the airlock binary at /usr/local/bin/airlock.
# Safe to run again: every step checks first. Needs root and Go >= 1.26 at /usr/local/go or on PATH.
set -euo pipefail

RUNSC_VERSION=v0.0.0-20260905035102-160fafc42237   # pinned gVisor release; see docs/ARCHITECTURE.md
PREFIX=${PREFIX:-/usr/local}
here=$(cd "$(dirname "$0")/.." && pwd)
export PATH=/usr/local/go/bin:$PATH:$HOME/go/bin

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

if [ "$(id -u)" != 0 ]; then
  echo "install.sh: run as root (sandboxes need mounts, cgroups and network namespaces)" >&2
  exit 1
fi
if ! command -v go >/dev/null; then
  echo "install.sh: Go >= 1.26 is needed (expected at /usr/local/go/bin/go)" >&2
  exit 1
fi

need=()
for pair in mkfs.ext4:e2fsprogs ip:iproute2 update-ca-certificates:ca-certificates python3:python3 git:git curl:curl; do
  command -v "${pair%%:*}" >/dev/null || need+=("${pair#*:}")
done
[ -f /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
if [ ${#need[@]} -gt 0 ]; then
  log "installing Debian packages: ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

have_runsc=$(go version -m "$PREFIX/bin/runsc" 2>/dev/null | awk '$1=="mod" && $2=="gvisor.dev/gvisor" {print $3}' || true)
if [ "$have_runsc" != "$RUNSC_VERSION" ]; then
  log "building gVisor runsc $RUNSC_VERSION (static; a few minutes the first time)"
  (cd /tmp && CGO_ENABLED=0 GOBIN="$PREFIX/bin" go install "gvisor.dev/gvisor/runsc@$RUNSC_VERSION")
fi

log "building airlock"
(cd "$here" && CGO_ENABLED=0 go build -trimpath -o "$PREFIX/bin/airlock" ./cmd/airlock)
log "installed: $PREFIX/bin/airlock, $PREFIX/bin/runsc"
