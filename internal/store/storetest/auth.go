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

// elsewhere is a zone that is not UTC, to check that the store returns times in UTC.
var elsewhere = time.FixedZone("UTC+3:30", 3*3600+30*60)

func testTenantDisable(t *testing.T, s store.Store) {
	ctx := t.Context()

	op, err := s.CreateTenant(ctx, store.Tenant{ID: "tn_op", Name: "ops", Operator: true, CreatedAt: base})
	wantErr(t, "CreateTenant(operator)", err, nil)
	if want := (store.Tenant{ID: "tn_op", Name: "ops", Operator: true, CreatedAt: base}); !cmp.Equal(op, want) {
		t.Errorf("CreateTenant(operator) = %+v; want %+v", op, want)
	}
	a, err := s.CreateTenant(ctx, store.Tenant{ID: "tn_a", Name: "a", CreatedAt: base.Add(time.Second)})
	wantErr(t, "CreateTenant(a)", err, nil)
	if a.Operator || a.DisabledAt != nil {
		t.Errorf("CreateTenant(a): Operator %v, DisabledAt %v; want false, nil", a.Operator, a.DisabledAt)
	}
	// A tenant may be created disabled; the time is normalized.
	created := time.Date(2021, 3, 4, 9, 10, 11, 123456789, elsewhere)
	c, err := s.CreateTenant(ctx, store.Tenant{ID: "tn_c", Name: "c", CreatedAt: base.Add(2 * time.Second), DisabledAt: ptr(created)})
	wantErr(t, "CreateTenant(disabled)", err, nil)
	if c.DisabledAt == nil || !c.DisabledAt.Equal(store.NormalizeTime(created)) || c.DisabledAt.Location() != time.UTC {
		t.Errorf("CreateTenant(disabled): DisabledAt = %v; want %v in UTC", c.DisabledAt, store.NormalizeTime(created))
	}
	// There is one operator tenant.
	_, err = s.CreateTenant(ctx, store.Tenant{ID: "tn_op2", Name: "ops2", Operator: true})
	wantErr(t, "CreateTenant(second operator)", err, errdefs.ErrAlreadyExists)
	// The operator tenant is never disabled, not even from the start.
	_, err = s.CreateTenant(ctx, store.Tenant{ID: "tn_bad", Name: "bad", Operator: true, DisabledAt: ptr(base)})
	wantErr(t, "CreateTenant(disabled operator)", err, errdefs.ErrInvalidArgument)
	_, err = s.GetTenant(ctx, "tn_bad")
	wantErr(t, "GetTenant(refused tenant)", err, errdefs.ErrNotFound)

	for _, want := range []store.Tenant{op, a, c} {
		got, err := s.GetTenant(ctx, want.ID)
		wantErr(t, "GetTenant("+want.ID+")", err, nil)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("GetTenant(%s) (-want +got):\n%s", want.ID, diff)
		}
	}
	checkTenants := func(what string, want ...store.Tenant) {
		t.Helper()
		list, err := s.ListTenants(ctx)
		wantErr(t, "ListTenants", err, nil)
		if diff := cmp.Diff(want, list); diff != "" {
			t.Errorf("ListTenants %s (-want +got):\n%s", what, diff)
		}
	}
	checkTenants("after create", op, a, c)

	// Disable a: DisabledAt is set, normalized, and nothing else changes.
	d1 := time.Date(2021, 3, 5, 1, 2, 3, 456789999, elsewhere)
	got, err := s.SetTenantDisabled(ctx, a.ID, ptr(d1))
	wantErr(t, "SetTenantDisabled(a, d1)", err, nil)
	wantA := a
	wantA.DisabledAt = ptr(store.NormalizeTime(d1))
	if diff := cmp.Diff(wantA, got); diff != "" {
		t.Errorf("SetTenantDisabled(a, d1) returned (-want +got):\n%s", diff)
	}
	if got.DisabledAt != nil && got.DisabledAt.Location() != time.UTC {
		t.Errorf("DisabledAt location = %v; want UTC", got.DisabledAt.Location())
	}
	stored, err := s.GetTenant(ctx, a.ID)
	wantErr(t, "GetTenant(a)", err, nil)
	if diff := cmp.Diff(wantA, stored); diff != "" {
		t.Errorf("GetTenant(a) after disable (-want +got):\n%s", diff)
	}
	checkTenants("after disabling a", op, wantA, c)

	// Disabling a disabled tenant keeps the first DisabledAt, whether the new time is later or earlier.
	for _, at := range []time.Time{d1.Add(time.Hour), d1.Add(-time.Hour)} {
		got, err := s.SetTenantDisabled(ctx, a.ID, ptr(at))
		wantErr(t, "SetTenantDisabled(a, again)", err, nil)
		if diff := cmp.Diff(wantA, got); diff != "" {
			t.Errorf("SetTenantDisabled(a, %v) on a disabled tenant (-want +got):\n%s", at, diff)
		}
	}
	checkTenants("after disabling a again", op, wantA, c)

	// Retention changes keep the tenant disabled.
	keep := store.RetentionSpec{KeepAllSeconds: 60}
	got, err = s.UpdateTenantRetention(ctx, a.ID, keep)
	wantErr(t, "UpdateTenantRetention(disabled a)", err, nil)
	wantA.Retention = keep
	if diff := cmp.Diff(wantA, got); diff != "" {
		t.Errorf("UpdateTenantRetention of a disabled tenant (-want +got):\n%s", diff)
	}

	// nil enables the tenant again, and enabling an enabled tenant is fine.
	wantA.DisabledAt = nil
	for i := range 2 {
		got, err = s.SetTenantDisabled(ctx, a.ID, nil)
		wantErr(t, "SetTenantDisabled(a, nil)", err, nil)
		if diff := cmp.Diff(wantA, got); diff != "" {
			t.Errorf("SetTenantDisabled(a, nil) #%d returned (-want +got):\n%s", i, diff)
		}
	}
	checkTenants("after enabling a", op, wantA, c)

	// Disabled again, the tenant takes the new time.
	d2 := d1.Add(24 * time.Hour)
	got, err = s.SetTenantDisabled(ctx, a.ID, ptr(d2))
	wantErr(t, "SetTenantDisabled(a, d2)", err, nil)
	wantA.DisabledAt = ptr(store.NormalizeTime(d2))
	if diff := cmp.Diff(wantA, got); diff != "" {
		t.Errorf("SetTenantDisabled(a, d2) after re-enabling (-want +got):\n%s", diff)
	}

	// A tenant created disabled is enabled like any other.
	wantC := c
	wantC.DisabledAt = nil
	got, err = s.SetTenantDisabled(ctx, c.ID, nil)
	wantErr(t, "SetTenantDisabled(c, nil)", err, nil)
	if diff := cmp.Diff(wantC, got); diff != "" {
		t.Errorf("SetTenantDisabled(c, nil) (-want +got):\n%s", diff)
	}

	// Unknown tenants.
	for _, id := range []string{"tn_missing", ""} {
		_, err = s.SetTenantDisabled(ctx, id, ptr(d1))
		wantErr(t, "SetTenantDisabled(unknown "+id+", d1)", err, errdefs.ErrNotFound)
		_, err = s.SetTenantDisabled(ctx, id, nil)
		wantErr(t, "SetTenantDisabled(unknown "+id+", nil)", err, errdefs.ErrNotFound)
	}

	// The operator tenant cannot be disabled; enabling it changes nothing.
	_, err = s.SetTenantDisabled(ctx, op.ID, ptr(d1))
	wantErr(t, "SetTenantDisabled(operator, d1)", err, errdefs.ErrFailedPrecondition)
	got, err = s.SetTenantDisabled(ctx, op.ID, nil)
	wantErr(t, "SetTenantDisabled(operator, nil)", err, nil)
	if diff := cmp.Diff(op, got); diff != "" {
		t.Errorf("SetTenantDisabled(operator, nil) (-want +got):\n%s", diff)
	}
	checkTenants("at the end", op, wantA, wantC)
}

