package storetest

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

// auditZone is a zone away from UTC that the audit tests give their input times in.
var auditZone = time.FixedZone("UTC+5:30", 5*3600+1800)

// auditInput is the i-th entry a test appends for a tenant: a time off UTC with nanoseconds, and fields
// that name it so a lost or reordered entry shows.
func auditInput(tenantID string, i int) store.AuditEntry {
	kinds := []string{store.AuditAPI, store.AuditDaemon, store.AuditEgress}
	e := store.AuditEntry{
		TenantID: tenantID,
		Time:     base.Add(time.Duration(i)*time.Second + 123456789).In(auditZone),
		Kind:     kinds[i%len(kinds)],
		Actor:    fmt.Sprintf("ak_%d", i%4),
		Action:   fmt.Sprintf("POST /v1/things/%d", i),
		Target:   fmt.Sprintf("thing_%d", i),
		Result:   fmt.Sprint(200 + i%3),
	}
	if i%2 == 1 {
		e.Detail = fmt.Sprintf(`{"i":%d,"tenant":%q}`, i, tenantID)
	}
	switch i % 5 {
	case 3: // sealed: its payload in Sealed only (the Store keeps what it is given)
		e.Actor, e.Action, e.Target, e.Result, e.Detail = "", "", "", "", ""
		e.Sealed = fmt.Sprintf("AWJhc2U2NC1zZWFsZWQt%d", i)
	case 4: // its payload discarded
		e.Actor, e.Action, e.Target, e.Result, e.Detail = "", "", "", "", ""
		e.Sealed = store.AuditDiscarded
	}
	return e
}

// auditChain is what a tenant's log must hold after appending inputs, in order, to an empty log.
func auditChain(inputs []store.AuditEntry) []store.AuditEntry {
	out := make([]store.AuditEntry, len(inputs))
	prev := ""
	for i, e := range inputs {
		e.Seq, e.Prev, e.Time = int64(i+1), prev, store.NormalizeTime(e.Time)
		e.Hash = store.AuditHash(e)
		out[i], prev = e, e.Hash
	}
	return out
}

// listAuditAll returns the tenant's whole log (up to MaxListLimit entries).
func listAuditAll(t *testing.T, s store.Store, tenantID string) []store.AuditEntry {
	t.Helper()
	got, err := s.ListAudit(t.Context(), tenantID, 0, store.MaxListLimit)
	if err != nil {
		t.Fatalf("ListAudit(%s): %v", tenantID, err)
	}
	return got
}

// checkAuditLog fails t unless the tenant's stored log is exactly the chain built from inputs.
func checkAuditLog(t *testing.T, s store.Store, tenantID string, inputs []store.AuditEntry) {
	t.Helper()
	got := listAuditAll(t, s, tenantID)
	if diff := cmp.Diff(auditChain(inputs), got, cmpOpts...); diff != "" {
		t.Fatalf("audit log of %s (-want +got):\n%s", tenantID, diff)
	}
	for _, e := range got {
		if e.Time.Location() != time.UTC {
			t.Errorf("audit entry %s/%d: time location = %v; want UTC", tenantID, e.Seq, e.Time.Location())
		}
		if e.Time.Nanosecond()%1000 != 0 {
			t.Errorf("audit entry %s/%d: time %v has sub-microsecond digits", tenantID, e.Seq, e.Time)
		}
		if h := store.AuditHash(e); e.Hash != h {
			t.Errorf("audit entry %s/%d: Hash = %s; want AuditHash %s", tenantID, e.Seq, e.Hash, h)
		}
	}
	if i, why := store.VerifyAudit(got, false); i != -1 {
		t.Errorf("VerifyAudit(log of %s) = %d (%s); want -1", tenantID, i, why)
	}
}

func auditSeqs(entries []store.AuditEntry) []int64 {
	out := make([]int64, len(entries))
	for i, e := range entries {
		out[i] = e.Seq
	}
	return out
}

