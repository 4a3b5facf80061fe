package sqlite_test

import (
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	_ "modernc.org/sqlite" // the driver, for reading the file behind the Store's back

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/sqlite"
	"github.com/airlockrun/airlock/internal/store/storetest"
)

func open(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatalf("Open(%q): %v", path, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t,
		func(t *testing.T) store.Store { return open(t, filepath.Join(t.TempDir(), "airlock.db")) },
		storetest.WithReopen(func(t *testing.T, s store.Store) store.Store {
			path := s.(*sqlite.Store).Path()
			if err := s.Close(); err != nil {
				t.Fatalf("Close before reopen: %v", err)
			}
			return open(t, path)
		}),
	)
}

// TestFile checks the file Open leaves behind: mode 0600 (and its WAL too), WAL journal mode, the
// schema recorded once however often the file is opened.
func TestFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data", "nested") // Open creates missing directories
	path := filepath.Join(dir, "airlock.db")
	s := open(t, path)
	if _, err := s.CreateTenant(t.Context(), store.Tenant{Name: "a"}); err != nil { // make the WAL exist
		t.Fatalf("CreateTenant: %v", err)
	}
	for _, p := range []string{path, path + "-wal"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatalf("stat: %v", err)
		}
		if got := fi.Mode().Perm(); got != 0o600 {
			t.Errorf("mode of %s = %v; want 0600", filepath.Base(p), got)
		}
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("data directory: %v, %v; want mode 0700", fi.Mode().Perm(), err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	open(t, path).Close() // reopening applies no migration twice

	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatalf("sql.Open: %v", err)
	}
	defer db.Close()
	var mode string
	if err := db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil {
		t.Fatalf("PRAGMA journal_mode: %v", err)
	}
	if mode != "wal" {
		t.Errorf("journal_mode = %q; want wal", mode)
	}
	var n, maxVersion int
	if err := db.QueryRow("SELECT COUNT(*), MAX(version) FROM schema_migrations").Scan(&n, &maxVersion); err != nil {
		t.Fatalf("read schema_migrations: %v", err)
	}
	if n != maxVersion || n < 1 {
		t.Errorf("schema_migrations has %d rows up to version %d; want one row per version", n, maxVersion)
	}
}

// TestTightensLooseFile checks that an existing world-readable file is made 0600.
func TestTightensLooseFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "airlock.db")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil { // whatever the umask did
		t.Fatal(err)
	}
	open(t, path)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o600 {
		t.Errorf("mode = %v; want 0600", got)
	}
}

// TestNewerSchema checks that a file migrated by a newer build is refused, not modified.
func TestNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "airlock.db")
	open(t, path).Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO schema_migrations (version, applied_at) VALUES (9999, 0)"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s, err := sqlite.Open(t.Context(), path)
	if err == nil {
		s.Close()
	}
	if !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Open(newer schema) = %v; want ErrFailedPrecondition", err)
	}
}

