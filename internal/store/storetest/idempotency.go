package storetest

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

func testIdempotency(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")

	rec := store.IdempotencyRecord{
		TenantID: a.ID, Key: "key-1", Op: "POST /v1/sandboxes", RequestHash: []byte{1, 2, 3, 0},
		ResponseStatus: 201, ResponseBody: []byte(`{"id":"sb_1"}`), CreatedAt: base,
	}
	wantErr(t, "PutIdempotency", s.PutIdempotency(ctx, rec), nil)
	get := func(tenantID, key string) (store.IdempotencyRecord, error) {
		t.Helper()
		return s.GetIdempotency(ctx, tenantID, key)
	}
	got, err := get(a.ID, "key-1")
	wantErr(t, "GetIdempotency", err, nil)
	if diff := cmp.Diff(rec, got, cmpOpts...); diff != "" {
		t.Errorf("GetIdempotency (-want +got):\n%s", diff)
	}
	if got.CreatedAt.Location() != time.UTC {
		t.Errorf("CreatedAt location = %v; want UTC", got.CreatedAt.Location())
	}

	// The key is taken: a second Put fails and changes nothing.
	dup := rec
	dup.ResponseBody, dup.ResponseStatus = []byte("other"), 500
	wantErr(t, "PutIdempotency(duplicate)", s.PutIdempotency(ctx, dup), errdefs.ErrAlreadyExists)
	got, err = get(a.ID, "key-1")
	wantErr(t, "GetIdempotency", err, nil)
	if diff := cmp.Diff(rec, got, cmpOpts...); diff != "" {
		t.Errorf("GetIdempotency after duplicate put (-want +got):\n%s", diff)
	}

	// Keys are per tenant.
	_, err = get(b.ID, "key-1")
	wantErr(t, "GetIdempotency(other tenant)", err, errdefs.ErrNotFound)
	recB := store.IdempotencyRecord{TenantID: b.ID, Key: "key-1", Op: "POST /v1/sandboxes", ResponseStatus: 202, CreatedAt: base.Add(2 * time.Second)}
	wantErr(t, "PutIdempotency(same key, other tenant)", s.PutIdempotency(ctx, recB), nil)
	got, err = get(b.ID, "key-1")
	wantErr(t, "GetIdempotency(b)", err, nil)
	if diff := cmp.Diff(recB, got, cmpOpts...); diff != "" {
		t.Errorf("GetIdempotency(b) (-want +got):\n%s", diff)
	}
	_, err = get(a.ID, "key-missing")
	wantErr(t, "GetIdempotency(missing)", err, errdefs.ErrNotFound)

	// A zero CreatedAt is set to now.
	before := store.NormalizeTime(time.Now())
	wantErr(t, "PutIdempotency(key-2)", s.PutIdempotency(ctx, store.IdempotencyRecord{TenantID: a.ID, Key: "key-2", Op: "x"}), nil)
	got, err = get(a.ID, "key-2")
	wantErr(t, "GetIdempotency(key-2)", err, nil)
	if got.CreatedAt.Before(before) || got.CreatedAt.After(time.Now()) {
		t.Errorf("assigned CreatedAt = %v; want about now (after %v)", got.CreatedAt, before)
	}

	for name, bad := range map[string]struct {
		rec  store.IdempotencyRecord
		want error
	}{
		"unknown tenant": {store.IdempotencyRecord{TenantID: "tn_missing", Key: "k"}, errdefs.ErrNotFound},
		"no tenant":      {store.IdempotencyRecord{Key: "k"}, errdefs.ErrInvalidArgument},
		"no key":         {store.IdempotencyRecord{TenantID: a.ID}, errdefs.ErrInvalidArgument},
	} {
		wantErr(t, "PutIdempotency("+name+")", s.PutIdempotency(ctx, bad.rec), bad.want)
	}

	// Expiry removes records created before the cut-off, of every tenant, and frees their keys.
	n, err := s.DeleteIdempotencyBefore(ctx, base.Add(time.Second))
	wantErr(t, "DeleteIdempotencyBefore", err, nil)
	if n != 1 {
		t.Errorf("DeleteIdempotencyBefore removed %d records; want 1", n)
	}
	_, err = get(a.ID, "key-1")
	wantErr(t, "GetIdempotency(expired)", err, errdefs.ErrNotFound)
	for _, k := range [][2]string{{b.ID, "key-1"}, {a.ID, "key-2"}} {
		_, err = get(k[0], k[1])
		wantErr(t, "GetIdempotency(kept "+k[1]+")", err, nil)
	}
	wantErr(t, "PutIdempotency(reused key)", s.PutIdempotency(ctx, rec), nil)
	n, err = s.DeleteIdempotencyBefore(ctx, base.Add(3*time.Second))
	wantErr(t, "DeleteIdempotencyBefore", err, nil)
	if n != 2 {
		t.Errorf("DeleteIdempotencyBefore removed %d records; want 2", n)
	}
}

func testClose(t *testing.T, s store.Store) {
	mustTenant(t, s, "a")
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := s.ListTenants(t.Context()); err == nil {
		t.Errorf("ListTenants after Close succeeded; want an error")
	}
	if _, err := s.CreateTenant(t.Context(), store.Tenant{Name: "late"}); err == nil {
		t.Errorf("CreateTenant after Close succeeded; want an error")
	}
}

