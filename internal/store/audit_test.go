package store_test

import (
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

var auditBase = time.Date(2024, 5, 6, 7, 8, 9, 123456000, time.UTC)

// auditLog returns entries 1..n of a tenant's log, chained as AppendAudit chains them.
func auditLog(n int) []store.AuditEntry {
	kinds := []string{store.AuditAPI, store.AuditDaemon, store.AuditEgress}
	out := make([]store.AuditEntry, n)
	prev := ""
	for i := range out {
		e := store.AuditEntry{
			TenantID: "tn_a",
			Seq:      int64(i + 1),
			Time:     auditBase.Add(time.Duration(i) * time.Second),
			Kind:     kinds[i%len(kinds)],
			Actor:    fmt.Sprintf("ak_%d", i),
			Action:   fmt.Sprintf("POST /v1/things/%d", i),
			Target:   fmt.Sprintf("thing_%d", i),
			Result:   "200",
			Detail:   fmt.Sprintf(`{"i":%d}`, i),
			Prev:     prev,
		}
		e.Hash = store.AuditHash(e)
		out[i], prev = e, e.Hash
	}
	return out
}

// auditFields changes one field of an entry each, Hash left as it was.
var auditFields = map[string]func(*store.AuditEntry){
	"tenant": func(e *store.AuditEntry) { e.TenantID = "tn_b" },
	"seq":    func(e *store.AuditEntry) { e.Seq += 100 },
	"time":   func(e *store.AuditEntry) { e.Time = e.Time.Add(time.Microsecond) },
	"kind": func(e *store.AuditEntry) {
		if e.Kind == store.AuditAPI {
			e.Kind = store.AuditEgress
		} else {
			e.Kind = store.AuditAPI
		}
	},
	"actor":        func(e *store.AuditEntry) { e.Actor = "ak_intruder" },
	"empty actor":  func(e *store.AuditEntry) { e.Actor = "" },
	"action":       func(e *store.AuditEntry) { e.Action = "DELETE /v1/things" },
	"target":       func(e *store.AuditEntry) { e.Target = "thing_other" },
	"result":       func(e *store.AuditEntry) { e.Result = "403" },
	"detail":       func(e *store.AuditEntry) { e.Detail = `{"i":-1}` },
	"empty detail": func(e *store.AuditEntry) { e.Detail = "" },
	"prev":         func(e *store.AuditEntry) { e.Prev = "00" + e.Prev[2:] },
}

func TestAuditHash(t *testing.T) {
	e := auditLog(3)[1]
	h := store.AuditHash(e)
	if b, err := hex.DecodeString(h); err != nil || len(b) != 32 {
		t.Fatalf("AuditHash = %q; want 64 hex digits (SHA-256)", h)
	}
	cp := e
	if h2 := store.AuditHash(cp); h2 != h {
		t.Errorf("AuditHash of a copy = %s; want %s", h2, h)
	}
	if h2 := store.AuditHash(e); h2 != h {
		t.Errorf("AuditHash twice: %s then %s", h, h2)
	}

	for name, change := range auditFields {
		c := e
		change(&c)
		if store.AuditHash(c) == h {
			t.Errorf("changing %s leaves AuditHash unchanged", name)
		}
	}

	// Hash itself is not hashed.
	c := e
	c.Hash = "something else"
	if store.AuditHash(c) != h {
		t.Errorf("AuditHash depends on the Hash field")
	}
	// Times are hashed as stored: in UTC, to the microsecond.
	c = e
	c.Time = e.Time.In(time.FixedZone("UTC-7", -7*3600))
	if store.AuditHash(c) != h {
		t.Errorf("AuditHash depends on the time's location")
	}
	c.Time = e.Time.Add(999 * time.Nanosecond)
	if store.AuditHash(c) != h {
		t.Errorf("AuditHash depends on sub-microsecond digits")
	}
	// Fields are kept apart: moving text from one field to the next changes the hash.
	x, y := e, e
	x.Actor, x.Action = "ab", "c"
	y.Actor, y.Action = "a", "bc"
	if store.AuditHash(x) == store.AuditHash(y) {
		t.Errorf("AuditHash does not separate Actor and Action")
	}
	x, y = e, e
	x.TenantID, x.Seq = "tn_1", 12
	y.TenantID, y.Seq = "tn_11", 2
	if store.AuditHash(x) == store.AuditHash(y) {
		t.Errorf("AuditHash does not separate TenantID and Seq")
	}
	x, y = e, e
	x.Target, x.Result = "", "200"
	y.Target, y.Result = "200", ""
	if store.AuditHash(x) == store.AuditHash(y) {
		t.Errorf("AuditHash does not separate Target and Result")
	}
}

func TestVerifyAudit(t *testing.T) {
	const n = 6
	check := func(t *testing.T, entries []store.AuditEntry, fromMiddle bool, want int) {
		t.Helper()
		got, why := store.VerifyAudit(entries, fromMiddle)
		if got != want {
			t.Errorf("VerifyAudit(fromMiddle %v) = %d (%q); want %d", fromMiddle, got, why, want)
		}
		if (got == -1) != (why == "") {
			t.Errorf("VerifyAudit = %d with reason %q; want a reason exactly when an entry fails", got, why)
		}
	}

	t.Run("intact", func(t *testing.T) {
		for _, fromMiddle := range []bool{false, true} {
			check(t, auditLog(n), fromMiddle, -1)
			check(t, auditLog(1), fromMiddle, -1)
			check(t, nil, fromMiddle, -1)
			check(t, []store.AuditEntry{}, fromMiddle, -1)
		}
	})

	t.Run("changed field", func(t *testing.T) {
		for name, change := range auditFields {
			for _, i := range []int{0, 2, n - 1} {
				if name == "prev" && i == 0 {
					continue // the first entry has no Prev to change; see "forged start"
				}
				t.Run(fmt.Sprintf("%s of entry %d", name, i), func(t *testing.T) {
					log := auditLog(n)
					change(&log[i])
					check(t, log, false, i)
				})
			}
		}
	})

	t.Run("changed hash", func(t *testing.T) {
		for _, i := range []int{0, 2, n - 1} {
			log := auditLog(n)
			log[i].Hash = log[(i+1)%n].Hash // another entry's hash
			check(t, log, false, i)
			log = auditLog(n)
			log[i].Hash = ""
			check(t, log, false, i)
		}
	})

	// An entry changed and given the hash of its new content: it holds, but the next one no longer
	// carries its hash.
	t.Run("changed and rehashed", func(t *testing.T) {
		for name, change := range auditFields {
			if name == "seq" || name == "prev" {
				continue // these break the entry itself; see below
			}
			for _, i := range []int{0, 2, n - 2} {
				log := auditLog(n)
				change(&log[i])
				log[i].Hash = store.AuditHash(log[i])
				if got, why := store.VerifyAudit(log, false); got != i+1 {
					t.Errorf("%s of entry %d changed and rehashed: VerifyAudit = %d (%q); want %d", name, i, got, why, i+1)
				}
			}
		}
		// A rehashed Seq or Prev fails the entry itself.
		log := auditLog(n)
		log[2].Seq++
		log[2].Hash = store.AuditHash(log[2])
		check(t, log, false, 2)
		log = auditLog(n)
		log[2].Prev = log[0].Hash
		log[2].Hash = store.AuditHash(log[2])
		check(t, log, false, 2)
		// Rehashing everything after the change, Prev included, makes a valid chain: the log's head
		// hash must be kept elsewhere to catch that.
		log = auditLog(n)
		log[2].Actor = "ak_intruder"
		for j := 2; j < n; j++ {
			if j > 2 {
				log[j].Prev = log[j-1].Hash
			}
			log[j].Hash = store.AuditHash(log[j])
		}
		check(t, log, false, -1)
		if log[n-1].Hash == auditLog(n)[n-1].Hash {
			t.Errorf("rewritten chain ends in the original head hash")
		}
	})

	t.Run("removed entry", func(t *testing.T) {
		for _, i := range []int{0, 1, 3} {
			log := slices.Delete(auditLog(n), i, i+1)
			check(t, log, false, i) // the entry that took its place does not follow
		}
		// Removing the last entries leaves a valid, shorter log: the head must be kept elsewhere.
		check(t, auditLog(n)[:n-2], false, -1)
		// Removing one and renumbering the rest still fails, at the gap.
		log := slices.Delete(auditLog(n), 2, 3)
		for j := 2; j < len(log); j++ {
			log[j].Seq--
		}
		check(t, log, false, 2)
	})

	t.Run("swapped entries", func(t *testing.T) {
		for _, i := range []int{0, 2, n - 2} {
			log := auditLog(n)
			log[i], log[i+1] = log[i+1], log[i]
			check(t, log, false, i)
		}
		log := auditLog(n)
		log[1], log[4] = log[4], log[1]
		check(t, log, false, 1)
		// Swapping the sequence numbers back does not help: the chain still breaks.
		log = auditLog(n)
		log[2], log[3] = log[3], log[2]
		log[2].Seq, log[3].Seq = 3, 4
		check(t, log, false, 2)
	})

	t.Run("duplicated entry", func(t *testing.T) {
		log := auditLog(n)
		log = slices.Insert(log, 3, log[2])
		check(t, log, false, 3)
	})

	t.Run("from the middle", func(t *testing.T) {
		seg := auditLog(n)[2:]
		check(t, seg, true, -1)
		check(t, seg, false, 0) // not the log's first entry
		check(t, seg[:1], true, -1)
		check(t, seg[:1], false, 0)
		check(t, auditLog(n)[n-1:], true, -1)

		for name, change := range auditFields {
			for i := range len(seg) {
				t.Run(fmt.Sprintf("%s of entry %d", name, i), func(t *testing.T) {
					s := slices.Clone(seg)
					change(&s[i])
					check(t, s, true, i)
				})
			}
		}
		s := slices.Delete(slices.Clone(seg), 1, 2)
		check(t, s, true, 1)
		s = slices.Clone(seg)
		s[1], s[2] = s[2], s[1]
		check(t, s, true, 1)
		s = slices.Clone(seg)
		s[1].Result = "500"
		s[1].Hash = store.AuditHash(s[1])
		check(t, s, true, 2)
	})

	t.Run("forged start", func(t *testing.T) {
		// A first entry must have Seq 1 and no Prev, even when its hash matches its content.
		log := auditLog(n)
		log[0].Prev = log[3].Hash
		log[0].Hash = store.AuditHash(log[0])
		log[1].Prev = log[0].Hash
		log[1].Hash = store.AuditHash(log[1])
		check(t, log[:2], false, 0)
		check(t, log[:2], true, -1) // from the middle, the first Prev is taken as given

		log = auditLog(n)
		for j := range log {
			log[j].Seq += 10
			log[j].Hash = store.AuditHash(log[j])
			if j+1 < len(log) {
				log[j+1].Prev = log[j].Hash
			}
		}
		check(t, log, false, 0)
		check(t, log, true, -1)
	})
}

// TestAuditValidate checks the fields an entry to append needs.
func TestAuditValidate(t *testing.T) {
	ok := store.AuditEntry{TenantID: "tn_a", Kind: store.AuditAPI, Action: "GET /v1/sandboxes"}
	for _, kind := range []string{store.AuditAPI, store.AuditDaemon, store.AuditEgress} {
		e := ok
		e.Kind = kind
		if err := e.Validate(); err != nil {
			t.Errorf("Validate(kind %q) = %v; want nil", kind, err)
		}
	}
	for _, detail := range []string{"", `{}`, `{"a":[1,2]}`} {
		e := ok
		e.Detail = detail
		if err := e.Validate(); err != nil {
			t.Errorf("Validate(detail %q) = %v; want nil", detail, err)
		}
	}
	for name, change := range map[string]func(*store.AuditEntry){
		"no tenant":       func(e *store.AuditEntry) { e.TenantID = "" },
		"no kind":         func(e *store.AuditEntry) { e.Kind = "" },
		"bad kind":        func(e *store.AuditEntry) { e.Kind = "API" },
		"no action":       func(e *store.AuditEntry) { e.Action = "" },
		"detail not JSON": func(e *store.AuditEntry) { e.Detail = `{"a":` },
		"detail text":     func(e *store.AuditEntry) { e.Detail = "denied" },
	} {
		e := ok
		change(&e)
		if err := e.Validate(); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Validate(%s) = %v; want ErrInvalidArgument", name, err)
		}
	}
}

