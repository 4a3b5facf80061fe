package runc_test

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/airlockrun/airlock/internal/runtime/runc"
	"github.com/airlockrun/airlock/internal/runtimetest"
	"github.com/airlockrun/airlock/internal/template"
	"github.com/airlockrun/airlock/internal/testenv"
)

// newDriver returns a runc driver with its state in a temporary directory, or skips the test where
// sandboxes or runc are missing.
func newDriver(t *testing.T) (*runc.Driver, string, string) {
	t.Helper()
	testenv.RequireSandboxes(t)
	if _, err := exec.LookPath("runc"); err != nil {
		t.Skip("runc is not installed (scripts/install.sh installs it)")
	}
	dir := t.TempDir()
	state := filepath.Join(dir, "runtime")
	d, err := runc.New(runc.Config{StateDir: state, CgroupParent: "/airlock-test-runc",
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d, state, dir
}

// TestConformance runs the runtime conformance suite against the runc driver.
func TestConformance(t *testing.T) {
	d, state, dir := newDriver(t)
	tpl, err := template.NewHostRegistry(filepath.Join(dir, "templates")).Get(context.Background(), template.DefaultName)
	if err != nil {
		t.Fatal(err)
	}
	runtimetest.Run(t, runtimetest.Harness{Driver: d, StateDir: state, ExtraDirs: []string{d.RunDir()}, Template: tpl, DaemonBinary: testenv.DaemonBinary(t), Scratch: dir})
}
