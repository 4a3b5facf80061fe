package cli

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestDockerignore: a build context leaves out what .dockerignore names, docker build's way: globs,
// "**", directories with what is under them, "!" exceptions (the last matching line decides),
// comments; the Dockerfile is sent whatever the patterns say.
func TestDockerignore(t *testing.T) {
	dir := t.TempDir()
	files := []string{"Dockerfile", "main.go", "README.md", "docs/keep.md", "docs/drop.txt", ".git/HEAD", ".git/objects/ab/cd",
		"node_modules/x/index.js", "a/b/c/secret.key", "a/b/c/ok.txt", "build/out.bin", "build/keep.txt", "docs/Dockerfile.dev"}
	for _, f := range files {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ignore := "# comment\n.git\nnode_modules/\n**/*.key\n/build\n!build/keep.txt\ndocs/*.txt\n*.md\n!docs/keep.md\nDockerfile\n"
	if err := os.WriteFile(filepath.Join(dir, ".dockerignore"), []byte(ignore), 0o644); err != nil {
		t.Fatal(err)
	}
	rc, name, err := buildContext(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var got []string
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			got = append(got, h.Name)
		}
	}
	sort.Strings(got)
	want := []string{".dockerignore", "Dockerfile", "a/b/c/ok.txt", "build/keep.txt", "docs/Dockerfile.dev", "docs/keep.md", "main.go"}
	if name != "Dockerfile" || strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("sent %q (Dockerfile %s);\nwant %q", got, name, want)
	}
	if err := os.WriteFile(filepath.Join(dir, ".dockerignore"), []byte("[bad\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := buildContext(dir, ""); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("a bad pattern: %v; want an error naming its line", err)
	}
}
