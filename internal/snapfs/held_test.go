package snapfs

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// source is a layer archive that can be read again, counting how often it was.
type source struct {
	data   []byte
	reopen int
}

func (s *source) Reopen() (io.ReadCloser, error) {
	s.reopen++
	return io.NopCloser(bytes.NewReader(s.data)), nil
}

// loadHeld loads entries with LoadWith: files of at most maxFile bytes held, up to maxHeld in all.
func loadHeld(t *testing.T, maxFile, maxHeld int64, entries ...te) (*Layer, *source) {
	t.Helper()
	src := &source{data: archive(t, entries...)}
	l, err := LoadWith(bytes.NewReader(src.data), LoadOptions{MaxIndexBytes: 1 << 20, MaxHeldBytes: maxHeld, MaxHeldFile: maxFile, Reopen: src.Reopen})
	if err != nil {
		t.Fatalf("LoadWith: %v", err)
	}
	return l, src
}

// TestLoadWithHoldsSmallFilesOnly: LoadWith holds the files within its bounds, keeps the others'
// sizes only, and serves both, reading the archive again for the others only.
func TestLoadWithHoldsSmallFilesOnly(t *testing.T) {
	big := strings.Repeat("B", 5000)
	l, src := loadHeld(t, 1000, 1500,
		dir("d"), file("d/small", "hello"), file("d/big", big), hardlink("d/big2", "d/big"),
		file("d/a", strings.Repeat("a", 1000)), file("d/b", strings.Repeat("b", 1000)), file("d/empty", ""))
	held := map[string]bool{}
	for name, e := range l.entries {
		if e.kind == kindFile {
			held[name] = e.held
		}
	}
	want := map[string]bool{"d/small": true, "d/big": false, "d/big2": false, "d/a": true, "d/b": false, "d/empty": true}
	if diff := cmp.Diff(want, held); diff != "" {
		t.Errorf("held files (-want +got):\n%s", diff)
	}
	if l.held > 1500 {
		t.Errorf("holds %d bytes of contents; want at most 1500", l.held)
	}
	v := newView(t, l, t.TempDir())
	for _, f := range []struct{ path, body string }{
		{"/d/small", "hello"}, {"/d/big", big}, {"/d/big2", big}, {"/d/a", strings.Repeat("a", 1000)},
		{"/d/b", strings.Repeat("b", 1000)}, {"/d/empty", ""},
	} {
		st, err := v.Stat(f.path)
		if err != nil || st.Size != int64(len(f.body)) {
			t.Errorf("Stat(%s) = %+v, %v; want size %d", f.path, st, err, len(f.body))
		}
		b, err := v.ReadFile(f.path, 1<<20)
		if err != nil || string(b) != f.body {
			t.Errorf("ReadFile(%s) = %d bytes, %v; want %d bytes", f.path, len(b), err, len(f.body))
		}
		rc, size, err := v.Open(f.path, 1<<20)
		if err != nil {
			t.Fatalf("Open(%s): %v", f.path, err)
		}
		b, err = io.ReadAll(rc)
		rc.Close()
		if err != nil || string(b) != f.body || size != int64(len(f.body)) {
			t.Errorf("Open(%s) = %d bytes (size %d), %v; want %d bytes", f.path, len(b), size, err, len(f.body))
		}
	}
	// Read again: the three files not held, twice each (ReadFile and Open).
	if src.reopen != 6 {
		t.Errorf("the archive was read again %d times; want 6", src.reopen)
	}
	if _, err := v.ReadFile("/d/big", 4999); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("ReadFile(/d/big, 4999) = %v; want %v", err, errdefs.ErrFailedPrecondition)
	}
	if src.reopen != 6 {
		t.Errorf("a file over the bound was read: the archive was read again %d times; want 6", src.reopen)
	}
}

// TestLoadWithoutReopen: a file not held cannot be read without Reopen, and says so.
func TestLoadWithoutReopen(t *testing.T) {
	l, err := LoadWith(bytes.NewReader(archive(t, file("big", "0123456789"))), LoadOptions{MaxIndexBytes: 1 << 20, MaxHeldFile: 5, MaxHeldBytes: 5})
	if err != nil {
		t.Fatal(err)
	}
	v := newView(t, l, t.TempDir())
	if _, err := v.ReadFile("/big", 100); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("ReadFile = %v; want %v", err, errdefs.ErrFailedPrecondition)
	}
}