func seqRange(from, to int64) []int64 {
	var out []int64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

// testAudit checks AppendAudit and ListAudit: per-tenant sequence numbers and hash chains, normalized
// times, paging, and batches that fail as a whole.
func testAudit(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")

	inputs := map[string][]store.AuditEntry{} // what each tenant's log was given, in order
	appendOK := func(what string, batch ...store.AuditEntry) {
		t.Helper()
		wantErr(t, what, s.AppendAudit(ctx, batch), nil)
		for _, e := range batch {
			inputs[e.TenantID] = append(inputs[e.TenantID], e)
		}
	}
	check := func() {
		t.Helper()
		checkAuditLog(t, s, a.ID, inputs[a.ID])
		checkAuditLog(t, s, b.ID, inputs[b.ID])
	}

	// Empty logs, and an empty batch appends nothing.
	check()
	wantErr(t, "AppendAudit(nil)", s.AppendAudit(ctx, nil), nil)
	wantErr(t, "AppendAudit(empty)", s.AppendAudit(ctx, []store.AuditEntry{}), nil)
	check()

	// batchOf returns the next entries for the given tenants, in that order.
	batchOf := func(tenantIDs ...string) []store.AuditEntry {
		var batch []store.AuditEntry
		for _, tn := range tenantIDs {
			batch = append(batch, auditInput(tn, len(inputs[tn])+countTenant(batch, tn)))
		}
		return batch
	}

	// One batch interleaving two tenants: each tenant's entries are numbered and chained on their own.
	appendOK("AppendAudit(a, b, a, a, b)", batchOf(a.ID, b.ID, a.ID, a.ID, b.ID)...)
	check()

	// Later batches continue each tenant's chain.
	appendOK("AppendAudit(b)", batchOf(b.ID)...)
	check()
	appendOK("AppendAudit(a, b, a)", batchOf(a.ID, b.ID, a.ID)...)
	check()
	appendOK("AppendAudit(b, b, a)", batchOf(b.ID, b.ID, a.ID)...)
	check()

	// Grow a's log past the default page size.
	var many []store.AuditEntry
	for i := len(inputs[a.ID]); i < store.DefaultListLimit+13; i++ {
		many = append(many, auditInput(a.ID, i))
	}
	appendOK("AppendAudit(many)", many...)
	check()
	n := int64(len(inputs[a.ID]))

	// Paging: afterSeq and limit, in seq order.
	list := func(tenantID string, afterSeq int64, limit int) []store.AuditEntry {
		t.Helper()
		got, err := s.ListAudit(ctx, tenantID, afterSeq, limit)
		if err != nil {
			t.Fatalf("ListAudit(%s, after %d, limit %d): %v", tenantID, afterSeq, limit, err)
		}
		return got
	}
	full := listAuditAll(t, s, a.ID)
	for _, tc := range []struct {
		after int64
		limit int
		want  []int64
	}{
		{0, 5, seqRange(1, 5)},
		{10, 5, seqRange(11, 15)},
		{n - 3, 10, seqRange(n-2, n)},
		{n, 10, nil},
		{n + 100, 10, nil},
		{-5, 3, seqRange(1, 3)},
		{0, 0, seqRange(1, store.DefaultListLimit)},
		{7, 0, seqRange(8, 7+store.DefaultListLimit)},
		{0, store.MaxListLimit + 1, seqRange(1, n)},
	} {
		got := list(a.ID, tc.after, tc.limit)
		if diff := cmp.Diff(tc.want, auditSeqs(got), cmpOpts...); diff != "" {
			t.Errorf("ListAudit(a, after %d, limit %d) seqs (-want +got):\n%s", tc.after, tc.limit, diff)
		}
		for _, e := range got {
			if e.Seq < 1 || e.Seq > n || !cmp.Equal(full[e.Seq-1], e) {
				t.Errorf("ListAudit(a, after %d, limit %d): entry %d differs from the full list", tc.after, tc.limit, e.Seq)
			}
		}
	}
	var paged []store.AuditEntry
	for after, pages := int64(0), 0; ; pages++ {
		if pages > int(n) {
			t.Fatalf("ListAudit: no end after %d pages of 7", pages)
		}
		page := list(a.ID, after, 7)
		if len(page) == 0 {
			break
		}
		if len(page) > 7 || page[0].Seq <= after {
			t.Fatalf("ListAudit(after %d, limit 7) returned %d entries from seq %d", after, len(page), page[0].Seq)
		}
		paged = append(paged, page...)
		after = page[len(page)-1].Seq
	}
	if diff := cmp.Diff(full, paged, cmpOpts...); diff != "" {
		t.Errorf("paging by 7 (-full +paged):\n%s", diff)
	}
	// A segment verifies from the middle.
	if i, why := store.VerifyAudit(list(a.ID, 20, 10), true); i != -1 {
		t.Errorf("VerifyAudit(seq 21..30, fromMiddle) = %d (%s); want -1", i, why)
	}
	_, err := s.ListAudit(ctx, a.ID, 0, -1)
	wantErr(t, "ListAudit(limit -1)", err, errdefs.ErrInvalidArgument)
	for _, tn := range []string{"tn_missing", ""} {
		got, err := s.ListAudit(ctx, tn, 0, 0)
		wantErr(t, fmt.Sprintf("ListAudit(%q)", tn), err, nil)
		if len(got) != 0 {
			t.Errorf("ListAudit(%q) = %d entries; want none", tn, len(got))
		}
	}

	// A bad entry fails the whole batch: nothing of it is appended, not even the good entries.
	bad := func(mod func(*store.AuditEntry)) store.AuditEntry {
		e := auditInput(a.ID, 1001) // in the clear (see auditInput)
		mod(&e)
		return e
	}
	for name, tc := range map[string]struct {
		e    store.AuditEntry
		want error
	}{
		"no tenant":                          {bad(func(e *store.AuditEntry) { e.TenantID = "" }), errdefs.ErrInvalidArgument},
		"no kind":                            {bad(func(e *store.AuditEntry) { e.Kind = "" }), errdefs.ErrInvalidArgument},
		"bad kind":                           {bad(func(e *store.AuditEntry) { e.Kind = "API" }), errdefs.ErrInvalidArgument},
		"no action":                          {bad(func(e *store.AuditEntry) { e.Action = "" }), errdefs.ErrInvalidArgument},
		"detail not JSON":                    {bad(func(e *store.AuditEntry) { e.Detail = `{"a":` }), errdefs.ErrInvalidArgument},
		"detail text":                        {bad(func(e *store.AuditEntry) { e.Detail = "denied" }), errdefs.ErrInvalidArgument},
		"sealed with a payload in the clear": {bad(func(e *store.AuditEntry) { e.Sealed = "AWJhc2U2NA" }), errdefs.ErrInvalidArgument},
		"unknown tenant":                     {bad(func(e *store.AuditEntry) { e.TenantID = "tn_missing" }), errdefs.ErrNotFound},
	} {
		for _, batch := range [][]store.AuditEntry{
			{tc.e},
			append(batchOf(a.ID, b.ID), tc.e),
			append([]store.AuditEntry{tc.e}, batchOf(b.ID, a.ID)...),
			slices.Insert(batchOf(a.ID, a.ID, b.ID), 1, tc.e),
		} {
			wantErr(t, fmt.Sprintf("AppendAudit(%s, batch of %d)", name, len(batch)), s.AppendAudit(ctx, batch), tc.want)
			check()
		}
	}

	// The chains go on where they were: no failed batch used up a sequence number.
	appendOK("AppendAudit(after failures)", batchOf(b.ID, a.ID)...)
	check()
	if got := listAuditAll(t, s, a.ID); int64(len(got)) != n+1 || got[n].Seq != n+1 || got[n].Prev != got[n-1].Hash {
		t.Errorf("after failed batches, a's log has %d entries; want %d continuing the chain", len(got), n+1)
	}

	// The caller's entries are taken as values: changing them after the append changes nothing stored.
	own := batchOf(b.ID)
	appendOK("AppendAudit(b)", own...)
	own[0].Actor = "changed"
	check()
}

// countTenant counts the entries of entries that belong to tenantID.
func countTenant(entries []store.AuditEntry, tenantID string) int {
	n := 0
	for _, e := range entries {
		if e.TenantID == tenantID {
			n++
		}
	}
	return n
}

// testAuditConcurrent appends to one tenant's log from many goroutines at once, with readers alongside:
// the chain that results verifies, holds every entry once, keeps each goroutine's entries in its order
// and each batch's together, and no reader ever sees a broken chain.
func testAuditConcurrent(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, other := mustTenant(t, s, "a"), mustTenant(t, s, "other")
	const goroutines, batches = 8, 12

	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range batches {
				// Batches of 1 to 3 entries of a, some with an entry of another tenant among them.
				var batch []store.AuditEntry
				for j := range 1 + i%3 {
					e := auditInput(a.ID, i)
					// Named in the clear, so that the order can be checked: never sealed here.
					e.Actor, e.Action, e.Sealed = fmt.Sprintf("g%d", g), fmt.Sprintf("g%d b%d e%d", g, i, j), ""
					batch = append(batch, e)
					if g%2 == 0 && j == 0 {
						batch = append(batch, auditInput(other.ID, i))
					}
				}
				if err := s.AppendAudit(ctx, batch); err != nil {
					t.Errorf("goroutine %d: AppendAudit: %v", g, err)
					return
				}
			}
		})
	}
	var readers sync.WaitGroup
	done := make(chan struct{})
	for range 2 {
		readers.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				got, err := s.ListAudit(ctx, a.ID, 0, store.MaxListLimit)
				if err != nil {
					t.Errorf("ListAudit during appends: %v", err)
					return
				}
				if i, why := store.VerifyAudit(got, false); i != -1 {
					t.Errorf("ListAudit during appends: entry %d does not verify: %s", i, why)
					return
				}
			}
		})
	}
	wg.Wait()
	close(done)
	readers.Wait()
	if t.Failed() {
		return
	}

	got := listAuditAll(t, s, a.ID)
	want := 0
	for i := range batches {
		want += 1 + i%3
	}
	want *= goroutines
	if len(got) != want {
		t.Fatalf("a's log has %d entries; want %d", len(got), want)
	}
	if i, why := store.VerifyAudit(got, false); i != -1 {
		t.Fatalf("VerifyAudit(a's log) = %d (%s); want -1", i, why)
	}
	seen := map[string]int64{} // action → seq
	last := map[string]int64{} // actor → seq of its latest entry so far
	for _, e := range got {
		if seq, dup := seen[e.Action]; dup {
			t.Errorf("entry %q appended twice: seqs %d and %d", e.Action, seq, e.Seq)
		}
		seen[e.Action] = e.Seq
		if e.Seq <= last[e.Actor] {
			t.Errorf("entry %q (seq %d) after seq %d of the same goroutine", e.Action, e.Seq, last[e.Actor])
		}
		last[e.Actor] = e.Seq
	}
	// A batch's entries of a tenant are consecutive.
	for g := range goroutines {
		for i := range batches {
			first, ok := seen[fmt.Sprintf("g%d b%d e0", g, i)]
			for j := range 1 + i%3 {
				seq, found := seen[fmt.Sprintf("g%d b%d e%d", g, i, j)]
				switch {
				case !ok || !found:
					t.Errorf("goroutine %d batch %d entry %d is missing", g, i, j)
				case seq != first+int64(j):
					t.Errorf("goroutine %d batch %d entry %d has seq %d; want %d (batch entries together)", g, i, j, seq, first+int64(j))
				}
			}
		}
	}
	otherLog := listAuditAll(t, s, other.ID)
	if wantOther := goroutines / 2 * batches; len(otherLog) != wantOther {
		t.Errorf("other's log has %d entries; want %d", len(otherLog), wantOther)
	}
	if i, why := store.VerifyAudit(otherLog, false); i != -1 {
		t.Errorf("VerifyAudit(other's log) = %d (%s); want -1", i, why)
	}
}

