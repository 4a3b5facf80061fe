package controlplane

import (
	"bytes"
	"context"
	"io"
	"runtime"
	"testing"
)

// heapInUse is the live heap after a collection.
func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// TestSnapshotViewHoldsLittle: a view of a snapshot whose layer holds a file larger than what a view
// may hold keeps it out of memory, yet reads it (streamed from the snapshot store again) and diffs it.
// The layer, not the sandbox, decides what is large: the bound holds whatever the sandbox wrote.
func TestSnapshotViewHoldsLittle(t *testing.T) {
	const big = maxHeldBytes + 8<<20
	e := setupSessions(t)
	ctx := context.Background()
	e.n.mu.Lock()
	e.n.bigFile = big
	e.n.mu.Unlock()
	se := e.create(t, SessionRequest{})
	a, err := e.s.SnapshotSession(ctx, e.tenant, se.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.s.SnapshotSession(ctx, e.tenant, se.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	settle(t, e.s)

	before := heapInUse()
	v, err := e.s.SnapshotView(ctx, e.tenant, se.ID, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if held := heapInUse() - before; held > 8<<20 {
		t.Errorf("a view of a layer with a %d-byte file holds %d bytes; want at most %d", big, held, 8<<20)
	}
	st, err := v.Stat("/home/user/big")
	if err != nil || st.Size != big {
		t.Fatalf("Stat = %+v, %v; want size %d", st, err, big)
	}
	rc, size, err := v.Open("/home/user/big", MaxSnapshotFileBytes)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || size != big || !bytes.Equal(got, bytes.Repeat([]byte{got[0]}, big)) || len(got) != big {
		t.Fatalf("read %d bytes (size %d), %v; want %d equal bytes", len(got), size, err, big)
	}
	runtime.KeepAlive(v)

	changes, _, err := e.s.DiffSnapshots(ctx, e.tenant, se.ID, a.ID, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, c := range changes {
		paths = append(paths, c.Path+" "+c.Kind)
	}
	if len(paths) != 2 || paths[0] != "/home/user/big changed" || paths[1] != "/home/user/note.txt changed" {
		t.Errorf("diff: %q; want the big file and the note changed", paths)
	}
}
