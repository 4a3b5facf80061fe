package snapfs

import (
	"archive/tar"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/errdefs"
)

var bigLower = strings.Repeat("x", 100_000)

// template is the lower directory every test shares.
var template = map[string]string{
	"etc/hosts":          "127.0.0.1 localhost\n",
	"etc/motd":           "hello\n",
	"home/user/a.txt":    "alpha\n",
	"home/user/b.txt":    "bravo\n",
	"home/user/keep.txt": "keep\n",
	"home/user/link":     "->a.txt",
	"opt/app/README":     "readme",
	"opt/app/bin/tool":   "tool",
	"usr/lib/x":          "x",
	"data/big":           bigLower,
	"data/same":          "same",
	"empty/":             "",
	"lnk":                "->/etc",
	"esc":                "->../../..",
}

// layerB is another snapshot of the same sandbox.
func layerB(tb testing.TB) *Layer {
	return load(tb,
		dir("home"),
		dir("home/user"),
		file("home/user/a.txt", "alpha\n"), // copied up, the template's contents
		whiteout("home/user/keep.txt"),
		symlink("home/user/link2", "a.txt"),
		file("home/user/new.txt", "NEW\n"),
		dir("lnk"), // a directory over the template's symbolic link: the link is hidden, not followed
		file("lnk/f", "f"),
		dir("newdir"),
		file("newdir/f", "f"),
		whiteout("usr"),
	)
}

func newTemplate(tb testing.TB) string {
	root := tb.TempDir()
	makeTree(tb, root, template)
	return root
}

// brief is the part of an Entry the tables compare.
type brief struct {
	Path      string
	Type      string
	Size      int64
	Target    string
	FromLayer bool
}

func briefOf(e Entry) brief { return brief{e.Path, e.Type, e.Size, e.Target, e.FromLayer} }

func TestStat(t *testing.T) {
	v := newView(t, layerA(t), newTemplate(t))
	tests := []struct {
		path    string
		want    brief
		wantErr error
	}{
		{path: "/", want: brief{"/", TypeDir, 0, "", false}},
		{path: "/etc/hosts", want: brief{"/etc/hosts", TypeFile, 20, "", false}},
		{path: "/home/user/a.txt", want: brief{"/home/user/a.txt", TypeFile, 6, "", true}},
		{path: "/home/user/new.txt", want: brief{"/home/user/new.txt", TypeFile, 4, "", true}},
		{path: "/home/user/hard", want: brief{"/home/user/hard", TypeFile, 4, "", true}},
		{path: "/home/user/link", want: brief{"/home/user/link", TypeSymlink, 5, "a.txt", false}},
		{path: "/home/user/link2", want: brief{"/home/user/link2", TypeSymlink, 7, "new.txt", true}},
		{path: "/home/user", want: brief{"/home/user", TypeDir, 0, "", true}},
		{path: "/etc/motd", want: brief{"/etc/motd", TypeDir, 0, "", true}},
		{path: "/etc/motd/x", want: brief{"/etc/motd/x", TypeFile, 2, "", true}},
		{path: "/esc", want: brief{"/esc", TypeSymlink, 8, "../../..", false}},
		{path: "//home/./user/a.txt/", want: brief{"/home/user/a.txt", TypeFile, 6, "", true}},
		{path: "/empty", want: brief{"/empty", TypeDir, 0, "", false}},
		{path: "/home/user/b.txt", wantErr: errdefs.ErrNotFound},         // whiteout
		{path: "/opt/app/README", wantErr: errdefs.ErrNotFound},          // under an opaque directory
		{path: "/opt/app/bin", wantErr: errdefs.ErrNotFound},             // under an opaque directory
		{path: "/nope", wantErr: errdefs.ErrNotFound},                    // nowhere
		{path: "/etc/hosts/x", wantErr: errdefs.ErrNotFound},             // under a file
		{path: "/lnk/hosts", wantErr: errdefs.ErrInvalidArgument},        // through a template symlink
		{path: "/esc/etc/passwd", wantErr: errdefs.ErrInvalidArgument},   // through an escaping symlink
		{path: "/home/user/link/x", wantErr: errdefs.ErrInvalidArgument}, // through a symlink
		{path: "/home/user/link2/x", wantErr: errdefs.ErrInvalidArgument},
		{path: "/../etc/hosts", wantErr: errdefs.ErrInvalidArgument},
		{path: "/home/../../etc", wantErr: errdefs.ErrInvalidArgument},
		{path: "etc/hosts", wantErr: errdefs.ErrInvalidArgument},
		{path: "", wantErr: errdefs.ErrInvalidArgument},
		{path: "/etc/hosts\x00", wantErr: errdefs.ErrInvalidArgument},
		{path: "/" + strings.Repeat("a/", MaxPathLen), wantErr: errdefs.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			got, err := v.Stat(tt.path)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Stat(%q) = %+v, %v; want error %v", tt.path, got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Stat(%q): %v", tt.path, err)
			}
			if diff := cmp.Diff(tt.want, briefOf(got)); diff != "" {
				t.Errorf("Stat(%q) (-want +got):\n%s", tt.path, diff)
			}
		})
	}
}

