package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// migrations is the schema history: migrations[i] takes the schema from version i to version i+1.
// Append new scripts; never edit or reorder applied ones.
//
// Times are INTEGER microseconds since the Unix epoch (UTC). The SQL sticks to what PostgreSQL also
// accepts, apart from the types, so the postgres engine can mirror it.
var migrations = []string{
	// 1: tenants, API keys, sandboxes with their metadata, idempotency records.
	`
CREATE TABLE tenants (
	id         TEXT    PRIMARY KEY,
	name       TEXT    NOT NULL,
	created_at INTEGER NOT NULL
);

CREATE TABLE api_keys (
	id           TEXT    PRIMARY KEY,
	tenant_id    TEXT    NOT NULL REFERENCES tenants (id),
	name         TEXT    NOT NULL,
	prefix       TEXT    NOT NULL,
	hash         BLOB    NOT NULL UNIQUE,
	created_at   INTEGER NOT NULL,
	last_used_at INTEGER,
	revoked_at   INTEGER
);
CREATE INDEX api_keys_by_tenant ON api_keys (tenant_id, created_at, id);

CREATE TABLE sandboxes (
	id              TEXT    PRIMARY KEY,
	tenant_id       TEXT    NOT NULL REFERENCES tenants (id),
	node_id         TEXT    NOT NULL,
	template        TEXT    NOT NULL,
	state           TEXT    NOT NULL CHECK (state IN ('creating', 'running', 'stopping', 'stopped', 'failed')),
	reason          TEXT    NOT NULL,
	cpu_millicores  INTEGER NOT NULL CHECK (cpu_millicores >= 0),
	memory_mb       INTEGER NOT NULL CHECK (memory_mb >= 0),
	disk_mb         INTEGER NOT NULL CHECK (disk_mb >= 0),
	timeout_seconds INTEGER NOT NULL CHECK (timeout_seconds >= 0),
	metadata        TEXT    NOT NULL, -- JSON object; sandbox_metadata holds the same pairs for filtering
	created_at      INTEGER NOT NULL,
	updated_at      INTEGER NOT NULL,
	started_at      INTEGER,
	ends_at         INTEGER,
	stopped_at      INTEGER,
	version         INTEGER NOT NULL
);
CREATE INDEX sandboxes_by_tenant ON sandboxes (tenant_id, created_at, id);
CREATE INDEX sandboxes_by_state ON sandboxes (state, updated_at, id);
CREATE INDEX sandboxes_by_deadline ON sandboxes (ends_at) WHERE ends_at IS NOT NULL;

CREATE TABLE sandbox_metadata (
	sandbox_id TEXT NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
	key        TEXT NOT NULL,
	value      TEXT NOT NULL,
	PRIMARY KEY (sandbox_id, key)
);
CREATE INDEX sandbox_metadata_by_pair ON sandbox_metadata (key, value);

CREATE TABLE idempotency (
	tenant_id       TEXT    NOT NULL REFERENCES tenants (id),
	key             TEXT    NOT NULL,
	op              TEXT    NOT NULL,
	request_hash    BLOB    NOT NULL,
	response_status INTEGER NOT NULL,
	response_body   BLOB    NOT NULL,
	created_at      INTEGER NOT NULL,
	PRIMARY KEY (tenant_id, key)
);
CREATE INDEX idempotency_by_age ON idempotency (created_at);
`,
	// 2: each sandbox's network policy, as JSON the gateway reads ('' for none given: default deny).
	`ALTER TABLE sandboxes ADD COLUMN network_policy TEXT NOT NULL DEFAULT '';`,
	// 3: sessions with their metadata, and their snapshots. References to other sessions and snapshots
	// (sandbox, head, fork source, parent) are plain IDs: the objects they name may be collected first.
	`
CREATE TABLE sessions (
	id                      TEXT    PRIMARY KEY,
	tenant_id               TEXT    NOT NULL REFERENCES tenants (id),
	state                   TEXT    NOT NULL CHECK (state IN ('creating', 'running', 'pausing', 'paused', 'resuming', 'failed', 'deleting', 'deleted')),
	reason                  TEXT    NOT NULL,
	spec                    TEXT    NOT NULL, -- JSON object: template and resources
	network_policy          TEXT    NOT NULL, -- JSON the gateway reads; '' for none given (default deny)
	metadata                TEXT    NOT NULL, -- JSON object; session_metadata holds the same pairs for filtering
	idle_timeout_seconds    INTEGER NOT NULL CHECK (idle_timeout_seconds >= 0),
	auto_resume             INTEGER NOT NULL CHECK (auto_resume IN (0, 1)),
	sandbox_id              TEXT    NOT NULL,
	head_snapshot_id        TEXT    NOT NULL,
	parent_session_id       TEXT    NOT NULL,
	forked_from_snapshot_id TEXT    NOT NULL,
	created_at              INTEGER NOT NULL,
	updated_at              INTEGER NOT NULL,
	last_activity_at        INTEGER NOT NULL,
	paused_at               INTEGER,
	version                 INTEGER NOT NULL
);
CREATE INDEX sessions_by_tenant ON sessions (tenant_id, created_at, id);
CREATE INDEX sessions_by_state ON sessions (state, updated_at, id);
CREATE INDEX sessions_by_activity ON sessions (state, last_activity_at, id) WHERE idle_timeout_seconds > 0;
CREATE INDEX sessions_by_head ON sessions (head_snapshot_id);

CREATE TABLE session_metadata (
	session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	key        TEXT NOT NULL,
	value      TEXT NOT NULL,
	PRIMARY KEY (session_id, key)
);
CREATE INDEX session_metadata_by_pair ON session_metadata (key, value);

CREATE TABLE snapshots (
	id            TEXT    PRIMARY KEY,
	tenant_id     TEXT    NOT NULL REFERENCES tenants (id),
	session_id    TEXT    NOT NULL REFERENCES sessions (id),
	parent_id     TEXT    NOT NULL,
	name          TEXT    NOT NULL,
	trigger_kind  TEXT    NOT NULL CHECK (trigger_kind IN ('manual', 'pause', 'fork', 'rolling')),
	state         TEXT    NOT NULL CHECK (state IN ('writing', 'complete', 'failed')),
	reason        TEXT    NOT NULL,
	pinned        INTEGER NOT NULL CHECK (pinned IN (0, 1)),
	logical_bytes INTEGER NOT NULL CHECK (logical_bytes >= 0),
	stored_bytes  INTEGER NOT NULL CHECK (stored_bytes >= 0),
	meta          TEXT    NOT NULL, -- JSON object
	created_at    INTEGER NOT NULL,
	completed_at  INTEGER,
	version       INTEGER NOT NULL
);
CREATE INDEX snapshots_by_tenant ON snapshots (tenant_id, created_at, id);
CREATE INDEX snapshots_by_session ON snapshots (session_id, created_at, id);
CREATE INDEX snapshots_by_state ON snapshots (state, created_at, id);
CREATE UNIQUE INDEX snapshots_by_name ON snapshots (session_id, name) WHERE name <> '';
`,
	// 4: the snapshot state 'uploading'. SQLite cannot alter a CHECK constraint, so the table is rebuilt
	// the way https://www.sqlite.org/lang_altertable.html#otheralter prescribes: create the new table,
	// copy the rows, drop the old one, rename the new one, recreate the indexes. No table, view or
	// trigger refers to snapshots (sessions name snapshots by plain IDs; see 3), so foreign keys may stay
	// on (PRAGMA foreign_keys cannot change inside the migration's transaction anyway): dropping
	// snapshots breaks no reference, and the copy checks the rows' own references to tenants and
	// sessions again.
	`
CREATE TABLE snapshots_new (
	id            TEXT    PRIMARY KEY,
	tenant_id     TEXT    NOT NULL REFERENCES tenants (id),
	session_id    TEXT    NOT NULL REFERENCES sessions (id),
	parent_id     TEXT    NOT NULL,
	name          TEXT    NOT NULL,
	trigger_kind  TEXT    NOT NULL CHECK (trigger_kind IN ('manual', 'pause', 'fork', 'rolling')),
	state         TEXT    NOT NULL CHECK (state IN ('writing', 'uploading', 'complete', 'failed')),
	reason        TEXT    NOT NULL,
	pinned        INTEGER NOT NULL CHECK (pinned IN (0, 1)),
	logical_bytes INTEGER NOT NULL CHECK (logical_bytes >= 0),
	stored_bytes  INTEGER NOT NULL CHECK (stored_bytes >= 0),
	meta          TEXT    NOT NULL, -- JSON object
	created_at    INTEGER NOT NULL,
	completed_at  INTEGER,
	version       INTEGER NOT NULL
);
INSERT INTO snapshots_new (id, tenant_id, session_id, parent_id, name, trigger_kind, state, reason, pinned,
	logical_bytes, stored_bytes, meta, created_at, completed_at, version)
SELECT id, tenant_id, session_id, parent_id, name, trigger_kind, state, reason, pinned,
	logical_bytes, stored_bytes, meta, created_at, completed_at, version
FROM snapshots;
DROP TABLE snapshots;
ALTER TABLE snapshots_new RENAME TO snapshots;
CREATE INDEX snapshots_by_tenant ON snapshots (tenant_id, created_at, id);
CREATE INDEX snapshots_by_session ON snapshots (session_id, created_at, id);
CREATE INDEX snapshots_by_state ON snapshots (state, created_at, id);
CREATE UNIQUE INDEX snapshots_by_name ON snapshots (session_id, name) WHERE name <> '';
`,
	// 5: the time machine: each session's rolling-snapshot interval (0: none) and the retention of
	// snapshots by age, per session and per tenant (0: inherit). Rows already stored get zeros, which
	// change nothing: no rolling snapshots, the server's retention.
	`
ALTER TABLE sessions ADD COLUMN rolling_interval_seconds INTEGER NOT NULL DEFAULT 0 CHECK (rolling_interval_seconds >= 0);
ALTER TABLE sessions ADD COLUMN retention_keep_all_seconds INTEGER NOT NULL DEFAULT 0 CHECK (retention_keep_all_seconds >= 0);
ALTER TABLE sessions ADD COLUMN retention_keep_hourly_seconds INTEGER NOT NULL DEFAULT 0 CHECK (retention_keep_hourly_seconds >= 0);
ALTER TABLE sessions ADD COLUMN retention_keep_daily_seconds INTEGER NOT NULL DEFAULT 0 CHECK (retention_keep_daily_seconds >= 0);
ALTER TABLE tenants ADD COLUMN retention_keep_all_seconds INTEGER NOT NULL DEFAULT 0 CHECK (retention_keep_all_seconds >= 0);
ALTER TABLE tenants ADD COLUMN retention_keep_hourly_seconds INTEGER NOT NULL DEFAULT 0 CHECK (retention_keep_hourly_seconds >= 0);
ALTER TABLE tenants ADD COLUMN retention_keep_daily_seconds INTEGER NOT NULL DEFAULT 0 CHECK (retention_keep_daily_seconds >= 0);
`,
	// 6: tenancy: the operator tenant (the first one: it made every key so far), disabled tenants, the
	// scope of each API key (the keys made so far could do everything: admin), and access tokens for
	// one sandbox or session.
	`
ALTER TABLE tenants ADD COLUMN operator INTEGER NOT NULL DEFAULT 0 CHECK (operator IN (0, 1));
ALTER TABLE tenants ADD COLUMN disabled_at INTEGER;
UPDATE tenants SET operator = 1 WHERE id = (SELECT id FROM tenants ORDER BY created_at, id LIMIT 1);
ALTER TABLE api_keys ADD COLUMN scope TEXT NOT NULL DEFAULT 'admin' CHECK (scope IN ('admin', 'write', 'read'));

CREATE TABLE access_tokens (
	id         TEXT    PRIMARY KEY,
	tenant_id  TEXT    NOT NULL REFERENCES tenants (id),
	name       TEXT    NOT NULL,
	sandbox_id TEXT    NOT NULL,
	session_id TEXT    NOT NULL,
	scopes     TEXT    NOT NULL, -- comma-separated, sorted
	prefix     TEXT    NOT NULL,
	hash       BLOB    NOT NULL UNIQUE,
	created_by TEXT    NOT NULL,
	created_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL,
	revoked_at INTEGER
);
CREATE INDEX access_tokens_by_tenant ON access_tokens (tenant_id, created_at, id);
CREATE INDEX access_tokens_by_expiry ON access_tokens (expires_at);
`,
	// 7: quotas per tenant (0: unlimited).
	`
ALTER TABLE tenants ADD COLUMN quota_running_sandboxes INTEGER NOT NULL DEFAULT 0 CHECK (quota_running_sandboxes >= 0);
ALTER TABLE tenants ADD COLUMN quota_sessions INTEGER NOT NULL DEFAULT 0 CHECK (quota_sessions >= 0);
ALTER TABLE tenants ADD COLUMN quota_snapshot_bytes INTEGER NOT NULL DEFAULT 0 CHECK (quota_snapshot_bytes >= 0);
`,
	// 8: each tenant's key provider ('': the server's default, the local keyring).
	`ALTER TABLE tenants ADD COLUMN key_provider TEXT NOT NULL DEFAULT '';`,
	// 9: each tenant's audit log, a hash chain (see store.AuditHash).
	`
CREATE TABLE audit_log (
	tenant_id TEXT    NOT NULL REFERENCES tenants (id),
	seq       INTEGER NOT NULL CHECK (seq > 0),
	time      INTEGER NOT NULL,
	kind      TEXT    NOT NULL,
	actor     TEXT    NOT NULL,
	action    TEXT    NOT NULL,
	target    TEXT    NOT NULL,
	result    TEXT    NOT NULL,
	detail    TEXT    NOT NULL,
	prev      TEXT    NOT NULL,
	hash      TEXT    NOT NULL,
	PRIMARY KEY (tenant_id, seq)
);
`,
	// 10: access tokens that reach one port of their sandbox or session only (0: every port).
	`ALTER TABLE access_tokens ADD COLUMN port INTEGER NOT NULL DEFAULT 0 CHECK (port BETWEEN 0 AND 65535);`,
	// 11: leases with fencing tokens (see store.Lease).
	`
CREATE TABLE leases (
	resource    TEXT    PRIMARY KEY,
	holder      TEXT    NOT NULL,
	token       INTEGER NOT NULL CHECK (token > 0),
	acquired_at INTEGER NOT NULL,
	expires_at  INTEGER NOT NULL
);
`,
	// 12: at most one operator tenant, so that servers starting at once on one database cannot each make
	// one.
	`CREATE UNIQUE INDEX tenants_one_operator ON tenants (operator) WHERE operator = 1;`,
	// 13: documents, small versioned values the components keep so that every control-plane replica sees
	// the same (see store.Doc).
	`
CREATE TABLE docs (
	name       TEXT    PRIMARY KEY,
	value      BLOB    NOT NULL,
	version    INTEGER NOT NULL CHECK (version > 0),
	updated_at INTEGER NOT NULL
);
`,
	// 14: the sandboxes of one node, for placement, failover and reconcile at any number of sandboxes.
	`CREATE INDEX sandboxes_by_node ON sandboxes (node_id, id);`,
	// 15: a bound on each run of a session, and what its end does.
	`
ALTER TABLE sessions ADD COLUMN timeout_seconds INTEGER NOT NULL DEFAULT 0 CHECK (timeout_seconds >= 0);
ALTER TABLE sessions ADD COLUMN on_timeout TEXT NOT NULL DEFAULT 'delete' CHECK (on_timeout IN ('delete', 'pause'));
ALTER TABLE sessions ADD COLUMN ends_at INTEGER;
CREATE INDEX sessions_by_end ON sessions (ends_at, id) WHERE ends_at IS NOT NULL;
`,
	// 16: an access token dies with the API key that made it: the tokens of keys revoked before are
	// revoked now, and the tokens of one object, and of one key, are found by index (caps, cascades).
	`
UPDATE access_tokens SET revoked_at = (SELECT k.revoked_at FROM api_keys k WHERE k.id = access_tokens.created_by)
	WHERE revoked_at IS NULL AND created_by IN (SELECT id FROM api_keys WHERE revoked_at IS NOT NULL);
CREATE INDEX access_tokens_by_session ON access_tokens (tenant_id, session_id);
CREATE INDEX access_tokens_by_sandbox ON access_tokens (tenant_id, sandbox_id);
CREATE INDEX access_tokens_by_creator ON access_tokens (created_by);
`,
	// 17: a tenant's audit entries keep their payload sealed under the tenant's key (see
	// store.AuditEntry.Sealed).
	`ALTER TABLE audit_log ADD COLUMN sealed TEXT NOT NULL DEFAULT '';`,
	// 18: how long each tenant's logs are kept (0: the server's default).
	`ALTER TABLE tenants ADD COLUMN log_retention_seconds INTEGER NOT NULL DEFAULT 0 CHECK (log_retention_seconds >= 0);`,
}

