package audit_test

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/audit"
	"github.com/airlockrun/airlock/internal/daemon/link"
	"github.com/airlockrun/airlock/internal/gateway"
	"github.com/airlockrun/airlock/internal/keys/local"
	"github.com/airlockrun/airlock/internal/secrets"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/sqlite"
)

func newStore(t *testing.T) (store.Store, string) {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "a.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	tn, err := st.CreateTenant(t.Context(), store.Tenant{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	return st, tn.ID
}

// TestRecorder: entries recorded from many goroutines are all written, each goroutine's in order, in
// one verified chain; Flush waits for them; Close writes what is queued.
func TestRecorder(t *testing.T) {
	st, tenant := newStore(t)
	r := audit.New(st, nil)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				r.Record(store.AuditEntry{TenantID: tenant, Kind: store.AuditAPI, Action: "GET /v1/x", Actor: fmt.Sprint(g), Target: fmt.Sprint(i)})
			}
		})
	}
	wg.Wait()
	if err := r.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	all := list(t, st, tenant)
	if len(all) != 1600 {
		t.Fatalf("%d entries after Flush; want 1600", len(all))
	}
	if i, why := store.VerifyAudit(all, false); i >= 0 {
		t.Fatalf("chain broken at %d: %s", i, why)
	}
	next := map[string]int{}
	for _, e := range all {
		if e.Target != fmt.Sprint(next[e.Actor]) {
			t.Fatalf("goroutine %s: entry %s out of order (want %d)", e.Actor, e.Target, next[e.Actor])
		}
		next[e.Actor]++
	}
	// An entry of an unknown tenant is refused alone; the rest of its batch is written.
	r.Record(store.AuditEntry{TenantID: "tn_gone", Kind: store.AuditAPI, Action: "x"})
	r.Record(store.AuditEntry{TenantID: tenant, Kind: store.AuditAPI, Action: "last"})
	r.Close()
	all = list(t, st, tenant)
	if len(all) != 1601 || all[1600].Action != "last" || r.Dropped() != 0 {
		t.Errorf("after Close: %d entries, last %+v, dropped %d", len(all), all[len(all)-1], r.Dropped())
	}
	r.Record(store.AuditEntry{TenantID: tenant, Kind: store.AuditAPI, Action: "after close"}) // must not block or panic
}

// TestSources: daemon entries skip data and window frames; egress entries name the destination and
// decision; both chain into the tenant's log.
func TestSources(t *testing.T) {
	st, tenant := newStore(t)
	r := audit.New(st, nil)
	d := audit.DaemonAudit{Tenant: tenant, Sandbox: "sb_1", Sink: r.Record}
	now := time.Now()
	d.Record(link.Entry{Time: now, Direction: link.ToSandbox, Type: "request", Op: "exec", Args: map[string]any{"argv": []string{"ls"}}})
	d.Record(link.Entry{Time: now, Direction: link.FromSandbox, Type: "data", Op: "exec", Size: 100})
	d.Record(link.Entry{Time: now, Direction: link.FromSandbox, Type: "window"})
	d.Record(link.Entry{Time: now, Direction: link.FromSandbox, Type: "response", Op: "exec", Error: "not_found"})
	audit.DaemonAudit{Sandbox: "sb_2", Sink: r.Record}.Record(link.Entry{Type: "request", Op: "exec"}) // no tenant: nothing
	audit.FlowSink{Sink: r.Record}.Record(gateway.Flow{End: now, SandboxID: "sb_1", TenantID: tenant, DstIP: netip.MustParseAddr("10.0.0.9"),
		DstPort: 443, Host: "api.example.test", Protocol: "tls", Decision: "deny", Rule: "default"})
	r.Close()
	all := list(t, st, tenant)
	if len(all) != 3 {
		t.Fatalf("%d entries; want 2 daemon + 1 egress: %+v", len(all), all)
	}
	if all[0].Kind != store.AuditDaemon || all[0].Action != "exec" || all[0].Result != "ok" || all[1].Result != "not_found" {
		t.Errorf("daemon entries = %+v", all[:2])
	}
	if e := all[2]; e.Kind != store.AuditEgress || e.Result != "deny" || e.Target != "api.example.test (10.0.0.9:443)" || e.Actor != "sb_1" {
		t.Errorf("egress entry = %+v", e)
	}
}

func list(t *testing.T, st store.Store, tenant string) []store.AuditEntry {
	t.Helper()
	var out []store.AuditEntry
	var after int64
	for {
		page, err := st.ListAudit(t.Context(), tenant, after, store.MaxListLimit)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, page...)
		if len(page) < store.MaxListLimit {
			return out
		}
		after = page[len(page)-1].Seq
	}
}

// gatedStore holds every AppendAudit until open is closed.
type gatedStore struct {
	store.Store
	open chan struct{}
}

func (g *gatedStore) AppendAudit(ctx context.Context, es []store.AuditEntry) error {
	select {
	case <-g.open:
	case <-ctx.Done():
		return ctx.Err()
	}
	return g.Store.AppendAudit(ctx, es)
}

