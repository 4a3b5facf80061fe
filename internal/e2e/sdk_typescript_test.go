package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/testenv"
)

// TestTypeScriptSDK installs sdk/typescript's dependencies from npm in a copy of it, checks that npm
// pack makes a package of its sources and types and that its types compile as used
// (test/types-check.ts, with tsc), then runs its tests (node's test runner) against a real server:
// exec, streams, a PTY, files, errors, tokens and a session's whole life.
func TestTypeScriptSDK(t *testing.T) {
	testenv.RequireSandboxes(t)
	src, err := filepath.Abs("../../sdk/typescript")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "airlock-sdk")
	if out, err := exec.Command("cp", "-r", src, dir).CombinedOutput(); err != nil {
		t.Fatalf("copy the SDK: %v\n%s", err, out)
	}
	ctx := ctxT(t, 10*time.Minute)
	run := func(env []string, name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
		}
		return out.String()
	}
	run(nil, "npm", "install", "--no-audit", "--no-fund", "--loglevel=error")
	packed := run(nil, "npm", "pack", "--dry-run", "--json")
	for _, f := range []string{"src/index.js", "src/index.d.ts", "package.json"} {
		if !strings.Contains(packed, `"path": "`+f+`"`) {
			t.Errorf("npm pack leaves out %s:\n%s", f, packed)
		}
	}
	run(nil, "npm", "run", "--silent", "typecheck")

	e := testenv.Start(t, testenv.Options{})
	out := run([]string{"AIRLOCK_URL=" + e.URL, "AIRLOCK_API_KEY=" + e.APIKey}, "node", "--test", "--test-reporter=spec", "--test-concurrency=1", "test/")
	t.Logf("node --test:\n%s", out)
}