func TestStatMetadata(t *testing.T) {
	v := newView(t, load(t, dir("home"), te{name: "home/x", typ: tar.TypeReg, body: "x", modeBits: 0o4751}), newTemplate(t))
	e, err := v.Stat("/home/x")
	if err != nil {
		t.Fatal(err)
	}
	if want := fs.ModeSetuid | 0o751; e.Mode != want {
		t.Errorf("Mode = %v; want %v", e.Mode, want)
	}
	if !e.ModTime.Equal(testTime) {
		t.Errorf("ModTime = %v; want %v", e.ModTime, testTime)
	}
}

func TestReadFile(t *testing.T) {
	v := newView(t, layerA(t), newTemplate(t))
	tests := []struct {
		path    string
		max     int64
		want    string
		wantErr error
	}{
		{path: "/etc/hosts", max: 100, want: "127.0.0.1 localhost\n"},
		{path: "/home/user/a.txt", max: 6, want: "ALPHA\n"},
		{path: "/home/user/hard", max: 100, want: "new\n"},
		{path: "/opt/app/only", max: 100, want: "only"},
		{path: "/data/big", max: 1 << 20, want: bigLower[:len(bigLower)-1] + "y"},
		{path: "/home/user/a.txt", max: 5, wantErr: errdefs.ErrFailedPrecondition},
		{path: "/etc/hosts", max: 19, wantErr: errdefs.ErrFailedPrecondition},
		{path: "/etc/hosts", max: -1, wantErr: errdefs.ErrInvalidArgument},
		{path: "/home/user/link", max: 100, wantErr: errdefs.ErrInvalidArgument},
		{path: "/esc", max: 100, wantErr: errdefs.ErrInvalidArgument},
		{path: "/home", max: 100, wantErr: errdefs.ErrInvalidArgument},
		{path: "/lnk/hosts", max: 100, wantErr: errdefs.ErrInvalidArgument},
		{path: "/home/user/b.txt", max: 100, wantErr: errdefs.ErrNotFound},
		{path: "/../../etc/passwd", max: 100, wantErr: errdefs.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			got, err := v.ReadFile(tt.path, tt.max)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("ReadFile(%q, %d) = %d bytes, %v; want error %v", tt.path, tt.max, len(got), err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ReadFile(%q, %d): %v", tt.path, tt.max, err)
			}
			if string(got) != tt.want {
				t.Errorf("ReadFile(%q) = %q; want %q", tt.path, got, tt.want)
			}
		})
	}
	// The caller owns the returned bytes: changing them does not change the layer.
	b, _ := v.ReadFile("/home/user/a.txt", 100)
	b[0] = '!'
	if b, _ := v.ReadFile("/home/user/a.txt", 100); string(b) != "ALPHA\n" {
		t.Errorf("ReadFile after modifying a returned slice = %q; want %q", b, "ALPHA\n")
	}
}

