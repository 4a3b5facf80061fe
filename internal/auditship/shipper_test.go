package auditship_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/auditship"
)

// syncBuf is a log destination for a Shipper that a test reads while it runs.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testLog(buf io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(buf, nil)) }

// runAsync runs sh until the returned stop is called, and reports Run's result to stop's caller.
func runAsync(t *testing.T, sh *auditship.Shipper) (stop func() (auditship.Stats, error)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		st  auditship.Stats
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := sh.Run(ctx)
		done <- result{st, err}
	}()
	t.Cleanup(cancel)
	return func() (auditship.Stats, error) {
		cancel()
		select {
		case r := <-done:
			return r.st, r.err
		case <-time.After(30 * time.Second):
			t.Fatal("Run did not return within 30 s of its context's end")
			return auditship.Stats{}, nil
		}
	}
}

// waitFor polls cond for up to 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestShipOnceInBatches(t *testing.T) {
	l := newFakeLog("tn_a", 10)
	rec := &recorder{}
	st, err := (&auditship.Shipper{Source: l.Source, Sink: rec, BatchEntries: 4}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([][2]int64{{1, 4}, {5, 8}, {9, 10}}, rec.seqs()); diff != "" {
		t.Errorf("batches (-want +got):\n%s", diff)
	}
	if want := (auditship.Stats{Entries: 10, First: 1, Last: 10}); st != want {
		t.Errorf("stats = %+v; want %+v", st, want)
	}
	if !bytes.Equal(rec.data(), l.export(0)) {
		t.Errorf("shipped bytes differ from the export's:\n%s\nwant:\n%s", rec.data(), l.export(0))
	}
	verify(t, rec.data())

	// --after: only the entries after it.
	rec = &recorder{}
	if _, err := (&auditship.Shipper{Source: l.Source, Sink: rec, After: 7}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([][2]int64{{8, 10}}, rec.seqs()); diff != "" {
		t.Errorf("batches after 7 (-want +got):\n%s", diff)
	}
}

// TestShipperFollow: a following shipper picks up the entries appended after it started, and once
// its context ends delivers the ones it holds (a batch window not yet over) and returns nil.
func TestShipperFollow(t *testing.T) {
	l := newFakeLog("tn_a", 5)
	rec := &recorder{}
	stop := runAsync(t, &auditship.Shipper{Source: l.Source, Sink: rec, Follow: true, Poll: 5 * time.Millisecond})
	waitFor(t, "the first 5 entries", func() bool { s := rec.seqs(); return len(s) > 0 && s[len(s)-1][1] == 5 })
	l.add(7)
	waitFor(t, "the 7 appended", func() bool { s := rec.seqs(); return s[len(s)-1][1] == 12 })
	if _, err := stop(); err != nil {
		t.Fatalf("Run after its context ended = %v; want nil", err)
	}
	if n, first, last := verify(t, rec.data()); n != 12 || first != 1 || last != 12 {
		t.Errorf("shipped %d entries %d..%d; want 12, 1..12", n, first, last)
	}

	// A batch window holds what comes in; the end of the context delivers it.
	l = newFakeLog("tn_a", 3)
	rec = &recorder{}
	stop = runAsync(t, &auditship.Shipper{Source: l.Source, Sink: rec, Follow: true, Poll: 5 * time.Millisecond, BatchWait: time.Hour})
	waitFor(t, "a poll", func() bool { l.mu.Lock(); defer l.mu.Unlock(); return l.fetches >= 2 })
	l.add(2)
	waitFor(t, "polls after the append", func() bool { l.mu.Lock(); defer l.mu.Unlock(); return l.fetches >= 6 })
	if len(rec.seqs()) != 0 {
		t.Fatalf("batches %v shipped inside an hour's window", rec.seqs())
	}
	st, err := stop()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([][2]int64{{1, 5}}, rec.seqs()); diff != "" || st.Entries != 5 {
		t.Errorf("at the end: stats %+v, batches (-want +got):\n%s", st, diff)
	}
}

// TestShipperResume: the state file records the last batch delivered; a shipper started again
// resumes after it, wherever --after points. A failure after a delivery ships that batch again: at
// least once, no gap.
func TestShipperResume(t *testing.T) {
	l := newFakeLog("tn_a", 10)
	state := filepath.Join(t.TempDir(), "state")
	first := &recorder{failAfter: 1}
	_, err := (&auditship.Shipper{Source: l.Source, Sink: first, StatePath: state, BatchEntries: 3}).Run(context.Background())
	if err == nil {
		t.Fatal("a failed delivery was not reported")
	}
	st, ok, err := auditship.ReadState(state)
	if err != nil || !ok || st.Seq != 3 || st.Tenant != "tn_a" || st.Hash == "" {
		t.Fatalf("state after batches 1..3 (took) and 4..6 (failed) = %+v, %v, %v; want seq 3", st, ok, err)
	}
	if fi, err := os.Stat(state); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("state file: %v, %v; want mode 0600", fi.Mode(), err)
	}
	second := &recorder{}
	if _, err := (&auditship.Shipper{Source: l.Source, Sink: second, StatePath: state, After: 8, BatchEntries: 3}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([][2]int64{{4, 6}, {7, 9}, {10, 10}}, second.seqs()); diff != "" {
		t.Errorf("resumed batches (-want +got):\n%s", diff)
	}
	// Without the failed batch's duplicate, the two runs' entries are the log, whole.
	if diff := cmp.Diff([][2]int64{{1, 3}, {4, 6}}, first.seqs()); diff != "" {
		t.Fatalf("first run's batches (-want +got):\n%s", diff)
	}
	got := append(joined(first.batches[0]), second.data()...)
	if !bytes.Equal(got, l.export(0)) {
		t.Errorf("the runs shipped, joined:\n%s\nwant the log:\n%s", got, l.export(0))
	}
	if st, _, _ := auditship.ReadState(state); st.Seq != 10 {
		t.Errorf("state at the end = %+v; want seq 10", st)
	}
	entries, _ := os.ReadDir(filepath.Dir(state))
	if len(entries) != 1 {
		t.Errorf("the state's directory holds %d files; want only the state (no temporary files left)", len(entries))
	}

	// The state of another tenant's log is refused, also by a following shipper.
	if err := auditship.WriteState(state, auditship.State{Tenant: "tn_other", Seq: 2}); err != nil {
		t.Fatal(err)
	}
	_, err = (&auditship.Shipper{Source: l.Source, Sink: &recorder{}, StatePath: state, Follow: true, Poll: time.Millisecond}).Run(context.Background())
	if err == nil || !auditship.IsPermanent(err) || !strings.Contains(err.Error(), "tn_other") {
		t.Errorf("resume from another tenant's state = %v; want a permanent error naming it", err)
	}
	if err := os.WriteFile(state, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := (&auditship.Shipper{Source: l.Source, Sink: &recorder{}, StatePath: state}).Run(context.Background()); err == nil || !strings.Contains(err.Error(), state) {
		t.Errorf("a state file of garbage = %v; want an error naming it", err)
	}
}

// TestShipperRetries: a following shipper retries failed fetches and deliveries, and a stream that
// broke off inside an entry; nothing is lost, nothing doubled. Without Follow the first error ends
// the run, after the whole entries read before it were delivered.
func TestShipperRetries(t *testing.T) {
	l := newFakeLog("tn_a", 10)
	l.fails = 2
	l.cutNext = true
	var logged syncBuf
	rec := &recorder{}
	stop := runAsync(t, &auditship.Shipper{Source: l.Source, Sink: rec, Follow: true, Poll: time.Millisecond, MaxBackoff: 10 * time.Millisecond, Log: testLog(&logged)})
	waitFor(t, "all 10", func() bool { s := rec.seqs(); return len(s) > 0 && s[len(s)-1][1] == 10 })
	if _, err := stop(); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := verify(t, rec.data()); n != 10 {
		t.Errorf("shipped %d entries; want 10", n)
	}
	if !strings.Contains(logged.String(), "retrying") || !strings.Contains(logged.String(), "503") {
		t.Errorf("the log does not tell of the retries:\n%s", logged.String())
	}

	l = newFakeLog("tn_a", 10)
	l.cutNext = true
	rec = &recorder{}
	_, err := (&auditship.Shipper{Source: l.Source, Sink: rec}).Run(context.Background())
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a broken-off export = %v; want io.ErrUnexpectedEOF", err)
	}
	if diff := cmp.Diff([][2]int64{{1, 5}}, rec.seqs()); diff != "" {
		t.Errorf("delivered before the break (-want +got):\n%s", diff)
	}

	// A permanent delivery error ends a following run.
	l = newFakeLog("tn_a", 3)
	_, err = (&auditship.Shipper{Source: l.Source, Sink: failing{auditship.Permanent(errors.New("AccessDenied"))}, Follow: true, Poll: time.Millisecond}).Run(context.Background())
	if !auditship.IsPermanent(err) {
		t.Errorf("follow with a sink that refuses = %v; want the permanent error", err)
	}
	// And so does a source error the Permanent hook names.
	l.fails = 1
	_, err = (&auditship.Shipper{Source: l.Source, Sink: &recorder{}, Follow: true, Poll: time.Millisecond,
		Permanent: func(err error) bool { return strings.Contains(err.Error(), "503") }}).Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("follow with a source error the hook calls permanent = %v", err)
	}
}

