package bench

import (
	"bytes"
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// BenchmarkE2BCreateRun: a new sandbox and a first `true` in it, through the unmodified e2b SDK on
// Airlock's E2B API (Sandbox.create + commands.run, an E2B sandbox being a session), against the Go SDK
// on /v1 doing the same with a session and with a sandbox (target of issue 22: e2b within 20% of the
// Go SDK's session). The delete is not timed.
func BenchmarkE2BCreateRun(b *testing.B) {
	e := testenv.Start(b, testenv.Options{})
	ctx := context.Background()
	b.Run("go-v1-session", func(b *testing.B) {
		var tm timings
		for i := -1; i < b.N; i++ { // the first round, untimed, mounts the template
			start := time.Now()
			se, err := e.Client.CreateSession(ctx, airlock.CreateSessionRequest{TimeoutSeconds: 120, RollingIntervalSeconds: never(), IdleTimeoutSeconds: never()})
			if err != nil || se.State != airlock.SessionRunning {
				b.Fatalf("create session: %+v, %v", se, err)
			}
			if res, err := e.Client.Exec(ctx, se.ID, airlock.ExecRequest{Cmd: []string{"true"}}); err != nil || res.ExitCode != 0 {
				b.Fatalf("exec: %+v, %v", res, err)
			}
			if i >= 0 {
				tm.add(time.Since(start))
			}
			if err := e.Client.DeleteSession(ctx, se.ID); err != nil {
				b.Fatal(err)
			}
		}
		tm.report(b)
	})
	b.Run("go-v1-sandbox", func(b *testing.B) {
		coldCreate(b, e, "")
	})
	b.Run("e2b-js", func(b *testing.B) {
		dir := testenv.E2BSDK(b)
		cmd := exec.CommandContext(ctx, "node", "bench.mjs", strconv.Itoa(b.N))
		cmd.Dir = dir
		cmd.Env = e.E2BEnv(e.APIKey)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			b.Fatalf("node bench.mjs: %v\n%s", err, errOut.String())
		}
		reportPrinted(b, out.String())
	})
}

// reportPrinted reports the percentiles of what a benchmark program printed: one duration in
// milliseconds per line.
func reportPrinted(b *testing.B, out string) {
	var tm timings
	for _, line := range strings.Fields(out) {
		ms, err := strconv.ParseFloat(line, 64)
		if err != nil {
			b.Fatalf("the benchmark printed %q, not milliseconds", line)
		}
		tm.add(time.Duration(ms * float64(time.Millisecond)))
	}
	tm.report(b)
}

func never() *int { n := 0; return &n }
