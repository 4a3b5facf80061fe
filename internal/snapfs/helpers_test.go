package snapfs

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// te is one entry of a test layer archive, in the format internal/runtime/gvisor's writeLayerTar
// produces: PAX, names relative to the upper root, directories ending in "/", whiteouts as character
// devices 0/0, opaque directories with an xattr record.
type te struct {
	name     string
	typ      byte
	body     string
	link     string // symbolic link target or hard link's first name
	opaque   bool
	dev      [2]int64
	modeBits int64
}

func dir(name string) te             { return te{name: name + "/", typ: tar.TypeDir} }
func opaqueDir(name string) te       { return te{name: name + "/", typ: tar.TypeDir, opaque: true} }
func file(name, body string) te      { return te{name: name, typ: tar.TypeReg, body: body} }
func symlink(name, target string) te { return te{name: name, typ: tar.TypeSymlink, link: target} }
func hardlink(name, first string) te { return te{name: name, typ: tar.TypeLink, link: first} }
func whiteout(name string) te        { return te{name: name, typ: tar.TypeChar} }
func device(name string, maj, min int64) te {
	return te{name: name, typ: tar.TypeChar, dev: [2]int64{maj, min}}
}

// testTime is the modification time of every test archive entry.
var testTime = time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)

// archive writes entries as a layer archive.
func archive(tb testing.TB, entries ...te) []byte {
	tb.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		mode := e.modeBits
		if mode == 0 {
			mode = 0o644
			if e.typ == tar.TypeDir {
				mode = 0o755
			}
		}
		hdr := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: mode, Uid: 1000, Gid: 1000,
			ModTime: testTime, AccessTime: testTime, Devmajor: e.dev[0], Devminor: e.dev[1], Format: tar.FormatPAX}
		if e.typ == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		if e.opaque {
			hdr.PAXRecords = map[string]string{opaqueRecord: "y"}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			tb.Fatalf("write %q: %v", e.name, err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			tb.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// load indexes a test archive.
func load(tb testing.TB, entries ...te) *Layer {
	tb.Helper()
	l, err := Load(bytes.NewReader(archive(tb, entries...)), 1<<30)
	if err != nil {
		tb.Fatalf("Load: %v", err)
	}
	return l
}

// makeTree creates files under root: a name ending in "/" is a directory, a body starting with "->" a
// symbolic link to the rest, anything else a regular file with that body.
func makeTree(tb testing.TB, root string, files map[string]string) {
	tb.Helper()
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tb.Fatal(err)
		}
		var err error
		switch {
		case strings.HasSuffix(name, "/"):
			err = os.MkdirAll(p, 0o755)
		case strings.HasPrefix(body, "->"):
			err = os.Symlink(strings.TrimPrefix(body, "->"), p)
		default:
			err = os.WriteFile(p, []byte(body), 0o644)
		}
		if err != nil {
			tb.Fatal(err)
		}
	}
}

// newView lays l over root and closes the View when the test ends.
func newView(tb testing.TB, l *Layer, root string) *View {
	tb.Helper()
	v, err := NewView(l, root)
	if err != nil {
		tb.Fatalf("NewView: %v", err)
	}
	tb.Cleanup(func() { v.Close() })
	return v
}
