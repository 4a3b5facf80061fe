// Package registrytest runs a real OCI registry for tests: Debian's docker-registry (the CNCF
// Distribution registry, installed by scripts/test.sh) on a loopback port, over plain HTTP, storing in
// a temporary directory, with or without basic authentication. Tests skip when it is not installed.
package registrytest

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/crypto/bcrypt"
)

// Registry is a running registry.
type Registry struct {
	// Host is host:port, plain HTTP.
	Host string
	// Username and Password are its one account; empty Username: no authentication.
	Username, Password string
}

// Start runs a registry for the test, stopped when it ends. With username set, every request needs
// that account's basic credentials.
func Start(t testing.TB, username, password string) Registry {
	t.Helper()
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		t.Skip("needs docker-registry on PATH, a real OCI registry (Debian's docker-registry; scripts/test.sh installs it)")
	}
	dir := t.TempDir()
	port := freePort(t)
	auth := ""
	if username != "" {
		hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		htpasswd := filepath.Join(dir, "htpasswd")
		if err := os.WriteFile(htpasswd, []byte(username+":"+string(hash)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		auth = fmt.Sprintf("auth:\n  htpasswd:\n    realm: test\n    path: %s\n", htpasswd)
	}
	cfg := fmt.Sprintf("version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: 127.0.0.1:%s\n%s",
		filepath.Join(dir, "data"), port, auth)
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", cfgPath)
	logf, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
	})
	r := Registry{Host: "127.0.0.1:" + port, Username: username, Password: password}
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get("http://" + r.Host + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized {
				return r
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "registry.log"))
			t.Fatalf("the registry did not answer on %s: %v\n%s", r.Host, err, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Push writes img to the registry as repo:tag and returns its reference (host/repo:tag).
func (r Registry) Push(t testing.TB, img v1.Image, repoTag string) string {
	t.Helper()
	ref, err := name.ParseReference(r.Host+"/"+repoTag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	opts := []remote.Option{}
	if r.Username != "" {
		opts = append(opts, remote.WithAuth(&authn.Basic{Username: r.Username, Password: r.Password}))
	}
	if err := remote.Write(ref, img, opts...); err != nil {
		t.Fatal(err)
	}
	return ref.String()
}

func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}
