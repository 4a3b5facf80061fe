package template

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/runtime"
)

// entry is a file system entry a test makes: a directory (dir), a link (link: its target), a FIFO
// (fifo), or else a regular file; mode is set with chmod, so setuid and setgid bits stay.
type entry struct {
	path string
	mode os.FileMode
	dir  bool
	fifo bool
	link string
}

// makeTree makes entries under root, in order, and gives each its mode (directories last, deepest
// first, so that a directory others may not enter is filled first).
func makeTree(t *testing.T, root string, entries []entry) {
	t.Helper()
	var dirs []entry
	for _, e := range entries {
		p := filepath.Join(root, e.path)
		var err error
		switch {
		case e.dir:
			err = os.MkdirAll(p, 0o755)
			dirs = append(dirs, e)
		case e.link != "":
			err = os.Symlink(e.link, p)
		case e.fifo:
			err = unix.Mkfifo(p, 0o600)
		default:
			err = os.WriteFile(p, []byte("secret "+e.path), 0o600)
		}
		if err != nil {
			t.Fatal(err)
		}
		if !e.dir && e.link == "" {
			if err := os.Chmod(p, e.mode); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Chmod(filepath.Join(root, dirs[i].path), dirs[i].mode); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		// Let t.TempDir remove what others could not enter.
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if d != nil && d.IsDir() {
				_ = os.Chmod(p, 0o755)
			}
			return nil
		})
	})
}

// TestScanHidden: the walk reports exactly what others may not read, under the sandbox path, and
// never enters a hidden directory or follows a link.
func TestScanHidden(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []entry
		want    []runtime.Mask
	}{{
		name:    "world-readable tree",
		entries: []entry{{path: "bin", dir: true, mode: 0o755}, {path: "bin/sh", mode: 0o755}, {path: "share", dir: true, mode: 0o755}, {path: "share/doc", mode: 0o644}},
		want:    nil,
	}, {
		name: "files others may not read",
		entries: []entry{{path: "lib", dir: true, mode: 0o755},
			{path: "lib/root-only", mode: 0o600}, {path: "lib/group-only", mode: 0o640}, {path: "lib/exec-only", mode: 0o711},
			{path: "lib/readable", mode: 0o644}, {path: "lib/write-only-others", mode: 0o602}},
		want: []runtime.Mask{{Path: "/usr/lib/exec-only"}, {Path: "/usr/lib/group-only"}, {Path: "/usr/lib/root-only"}, {Path: "/usr/lib/write-only-others"}},
	}, {
		name: "directories others may not list or enter, not entered",
		entries: []entry{{path: "share/polkit-1/rules.d", dir: true, mode: 0o700}, {path: "share/polkit-1/rules.d/inner", mode: 0o600},
			{path: "share/polkit-1/rules.d/deep", dir: true, mode: 0o700},
			{path: "share/enter-only", dir: true, mode: 0o711}, {path: "share/list-only", dir: true, mode: 0o754},
			{path: "share/open", dir: true, mode: 0o755}, {path: "share/open/readable", mode: 0o444}},
		want: []runtime.Mask{{Path: "/usr/share/enter-only", Dir: true}, {Path: "/usr/share/list-only", Dir: true}, {Path: "/usr/share/polkit-1/rules.d", Dir: true}},
	}, {
		name: "setuid and setgid: hidden only when others may not read them",
		entries: []entry{{path: "bin", dir: true, mode: 0o755}, {path: "bin/su", mode: 0o4755}, {path: "bin/helper", mode: 0o4754},
			{path: "bin/private-helper", mode: 0o4750}, {path: "bin/sg", mode: 0o2711}},
		want: []runtime.Mask{{Path: "/usr/bin/private-helper"}, {Path: "/usr/bin/sg"}},
	}, {
		name: "links are never hidden nor followed; other kinds are hidden as files",
		entries: []entry{{path: "secret", dir: true, mode: 0o755}, {path: "secret/key", mode: 0o600},
			{path: "to-key", link: "secret/key"}, {path: "to-dir", link: "secret"}, {path: "to-host", link: "/etc"},
			{path: "fifo-private", fifo: true, mode: 0o600}, {path: "fifo-open", fifo: true, mode: 0o644}},
		want: []runtime.Mask{{Path: "/usr/fifo-private"}, {Path: "/usr/secret/key"}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			makeTree(t, root, tc.entries)
			var entered []string
			got, err := scanHidden(root, "/usr", func(fd int) error {
				p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
				entered = append(entered, p)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("hidden (-want +got):\n%s", diff)
			}
			for _, p := range entered {
				rel, err := filepath.Rel(root, p)
				if err != nil || strings.HasPrefix(rel, "..") {
					t.Errorf("the walk entered %s, outside the tree", p)
				}
				for _, m := range got {
					if m.Dir && (rel == strings.TrimPrefix(m.Path, "/usr/") || strings.HasPrefix(rel, strings.TrimPrefix(m.Path, "/usr/")+"/")) {
						t.Errorf("the walk entered %s, a hidden directory", p)
					}
				}
			}
		})
	}
}

