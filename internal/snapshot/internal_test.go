package snapshot

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestPolynomialIsIrreducible(t *testing.T) {
	if !Polynomial.Irreducible() || Polynomial.Deg() != 53 {
		t.Errorf("Polynomial %v: irreducible %v, degree %d; want an irreducible polynomial of degree 53",
			Polynomial, Polynomial.Irreducible(), Polynomial.Deg())
	}
}

func TestParseChunkKey(t *testing.T) {
	id := "ab" + string(bytes.Repeat([]byte("0"), 62))
	for _, tc := range []struct {
		rel  string
		want string
	}{
		{"ab/" + id, id},
		{"cd/" + id, ""},
		{id, ""},
		{"ab/" + id + "/x", ""},
		{"AB/" + "AB" + id[2:], ""},
		{"ab/" + id[:63], ""},
		{"ab/.tmp-" + id, ""},
	} {
		if got, ok := parseChunkKey(tc.rel); got != tc.want || ok != (tc.want != "") {
			t.Errorf("parseChunkKey(%q) = %q, %v; want %q", tc.rel, got, ok, tc.want)
		}
	}
}

// TestHoldsKeepDeletesAwayFromWriters checks the registry's protocol step by step.
func TestHoldsKeepDeletesAwayFromWriters(t *testing.T) {
	var h holds
	ctx := t.Context()
	del := func(id string) bool {
		ok, err := h.deleteUnlessHeld("t", id, func() error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	h.beginGC("t")
	if err := h.hold(ctx, "t", "a"); err != nil {
		t.Fatal(err)
	}
	if del("a") {
		t.Errorf("deleted a held chunk")
	}
	h.release("t", map[string]struct{}{"a": {}})
	if del("a") {
		t.Errorf("deleted a chunk released during the GC (its manifest may be newer than the mark)")
	}
	if !del("b") {
		t.Errorf("did not delete a chunk nobody holds")
	}
	h.endGC("t")
	h.beginGC("t")
	if !del("a") {
		t.Errorf("a later GC did not delete a chunk released before it began")
	}
	h.endGC("t")

	// A Writer that holds a chunk being deleted waits for the delete to finish.
	h.beginGC("t")
	deleting, finish := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		h.deleteUnlessHeld("t", "c", func() error { close(deleting); <-finish; return nil })
	})
	<-deleting
	held := make(chan struct{})
	wg.Go(func() {
		if err := h.hold(ctx, "t", "c"); err != nil {
			t.Error(err)
		}
		close(held)
	})
	select {
	case <-held:
		t.Errorf("hold returned while the chunk was being deleted")
	case <-time.After(50 * time.Millisecond):
	}
	close(finish)
	<-held
	wg.Wait()
	h.release("t", map[string]struct{}{"c": {}})

	// A wait ended by ctx still leaves the hold in place, for the Writer to release.
	deleting, finish = make(chan struct{}), make(chan struct{})
	wg.Go(func() {
		h.deleteUnlessHeld("t", "e", func() error { close(deleting); <-finish; return nil })
	})
	<-deleting
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := h.hold(cctx, "t", "e"); !errors.Is(err, context.Canceled) {
		t.Errorf("hold(canceled) while deleting = %v; want context.Canceled", err)
	}
	close(finish)
	wg.Wait()
	if del("e") {
		t.Errorf("deleted a chunk whose hold ended with a canceled context")
	}
	h.release("t", map[string]struct{}{"e": {}})
	h.endGC("t")
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.tenants) != 0 {
		t.Errorf("registry keeps %d tenants after everything was released", len(h.tenants))
	}
}

