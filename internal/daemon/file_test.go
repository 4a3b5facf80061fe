package daemon_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/daemon/link"
	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
)

func TestWriteReadRoundTrip(t *testing.T) {
	d := startDaemon(t, testConfig(t))
	c := d.dial(t, link.Options{})
	ctx := testCtx(t)
	dir := t.TempDir()
	for _, size := range []int{0, 1, proto.ChunkSize + 1, 1 << 20, 3<<20 + 17} {
		data := make([]byte, size)
		rand.Read(data)
		path := filepath.Join(dir, "f")
		if err := c.WriteFile(ctx, path, bytes.NewReader(data), link.WriteFileOptions{Mode: 0o640}); err != nil {
			t.Fatalf("WriteFile(%d bytes): %v", size, err)
		}
		var got bytes.Buffer
		if err := c.ReadFile(ctx, path, &got); err != nil {
			t.Fatalf("ReadFile(%d bytes): %v", size, err)
		}
		if !bytes.Equal(got.Bytes(), data) {
			t.Errorf("round trip of %d bytes returned %d different bytes", size, got.Len())
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o640 {
			t.Errorf("mode %o; want 640", fi.Mode().Perm())
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries after writes; want only the file (no temporary files)", len(entries))
	}
}

func TestWriteFileKeepsModeAndOwner(t *testing.T) {
	d := startDaemon(t, testConfig(t))
	c := d.dial(t, link.Options{})
	ctx := testCtx(t)
	path := filepath.Join(t.TempDir(), "script")
	if err := c.WriteFile(ctx, path, strings.NewReader("a"), link.WriteFileOptions{}); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
		t.Errorf("new file mode %o; want 644", fi.Mode().Perm())
	}
	os.Chmod(path, 0o755)
	if err := c.WriteFile(ctx, path, strings.NewReader("b"), link.WriteFileOptions{}); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o755 {
		t.Errorf("overwritten file mode %o; want the old 755", fi.Mode().Perm())
	}
	if os.Geteuid() != 0 {
		return
	}
	if err := c.WriteFile(ctx, path, strings.NewReader("c"), link.WriteFileOptions{User: "4321"}); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(path)
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 4321 || st.Gid != 4321 {
		t.Errorf("owner %d:%d; want 4321:4321", st.Uid, st.Gid)
	}
}

// blockingReader returns data once, then blocks until release is closed, then fails.
type blockingReader struct {
	data    []byte
	release chan struct{}
}

func (r *blockingReader) Read(p []byte) (int, error) {
	if len(r.data) > 0 {
		n := copy(p, r.data)
		r.data = r.data[n:]
		return n, nil
	}
	<-r.release
	return 0, errors.New("source failed")
}

func TestWriteFileAbortLeavesNoTemp(t *testing.T) {
	d := startDaemon(t, testConfig(t))
	c := d.dial(t, link.Options{})
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	os.WriteFile(path, []byte("old"), 0o644)

	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(testCtx(t))
		r := &blockingReader{data: bytes.Repeat([]byte("x"), 100<<10), release: make(chan struct{})}
		errc := make(chan error, 1)
		go func() { errc <- c.WriteFile(ctx, path, r, link.WriteFileOptions{}) }()
		waitTemp(t, dir, true)
		cancel()
		close(r.release)
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("WriteFile after cancel = %v; want context.Canceled", err)
		}
		waitTemp(t, dir, false)
	})
	t.Run("source error", func(t *testing.T) {
		r := &blockingReader{data: []byte("partial"), release: make(chan struct{})}
		close(r.release)
		if err := c.WriteFile(testCtx(t), path, r, link.WriteFileOptions{}); err == nil {
			t.Errorf("WriteFile with a failing source succeeded")
		}
		waitTemp(t, dir, false)
	})
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Errorf("file holds %q after failed writes; want the old contents", b)
	}
}

func TestWriteFileTooLarge(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxFileSize = 1000
	d := startDaemon(t, cfg)
	c := d.dial(t, link.Options{})
	dir := t.TempDir()
	err := c.WriteFile(testCtx(t), filepath.Join(dir, "f"), bytes.NewReader(make([]byte, 5000)), link.WriteFileOptions{})
	if !errors.Is(err, errdefs.ErrTooLarge) {
		t.Errorf("oversized WriteFile = %v; want ErrTooLarge", err)
	}
	waitTemp(t, dir, false)
}