// testReopen writes one of everything, reopens the store twice and reads it all back.
func testReopen(t *testing.T, s store.Store, reopen func(t *testing.T, s store.Store) store.Store) {
	ctx := t.Context()
	tn, err := s.CreateTenant(ctx, store.Tenant{Name: "a", Operator: true, CreatedAt: base,
		Retention: store.RetentionSpec{KeepAllSeconds: 1, KeepDailySeconds: 2}})
	wantErr(t, "CreateTenant", err, nil)
	off, err := s.CreateTenant(ctx, store.Tenant{Name: "off", CreatedAt: base.Add(time.Second),
		Quotas: store.TenantQuotas{RunningSandboxes: 9, Sessions: 8, SnapshotBytes: 7}})
	wantErr(t, "CreateTenant(off)", err, nil)
	off, err = s.SetTenantDisabled(ctx, off.ID, ptr(base.Add(time.Minute)))
	wantErr(t, "SetTenantDisabled", err, nil)
	tn, err = s.UpdateTenantRetention(ctx, tn.ID, store.RetentionSpec{KeepAllSeconds: 3, KeepHourlySeconds: 4})
	wantErr(t, "UpdateTenantRetention", err, nil)
	// One running sandbox (below) fills tn's quota: the reopened store must still refuse a second.
	tn, err = s.SetTenantQuotas(ctx, tn.ID, store.TenantQuotas{RunningSandboxes: 1, Sessions: 2, SnapshotBytes: 1 << 40})
	wantErr(t, "SetTenantQuotas", err, nil)
	key, err := s.CreateAPIKey(ctx, store.APIKey{TenantID: tn.ID, Name: "ci", Scope: store.ScopeWrite, Prefix: "al_x", Hash: []byte("h")})
	wantErr(t, "CreateAPIKey", err, nil)
	wantErr(t, "TouchAPIKey", s.TouchAPIKey(ctx, tn.ID, key.ID, base), nil)
	sb := mustSandbox(t, s, store.Sandbox{TenantID: tn.ID, Metadata: map[string]string{"k": "v"},
		Spec: store.SandboxSpec{CPUMillicores: 100, MemoryMB: 1, DiskMB: 2, TimeoutSeconds: 3}, EndsAt: ptr(base)})
	sb = drive(t, s, sb, store.StateRunning)
	tok, err := s.CreateAccessToken(ctx, store.AccessToken{TenantID: tn.ID, Name: "agent", SandboxID: sb.ID,
		Scopes: []store.TokenScope{store.TokenFiles, store.TokenPorts}, Prefix: "at_x", Hash: []byte("th"),
		CreatedBy: key.ID, CreatedAt: base, ExpiresAt: base.Add(time.Hour)}, store.TokenLimits{})
	wantErr(t, "CreateAccessToken", err, nil)
	wantErr(t, "RevokeAccessToken", s.RevokeAccessToken(ctx, tn.ID, tok.ID, base.Add(time.Minute)), nil)
	tok.RevokedAt = ptr(base.Add(time.Minute))
	// The key is revoked after its token was (a revoke of the key revokes its live tokens).
	wantErr(t, "RevokeAPIKey", s.RevokeAPIKey(ctx, tn.ID, key.ID, base.Add(time.Second)), nil)
	key.LastUsedAt, key.RevokedAt = ptr(base), ptr(base.Add(time.Second))
	rec := store.IdempotencyRecord{TenantID: tn.ID, Key: "k", Op: "op", RequestHash: []byte("r"), ResponseStatus: 201, ResponseBody: []byte("{}"), CreatedAt: base}
	wantErr(t, "PutIdempotency", s.PutIdempotency(ctx, rec), nil)

	for round := range 2 {
		s = reopen(t, s)
		cur := s
		t.Cleanup(func() { _ = cur.Close() })

		tenants, err := s.ListTenants(ctx)
		wantErr(t, "ListTenants", err, nil)
		if diff := cmp.Diff([]store.Tenant{tn, off}, tenants); diff != "" {
			t.Errorf("reopen %d: ListTenants (-want +got):\n%s", round, diff)
		}
		gotKey, err := s.GetAPIKeyByHash(ctx, []byte("h"))
		wantErr(t, "GetAPIKeyByHash", err, nil)
		if diff := cmp.Diff(key, gotKey, cmpOpts...); diff != "" {
			t.Errorf("reopen %d: GetAPIKeyByHash (-want +got):\n%s", round, diff)
		}
		gotTok, err := s.GetAccessTokenByHash(ctx, []byte("th"))
		wantErr(t, "GetAccessTokenByHash", err, nil)
		if diff := cmp.Diff(tok, gotTok, cmpOpts...); diff != "" {
			t.Errorf("reopen %d: GetAccessTokenByHash (-want +got):\n%s", round, diff)
		}
		items := listAll(t, s, tn.ID, store.SandboxFilter{Metadata: map[string]string{"k": "v"}})
		if diff := cmp.Diff([]store.Sandbox{sb}, items, cmpOpts...); diff != "" {
			t.Errorf("reopen %d: ListSandboxes (-want +got):\n%s", round, diff)
		}
		usage, err := s.TenantUsage(ctx, tn.ID)
		wantErr(t, "TenantUsage", err, nil)
		if want := (store.TenantUsage{RunningSandboxes: 1}); usage != want {
			t.Errorf("reopen %d: TenantUsage = %+v; want %+v", round, usage, want)
		}
		_, err = s.CreateSandbox(ctx, store.Sandbox{TenantID: tn.ID, Template: "base"})
		wantErr(t, "CreateSandbox(over quota) after reopen", err, errdefs.ErrResourceExhausted)
		gotRec, err := s.GetIdempotency(ctx, tn.ID, "k")
		wantErr(t, "GetIdempotency", err, nil)
		if diff := cmp.Diff(rec, gotRec, cmpOpts...); diff != "" {
			t.Errorf("reopen %d: GetIdempotency (-want +got):\n%s", round, diff)
		}
		// The reopened store takes writes, and versions carry on.
		sb.Reason = "after reopen"
		sb, err = s.UpdateSandbox(ctx, sb)
		wantErr(t, "UpdateSandbox after reopen", err, nil)
	}
}
