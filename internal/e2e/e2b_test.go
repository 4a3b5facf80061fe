package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/testenv"
)

// TestE2BSDK runs the real e2b SDK's calls against a real server, with only E2B_API_URL and
// E2B_SANDBOX_URL pointing at Airlock (internal/testenv/e2bsdk/e2b.test.mjs): the lifecycle (create,
// info, list, timeouts, pause, connect, kill), another tenant's key, bad input, commands, a PTY, files
// and watches, snapshots (kept apart from their sandbox, new sandboxes made from them), and a hostile
// sandbox. E2B_TEST_PATTERN runs only the tests whose names match it.
func TestE2BSDK(t *testing.T) {
	testenv.RequireSandboxes(t)
	dir := testenv.E2BSDK(t)
	e := testenv.Start(t, testenv.Options{})
	ctx := ctxT(t, 10*time.Minute)
	other, err := e.Client.CreateTenant(ctx, "e2b-other")
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--test", "--test-reporter=spec", "--test-concurrency=1"}
	if p := os.Getenv("E2B_TEST_PATTERN"); p != "" {
		args = append(args, "--test-name-pattern="+p)
	}
	cmd := exec.CommandContext(ctx, "node", append(args, "e2b.test.mjs")...)
	cmd.Dir = dir
	cmd.Env = append(e.E2BEnv(e.APIKey), "OTHER_API_KEY="+other.APIKey.Key)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Logf("node --test e2b.test.mjs:\n%s", out.String())
	if err != nil {
		t.Fatalf("the e2b SDK's tests failed: %v", err)
	}
}
