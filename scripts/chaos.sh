#!/usr/bin/env bash
# The chaos test on its own (internal/chaos): a cluster of PostgreSQL, versitygw, two replicas and two
# nodes under a seeded random schedule of faults (kill -9 of a node, a replica or a sandbox's runsc;
# PostgreSQL and versitygw crashed and started again), checked to lose nothing and run nothing twice.
# scripts/test.sh runs it too, with 20 faults. As root, after scripts/test.sh installed what it needs.
#
#   scripts/chaos.sh                   20 faults, a new seed (printed)
#   scripts/chaos.sh --seed N          replay the run that printed seed N
#   scripts/chaos.sh --faults 50       more faults
#   scripts/chaos.sh --soak 2h         faults until two hours have passed
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
export PATH=/usr/local/go/bin:$PATH
timeout=30m
while [ $# -gt 0 ]; do
  case "$1" in
    --seed) export AIRLOCK_CHAOS_SEED="$2"; shift 2 ;;
    --faults) export AIRLOCK_CHAOS_FAULTS="$2"; shift 2 ;;
    --kinds) export AIRLOCK_CHAOS_KINDS="$2"; shift 2 ;;          # e.g. disk,node
    --soak) export AIRLOCK_CHAOS_SOAK="$2"; timeout=0; shift 2 ;;   # no time limit: the soak bounds it
    *) echo "usage: $0 [--seed N] [--faults N] [--kinds node,replica,runsc,postgres,s3,disk] [--soak DURATION]" >&2; exit 2 ;;
  esac
done
exec go test -count=1 -timeout "$timeout" -run '^TestChaos$' -v ./internal/chaos/