type failing struct{ err error }

func (f failing) Ship(context.Context, []auditship.Entry) error { return f.err }
func (f failing) Close() error                                  { return nil }

// TestShipperWarns: a gap in the log (entries pruned before they were shipped) and an entry that
// does not chain to the last one shipped are told in the log, and shipping goes on.
func TestShipperWarns(t *testing.T) {
	l := newFakeLog("tn_a", 10)
	l.gap(4, 6)
	var logged syncBuf
	rec := &recorder{}
	if _, err := (&auditship.Shipper{Source: l.Source, Sink: rec, Log: testLog(&logged)}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logged.String(), "entries missing") || !strings.Contains(logged.String(), "from=4 to=6") {
		t.Errorf("no warning of the gap 4..6:\n%s", logged.String())
	}
	if len(bytes.Split(bytes.TrimSpace(rec.data()), []byte("\n"))) != 7 {
		t.Errorf("shipped:\n%s\nwant the 7 entries left", rec.data())
	}

	state := filepath.Join(t.TempDir(), "state")
	if err := auditship.WriteState(state, auditship.State{Tenant: "tn_a", Seq: 8, Hash: "not-entry-8s-hash"}); err != nil {
		t.Fatal(err)
	}
	logged = syncBuf{}
	if _, err := (&auditship.Shipper{Source: l.Source, Sink: &recorder{}, StatePath: state, Log: testLog(&logged)}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logged.String(), "does not carry the hash") || !strings.Contains(logged.String(), "seq=9") {
		t.Errorf("no warning that entry 9 does not chain to the state's entry 8:\n%s", logged.String())
	}
}