func testAccessTokens(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	sbA := mustSandbox(t, s, store.Sandbox{TenantID: a.ID})
	sbA2 := mustSandbox(t, s, store.Sandbox{TenantID: a.ID})
	seA := mustSession(t, s, store.Session{TenantID: a.ID})
	sbB := mustSandbox(t, s, store.Sandbox{TenantID: b.ID})
	seB := mustSession(t, s, store.Session{TenantID: b.ID})

	// A sandbox token, with times to normalize.
	created := time.Date(2021, 3, 4, 8, 36, 7, 999999999, elsewhere) // base + 999.999999ms
	in := store.AccessToken{
		TenantID:  a.ID,
		Name:      "agent",
		SandboxID: sbA.ID,
		Scopes:    []store.TokenScope{store.TokenExec, store.TokenFiles},
		Prefix:    "at_abcd",
		Hash:      []byte{'t', 0, 1, 0xff},
		CreatedBy: "key_1",
		CreatedAt: created,
		ExpiresAt: created.Add(time.Hour),
	}
	t1, err := s.CreateAccessToken(ctx, in, store.TokenLimits{})
	wantErr(t, "CreateAccessToken(t1)", err, nil)
	if !strings.HasPrefix(t1.ID, "tok_") {
		t.Errorf("assigned token ID = %q; want prefix tok_", t1.ID)
	}
	want := in
	want.ID = t1.ID
	want.Hash = []byte{'t', 0, 1, 0xff}
	want.Scopes = []store.TokenScope{store.TokenExec, store.TokenFiles}
	want.CreatedAt, want.ExpiresAt = store.NormalizeTime(created), store.NormalizeTime(created.Add(time.Hour))
	if diff := cmp.Diff(want, t1, cmpOpts...); diff != "" {
		t.Errorf("CreateAccessToken returned (-want +got):\n%s", diff)
	}
	checkTokenUTC(t, t1)
	// The returned token must not share the caller's slices.
	in.Hash[0], in.Scopes[0] = 'X', store.TokenPorts
	if diff := cmp.Diff(want, t1, cmpOpts...); diff != "" {
		t.Errorf("CreateAccessToken returned a token aliasing the caller's hash or scopes (-want +got):\n%s", diff)
	}
	got, err := s.GetAccessTokenByHash(ctx, want.Hash)
	wantErr(t, "GetAccessTokenByHash(t1)", err, nil)
	if diff := cmp.Diff(t1, got, cmpOpts...); diff != "" {
		t.Errorf("GetAccessTokenByHash(t1) (-want +got):\n%s", diff)
	}
	checkTokenUTC(t, got)
	_, err = s.GetAccessTokenByHash(ctx, []byte("unknown"))
	wantErr(t, "GetAccessTokenByHash(unknown)", err, errdefs.ErrNotFound)
	if _, err := s.GetAccessTokenByHash(ctx, nil); err == nil {
		t.Errorf("GetAccessTokenByHash(empty hash) succeeded; want an error")
	}

	// A session token, with its ID given; every scope.
	seTok, err := s.CreateAccessToken(ctx, store.AccessToken{ID: "tok_2", TenantID: a.ID, SessionID: seA.ID,
		Scopes: []store.TokenScope{store.TokenExec, store.TokenFiles, store.TokenPorts},
		Prefix: "at_efgh", Hash: []byte("hash-2"), CreatedBy: "key_1",
		CreatedAt: base.Add(time.Second), ExpiresAt: base.Add(2 * time.Hour)}, store.TokenLimits{})
	wantErr(t, "CreateAccessToken(session)", err, nil)
	wantSe := store.AccessToken{ID: "tok_2", TenantID: a.ID, SessionID: seA.ID,
		Scopes: []store.TokenScope{store.TokenExec, store.TokenFiles, store.TokenPorts},
		Prefix: "at_efgh", Hash: []byte("hash-2"), CreatedBy: "key_1",
		CreatedAt: base.Add(time.Second), ExpiresAt: base.Add(2 * time.Hour)}
	if diff := cmp.Diff(wantSe, seTok, cmpOpts...); diff != "" {
		t.Errorf("CreateAccessToken(session) returned (-want +got):\n%s", diff)
	}
	got, err = s.GetAccessTokenByHash(ctx, []byte("hash-2"))
	wantErr(t, "GetAccessTokenByHash(session)", err, nil)
	if diff := cmp.Diff(seTok, got, cmpOpts...); diff != "" {
		t.Errorf("GetAccessTokenByHash(session) (-want +got):\n%s", diff)
	}

	// A zero CreatedAt is set to now.
	before := store.NormalizeTime(time.Now())
	tokB, err := s.CreateAccessToken(ctx, store.AccessToken{TenantID: b.ID, SessionID: seB.ID,
		Scopes: []store.TokenScope{store.TokenPorts}, Hash: []byte("hash-b"), ExpiresAt: time.Now().Add(time.Hour)}, store.TokenLimits{})
	wantErr(t, "CreateAccessToken(b)", err, nil)
	if tokB.CreatedAt.Before(before) || tokB.CreatedAt.After(time.Now()) || tokB.CreatedAt.Location() != time.UTC {
		t.Errorf("assigned CreatedAt = %v; want about now (after %v), in UTC", tokB.CreatedAt, before)
	}
	got, err = s.GetAccessTokenByHash(ctx, []byte("hash-b"))
	wantErr(t, "GetAccessTokenByHash(b)", err, nil)
	if diff := cmp.Diff(tokB, got, cmpOpts...); diff != "" {
		t.Errorf("GetAccessTokenByHash(b) (-want +got):\n%s", diff)
	}

	exec := []store.TokenScope{store.TokenExec}
	ok := store.AccessToken{TenantID: a.ID, SandboxID: sbA.ID, Scopes: exec, Hash: []byte("hash-bad"),
		CreatedAt: base, ExpiresAt: base.Add(time.Hour)}
	with := func(f func(tok *store.AccessToken)) store.AccessToken {
		tok := ok
		tok.Scopes = append([]store.TokenScope(nil), ok.Scopes...)
		f(&tok)
		return tok
	}
	bad := []struct {
		name string
		tok  store.AccessToken
		want error
	}{
		{"no tenant", with(func(tok *store.AccessToken) { tok.TenantID = "" }), errdefs.ErrInvalidArgument},
		{"no target", with(func(tok *store.AccessToken) { tok.SandboxID = "" }), errdefs.ErrInvalidArgument},
		{"both targets", with(func(tok *store.AccessToken) { tok.SessionID = seA.ID }), errdefs.ErrInvalidArgument},
		{"no scopes", with(func(tok *store.AccessToken) { tok.Scopes = nil }), errdefs.ErrInvalidArgument},
		{"empty scopes", with(func(tok *store.AccessToken) { tok.Scopes = []store.TokenScope{} }), errdefs.ErrInvalidArgument},
		{"unknown scope", with(func(tok *store.AccessToken) { tok.Scopes = []store.TokenScope{"admin"} }), errdefs.ErrInvalidArgument},
		{"empty scope", with(func(tok *store.AccessToken) { tok.Scopes = []store.TokenScope{""} }), errdefs.ErrInvalidArgument},
		{"unknown among known scopes", with(func(tok *store.AccessToken) {
			tok.Scopes = []store.TokenScope{store.TokenExec, store.TokenFiles, "shell"}
		}), errdefs.ErrInvalidArgument},
		{"unsorted scopes", with(func(tok *store.AccessToken) {
			tok.Scopes = []store.TokenScope{store.TokenFiles, store.TokenExec}
		}), errdefs.ErrInvalidArgument},
		{"repeated scope", with(func(tok *store.AccessToken) {
			tok.Scopes = []store.TokenScope{store.TokenExec, store.TokenExec}
		}), errdefs.ErrInvalidArgument},
		{"expires when created", with(func(tok *store.AccessToken) { tok.ExpiresAt = tok.CreatedAt }), errdefs.ErrInvalidArgument},
		{"expires before created", with(func(tok *store.AccessToken) { tok.ExpiresAt = tok.CreatedAt.Add(-time.Second) }), errdefs.ErrInvalidArgument},
		{"no expiry", with(func(tok *store.AccessToken) { tok.ExpiresAt = time.Time{} }), errdefs.ErrInvalidArgument},
		{"no hash", with(func(tok *store.AccessToken) { tok.Hash = nil }), errdefs.ErrInvalidArgument},
		{"unknown tenant", with(func(tok *store.AccessToken) { tok.TenantID = "tn_missing" }), errdefs.ErrNotFound},
		{"missing sandbox", with(func(tok *store.AccessToken) { tok.SandboxID = "sb_missing" }), errdefs.ErrNotFound},
		{"other tenant's sandbox", with(func(tok *store.AccessToken) { tok.SandboxID = sbB.ID }), errdefs.ErrNotFound},
		{"session ID as sandbox ID", with(func(tok *store.AccessToken) { tok.SandboxID = seA.ID }), errdefs.ErrNotFound},
		{"missing session", with(func(tok *store.AccessToken) { tok.SandboxID, tok.SessionID = "", "se_missing" }), errdefs.ErrNotFound},
		{"other tenant's session", with(func(tok *store.AccessToken) { tok.SandboxID, tok.SessionID = "", seB.ID }), errdefs.ErrNotFound},
		{"sandbox ID as session ID", with(func(tok *store.AccessToken) { tok.SandboxID, tok.SessionID = "", sbA.ID }), errdefs.ErrNotFound},
		{"duplicate hash", with(func(tok *store.AccessToken) { tok.Hash = []byte("hash-2") }), errdefs.ErrAlreadyExists},
		{"duplicate hash, other tenant", with(func(tok *store.AccessToken) {
			tok.TenantID, tok.SandboxID, tok.Hash = b.ID, sbB.ID, []byte("hash-2")
		}), errdefs.ErrAlreadyExists},
		{"duplicate ID", with(func(tok *store.AccessToken) { tok.ID = "tok_2" }), errdefs.ErrAlreadyExists},
		{"duplicate ID, other tenant", with(func(tok *store.AccessToken) {
			tok.ID, tok.TenantID, tok.SandboxID = "tok_2", b.ID, sbB.ID
		}), errdefs.ErrAlreadyExists},
	}
	for _, tt := range bad {
		_, err := s.CreateAccessToken(ctx, tt.tok, store.TokenLimits{})
		wantErr(t, "CreateAccessToken("+tt.name+")", err, tt.want)
	}
	_, err = s.GetAccessTokenByHash(ctx, []byte("hash-bad"))
	wantErr(t, "GetAccessTokenByHash(refused token)", err, errdefs.ErrNotFound)

	mustToken := func(tok store.AccessToken) store.AccessToken {
		t.Helper()
		got, err := s.CreateAccessToken(ctx, tok, store.TokenLimits{})
		if err != nil {
			t.Fatalf("CreateAccessToken(%s): %v", tok.ID, err)
		}
		return got
	}
	// Created at the same time as seTok, ordered before it by ID.
	other := mustToken(store.AccessToken{ID: "tok_1a", TenantID: a.ID, SandboxID: sbA2.ID, Scopes: exec,
		Hash: []byte("hash-other"), CreatedAt: base.Add(time.Second), ExpiresAt: base.Add(time.Hour)})
	short := mustToken(store.AccessToken{ID: "tok_short", TenantID: a.ID, SandboxID: sbA.ID, Scopes: exec,
		Hash: []byte("hash-short"), CreatedAt: base.Add(2 * time.Second), ExpiresAt: base.Add(10 * time.Minute)})
	expired := mustToken(store.AccessToken{ID: "tok_expired", TenantID: a.ID, SandboxID: sbA.ID, Scopes: exec,
		Hash: []byte("hash-expired"), CreatedAt: base.Add(-2 * time.Hour), ExpiresAt: base})
	shortB := mustToken(store.AccessToken{ID: "tok_short_b", TenantID: b.ID, SandboxID: sbB.ID, Scopes: exec,
		Hash: []byte("hash-short-b"), CreatedAt: base, ExpiresAt: base.Add(10 * time.Minute)})

	list := func(tenantID string, now time.Time, f store.AccessTokenFilter, want ...store.AccessToken) {
		t.Helper()
		got, err := s.ListAccessTokens(ctx, tenantID, now, f)
		wantErr(t, "ListAccessTokens", err, nil)
		if diff := cmp.Diff(want, got, cmpOpts...); diff != "" {
			t.Errorf("ListAccessTokens(%s, %v, %+v) (-want +got):\n%s", tenantID, now, f, diff)
		}
	}
	now := base.Add(5 * time.Minute)
	all := store.AccessTokenFilter{}
	list(a.ID, now, all, t1, other, seTok, short)
	list(a.ID, base, all, t1, other, seTok, short)                                 // expires at now: expired
	list(a.ID, base.Add(-time.Microsecond), all, expired, t1, other, seTok, short) // not yet
	list(a.ID, base.Add(10*time.Minute), all, t1, other, seTok)
	list(a.ID, base.Add(3*time.Hour), all)
	list(a.ID, now, store.AccessTokenFilter{SandboxID: sbA.ID}, t1, short)
	list(a.ID, now, store.AccessTokenFilter{SandboxID: sbA2.ID}, other)
	list(a.ID, now, store.AccessTokenFilter{SessionID: seA.ID}, seTok)
	list(a.ID, now, store.AccessTokenFilter{SandboxID: sbB.ID}) // b's sandbox
	list(a.ID, now, store.AccessTokenFilter{SessionID: sbA.ID}) // a sandbox ID is no session ID
	list(a.ID, now, store.AccessTokenFilter{SandboxID: seA.ID}) // nor the other way round
	list(a.ID, now, store.AccessTokenFilter{SessionID: "se_missing"})
	list(b.ID, now, all, shortB, tokB)
	list(b.ID, now, store.AccessTokenFilter{SessionID: seB.ID}, tokB)
	list("tn_missing", now, all)

	// Revoking: only the tenant's own tokens; the first RevokedAt stays.
	getTok := func(hash string) store.AccessToken {
		t.Helper()
		got, err := s.GetAccessTokenByHash(ctx, []byte(hash))
		wantErr(t, "GetAccessTokenByHash("+hash+")", err, nil)
		return got
	}
	r1 := time.Date(2021, 3, 4, 9, 0, 0, 123456789, elsewhere)
	wantErr(t, "RevokeAccessToken(other tenant)", s.RevokeAccessToken(ctx, b.ID, short.ID, r1), errdefs.ErrNotFound)
	wantErr(t, "RevokeAccessToken(missing)", s.RevokeAccessToken(ctx, a.ID, "tok_missing", r1), errdefs.ErrNotFound)
	wantErr(t, "RevokeAccessToken(unknown tenant)", s.RevokeAccessToken(ctx, "tn_missing", short.ID, r1), errdefs.ErrNotFound)
	if got := getTok("hash-short").RevokedAt; got != nil {
		t.Fatalf("RevokedAt after failed revokes = %v; want nil", got)
	}
	wantErr(t, "RevokeAccessToken", s.RevokeAccessToken(ctx, a.ID, short.ID, r1), nil)
	wantErr(t, "RevokeAccessToken(again, later)", s.RevokeAccessToken(ctx, a.ID, short.ID, r1.Add(time.Hour)), nil)
	wantErr(t, "RevokeAccessToken(again, earlier)", s.RevokeAccessToken(ctx, a.ID, short.ID, r1.Add(-time.Hour)), nil)
	short.RevokedAt = ptr(store.NormalizeTime(r1))
	got = getTok("hash-short") // a revoked token is still found
	if diff := cmp.Diff(short, got, cmpOpts...); diff != "" {
		t.Errorf("GetAccessTokenByHash(revoked) (-want +got):\n%s", diff)
	}
	checkTokenUTC(t, got)
	// An expired token can be revoked too.
	wantErr(t, "RevokeAccessToken(expired)", s.RevokeAccessToken(ctx, a.ID, expired.ID, r1), nil)
	expired.RevokedAt = ptr(store.NormalizeTime(r1))
	if diff := cmp.Diff(expired, getTok("hash-expired"), cmpOpts...); diff != "" {
		t.Errorf("GetAccessTokenByHash(revoked expired) (-want +got):\n%s", diff)
	}
	// Revoked tokens are listed.
	list(a.ID, now, all, t1, other, seTok, short)
	list(a.ID, now, store.AccessTokenFilter{SandboxID: sbA.ID}, t1, short)
	list(b.ID, now, all, shortB, tokB) // untouched

	// Expiry removes the tokens, of every tenant, that expired before the cut-off.
	del := func(before time.Time, want int64) {
		t.Helper()
		n, err := s.DeleteAccessTokensExpiredBefore(ctx, before)
		wantErr(t, "DeleteAccessTokensExpiredBefore", err, nil)
		if n != want {
			t.Errorf("DeleteAccessTokensExpiredBefore(%v) removed %d tokens; want %d", before, n, want)
		}
	}
	del(base.Add(-time.Hour), 0)
	del(base, 0)                  // expired expires at base: not before it
	del(base.Add(time.Minute), 1) // expired
	_, err = s.GetAccessTokenByHash(ctx, []byte("hash-expired"))
	wantErr(t, "GetAccessTokenByHash(deleted)", err, errdefs.ErrNotFound)
	list(a.ID, base.Add(-time.Hour), all, t1, other, seTok, short)
	del(base.Add(time.Minute), 0)
	del(base.Add(30*time.Minute), 2) // short (revoked) and shortB
	for _, h := range []string{"hash-short", "hash-short-b"} {
		_, err = s.GetAccessTokenByHash(ctx, []byte(h))
		wantErr(t, "GetAccessTokenByHash(deleted "+h+")", err, errdefs.ErrNotFound)
	}
	for _, tok := range []store.AccessToken{t1, seTok, other, tokB} {
		if diff := cmp.Diff(tok, getTok(string(tok.Hash)), cmpOpts...); diff != "" {
			t.Errorf("GetAccessTokenByHash(kept %s) (-want +got):\n%s", tok.ID, diff)
		}
	}
	list(a.ID, base.Add(-time.Hour), all, t1, other, seTok)
	list(b.ID, base.Add(-time.Hour), all, tokB)

	// A deleted token's hash and ID are free again.
	mustToken(store.AccessToken{ID: "tok_short", TenantID: b.ID, SandboxID: sbB.ID, Scopes: exec,
		Hash: []byte("hash-short"), CreatedAt: base, ExpiresAt: base.Add(time.Hour)})
}

