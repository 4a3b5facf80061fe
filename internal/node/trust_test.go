package node

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// TestReadTemplateFileStaysInTheTemplate: the CA bundle of a template is read beneath its root: a link
// to a host file (absolute or climbing out) and a FIFO read as no file, a bundle over the bound is
// refused, and a regular file (the positive control) is read.
func TestReadTemplateFileStaysInTheTemplate(t *testing.T) {
	host := t.TempDir()
	secret := filepath.Join(host, "secret")
	if err := os.WriteFile(secret, []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(host, "root")
	certs := filepath.Join(root, "etc", "ssl", "certs")
	if err := os.MkdirAll(certs, 0o755); err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(certs, "ca-certificates.crt")
	for name, plant := range map[string]func() error{
		"absolute link": func() error { return os.Symlink(secret, bundle) },
		"climbing link": func() error { return os.Symlink("../../../../secret", bundle) },
		"fifo":          func() error { return syscall.Mkfifo(bundle, 0o644) },
	} {
		_ = os.Remove(bundle)
		if err := plant(); err != nil {
			t.Fatal(err)
		}
		got, err := readTemplateFile(root, trustBundle, 1<<20)
		if err != nil || got != nil {
			t.Errorf("%s: read %q, %v; want nothing", name, got, err)
		}
	}
	_ = os.Remove(bundle)
	if err := os.WriteFile(bundle, []byte(strings.Repeat("x", 100)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readTemplateFile(root, trustBundle, 99); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a bundle over the bound: %v; want invalid argument", err)
	}
	if got, err := readTemplateFile(root, trustBundle, 100); err != nil || len(got) != 100 {
		t.Errorf("a bundle: %d bytes, %v; want 100", len(got), err)
	}
}