func TestReadDir(t *testing.T) {
	lower := newTemplate(t)
	tests := []struct {
		name    string
		layer   *Layer
		path    string
		want    []brief
		wantErr error
	}{
		{name: "merged", layer: layerA(t), path: "/home/user", want: []brief{
			{"/home/user/a.txt", TypeFile, 6, "", true},
			{"/home/user/hard", TypeFile, 4, "", true},
			{"/home/user/keep.txt", TypeFile, 5, "", false},
			{"/home/user/link", TypeSymlink, 5, "a.txt", false},
			{"/home/user/link2", TypeSymlink, 7, "new.txt", true},
			{"/home/user/new.txt", TypeFile, 4, "", true},
		}},
		{name: "root", layer: layerA(t), path: "/", want: []brief{
			{"/data", TypeDir, 0, "", true},
			{"/empty", TypeDir, 0, "", false},
			{"/esc", TypeSymlink, 8, "../../..", false},
			{"/etc", TypeDir, 0, "", true},
			{"/home", TypeDir, 0, "", true},
			{"/lnk", TypeSymlink, 4, "/etc", false},
			{"/opt", TypeDir, 0, "", true},
			{"/usr", TypeDir, 0, "", false},
		}},
		{name: "opaque", layer: layerA(t), path: "/opt", want: []brief{
			{"/opt/app", TypeDir, 0, "", true},
		}},
		{name: "under opaque", layer: layerA(t), path: "/opt/app", want: []brief{
			{"/opt/app/only", TypeFile, 4, "", true},
		}},
		{name: "dir replacing a file", layer: layerA(t), path: "/etc/motd", want: []brief{
			{"/etc/motd/x", TypeFile, 2, "", true},
		}},
		{name: "template only", layer: layerA(t), path: "/usr/lib", want: []brief{
			{"/usr/lib/x", TypeFile, 1, "", false},
		}},
		{name: "empty", layer: layerA(t), path: "/empty", want: nil},
		{name: "dir over template symlink", layer: layerB(t), path: "/lnk", want: []brief{
			{"/lnk/f", TypeFile, 1, "", true},
		}},
		{name: "whiteout of a directory", layer: layerB(t), path: "/", want: []brief{
			{"/data", TypeDir, 0, "", false},
			{"/empty", TypeDir, 0, "", false},
			{"/esc", TypeSymlink, 8, "../../..", false},
			{"/etc", TypeDir, 0, "", false},
			{"/home", TypeDir, 0, "", true},
			{"/lnk", TypeDir, 0, "", true},
			{"/newdir", TypeDir, 0, "", true},
			{"/opt", TypeDir, 0, "", false},
		}},
		{name: "symlink", layer: layerA(t), path: "/lnk", wantErr: errdefs.ErrInvalidArgument},
		{name: "through symlink", layer: layerA(t), path: "/lnk/", wantErr: errdefs.ErrInvalidArgument},
		{name: "file", layer: layerA(t), path: "/etc/hosts", wantErr: errdefs.ErrInvalidArgument},
		{name: "deleted", layer: layerB(t), path: "/usr/lib", wantErr: errdefs.ErrNotFound},
		{name: "escape", layer: layerB(t), path: "/..", wantErr: errdefs.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := newView(t, tt.layer, lower)
			got, err := v.ReadDir(tt.path)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("ReadDir(%q) = %v, %v; want error %v", tt.path, got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ReadDir(%q): %v", tt.path, err)
			}
			var briefs []brief
			for _, e := range got {
				briefs = append(briefs, briefOf(e))
			}
			if diff := cmp.Diff(tt.want, briefs); diff != "" {
				t.Errorf("ReadDir(%q) (-want +got):\n%s", tt.path, diff)
			}
		})
	}
}

