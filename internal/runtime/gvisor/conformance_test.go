package gvisor_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlockrun/airlock/internal/runtime/gvisor"
	"github.com/airlockrun/airlock/internal/runtimetest"
	"github.com/airlockrun/airlock/internal/template"
	"github.com/airlockrun/airlock/internal/testenv"
)

// TestConformance runs the runtime conformance suite against the gVisor driver.
func TestConformance(t *testing.T) {
	testenv.RequireSandboxes(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "runtime")
	d, err := gvisor.New(gvisor.Config{StateDir: state, CgroupParent: "/airlock-test-conf",
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	tpl, err := template.NewHostRegistry(filepath.Join(dir, "templates")).Get(context.Background(), template.DefaultName)
	if err != nil {
		t.Fatal(err)
	}
	runtimetest.Run(t, runtimetest.Harness{Driver: d, StateDir: state, Template: tpl, DaemonBinary: testenv.DaemonBinary(t), Scratch: dir})
}
