package flowlog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/gateway"
)

const sb1, sb2 = "sb_aaaaaaaaaaaaaaaaaaaaaaaaaa", "sb_bbbbbbbbbbbbbbbbbbbbbbbbbb"

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func openLog(t *testing.T) (*Log, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "flows")
	l, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, dir
}

// flow is a flow of sandbox id numbered seq (in SrcPort), lasting from t0+seq s to t0+seq s+500ms.
func flow(id string, seq int, decision, host, ip string) gateway.Flow {
	start := t0.Add(time.Duration(seq) * time.Second)
	return gateway.Flow{
		Start: start, End: start.Add(500 * time.Millisecond), SandboxID: id, TenantID: "tn_1", SrcPort: uint16(seq),
		DstIP: netip.MustParseAddr(ip), DstPort: 443, Host: host, Protocol: gateway.ProtoTLS, Decision: decision,
		Rule: "r", BytesSent: int64(seq * 10), BytesReceived: int64(seq * 20),
	}
}

func seqs(fs []gateway.Flow) []int {
	out := []int{}
	for _, f := range fs {
		out = append(out, int(f.SrcPort))
	}
	return out
}

func TestAppendAndRead(t *testing.T) {
	l, dir := openLog(t)
	ctx := context.Background()
	want := []gateway.Flow{
		flow(sb1, 0, gateway.DecisionAllow, "api.example.com", "203.0.113.2"),
		flow(sb1, 1, gateway.DecisionDeny, "evil.example.net", "203.0.113.9"),
		flow(sb1, 2, gateway.DecisionAllow, "API.example.com", "203.0.113.2"),
		flow(sb1, 3, gateway.DecisionDeny, "", "198.51.100.7"),
		flow(sb1, 4, gateway.DecisionAllow, "files.example.com", "203.0.113.3"),
	}
	want[2].Method, want[2].Path, want[2].Protocol = "GET", "/v1/models", gateway.ProtoHTTP
	for _, f := range want {
		l.Record(f)
	}
	l.Record(flow(sb2, 9, gateway.DecisionAllow, "api.example.com", "203.0.113.2"))

	got, err := l.Read(ctx, sb1, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	// Newest first, every field as recorded.
	rev := []gateway.Flow{want[4], want[3], want[2], want[1], want[0]}
	if diff := cmp.Diff(rev, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("Read (-want +got):\n%s", diff)
	}

	for _, tc := range []struct {
		name string
		f    Filter
		want []int
	}{
		{"allow", Filter{Decision: gateway.DecisionAllow}, []int{4, 2, 0}},
		{"deny", Filter{Decision: gateway.DecisionDeny}, []int{3, 1}},
		{"exact host, any case", Filter{Host: "api.EXAMPLE.com."}, []int{2, 0}},
		{"host as IP", Filter{Host: "198.51.100.7"}, []int{3}},
		{"host contains", Filter{HostContains: "EXAMPLE.com"}, []int{4, 2, 0}},
		{"host contains and decision", Filter{HostContains: "example", Decision: gateway.DecisionDeny}, []int{1}},
		{"since: ended at or after", Filter{Since: t0.Add(2*time.Second + 500*time.Millisecond)}, []int{4, 3, 2}},
		{"until: started before", Filter{Until: t0.Add(2 * time.Second)}, []int{1, 0}},
		{"since and until", Filter{Since: t0.Add(time.Second), Until: t0.Add(3 * time.Second)}, []int{2, 1}},
		{"limit keeps the newest", Filter{Limit: 2}, []int{4, 3}},
		{"limit after filter", Filter{Decision: gateway.DecisionAllow, Limit: 1}, []int{4}},
		{"no match", Filter{Host: "nowhere.example"}, []int{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := l.Read(ctx, sb1, tc.f)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, seqs(got)); diff != "" {
				t.Errorf("Read(%+v) (-want +got):\n%s", tc.f, diff)
			}
		})
	}

	// Files: one per sandbox, 0600, one JSON object a line, no other sandbox's flows.
	path := filepath.Join(dir, sb1+".jsonl")
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("flow log mode %v; want 0600", fi.Mode().Perm())
	}
	b, _ := os.ReadFile(path)
	if n := bytes.Count(b, []byte("\n")); n != len(want) {
		t.Errorf("%s has %d lines; want %d", path, n, len(want))
	}
	if bytes.Contains(b, []byte(sb2)) {
		t.Errorf("%s holds another sandbox's flow", path)
	}
	if got, err := l.Read(ctx, sb2, Filter{}); err != nil || len(got) != 1 || got[0].SrcPort != 9 {
		t.Errorf("Read(sb2) = %v, %v; want its one flow", seqs(got), err)
	}

	// A sandbox without flows has none; a bad ID or filter is an invalid argument.
	if got, err := l.Read(ctx, "sb_cccccccccccccccccccccccccc", Filter{}); err != nil || got == nil || len(got) != 0 {
		t.Errorf("Read(unknown) = %v, %v; want an empty list", got, err)
	}
	for _, id := range []string{"", "../etc/passwd", "a/b", "..", "sb_..x"} {
		if _, err := l.Read(ctx, id, Filter{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Read(%q) = %v; want ErrInvalidArgument", id, err)
		}
	}
	for _, f := range []Filter{{Decision: "maybe"}, {Limit: -1}, {Limit: MaxLimit + 1}, {Since: t0, Until: t0}, {Host: strings.Repeat("a", 300)}} {
		if _, err := l.Read(ctx, sb1, f); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Read(%+v) = %v; want ErrInvalidArgument", f, err)
		}
	}

	// Flows recorded after Forget and after a reopen go to the same file; after Close they are dropped
	// and reads still work.
	l.Forget(sb1)
	l.Record(flow(sb1, 5, gateway.DecisionAllow, "x.example", "203.0.113.2"))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l.Record(flow(sb1, 6, gateway.DecisionAllow, "x.example", "203.0.113.2"))
	if got, err := l.Read(ctx, sb1, Filter{Limit: 2}); err != nil || !cmp.Equal(seqs(got), []int{5, 4}) {
		t.Errorf("after Forget and Close: Read = %v, %v; want [5 4]", seqs(got), err)
	}
}

