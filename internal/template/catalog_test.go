package template

import (
	"archive/tar"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/template/oci/ocitest"
)

func TestParseRef(t *testing.T) {
	d := "sha256:" + strings.Repeat("ab", 32)
	for _, c := range []struct {
		ref, name, digest string
		bad               bool
	}{
		{"", DefaultName, "", false},
		{"default", DefaultName, "", false},
		{"python", "python", "", false},
		{"python@" + d, "python", d, false},
		{"Python", "", "", true},
		{"../x", "", "", true},
		{"python@sha256:abc", "", "", true},
		{"python@" + strings.ToUpper(d), "", "", true},
		{"@" + d, "", "", true},
	} {
		name, digest, err := ParseRef(c.ref)
		if c.bad {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("ParseRef(%q) = %q, %q, %v; want invalid argument", c.ref, name, digest, err)
			}
			continue
		}
		if err != nil || name != c.name || digest != c.digest {
			t.Errorf("ParseRef(%q) = %q, %q, %v; want %q, %q", c.ref, name, digest, err, c.name, c.digest)
		}
	}
}

// TestCatalogImageTemplates: an imported image is a template by its name and by name and digest; its
// root has the image's files under the platform's layer (resolver, the sandbox user added to the
// image's own accounts, the daemon's mount point) and nothing is written into the image's layers;
// re-pointing the name changes what the name resolves to, never what name@digest is.
func TestCatalogImageTemplates(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount overlays")
	}
	ctx := context.Background()
	dir := t.TempDir()
	c := NewCatalog(dir)
	t.Cleanup(func() { unmountAll(t, filepath.Join(dir, "oci")) })

	one := ocitest.Image(t, v1.Config{Env: []string{"GREETING=hello"}, WorkingDir: "/srv", User: "app"},
		ocitest.Layer(t,
			ocitest.Entry{Name: "etc/", Type: tar.TypeDir, Mode: 0o750},
			ocitest.Entry{Name: "etc/passwd", Body: "root:x:0:0:root:/root:/bin/sh\napp:x:1001:1001::/srv:/bin/sh\n"},
			ocitest.Entry{Name: "etc/group", Type: tar.TypeSymlink, Link: "../../../../etc/group"},
			ocitest.Entry{Name: "srv/", Type: tar.TypeDir},
			ocitest.Entry{Name: "srv/version", Body: "one\n"}))
	ref1, err := c.Import(ctx, "app", ocitest.WriteLayout(t, one))
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := one.Digest()
	if ref1 != "app@"+d1.String() {
		t.Errorf("Import = %q; want app@%s", ref1, d1)
	}
	tpl, err := c.Get(ctx, "app")
	if err != nil {
		t.Fatal(err)
	}
	if tpl.Name != ref1 || tpl.Digest != d1.String() || tpl.WorkingDir != "/srv" || tpl.User != "app" ||
		!strings.Contains(strings.Join(tpl.Env, " "), "GREETING=hello") || !strings.Contains(strings.Join(tpl.Env, " "), "PATH=") {
		t.Errorf("template = %+v", tpl)
	}
	read := func(root, name string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := read(tpl.RootFS, "srv/version"); got != "one\n" {
		t.Errorf("image file = %q", got)
	}
	passwd := read(tpl.RootFS, "etc/passwd")
	if !strings.Contains(passwd, "app:x:1001:1001") || !strings.Contains(passwd, "user:x:1000:1000") || strings.Count("\n"+passwd, "\nroot:") != 1 {
		t.Errorf("passwd = %q; want the image's accounts and the sandbox user", passwd)
	}
	// The image's group file is a link out of the image: the platform's accounts only, nothing of the host's.
	if group := read(tpl.RootFS, "etc/group"); !strings.HasPrefix(group, "root:x:0:\nuser:x:1000:") {
		t.Errorf("group = %q", group)
	}
	if got := read(tpl.RootFS, "etc/resolv.conf"); !strings.Contains(got, "nameserver 100.96.0.1") {
		t.Errorf("resolv.conf = %q", got)
	}
	if fi, err := os.Stat(filepath.Join(tpl.RootFS, "etc")); err != nil || fi.Mode().Perm() != 0o750 {
		t.Errorf("/etc keeps the image's mode: %v, %v", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Join(tpl.RootFS, "home", "user")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != UserUID {
		t.Errorf("/home/user: %v", err)
	}
	if _, err := os.Stat(filepath.Join(tpl.RootFS, ".airlock", "init")); err != nil {
		t.Errorf("the daemon's mount point: %v", err)
	}
	if err := os.WriteFile(filepath.Join(tpl.RootFS, "x"), nil, 0o644); err == nil {
		t.Error("the template root is writable")
	}
	// Asked again: the same root, not mounted twice.
	again, err := c.Get(ctx, ref1)
	if err != nil || again.RootFS != tpl.RootFS {
		t.Fatalf("Get(%q) = %+v, %v", ref1, again, err)
	}
	for _, p := range []string{tpl.RootFS, filepath.Join(dir, "oci", "rootfs", strings.Replace(d1.String(), ":", "-", 1))} {
		if n := mountsUnder(t, p); n != 1 {
			t.Errorf("%d mounts at %s after two Gets; want 1", n, p)
		}
	}

	// Re-pointed: the name is the new image, name@digest still the old one.
	two := ocitest.Image(t, v1.Config{}, ocitest.Layer(t, ocitest.Entry{Name: "srv/", Type: tar.TypeDir}, ocitest.Entry{Name: "srv/version", Body: "two\n"}))
	ref2, err := c.Import(ctx, "app", ocitest.WriteArchive(t, two, "example.test/app:2"))
	if err != nil {
		t.Fatal(err)
	}
	now, err := c.Get(ctx, "app")
	if err != nil || now.Name != ref2 || read(now.RootFS, "srv/version") != "two\n" {
		t.Fatalf("app after the re-point = %+v, %v", now, err)
	}
	old, err := c.Get(ctx, ref1)
	if err != nil || read(old.RootFS, "srv/version") != "one\n" {
		t.Fatalf("%s after the re-point = %+v, %v", ref1, old, err)
	}
	names, err := c.List(ctx)
	if err != nil || strings.Join(names, ",") != "default,app" {
		t.Errorf("List = %v, %v", names, err)
	}

	for _, ref := range []string{"nope", "app@sha256:" + strings.Repeat("0", 64)} {
		if _, err := c.Get(ctx, ref); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Get(%q) = %v; want not found", ref, err)
		}
	}
	if _, err := c.Import(ctx, "default", ocitest.WriteLayout(t, two)); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Import as default = %v; want invalid argument", err)
	}
}

// mountsUnder counts the mounts at dir.
func mountsUnder(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			n++
		}
	}
	return n
}

// unmountAll detaches every mount under dir.
func unmountAll(t *testing.T, dir string) {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			_ = unix.Unmount(f[4], unix.MNT_DETACH)
		}
	}
}
