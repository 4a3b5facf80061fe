package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/testenv"
)

// pythonForSDK is Debian's Python, which has the SDK's dependencies as Debian packages
// (python3-httpx, python3-websockets; scripts/test.sh installs them).
const pythonForSDK = "/usr/bin/python3"

// TestPythonSDK runs sdk/python's tests (unittest) against a real server: sandboxes, exec to completion
// and streamed, a PTY, files, errors, access tokens, the egress log, a session's whole life and the
// asyncio client.
func TestPythonSDK(t *testing.T) {
	testenv.RequireSandboxes(t)
	if out, err := exec.Command(pythonForSDK, "-c", "import httpx, websockets").CombinedOutput(); err != nil {
		t.Fatalf("%s lacks the SDK's dependencies (scripts/test.sh installs python3-httpx and python3-websockets): %v\n%s", pythonForSDK, err, out)
	}
	e := testenv.Start(t, testenv.Options{})
	sdk, err := filepath.Abs("../../sdk/python")
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 10*time.Minute)
	cmd := exec.CommandContext(ctx, pythonForSDK, "-m", "unittest", "discover", "-v", "-s", "tests")
	cmd.Dir = sdk
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(sdk, "src"), "AIRLOCK_URL="+e.URL, "AIRLOCK_API_KEY="+e.APIKey,
		"PYTHONDONTWRITEBYTECODE=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Logf("python3 -m unittest:\n%s", out.String())
	if err != nil {
		t.Fatalf("the Python SDK's tests failed: %v", err)
	}
}