func TestDiff(t *testing.T) {
	lower := newTemplate(t)
	a := newView(t, layerA(t), lower)
	b := newView(t, layerB(t), lower)
	tmpl := newView(t, nil, lower)
	aToB := []Change{
		{Path: "/data/big", Kind: Changed, Type: TypeFile, OldSize: 100_000, NewSize: 100_000}, // a's edit, reverted in b
		{Path: "/etc/motd", Kind: Changed, Type: TypeFile, OldSize: 0, NewSize: 6},             // dir in a, template file in b
		{Path: "/etc/motd/x", Kind: Removed, Type: TypeFile, OldSize: 2},
		{Path: "/home/user/a.txt", Kind: Changed, Type: TypeFile, OldSize: 6, NewSize: 6}, // b copied the template's up
		{Path: "/home/user/b.txt", Kind: Added, Type: TypeFile, NewSize: 6},               // deleted in a, the template's in b
		{Path: "/home/user/hard", Kind: Removed, Type: TypeFile, OldSize: 4},              // only in a's layer
		{Path: "/home/user/keep.txt", Kind: Removed, Type: TypeFile, OldSize: 5},          // template file deleted in b
		{Path: "/home/user/link2", Kind: Changed, Type: TypeSymlink, OldSize: 7, NewSize: 5},
		{Path: "/home/user/new.txt", Kind: Changed, Type: TypeFile, OldSize: 4, NewSize: 4},
		{Path: "/lnk", Kind: Changed, Type: TypeDir, OldSize: 4, NewSize: 0},
		{Path: "/lnk/f", Kind: Added, Type: TypeFile, NewSize: 1},
		{Path: "/newdir", Kind: Added, Type: TypeDir},
		{Path: "/newdir/f", Kind: Added, Type: TypeFile, NewSize: 1},
		{Path: "/opt/app/README", Kind: Added, Type: TypeFile, NewSize: 6}, // hidden by a's opaque /opt
		{Path: "/opt/app/bin", Kind: Added, Type: TypeDir},
		{Path: "/opt/app/bin/tool", Kind: Added, Type: TypeFile, NewSize: 4},
		{Path: "/opt/app/only", Kind: Removed, Type: TypeFile, OldSize: 4},
		{Path: "/usr", Kind: Removed, Type: TypeDir}, // whiteout in b: the template's tree is listed
		{Path: "/usr/lib", Kind: Removed, Type: TypeDir},
		{Path: "/usr/lib/x", Kind: Removed, Type: TypeFile, OldSize: 1},
	}
	tmplToA := []Change{
		{Path: "/data/big", Kind: Changed, Type: TypeFile, OldSize: 100_000, NewSize: 100_000},
		{Path: "/etc/motd", Kind: Changed, Type: TypeDir, OldSize: 6, NewSize: 0},
		{Path: "/etc/motd/x", Kind: Added, Type: TypeFile, NewSize: 2},
		{Path: "/home/user/a.txt", Kind: Changed, Type: TypeFile, OldSize: 6, NewSize: 6},
		{Path: "/home/user/b.txt", Kind: Removed, Type: TypeFile, OldSize: 6},
		{Path: "/home/user/hard", Kind: Added, Type: TypeFile, NewSize: 4},
		{Path: "/home/user/link2", Kind: Added, Type: TypeSymlink, NewSize: 7},
		{Path: "/home/user/new.txt", Kind: Added, Type: TypeFile, NewSize: 4},
		{Path: "/opt/app/README", Kind: Removed, Type: TypeFile, OldSize: 6},
		{Path: "/opt/app/bin", Kind: Removed, Type: TypeDir},
		{Path: "/opt/app/bin/tool", Kind: Removed, Type: TypeFile, OldSize: 4},
		{Path: "/opt/app/only", Kind: Added, Type: TypeFile, NewSize: 4},
	}
	tests := []struct {
		name string
		a, b *View
		want []Change
	}{
		{"a to b", a, b, aToB},
		{"b to a", b, a, invert(aToB)},
		{"template to a", tmpl, a, tmplToA},
		{"a to a", a, a, nil},
		{"template to template", tmpl, tmpl, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Diff(tt.a, tt.b)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Diff (-want +got):\n%s", diff)
			}
		})
	}
}