// waitTemp waits until dir holds a temporary file (want) or none (!want).
func waitTemp(t *testing.T, dir string, want bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		entries, _ := os.ReadDir(dir)
		found := false
		for _, e := range entries {
			if strings.Contains(e.Name(), "airlock-tmp") {
				found = true
			}
		}
		if found == want {
			return
		}
	}
	t.Fatalf("temporary file present = %v; want %v", !want, want)
}

func TestPathValidation(t *testing.T) {
	d := startDaemon(t, testConfig(t))
	c := d.dial(t, link.Options{})
	ctx := testCtx(t)
	ops := map[string]func(string) error{
		"ReadFile":    func(p string) error { return c.ReadFile(ctx, p, io.Discard) },
		"WriteFile":   func(p string) error { return c.WriteFile(ctx, p, strings.NewReader("x"), link.WriteFileOptions{}) },
		"Stat":        func(p string) error { _, err := c.Stat(ctx, p); return err },
		"List":        func(p string) error { _, err := c.List(ctx, p); return err },
		"Mkdir":       func(p string) error { return c.Mkdir(ctx, p, link.MkdirOptions{}) },
		"Move":        func(p string) error { return c.Move(ctx, p, "/tmp/x") },
		"MoveTo":      func(p string) error { return c.Move(ctx, "/tmp", p) },
		"Remove":      func(p string) error { return c.Remove(ctx, p, true) },
		"TarDownload": func(p string) error { return c.TarDownload(ctx, p, io.Discard) },
		"TarUpload":   func(p string) error { return c.TarUpload(ctx, p, bytes.NewReader(nil), link.TarUploadOptions{}) },
	}
	for name, op := range ops {
		for _, p := range []string{"/tmp/../etc/passwd", "..", "relative/path", "", "/tmp/a\x00b", "/a/b/.."} {
			err := op(p)
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("%s(%q) = %v; want ErrInvalidArgument", name, p, err)
			}
		}
	}
	_, err := c.Stat(ctx, "/tmp/../etc")
	if err == nil || !strings.Contains(err.Error(), `".."`) {
		t.Errorf("error %v does not explain the \"..\" rejection", err)
	}
}