// TestTornLine: a line cut short by a crash is skipped, and the next append starts on a line of its own.
func TestTornLine(t *testing.T) {
	l, dir := openLog(t)
	ctx := context.Background()
	whole, _ := json.Marshal(flow(sb1, 1, gateway.DecisionAllow, "a.example", "203.0.113.2"))
	torn, _ := json.Marshal(flow(sb1, 2, gateway.DecisionAllow, "b.example", "203.0.113.2"))
	content := append(append(whole, '\n'), torn[:len(torn)/2]...)
	if err := os.WriteFile(filepath.Join(dir, sb1+".jsonl"), content, 0o600); err != nil {
		t.Fatal(err)
	}
	// Before any append the torn line looks like one being written: not returned.
	if got, err := l.Read(ctx, sb1, Filter{}); err != nil || !cmp.Equal(seqs(got), []int{1}) {
		t.Errorf("Read = %v, %v; want [1]", seqs(got), err)
	}
	l.Record(flow(sb1, 3, gateway.DecisionAllow, "c.example", "203.0.113.2"))
	if got, err := l.Read(ctx, sb1, Filter{}); err != nil || !cmp.Equal(seqs(got), []int{3, 1}) {
		t.Errorf("after an append: Read = %v, %v; want [3 1]", seqs(got), err)
	}
}

