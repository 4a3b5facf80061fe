package bench

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// BenchmarkRunCode: the code interpreter through the Go SDK. run: a run of `x + 1` in a running
// session's default context (a Jupyter kernel), beside exec: a run-to-completion exec of `true` in the
// same session. create-run: a session of the code-interpreter template created (restored from its start
// snapshot or taken from the warm pool, the kernel running) and its first run. The template is built
// from templates/code-interpreter over an image that has Debian's packages (testenv.CodeInterpreterImage).
func BenchmarkRunCode(b *testing.B) {
	e := testenv.Start(b, testenv.Options{DefaultImage: testenv.CodeInterpreterImage(b)})
	ctx := context.Background()
	dir, err := filepath.Abs("../../templates/code-interpreter")
	if err != nil {
		b.Fatal(err)
	}
	var ctxTar bytes.Buffer
	tw := tar.NewWriter(&ctxTar)
	for _, name := range []string{"Dockerfile", "server.py"} {
		body, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			b.Fatal(err)
		}
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg})
		tw.Write(body)
	}
	tw.Close()
	if _, err := e.Client.BuildTemplate(ctx, "code-interpreter", bytes.NewReader(ctxTar.Bytes()), airlock.BuildTemplateOptions{}); err != nil {
		b.Fatal(err)
	}
	req := airlock.CreateSessionRequest{Template: "code-interpreter", RollingIntervalSeconds: never(), IdleTimeoutSeconds: never()}
	se, err := e.Client.CreateSession(ctx, req)
	if err != nil {
		b.Fatal(err)
	}
	if ex, err := e.Client.RunCode(ctx, se.ID, airlock.RunCodeRequest{Code: "x = 1"}, nil); err != nil || ex.Error != nil {
		b.Fatalf("run: %+v %v", ex, err)
	}
	b.Run("run", func(b *testing.B) {
		var tm timings
		for range b.N {
			start := time.Now()
			if ex, err := e.Client.RunCode(ctx, se.ID, airlock.RunCodeRequest{Code: "x + 1"}, nil); err != nil || ex.Text() != "2" {
				b.Fatalf("run: %+v %v", ex, err)
			}
			tm.add(time.Since(start))
		}
		tm.report(b)
	})
	b.Run("exec", func(b *testing.B) {
		var tm timings
		for range b.N {
			start := time.Now()
			if res, err := e.Client.Exec(ctx, se.ID, airlock.ExecRequest{Cmd: []string{"true"}}); err != nil || res.ExitCode != 0 {
				b.Fatalf("exec: %+v %v", res, err)
			}
			tm.add(time.Since(start))
		}
		tm.report(b)
	})
	b.Run("create-run", func(b *testing.B) {
		var tm timings
		for range b.N {
			start := time.Now()
			s, err := e.Client.CreateSession(ctx, req)
			if err != nil {
				b.Fatal(err)
			}
			if ex, err := e.Client.RunCode(ctx, s.ID, airlock.RunCodeRequest{Code: "1 + 1"}, nil); err != nil || ex.Text() != "2" {
				b.Fatalf("run: %+v %v", ex, err)
			}
			tm.add(time.Since(start))
			if err := e.Client.DeleteSession(ctx, s.ID); err != nil {
				b.Fatal(err)
			}
		}
		tm.report(b)
	})
}
