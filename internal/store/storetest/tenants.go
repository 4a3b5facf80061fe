package storetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

func testTenants(t *testing.T, s store.Store) {
	ctx := t.Context()

	before := store.NormalizeTime(time.Now())
	a, err := s.CreateTenant(ctx, store.Tenant{Name: "acme"})
	wantErr(t, "CreateTenant(acme)", err, nil)
	after := time.Now()
	if !strings.HasPrefix(a.ID, "tn_") {
		t.Errorf("assigned tenant ID = %q; want prefix tn_", a.ID)
	}
	if a.CreatedAt.Before(before) || a.CreatedAt.After(after) || a.CreatedAt.Location() != time.UTC {
		t.Errorf("assigned CreatedAt = %v; want UTC between %v and %v", a.CreatedAt, before, after)
	}

	if a.Retention != (store.RetentionSpec{}) {
		t.Errorf("CreateTenant without retention: Retention = %+v; want zero (inherit)", a.Retention)
	}

	keep := store.RetentionSpec{KeepAllSeconds: 3600, KeepHourlySeconds: 86400, KeepDailySeconds: 30 * 86400}
	b, err := s.CreateTenant(ctx, store.Tenant{ID: "tn_b", Name: "beta", CreatedAt: base.Add(-time.Hour), Retention: keep})
	wantErr(t, "CreateTenant(tn_b)", err, nil)
	if want := (store.Tenant{ID: "tn_b", Name: "beta", CreatedAt: base.Add(-time.Hour), Retention: keep}); !cmp.Equal(b, want) {
		t.Errorf("CreateTenant = %+v; want %+v", b, want)
	}

	_, err = s.CreateTenant(ctx, store.Tenant{ID: "tn_b", Name: "again"})
	wantErr(t, "CreateTenant(duplicate ID)", err, errdefs.ErrAlreadyExists)
	_, err = s.CreateTenant(ctx, store.Tenant{Name: ""})
	wantErr(t, "CreateTenant(empty name)", err, errdefs.ErrInvalidArgument)
	_, err = s.CreateTenant(ctx, store.Tenant{ID: "tn_neg", Name: "neg", Retention: store.RetentionSpec{KeepDailySeconds: -1}})
	wantErr(t, "CreateTenant(negative retention)", err, errdefs.ErrInvalidArgument)
	_, err = s.GetTenant(ctx, "tn_neg")
	wantErr(t, "GetTenant(refused tenant)", err, errdefs.ErrNotFound)

	got, err := s.GetTenant(ctx, a.ID)
	wantErr(t, "GetTenant", err, nil)
	if diff := cmp.Diff(a, got); diff != "" {
		t.Errorf("GetTenant (-want +got):\n%s", diff)
	}
	got, err = s.GetTenant(ctx, b.ID)
	wantErr(t, "GetTenant(tn_b)", err, nil)
	if diff := cmp.Diff(b, got); diff != "" {
		t.Errorf("GetTenant(tn_b) (-want +got):\n%s", diff)
	}
	_, err = s.GetTenant(ctx, "tn_missing")
	wantErr(t, "GetTenant(missing)", err, errdefs.ErrNotFound)

	list, err := s.ListTenants(ctx)
	wantErr(t, "ListTenants", err, nil)
	if diff := cmp.Diff([]store.Tenant{b, a}, list); diff != "" { // ordered by CreatedAt
		t.Errorf("ListTenants (-want +got):\n%s", diff)
	}
}

