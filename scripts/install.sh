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
# gcc and libc6-dev build airlock-pkcs11, the one cgo binary (a PKCS#11 module is a C library).
# runc runs the sandboxes of the runc runtime (Debian's, with libseccomp).
# mmdebstrap and umoci build the default template's image (below).
# qemu-system-x86 runs the microVM sandboxes (the vm runtime), erofs-utils makes their templates' disks.
for pair in mkfs.ext4:e2fsprogs ip:iproute2 update-ca-certificates:ca-certificates python3:python3 git:git curl:curl gcc:gcc runc:runc mmdebstrap:mmdebstrap umoci:umoci qemu-system-x86_64:qemu-system-x86 mkfs.erofs:erofs-utils; do
  command -v "${pair%%:*}" >/dev/null || need+=("${pair#*:}")
done
[ -f /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
[ -f /usr/include/stdio.h ] || need+=(libc6-dev)
if [ ${#need[@]} -gt 0 ]; then
  log "installing Debian packages: ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# runsc is built from the pinned gVisor source with its seccomp filters made at build time, as gVisor's
# release builds do (scripts/runsc/precompile.go; the plain Go build makes every sandbox compile them).
# The build is recorded next to it (version, kind, checksum) so that it is redone only when that changes.
runsc_stamp="$PREFIX/lib/airlock/runsc.build"
runsc_want="gvisor.dev/gvisor@$RUNSC_VERSION precompiled-seccomp $(sha256sum "$here/scripts/runsc/precompile.go" | cut -c1-16)"
runsc_have=""
if [ -x "$PREFIX/bin/runsc" ] && [ -f "$runsc_stamp" ]; then
  runsc_have=$(sed -n 1p "$runsc_stamp")
  [ "$(sed -n 2p "$runsc_stamp")" = "$(sha256sum "$PREFIX/bin/runsc" | cut -d' ' -f1)" ] || runsc_have=""
fi
if [ "$runsc_have" != "$runsc_want" ]; then
  log "building gVisor runsc $RUNSC_VERSION (static, seccomp filters precompiled; a few minutes the first time)"
  (cd /tmp && go mod download "gvisor.dev/gvisor@$RUNSC_VERSION") ||
    { echo "install.sh: could not fetch gvisor.dev/gvisor@$RUNSC_VERSION from the Go module proxy" >&2; exit 1; }
  src="$(go env GOMODCACHE)/gvisor.dev/gvisor@$RUNSC_VERSION"
  [ -d "$src" ] || { echo "install.sh: gvisor.dev/gvisor@$RUNSC_VERSION is not at $src" >&2; exit 1; }
  work=$(mktemp -d /tmp/airlock-runsc.XXXXXX)
  trap 'rm -rf "$work"' EXIT
  cp -r "$src/." "$work/"
  chmod -R u+w "$work"
  mkdir "$work/airlock-precompile"
  cp "$here/scripts/runsc/precompile.go" "$work/airlock-precompile/precompile.go"
  (cd "$work" && CGO_ENABLED=0 go run ./airlock-precompile/precompile.go &&
    CGO_ENABLED=0 go build -o "$work/runsc.bin" ./runsc)
  # Into place by rename, so that a running Airlock never starts a half-written runsc.
  install -D -m 0755 "$work/runsc.bin" "$PREFIX/bin/.runsc.new"
  mv -f "$PREFIX/bin/.runsc.new" "$PREFIX/bin/runsc"
  mkdir -p "$(dirname "$runsc_stamp")"
  printf '%s\n%s\n' "$runsc_want" "$(sha256sum "$PREFIX/bin/runsc" | cut -d' ' -f1)" >"$runsc_stamp"
  rm -rf "$work"
  trap - EXIT
fi

# The microVMs' guest kernel: Debian's (the release linux-image-amd64 points at), unpacked into
# $PREFIX/lib/airlock/guest (boot/vmlinuz-RELEASE and its modules) without installing it as this
# machine's own kernel. Redone when Debian's release changes.
guest="$PREFIX/lib/airlock/guest"
kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
if [ -z "$kpkg" ]; then
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
fi
kver=$(apt-cache policy "$kpkg" 2>/dev/null | awk '/Candidate:/{print $2}')
if [ -n "$kpkg" ] && [ "$(cat "$guest/package" 2>/dev/null)" != "$kpkg $kver" ]; then
  log "unpacking the microVMs' guest kernel ($kpkg $kver)"
  work=$(mktemp -d /var/tmp/airlock-kernel.XXXXXX)
  trap 'rm -rf "$work"' EXIT
  chmod 0755 "$work"
  (cd "$work" && apt-get download -q "$kpkg=$kver" >/dev/null 2>&1) ||
    { echo "install.sh: could not download $kpkg $kver" >&2; exit 1; }
  dpkg-deb -x "$work"/linux-image-*.deb "$work/x"
  rm -rf "$guest.new" && mkdir -p "$guest.new/boot" "$guest.new/lib"
  cp "$work"/x/boot/vmlinuz-* "$guest.new/boot/"
  cp -r "$work"/x/lib/modules "$guest.new/lib/"
  printf '%s\n' "$kpkg $kver" >"$guest.new/package"
  rm -rf "$guest" && mv "$guest.new" "$guest"
  rm -rf "$work"
  trap - EXIT
fi
[ -n "$kpkg" ] || echo "install.sh: no Debian kernel package found; microVM sandboxes are unavailable" >&2

log "building airlock"
(cd "$here" && CGO_ENABLED=0 go build -trimpath -o "$PREFIX/bin/airlock" ./cmd/airlock)
# The in-sandbox daemon: a static binary of its own, next to airlock (which finds it there), that links
# only the daemon's packages; every sandbox mounts it read-only as its init.
(cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$PREFIX/bin/airlock-daemon" ./cmd/airlock-daemon)
# The PKCS#11 helper for customer keys in an HSM or KMS (airlock up --pkcs11-module …).
(cd "$here" && CGO_ENABLED=1 go build -trimpath -o "$PREFIX/bin/airlock-pkcs11" ./cmd/airlock-pkcs11)
# The default template: an immutable image of Debian 12 with what agents reach for, made from Debian's
# packages (mmdebstrap, the machine's own apt sources) into an OCI archive (umoci). `airlock up` installs
# it at start when the file changed (--default-image); sandboxes of "default" then boot it, not the
# host's /usr. Rebuilt only when this recipe changes (a few minutes the first time). AIRLOCK_DEFAULT_IMAGE=none
# skips it (deploy/Dockerfile: a container build cannot mount what mmdebstrap needs).
image="$PREFIX/lib/airlock/default-image.tar"
if [ "${AIRLOCK_DEFAULT_IMAGE:-}" = none ]; then image_skip=1; else image_skip=0; fi
image_pkgs="python3,python3-pip,python3-venv,nodejs,npm,git,curl,wget,ca-certificates,build-essential,procps,less,unzip,xz-utils,jq"
image_want="bookworm $image_pkgs no-recommends v1"
if [ "$image_skip" = 0 ] && { [ ! -f "$image" ] || [ "$(cat "$image.recipe" 2>/dev/null)" != "$image_want" ]; }; then
  log "building the default template's image (Debian 12 with python3, node, git, curl, build tools; a few minutes the first time)"
  sources=/etc/apt/sources.list.d/debian.sources
  [ -f "$sources" ] || sources=/etc/apt/sources.list
  work=$(mktemp -d /var/tmp/airlock-image.XXXXXX)
  trap 'rm -rf "$work"' EXIT
  umoci init --layout "$work/oci"
  umoci new --image "$work/oci:default"
  umoci unpack --image "$work/oci:default" "$work/bundle"
  # Into the bundle's (empty) root; without device nodes: a template holds none (the runtime makes /dev).
  mmdebstrap --quiet --variant=apt --aptopt='APT::Install-Recommends "false"' --include="$image_pkgs" \
    bookworm "$work/bundle/rootfs" "$sources"
  rm -rf "$work/bundle/rootfs/dev" && mkdir -m 0755 "$work/bundle/rootfs/dev"
  umoci repack --image "$work/oci:default" "$work/bundle"
  umoci config --image "$work/oci:default" --config.env LANG=C.UTF-8
  umoci gc --layout "$work/oci"
  mkdir -p "$(dirname "$image")"
  tar -C "$work/oci" -cf "$image.new" .
  mv -f "$image.new" "$image"
  printf '%s\n' "$image_want" >"$image.recipe"
  rm -rf "$work"
  trap - EXIT
fi

log "installed: $PREFIX/bin/airlock, $PREFIX/bin/airlock-daemon, $PREFIX/bin/airlock-pkcs11, $PREFIX/bin/runsc$([ "$image_skip" = 1 ] || echo ", $image")"