// TestConcurrentWrites: flows recorded from many goroutines at once all arrive, each on a line of its own.
func TestConcurrentWrites(t *testing.T) {
	l, dir := openLog(t)
	const writers, each = 8, 300
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				id := sb1
				if i%2 == 1 {
					id = sb2
				}
				f := flow(id, w*each+i, gateway.DecisionAllow, strings.Repeat("h", i%200)+".example", "203.0.113.2")
				l.Record(f)
			}
		}()
	}
	wg.Wait()
	seen := map[int]bool{}
	for _, id := range []string{sb1, sb2} {
		b, err := os.ReadFile(filepath.Join(dir, id+".jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
			var f gateway.Flow
			if err := json.Unmarshal([]byte(line), &f); err != nil {
				t.Fatalf("%s line %d does not decode: %v: %q", id, i+1, err, line)
			}
			if f.SandboxID != id || seen[int(f.SrcPort)] {
				t.Errorf("%s line %d: sandbox %s, seq %d (seen before: %v)", id, i+1, f.SandboxID, f.SrcPort, seen[int(f.SrcPort)])
			}
			seen[int(f.SrcPort)] = true
		}
	}
	if len(seen) != writers*each {
		t.Errorf("%d flows recorded; want %d", len(seen), writers*each)
	}
	got, err := l.Read(context.Background(), sb1, Filter{Limit: MaxLimit})
	if err != nil || len(got) != min(MaxLimit, writers*each/2) {
		t.Errorf("Read = %d flows, %v; want %d", len(got), err, min(MaxLimit, writers*each/2))
	}
}

// TestReadDuringWrites: a reader running while flows are appended sees whole flows only, newest first,
// each once, and never fewer than it saw before.
func TestReadDuringWrites(t *testing.T) {
	l, _ := openLog(t)
	ctx := context.Background()
	const total = 3000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < total; i++ {
			// Long hosts make lines straddle the reader's chunks.
			l.Record(flow(sb1, i, gateway.DecisionAllow, strings.Repeat("x", i%250), "203.0.113.2"))
		}
	}()
	last := 0
	for reading := true; reading; {
		select {
		case <-done:
			reading = false // one more read after the writer finished
		default:
		}
		got, err := l.Read(ctx, sb1, Filter{Limit: MaxLimit})
		if err != nil {
			t.Fatal(err)
		}
		s := seqs(got)
		for i := 1; i < len(s); i++ {
			if s[i] != s[i-1]-1 {
				t.Fatalf("read during writes: %d follows %d; want consecutive, newest first", s[i], s[i-1])
			}
		}
		newest := 0
		if len(s) > 0 {
			newest = s[0] + 1
			if len(got[0].Host) != s[0]%250 {
				t.Fatalf("flow %d came back with a host of %d bytes; want %d", s[0], len(got[0].Host), s[0]%250)
			}
		}
		if newest < last {
			t.Fatalf("a read saw %d flows after one saw %d", newest, last)
		}
		last = newest
	}
	if last != total {
		t.Errorf("the last read saw %d flows; want %d", last, total)
	}
}

// forwardLines is what scanBackward must yield, in forward order: the newline-terminated lines that are
// neither empty nor longer than maxLen.
func forwardLines(data []byte, maxLen int) []string {
	parts := strings.Split(string(data), "\n")
	out := []string{}
	for _, p := range parts[:len(parts)-1] { // the last part has no newline after it
		if p != "" && len(p) <= maxLen {
			out = append(out, p)
		}
	}
	return out
}