func testTenantRetention(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")

	for _, r := range []store.RetentionSpec{
		{KeepAllSeconds: 600, KeepHourlySeconds: 2 * 86400, KeepDailySeconds: 90 * 86400},
		{KeepHourlySeconds: 86400}, // the others inherit
		{KeepAllSeconds: 1<<62 + 1, KeepHourlySeconds: 1, KeepDailySeconds: 1<<63 - 1},
		{}, // back to the server's defaults
	} {
		got, err := s.UpdateTenantRetention(ctx, a.ID, r)
		wantErr(t, fmt.Sprintf("UpdateTenantRetention(%+v)", r), err, nil)
		want := a
		want.Retention = r
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("UpdateTenantRetention(%+v) returned (-want +got):\n%s", r, diff)
		}
		stored, err := s.GetTenant(ctx, a.ID)
		wantErr(t, "GetTenant", err, nil)
		if diff := cmp.Diff(want, stored); diff != "" {
			t.Errorf("GetTenant after UpdateTenantRetention(%+v) (-want +got):\n%s", r, diff)
		}
		list, err := s.ListTenants(ctx)
		wantErr(t, "ListTenants", err, nil)
		if diff := cmp.Diff([]store.Tenant{want, b}, list); diff != "" { // b is untouched
			t.Errorf("ListTenants after UpdateTenantRetention(%+v) (-want +got):\n%s", r, diff)
		}
	}

	keep := store.RetentionSpec{KeepAllSeconds: 60, KeepHourlySeconds: 3600, KeepDailySeconds: 86400}
	a, err := s.UpdateTenantRetention(ctx, a.ID, keep)
	wantErr(t, "UpdateTenantRetention", err, nil)
	bad := []struct {
		name string
		id   string
		r    store.RetentionSpec
		want error
	}{
		{"unknown tenant", "tn_missing", keep, errdefs.ErrNotFound},
		{"empty ID", "", keep, errdefs.ErrNotFound},
		{"negative keep all", a.ID, store.RetentionSpec{KeepAllSeconds: -1}, errdefs.ErrInvalidArgument},
		{"negative keep hourly", a.ID, store.RetentionSpec{KeepAllSeconds: 1, KeepHourlySeconds: -3600}, errdefs.ErrInvalidArgument},
		{"negative keep daily", a.ID, store.RetentionSpec{KeepDailySeconds: -1 << 63}, errdefs.ErrInvalidArgument},
	}
	for _, tt := range bad {
		_, err := s.UpdateTenantRetention(ctx, tt.id, tt.r)
		wantErr(t, "UpdateTenantRetention("+tt.name+")", err, tt.want)
	}
	// Nothing of the failed updates was stored.
	list, err := s.ListTenants(ctx)
	wantErr(t, "ListTenants", err, nil)
	if diff := cmp.Diff([]store.Tenant{a, b}, list); diff != "" {
		t.Errorf("ListTenants after failed updates (-want +got):\n%s", diff)
	}
}

