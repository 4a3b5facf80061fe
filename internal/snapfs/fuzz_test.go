package snapfs

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// fuzzSeeds are the archives FuzzLoad starts from, besides testdata/fuzz/FuzzLoad.
func fuzzSeeds(tb testing.TB) [][]byte {
	return [][]byte{
		archive(tb, dir("a"), file("a/f", "x"), hardlink("a/g", "a/f"), symlink("a/l", "../f"), whiteout("w"), opaqueDir("o"), file("o/f", "")),
		archive(tb, file("../x", "x")),
		archive(tb, dir("a"), dir("a"), device("a/d", 1, 3), te{name: "a/p", typ: tar.TypeFifo}),
	}
}

// FuzzLoad loads archives a hostile sandbox could write. Load must fail cleanly (an error matching
// errdefs.ErrFailedPrecondition) or index a layer every View operation serves without error.
func FuzzLoad(f *testing.F) {
	for _, seed := range fuzzSeeds(f) {
		f.Add(seed)
	}
	lower := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := Load(bytes.NewReader(data), 1<<20)
		if err != nil {
			if !errors.Is(err, errdefs.ErrFailedPrecondition) {
				t.Fatalf("Load: %v; want an error matching %v", err, errdefs.ErrFailedPrecondition)
			}
			return
		}
		v, err := NewView(l, lower)
		if err != nil {
			t.Fatal(err)
		}
		defer v.Close()
		tmpl, err := NewView(nil, lower)
		if err != nil {
			t.Fatal(err)
		}
		defer tmpl.Close()
		// Over an empty template every entry of the layer but whiteouts is visible, and new.
		visible := 0
		for name, e := range l.entries {
			if name != "" && e.kind != kindWhiteout {
				visible++
			}
		}
		seen := walk(t, v, "/")
		if seen != visible {
			t.Errorf("walk found %d entries; the layer has %d", seen, visible)
		}
		changes, err := Diff(tmpl, v)
		if err != nil {
			t.Fatal(err)
		}
		if len(changes) != visible {
			t.Errorf("Diff(template, view) = %d changes; want %d", len(changes), visible)
		}
		for _, c := range changes {
			if c.Kind != Added {
				t.Errorf("Diff(template, view): %+v; want only additions", c)
			}
		}
		if changes, err := Diff(v, v); err != nil || len(changes) != 0 {
			t.Errorf("Diff(view, view) = %v, %v; want none", changes, err)
		}
	})
}

// walk visits the tree under dir, checking Stat and ReadFile agree with ReadDir, and counts entries.
func walk(t *testing.T, v *View, dir string) int {
	entries, err := v.ReadDir(dir)
	if err != nil {
		t.Fatalf("ReadDir(%q): %v", dir, err)
	}
	n := len(entries)
	for _, e := range entries {
		st, err := v.Stat(e.Path)
		if err != nil || st != e {
			t.Fatalf("Stat(%q) = %+v, %v; want %+v", e.Path, st, err, e)
		}
		switch e.Type {
		case TypeDir:
			n += walk(t, v, e.Path)
		case TypeFile:
			if b, err := v.ReadFile(e.Path, 1<<20); err != nil || int64(len(b)) != e.Size {
				t.Fatalf("ReadFile(%q) = %d bytes, %v; want %d", e.Path, len(b), err, e.Size)
			}
		}
	}
	return n
}

// FuzzLoadWith is FuzzLoad holding almost nothing in memory: every file but the tiniest is read from
// the archive again, and must read back as it was indexed.
func FuzzLoadWith(f *testing.F) {
	for _, seed := range fuzzSeeds(f) {
		f.Add(seed)
	}
	lower := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		reopen := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
		l, err := LoadWith(bytes.NewReader(data), LoadOptions{MaxIndexBytes: 1 << 20, MaxHeldBytes: 2, MaxHeldFile: 1, Reopen: reopen})
		if err != nil {
			if !errors.Is(err, errdefs.ErrFailedPrecondition) {
				t.Fatalf("LoadWith: %v; want an error matching %v", err, errdefs.ErrFailedPrecondition)
			}
			return
		}
		v, err := NewView(l, lower)
		if err != nil {
			t.Fatal(err)
		}
		defer v.Close()
		walk(t, v, "/")
		if changes, err := Diff(v, v); err != nil || len(changes) != 0 {
			t.Errorf("Diff(view, view) = %v, %v; want none", changes, err)
		}
	})
}