// checkTokenUTC fails t if any time of tok is not in UTC.
func checkTokenUTC(t *testing.T, tok store.AccessToken) {
	t.Helper()
	times := map[string]*time.Time{"CreatedAt": &tok.CreatedAt, "ExpiresAt": &tok.ExpiresAt, "RevokedAt": tok.RevokedAt}
	for name, tm := range times {
		if tm != nil && tm.Location() != time.UTC {
			t.Errorf("access token %s: %s location = %v; want UTC", tok.ID, name, tm.Location())
		}
	}
}

func testTenantKeyProvider(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, err := s.CreateTenant(ctx, store.Tenant{Name: "hsm", KeyProvider: "pkcs11"})
	wantErr(t, "CreateTenant(pkcs11)", err, nil)
	b := mustTenant(t, s, "plain")
	if a.KeyProvider != "pkcs11" || b.KeyProvider != "" {
		t.Fatalf("key providers = %q, %q; want pkcs11 and empty", a.KeyProvider, b.KeyProvider)
	}
	got, err := s.GetTenant(ctx, a.ID)
	wantErr(t, "GetTenant", err, nil)
	if got.KeyProvider != "pkcs11" {
		t.Errorf("stored key provider = %q; want pkcs11", got.KeyProvider)
	}
	moved, err := s.SetTenantKeyProvider(ctx, b.ID, "pkcs11")
	wantErr(t, "SetTenantKeyProvider", err, nil)
	want := b
	want.KeyProvider = "pkcs11"
	if diff := cmp.Diff(want, moved, cmpOpts...); diff != "" {
		t.Errorf("SetTenantKeyProvider (-want +got):\n%s", diff)
	}
	back, err := s.SetTenantKeyProvider(ctx, b.ID, "")
	wantErr(t, "SetTenantKeyProvider(default)", err, nil)
	if back.KeyProvider != "" {
		t.Errorf("key provider back to default = %q", back.KeyProvider)
	}
	_, err = s.SetTenantKeyProvider(ctx, "tn_missing", "pkcs11")
	wantErr(t, "SetTenantKeyProvider(unknown tenant)", err, errdefs.ErrNotFound)
	_, err = s.SetTenantKeyProvider(ctx, a.ID, strings.Repeat("x", 65))
	wantErr(t, "SetTenantKeyProvider(long name)", err, errdefs.ErrInvalidArgument)
	if got, _ := s.GetTenant(ctx, a.ID); got.KeyProvider != "pkcs11" {
		t.Errorf("a refused update changed the key provider to %q", got.KeyProvider)
	}
}

