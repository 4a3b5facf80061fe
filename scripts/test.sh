#!/usr/bin/env bash
# The README's test command: installs what the tests need (runsc included), then runs the whole suite.
# Tests that need root or runsc run here; they skip with the reason where those are missing.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
export PATH=/usr/local/go/bin:$PATH

"$here/scripts/install.sh"

echo "==> go vet"
go vet ./...
unformatted=$(gofmt -l $(git ls-files '*.go') 2>/dev/null || true)
if [ -n "$unformatted" ]; then
  echo "not gofmt-formatted:" >&2; echo "$unformatted" >&2; exit 1
fi
echo "==> go test"
# -p 1: sandbox-heavy packages share the machine's two cores and its loop devices.
go test -race -p 1 -timeout 20m -count=1 ./... 2>&1 | tee /tmp/airlock-test.log
echo "==> go test (without the race detector: a simulated week of snapshots)"
go test -count=1 -run 'TestRetentionSimulatedWeek' ./internal/controlplane/ 2>&1 | tee -a /tmp/airlock-test.log
