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

// TestCatalogImageTemplates: an imported image is a template by name and digest; its root has the
// image's files under the platform's layer (resolver, the sandbox user added to the image's own
// accounts, the daemon's mount point) and is read-only; two images are two roots; a name without a
// digest, or a digest the node lacks, is not found.
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
	got1, err := c.Import(ctx, ocitest.WriteLayout(t, one))
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := one.Digest()
	if got1.Digest != d1.String() {
		t.Errorf("Import = %+v; want digest %s", got1, d1)
	}
	ref1 := "app@" + d1.String()
	tpl, err := c.Get(ctx, ref1)
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
	if fi, err := os.Stat(filepath.Join(tpl.RootFS, "tmp")); err != nil || fi.Mode()&(os.ModePerm|os.ModeSticky) != os.ModeSticky|0o777 {
		t.Errorf("/tmp: %v, %v; want sticky and writable by all", fi.Mode(), err)
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

	// Another image (a docker-save tarball): another root, the first one unchanged.
	two := ocitest.Image(t, v1.Config{}, ocitest.Layer(t, ocitest.Entry{Name: "srv/", Type: tar.TypeDir}, ocitest.Entry{Name: "srv/version", Body: "two\n"}))
	got2, err := c.Import(ctx, ocitest.WriteArchive(t, two, "example.test/app:2"))
	if err != nil {
		t.Fatal(err)
	}
	now, err := c.Get(ctx, "app@"+got2.Digest)
	if err != nil || read(now.RootFS, "srv/version") != "two\n" {
		t.Fatalf("the second image = %+v, %v", now, err)
	}
	if got := read(tpl.RootFS, "srv/version"); got != "one\n" {
		t.Errorf("the first image after the second: %q", got)
	}

	for _, ref := range []string{"app", "app@sha256:" + strings.Repeat("0", 64)} {
		if _, err := c.Get(ctx, ref); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Get(%q) = %v; want not found", ref, err)
		}
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

// TestDefaultRootModes: the default root's directories have their modes, those made on the way
// included (a user must reach /etc/ssl/certs to trust the sandbox's CA).
func TestDefaultRootModes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give directories their owners")
	}
	tpl, err := NewHostRegistry(t.TempDir()).Get(context.Background(), DefaultName)
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{"etc": 0o755, "etc/ssl": 0o755, "etc/ssl/certs": 0o755, "tmp": 0o777 | os.ModeSticky,
		"home/user": 0o750, "root": 0o700, "run/airlock": 0o700} {
		fi, err := os.Stat(filepath.Join(tpl.RootFS, p))
		if err != nil || fi.Mode()&(os.ModePerm|os.ModeSticky) != want {
			t.Errorf("/%s: %v, %v; want %v", p, fi.Mode(), err, want)
		}
	}
}
