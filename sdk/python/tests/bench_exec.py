"""The exec round trip (`true` run to completion) through the Python SDK, N times (argv[1]) in one
sandbox; prints each in milliseconds, one per line. Run by internal/bench/sdk_python_bench_test.go."""

import sys
import time

import airlock

n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
with airlock.Client() as c:
    sb = c.create_sandbox(timeout_seconds=600)
    try:
        c.exec(sb.id, ["true"])  # untimed: the connection is made
        for _ in range(n):
            start = time.perf_counter()
            r = c.exec(sb.id, ["true"])
            ms = (time.perf_counter() - start) * 1000
            if r.exit_code != 0:
                raise SystemExit(f"true exited {r.exit_code}")
            print(f"{ms:.3f}")
    finally:
        c.delete_sandbox(sb.id)
