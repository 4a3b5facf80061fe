package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

func testDocs(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, err := s.GetDoc(ctx, "keys/a")
	wantErr(t, "GetDoc of a missing document", err, errdefs.ErrNotFound)
	for _, bad := range []string{"", "has space", "tab\t", "nul\x00", "é", strings.Repeat("k", 513)} {
		_, err := s.PutDoc(ctx, store.Doc{Key: bad, Value: []byte("v")})
		wantErr(t, fmt.Sprintf("PutDoc(%q)", bad), err, errdefs.ErrInvalidArgument)
		_, err = s.GetDoc(ctx, bad)
		wantErr(t, fmt.Sprintf("GetDoc(%q)", bad), err, errdefs.ErrInvalidArgument)
	}
	_, err = s.PutDoc(ctx, store.Doc{Key: "big", Value: make([]byte, store.MaxDocSize+1)})
	wantErr(t, "PutDoc over MaxDocSize", err, errdefs.ErrInvalidArgument)
	_, err = s.PutDoc(ctx, store.Doc{Key: "neg", Version: -1})
	wantErr(t, "PutDoc with a negative version", err, errdefs.ErrInvalidArgument)
	_, err = s.PutDoc(ctx, store.Doc{Key: "keys/missing", Value: []byte("v"), Version: 3})
	wantErr(t, "PutDoc replacing a missing document", err, errdefs.ErrNotFound)

	// Create, then replace only at the stored version. Every byte value survives, NUL included.
	val := []byte{0, 1, 2, 0xff, 0xfe, 'x', 0}
	d, err := s.PutDoc(ctx, store.Doc{Key: "keys/a", Value: val})
	wantErr(t, "PutDoc(create)", err, nil)
	if d.Version != 1 || !bytes.Equal(d.Value, val) || d.UpdatedAt.IsZero() {
		t.Fatalf("created %+v; want version 1, the value, an UpdatedAt", d)
	}
	_, err = s.PutDoc(ctx, store.Doc{Key: "keys/a", Value: []byte("again")})
	wantErr(t, "PutDoc(create) of a taken key", err, errdefs.ErrAlreadyExists)
	got, err := s.GetDoc(ctx, "keys/a")
	wantErr(t, "GetDoc", err, nil)
	if got.Version != 1 || !bytes.Equal(got.Value, val) || !got.UpdatedAt.Equal(d.UpdatedAt) {
		t.Fatalf("got %+v; want %+v", got, d)
	}
	d2, err := s.PutDoc(ctx, store.Doc{Key: "keys/a", Value: []byte("two"), Version: 1})
	wantErr(t, "PutDoc(replace)", err, nil)
	if d2.Version != 2 || string(d2.Value) != "two" {
		t.Fatalf("replaced %+v; want version 2, value two", d2)
	}
	_, err = s.PutDoc(ctx, store.Doc{Key: "keys/a", Value: []byte("stale"), Version: 1})
	wantErr(t, "PutDoc at a stale version", err, errdefs.ErrConflict)
	if got, _ := s.GetDoc(ctx, "keys/a"); string(got.Value) != "two" {
		t.Fatalf("a refused write changed the document to %q", got.Value)
	}
	empty, err := s.PutDoc(ctx, store.Doc{Key: "keys/empty"})
	wantErr(t, "PutDoc of an empty value", err, nil)
	if got, err := s.GetDoc(ctx, "keys/empty"); err != nil || got.Value == nil || len(got.Value) != 0 || empty.Version != 1 {
		t.Fatalf("empty document: %+v, %v; want an empty, non-nil value", got, err)
	}

	// Lists are by prefix, in key order; a prefix is not a pattern.
	for _, k := range []string{"keys/b", "keys0", "keys%", "secrets/a", "keys/_"} {
		if _, err := s.PutDoc(ctx, store.Doc{Key: k, Value: []byte(k)}); err != nil {
			t.Fatalf("PutDoc(%s): %v", k, err)
		}
	}
	list, err := s.ListDocs(ctx, "keys/")
	wantErr(t, "ListDocs(keys/)", err, nil)
	var names []string
	for _, d := range list {
		names = append(names, d.Key)
	}
	if want := "keys/_ keys/a keys/b keys/empty"; strings.Join(names, " ") != want {
		t.Errorf("ListDocs(keys/) = %v; want %s", names, want)
	}
	all, err := s.ListDocs(ctx, "")
	wantErr(t, "ListDocs(all)", err, nil)
	if len(all) != 7 {
		t.Errorf("ListDocs(\"\") has %d documents; want 7", len(all))
	}
	if list, err := s.ListDocs(ctx, "nothing/"); err != nil || len(list) != 0 {
		t.Errorf("ListDocs(nothing/) = %v, %v; want none", list, err)
	}

	// Delete at the stored version only.
	wantErr(t, "DeleteDoc at a stale version", s.DeleteDoc(ctx, "keys/a", 1), errdefs.ErrConflict)
	wantErr(t, "DeleteDoc", s.DeleteDoc(ctx, "keys/a", 2), nil)
	wantErr(t, "DeleteDoc again", s.DeleteDoc(ctx, "keys/a", 2), errdefs.ErrNotFound)
	_, err = s.GetDoc(ctx, "keys/a")
	wantErr(t, "GetDoc after DeleteDoc", err, errdefs.ErrNotFound)
	// The key can be made again, from version 1.
	if d, err := s.PutDoc(ctx, store.Doc{Key: "keys/a", Value: []byte("new")}); err != nil || d.Version != 1 {
		t.Fatalf("PutDoc after DeleteDoc = %+v, %v; want version 1", d, err)
	}
}

// testDocsConcurrent has writers race read-modify-write loops on one document: every increment lands
// exactly once.
func testDocsConcurrent(t *testing.T, s store.Store) {
	ctx := t.Context()
	if _, err := s.PutDoc(ctx, store.Doc{Key: "counter", Value: []byte("0")}); err != nil {
		t.Fatal(err)
	}
	const writers, each = 4, 10
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				for {
					d, err := s.GetDoc(ctx, "counter")
					if err != nil {
						errs <- err
						return
					}
					var n int
					fmt.Sscan(string(d.Value), &n)
					d.Value = []byte(fmt.Sprint(n + 1))
					if _, err := s.PutDoc(ctx, d); err == nil {
						break
					} else if !errors.Is(err, errdefs.ErrConflict) {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	d, err := s.GetDoc(ctx, "counter")
	if err != nil {
		t.Fatal(err)
	}
	if string(d.Value) != fmt.Sprint(writers*each) || d.Version != writers*each+1 {
		t.Fatalf("counter %s at version %d; want %d at version %d", d.Value, d.Version, writers*each, writers*each+1)
	}
}