func TestFileOps(t *testing.T) {
	d := startDaemon(t, testConfig(t))
	c := d.dial(t, link.Options{})
	ctx := testCtx(t)
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	must(c.Mkdir(ctx, filepath.Join(dir, "a/b/c"), link.MkdirOptions{Mode: 0o750}))
	must(c.Mkdir(ctx, filepath.Join(dir, "a/b/c"), link.MkdirOptions{})) // exists: fine
	if fi, err := os.Stat(filepath.Join(dir, "a/b/c")); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o750 {
		t.Fatalf("mkdir -p: %v, %v", fi, err)
	}
	must(c.WriteFile(ctx, filepath.Join(dir, "a/file"), strings.NewReader("hello"), link.WriteFileOptions{}))
	must(os.Symlink("file", filepath.Join(dir, "a/link")))

	t.Run("stat", func(t *testing.T) {
		for _, tt := range []struct {
			path       string
			typ        proto.FileType
			size       int64
			linkTarget string
		}{
			{"a/file", proto.TypeFile, 5, ""},
			{"a/b", proto.TypeDir, -1, ""},
			{"a/link", proto.TypeSymlink, -1, "file"},
		} {
			fi, err := c.Stat(ctx, filepath.Join(dir, tt.path))
			if err != nil {
				t.Fatal(err)
			}
			if fi.Type != tt.typ || (tt.size >= 0 && fi.Size != tt.size) || fi.LinkTarget != tt.linkTarget || fi.Name != filepath.Base(tt.path) || fi.ModTime.IsZero() {
				t.Errorf("Stat(%s) = %+v; want type %s size %d target %q", tt.path, fi, tt.typ, tt.size, tt.linkTarget)
			}
		}
		if _, err := c.Stat(ctx, filepath.Join(dir, "missing")); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Stat missing = %v; want ErrNotFound", err)
		}
	})

	t.Run("list", func(t *testing.T) {
		entries, err := c.List(ctx, filepath.Join(dir, "a"))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range entries {
			got = append(got, e.Name+":"+string(e.Type))
		}
		if diff := cmp.Diff([]string{"b:dir", "file:file", "link:symlink"}, got); diff != "" {
			t.Errorf("List mismatch (-want +got):\n%s", diff)
		}
		if _, err := c.List(ctx, filepath.Join(dir, "a/file")); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("List of a file = %v; want ErrInvalidArgument", err)
		}
		if _, err := c.List(ctx, filepath.Join(dir, "missing")); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("List missing = %v; want ErrNotFound", err)
		}
	})

	t.Run("list large", func(t *testing.T) {
		big := filepath.Join(dir, "big")
		must(os.Mkdir(big, 0o755))
		for i := range 3000 {
			must(os.WriteFile(filepath.Join(big, strings.Repeat("n", 60)+string(rune('a'+i%26))+itoa(i)), nil, 0o644))
		}
		entries, err := c.List(ctx, big)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 3000 {
			t.Errorf("List returned %d entries; want 3000", len(entries))
		}
	})

	t.Run("read errors", func(t *testing.T) {
		if err := c.ReadFile(ctx, filepath.Join(dir, "missing"), io.Discard); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("ReadFile missing = %v; want ErrNotFound", err)
		}
		if err := c.ReadFile(ctx, filepath.Join(dir, "a"), io.Discard); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ReadFile of a directory = %v; want ErrInvalidArgument", err)
		}
		if err := c.WriteFile(ctx, filepath.Join(dir, "nodir/f"), strings.NewReader("x"), link.WriteFileOptions{}); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("WriteFile into a missing directory = %v; want ErrNotFound", err)
		}
		if err := c.WriteFile(ctx, filepath.Join(dir, "a/b"), strings.NewReader("x"), link.WriteFileOptions{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("WriteFile over a directory = %v; want ErrInvalidArgument", err)
		}
		if err := c.Mkdir(ctx, filepath.Join(dir, "a/file/sub"), link.MkdirOptions{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Mkdir below a file = %v; want ErrInvalidArgument", err)
		}
	})

	t.Run("move", func(t *testing.T) {
		must(c.Move(ctx, filepath.Join(dir, "a/file"), filepath.Join(dir, "moved")))
		if b, err := os.ReadFile(filepath.Join(dir, "moved")); err != nil || string(b) != "hello" {
			t.Errorf("after move: %q, %v", b, err)
		}
		if err := c.Move(ctx, filepath.Join(dir, "a/file"), filepath.Join(dir, "x")); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Move of a missing source = %v; want ErrNotFound", err)
		}
		if err := c.Move(ctx, filepath.Join(dir, "a"), filepath.Join(dir, "a/b/inside")); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Move into itself = %v; want ErrInvalidArgument", err)
		}
	})

	t.Run("move across devices", func(t *testing.T) {
		other := "/dev/shm"
		var st1, st2 syscall.Stat_t
		if syscall.Stat(other, &st1) != nil || syscall.Stat(dir, &st2) != nil || st1.Dev == st2.Dev {
			t.Skip("no second file system to move across")
		}
		src, err := os.MkdirTemp(other, "airlock-test")
		if err != nil {
			t.Skip(err)
		}
		defer os.RemoveAll(src)
		must(os.WriteFile(filepath.Join(src, "f"), []byte("across"), 0o600))
		must(os.Symlink("f", filepath.Join(src, "l")))
		dst := filepath.Join(dir, "across")
		must(c.Move(ctx, src, dst))
		if b, err := os.ReadFile(filepath.Join(dst, "l")); err != nil || string(b) != "across" {
			t.Errorf("after cross-device move: %q, %v", b, err)
		}
		if fi, _ := os.Stat(filepath.Join(dst, "f")); fi.Mode().Perm() != 0o600 {
			t.Errorf("mode not kept: %o", fi.Mode().Perm())
		}
		if _, err := os.Stat(src); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("source still exists after the move")
		}
	})

	t.Run("remove", func(t *testing.T) {
		if err := c.Remove(ctx, filepath.Join(dir, "a"), false); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Errorf("non-recursive Remove of a full directory = %v; want ErrFailedPrecondition", err)
		}
		must(c.Remove(ctx, filepath.Join(dir, "moved"), false))
		must(c.Remove(ctx, filepath.Join(dir, "a"), true))
		if _, err := os.Stat(filepath.Join(dir, "a")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("directory still exists after a recursive Remove")
		}
		if err := c.Remove(ctx, filepath.Join(dir, "a"), true); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Remove missing = %v; want ErrNotFound", err)
		}
		if err := c.Remove(ctx, "/", true); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Remove / = %v; want ErrInvalidArgument", err)
		}
	})
}

