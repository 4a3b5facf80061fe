package firecracker_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/runtime/vm"
	"github.com/airlockrun/airlock/internal/runtime/vm/firecracker"
	"github.com/airlockrun/airlock/internal/runtimetest"
	"github.com/airlockrun/airlock/internal/template"
	"github.com/airlockrun/airlock/internal/testenv"
)

// defaultImage is the default template's image that scripts/install.sh builds.
const defaultImage = "/usr/local/lib/airlock/default-image.tar"

// usable skips the test unless Firecracker can run VMs here: root, firecracker and jailer on PATH, the
// guest kernel, and a KVM on which the probe guest's kernel runs. It returns the ELF kernel.
func usable(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the jailer, cgroups and network namespaces")
	}
	for _, b := range []string{"firecracker", "jailer"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Skipf("Firecracker cannot run VMs here: %s is not installed (Debian packages no Firecracker)", b)
		}
	}
	k, err := vm.FindKernel("")
	if err != nil {
		t.Skipf("no guest kernel (scripts/install.sh unpacks it): %v", err)
	}
	vmlinux, err := firecracker.Vmlinux(context.Background(), k.Image, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := firecracker.Config{Firecracker: "firecracker", Jailer: "jailer"}
	if err := firecracker.Usable(context.Background(), &cfg, vmlinux); err != nil {
		t.Skipf("Firecracker cannot run VMs here: %v", err)
	}
	return vmlinux
}

// TestConformance runs the runtime conformance suite against the Firecracker driver, where firecracker,
// its jailer and a working KVM are there.
func TestConformance(t *testing.T) {
	usable(t)
	if _, err := os.Stat(defaultImage); err != nil {
		t.Skipf("needs the default template's image, which scripts/install.sh builds: %v", err)
	}
	dir := t.TempDir()
	cat := template.NewCatalog(filepath.Join(dir, "templates"))
	img, err := cat.Import(t.Context(), defaultImage)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cat.OCI.Unmount(img.Digest) })
	tpl, err := cat.Get(t.Context(), template.DefaultName+"@"+img.Digest)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(tpl.RootFS, unix.MNT_DETACH) })
	d, err := firecracker.New(firecracker.Config{StateDir: filepath.Join(dir, "runtime"), DaemonBinary: testenv.DaemonBinary(t),
		CgroupParent: "/airlock-test-fc", Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	runtimetest.Run(t, runtimetest.Harness{Driver: d, StateDir: filepath.Join(dir, "runtime"), Template: tpl,
		DaemonBinary: testenv.DaemonBinary(t), Scratch: t.TempDir()})
}

// TestNewSaysWhy: where Firecracker cannot run VMs, New says why.
func TestNewSaysWhy(t *testing.T) {
	if _, err := vm.FindKernel(""); err != nil {
		t.Skipf("no guest kernel: %v", err)
	}
	if _, err := exec.LookPath("xz"); err != nil {
		t.Skip("no xz (xz-utils)")
	}
	_, errFC := exec.LookPath("firecracker")
	_, errJ := exec.LookPath("jailer")
	if errFC == nil && errJ == nil {
		t.Skip("firecracker and jailer are installed: TestConformance covers New")
	}
	_, err := firecracker.New(firecracker.Config{StateDir: t.TempDir(), DaemonBinary: "/bin/true"})
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("New: %v; want a failed precondition saying what is not found", err)
	}
	t.Logf("New here: %v", err)
}