// invert turns the changes from a to b into those from b to a.
func invert(changes []Change) []Change {
	var out []Change
	for _, c := range changes {
		c.OldSize, c.NewSize = c.NewSize, c.OldSize
		switch c.Kind {
		case Added:
			c.Kind = Removed
		case Removed:
			c.Kind = Added
		}
		out = append(out, c)
	}
	// Type is the new type for a change: the two type changes swap.
	for i := range out {
		switch out[i].Path {
		case "/etc/motd":
			out[i].Type = TypeDir
		case "/lnk":
			out[i].Type = TypeSymlink
		}
	}
	return out
}

func TestDiffLimit(t *testing.T) {
	lower := newTemplate(t)
	a := newView(t, layerA(t), lower)
	b := newView(t, layerB(t), lower)
	all, err := Diff(a, b)
	if err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int{1, 2, 3, 7, len(all) - 1, len(all), len(all) + 1, 0} {
		got, truncated, err := DiffLimit(a, b, limit)
		if err != nil {
			t.Fatal(err)
		}
		want, wantTrunc := all, false
		if limit > 0 && limit < len(all) {
			want, wantTrunc = all[:limit], true
		}
		if diff := cmp.Diff(want, got); diff != "" || truncated != wantTrunc {
			t.Errorf("DiffLimit(%d): truncated %v, want %v; changes (-want +got):\n%s", limit, truncated, wantTrunc, diff)
		}
	}
}

// layerA modifies, adds, deletes, replaces a file with a directory and makes a directory opaque.
func layerA(tb testing.TB) *Layer {
	return load(tb,
		dir("data"),
		file("data/big", bigLower[:len(bigLower)-1]+"y"), // same size, last byte differs
		file("data/same", "same"),                        // copied up, unchanged
		dir("etc"),
		dir("etc/motd"), // was a file
		file("etc/motd/x", "xx"),
		dir("home"),
		dir("home/user"),
		file("home/user/a.txt", "ALPHA\n"),
		whiteout("home/user/b.txt"),
		file("home/user/new.txt", "new\n"),
		hardlink("home/user/hard", "home/user/new.txt"),
		symlink("home/user/link2", "new.txt"),
		opaqueDir("opt"),
		dir("opt/app"),
		file("opt/app/only", "only"),
	)
}