func itoa(i int) string {
	return strings.TrimLeft(string([]byte{byte('0' + i/1000%10), byte('0' + i/100%10), byte('0' + i/10%10), byte('0' + i%10)}), "")
}

type tarEntry struct {
	name, body, link string
	typ              byte
	mode             int64
}

func makeTar(t *testing.T, entries []tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: e.mode, Size: int64(len(e.body))}
		if hdr.Mode == 0 {
			hdr.Mode = 0o644
		}
		if e.typ != tar.TypeReg {
			hdr.Size = 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	return buf.Bytes()
}

func readTar(t *testing.T, b []byte) map[string]string {
	t.Helper()
	out := make(map[string]string)
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		switch hdr.Typeflag {
		case tar.TypeReg:
			body, _ := io.ReadAll(tr)
			out[hdr.Name] = string(body)
		case tar.TypeSymlink:
			out[hdr.Name] = "-> " + hdr.Linkname
		case tar.TypeDir:
			out[hdr.Name] = "dir"
		}
	}
}

func TestTar(t *testing.T) {
	d := startDaemon(t, testConfig(t))
	c := d.dial(t, link.Options{})
	ctx := testCtx(t)
	base := t.TempDir()

	t.Run("upload then download", func(t *testing.T) {
		dst := filepath.Join(base, "up")
		os.Mkdir(dst, 0o755)
		archive := makeTar(t, []tarEntry{
			{name: "proj/", typ: tar.TypeDir, mode: 0o755},
			{name: "proj/main.go", body: "package main", typ: tar.TypeReg},
			{name: "proj/deep/er/x.txt", body: "x", typ: tar.TypeReg, mode: 0o600},
			{name: "proj/run.sh", body: "#!/bin/sh", typ: tar.TypeReg, mode: 0o755},
			{name: "proj/link", link: "main.go", typ: tar.TypeSymlink},
			{name: "proj/hard", link: "proj/main.go", typ: tar.TypeLink},
			{name: "./proj/dot", body: "dot", typ: tar.TypeReg},
		})
		if err := c.TarUpload(ctx, dst, bytes.NewReader(archive), link.TarUploadOptions{}); err != nil {
			t.Fatal(err)
		}
		if fi, _ := os.Stat(filepath.Join(dst, "proj/run.sh")); fi == nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("run.sh mode not kept: %v", fi)
		}
		var buf bytes.Buffer
		if err := c.TarDownload(ctx, filepath.Join(dst, "proj"), &buf); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{
			"proj/":              "dir",
			"proj/main.go":       "package main",
			"proj/deep/":         "dir",
			"proj/deep/er/":      "dir",
			"proj/deep/er/x.txt": "x",
			"proj/run.sh":        "#!/bin/sh",
			"proj/link":          "-> main.go",
			"proj/hard":          "package main",
			"proj/dot":           "dot",
		}
		if diff := cmp.Diff(want, readTar(t, buf.Bytes())); diff != "" {
			t.Errorf("downloaded archive mismatch (-want +got):\n%s", diff)
		}
		buf.Reset()
		if err := c.TarDownload(ctx, filepath.Join(dst, "proj/main.go"), &buf); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(map[string]string{"main.go": "package main"}, readTar(t, buf.Bytes())); diff != "" {
			t.Errorf("single-file archive mismatch (-want +got):\n%s", diff)
		}
		if err := c.TarDownload(ctx, filepath.Join(dst, "missing"), &buf); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("TarDownload missing = %v; want ErrNotFound", err)
		}
	})

	t.Run("ownership", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root to chown")
		}
		dst := filepath.Join(base, "own")
		os.Mkdir(dst, 0o755)
		archive := makeTar(t, []tarEntry{{name: "d/f", body: "x", typ: tar.TypeReg}, {name: "d/l", link: "f", typ: tar.TypeSymlink}})
		if err := c.TarUpload(ctx, dst, bytes.NewReader(archive), link.TarUploadOptions{User: "4321"}); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"d", "d/f", "d/l"} {
			fi, err := os.Lstat(filepath.Join(dst, p))
			if err != nil {
				t.Fatal(err)
			}
			if st := fi.Sys().(*syscall.Stat_t); st.Uid != 4321 || st.Gid != 4321 {
				t.Errorf("%s owned by %d:%d; want 4321:4321", p, st.Uid, st.Gid)
			}
		}
	})

	t.Run("hostile entries", func(t *testing.T) {
		for _, tt := range []struct {
			name    string
			entries []tarEntry
		}{
			{"dotdot", []tarEntry{{name: "../evil", body: "x", typ: tar.TypeReg}}},
			{"nested dotdot", []tarEntry{{name: "a/../../evil", body: "x", typ: tar.TypeReg}}},
			{"absolute", []tarEntry{{name: "/tmp/evil", body: "x", typ: tar.TypeReg}}},
			{"symlink escaping", []tarEntry{{name: "evil", link: "../outside", typ: tar.TypeSymlink}}},
			{"absolute symlink", []tarEntry{{name: "evil", link: "/etc", typ: tar.TypeSymlink}}},
			{"write through symlink", []tarEntry{
				{name: "sub/", typ: tar.TypeDir},
				{name: "l", link: "sub", typ: tar.TypeSymlink},
				{name: "l/evil", body: "x", typ: tar.TypeReg},
			}},
			{"hard link escaping", []tarEntry{{name: "evil", link: "../outside/secret", typ: tar.TypeLink}}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				root := t.TempDir()
				dst := filepath.Join(root, "dst")
				outside := filepath.Join(root, "outside")
				os.Mkdir(dst, 0o755)
				os.Mkdir(outside, 0o755)
				os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o600)
				err := c.TarUpload(ctx, dst, bytes.NewReader(makeTar(t, tt.entries)), link.TarUploadOptions{})
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Errorf("TarUpload = %v; want ErrInvalidArgument", err)
				}
				var found []string
				filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
					if strings.Contains(p, "evil") && !strings.HasPrefix(p, dst+"/") {
						found = append(found, p)
					}
					return nil
				})
				entries, _ := os.ReadDir(outside)
				if len(found) > 0 || len(entries) != 1 {
					t.Errorf("something was written outside the target: %v, outside holds %d entries", found, len(entries))
				}
			})
		}
	})

	t.Run("existing symlink is replaced, not followed", func(t *testing.T) {
		root := t.TempDir()
		dst := filepath.Join(root, "dst")
		os.Mkdir(dst, 0o755)
		victim := filepath.Join(root, "victim")
		os.WriteFile(victim, []byte("keep"), 0o600)
		os.Symlink(victim, filepath.Join(dst, "f"))
		if err := c.TarUpload(ctx, dst, bytes.NewReader(makeTar(t, []tarEntry{{name: "f", body: "new", typ: tar.TypeReg}})), link.TarUploadOptions{}); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(victim); string(b) != "keep" {
			t.Errorf("symlink target was overwritten: %q", b)
		}
		if fi, _ := os.Lstat(filepath.Join(dst, "f")); fi.Mode()&os.ModeSymlink != 0 {
			t.Errorf("symlink was not replaced by the file")
		}
	})

	t.Run("not a directory", func(t *testing.T) {
		f := filepath.Join(base, "plain")
		os.WriteFile(f, nil, 0o644)
		if err := c.TarUpload(ctx, f, bytes.NewReader(makeTar(t, nil)), link.TarUploadOptions{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("TarUpload into a file = %v; want ErrInvalidArgument", err)
		}
		if err := c.TarUpload(ctx, filepath.Join(base, "missing"), bytes.NewReader(makeTar(t, nil)), link.TarUploadOptions{}); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("TarUpload into a missing dir = %v; want ErrNotFound", err)
		}
	})
	t.Run("garbage", func(t *testing.T) {
		dst := filepath.Join(base, "garbage")
		os.Mkdir(dst, 0o755)
		if err := c.TarUpload(ctx, dst, bytes.NewReader(bytes.Repeat([]byte("not a tar"), 200)), link.TarUploadOptions{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("TarUpload of garbage = %v; want ErrInvalidArgument", err)
		}
	})
}

