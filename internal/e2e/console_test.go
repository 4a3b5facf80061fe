package e2e

import (
	"archive/tar"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/airlockrun/airlock/internal/template/oci/ocitest"
	"github.com/airlockrun/airlock/internal/testenv"
)

// TestConsole drives the web console in a real browser, Debian's Chromium under Playwright
// (internal/testenv/console/*.test.mjs), against a real server: its headers, sign-in (a wrong
// key's message shown, the key in no URL, cookie or local storage), a session created (a bad field's
// API message next to it, the draft kept across a reload), its state following pause, resume and
// fork, filters kept in the URL, delete; another tenant's key seeing none of it; a page of another
// origin unable to call the API; a terminal into a session (resize, reconnecting to the same shell,
// no CSP violation, refused to another tenant); and a list of 1,000 sessions rendered as a virtual list (its
// figures logged as console-bench). AIRLOCK_CONSOLE_SCREENSHOTS keeps the screenshots there (the
// README's are made so); otherwise they go to a temporary directory.
func TestConsole(t *testing.T) {
	testenv.RequireSandboxes(t)
	browser, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is not installed: scripts/test.sh installs Debian's chromium for the console's tests")
	}
	dir := testenv.NodePackage(t, "console")
	// A cluster port and one node of its own beside the server's: the operator's page lists it, and
	// drains and undrains it.
	e := testenv.Start(t, testenv.Options{Cluster: true})
	testenv.StartNode(t, e, "console-node", testenv.NodeOptions{})
	if !strings.Contains(e.URL, "127.0.0.1") {
		t.Fatalf("the test reaches the server as another origin by the name localhost; its URL is %s", e.URL)
	}
	ctx := ctxT(t, 10*time.Minute)
	other, err := e.Client.CreateTenant(ctx, "console-other")
	if err != nil {
		t.Fatal(err)
	}
	// A base image for the build in templates.test.mjs.
	base := ocitest.WriteArchive(t, ocitest.Image(t, v1.Config{WorkingDir: "/srv"},
		ocitest.HostPrograms(t, "/usr/bin/sh", "/usr/bin/cat", "/usr/bin/sleep"),
		ocitest.Layer(t, ocitest.Entry{Name: "srv/", Type: tar.TypeDir}, ocitest.Entry{Name: "tmp/", Type: tar.TypeDir, Mode: 0o1777})),
		"example.test/consolebase:1")
	if code, out, errOut := runCLI("--url", e.URL, "--api-key", e.APIKey, "template", "import", "consolebase", base); code != 0 {
		t.Fatalf("import the base: %d %q %s", code, out, errOut)
	}
	shots := os.Getenv("AIRLOCK_CONSOLE_SCREENSHOTS")
	if shots == "" {
		shots = filepath.Join(t.TempDir(), "screenshots")
	}
	// The tests of this tree, by name: the shared directory NodePackage fills may also hold test files
	// another checkout put there.
	src, err := filepath.Glob(filepath.Join("..", "testenv", "console", "*.test.mjs"))
	if err != nil || len(src) == 0 {
		t.Fatalf("no browser tests in internal/testenv/console: %v", err)
	}
	var tests []string
	for _, f := range src {
		tests = append(tests, filepath.Join(dir, filepath.Base(f)))
	}
	cmd := exec.CommandContext(ctx, "node", append([]string{"--test", "--test-reporter=spec", "--test-concurrency=1"}, tests...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "AIRLOCK_URL="+e.URL, "AIRLOCK_API_KEY="+e.APIKey, "OTHER_API_KEY="+other.APIKey.Key,
		"CHROMIUM="+browser, "SCREENSHOTS="+shots)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Logf("node --test *.test.mjs:\n%s", out.String())
	if err != nil {
		t.Fatalf("the console's browser tests failed: %v", err)
	}
}
