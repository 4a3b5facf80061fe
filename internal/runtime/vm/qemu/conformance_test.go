//go:build !race

// Built without the race detector only: the guest's emulation and the 740 MB template image are slow
// enough without it; scripts/test.sh runs this package in its second pass.

package qemu_test

import (
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/runtime/vm"
	"github.com/airlockrun/airlock/internal/runtime/vm/qemu"
	"github.com/airlockrun/airlock/internal/runtimetest"
	"github.com/airlockrun/airlock/internal/template"
	"github.com/airlockrun/airlock/internal/testenv"
)

// defaultImage is the default template's image that scripts/install.sh builds.
const defaultImage = "/usr/local/lib/airlock/default-image.tar"

// shared is the package's one driver and template, made by the first test that needs them (importing
// the image and making its disk takes half a minute) and removed by TestMain.
var shared struct {
	once    sync.Once
	d       *qemu.Driver
	tpl     template.Template
	dir     string
	cleanup []func()
	err     error
}

func TestMain(m *testing.M) {
	code := m.Run()
	for i := len(shared.cleanup) - 1; i >= 0; i-- {
		shared.cleanup[i]()
	}
	os.Exit(code)
}

// newDriver returns the package's QEMU driver (its state in a temporary directory) and the default
// image's template, or skips the test where QEMU, the guest kernel or the image is missing.
func newDriver(t testing.TB) (*qemu.Driver, template.Template, string) {
	t.Helper()
	testenv.RequireSandboxes(t)
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("qemu-system-x86_64 is not installed (scripts/install.sh installs it)")
	}
	if _, err := vm.FindKernel(""); err != nil {
		t.Skipf("no guest kernel (scripts/install.sh unpacks it): %v", err)
	}
	if _, err := os.Stat(defaultImage); err != nil {
		t.Skipf("needs the default template's image, which scripts/install.sh builds: %v", err)
	}
	shared.once.Do(func() {
		dir, err := os.MkdirTemp("", "airlock-test-vm-")
		if err != nil {
			shared.err = err
			return
		}
		shared.dir = dir
		shared.cleanup = append(shared.cleanup, func() { os.RemoveAll(dir) })
		cat := template.NewCatalog(filepath.Join(dir, "templates"))
		img, err := cat.Import(t.Context(), defaultImage)
		if err != nil {
			shared.err = err
			return
		}
		shared.cleanup = append(shared.cleanup, func() { _ = cat.OCI.Unmount(img.Digest) })
		tpl, err := cat.Get(t.Context(), template.DefaultName+"@"+img.Digest)
		if err != nil {
			shared.err = err
			return
		}
		shared.tpl = tpl
		shared.cleanup = append(shared.cleanup, func() { _ = unix.Unmount(tpl.RootFS, unix.MNT_DETACH) })
		d, err := qemu.New(qemu.Config{StateDir: filepath.Join(dir, "runtime"), DaemonBinary: testenv.DaemonBinary(t), CgroupParent: "/airlock-test-vm",
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
		if err != nil {
			shared.err = err
			return
		}
		shared.d = d
		t.Logf("guests run under %s", d.Accel())
		shared.cleanup = append(shared.cleanup, func() { _ = d.Close() })
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.d, shared.tpl, shared.dir
}

// TestConformance runs the runtime conformance suite against the QEMU driver.
func TestConformance(t *testing.T) {
	d, tpl, dir := newDriver(t)
	scratch := t.TempDir()
	h := runtimetest.Harness{Driver: d, StateDir: filepath.Join(dir, "runtime"), Template: tpl,
		DaemonBinary: testenv.DaemonBinary(t), Scratch: scratch}
	if d.Accel() == "tcg" {
		// An emulated guest held to a quarter of a core (CPULimit) answers its first handshake in
		// tens of seconds on a busy machine.
		h.DialTimeout = time.Minute
	}
	runtimetest.Run(t, h)
}