// TestScanHiddenRoot: a tree others may not enter is hidden whole.
func TestScanHiddenRoot(t *testing.T) {
	root := t.TempDir()
	if err := os.Chmod(root, 0o750); err != nil {
		t.Fatal(err)
	}
	got, err := scanHidden(root, "/lib64", nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]runtime.Mask{{Path: "/lib64", Dir: true}}, got); diff != "" {
		t.Errorf("hidden (-want +got):\n%s", diff)
	}
}

// TestScanHiddenNameNotUTF8: a hidden entry whose name the spec cannot carry fails the walk (no
// sandbox boots without its mask); a readable one is no matter.
func TestScanHiddenNameNotUTF8(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "readable-\xff"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := scanHidden(root, "/usr", nil); err != nil {
		t.Fatalf("a readable entry with a name that is not UTF-8: %v", err)
	}
	if err := os.WriteFile(filepath.Join(root, "private-\xff"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := scanHidden(root, "/usr", nil); err == nil || !strings.Contains(err.Error(), "not UTF-8") {
		t.Fatalf("a hidden entry with a name that is not UTF-8: %v; want an error that says so", err)
	}
}

// TestHiddenListFollowsChanges: once walked, the list is walked again exactly when the trees changed:
// a root-only file or directory that appears (also in a new directory, or moved in), a file made
// unreadable or readable again, a hidden file removed, are in the list the next call reports.
func TestHiddenListFollowsChanges(t *testing.T) {
	root := t.TempDir()
	makeTree(t, root, []entry{{path: "share", dir: true, mode: 0o755}, {path: "share/doc", mode: 0o644}})
	h := newHiddenList([]scanRoot{{host: root, dest: "/usr"}}, 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() { h.close() })
	check := func(step string, want []runtime.Mask, wantWalk bool) {
		t.Helper()
		before := h.scanned
		got, err := h.current()
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: hidden (-want +got):\n%s", step, diff)
		}
		if walked := h.scanned != before; walked != wantWalk {
			t.Errorf("%s: walked %v; want %v", step, walked, wantWalk)
		}
		if h.fd < 0 {
			t.Fatalf("%s: the trees are not watched", step)
		}
	}
	check("first use", nil, true)
	check("no change", nil, false)
	if err := os.WriteFile(filepath.Join(root, "share", "token"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	check("a root-only file appears", []runtime.Mask{{Path: "/usr/share/token"}}, true)
	check("no change since", []runtime.Mask{{Path: "/usr/share/token"}}, false)
	if err := os.Chmod(filepath.Join(root, "share", "doc"), 0o640); err != nil {
		t.Fatal(err)
	}
	check("a file made unreadable", []runtime.Mask{{Path: "/usr/share/doc"}, {Path: "/usr/share/token"}}, true)
	if err := os.Chmod(filepath.Join(root, "share", "doc"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(root, "share", "token")); err != nil {
		t.Fatal(err)
	}
	check("readable again, and the other removed", nil, true)
	if err := os.MkdirAll(filepath.Join(root, "lib", "new", "deeper"), 0o755); err != nil {
		t.Fatal(err)
	}
	check("new directories", nil, true)
	// In a directory that did not exist at the first walk: watched by the last one.
	if err := os.WriteFile(filepath.Join(root, "lib", "new", "deeper", "key"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	check("a root-only file in a new directory", []runtime.Mask{{Path: "/usr/lib/new/deeper/key"}}, true)
	// Made elsewhere, then moved in whole (as a package manager renames into place).
	staging := filepath.Join(t.TempDir(), "pkg")
	makeTree(t, staging, []entry{{path: "private", dir: true, mode: 0o700}, {path: "private/conf", mode: 0o600}})
	if err := os.Rename(staging, filepath.Join(root, "share", "pkg")); err != nil {
		t.Fatal(err)
	}
	check("a tree moved in", []runtime.Mask{{Path: "/usr/lib/new/deeper/key"}, {Path: "/usr/share/pkg/private", Dir: true}}, true)
	if err := os.Chmod(filepath.Join(root, "share", "pkg", "private"), 0o755); err != nil {
		t.Fatal(err)
	}
	check("a hidden directory opened", []runtime.Mask{{Path: "/usr/lib/new/deeper/key"}, {Path: "/usr/share/pkg/private/conf"}}, true)
	check("no change at the end", []runtime.Mask{{Path: "/usr/lib/new/deeper/key"}, {Path: "/usr/share/pkg/private/conf"}}, false)
}

// TestHiddenListConcurrent: calls from many goroutines while the tree changes (run with -race) each
// get a whole list, and the last one the final state.
func TestHiddenListConcurrent(t *testing.T) {
	root := t.TempDir()
	h := newHiddenList([]scanRoot{{host: root, dest: "/usr"}}, 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() { h.close() })
	done := make(chan error)
	for range 4 {
		go func() {
			for range 50 {
				if _, err := h.current(); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for i := range 20 {
		if err := os.WriteFile(filepath.Join(root, strconv.Itoa(i)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	got, err := h.current()
	if err != nil || len(got) != 20 {
		t.Fatalf("at the end: %d hidden, %v; want 20", len(got), err)
	}
}

// TestHiddenListUnwatched: without watches the trees are walked again once the list is older than
// the rescan period, and not before.
func TestHiddenListUnwatched(t *testing.T) {
	root := t.TempDir()
	h := newHiddenList([]scanRoot{{host: root, dest: "/usr"}}, time.Hour, slog.New(slog.NewTextHandler(io.Discard, nil)))
	h.unwatched = true // as after a failure to watch
	if got, err := h.current(); err != nil || len(got) != 0 {
		t.Fatalf("first use: %v, %v; want nothing hidden", got, err)
	}
	if h.fd >= 0 {
		t.Fatal("an unwatched list watches")
	}
	if err := os.WriteFile(filepath.Join(root, "token"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := h.current(); err != nil || len(got) != 0 {
		t.Fatalf("within the period: %v, %v; want the last walk's list", got, err)
	}
	h.scanned = time.Now().Add(-time.Hour)
	want := []runtime.Mask{{Path: "/usr/token"}}
	if got, err := h.current(); err != nil || !cmp.Equal(got, want) {
		t.Fatalf("after the period: %v, %v; want %v", got, err, want)
	}
}

// TestHiddenListFailsClosed: when the trees cannot be walked, no list is reported (a sandbox would
// boot without its masks); and nothing is reported after close.
func TestHiddenListFailsClosed(t *testing.T) {
	h := newHiddenList([]scanRoot{{host: filepath.Join(t.TempDir(), "gone"), dest: "/usr"}}, 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if got, err := h.current(); err == nil {
		t.Fatalf("a tree that cannot be walked: %v; want an error", got)
	}
	h = newHiddenList([]scanRoot{{host: t.TempDir(), dest: "/usr"}}, 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if _, err := h.current(); err != nil {
		t.Fatal(err)
	}
	if err := h.close(); err != nil {
		t.Fatal(err)
	}
	if got, err := h.current(); err == nil {
		t.Fatalf("after close: %v; want an error", got)
	}
}

// TestHostRegistryMasks: the default template hides its host directories' entries others may not
// read, as of each Get.
func TestHostRegistryMasks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give the template's directories their owners")
	}
	host := t.TempDir()
	makeTree(t, host, []entry{{path: "usr/bin", dir: true, mode: 0o755}, {path: "usr/bin/sh", mode: 0o755},
		{path: "usr/share/polkit-1/rules.d", dir: true, mode: 0o700}, {path: "usr/lib", dir: true, mode: 0o755}, {path: "usr/lib/secret", mode: 0o600},
		{path: "lib64", dir: true, mode: 0o755}, {path: "lib64/private", mode: 0o640}, {path: "bin", link: "usr/bin"}})
	r := &HostRegistry{Dir: t.TempDir(), HostRoot: host}
	t.Cleanup(func() { r.Close() })
	tpl, err := r.Get(context.Background(), DefaultName)
	if err != nil {
		t.Fatal(err)
	}
	wantMounts := []runtime.Mount{{Source: filepath.Join(host, "usr"), Destination: "/usr", ReadOnly: true},
		{Source: filepath.Join(host, "lib64"), Destination: "/lib64", ReadOnly: true}}
	if diff := cmp.Diff(wantMounts, tpl.Mounts); diff != "" {
		t.Errorf("mounts (-want +got):\n%s", diff)
	}
	want := []runtime.Mask{{Path: "/usr/lib/secret"}, {Path: "/usr/share/polkit-1/rules.d", Dir: true}, {Path: "/lib64/private"}}
	if diff := cmp.Diff(want, tpl.Masks); diff != "" {
		t.Errorf("masks (-want +got):\n%s", diff)
	}
	if err := os.WriteFile(filepath.Join(host, "usr", "bin", "new-secret"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if tpl, err = r.Get(context.Background(), DefaultName); err != nil {
		t.Fatal(err)
	}
	want = []runtime.Mask{{Path: "/usr/bin/new-secret"}, {Path: "/usr/lib/secret"}, {Path: "/usr/share/polkit-1/rules.d", Dir: true}, {Path: "/lib64/private"}}
	if diff := cmp.Diff(want, tpl.Masks); diff != "" {
		t.Errorf("masks after a new root-only file (-want +got):\n%s", diff)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Get(context.Background(), DefaultName); err == nil {
		t.Error("Get after Close succeeded")
	}
}

// TestHostRegistriesShareTheWalk: the registries of a process that show the same trees share one
// list (one walk, one inotify instance), which stays until the last of them is closed.
func TestHostRegistriesShareTheWalk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give the template's directories their owners")
	}
	host := t.TempDir()
	makeTree(t, host, []entry{{path: "usr/lib", dir: true, mode: 0o755}, {path: "usr/lib/secret", mode: 0o600}})
	a := &HostRegistry{Dir: t.TempDir(), HostRoot: host}
	b := &HostRegistry{Dir: t.TempDir(), HostRoot: host}
	for _, r := range []*HostRegistry{a, b} {
		if _, err := r.Get(context.Background(), DefaultName); err != nil {
			t.Fatal(err)
		}
	}
	if a.hidden != b.hidden {
		t.Fatal("two registries of the same trees walk them each")
	}
	h := a.hidden
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil { // twice is harmless, and does not release b's share
		t.Fatal(err)
	}
	want := []runtime.Mask{{Path: "/usr/lib/secret"}}
	if tpl, err := b.Get(context.Background(), DefaultName); err != nil || !cmp.Equal(tpl.Masks, want) {
		t.Fatalf("the other registry after one closed: %v, %v; want %v", tpl.Masks, err, want)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if !h.closed || h.fd >= 0 {
		t.Errorf("after the last registry closed, the list is not (closed %v, inotify fd %d)", h.closed, h.fd)
	}
}

// BenchmarkScanHost walks this host's /usr, as the default template's first use does, with and
// without watches; and the check a Get makes when nothing changed.
func BenchmarkScanHost(b *testing.B) {
	b.Run("walk", func(b *testing.B) {
		for b.Loop() {
			if _, err := scanHidden("/usr", "/usr", nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	h := newHiddenList([]scanRoot{{host: "/usr", dest: "/usr"}}, 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
	b.Cleanup(func() { h.close() })
	b.Run("walk+watch", func(b *testing.B) {
		for b.Loop() {
			h.mu.Lock()
			err := h.scanLocked()
			h.mu.Unlock()
			if err != nil {
				b.Fatal(err)
			}
		}
		if h.fd < 0 {
			b.Fatal("not watched")
		}
	})
	b.Run("unchanged", func(b *testing.B) {
		for b.Loop() {
			if _, err := h.current(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
