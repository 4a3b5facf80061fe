package cli

import (
	"archive/tar"
	"bytes"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// tree describes the files of a directory: path → content ("dir/" entries are directories, "->target"
// contents are symlinks).
func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		info, _ := d.Info()
		switch {
		case d.IsDir():
			out[filepath.ToSlash(rel)+"/"] = ""
		case info.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out[filepath.ToSlash(rel)] = "->" + target
		default:
			b, _ := os.ReadFile(p)
			out[filepath.ToSlash(rel)] = string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func makeTree(t *testing.T, dir string, tree map[string]string) {
	t.Helper()
	for p, content := range tree {
		full := filepath.Join(dir, filepath.FromSlash(p))
		switch {
		case strings.HasSuffix(p, "/"):
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
		case strings.HasPrefix(content, "->"):
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(strings.TrimPrefix(content, "->"), full); err != nil {
				t.Fatal(err)
			}
		default:
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(full, []byte(content), 0o640); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestTarRoundTrip(t *testing.T) {
	tree := map[string]string{"a.txt": "A", "sub/": "", "sub/b.txt": "B", "sub/empty/": "", "sub/link": "->../a.txt"}
	src := filepath.Join(t.TempDir(), "proj")
	makeTree(t, src, tree)

	tests := []struct {
		name, prefix, rename string
		want                 map[string]string
	}{
		{"contents", "", "", tree},
		{"prefixed", "proj", "", prefixTree("proj/", tree)},
		{"renamed", "proj", "copy", prefixTree("copy/", tree)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := writeTar(&buf, src, tt.prefix); err != nil {
				t.Fatalf("writeTar: %v", err)
			}
			dst := t.TempDir()
			if err := extractTar(&buf, dst, tt.rename); err != nil {
				t.Fatalf("extractTar: %v", err)
			}
			if diff := cmp.Diff(tt.want, readTree(t, dst)); diff != "" {
				t.Errorf("extracted tree (-want +got):\n%s", diff)
			}
		})
	}
}

func prefixTree(prefix string, tree map[string]string) map[string]string {
	out := map[string]string{prefix: ""}
	for k, v := range tree {
		out[prefix+k] = v
	}
	return out
}

type entry struct {
	name, link string
	typ        byte
	mode       int64
	body       string
}

func archive(t *testing.T, entries ...entry) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		hdr := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: mode, Size: int64(len(e.body))}
		if e.typ != tar.TypeReg {
			hdr.Size = 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if hdr.Size > 0 {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

// TestExtractHostile feeds extractTar archives a hostile sandbox could send: none may write outside the
// destination.
func TestExtractHostile(t *testing.T) {
	tests := []struct {
		name    string
		entries []entry
	}{
		{"dot dot", []entry{{name: "../escaped", typ: tar.TypeReg, body: "x"}}},
		{"nested dot dot", []entry{{name: "d/../../escaped", typ: tar.TypeReg, body: "x"}}},
		{"absolute", []entry{{name: "/escaped", typ: tar.TypeReg, body: "x"}}},
		{"through symlink", []entry{
			{name: "d/", typ: tar.TypeDir},
			{name: "d/out", typ: tar.TypeSymlink, link: "../../"},
			{name: "d/out/escaped", typ: tar.TypeReg, body: "x"},
		}},
		{"absolute symlink", []entry{
			{name: "d/out", typ: tar.TypeSymlink, link: "/"},
			{name: "d/out/escaped", typ: tar.TypeReg, body: "x"},
		}},
		{"hard link out", []entry{{name: "d/h", typ: tar.TypeLink, link: "../escaped"}}},
		// Links that stay inside the destination are not followed either: what an entry names is
		// where it lands.
		{"file through a link inside", []entry{
			{name: "d/", typ: tar.TypeDir},
			{name: "d/up", typ: tar.TypeSymlink, link: ".."},
			{name: "d/up/escaped", typ: tar.TypeReg, body: "x"},
		}},
		{"directory through a link inside", []entry{
			{name: "d/", typ: tar.TypeDir},
			{name: "d/up", typ: tar.TypeSymlink, link: ".."},
			{name: "d/up/escaped/", typ: tar.TypeDir},
		}},
		{"link as a directory", []entry{
			{name: "d", typ: tar.TypeSymlink, link: "."},
			{name: "d/", typ: tar.TypeDir},
			{name: "d/escaped", typ: tar.TypeReg, body: "x"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := t.TempDir()
			dst := filepath.Join(base, "dst")
			if err := os.Mkdir(dst, 0o755); err != nil {
				t.Fatal(err)
			}
			err := extractTar(archive(t, tt.entries...), dst, "")
			if err == nil {
				t.Errorf("extractTar: got nil error; want a refusal")
			}
			var found []string
			_ = filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
				if err == nil && strings.Contains(d.Name(), "escaped") {
					found = append(found, p)
				}
				return nil
			})
			if _, err := os.Lstat("/escaped"); err == nil {
				found = append(found, "/escaped")
			}
			sort.Strings(found)
			if len(found) > 0 {
				t.Errorf("files written by a hostile archive: %q", found)
			}
		})
	}
}

func TestExtractDropsSpecialBits(t *testing.T) {
	dst := t.TempDir()
	buf := archive(t, entry{name: "suid", typ: tar.TypeReg, mode: 0o4755, body: "#!/bin/sh"},
		entry{name: "fifo", typ: tar.TypeFifo})
	if err := extractTar(buf, dst, ""); err != nil {
		t.Fatalf("extractTar: %v", err)
	}
	fi, err := os.Stat(filepath.Join(dst, "suid"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&fs.ModeSetuid != 0 {
		t.Errorf("mode %v keeps setuid", fi.Mode())
	}
	if _, err := os.Lstat(filepath.Join(dst, "fifo")); err == nil {
		t.Errorf("a fifo was created")
	}
}

func FuzzEntryPath(f *testing.F) {
	for _, s := range []string{"a/b", "../x", "/abs", "./a", "a/../../b", ".", ""} {
		f.Add(s, "")
		f.Add(s, "r")
	}
	f.Fuzz(func(t *testing.T, name, rename string) {
		if strings.Contains(rename, "/") || strings.Contains(rename, "..") || rename == "." {
			return
		}
		p, err := entryPath(name, rename)
		if err != nil {
			return
		}
		if filepath.IsAbs(p) || p == ".." || strings.HasPrefix(p, "../") {
			t.Errorf("entryPath(%q, %q) = %q leaves the destination", name, rename, p)
		}
	})
}

// TestExtractLinkInsideNotFollowed: a link an entry made pointing inside the destination is not
// followed by a later entry (positive control: the same entries without the link land where named).
func TestExtractLinkInsideNotFollowed(t *testing.T) {
	dst := t.TempDir()
	err := extractTar(archive(t, entry{name: "d/", typ: tar.TypeDir}, entry{name: "d/l", typ: tar.TypeSymlink, link: "."},
		entry{name: "d/l/f", typ: tar.TypeReg, body: "x"}), dst, "")
	if err == nil || !strings.Contains(err.Error(), "a symbolic link is not followed") {
		t.Errorf("extractTar: got %v; want a refusal naming the link", err)
	}
	if _, err := os.Lstat(filepath.Join(dst, "d", "f")); err == nil {
		t.Errorf("d/l/f was written through the link into d/f")
	}
	ok := t.TempDir()
	if err := extractTar(archive(t, entry{name: "d/", typ: tar.TypeDir}, entry{name: "d/l/", typ: tar.TypeDir},
		entry{name: "d/l/f", typ: tar.TypeReg, body: "x", mode: 0o640}), ok, ""); err != nil {
		t.Fatalf("extractTar: %v", err)
	}
	fi, err := os.Lstat(filepath.Join(ok, "d", "l", "f"))
	if err != nil || fi.Mode() != 0o640 {
		t.Errorf("d/l/f: %v, %v; want a 0640 file", fi, err)
	}
}

// TestCpDownConfined: a directory copied into an existing local directory lands in DST/<its name>,
// whatever names its archive (a sandbox's) uses; positive control: its own entries land there.
func TestCpDownConfined(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes/{id}/files/stat", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, airlock.FileInfo{Name: "proj", Path: "/home/user/proj", Type: "dir", Mode: "0755"})
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/files/tar", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(archive(t,
			entry{name: "proj/", typ: tar.TypeDir},
			entry{name: "proj/ok.txt", typ: tar.TypeReg, body: "ok"},
			entry{name: "escaped.txt", typ: tar.TypeReg, body: "x"},   // beside the copy
			entry{name: "other/escaped", typ: tar.TypeReg, body: "x"}, // another top directory
		).Bytes())
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	out := t.TempDir()
	code, _, errOut := run(t, srv.URL, "", "cp", sbA+":/home/user/proj", out)
	var outside []string
	_ = filepath.WalkDir(out, func(p string, d fs.DirEntry, err error) error {
		if rel, _ := filepath.Rel(out, p); err == nil && rel != "." && rel != "proj" && !strings.HasPrefix(rel, "proj"+string(filepath.Separator)) {
			outside = append(outside, rel)
		}
		return nil
	})
	if len(outside) > 0 {
		t.Errorf("cp wrote beside the copy: %q (exit %d, stderr %q)", outside, code, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(out, "proj", "ok.txt")); err != nil || string(b) != "ok" {
		t.Errorf("proj/ok.txt: %q, %v (exit %d, stderr %q)", b, err, code, errOut)
	}
}