func testAPIKeys(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")

	k1, err := s.CreateAPIKey(ctx, store.APIKey{TenantID: a.ID, Name: "ci", Scope: store.ScopeWrite, Prefix: "al_abcd", Hash: []byte("hash-1"), CreatedAt: base})
	wantErr(t, "CreateAPIKey(k1)", err, nil)
	if !strings.HasPrefix(k1.ID, "key_") {
		t.Errorf("assigned key ID = %q; want prefix key_", k1.ID)
	}
	k2, err := s.CreateAPIKey(ctx, store.APIKey{ID: "key_2", TenantID: a.ID, Name: "laptop", Scope: store.ScopeRead, Prefix: "al_efgh", Hash: []byte("hash-2"), CreatedAt: base.Add(time.Second)})
	wantErr(t, "CreateAPIKey(k2)", err, nil)
	kb, err := s.CreateAPIKey(ctx, store.APIKey{TenantID: b.ID, Name: "other", Scope: store.ScopeAdmin, Prefix: "al_ijkl", Hash: []byte("hash-b")})
	wantErr(t, "CreateAPIKey(kb)", err, nil)
	for _, k := range []struct {
		key  store.APIKey
		want store.Scope
	}{{k1, store.ScopeWrite}, {k2, store.ScopeRead}, {kb, store.ScopeAdmin}} {
		if k.key.Scope != k.want {
			t.Errorf("CreateAPIKey(%s) returned Scope %q; want %q", k.key.Name, k.key.Scope, k.want)
		}
		got, err := s.GetAPIKeyByHash(ctx, k.key.Hash)
		wantErr(t, "GetAPIKeyByHash("+k.key.Name+")", err, nil)
		if got.Scope != k.want {
			t.Errorf("GetAPIKeyByHash(%s) Scope = %q; want %q", k.key.Name, got.Scope, k.want)
		}
	}

	bad := []struct {
		name string
		key  store.APIKey
		want error
	}{
		{"duplicate hash", store.APIKey{TenantID: b.ID, Name: "x", Scope: store.ScopeRead, Hash: []byte("hash-1")}, errdefs.ErrAlreadyExists},
		{"duplicate ID", store.APIKey{ID: "key_2", TenantID: b.ID, Name: "x", Scope: store.ScopeRead, Hash: []byte("hash-3")}, errdefs.ErrAlreadyExists},
		{"unknown tenant", store.APIKey{TenantID: "tn_missing", Name: "x", Scope: store.ScopeRead, Hash: []byte("hash-4")}, errdefs.ErrNotFound},
		{"no tenant", store.APIKey{Name: "x", Scope: store.ScopeRead, Hash: []byte("hash-5")}, errdefs.ErrInvalidArgument},
		{"no name", store.APIKey{TenantID: a.ID, Scope: store.ScopeRead, Hash: []byte("hash-6")}, errdefs.ErrInvalidArgument},
		{"no hash", store.APIKey{TenantID: a.ID, Name: "x", Scope: store.ScopeRead}, errdefs.ErrInvalidArgument},
		{"no scope", store.APIKey{TenantID: a.ID, Name: "x", Hash: []byte("hash-7")}, errdefs.ErrInvalidArgument},
		{"unknown scope", store.APIKey{TenantID: a.ID, Name: "x", Scope: "owner", Hash: []byte("hash-8")}, errdefs.ErrInvalidArgument},
		{"scope in capitals", store.APIKey{TenantID: a.ID, Name: "x", Scope: "ADMIN", Hash: []byte("hash-9")}, errdefs.ErrInvalidArgument},
	}
	for _, tt := range bad {
		_, err := s.CreateAPIKey(ctx, tt.key)
		wantErr(t, "CreateAPIKey("+tt.name+")", err, tt.want)
	}

	got, err := s.GetAPIKeyByHash(ctx, []byte("hash-2"))
	wantErr(t, "GetAPIKeyByHash", err, nil)
	if diff := cmp.Diff(k2, got, cmpOpts...); diff != "" {
		t.Errorf("GetAPIKeyByHash (-want +got):\n%s", diff)
	}
	_, err = s.GetAPIKeyByHash(ctx, []byte("hash-unknown"))
	wantErr(t, "GetAPIKeyByHash(unknown)", err, errdefs.ErrNotFound)

	list, err := s.ListAPIKeys(ctx, a.ID)
	wantErr(t, "ListAPIKeys(a)", err, nil)
	if diff := cmp.Diff([]store.APIKey{k1, k2}, list, cmpOpts...); diff != "" {
		t.Errorf("ListAPIKeys(a) (-want +got):\n%s", diff)
	}
	list, err = s.ListAPIKeys(ctx, b.ID)
	wantErr(t, "ListAPIKeys(b)", err, nil)
	if diff := cmp.Diff([]store.APIKey{kb}, list, cmpOpts...); diff != "" {
		t.Errorf("ListAPIKeys(b) (-want +got):\n%s", diff)
	}
	list, err = s.ListAPIKeys(ctx, "tn_missing")
	wantErr(t, "ListAPIKeys(unknown tenant)", err, nil)
	if len(list) != 0 {
		t.Errorf("ListAPIKeys(unknown tenant) = %v; want none", list)
	}
}

