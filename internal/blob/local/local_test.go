package local_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/blob"
	"github.com/airlockrun/airlock/internal/blob/blobtest"
	"github.com/airlockrun/airlock/internal/blob/local"
	"github.com/airlockrun/airlock/internal/errdefs"
)

func newStore(t *testing.T, root string) *local.Store {
	t.Helper()
	s, err := local.New(root)
	if err != nil {
		t.Fatalf("New(%s): %v", root, err)
	}
	return s
}

func TestConformance(t *testing.T) {
	blobtest.Run(t, func(t *testing.T) blob.Store { return newStore(t, filepath.Join(t.TempDir(), "blobs")) })
}

func TestNewRejectsEmptyRoot(t *testing.T) {
	if _, err := local.New(""); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("New(\"\") = %v; want ErrInvalidArgument", err)
	}
}

func TestLayoutAndModes(t *testing.T) {
	root := filepath.Join(t.TempDir(), "blobs")
	s := newStore(t, root)
	ctx := t.Context()
	if err := s.Put(ctx, "a/b/c", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, "a/d", []byte("y")); err != nil {
		t.Fatal(err)
	}
	want := map[string]fs.FileMode{
		".":           fs.ModeDir | 0o700,
		"a":           fs.ModeDir | 0o700,
		"a/b":         fs.ModeDir | 0o700,
		"a/b/c" + "@": 0o600,
		"a/d" + "@":   0o600,
	}
	got := map[string]fs.FileMode{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		got[filepath.ToSlash(rel)] = info.Mode()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("files under the root (-want +got):\n%s", diff)
	}
}

// TestCrashLeftoversAreNotObjects plants what an interrupted write leaves behind (and other strangers)
// and checks that List, Get and Stat ignore them.
func TestCrashLeftoversAreNotObjects(t *testing.T) {
	root := t.TempDir()
	s := newStore(t, root)
	ctx := t.Context()
	if err := s.Put(ctx, "dir/obj", []byte("real")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{
		"dir/.tmp-obj@-123456", // fsutil.WriteFileAtomic's temporary file
		"dir/.tmp-new@-987654", // a first write that never finished
		"dir/plain",            // a file without the object suffix
		"dir/bad name@",        // not a key segment
		"dir/@",                // empty segment
	} {
		if err := os.WriteFile(filepath.Join(root, name), []byte("junk"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("obj@", filepath.Join(root, "dir/link@")); err != nil {
		t.Fatal(err)
	}
	var keys []string
	err := s.List(ctx, "", func(key string, _ int64, _ time.Time) error {
		keys = append(keys, key)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"dir/obj"}; !cmp.Equal(keys, want) {
		t.Errorf("List = %q; want %q", keys, want)
	}
	for _, k := range []string{"dir/plain", "dir/new"} {
		if _, err := s.Get(ctx, k); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Get(%q) = %v; want ErrNotFound", k, err)
		}
	}
}

func TestSurvivesReopen(t *testing.T) {
	root := t.TempDir()
	if err := newStore(t, root).Put(t.Context(), "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	got, err := newStore(t, root).Get(t.Context(), "k")
	if err != nil || string(got) != "v" {
		t.Errorf("Get after reopening = %q, %v; want %q", got, err, "v")
	}
}
