// Package blobtest is the conformance suite every blob.Store runs: Run(t, newStore).
package blobtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/blob"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// Run runs the suite. newStore returns a fresh, empty store for each subtest. The blob.Creator tests
// run when the store implements it.
func Run(t *testing.T, newStore func(t *testing.T) blob.Store) {
	tests := []struct {
		name string
		fn   func(*testing.T, blob.Store)
	}{
		{"RoundTrip", testRoundTrip},
		{"NotFound", testNotFound},
		{"Overwrite", testOverwrite},
		{"Delete", testDelete},
		{"List", testList},
		{"ListStop", testListStop},
		{"KeyAndPrefixShadowing", testShadowing},
		{"BadKeys", testBadKeys},
		{"CanceledContext", testCanceledContext},
		{"ConcurrentPut", testConcurrentPut},
		{"Large", testLarge},
		{"Create", testCreate},
		{"ConcurrentCreate", testConcurrentCreate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, newStore(t)) })
	}
}

// longestKey returns a valid key of MaxKeySize bytes made of segments of MaxSegmentSize bytes.
func longestKey() string {
	seg := strings.Repeat("k", blob.MaxSegmentSize)
	var b strings.Builder
	for b.Len() < blob.MaxKeySize {
		if b.Len() > 0 {
			b.WriteByte('/')
		}
		b.WriteString(seg[:min(len(seg), blob.MaxKeySize-b.Len())])
	}
	return b.String()
}

func mustPut(t *testing.T, s blob.Store, key string, data []byte) {
	t.Helper()
	if err := s.Put(t.Context(), key, data); err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
}

func mustGet(t *testing.T, s blob.Store, key string) []byte {
	t.Helper()
	got, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return got
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: err = %v; want %v", what, err, want)
	}
}

// listed is one object as List reports it.
type listed struct {
	Key  string
	Size int64
}

func list(t *testing.T, s blob.Store, prefix string) []listed {
	t.Helper()
	var got []listed
	err := s.List(t.Context(), prefix, func(key string, size int64, modTime time.Time) error {
		if modTime.IsZero() {
			t.Errorf("List(%q): %s has a zero modification time", prefix, key)
		}
		got = append(got, listed{key, size})
		return nil
	})
	if err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	return got
}

func testRoundTrip(t *testing.T, s blob.Store) {
	for _, tc := range []struct {
		key  string
		data []byte
	}{
		{"a", []byte("hello")},
		{"dir/sub/obj.bin", []byte{0, 1, 2, 3, 0xff}},
		{"empty", nil},
		{"x-y_z.0/.hidden/..dots", []byte("dots are fine inside a segment")},
		{longestKey(), []byte("longest key")},
	} {
		mustPut(t, s, tc.key, tc.data)
		got := mustGet(t, s, tc.key)
		if !bytes.Equal(got, tc.data) {
			t.Errorf("Get(%q) = %q; want %q", tc.key, got, tc.data)
		}
		size, err := s.Stat(t.Context(), tc.key)
		if err != nil || size != int64(len(tc.data)) {
			t.Errorf("Stat(%q) = %d, %v; want %d, nil", tc.key, size, err, len(tc.data))
		}
	}
	// Put must not keep the caller's slice, nor Get share its result.
	data := []byte("original")
	mustPut(t, s, "alias", data)
	copy(data, "XXXXXXXX")
	got := mustGet(t, s, "alias")
	copy(got, "YYYYYYYY")
	if again := mustGet(t, s, "alias"); string(again) != "original" {
		t.Errorf("Get after changing the slices given to Put and by Get = %q; want %q", again, "original")
	}
}

func testNotFound(t *testing.T, s blob.Store) {
	ctx := t.Context()
	_, err := s.Get(ctx, "no/such/key")
	wantErr(t, "Get(missing)", err, errdefs.ErrNotFound)
	if err != nil && !strings.Contains(err.Error(), "no/such/key") {
		t.Errorf("Get(missing): err = %q; want it to name the key", err)
	}
	_, err = s.Stat(ctx, "no/such/key")
	wantErr(t, "Stat(missing)", err, errdefs.ErrNotFound)
	// A key prefix of an object is not an object.
	mustPut(t, s, "dir/obj", []byte("x"))
	_, err = s.Get(ctx, "dir")
	wantErr(t, "Get(directory-like prefix)", err, errdefs.ErrNotFound)
	_, err = s.Stat(ctx, "dir")
	wantErr(t, "Stat(directory-like prefix)", err, errdefs.ErrNotFound)
	_, err = s.Get(ctx, "dir/obj/deeper")
	wantErr(t, "Get(below an object)", err, errdefs.ErrNotFound)
}

