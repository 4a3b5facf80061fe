package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// E2BSDK returns a directory holding e2bsdk/ (its package.json, tests and benchmark) with its node
// modules installed from the npm registry: the real, unmodified e2b package, pinned there.
func E2BSDK(t testing.TB) string {
	t.Helper()
	return NodePackage(t, "e2bsdk")
}

// NodePackage returns a directory holding this package's folder name (its package.json and *.mjs
// scripts) with its node modules installed from the npm registry, as pinned there. The install is
// kept under /var/cache for the next run of the same package.json. Node.js and npm must be installed
// (scripts/test.sh does).
func NodePackage(t testing.TB, name string) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed: scripts/test.sh installs Node.js for the tests of E2B's SDK and of MCP", tool)
		}
	}
	_, self, _, _ := runtime.Caller(0)
	src := filepath.Join(filepath.Dir(self), name)
	pkg, err := os.ReadFile(filepath.Join(src, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(pkg)
	dir := filepath.Join("/var/cache/airlock-tests", name+"-"+hex.EncodeToString(sum[:6]))
	if _, err := os.Stat(filepath.Join(dir, "package-lock.json")); err != nil {
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
			t.Fatalf("npm install (%s, from the npm registry): %v\n%s", name, err, out)
		}
		_ = os.RemoveAll(dir)
		if err := os.Rename(tmp, dir); err != nil {
			t.Fatal(err)
		}
	}
	scripts, err := filepath.Glob(filepath.Join(src, "*.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range scripts {
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

// E2BEnv is the environment that points E2B's SDKs at e: its /e2b prefix for both of their URLs, and
// key as the API key.
func (e *Env) E2BEnv(key string) []string {
	return append(os.Environ(), "E2B_API_URL="+e.URL+"/e2b", "E2B_SANDBOX_URL="+e.URL+"/e2b", "E2B_API_KEY="+key)
}
