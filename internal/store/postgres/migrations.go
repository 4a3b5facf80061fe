package postgres

// migrations is the schema history: migrations[i] takes the schema from version i to version i+1. Append
// new scripts; never edit or reorder applied ones. The migrate code records the versions in
// airlock_schema_migrations, which it creates itself.
//
// The first script is the SQLite engine's schema at its version 10 (internal/store/sqlite, migrations 1 to
// 10 applied in order) written for PostgreSQL, so PostgreSQL's version 1 is SQLite's version 10, and
// PostgreSQL's version n is SQLite's version n+9. Every later schema change is appended to both lists, as
// SQLite's version 10+k and PostgreSQL's 1+k, so that the two engines keep one schema.
//
// The translation keeps every table, column (in the order SQLite has them: columns SQLite added with ALTER
// TABLE come last, in migration order), constraint, default and index name, and changes the types only:
//   - SQLite's INTEGER is 64-bit, so every INTEGER column is BIGINT (times in microseconds since the Unix
//     epoch, sizes, versions, sequence numbers, quotas, and the seconds and resources the store takes as Go
//     ints), and no value the SQLite engine stores is out of range here. The one exception is port, which
//     its CHECK bounds to 0..65535: INTEGER.
//   - BLOB is BYTEA.
//   - TEXT is TEXT COLLATE "C": SQLite compares text byte by byte, and listings order and page by ID, so
//     the order must not depend on the database's locale.
//   - The 0/1 flags (auto_resume, pinned, operator) are BOOLEAN NOT NULL, without SQLite's IN (0, 1)
//     checks; operator defaults to FALSE as it defaults to 0 there.
//   - The data migration of SQLite's version 6 (the oldest tenant becomes the operator) has nothing to
//     migrate in a new database and is left out.
var migrations = []string{
	// 1 (SQLite's 10): tenants, API keys, sandboxes with their metadata, idempotency records, sessions with
	// their metadata, snapshots, access tokens, the audit log. References to other sessions and snapshots
	// (a session's sandbox, head, fork source and parent; a snapshot's parent; a token's sandbox or
	// session) are plain IDs: the objects they name may be collected first.
	`
CREATE TABLE tenants (
	id                            TEXT COLLATE "C"    PRIMARY KEY,
	name                          TEXT COLLATE "C"    NOT NULL,
	created_at                    BIGINT  NOT NULL,
	retention_keep_all_seconds    BIGINT  NOT NULL DEFAULT 0 CHECK (retention_keep_all_seconds >= 0),
	retention_keep_hourly_seconds BIGINT  NOT NULL DEFAULT 0 CHECK (retention_keep_hourly_seconds >= 0),
	retention_keep_daily_seconds  BIGINT  NOT NULL DEFAULT 0 CHECK (retention_keep_daily_seconds >= 0),
	operator                      BOOLEAN NOT NULL DEFAULT FALSE,
	disabled_at                   BIGINT,
	quota_running_sandboxes       BIGINT  NOT NULL DEFAULT 0 CHECK (quota_running_sandboxes >= 0),
	quota_sessions                BIGINT  NOT NULL DEFAULT 0 CHECK (quota_sessions >= 0),
	quota_snapshot_bytes          BIGINT  NOT NULL DEFAULT 0 CHECK (quota_snapshot_bytes >= 0),
	key_provider                  TEXT COLLATE "C"    NOT NULL DEFAULT '' -- '': the server's default, the local keyring
);

CREATE TABLE api_keys (
	id           TEXT COLLATE "C"   PRIMARY KEY,
	tenant_id    TEXT COLLATE "C"   NOT NULL REFERENCES tenants (id),
	name         TEXT COLLATE "C"   NOT NULL,
	prefix       TEXT COLLATE "C"   NOT NULL,
	hash         BYTEA  NOT NULL UNIQUE,
	created_at   BIGINT NOT NULL,
	last_used_at BIGINT,
	revoked_at   BIGINT,
	scope        TEXT COLLATE "C"   NOT NULL DEFAULT 'admin' CHECK (scope IN ('admin', 'write', 'read'))
);
CREATE INDEX api_keys_by_tenant ON api_keys (tenant_id, created_at, id);

CREATE TABLE sandboxes (
	id              TEXT COLLATE "C"   PRIMARY KEY,
	tenant_id       TEXT COLLATE "C"   NOT NULL REFERENCES tenants (id),
	node_id         TEXT COLLATE "C"   NOT NULL,
	template        TEXT COLLATE "C"   NOT NULL,
	state           TEXT COLLATE "C"   NOT NULL CHECK (state IN ('creating', 'running', 'stopping', 'stopped', 'failed')),
	reason          TEXT COLLATE "C"   NOT NULL,
	cpu_millicores  BIGINT NOT NULL CHECK (cpu_millicores >= 0),
	memory_mb       BIGINT NOT NULL CHECK (memory_mb >= 0),
	disk_mb         BIGINT NOT NULL CHECK (disk_mb >= 0),
	timeout_seconds BIGINT NOT NULL CHECK (timeout_seconds >= 0),
	metadata        TEXT COLLATE "C"   NOT NULL, -- JSON object; sandbox_metadata holds the same pairs for filtering
	created_at      BIGINT NOT NULL,
	updated_at      BIGINT NOT NULL,
	started_at      BIGINT,
	ends_at         BIGINT,
	stopped_at      BIGINT,
	version         BIGINT NOT NULL,
	network_policy  TEXT COLLATE "C"   NOT NULL DEFAULT '' -- JSON the gateway reads; '' for none given (default deny)
);
CREATE INDEX sandboxes_by_tenant ON sandboxes (tenant_id, created_at, id);
CREATE INDEX sandboxes_by_state ON sandboxes (state, updated_at, id);
CREATE INDEX sandboxes_by_deadline ON sandboxes (ends_at) WHERE ends_at IS NOT NULL;

CREATE TABLE sandbox_metadata (
	sandbox_id TEXT COLLATE "C" NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
	key        TEXT COLLATE "C" NOT NULL,
	value      TEXT COLLATE "C" NOT NULL,
	PRIMARY KEY (sandbox_id, key)
);
CREATE INDEX sandbox_metadata_by_pair ON sandbox_metadata (key, value);

CREATE TABLE idempotency (
	tenant_id       TEXT COLLATE "C"   NOT NULL REFERENCES tenants (id),
	key             TEXT COLLATE "C"   NOT NULL,
	op              TEXT COLLATE "C"   NOT NULL,
	request_hash    BYTEA  NOT NULL,
	response_status BIGINT NOT NULL,
	response_body   BYTEA  NOT NULL,
	created_at      BIGINT NOT NULL,
	PRIMARY KEY (tenant_id, key)
);
CREATE INDEX idempotency_by_age ON idempotency (created_at);

CREATE TABLE sessions (
	id                            TEXT COLLATE "C"    PRIMARY KEY,
	tenant_id                     TEXT COLLATE "C"    NOT NULL REFERENCES tenants (id),
	state                         TEXT COLLATE "C"    NOT NULL CHECK (state IN ('creating', 'running', 'pausing', 'paused', 'resuming', 'failed', 'deleting', 'deleted')),
	reason                        TEXT COLLATE "C"    NOT NULL,
	spec                          TEXT COLLATE "C"    NOT NULL, -- JSON object: template and resources
	network_policy                TEXT COLLATE "C"    NOT NULL, -- JSON the gateway reads; '' for none given (default deny)
	metadata                      TEXT COLLATE "C"    NOT NULL, -- JSON object; session_metadata holds the same pairs for filtering
	idle_timeout_seconds          BIGINT  NOT NULL CHECK (idle_timeout_seconds >= 0),
	auto_resume                   BOOLEAN NOT NULL,
	sandbox_id                    TEXT COLLATE "C"    NOT NULL,
	head_snapshot_id              TEXT COLLATE "C"    NOT NULL,
	parent_session_id             TEXT COLLATE "C"    NOT NULL,
	forked_from_snapshot_id       TEXT COLLATE "C"    NOT NULL,
	created_at                    BIGINT  NOT NULL,
	updated_at                    BIGINT  NOT NULL,
	last_activity_at              BIGINT  NOT NULL,
	paused_at                     BIGINT,
	version                       BIGINT  NOT NULL,
	rolling_interval_seconds      BIGINT  NOT NULL DEFAULT 0 CHECK (rolling_interval_seconds >= 0),
	retention_keep_all_seconds    BIGINT  NOT NULL DEFAULT 0 CHECK (retention_keep_all_seconds >= 0),
	retention_keep_hourly_seconds BIGINT  NOT NULL DEFAULT 0 CHECK (retention_keep_hourly_seconds >= 0),
	retention_keep_daily_seconds  BIGINT  NOT NULL DEFAULT 0 CHECK (retention_keep_daily_seconds >= 0)
);
CREATE INDEX sessions_by_tenant ON sessions (tenant_id, created_at, id);
CREATE INDEX sessions_by_state ON sessions (state, updated_at, id);
CREATE INDEX sessions_by_activity ON sessions (state, last_activity_at, id) WHERE idle_timeout_seconds > 0;
CREATE INDEX sessions_by_head ON sessions (head_snapshot_id);

CREATE TABLE session_metadata (
	session_id TEXT COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	key        TEXT COLLATE "C" NOT NULL,
	value      TEXT COLLATE "C" NOT NULL,
	PRIMARY KEY (session_id, key)
);
CREATE INDEX session_metadata_by_pair ON session_metadata (key, value);

CREATE TABLE snapshots (
	id            TEXT COLLATE "C"    PRIMARY KEY,
	tenant_id     TEXT COLLATE "C"    NOT NULL REFERENCES tenants (id),
	session_id    TEXT COLLATE "C"    NOT NULL REFERENCES sessions (id),
	parent_id     TEXT COLLATE "C"    NOT NULL,
	name          TEXT COLLATE "C"    NOT NULL,
	trigger_kind  TEXT COLLATE "C"    NOT NULL CHECK (trigger_kind IN ('manual', 'pause', 'fork', 'rolling')),
	state         TEXT COLLATE "C"    NOT NULL CHECK (state IN ('writing', 'uploading', 'complete', 'failed')),
	reason        TEXT COLLATE "C"    NOT NULL,
	pinned        BOOLEAN NOT NULL,
	logical_bytes BIGINT  NOT NULL CHECK (logical_bytes >= 0),
	stored_bytes  BIGINT  NOT NULL CHECK (stored_bytes >= 0),
	meta          TEXT COLLATE "C"    NOT NULL, -- JSON object
	created_at    BIGINT  NOT NULL,
	completed_at  BIGINT,
	version       BIGINT  NOT NULL
);
CREATE INDEX snapshots_by_tenant ON snapshots (tenant_id, created_at, id);
CREATE INDEX snapshots_by_session ON snapshots (session_id, created_at, id);
CREATE INDEX snapshots_by_state ON snapshots (state, created_at, id);
CREATE UNIQUE INDEX snapshots_by_name ON snapshots (session_id, name) WHERE name <> '';

CREATE TABLE access_tokens (
	id         TEXT COLLATE "C"    PRIMARY KEY,
	tenant_id  TEXT COLLATE "C"    NOT NULL REFERENCES tenants (id),
	name       TEXT COLLATE "C"    NOT NULL,
	sandbox_id TEXT COLLATE "C"    NOT NULL,
	session_id TEXT COLLATE "C"    NOT NULL,
	scopes     TEXT COLLATE "C"    NOT NULL, -- comma-separated, sorted
	prefix     TEXT COLLATE "C"    NOT NULL,
	hash       BYTEA   NOT NULL UNIQUE,
	created_by TEXT COLLATE "C"    NOT NULL,
	created_at BIGINT  NOT NULL,
	expires_at BIGINT  NOT NULL,
	revoked_at BIGINT,
	port       INTEGER NOT NULL DEFAULT 0 CHECK (port BETWEEN 0 AND 65535) -- 0: every port
);
CREATE INDEX access_tokens_by_tenant ON access_tokens (tenant_id, created_at, id);
CREATE INDEX access_tokens_by_expiry ON access_tokens (expires_at);

-- Each tenant's audit log, a hash chain (see store.AuditHash).
CREATE TABLE audit_log (
	tenant_id TEXT COLLATE "C"   NOT NULL REFERENCES tenants (id),
	seq       BIGINT NOT NULL CHECK (seq > 0),
	time      BIGINT NOT NULL,
	kind      TEXT COLLATE "C"   NOT NULL,
	actor     TEXT COLLATE "C"   NOT NULL,
	action    TEXT COLLATE "C"   NOT NULL,
	target    TEXT COLLATE "C"   NOT NULL,
	result    TEXT COLLATE "C"   NOT NULL,
	detail    TEXT COLLATE "C"   NOT NULL,
	prev      TEXT COLLATE "C"   NOT NULL,
	hash      TEXT COLLATE "C"   NOT NULL,
	PRIMARY KEY (tenant_id, seq)
);
`,
	// 2 (SQLite's 11): leases with fencing tokens (see store.Lease).
	`
CREATE TABLE leases (
	resource    TEXT COLLATE "C" PRIMARY KEY,
	holder      TEXT COLLATE "C" NOT NULL,
	token       BIGINT           NOT NULL CHECK (token > 0),
	acquired_at BIGINT           NOT NULL,
	expires_at  BIGINT           NOT NULL
);
`,
	// 3 (SQLite's 12): at most one operator tenant, so that servers starting at once on one database
	// cannot each make one.
	`CREATE UNIQUE INDEX tenants_one_operator ON tenants (operator) WHERE operator;`,
	// 4 (SQLite's 13): documents (see store.Doc).
	`
CREATE TABLE docs (
	name       TEXT COLLATE "C" PRIMARY KEY,
	value      BYTEA            NOT NULL,
	version    BIGINT           NOT NULL CHECK (version > 0),
	updated_at BIGINT           NOT NULL
);
`,
	// 5 (SQLite's 14): the sandboxes of one node.
	`CREATE INDEX sandboxes_by_node ON sandboxes (node_id, id);`,
	// 6 (SQLite's 15): a bound on each run of a session, and what its end does.
	`
ALTER TABLE sessions ADD COLUMN timeout_seconds BIGINT NOT NULL DEFAULT 0 CHECK (timeout_seconds >= 0);
ALTER TABLE sessions ADD COLUMN on_timeout TEXT NOT NULL DEFAULT 'delete' CHECK (on_timeout IN ('delete', 'pause'));
ALTER TABLE sessions ADD COLUMN ends_at BIGINT;
CREATE INDEX sessions_by_end ON sessions (ends_at, id) WHERE ends_at IS NOT NULL;
`,
	// 7 (SQLite's 16): an access token dies with the API key that made it: the tokens of keys revoked before are
	// revoked now, and the tokens of one object, and of one key, are found by index (caps, cascades).
	`
UPDATE access_tokens SET revoked_at = (SELECT k.revoked_at FROM api_keys k WHERE k.id = access_tokens.created_by)
	WHERE revoked_at IS NULL AND created_by IN (SELECT id FROM api_keys WHERE revoked_at IS NOT NULL);
CREATE INDEX access_tokens_by_session ON access_tokens (tenant_id, session_id);
CREATE INDEX access_tokens_by_sandbox ON access_tokens (tenant_id, sandbox_id);
CREATE INDEX access_tokens_by_creator ON access_tokens (created_by);
`,
	// 8 (SQLite's 17): a tenant's audit entries keep their payload sealed under the tenant's key (see
	// store.AuditEntry.Sealed).
	`ALTER TABLE audit_log ADD COLUMN sealed TEXT NOT NULL DEFAULT '';`,
	// 9 (SQLite's 18): how long each tenant's logs are kept (0: the server's default).
	`ALTER TABLE tenants ADD COLUMN log_retention_seconds BIGINT NOT NULL DEFAULT 0 CHECK (log_retention_seconds >= 0);`,
}