func testAPIKeyTouchAndRevoke(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	k, err := s.CreateAPIKey(ctx, store.APIKey{TenantID: a.ID, Name: "ci", Scope: store.ScopeAdmin, Prefix: "al_", Hash: []byte{0, 1, 2, 0xff}})
	wantErr(t, "CreateAPIKey", err, nil)
	if k.LastUsedAt != nil || k.RevokedAt != nil {
		t.Fatalf("new key has LastUsedAt %v, RevokedAt %v; want both nil", k.LastUsedAt, k.RevokedAt)
	}

	get := func() store.APIKey {
		t.Helper()
		got, err := s.GetAPIKeyByHash(ctx, k.Hash)
		wantErr(t, "GetAPIKeyByHash", err, nil)
		return got
	}
	t1 := base.Add(time.Hour + 123456789*time.Nanosecond)
	wantErr(t, "TouchAPIKey(t1)", s.TouchAPIKey(ctx, a.ID, k.ID, t1), nil)
	if got := get().LastUsedAt; got == nil || !got.Equal(store.NormalizeTime(t1)) {
		t.Errorf("LastUsedAt after touch = %v; want %v", got, store.NormalizeTime(t1))
	}
	wantErr(t, "TouchAPIKey(earlier)", s.TouchAPIKey(ctx, a.ID, k.ID, t1.Add(-time.Minute)), nil)
	if got := get().LastUsedAt; got == nil || !got.Equal(store.NormalizeTime(t1)) {
		t.Errorf("LastUsedAt after an earlier touch = %v; want it to stay %v", got, store.NormalizeTime(t1))
	}
	t2 := t1.Add(time.Minute)
	wantErr(t, "TouchAPIKey(t2)", s.TouchAPIKey(ctx, a.ID, k.ID, t2), nil)
	if got := get().LastUsedAt; got == nil || !got.Equal(store.NormalizeTime(t2)) {
		t.Errorf("LastUsedAt after a later touch = %v; want %v", got, store.NormalizeTime(t2))
	}
	wantErr(t, "TouchAPIKey(other tenant)", s.TouchAPIKey(ctx, b.ID, k.ID, t2), errdefs.ErrNotFound)
	wantErr(t, "TouchAPIKey(missing)", s.TouchAPIKey(ctx, a.ID, "key_missing", t2), errdefs.ErrNotFound)

	wantErr(t, "RevokeAPIKey(other tenant)", s.RevokeAPIKey(ctx, b.ID, k.ID, t2), errdefs.ErrNotFound)
	wantErr(t, "RevokeAPIKey(missing)", s.RevokeAPIKey(ctx, a.ID, "key_missing", t2), errdefs.ErrNotFound)
	if got := get().RevokedAt; got != nil {
		t.Fatalf("RevokedAt after failed revokes = %v; want nil", got)
	}
	r1 := t2.Add(time.Minute)
	wantErr(t, "RevokeAPIKey", s.RevokeAPIKey(ctx, a.ID, k.ID, r1), nil)
	wantErr(t, "RevokeAPIKey(again)", s.RevokeAPIKey(ctx, a.ID, k.ID, r1.Add(time.Hour)), nil)
	got := get() // a revoked key is still found, so the caller can tell revoked from unknown
	if got.RevokedAt == nil || !got.RevokedAt.Equal(store.NormalizeTime(r1)) || got.RevokedAt.Location() != time.UTC {
		t.Errorf("RevokedAt = %v; want the first revocation time %v in UTC", got.RevokedAt, store.NormalizeTime(r1))
	}
	list, err := s.ListAPIKeys(ctx, a.ID)
	wantErr(t, "ListAPIKeys", err, nil)
	if diff := cmp.Diff([]store.APIKey{got}, list, cmpOpts...); diff != "" {
		t.Errorf("ListAPIKeys after revoke (-want +got):\n%s", diff)
	}
}