func TestReadFileCancel(t *testing.T) {
	d := startDaemon(t, testConfig(t))
	c := d.dial(t, link.Options{})
	path := filepath.Join(t.TempDir(), "big")
	os.WriteFile(path, make([]byte, 8<<20), 0o644)
	ctx, cancel := context.WithCancel(testCtx(t))
	w := &cancelWriter{cancel: cancel}
	err := c.ReadFile(ctx, path, w)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("ReadFile after cancel = %v; want context.Canceled", err)
	}
	// The connection is still usable.
	var buf bytes.Buffer
	if err := c.ReadFile(testCtx(t), path, &buf); err != nil || buf.Len() != 8<<20 {
		t.Errorf("ReadFile after a canceled one: %d bytes, %v", buf.Len(), err)
	}
}

// cancelWriter cancels its context on the first write.
type cancelWriter struct{ cancel context.CancelFunc }

func (w *cancelWriter) Write(p []byte) (int, error) {
	w.cancel()
	return len(p), nil
}

func TestAudit(t *testing.T) {
	d := startDaemon(t, testConfig(t))
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	audit, err := link.NewFileAudit(path)
	if err != nil {
		t.Fatal(err)
	}
	c := d.dial(t, link.Options{Audit: audit})
	ctx := testCtx(t)
	if _, err := c.Exec(ctx, proto.ExecRequest{Argv: []string{"sh", "-c", "echo $SECRET_TOKEN >/dev/null; echo out"}, Env: []string{"SECRET_TOKEN=hunter2-value"}, Stdin: []byte("stdin-secret")}); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "f")
	if err := c.WriteFile(ctx, file, strings.NewReader("file-contents-secret"), link.WriteFileOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stat(ctx, "/no/such/file"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatal(err)
	}
	c.Close()
	if err := audit.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("audit file mode %o; want 600", fi.Mode().Perm())
	}
	raw, _ := os.ReadFile(path)
	for _, secret := range []string{"hunter2-value", "stdin-secret", "file-contents-secret"} {
		if bytes.Contains(raw, []byte(secret)) {
			t.Errorf("audit log contains %q", secret)
		}
	}
	if !bytes.Contains(raw, []byte("SECRET_TOKEN=\\u003credacted\\u003e")) && !bytes.Contains(raw, []byte("SECRET_TOKEN=<redacted>")) {
		t.Errorf("audit log does not record the redacted env key:\n%s", raw)
	}
	var seen []string
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var e struct {
			Direction, Type, Op, Channel, Error, Event string
			Size                                       int
		}
		if err := jsonUnmarshal([]byte(line), &e); err != nil {
			t.Fatalf("bad audit line %q: %v", line, err)
		}
		seen = append(seen, e.Direction+" "+e.Type+" "+e.Op+" "+e.Channel+e.Error)
	}
	sort.Strings(seen)
	for _, want := range []string{
		"to_sandbox request exec ",
		"to_sandbox data exec stdin",
		"to_sandbox close exec ",
		"from_sandbox data exec stdout",
		"from_sandbox response exec ",
		"to_sandbox request write_file ",
		"to_sandbox data write_file stdin",
		"from_sandbox response stat not_found",
	} {
		if !containsString(seen, want) {
			t.Errorf("audit log lacks an entry %q; have:\n%s", want, strings.Join(seen, "\n"))
		}
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