// TestShipperAfterRetentionCut: after the server's retention cut the oldest entries (and appended
// the record of the cut), a new shipper's copy starts at the log's new first entry and verifies;
// one whose state is older than the cut says which entries it never shipped; one past the cut
// goes on as before.
func TestShipperAfterRetentionCut(t *testing.T) {
	l := newFakeLog("tn_a", 10)
	l.prune(4)
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	if st, err := shipToFile(t, l, path, auditship.Shipper{}); err != nil || st.First != 5 || st.Last != 11 {
		t.Fatalf("ship after the cut: %+v, %v; want 5..11", st, err)
	}
	got, _ := os.ReadFile(path)
	verify(t, got)

	state := filepath.Join(t.TempDir(), "state")
	for _, c := range []struct {
		from     int64
		warn     bool
		shipped1 int64
	}{{2, true, 5}, {6, false, 7}} {
		if err := auditship.WriteState(state, auditship.State{Tenant: "tn_a", Seq: c.from}); err != nil {
			t.Fatal(err)
		}
		var logged syncBuf
		rec := &recorder{}
		if _, err := (&auditship.Shipper{Source: l.Source, Sink: rec, StatePath: state, Log: testLog(&logged)}).Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		if warned := strings.Contains(logged.String(), "entries missing from the log (pruned before they were shipped?)\" from=3 to=4"); warned != c.warn {
			t.Errorf("from state %d: warned of entries 3..4 missing: %v; want %v:\n%s", c.from, warned, c.warn, logged.String())
		}
		if diff := cmp.Diff([][2]int64{{c.shipped1, 11}}, rec.seqs()); diff != "" {
			t.Errorf("from state %d: batches (-want +got):\n%s", c.from, diff)
		}
	}
}