func testKeys(t testing.TB) *tenantKeys {
	k, err := deriveKeys(bytes.Repeat([]byte{7}, 32), "tenant-a")
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func testManifest() *Manifest {
	id := string(bytes.Repeat([]byte("ab"), 32))
	return &Manifest{
		Version: formatV1, Tenant: "tenant-a", ID: "s1", CreatedAt: time.Unix(1, 0).UTC(),
		Files: []File{{Name: "a/b", Size: 10, Chunks: []ChunkRef{{ID: id, Size: 10}}}, {Name: "empty", Chunks: []ChunkRef{}}},
		Stats: Stats{LogicalBytes: 10, Chunks: 1},
	}
}

func TestSealedFormat(t *testing.T) {
	k := testKeys(t)
	for _, p := range [][]byte{nil, []byte("x"), bytes.Repeat([]byte("compressible "), 1000)} {
		id := chunkID(k.idHash(), p)
		blob, err := k.sealChunk(id, p, nil)
		if err != nil {
			t.Fatal(err)
		}
		wantFlags := byte(0)
		if len(p) > 100 {
			wantFlags = flagZstd
		}
		if blob[0] != formatV1 || blob[1] != wantFlags {
			t.Errorf("sealed %d bytes: header %x; want version 1, flags %x", len(p), blob[:2], wantFlags)
		}
		if len(p) > 0 { // a zero-length chunk never occurs, and the size check would refuse it
			got, err := k.openChunk("s1", "f", ChunkRef{ID: id, Size: int64(len(p))}, blob)
			if err != nil || !bytes.Equal(got, p) {
				t.Errorf("openChunk(sealChunk(%d bytes)) = %d bytes, %v", len(p), len(got), err)
			}
		}
	}
	m := testManifest()
	blob, err := k.sealManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := k.openManifest("s1", blob)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(*m, got); diff != "" {
		t.Errorf("manifest round trip (-want +got):\n%s", diff)
	}
}

func TestManifestCheck(t *testing.T) {
	id := string(bytes.Repeat([]byte("ab"), 32))
	for name, mutate := range map[string]func(m *Manifest){
		"version":         func(m *Manifest) { m.Version = 2 },
		"tenant":          func(m *Manifest) { m.Tenant = "tenant-b" },
		"id":              func(m *Manifest) { m.ID = "s2" },
		"escaping name":   func(m *Manifest) { m.Files[0].Name = "../etc/passwd" },
		"absolute name":   func(m *Manifest) { m.Files[0].Name = "/etc/passwd" },
		"duplicate name":  func(m *Manifest) { m.Files[1].Name = "a/b" },
		"file under file": func(m *Manifest) { m.Files[1].Name = "a/b/c" },
		"bad chunk ID":    func(m *Manifest) { m.Files[0].Chunks[0].ID = "../../datakey" },
		"huge chunk":      func(m *Manifest) { m.Files[0].Chunks[0].Size = MaxChunkSize + 1 },
		"empty chunk":     func(m *Manifest) { m.Files[0].Chunks = append(m.Files[0].Chunks, ChunkRef{ID: id}) },
		"size mismatch":   func(m *Manifest) { m.Files[0].Size = 11 },
		"stats mismatch":  func(m *Manifest) { m.Stats.LogicalBytes = 11 },
		"negative size":   func(m *Manifest) { m.Files[1].Size = -1 },
	} {
		m := testManifest()
		mutate(m)
		if err := m.check("tenant-a", "s1"); err == nil {
			t.Errorf("check accepted a manifest with a bad %s", name)
		}
	}
	if err := testManifest().check("tenant-a", "s1"); err != nil {
		t.Errorf("check(good manifest) = %v", err)
	}
}

// FuzzOpenManifest feeds openManifest arbitrary bytes, as a blob store could: it must fail cleanly,
// with ErrCorrupt, on anything but a manifest sealed with the key.
func FuzzOpenManifest(f *testing.F) {
	k := testKeys(f)
	good, err := k.sealManifest(testManifest())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte{})
	f.Add([]byte{formatV1, flagZstd})
	f.Add(append([]byte{formatV1, 0}, make([]byte, 40)...))
	f.Fuzz(func(t *testing.T, data []byte) {
		// (A fuzzing worker seals its own good manifest, with another nonce: compare contents.)
		m, err := k.openManifest("s1", bytes.Clone(data))
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("openManifest error %v does not match ErrCorrupt", err)
			}
			return
		}
		if diff := cmp.Diff(*testManifest(), m); diff != "" {
			t.Fatalf("openManifest(%x) accepted a forged manifest (-sealed +got):\n%s", data, diff)
		}
	})
}

// FuzzManifestCheck feeds check arbitrary JSON, as a buggy writer could have sealed: it must not
// panic, and whatever it accepts must be safe to restore.
func FuzzManifestCheck(f *testing.F) {
	good, _ := json.Marshal(testManifest())
	f.Add(good)
	f.Add([]byte(`{"version":1,"tenant":"tenant-a","id":"s1","files":[{"name":"../x","size":0,"chunks":[]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var m Manifest
		if json.Unmarshal(data, &m) != nil {
			return
		}
		if m.check("tenant-a", "s1") != nil {
			return
		}
		for _, file := range m.Files {
			if err := ValidateFileName(file.Name); err != nil {
				t.Fatalf("check accepted file name %q: %v", file.Name, err)
			}
			for _, c := range file.Chunks {
				if !validChunkID(c.ID) || c.Size <= 0 {
					t.Fatalf("check accepted chunk reference %+v", c)
				}
			}
		}
	})
}
