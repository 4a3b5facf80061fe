#!/usr/bin/env bash
# The README's test command: installs what the tests need (runsc included), then runs the whole suite.
# Tests that need root or runsc run here; they skip with the reason where those are missing.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
export PATH=/usr/local/go/bin:$PATH

"$here/scripts/install.sh"

# Test-only Debian packages: SoftHSM2 (a real PKCS#11 token for the customer-key tests), opensc
# (pkcs11-tool, to destroy a key in the token as its owner would), PostgreSQL (the tests start
# throwaway servers of their own with its binaries: internal/testenv/pgtest), docker-registry (a
# real OCI registry for template pulls: internal/testenv/registrytest), Chromium (a real browser for
# the web console's tests, driven by Playwright: internal/e2e/console_test.go), and httpx and
# websockets for Python (the Python SDK's dependencies).
need=()
[ -f /usr/lib/softhsm/libsofthsm2.so ] || need+=(softhsm2)
command -v pkcs11-tool >/dev/null || need+=(opensc)
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || need+=(postgresql)
command -v docker-registry >/dev/null || need+=(docker-registry)
command -v chromium >/dev/null || need+=(chromium)
# The Python SDK's dependencies, for its tests (internal/e2e/sdk_python_test.go runs them with Debian's python3).
/usr/bin/python3 -c 'import httpx' 2>/dev/null || need+=(python3-httpx)
/usr/bin/python3 -c 'import websockets' 2>/dev/null || need+=(python3-websockets)
if [ ${#need[@]} -gt 0 ]; then
  echo "==> installing test packages: ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# Node.js 20.18.1 or later with npm, for the tests that run the real e2b SDK from the npm registry
# (internal/e2e/e2b_test.go). Debian 12's own Node.js is 18: then Node.js 22 comes from npm's node package.
node_ok() {
  command -v node >/dev/null && command -v npm >/dev/null &&
    node -e 'const [a,b,c]=process.versions.node.split(".").map(Number); process.exit(a>20||(a==20&&(b>18||(b==18&&c>=1)))?0:1)'
}
if ! node_ok; then
  echo "==> installing Node.js 22 (the e2b SDK's tests need 20.18.1 or later)"
  if ! command -v npm >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
  fi
  npm install -g --no-audit --no-fund --loglevel=error node@22
  hash -r
  node_ok || { echo "Node.js 20.18.1 or later is needed; have $(node --version 2>&1)" >&2; exit 1; }
fi

# A real S3-compatible server for the S3 blob store's tests (internal/testenv/s3test): versitygw, built
# from the Go module proxy at a pinned release (about a minute and a half).
if ! command -v versitygw >/dev/null; then
  echo "==> building versitygw (an S3-compatible server, for the tests)"
  GOBIN=/usr/local/bin CGO_ENABLED=0 go install github.com/versity/versitygw/cmd/versitygw@v1.8.0
fi

echo "==> go vet"
go vet ./...
unformatted=$(gofmt -l $(git ls-files '*.go') 2>/dev/null || true)
if [ -n "$unformatted" ]; then
  echo "not gofmt-formatted:" >&2; echo "$unformatted" >&2; exit 1
fi
echo "==> go test"
# -p 1: sandbox-heavy packages share the machine's two cores and its loop devices.
# internal/snapshot's tests of data volume (tens of MiB chunked, sealed and read back) run fifty times
# slower under the race detector here (page faults on its shadow memory in this VM: ten minutes for
# what takes eleven seconds without it), so they run without it below; the rest of the package (its
# concurrent writers, GC against writers, crashes, holds and every other test) runs with it.
snapshot_bulk='^(TestRoundTrip|TestDedupIdentical|TestDedupAfterChange|TestDedupScatteredPages|TestTamperedChunk|TestMissingChunk|TestSegmentedFile)$'
go test -race -p 1 -timeout 45m -count=1 $(go list ./... | grep -v '/internal/snapshot$') 2>&1 | tee /tmp/airlock-test.log
go test -race -timeout 30m -count=1 -skip "$snapshot_bulk" ./internal/snapshot/ 2>&1 | tee -a /tmp/airlock-test.log
echo "==> go test (without the race detector: a simulated week of snapshots; the snapshot store's data volumes; the default template's real image; microVMs under emulation)"
go test -count=1 -run 'TestRetentionSimulatedWeek' ./internal/controlplane/ 2>&1 | tee -a /tmp/airlock-test.log
go test -count=1 ./internal/snapshot/ 2>&1 | tee -a /tmp/airlock-test.log
go test -count=1 -run '^(TestInstalledDefaultImage|TestVMs|TestRedTeamVM|TestEgressBypassAttemptsVM)$' ./internal/e2e/ 2>&1 | tee -a /tmp/airlock-test.log
go test -count=1 ./internal/runtime/vm/qemu/ 2>&1 | tee -a /tmp/airlock-test.log