func TestLoadRejects(t *testing.T) {
	tests := []struct {
		name    string
		entries []te
	}{
		{"dotdot", []te{file("../x", "x")}},
		{"dotdot inside", []te{dir("a"), file("a/../../x", "x")}},
		{"absolute", []te{file("/etc/passwd", "x")}},
		{"absolute dir", []te{dir("/etc")}},
		{"dot", []te{dir(".")}},
		{"dot slash", []te{file("./a", "x")}},
		{"double slash", []te{dir("a"), file("a//b", "x")}},
		{"no parent", []te{file("a/b", "x")}},
		{"under a file", []te{file("a", "x"), file("a/b", "x")}},
		{"under a symlink", []te{symlink("a", "/etc"), file("a/passwd", "x")}},
		{"under a whiteout", []te{whiteout("a"), file("a/b", "x")}},
		{"duplicate", []te{file("a", "x"), file("a", "y")}},
		{"dir over file", []te{file("a", "x"), dir("a")}},
		{"hard link escape", []te{hardlink("a", "../etc/passwd")}},
		{"hard link absolute", []te{hardlink("a", "/etc/passwd")}},
		{"hard link forward", []te{hardlink("a", "b"), file("b", "x")}},
		{"hard link to dir", []te{dir("d"), hardlink("a", "d")}},
		{"hard link to symlink", []te{symlink("s", "x"), hardlink("a", "s")}},
		{"unsupported type", []te{{name: "a", typ: tar.TypeCont}}},
		{"long name", []te{file(strings.Repeat("a", MaxPathLen+1), "x")}},
		{"long symlink", []te{symlink("a", strings.Repeat("a", MaxPathLen+1))}},
		{"empty symlink", []te{symlink("a", "")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := Load(bytes.NewReader(archive(t, tt.entries...)), 1<<20)
			if !errors.Is(err, errdefs.ErrFailedPrecondition) {
				t.Fatalf("Load = %v, %v; want error %v", l, err, errdefs.ErrFailedPrecondition)
			}
		})
	}
	t.Run("truncated", func(t *testing.T) {
		data := archive(t, file("a", strings.Repeat("x", 2000)))
		if _, err := Load(bytes.NewReader(data[:1500]), 1<<20); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Errorf("Load(truncated) = %v; want error %v", err, errdefs.ErrFailedPrecondition)
		}
	})
	t.Run("garbage", func(t *testing.T) {
		if _, err := Load(bytes.NewReader(bytes.Repeat([]byte{'z'}, 1024)), 1<<20); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Errorf("Load(garbage) = %v; want error %v", err, errdefs.ErrFailedPrecondition)
		}
	})
	t.Run("read error", func(t *testing.T) {
		boom := errors.New("boom")
		if _, err := Load(errReader{boom}, 1<<20); !errors.Is(err, boom) || errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Errorf("Load(failing reader) = %v; want %v, not %v", err, boom, errdefs.ErrFailedPrecondition)
		}
	})
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

func TestLoadAccepts(t *testing.T) {
	l := load(t,
		dir("a"), dir("a"), // a directory written twice
		device("a/null", 1, 3),
		te{name: "a/fifo", typ: tar.TypeFifo},
		te{name: "a/blk", typ: tar.TypeBlock, dev: [2]int64{8, 0}},
		whiteout("a/gone"),
	)
	v := newView(t, l, t.TempDir())
	got, err := v.ReadDir("/a")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range got {
		if e.Type != TypeOther {
			t.Errorf("%s: type %q; want %q", e.Path, e.Type, TypeOther)
		}
		names = append(names, e.Path)
	}
	if diff := cmp.Diff([]string{"/a/blk", "/a/fifo", "/a/null"}, names); diff != "" {
		t.Errorf("ReadDir (-want +got):\n%s", diff)
	}
}

func TestLoadMaxBytes(t *testing.T) {
	body := strings.Repeat("x", 1000)
	exact := int64(EntryOverhead+len("f")) + 1000
	manyDirs := make([]te, 100)
	for i := range manyDirs {
		manyDirs[i] = dir(strings.Repeat("d", i+1))
	}
	tests := []struct {
		name     string
		entries  []te
		maxBytes int64
		ok       bool
	}{
		{"fits exactly", []te{file("f", body)}, exact, true},
		{"one byte short", []te{file("f", body)}, exact - 1, false},
		{"contents alone", []te{file("f", body)}, 1000, false},
		{"hard links counted once", []te{file("f", body), hardlink("g", "f")}, exact + EntryOverhead + 2, true},
		{"entries cost", manyDirs, 100 * EntryOverhead, false},
		{"zero", []te{dir("d")}, 0, false},
		{"empty archive", nil, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(bytes.NewReader(archive(t, tt.entries...)), tt.maxBytes)
			if tt.ok && err != nil {
				t.Fatalf("Load(max %d): %v", tt.maxBytes, err)
			}
			if !tt.ok && !errors.Is(err, errdefs.ErrFailedPrecondition) {
				t.Fatalf("Load(max %d) = %v; want error %v", tt.maxBytes, err, errdefs.ErrFailedPrecondition)
			}
		})
	}
}