// TestNoisyTenant: a tenant recording far more than the store takes waits (back-pressure on the noisy
// source); another tenant's entries still queue at once and none is dropped.
func TestNoisyTenant(t *testing.T) {
	st, noisy := newStore(t)
	quiet, err := st.CreateTenant(t.Context(), store.Tenant{Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedStore{Store: st, open: make(chan struct{})}
	r := audit.New(g, nil)
	defer r.Close()
	const flood = 6500 // more than a tenant's share of the queue (4096) and a batch
	noisyDone := make(chan struct{})
	go func() {
		defer close(noisyDone)
		for i := range flood {
			r.Record(store.AuditEntry{TenantID: noisy, Kind: store.AuditDaemon, Action: "exec", Target: fmt.Sprint(i)})
		}
	}()
	time.Sleep(200 * time.Millisecond) // the noisy tenant fills its share
	quietDone := make(chan struct{})
	go func() {
		defer close(quietDone)
		for i := range 20 {
			r.Record(store.AuditEntry{TenantID: quiet.ID, Kind: store.AuditAPI, Action: "GET /v1/x", Target: fmt.Sprint(i)})
		}
	}()
	select {
	case <-quietDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the quiet tenant's Record waited behind the noisy one")
	}
	select {
	case <-noisyDone:
		t.Fatal("the noisy tenant recorded all its entries while the store took none; want it held back")
	default:
	}
	close(g.open)
	<-noisyDone
	if err := r.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := len(list(t, st, quiet.ID)); got != 20 {
		t.Errorf("the quiet tenant has %d entries; want 20", got)
	}
	if got := len(list(t, st, noisy)); got != flood {
		t.Errorf("the noisy tenant has %d entries; want all %d (held back, not dropped)", got, flood)
	}
	if d := r.Dropped(); d != 0 {
		t.Errorf("%d entries dropped; want none", d)
	}
}

// TestRecorderSeals: with a sealer, the Store holds no payload in the clear, the chain verifies without
// the key, the key opens every payload; a tenant whose key cannot seal gets its entries with the payload
// discarded, never in the clear.
func TestRecorderSeals(t *testing.T) {
	st, tenant := newStore(t)
	kr, err := local.New(filepath.Join(t.TempDir(), "keys"))
	if err != nil {
		t.Fatal(err)
	}
	sec, err := secrets.New(secrets.Config{Keys: kr, Storage: secrets.NewMemStorage()})
	if err != nil {
		t.Fatal(err)
	}
	r := audit.New(st, nil)
	defer r.Close()
	r.SetSealer(func(ctx context.Context, tenantID string) (audit.Sealer, error) {
		return sec.Sealer(ctx, tenantID, "audit", true)
	})
	const marker = "argv-marker-31337"
	for i := range 20 {
		r.Record(store.AuditEntry{TenantID: tenant, Kind: store.AuditDaemon, Actor: "sb_x", Action: "exec",
			Target: fmt.Sprintf("%s-%d", marker, i), Result: "ok", Detail: `{"argv":["echo","` + marker + `"]}`})
	}
	if err := r.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	all := list(t, st, tenant)
	if len(all) != 20 {
		t.Fatalf("%d entries; want 20", len(all))
	}
	if i, why := store.VerifyAudit(all, false); i >= 0 {
		t.Fatalf("the sealed chain does not verify at %d: %s", i, why)
	}
	// A payload added in the clear to a sealed entry (in the Store, say) does not verify.
	planted := slices.Clone(all)
	planted[3].Actor = "someone-else"
	if i, _ := store.VerifyAudit(planted, false); i != 3 {
		t.Errorf("a sealed entry with a payload in the clear: VerifyAudit = %d; want 3", i)
	}
	x, err := sec.Sealer(t.Context(), tenant, "audit", false)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range all {
		if strings.Contains(fmt.Sprintf("%+v", e), marker) || e.Sealed == "" || e.Sealed == store.AuditDiscarded {
			t.Fatalf("entry %d as stored: %+v; want its payload sealed only", i, e)
		}
		ct, err := store.AuditCiphertext(e)
		if err != nil {
			t.Fatal(err)
		}
		p, err := x.Open(ct, store.AuditAAD(e))
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		got, err := store.OpenedAudit(e, p)
		if err != nil || got.Target != fmt.Sprintf("%s-%d", marker, i) || got.Action != "exec" {
			t.Errorf("entry %d opened to %+v, %v", i, got, err)
		}
		all[i] = got
	}
	// Opened, the log still verifies; a payload changed after opening does not.
	if i, why := store.VerifyAudit(all, false); i >= 0 {
		t.Fatalf("the opened chain does not verify at %d: %s", i, why)
	}
	edited := slices.Clone(all)
	edited[7].Action += " (edited)"
	if i, _ := store.VerifyAudit(edited, false); i != 7 {
		t.Errorf("an opened entry's payload changed: VerifyAudit = %d; want 7", i)
	}
	// The key revoked: new entries keep their time and kind only.
	if err := kr.RevokeKey(t.Context(), tenant); err != nil {
		t.Fatal(err)
	}
	r.Record(store.AuditEntry{TenantID: tenant, Kind: store.AuditAPI, Action: "POST /v1/x", Target: marker})
	if err := r.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	all = list(t, st, tenant)
	last := all[len(all)-1]
	if last.Sealed != store.AuditDiscarded || strings.Contains(fmt.Sprintf("%+v", last), marker) {
		t.Errorf("an entry after the key's revoke: %+v; want its payload discarded", last)
	}
	if i, why := store.VerifyAudit(all, false); i >= 0 {
		t.Fatalf("the chain does not verify at %d: %s", i, why)
	}
	if r.Unsealed() != 1 {
		t.Errorf("Unsealed = %d; want 1", r.Unsealed())
	}
}