// TestMigrateSnapshotsUploading checks migration 4, which rebuilds the snapshots table to allow the state
// uploading: a file left at version 3 with snapshots in every state it knew keeps them all, unchanged,
// with their indexes, and takes uploading snapshots afterwards.
func TestMigrateSnapshotsUploading(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "airlock.db")
	if err := sqlite.MigrateTo(ctx, path, 3); err != nil {
		t.Fatalf("MigrateTo(3): %v", err)
	}

	// What a version-3 build stored, written behind the Store's back.
	db, err := sql.Open("sqlite", path+"?_pragma=foreign_keys(1)")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2024, 5, 6, 7, 8, 9, 123456000, time.UTC)
	stmts := []struct {
		query string
		args  []any
	}{
		{"INSERT INTO tenants (id, name, created_at) VALUES (?, ?, ?)", []any{"tn_a", "a", at.UnixMicro()}},
		{`INSERT INTO sessions (id, tenant_id, state, reason, spec, network_policy, metadata, idle_timeout_seconds,
	auto_resume, sandbox_id, head_snapshot_id, parent_session_id, forked_from_snapshot_id, created_at, updated_at,
	last_activity_at, paused_at, version)
VALUES ('se_a', 'tn_a', 'paused', '', '{}', '', '{}', 0, 0, '', 'sn_done', '', '', ?, ?, ?, NULL, 1)`,
			[]any{at.UnixMicro(), at.UnixMicro(), at.UnixMicro()}},
	}
	for _, sn := range []struct {
		id, parent, name, state, reason string
		pinned                          bool
		completed                       any
	}{
		{"sn_done", "", "first", "complete", "", true, at.Add(time.Minute).UnixMicro()},
		{"sn_writing", "sn_done", "", "writing", "", false, nil},
		{"sn_failed", "sn_done", "oops", "failed", "disk full", false, at.Add(2 * time.Minute).UnixMicro()},
	} {
		stmts = append(stmts, struct {
			query string
			args  []any
		}{`INSERT INTO snapshots (id, tenant_id, session_id, parent_id, name, trigger_kind, state, reason, pinned,
	logical_bytes, stored_bytes, meta, created_at, completed_at, version)
VALUES (?, 'tn_a', 'se_a', ?, ?, 'pause', ?, ?, ?, 1000, 400, '{"manifest":"m"}', ?, ?, 2)`,
			[]any{sn.id, sn.parent, sn.name, sn.state, sn.reason, sn.pinned, at.UnixMicro(), sn.completed}})
	}
	for _, st := range stmts {
		if _, err := db.ExecContext(ctx, st.query, st.args...); err != nil {
			t.Fatalf("%s: %v", st.query, err)
		}
	}
	// The old schema refuses the new state: the file really is at version 3.
	if _, err := db.ExecContext(ctx, "UPDATE snapshots SET state = 'uploading' WHERE id = 'sn_writing'"); err == nil {
		t.Fatalf("version 3 schema took state uploading; want a CHECK failure")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s := open(t, path) // migrates to the current version
	completed := func(d time.Duration) *time.Time { c := at.Add(d); return &c }
	want := []store.Snapshot{
		{ID: "sn_done", TenantID: "tn_a", SessionID: "se_a", Name: "first", Trigger: store.TriggerPause,
			State: store.SnapshotComplete, Pinned: true, LogicalBytes: 1000, StoredBytes: 400,
			Meta: map[string]string{"manifest": "m"}, CreatedAt: at, CompletedAt: completed(time.Minute), Version: 2},
		{ID: "sn_failed", TenantID: "tn_a", SessionID: "se_a", ParentID: "sn_done", Name: "oops", Trigger: store.TriggerPause,
			State: store.SnapshotFailed, Reason: "disk full", LogicalBytes: 1000, StoredBytes: 400,
			Meta: map[string]string{"manifest": "m"}, CreatedAt: at, CompletedAt: completed(2 * time.Minute), Version: 2},
		{ID: "sn_writing", TenantID: "tn_a", SessionID: "se_a", ParentID: "sn_done", Trigger: store.TriggerPause,
			State: store.SnapshotWriting, LogicalBytes: 1000, StoredBytes: 400,
			Meta: map[string]string{"manifest": "m"}, CreatedAt: at, Version: 2},
	}
	got, next, err := s.ListSnapshots(ctx, "tn_a", store.SnapshotFilter{})
	if err != nil || next != "" {
		t.Fatalf("ListSnapshots after migration = %v, cursor %q; want no error, one page", err, next)
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("snapshots after migration (-want +got):\n%s", diff)
	}
	if se, err := s.GetSession(ctx, "tn_a", "se_a"); err != nil || se.HeadSnapshotID != "sn_done" {
		t.Errorf("GetSession after migration = %+v, %v; want head sn_done", se, err)
	}

	// The new state is accepted, and an uploading snapshot can be a session's head.
	up := want[2]
	up.State = store.SnapshotUploading
	up, err = s.UpdateSnapshot(ctx, up)
	if err != nil {
		t.Fatalf("UpdateSnapshot(writing → uploading) after migration: %v", err)
	}
	se, err := s.GetSession(ctx, "tn_a", "se_a")
	if err != nil {
		t.Fatal(err)
	}
	se.HeadSnapshotID = up.ID
	if _, err := s.UpdateSession(ctx, se); err != nil {
		t.Errorf("UpdateSession(head uploading) after migration: %v", err)
	}
	if byState, err := s.ListSnapshotsByState(ctx, []store.SnapshotState{store.SnapshotUploading}, 0); err != nil ||
		len(byState) != 1 || byState[0].ID != up.ID {
		t.Errorf("ListSnapshotsByState(uploading) = %v, %v; want [%s]", byState, err, up.ID)
	}

	// The rebuilt table has its indexes back and nothing of the old one is left.
	db, err = sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SELECT type, name FROM sqlite_master WHERE tbl_name LIKE 'snapshots%' AND name NOT LIKE 'sqlite_%' ORDER BY name")
	if err != nil {
		t.Fatal(err)
	}
	var objects []string
	for rows.Next() {
		var typ, name string
		if err := rows.Scan(&typ, &name); err != nil {
			t.Fatal(err)
		}
		objects = append(objects, typ+" "+name)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	wantObjects := []string{"table snapshots", "index snapshots_by_name", "index snapshots_by_session",
		"index snapshots_by_state", "index snapshots_by_tenant"}
	slices.Sort(wantObjects)
	slices.Sort(objects)
	if diff := cmp.Diff(wantObjects, objects); diff != "" {
		t.Errorf("schema objects of snapshots after migration (-want +got):\n%s", diff)
	}
	// The unique index on names is in force.
	if _, err := db.ExecContext(ctx, `INSERT INTO snapshots (id, tenant_id, session_id, parent_id, name, trigger_kind,
	state, reason, pinned, logical_bytes, stored_bytes, meta, created_at, completed_at, version)
VALUES ('sn_dup', 'tn_a', 'se_a', '', 'first', 'manual', 'writing', '', 0, 0, 0, '{}', 0, NULL, 1)`); err == nil {
		t.Errorf("inserted a second snapshot named first; want the unique index to refuse it")
	}
	var check string
	if err := db.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&check); err != nil || check != "ok" {
		t.Errorf("integrity_check = %q, %v; want ok", check, err)
	}
	fk, err := db.QueryContext(ctx, "PRAGMA foreign_key_check")
	if err != nil {
		t.Fatal(err)
	}
	defer fk.Close()
	if fk.Next() {
		t.Errorf("foreign_key_check reports violations after migration")
	}
}