// testAccessTokensDieWithTheirKey: revoking an API key revokes the tokens it made (and no other key's),
// and a revoked key makes no more.
func testAccessTokensDieWithTheirKey(t *testing.T, s store.Store) {
	ctx := t.Context()
	a := mustTenant(t, s, "a")
	sb := mustSandbox(t, s, store.Sandbox{TenantID: a.ID})
	k1, err := s.CreateAPIKey(ctx, store.APIKey{TenantID: a.ID, Name: "one", Scope: store.ScopeWrite, Prefix: "ak_1", Hash: []byte("k1")})
	wantErr(t, "CreateAPIKey(one)", err, nil)
	k2, err := s.CreateAPIKey(ctx, store.APIKey{TenantID: a.ID, Name: "two", Scope: store.ScopeWrite, Prefix: "ak_2", Hash: []byte("k2")})
	wantErr(t, "CreateAPIKey(two)", err, nil)
	base := store.NormalizeTime(time.Now())
	tok := func(by, hash string) store.AccessToken {
		t.Helper()
		got, err := s.CreateAccessToken(ctx, store.AccessToken{TenantID: a.ID, SandboxID: sb.ID, Scopes: []store.TokenScope{store.TokenExec},
			Hash: []byte(hash), CreatedBy: by, CreatedAt: base, ExpiresAt: base.Add(time.Hour)}, store.TokenLimits{})
		if err != nil {
			t.Fatalf("CreateAccessToken(by %s): %v", by, err)
		}
		return got
	}
	tok(k1.ID, "t1")
	of1b := tok(k1.ID, "t1b")
	tok(k2.ID, "t2")
	wantErr(t, "RevokeAccessToken(t1b)", s.RevokeAccessToken(ctx, a.ID, of1b.ID, base.Add(time.Second)), nil)
	revokedAt := base.Add(time.Minute)
	wantErr(t, "RevokeAPIKey(one)", s.RevokeAPIKey(ctx, a.ID, k1.ID, revokedAt), nil)
	for _, tt := range []struct {
		hash string
		want *time.Time
	}{{"t1", &revokedAt}, {"t1b", ptr(base.Add(time.Second))}, {"t2", nil}} {
		got, err := s.GetAccessTokenByHash(ctx, []byte(tt.hash))
		wantErr(t, "GetAccessTokenByHash("+tt.hash+")", err, nil)
		if !cmp.Equal(got.RevokedAt, tt.want) {
			t.Errorf("token %s after its key's revoke: RevokedAt = %v; want %v", tt.hash, got.RevokedAt, tt.want)
		}
	}
	_, err = s.CreateAccessToken(ctx, store.AccessToken{TenantID: a.ID, SandboxID: sb.ID, Scopes: []store.TokenScope{store.TokenExec},
		Hash: []byte("t3"), CreatedBy: k1.ID, CreatedAt: base, ExpiresAt: base.Add(time.Hour)}, store.TokenLimits{})
	wantErr(t, "CreateAccessToken(by a revoked key)", err, errdefs.ErrPermissionDenied)
	// Positive control: the other key still makes tokens.
	tok(k2.ID, "t4")
}

