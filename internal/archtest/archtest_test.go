// Package archtest checks the architecture's import rules.
package archtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/airlockrun/airlock"

// TestDaemonImportsNothingFromTheControlPlane holds the in-sandbox daemon (internal/daemon and its
// protocol) apart from the rest: it runs inside every sandbox and may depend on nothing but its own
// packages and the shared error sentinels.
func TestDaemonImportsNothingFromTheControlPlane(t *testing.T) {
	for _, pkg := range []string{module + "/internal/daemon", module + "/internal/daemon/proto"} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v: %s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if !strings.HasPrefix(dep, module+"/") {
				continue
			}
			if strings.HasPrefix(dep, module+"/internal/daemon") || dep == module+"/internal/errdefs" {
				continue
			}
			t.Errorf("%s imports %s; the daemon may import only internal/daemon/... and internal/errdefs", pkg, dep)
		}
	}
}

// TestDaemonBinary builds the daemon's own binary as scripts/install.sh does and reports its size: it
// links only the daemon's packages (the rule above), so it stays far below the server's.
func TestDaemonBinary(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", module+"/cmd/airlock-daemon").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, module+"/") && dep != module+"/cmd/airlock-daemon" &&
			!strings.HasPrefix(dep, module+"/internal/daemon") && dep != module+"/internal/errdefs" {
			t.Errorf("cmd/airlock-daemon links %s; the daemon's binary links only the daemon's packages", dep)
		}
	}
	bin := filepath.Join(t.TempDir(), "airlock-daemon")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, module+"/cmd/airlock-daemon")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v: %s", err, out)
	}
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("airlock-daemon: %.1f MB", float64(fi.Size())/1e6)
	if fi.Size() > 15e6 {
		t.Errorf("airlock-daemon is %.1f MB; want it under 15 MB", float64(fi.Size())/1e6)
	}
}

// TestControlPlaneImportsNoDriver: the control plane and the API know nothing of any runtime driver:
// images are opaque to them, and drivers are chosen where the node is wired (internal/app).
func TestControlPlaneImportsNoDriver(t *testing.T) {
	for _, pkg := range []string{module + "/internal/controlplane", module + "/internal/api"} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v: %s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if strings.HasPrefix(dep, module+"/internal/runtime/") {
				t.Errorf("%s imports the driver package %s", pkg, dep)
			}
		}
	}
}

// TestErrorTaxonomyKnowsNoHTTP: the error taxonomy (internal/errdefs) names errors and their codes; HTTP
// statuses are the HTTP edges' (internal/httperr), which the control plane does not use.
func TestErrorTaxonomyKnowsNoHTTP(t *testing.T) {
	for pkg, banned := range map[string]string{module + "/internal/errdefs": "net/http", module + "/internal/controlplane": module + "/internal/httperr"} {
		out, err := exec.Command("go", "list", "-f", `{{join .Imports " "}}`, pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v: %s", pkg, err, out)
		}
		for _, imp := range strings.Fields(string(out)) {
			if imp == banned {
				t.Errorf("%s imports %s", pkg, banned)
			}
		}
	}
}

// TestAPISpeaksNoDaemonWire: the API calls the control plane for exec, processes and files
// (controlplane/sandboxio.go), which alone holds the channel to a sandbox's daemon; the API speaks
// neither the daemon's protocol nor its link.
func TestAPISpeaksNoDaemonWire(t *testing.T) {
	pkg := module + "/internal/api"
	out, err := exec.Command("go", "list", "-f", `{{join .Imports " "}}`, pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list %s: %v: %s", pkg, err, out)
	}
	for _, imp := range strings.Fields(string(out)) {
		if imp == module+"/internal/daemon/link" || imp == module+"/internal/daemon/proto" {
			t.Errorf("%s imports %s; it reaches a sandbox through the control plane's sandbox I/O", pkg, imp)
		}
	}
}