// TestLoadWithStreamsHugeFile: a file far larger than what the layer may hold is indexed by reading it
// through, never by holding it.
func TestLoadWithStreamsHugeFile(t *testing.T) {
	const size = 256 << 20
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		err := tw.WriteHeader(&tar.Header{Name: "huge", Typeflag: tar.TypeReg, Size: size, Mode: 0o644, Format: tar.FormatPAX})
		if err == nil {
			_, err = io.CopyN(tw, zeros{}, size)
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	l, err := LoadWith(pr, LoadOptions{MaxIndexBytes: 1 << 20, MaxHeldBytes: 1 << 20, MaxHeldFile: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	e := l.entries["huge"]
	if e == nil || e.held || e.data != nil || e.size != size || l.held != 0 {
		t.Fatalf("huge file indexed as %+v, layer holds %d bytes; want its size only", e, l.held)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestReopenChecked: contents read again that are not what was indexed (another archive, the same
// sizes) are refused, not served.
func TestReopenChecked(t *testing.T) {
	tests := []struct {
		name  string
		again []te
	}{
		{"other contents", []te{file("big", "9876543210")}},
		{"other size", []te{file("big", "0123")}},
		{"other type", []te{dir("big")}},
		{"shorter archive", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			again := archive(t, tt.again...)
			l, err := LoadWith(bytes.NewReader(archive(t, file("big", "0123456789"))), LoadOptions{MaxIndexBytes: 1 << 20,
				Reopen: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(again)), nil }})
			if err != nil {
				t.Fatal(err)
			}
			v := newView(t, l, t.TempDir())
			if b, err := v.ReadFile("/big", 100); !errors.Is(err, errdefs.ErrFailedPrecondition) {
				t.Errorf("ReadFile = %q, %v; want %v", b, err, errdefs.ErrFailedPrecondition)
			}
		})
	}
}

// TestDiffNotHeld: files not held are compared by their digests, with each other and with the
// template's, without reading the archives again.
func TestDiffNotHeld(t *testing.T) {
	lower := t.TempDir()
	big := strings.Repeat("T", 3000)
	if err := os.WriteFile(filepath.Join(lower, "tmpl"), []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	other := strings.Repeat("U", 3000)
	a, srcA := loadHeld(t, 10, 10, file("same", big), file("changed", big), file("tmpl", big), file("gone", big))
	b, srcB := loadHeld(t, 10, 10, file("same", big), file("changed", other), file("tmpl", other), file("new", big))
	tmplSame, srcC := loadHeld(t, 10, 10, file("tmpl", big))
	va, vb, vc := newView(t, a, lower), newView(t, b, lower), newView(t, tmplSame, lower)
	got, err := Diff(va, vb)
	if err != nil {
		t.Fatal(err)
	}
	want := []Change{
		{Path: "/changed", Kind: Changed, Type: TypeFile, OldSize: 3000, NewSize: 3000},
		{Path: "/gone", Kind: Removed, Type: TypeFile, OldSize: 3000},
		{Path: "/new", Kind: Added, Type: TypeFile, NewSize: 3000},
		{Path: "/tmpl", Kind: Changed, Type: TypeFile, OldSize: 3000, NewSize: 3000},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Diff(a, b) (-want +got):\n%s", diff)
	}
	// The layer's tmpl equals the template's: against the template alone, no change there.
	tmpl := newView(t, nil, lower)
	if got, err := Diff(tmpl, vc); err != nil || len(got) != 0 {
		t.Errorf("Diff(template, same as template) = %v, %v; want none", got, err)
	}
	got, err = Diff(tmpl, vb)
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(got, []Change{{Path: "/changed", Kind: Added, Type: TypeFile, NewSize: 3000},
		{Path: "/new", Kind: Added, Type: TypeFile, NewSize: 3000}, {Path: "/same", Kind: Added, Type: TypeFile, NewSize: 3000},
		{Path: "/tmpl", Kind: Changed, Type: TypeFile, OldSize: 3000, NewSize: 3000}}) {
		t.Errorf("Diff(template, b) = %+v", got)
	}
	if n := srcA.reopen + srcB.reopen + srcC.reopen; n != 0 {
		t.Errorf("Diff read the archives again %d times; want 0", n)
	}
}
