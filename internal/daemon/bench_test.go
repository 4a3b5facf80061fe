package daemon_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"path/filepath"
	"testing"

	"github.com/airlockrun/airlock/internal/daemon/link"
	"github.com/airlockrun/airlock/internal/daemon/proto"
)

// BenchmarkPing measures a bare round trip over the link.
func BenchmarkPing(b *testing.B) {
	d := startDaemon(b, testConfig(b))
	c := d.dial(b, link.Options{})
	ctx := context.Background()
	for b.Loop() {
		if err := c.Ping(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExecTrue measures the exec hot path: start `true`, collect, wait, answer.
func BenchmarkExecTrue(b *testing.B) {
	d := startDaemon(b, testConfig(b))
	c := d.dial(b, link.Options{})
	ctx := context.Background()
	req := proto.ExecRequest{Argv: []string{"true"}}
	for b.Loop() {
		res, err := c.Exec(ctx, req)
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("Exec = %+v, %v", res, err)
		}
	}
}

// BenchmarkExecTrueReapAll is BenchmarkExecTrue with the PID-1 style reaper the sandbox init uses.
func BenchmarkExecTrueReapAll(b *testing.B) {
	cfg := testConfig(b)
	cfg.ReapAll = true
	d := startDaemon(b, cfg)
	c := d.dial(b, link.Options{})
	ctx := context.Background()
	req := proto.ExecRequest{Argv: []string{"true"}}
	for b.Loop() {
		if _, err := c.Exec(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExecTrueParallel runs execs of `true` concurrently over one connection.
func BenchmarkExecTrueParallel(b *testing.B) {
	d := startDaemon(b, testConfig(b))
	c := d.dial(b, link.Options{})
	req := proto.ExecRequest{Argv: []string{"true"}}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Exec(context.Background(), req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkWriteRead1MiB writes 1 MiB atomically (with fsync) and reads it back.
func BenchmarkWriteRead1MiB(b *testing.B) {
	d := startDaemon(b, testConfig(b))
	benchWriteRead(b, d.dial(b, link.Options{}))
}

func benchWriteRead(b *testing.B, c *link.Client) {
	ctx := context.Background()
	data := make([]byte, 1<<20)
	rand.Read(data)
	path := filepath.Join(b.TempDir(), "f")
	var out bytes.Buffer
	b.SetBytes(2 << 20)
	for b.Loop() {
		if err := c.WriteFile(ctx, path, bytes.NewReader(data), link.WriteFileOptions{}); err != nil {
			b.Fatal(err)
		}
		out.Reset()
		if err := c.ReadFile(ctx, path, &out); err != nil {
			b.Fatal(err)
		}
		if out.Len() != len(data) {
			b.Fatalf("read %d bytes; want %d", out.Len(), len(data))
		}
	}
}

// BenchmarkExecTrueAudited is BenchmarkExecTrue with a file audit sink.
func BenchmarkExecTrueAudited(b *testing.B) {
	d := startDaemon(b, testConfig(b))
	audit, err := link.NewFileAudit(filepath.Join(b.TempDir(), "audit.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	defer audit.Close()
	c := d.dial(b, link.Options{Audit: audit})
	ctx := context.Background()
	req := proto.ExecRequest{Argv: []string{"true"}, Env: []string{"A=b"}}
	for b.Loop() {
		if _, err := c.Exec(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}