func checkScan(t *testing.T, data []byte, chunkSize, maxLen int) {
	t.Helper()
	var got []string
	if err := scanBackward(bytes.NewReader(data), int64(len(data)), chunkSize, maxLen, func(line []byte) bool {
		got = append(got, string(line))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	want := forwardLines(data, maxLen)
	for i, j := 0, len(want)-1; i < j; i, j = i+1, j-1 {
		want[i], want[j] = want[j], want[i]
	}
	if got == nil {
		got = []string{}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("scanBackward(%q, chunk %d, max %d) (-want +got):\n%s", data, chunkSize, maxLen, diff)
	}
}

func TestScanBackward(t *testing.T) {
	inputs := []string{
		"", "\n", "\n\n", "a", "a\n", "a\nb", "a\nb\n", "\nab\n\ncd\nef", "abc\ndefgh\nij\n",
		strings.Repeat("x", 40) + "\nshort\n" + strings.Repeat("y", 9) + "\n",
		"long-first-" + strings.Repeat("z", 30) + "\nok\n",
	}
	for _, in := range inputs {
		for _, chunkSize := range []int{1, 2, 3, 5, 8, 64} {
			for _, maxLen := range []int{4, 10, 1000} {
				checkScan(t, []byte(in), chunkSize, maxLen)
			}
		}
	}
	// Stopping early.
	n := 0
	_ = scanBackward(strings.NewReader("a\nb\nc\n"), 6, 2, 10, func([]byte) bool { n++; return n < 2 })
	if n != 2 {
		t.Errorf("scanBackward called fn %d times after it returned false the 2nd time; want 2", n)
	}
}

func FuzzScanBackward(f *testing.F) {
	for _, s := range []string{"", "a\nb\n", "\n\nx", "abc\ndefgh\nij\n", strings.Repeat("q", 20) + "\n"} {
		f.Add([]byte(s), uint8(3), uint8(5))
	}
	f.Fuzz(func(t *testing.T, data []byte, chunkSize, maxLen uint8) {
		checkScan(t, data, int(chunkSize%64)+1, int(maxLen)+1)
	})
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewMetrics(reg); err == nil {
		t.Error("registering the metrics twice on one registry succeeded; want an error")
	}
	m.Record(gateway.Flow{Decision: gateway.DecisionAllow, BytesSent: 100, BytesReceived: 1000})
	m.Record(gateway.Flow{Decision: gateway.DecisionAllow, BytesSent: 1, BytesReceived: 2})
	m.Record(gateway.Flow{Decision: gateway.DecisionDeny})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			for _, lp := range mt.GetLabel() {
				got[fmt.Sprintf("%s{%s=%s}", mf.GetName(), lp.GetName(), lp.GetValue())] = mt.GetCounter().GetValue()
			}
		}
	}
	want := map[string]float64{
		`airlock_egress_flows_total{decision=allow}`:     2,
		`airlock_egress_flows_total{decision=deny}`:      1,
		`airlock_egress_bytes_total{direction=sent}`:     101,
		`airlock_egress_bytes_total{direction=received}`: 1002,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
}

// TestRotation: a sandbox's flows take bounded room however many it records (the file rotates into
// ID.jsonl.1 past the size), the newest flows are always read first, across both files, and another
// sandbox's file is untouched.
func TestRotation(t *testing.T) {
	l, dir := openLog(t)
	l.SetMaxFileBytes(4 << 10)
	ctx := context.Background()
	l.Record(flow(sb2, 1, gateway.DecisionAllow, "b.test", "203.0.113.9"))
	for i := 1; i <= 2000; i++ {
		l.Record(flow(sb1, i, gateway.DecisionDeny, "a.test", "203.0.113.7"))
	}
	var total int64
	for _, name := range []string{sb1 + ".jsonl", sb1 + ".jsonl.1"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > 5<<10 {
			t.Errorf("%s is %d bytes; want about 4 KiB at most", name, fi.Size())
		}
		total += fi.Size()
	}
	got, err := l.Read(ctx, sb1, Filter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 || got[0].SrcPort != 2000 {
		t.Fatalf("newest flow read first: %v; want 2000 first", seqs(got)[:min(3, len(got))])
	}
	for i := 1; i < len(got); i++ {
		if got[i].SrcPort != got[i-1].SrcPort-1 {
			t.Fatalf("flows not newest first without gaps across the rotation: %d then %d", got[i-1].SrcPort, got[i].SrcPort)
		}
	}
	if int64(len(got)) > total/100 {
		t.Errorf("read %d flows from %d bytes", len(got), total)
	}
	if other, err := l.Read(ctx, sb2, Filter{}); err != nil || len(other) != 1 {
		t.Errorf("the other sandbox's flows: %v, %v; want its one flow", seqs(other), err)
	}
}

// TestSealedFlows: with its key set, a sandbox's flows are on disk sealed (no host, address or path in
// the clear); a read with the key gets them back and filters them as before, one without it (or with
// another key) gets none, and the flows from before the key (in the clear) still read.
func TestSealedFlows(t *testing.T) {
	l, dir := openLog(t)
	key := bytes.Repeat([]byte{7}, KeySize)
	before := flow(sb1, 1, gateway.DecisionAllow, "before.example", "192.0.2.1")
	l.Record(before)
	if err := l.SetKey(sb1, key); err != nil {
		t.Fatal(err)
	}
	secret := flow(sb1, 2, gateway.DecisionDeny, "secret-host.example", "192.0.2.77")
	secret.Method, secret.Path = "POST", "/v1/secret-path"
	l.Record(secret)
	l.Record(flow(sb1, 3, gateway.DecisionAllow, "other.example", "192.0.2.3"))
	l.Record(flow(sb2, 4, gateway.DecisionAllow, "unkeyed.example", "192.0.2.4")) // another sandbox, no key
	raw, err := os.ReadFile(filepath.Join(dir, sb1+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"secret-host", "192.0.2.77", "secret-path", "other.example"} {
		if bytes.Contains(raw, []byte(s)) {
			t.Errorf("the sealed flow log holds %q in the clear", s)
		}
	}
	if !bytes.Contains(raw, []byte("before.example")) {
		t.Error("positive control: the flow from before the key is not in the clear")
	}
	got, err := l.Read(t.Context(), sb1, Filter{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{3, 2, 1}, seqs(got)); diff != "" {
		t.Errorf("read with the key (-want +got):\n%s", diff)
	}
	if got[1].Path != "/v1/secret-path" || got[1].Host != "secret-host.example" {
		t.Errorf("the sealed flow opened to %+v", got[1])
	}
	if got, err := l.Read(t.Context(), sb1, Filter{Key: key, Host: "secret-host.example"}); err != nil || !cmp.Equal(seqs(got), []int{2}) {
		t.Errorf("a host filter over sealed flows = %v, %v; want [2]", seqs(got), err)
	}
	if _, err := l.Read(t.Context(), sb1, Filter{}); !errors.Is(err, errdefs.ErrKeyUnavailable) {
		t.Errorf("a read of sealed flows without the key = %v; want key unavailable", err)
	}
	other := bytes.Repeat([]byte{8}, KeySize)
	if got, err := l.Read(t.Context(), sb1, Filter{Key: other}); err != nil || !cmp.Equal(seqs(got), []int{1}) {
		t.Errorf("a read with another key = %v, %v; want only the flow in the clear", seqs(got), err)
	}
	if got, err := l.Read(t.Context(), sb2, Filter{}); err != nil || !cmp.Equal(seqs(got), []int{4}) {
		t.Errorf("another sandbox's flows without a key = %v, %v", seqs(got), err)
	}
	if _, err := l.Read(t.Context(), sb1, Filter{Key: []byte("short")}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a short key = %v; want invalid argument", err)
	}
	// Forgotten, the sandbox's flows are still sealed for a grace period (its last connections end),
	// then its key is dropped.
	l.keyGrace = 100 * time.Millisecond
	l.Forget(sb1)
	l.Record(flow(sb1, 5, gateway.DecisionAllow, "late-host.example", "192.0.2.5"))
	if raw, _ := os.ReadFile(filepath.Join(dir, sb1+".jsonl")); bytes.Contains(raw, []byte("late-host")) {
		t.Error("a flow recorded just after Forget is in the clear")
	}
	time.Sleep(500 * time.Millisecond)
	l.mu.Lock()
	_, kept := l.keys[sb1]
	l.mu.Unlock()
	if kept {
		t.Error("Forget kept the sandbox's key past its grace")
	}
}
