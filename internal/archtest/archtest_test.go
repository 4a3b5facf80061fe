// Package archtest checks the architecture's import rules.
package archtest

import (
	"os/exec"
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