// testAuditPrune checks PruneAudit (the cut, its limit, the record it appends, a quiet log left still)
// and UpdateTenantLogRetention.
func testAuditPrune(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	var inA, inB []store.AuditEntry
	for i := range 20 {
		inA = append(inA, auditInput(a.ID, i))
	}
	for i := range 5 {
		inB = append(inB, auditInput(b.ID, i))
	}
	wantErr(t, "AppendAudit(a)", s.AppendAudit(ctx, inA), nil)
	wantErr(t, "AppendAudit(b)", s.AppendAudit(ctx, inB), nil)
	chainA := auditChain(inA)

	prune := func(before time.Time, limit, want int) []store.AuditEntry {
		t.Helper()
		n, err := s.PruneAudit(ctx, a.ID, before, limit)
		wantErr(t, fmt.Sprintf("PruneAudit(before %s, limit %d)", before.Format(time.TimeOnly), limit), err, nil)
		if n != want {
			t.Errorf("PruneAudit(before %s, limit %d) = %d; want %d", before.Format(time.TimeOnly), limit, n, want)
		}
		got := listAuditAll(t, s, a.ID)
		if i, why := store.VerifyAudit(got, false); i != -1 {
			t.Errorf("after PruneAudit(before %s): VerifyAudit = %d (%s); want -1", before.Format(time.TimeOnly), i, why)
		}
		return got
	}
	wantCut := func(e store.AuditEntry, seq int64, prev string, through store.AuditEntry) {
		t.Helper()
		var p store.AuditPruned
		if e.Kind != store.AuditLog || e.Action != store.AuditPrune || e.Sealed != "" || e.Seq != seq || e.Prev != prev {
			t.Fatalf("entry %d = %+v; want the record of a cut, seq %d after %s", e.Seq, e, seq, prev)
		}
		if err := json.Unmarshal([]byte(e.Detail), &p); err != nil || p.ThroughSeq != through.Seq || p.ThroughHash != through.Hash {
			t.Errorf("cut record %d says %s; want through seq %d hash %s", e.Seq, e.Detail, through.Seq, through.Hash)
		}
	}

	// Entries 1..10 are older than the cutoff (auditInput's i-th entry is i seconds after base).
	got := prune(base.Add(10*time.Second), 0, 10)
	if diff := cmp.Diff(seqRange(11, 21), auditSeqs(got), cmpOpts...); diff != "" {
		t.Fatalf("after the first cut, seqs (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(chainA[10:], got[:10], cmpOpts...); diff != "" {
		t.Errorf("after the first cut, the kept entries changed (-want +got):\n%s", diff)
	}
	wantCut(got[10], 21, chainA[19].Hash, chainA[9])
	// Without the record of the cut, the log no longer verifies from its new start.
	if i, _ := store.VerifyAudit(got[:10], false); i != 0 {
		t.Errorf("VerifyAudit(the kept entries without the cut's record) = %d; want 0", i)
	}
	// b's log is untouched.
	checkAuditLog(t, s, b.ID, inB)

	// The limit bounds one call.
	got = prune(base.Add(15*time.Second), 3, 3)
	if diff := cmp.Diff(append(seqRange(14, 21), 22), auditSeqs(got), cmpOpts...); diff != "" {
		t.Fatalf("after a cut of 3, seqs (-want +got):\n%s", diff)
	}
	wantCut(got[len(got)-1], 22, got[len(got)-2].Hash, chainA[12])

	// A cutoff past everything keeps the newest entry.
	head, lastCut := got[len(got)-1], got[len(got)-2]
	got = prune(time.Now().Add(time.Hour), 0, 8)
	if diff := cmp.Diff([]int64{22, 23}, auditSeqs(got), cmpOpts...); diff != "" {
		t.Fatalf("after cutting all, seqs (-want +got):\n%s", diff)
	}
	wantCut(got[1], 23, head.Hash, lastCut)

	// A log holding only the records of cuts stays still.
	still := prune(time.Now().Add(time.Hour), 0, 0)
	if diff := cmp.Diff(got, still, cmpOpts...); diff != "" {
		t.Errorf("a cut of a log of cut records changed it (-want +got):\n%s", diff)
	}

	// Appends continue the chain after the cut.
	wantErr(t, "AppendAudit(a after cuts)", s.AppendAudit(ctx, []store.AuditEntry{auditInput(a.ID, 30)}), nil)
	got = listAuditAll(t, s, a.ID)
	if last := got[len(got)-1]; last.Seq != 24 || last.Prev != got[len(got)-2].Hash {
		t.Errorf("after cuts, the next entry is seq %d prev %s; want 24 after %s", last.Seq, last.Prev, got[len(got)-2].Hash)
	}
	if i, why := store.VerifyAudit(got, false); i != -1 {
		t.Errorf("VerifyAudit after cuts and an append = %d (%s); want -1", i, why)
	}

	// Unknown tenants have nothing to cut; a negative limit is refused.
	for _, tn := range []string{"tn_missing", ""} {
		n, err := s.PruneAudit(ctx, tn, time.Now(), 0)
		wantErr(t, fmt.Sprintf("PruneAudit(%q)", tn), err, nil)
		if n != 0 {
			t.Errorf("PruneAudit(%q) = %d; want 0", tn, n)
		}
	}
	_, err := s.PruneAudit(ctx, a.ID, time.Now(), -1)
	wantErr(t, "PruneAudit(limit -1)", err, errdefs.ErrInvalidArgument)

	// The tenant's log retention.
	tn, err := s.UpdateTenantLogRetention(ctx, a.ID, 90*86400)
	wantErr(t, "UpdateTenantLogRetention(90d)", err, nil)
	if tn.LogRetentionSeconds != 90*86400 {
		t.Errorf("UpdateTenantLogRetention(90d) returned %d", tn.LogRetentionSeconds)
	}
	if g, err := s.GetTenant(ctx, a.ID); err != nil || g.LogRetentionSeconds != 90*86400 {
		t.Errorf("GetTenant after UpdateTenantLogRetention = %d, %v; want %d", g.LogRetentionSeconds, err, 90*86400)
	}
	_, err = s.UpdateTenantLogRetention(ctx, a.ID, -1)
	wantErr(t, "UpdateTenantLogRetention(-1)", err, errdefs.ErrInvalidArgument)
	_, err = s.UpdateTenantLogRetention(ctx, "tn_missing", 60)
	wantErr(t, "UpdateTenantLogRetention(missing)", err, errdefs.ErrNotFound)
	if g, _ := s.GetTenant(ctx, b.ID); g.LogRetentionSeconds != 0 {
		t.Errorf("b's log retention = %d; want 0", g.LogRetentionSeconds)
	}
}