func testOverwrite(t *testing.T, s blob.Store) {
	mustPut(t, s, "k", []byte("first, longer value"))
	mustPut(t, s, "k", []byte("second"))
	if got := mustGet(t, s, "k"); string(got) != "second" {
		t.Errorf("Get after overwrite = %q; want %q", got, "second")
	}
	if got := list(t, s, ""); !cmp.Equal(got, []listed{{"k", 6}}) {
		t.Errorf("List after overwrite = %v; want one object of 6 bytes", got)
	}
}

func testDelete(t *testing.T, s blob.Store) {
	ctx := t.Context()
	mustPut(t, s, "a/b", []byte("x"))
	mustPut(t, s, "a/c", []byte("y"))
	if err := s.Delete(ctx, "a/b"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	_, err := s.Get(ctx, "a/b")
	wantErr(t, "Get after Delete", err, errdefs.ErrNotFound)
	if err := s.Delete(ctx, "a/b"); err != nil {
		t.Errorf("Delete(already deleted) = %v; want nil", err)
	}
	if err := s.Delete(ctx, "never/there"); err != nil {
		t.Errorf("Delete(never there) = %v; want nil", err)
	}
	if got := mustGet(t, s, "a/c"); string(got) != "y" {
		t.Errorf("Get(sibling) after Delete = %q; want %q", got, "y")
	}
	// The key can be used again.
	mustPut(t, s, "a/b", []byte("z"))
	if got := mustGet(t, s, "a/b"); string(got) != "z" {
		t.Errorf("Get after Delete and Put = %q; want %q", got, "z")
	}
}

func testList(t *testing.T, s blob.Store) {
	keys := []string{
		"t/1/chunks/ab/abcd", "t/1/chunks/ab/ab01", "t/1/chunks/0f/0f99", "t/1/datakey",
		"t/1/snapshots/s2", "t/1/snapshots/s1", "t/1/snapshots/s1-b", "t/1/snapshots/s1.c",
		"t/10/datakey", "t/1-x", "t/1.y/z", "u", "a-", "a/b", "a.",
	}
	for i, k := range rand.Perm(len(keys)) { // insertion order must not matter
		mustPut(t, s, keys[k], bytes.Repeat([]byte{'x'}, i))
	}
	sizeOf := map[string]int64{}
	for _, l := range list(t, s, "") {
		sizeOf[l.Key] = l.Size
	}
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"", []string{"a-", "a.", "a/b", "t/1-x", "t/1.y/z", "t/1/chunks/0f/0f99", "t/1/chunks/ab/ab01", "t/1/chunks/ab/abcd",
			"t/1/datakey", "t/1/snapshots/s1", "t/1/snapshots/s1-b", "t/1/snapshots/s1.c", "t/1/snapshots/s2", "t/10/datakey", "u"}},
		{"t/1/", []string{"t/1/chunks/0f/0f99", "t/1/chunks/ab/ab01", "t/1/chunks/ab/abcd", "t/1/datakey",
			"t/1/snapshots/s1", "t/1/snapshots/s1-b", "t/1/snapshots/s1.c", "t/1/snapshots/s2"}},
		{"t/1", []string{"t/1-x", "t/1.y/z", "t/1/chunks/0f/0f99", "t/1/chunks/ab/ab01", "t/1/chunks/ab/abcd", "t/1/datakey",
			"t/1/snapshots/s1", "t/1/snapshots/s1-b", "t/1/snapshots/s1.c", "t/1/snapshots/s2", "t/10/datakey"}},
		{"t/1/snapshots/s1", []string{"t/1/snapshots/s1", "t/1/snapshots/s1-b", "t/1/snapshots/s1.c"}},
		{"t/1/chunks/ab/", []string{"t/1/chunks/ab/ab01", "t/1/chunks/ab/abcd"}},
		{"t/1/chunks/a", []string{"t/1/chunks/ab/ab01", "t/1/chunks/ab/abcd"}},
		{"a", []string{"a-", "a.", "a/b"}},
		{"t/1/datakey", []string{"t/1/datakey"}},
		{"t/1/datakeyx", nil},
		{"nothing/", nil},
		{"t/2/", nil},
	} {
		var want []listed
		for _, k := range tc.want {
			want = append(want, listed{k, sizeOf[k]})
		}
		if got := list(t, s, tc.prefix); !cmp.Equal(got, want) {
			t.Errorf("List(%q) mismatch (-got +want):\n%s", tc.prefix, cmp.Diff(got, want))
		}
	}
	for i, k := range keys {
		if _, ok := sizeOf[k]; !ok {
			t.Errorf("List(\"\") misses key %d %q", i, k)
		}
	}
}