// testAccessTokenLimits: CreateAccessToken refuses a token past the live tokens' bounds; revoked and
// expired tokens do not count.
func testAccessTokenLimits(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	sb1 := mustSandbox(t, s, store.Sandbox{TenantID: a.ID})
	se := mustSession(t, s, store.Session{TenantID: a.ID})
	sbB := mustSandbox(t, s, store.Sandbox{TenantID: b.ID})
	base := store.NormalizeTime(time.Now())
	n := 0
	create := func(tenant, sandbox, session string, lim store.TokenLimits, at time.Time, ttl time.Duration) (store.AccessToken, error) {
		n++
		return s.CreateAccessToken(ctx, store.AccessToken{TenantID: tenant, SandboxID: sandbox, SessionID: session,
			Scopes: []store.TokenScope{store.TokenExec}, Hash: fmt.Appendf(nil, "lim-%d", n), CreatedAt: at, ExpiresAt: at.Add(ttl)}, lim)
	}
	lim := store.TokenLimits{PerObject: 2, PerTenant: 3}
	for i := range 2 {
		if _, err := create(a.ID, sb1.ID, "", lim, base, time.Hour); err != nil {
			t.Fatalf("token %d of the sandbox: %v", i, err)
		}
	}
	_, err := create(a.ID, sb1.ID, "", lim, base, time.Hour)
	wantErr(t, "CreateAccessToken(third of one sandbox)", err, errdefs.ErrResourceExhausted)
	// Another object of the tenant has room, up to the tenant's bound.
	third, err := create(a.ID, "", se.ID, lim, base, time.Hour)
	wantErr(t, "CreateAccessToken(the session's first)", err, nil)
	_, err = create(a.ID, "", se.ID, lim, base, time.Hour)
	wantErr(t, "CreateAccessToken(fourth of the tenant)", err, errdefs.ErrResourceExhausted)
	// Another tenant is not counted with this one.
	_, err = create(b.ID, sbB.ID, "", lim, base, time.Hour)
	wantErr(t, "CreateAccessToken(other tenant)", err, nil)
	// A revoked token leaves room.
	wantErr(t, "RevokeAccessToken", s.RevokeAccessToken(ctx, a.ID, third.ID, base), nil)
	_, err = create(a.ID, "", se.ID, lim, base, time.Hour)
	wantErr(t, "CreateAccessToken(after a revoke)", err, nil)
	// Expired tokens leave room: two hours later every token so far has expired.
	later := base.Add(2 * time.Hour)
	for i := range 2 {
		if _, err := create(a.ID, sb1.ID, "", lim, later, time.Hour); err != nil {
			t.Fatalf("token %d of the sandbox, later: %v", i, err)
		}
	}
	// Zero limits bound nothing.
	_, err = create(a.ID, sb1.ID, "", store.TokenLimits{}, later, time.Hour)
	wantErr(t, "CreateAccessToken(no limits)", err, nil)
}
