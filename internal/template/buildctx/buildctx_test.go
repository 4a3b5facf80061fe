package buildctx

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// contextTar makes a build context tar of entries "name" (a file, body "name"), "name=body" (a file),
// "name/" (a directory) and "name>target" (a symbolic link).
func contextTar(t *testing.T, names ...string) io.Reader {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		body := n
		if name, b, ok := strings.Cut(n, "="); ok {
			n, body = name, b
		}
		h := &tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}
		if name, target, ok := strings.Cut(n, ">"); ok {
			h = &tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}
		} else if strings.HasSuffix(n, "/") {
			h = &tar.Header{Name: n, Typeflag: tar.TypeDir, Mode: 0o755}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(body))
		}
	}
	tw.Close()
	return &buf
}

// TestCopyPlan: COPY's sources go where Docker puts them: a directory's contents (not itself) under the
// destination, a file to the destination or, when it is a directory (a trailing slash, several
// sources), under it; globs match in the context; the plan's digest changes with a file's contents.
func TestCopyPlan(t *testing.T) {
	bc, err := Spool(contextTar(t, "app/", "app/a.txt", "app/sub/b.txt", "run.sh", "x.py", "y.py", "link>app/a.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer bc.Close()
	for _, c := range []struct {
		srcs    []string
		dest    string
		destDir bool
		want    map[string]string
	}{
		{[]string{"app"}, "/srv", false, map[string]string{"app/a.txt": "/srv/a.txt", "app/sub": "/srv/sub", "app/sub/b.txt": "/srv/sub/b.txt"}},
		{[]string{"run.sh"}, "/usr/local/bin/run", false, map[string]string{"run.sh": "/usr/local/bin/run"}},
		{[]string{"run.sh"}, "/tmp", true, map[string]string{"run.sh": "/tmp/run.sh"}},
		{[]string{"*.py"}, "/app", false, map[string]string{"x.py": "/app/x.py", "y.py": "/app/y.py"}},
		{[]string{"./link", "../run.sh"}, "/o", false, map[string]string{"link": "/o/link", "run.sh": "/o/run.sh"}},
	} {
		p, err := bc.Plan(c.srcs, c.dest, c.destDir)
		if err != nil {
			t.Errorf("plan %q → %s: %v", c.srcs, c.dest, err)
			continue
		}
		if len(p.to) != len(c.want) {
			t.Errorf("plan %q → %s: %v; want %v", c.srcs, c.dest, p.to, c.want)
		}
		for k, v := range c.want {
			if p.to[k] != v {
				t.Errorf("plan %q → %s: %s goes to %q; want %q", c.srcs, c.dest, k, p.to[k], v)
			}
		}
	}
	if _, err := bc.Plan([]string{"missing"}, "/x", false); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a missing source: %v; want invalid argument", err)
	}
	// The digest: the same for the same plan, another for other contents or another destination.
	digestOf := func(bc *Context, dest string) string {
		p, err := bc.Plan([]string{"run.sh"}, dest, false)
		if err != nil {
			t.Fatal(err)
		}
		return bc.Digest(p)
	}
	changed, err := Spool(contextTar(t, "run.sh=echo changed"))
	if err != nil {
		t.Fatal(err)
	}
	defer changed.Close()
	if a, b := digestOf(bc, "/r"), digestOf(bc, "/r"); a != b {
		t.Errorf("the same plan's digests differ: %s, %s", a, b)
	}
	if digestOf(bc, "/r") == digestOf(changed, "/r") || digestOf(bc, "/r") == digestOf(bc, "/s") {
		t.Error("the digest did not change with the file's contents or the destination")
	}
}

// TestBuildContextRefusals: a context entry that climbs out, a device node and a non-tar are refused.
func TestBuildContextRefusals(t *testing.T) {
	for name, r := range map[string]io.Reader{
		"../escape": contextTar(t, "../escape"),
		"absolute":  contextTar(t, "/etc/passwd"),
		"not a tar": strings.NewReader(strings.Repeat("not a tar ", 100)),
	} {
		if bc, err := Spool(r); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: %v; want invalid argument", name, err)
			if err == nil {
				bc.Close()
			}
		}
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "dev", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3, Mode: 0o666})
	tw.Close()
	if _, err := Spool(&buf); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a device node: %v; want invalid argument", err)
	}
	for in, want := range map[string][2]int{"": {0, 0}, "1000": {1000, 1000}, "1000:50": {1000, 50}, "user:root": {1000, 0}} {
		if uid, gid, err := ParseChown(in); err != nil || uid != want[0] || gid != want[1] {
			t.Errorf("--chown=%s: %d:%d, %v; want %v", in, uid, gid, err, want)
		}
	}
	for _, in := range []string{"nobody", "-1", "1:x", "99999999999"} {
		if _, _, err := ParseChown(in); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("--chown=%s: %v; want invalid argument", in, err)
		}
	}
}