func testListStop(t *testing.T, s blob.Store) {
	for _, k := range []string{"a", "b", "c"} {
		mustPut(t, s, k, []byte(k))
	}
	stop := errors.New("stop")
	var seen []string
	err := s.List(t.Context(), "", func(key string, _ int64, _ time.Time) error {
		seen = append(seen, key)
		if key == "b" {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) {
		t.Errorf("List with fn failing = %v; want the error of fn", err)
	}
	if !cmp.Equal(seen, []string{"a", "b"}) {
		t.Errorf("List with fn failing at b visited %q; want [a b]", seen)
	}
	// fn may delete what it is given.
	err = s.List(t.Context(), "", func(key string, _ int64, _ time.Time) error { return s.Delete(t.Context(), key) })
	if err != nil {
		t.Fatalf("List deleting each key: %v", err)
	}
	if got := list(t, s, ""); len(got) != 0 {
		t.Errorf("List after deleting everything = %v; want nothing", got)
	}
}

func testShadowing(t *testing.T, s blob.Store) {
	// As in S3, a key may also be the prefix of other keys.
	mustPut(t, s, "a", []byte("1"))
	mustPut(t, s, "a/b", []byte("22"))
	mustPut(t, s, "a/b/c", []byte("333"))
	for k, want := range map[string]string{"a": "1", "a/b": "22", "a/b/c": "333"} {
		if got := mustGet(t, s, k); string(got) != want {
			t.Errorf("Get(%q) = %q; want %q", k, got, want)
		}
	}
	if got, want := list(t, s, "a"), []listed{{"a", 1}, {"a/b", 2}, {"a/b/c", 3}}; !cmp.Equal(got, want) {
		t.Errorf("List(a) = %v; want %v", got, want)
	}
	if err := s.Delete(t.Context(), "a/b"); err != nil {
		t.Fatal(err)
	}
	if got, want := list(t, s, ""), []listed{{"a", 1}, {"a/b/c", 3}}; !cmp.Equal(got, want) {
		t.Errorf("List after Delete(a/b) = %v; want %v", got, want)
	}
}

func testBadKeys(t *testing.T, s blob.Store) {
	ctx := t.Context()
	bad := []string{
		"", "/a", "a/", "a//b", "./a", "a/./b", "a/..", "../a", "..", ".", "a b", "a\\b", "a\x00b", "ä",
		"a:b", "a@", "a~", "a*", longestKey() + "k", strings.Repeat("k", blob.MaxSegmentSize+1),
	}
	for _, k := range bad {
		wantErr(t, fmt.Sprintf("Put(%q)", k), s.Put(ctx, k, []byte("x")), errdefs.ErrInvalidArgument)
		_, err := s.Get(ctx, k)
		wantErr(t, fmt.Sprintf("Get(%q)", k), err, errdefs.ErrInvalidArgument)
		_, err = s.Stat(ctx, k)
		wantErr(t, fmt.Sprintf("Stat(%q)", k), err, errdefs.ErrInvalidArgument)
		wantErr(t, fmt.Sprintf("Delete(%q)", k), s.Delete(ctx, k), errdefs.ErrInvalidArgument)
		if c, ok := s.(blob.Creator); ok {
			wantErr(t, fmt.Sprintf("Create(%q)", k), c.Create(ctx, k, []byte("x")), errdefs.ErrInvalidArgument)
		}
	}
	for _, p := range []string{"/a", "a//", "../", "./x", "a b", "a\x00", strings.Repeat("k", blob.MaxKeySize+1), strings.Repeat("k", blob.MaxSegmentSize+1) + "/"} {
		err := s.List(ctx, p, func(string, int64, time.Time) error { return nil })
		wantErr(t, fmt.Sprintf("List(%q)", p), err, errdefs.ErrInvalidArgument)
	}
	if got := list(t, s, ""); len(got) != 0 {
		t.Errorf("store holds %v after only bad calls; want nothing", got)
	}
}

func testCanceledContext(t *testing.T, s blob.Store) {
	mustPut(t, s, "k", []byte("x"))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	wantErr(t, "Put(canceled)", s.Put(ctx, "k2", []byte("x")), context.Canceled)
	_, err := s.Get(ctx, "k")
	wantErr(t, "Get(canceled)", err, context.Canceled)
	_, err = s.Stat(ctx, "k")
	wantErr(t, "Stat(canceled)", err, context.Canceled)
	wantErr(t, "Delete(canceled)", s.Delete(ctx, "k"), context.Canceled)
	err = s.List(ctx, "", func(string, int64, time.Time) error { return nil })
	wantErr(t, "List(canceled)", err, context.Canceled)
	if got := mustGet(t, s, "k"); string(got) != "x" {
		t.Errorf("Get after canceled Delete = %q; want %q", got, "x")
	}
}

// testConcurrentPut races writers of one key against readers: every read sees one writer's object in
// full, and the key ends up holding one of them.
func testConcurrentPut(t *testing.T, s blob.Store) {
	const writers, rounds, size = 8, 10, 64 << 10
	values := make([][]byte, writers)
	for i := range values {
		values[i] = bytes.Repeat([]byte{byte('a' + i)}, size+i)
	}
	valid := func(got []byte) bool {
		for _, v := range values {
			if bytes.Equal(got, v) {
				return true
			}
		}
		return false
	}
	mustPut(t, s, "race", values[0])
	var wg sync.WaitGroup
	errs := make(chan error, 2*writers)
	for i := range writers {
		wg.Go(func() {
			for range rounds {
				if err := s.Put(t.Context(), "race", values[i]); err != nil {
					errs <- err
					return
				}
			}
		})
		wg.Go(func() {
			for range rounds {
				got, err := s.Get(t.Context(), "race")
				if err != nil {
					errs <- err
					return
				}
				if !valid(got) {
					errs <- fmt.Errorf("Get during concurrent Puts returned %d bytes that no writer wrote", len(got))
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := mustGet(t, s, "race"); !valid(got) {
		t.Errorf("after concurrent Puts the key holds %d bytes that no writer wrote", len(got))
	}
	if got := list(t, s, ""); len(got) != 1 || got[0].Key != "race" {
		t.Errorf("List after concurrent Puts = %v; want only %q", got, "race")
	}
}

func testLarge(t *testing.T, s blob.Store) {
	data := make([]byte, 8<<20)
	r := rand.NewChaCha8([32]byte{1})
	r.Read(data)
	mustPut(t, s, "large/object", data)
	if got := mustGet(t, s, "large/object"); !bytes.Equal(got, data) {
		t.Errorf("Get(large) returned %d bytes that differ from the %d put", len(got), len(data))
	}
	if size, err := s.Stat(t.Context(), "large/object"); err != nil || size != int64(len(data)) {
		t.Errorf("Stat(large) = %d, %v; want %d", size, err, len(data))
	}
}

func testCreate(t *testing.T, s blob.Store) {
	c, ok := s.(blob.Creator)
	if !ok {
		t.Skip("store does not implement blob.Creator")
	}
	ctx := t.Context()
	if err := c.Create(ctx, "once", []byte("first")); err != nil {
		t.Fatalf("Create: %v", err)
	}
	wantErr(t, "Create(existing)", c.Create(ctx, "once", []byte("second")), errdefs.ErrAlreadyExists)
	if got := mustGet(t, s, "once"); string(got) != "first" {
		t.Errorf("Get after failed Create = %q; want %q", got, "first")
	}
	if err := s.Delete(ctx, "once"); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, "once", []byte("third")); err != nil {
		t.Errorf("Create after Delete: %v", err)
	}
	if got := list(t, s, ""); !cmp.Equal(got, []listed{{"once", 5}}) {
		t.Errorf("List after Creates = %v; want one object of 5 bytes", got)
	}
}

func testConcurrentCreate(t *testing.T, s blob.Store) {
	c, ok := s.(blob.Creator)
	if !ok {
		t.Skip("store does not implement blob.Creator")
	}
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = c.Create(t.Context(), "contended", []byte{byte(i)}) })
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Errorf("Creates %d and %d both succeeded", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, errdefs.ErrAlreadyExists):
			t.Errorf("Create %d: err = %v; want nil or ErrAlreadyExists", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no concurrent Create succeeded")
	}
	if got := mustGet(t, s, "contended"); !bytes.Equal(got, []byte{byte(winner)}) {
		t.Errorf("Get after concurrent Creates = %x; want the winner's %x", got, winner)
	}
}