// migrate brings the schema up to len(migrations) in one transaction and records each applied version in
// schema_migrations. It applies nothing to an up-to-date database, and refuses (ErrFailedPrecondition)
// one whose version is newer than this build knows.
func migrate(ctx context.Context, db *sql.DB) error {
	return migrateTo(ctx, db, len(migrations))
}

// migrateTo is migrate stopping at schema version target (at most len(migrations)); tests use it to build
// the databases older builds left behind. A database newer than target is ErrFailedPrecondition.
func migrateTo(ctx context.Context, db *sql.DB, target int) error {
	if target < 0 || target > len(migrations) {
		return fmt.Errorf("migrate: target schema version %d is not in 0..%d: %w", target, len(migrations), errdefs.ErrInvalidArgument)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate: begin: %w", mapErr(err))
	}
	defer func() { _ = tx.Rollback() }() // a no-op after Commit

	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    INTEGER PRIMARY KEY,
	applied_at INTEGER NOT NULL
)`); err != nil {
		return fmt.Errorf("migrate: create schema_migrations: %w", mapErr(err))
	}
	var current int
	if err := tx.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations").Scan(&current); err != nil {
		return fmt.Errorf("migrate: read schema version: %w", mapErr(err))
	}
	if current > target {
		return fmt.Errorf("migrate: database schema version %d is newer than this build's %d: %w",
			current, target, errdefs.ErrFailedPrecondition)
	}
	for v := current + 1; v <= target; v++ {
		if _, err := tx.ExecContext(ctx, migrations[v-1]); err != nil {
			return fmt.Errorf("migrate: apply version %d: %w", v, mapErr(err))
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)",
			v, time.Now().UTC().UnixMicro()); err != nil {
			return fmt.Errorf("migrate: record version %d: %w", v, mapErr(err))
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: commit: %w", mapErr(err))
	}
	return nil
}