// TestTemplateConfinement checks that a View reads nothing outside the template, even through
// symbolic links the template itself holds.
func TestTemplateConfinement(t *testing.T) {
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	lower := t.TempDir()
	makeTree(t, lower, map[string]string{
		"out":      "->" + outside,
		"rel":      "->../" + filepath.Base(outside),
		"secret":   "->" + filepath.Join(outside, "secret"),
		"d/secret": "->../../" + filepath.Base(outside) + "/secret",
	})
	v := newView(t, load(t, dir("d"), file("d/mine", "m")), lower)
	for _, p := range []string{"/out/secret", "/rel/secret", "/secret", "/d/secret"} {
		if b, err := v.ReadFile(p, 100); err == nil {
			t.Errorf("ReadFile(%q) = %q; want an error", p, b)
		}
	}
	for _, p := range []string{"/out", "/rel"} {
		if es, err := v.ReadDir(p); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ReadDir(%q) = %v, %v; want error %v", p, es, err, errdefs.ErrInvalidArgument)
		}
	}
	// Diffing a View that hides the template's links against one that shows them lists the links, not
	// what they point to.
	w := newView(t, load(t, whiteout("out"), whiteout("rel")), lower)
	got, err := Diff(v, w)
	if err != nil {
		t.Fatal(err)
	}
	want := []Change{
		{Path: "/d/mine", Kind: Removed, Type: TypeFile, OldSize: 1},
		{Path: "/out", Kind: Removed, Type: TypeSymlink, OldSize: int64(len(outside))},
		{Path: "/rel", Kind: Removed, Type: TypeSymlink, OldSize: int64(len("../" + filepath.Base(outside)))},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Diff (-want +got):\n%s", diff)
	}
}

func TestUnifiedDiff(t *testing.T) {
	tests := []struct {
		name    string
		path    string
		a, b    string
		context int
		want    string
		ok      bool
	}{
		{name: "change", path: "/f.txt", a: "one\ntwo\nthree\nfour\nfive\n", b: "one\ntwo\n3\nfour\nfive\n", context: 1, ok: true,
			want: "--- a/f.txt\n+++ b/f.txt\n@@ -2,3 +2,3 @@\n two\n-three\n+3\n four\n"},
		{name: "default context", path: "/f", a: "1\n2\n3\n4\n5\n6\n7\n8\n", b: "1\n2\n3\n4\nX\n6\n7\n8\n", context: -1, ok: true,
			want: "--- a/f\n+++ b/f\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+X\n 6\n 7\n 8\n"},
		{name: "equal", path: "/f", a: "same\n", b: "same\n", ok: true, want: ""},
		{name: "added file", path: "/f", a: "", b: "new\n", context: 3, ok: true,
			want: "--- a/f\n+++ b/f\n@@ -0,0 +1 @@\n+new\n"},
		{name: "final newline", path: "/f", a: "x", b: "x\n", context: 3, ok: true,
			want: "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-x\n\\ No newline at end of file\n+x\n"},
		{name: "hostile name", path: "/a\n+++ b/evil", a: "x\n", b: "y\n", context: 3, ok: true,
			want: "--- \"a/a\\n+++ b/evil\"\n+++ \"b/a\\n+++ b/evil\"\n@@ -1 +1 @@\n-x\n+y\n"},
		{name: "NUL", path: "/f", a: "a\x00b", b: "ab", ok: false},
		{name: "invalid UTF-8", path: "/f", a: "ok", b: "\xff\xfe", ok: false},
		{name: "too large", path: "/f", a: strings.Repeat("a\n", MaxTextSize/2+1), b: "a\n", ok: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := UnifiedDiff(tt.path, []byte(tt.a), []byte(tt.b), tt.context)
			if ok != tt.ok || got != tt.want {
				t.Errorf("UnifiedDiff = %q, %v; want %q, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}