// TestVerifyAuditAfterCut checks that a log whose oldest entries a retention cut deleted verifies only
// through the cut's record: one that names the entry the log's new first entry follows.
func TestVerifyAuditAfterCut(t *testing.T) {
	chain := func(entries []store.AuditEntry) []store.AuditEntry {
		for i := range entries {
			entries[i].Seq = int64(i + 1)
			if i > 0 {
				entries[i].Prev = entries[i-1].Hash
			}
			entries[i].Hash = store.AuditHash(entries[i])
		}
		return entries
	}
	full := auditLog(10)
	cut := func(through store.AuditEntry, mod func(*store.AuditEntry)) []store.AuditEntry {
		e := store.PruneEntry("tn_a", through, auditBase.Add(5*time.Second), auditBase.Add(time.Hour))
		if mod != nil {
			mod(&e)
		}
		log := chain(append(slices.Clone(full), e))
		return log[5:] // entries 6..10, then the cut's record
	}
	for _, tc := range []struct {
		name       string
		entries    []store.AuditEntry
		fromMiddle bool
		want       int
	}{
		{"the whole log", full, false, -1},
		{"cut, with its record", cut(full[4], nil), false, -1},
		{"cut, without its record", cut(full[4], nil)[:5], false, 0},
		{"cut, without its record, from the middle", cut(full[4], nil)[:5], true, -1},
		{"the record names another entry", cut(full[3], nil), false, 0},
		{"the record names another hash", cut(full[4], func(e *store.AuditEntry) {
			e.Detail = strings.Replace(e.Detail, full[4].Hash, full[3].Hash, 1)
		}), false, 0},
		{"a sealed record does not count", cut(full[4], func(e *store.AuditEntry) { e.Sealed = "x.eA" }), false, 0},
		{"a record of another action does not count", cut(full[4], func(e *store.AuditEntry) { e.Action = "POST /v1/things" }), false, 0},
		{"more cut than the record says", cut(full[4], nil)[1:], false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if i, why := store.VerifyAudit(tc.entries, tc.fromMiddle); i != tc.want {
				t.Errorf("VerifyAudit = %d (%s); want %d", i, why, tc.want)
			}
		})
	}
}
