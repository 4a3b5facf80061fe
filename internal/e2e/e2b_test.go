package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/testenv"
)

// e2bModules returns a directory holding testdata/e2b (its package.json and tests) with its node
// modules installed from the npm registry: the real, unmodified e2b package. The install is kept
// (under /var/cache) for the next run of the same package.json.
func e2bModules(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed: scripts/test.sh installs Node.js for the E2B SDK's tests", tool)
		}
	}
	src := filepath.Join("testdata", "e2b")
	pkg, err := os.ReadFile(filepath.Join(src, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(pkg)
	dir := filepath.Join("/var/cache/airlock-tests", "e2b-"+hex.EncodeToString(sum[:6]))
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "e2b", "package.json")); err != nil {
		tmp := dir + ".tmp"
		_ = os.RemoveAll(tmp)
		if err := os.MkdirAll(tmp, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tmp, "package.json"), pkg, 0o644); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--loglevel=error")
		cmd.Dir = tmp
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm install (e2b from the npm registry): %v\n%s", err, out)
		}
		_ = os.RemoveAll(dir)
		if err := os.Rename(tmp, dir); err != nil {
			t.Fatal(err)
		}
	}
	tests, err := filepath.Glob(filepath.Join(src, "*.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range tests {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestE2BSDK runs the real e2b SDK's calls against a real server, with only E2B_API_URL and
// E2B_SANDBOX_URL pointing at Airlock (testdata/e2b/e2b.test.mjs): the lifecycle (create, info, list,
// timeouts, pause, connect, kill), another tenant's key, and bad input.
func TestE2BSDK(t *testing.T) {
	testenv.RequireSandboxes(t)
	dir := e2bModules(t)
	e := testenv.Start(t, testenv.Options{})
	ctx := ctxT(t, 10*time.Minute)
	other, err := e.Client.CreateTenant(ctx, "e2b-other")
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--test", "--test-reporter=spec", "--test-concurrency=1"}
	if p := os.Getenv("E2B_TEST_PATTERN"); p != "" { // to run some of them while working on them
		args = append(args, "--test-name-pattern="+p)
	}
	cmd := exec.CommandContext(ctx, "node", append(args, "e2b.test.mjs")...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"E2B_API_URL="+e.URL+"/e2b",
		"E2B_SANDBOX_URL="+e.URL+"/e2b",
		"E2B_API_KEY="+e.APIKey,
		"OTHER_API_KEY="+other.APIKey.Key,
	)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Logf("node --test e2b.test.mjs:\n%s", out.String())
	if err != nil {
		t.Fatalf("the e2b SDK's tests failed: %v", err)
	}
}