// TestMigrateTimeMachine checks migration 5, which adds each session's rolling interval and the
// retention of sessions and tenants: a file left at version 4 keeps its tenants, sessions and snapshots
// unchanged, reads them back with zeros (no rolling snapshots, inherited retention), and stores the new
// fields afterwards, refusing negative ones even behind the Store's back.
func TestMigrateTimeMachine(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "airlock.db")
	if err := sqlite.MigrateTo(ctx, path, 4); err != nil {
		t.Fatalf("MigrateTo(4): %v", err)
	}

	// What a version-4 build stored, written behind the Store's back.
	db, err := sql.Open("sqlite", path+"?_pragma=foreign_keys(1)")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2024, 5, 6, 7, 8, 9, 123456000, time.UTC)
	us := at.UnixMicro()
	for _, st := range []struct {
		query string
		args  []any
	}{
		{"INSERT INTO tenants (id, name, created_at) VALUES (?, ?, ?), (?, ?, ?)", []any{"tn_a", "a", us, "tn_b", "b", us + 1}},
		{`INSERT INTO sessions (id, tenant_id, state, reason, spec, network_policy, metadata, idle_timeout_seconds,
	auto_resume, sandbox_id, head_snapshot_id, parent_session_id, forked_from_snapshot_id, created_at, updated_at,
	last_activity_at, paused_at, version)
VALUES ('se_run', 'tn_a', 'running', 'booted', '{"template":"py","cpu_millicores":500,"memory_mb":256,"disk_mb":1024}',
	'{"default":"deny"}', '{"team":"ml"}', 300, 1, 'sb_1', 'sn_up', '', '', ?, ?, ?, NULL, 3),
	('se_paused', 'tn_b', 'paused', '', '{}', '', '{}', 0, 0, '', '', '', '', ?, ?, ?, ?, 1)`,
			[]any{us, us + 10, us + 20, us + 1, us + 1, us + 1, us + 2}},
		{`INSERT INTO snapshots (id, tenant_id, session_id, parent_id, name, trigger_kind, state, reason, pinned,
	logical_bytes, stored_bytes, meta, created_at, completed_at, version)
VALUES ('sn_up', 'tn_a', 'se_run', '', 'first', 'rolling', 'uploading', '', 0, 1000, 400, '{}', ?, NULL, 2)`, []any{us}},
	} {
		if _, err := db.ExecContext(ctx, st.query, st.args...); err != nil {
			t.Fatalf("%s: %v", st.query, err)
		}
	}
	// The file really is at version 4: the new columns are not there yet.
	if _, err := db.ExecContext(ctx, "SELECT rolling_interval_seconds FROM sessions"); err == nil {
		t.Fatalf("version 4 schema has sessions.rolling_interval_seconds; want no such column")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s := open(t, path) // migrates to the current version
	// Migration 6 makes the first tenant the operator.
	wantTenants := []store.Tenant{{ID: "tn_a", Name: "a", CreatedAt: at, Operator: true}, {ID: "tn_b", Name: "b", CreatedAt: at.Add(time.Microsecond)}}
	tenants, err := s.ListTenants(ctx)
	if err != nil {
		t.Fatalf("ListTenants after migration: %v", err)
	}
	if diff := cmp.Diff(wantTenants, tenants); diff != "" {
		t.Errorf("tenants after migration (-want +got):\n%s", diff)
	}
	paused := at.Add(2 * time.Microsecond)
	wantSessions := []store.Session{
		{ID: "se_run", TenantID: "tn_a", State: store.SessionRunning, Reason: "booted",
			Spec: store.SessionSpec{Template: "py", CPUMillicores: 500, MemoryMB: 256, DiskMB: 1024,
				NetworkPolicy: []byte(`{"default":"deny"}`)},
			Metadata: map[string]string{"team": "ml"}, IdleTimeoutSeconds: 300, AutoResume: true, SandboxID: "sb_1",
			HeadSnapshotID: "sn_up", CreatedAt: at, UpdatedAt: at.Add(10 * time.Microsecond),
			LastActivityAt: at.Add(20 * time.Microsecond), Version: 3, OnTimeout: store.SessionTimeoutDelete},
		{ID: "se_paused", TenantID: "tn_b", State: store.SessionPaused, Metadata: map[string]string{},
			CreatedAt: at.Add(time.Microsecond), UpdatedAt: at.Add(time.Microsecond), LastActivityAt: at.Add(time.Microsecond),
			PausedAt: &paused, Version: 1, OnTimeout: store.SessionTimeoutDelete}, // migration 15: no end
	}
	for _, want := range wantSessions {
		got, err := s.GetSession(ctx, want.TenantID, want.ID)
		if err != nil {
			t.Fatalf("GetSession(%s) after migration: %v", want.ID, err)
		}
		if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("session %s after migration (-want +got):\n%s", want.ID, diff)
		}
	}
	if sns, _, err := s.ListSnapshots(ctx, "tn_a", store.SnapshotFilter{SessionID: "se_run"}); err != nil ||
		len(sns) != 1 || sns[0].ID != "sn_up" || sns[0].State != store.SnapshotUploading {
		t.Errorf("ListSnapshots(se_run) after migration = %+v, %v; want [sn_up uploading]", sns, err)
	}

	// The new fields are stored from now on.
	keep := store.RetentionSpec{KeepAllSeconds: 3600, KeepHourlySeconds: 86400, KeepDailySeconds: 30 * 86400}
	tn, err := s.UpdateTenantRetention(ctx, "tn_a", keep)
	if err != nil || tn.Retention != keep {
		t.Errorf("UpdateTenantRetention after migration = %+v, %v; want retention %+v", tn, err, keep)
	}
	se := wantSessions[0]
	se.RollingIntervalSeconds, se.Retention = 600, store.RetentionSpec{KeepAllSeconds: 60}
	if _, err := s.UpdateSession(ctx, se); err != nil {
		t.Fatalf("UpdateSession after migration: %v", err)
	}
	if got, err := s.GetSession(ctx, "tn_a", "se_run"); err != nil || got.RollingIntervalSeconds != 600 || got.Retention != se.Retention {
		t.Errorf("GetSession after update = %+v, %v; want rolling 600, retention %+v", got, err, se.Retention)
	}

	// The schema itself refuses negative values, and the migration was recorded once.
	db, err = sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		"UPDATE sessions SET rolling_interval_seconds = -1",
		"UPDATE sessions SET retention_keep_all_seconds = -1",
		"UPDATE sessions SET retention_keep_hourly_seconds = -1",
		"UPDATE sessions SET retention_keep_daily_seconds = -1",
		"UPDATE tenants SET retention_keep_all_seconds = -1",
		"UPDATE tenants SET retention_keep_hourly_seconds = -1",
		"UPDATE tenants SET retention_keep_daily_seconds = -1",
	} {
		if _, err := db.ExecContext(ctx, q); err == nil {
			t.Errorf("%s: succeeded; want a CHECK failure", q)
		}
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM schema_migrations WHERE version = 5").Scan(&n); err != nil || n != 1 {
		t.Errorf("schema_migrations rows for version 5 = %d, %v; want 1", n, err)
	}
	var check string
	if err := db.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&check); err != nil || check != "ok" {
		t.Errorf("integrity_check = %q, %v; want ok", check, err)
	}
}

func TestOpenBadPath(t *testing.T) {
	for _, p := range []string{"", ":memory:", "file:x.db?mode=memory"} {
		if s, err := sqlite.Open(t.Context(), p); !errors.Is(err, errdefs.ErrInvalidArgument) {
			if s != nil {
				s.Close()
			}
			t.Errorf("Open(%q) = %v; want ErrInvalidArgument", p, err)
		}
	}
}

// TestOddPath checks that characters with a meaning in URIs are taken literally.
func TestOddPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "we?ird #dir%20", "a&b=c.db")
	s := open(t, path)
	if _, err := s.CreateTenant(t.Context(), store.Tenant{Name: "a"}); err != nil {
		t.Fatalf("CreateTenant: %v", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("database not at %q: %v", path, err)
	}
}
