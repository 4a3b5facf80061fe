package airlock

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// Retention says how long a session's snapshots are kept, by age: every snapshot younger than
// KeepAllSeconds, then the newest of each hour younger than KeepHourlySeconds, then the newest of each
// day younger than KeepDailySeconds. Zero fields inherit the tenant's (by default: 1 hour, 24 hours, 7
// days). Pinned snapshots, a session's head and a fork's source are always kept.
type Retention struct {
	KeepAllSeconds    int64 `json:"keep_all_seconds,omitempty"`
	KeepHourlySeconds int64 `json:"keep_hourly_seconds,omitempty"`
	KeepDailySeconds  int64 `json:"keep_daily_seconds,omitempty"`
}

// RestoreSessionRequest is the body of POST /v1/sessions/{id}/restore: one of SnapshotID, or At (the
// last snapshot taken at or before that time).
type RestoreSessionRequest struct {
	SnapshotID string     `json:"snapshot_id,omitempty"`
	At         *time.Time `json:"at,omitempty"`
}

// Timeline is the response of GET /v1/sessions/{id}/timeline: the session's snapshots, oldest first,
// forming a tree by ParentID (restores and forks branch it), and the one it runs from or would resume.
type Timeline struct {
	HeadSnapshotID string     `json:"head_snapshot_id,omitempty"`
	Snapshots      []Snapshot `json:"snapshots"`
}

// UpdateSnapshotRequest is the body of PATCH /v1/sessions/{id}/snapshots/{snapshot}.
type UpdateSnapshotRequest struct {
	// Pinned keeps the snapshot whatever the retention says, until unpinned.
	Pinned *bool `json:"pinned,omitempty"`
	// Name renames it ("" removes the name); nil leaves it.
	Name *string `json:"name,omitempty"`
}

// RestoreSession moves the session to one of its snapshots: where it was stays in its timeline (a
// running session is snapshotted first), and it runs from the target.
func (c *Client) RestoreSession(ctx context.Context, id string, req RestoreSessionRequest) (*Session, error) {
	var se Session
	if err := c.doJSON(ctx, http.MethodPost, sessionPath(id, "restore"), nil, req, &se, nil); err != nil {
		return nil, fmt.Errorf("restore session %s: %w", id, err)
	}
	return &se, nil
}

// Timeline returns the session's snapshot tree.
func (c *Client) Timeline(ctx context.Context, id string) (*Timeline, error) {
	var tl Timeline
	if err := c.doJSON(ctx, http.MethodGet, sessionPath(id, "timeline"), nil, nil, &tl, nil); err != nil {
		return nil, fmt.Errorf("timeline of %s: %w", id, err)
	}
	return &tl, nil
}

// UpdateSnapshot pins, unpins or renames a snapshot.
func (c *Client) UpdateSnapshot(ctx context.Context, sessionID, snapshotID string, req UpdateSnapshotRequest) (*Snapshot, error) {
	var sn Snapshot
	if err := c.doJSON(ctx, http.MethodPatch, sessionPath(sessionID, "snapshots", url.PathEscape(snapshotID)), nil, req, &sn, nil); err != nil {
		return nil, fmt.Errorf("update snapshot %s: %w", snapshotID, err)
	}
	return &sn, nil
}

// FileChange is one path that differs between two snapshots.
type FileChange struct {
	Path string `json:"path"`
	// Kind is "added", "removed" or "changed"; Type the path's type where it is ("file", "dir",
	// "symlink", "other").
	Kind    string `json:"kind"`
	Type    string `json:"type"`
	OldSize int64  `json:"old_size"`
	NewSize int64  `json:"new_size"`
}

// SnapshotDiff is the response of GET /v1/sessions/{id}/diff: the changes from one snapshot to
// another, or, asked for one path, its unified diff (Binary when either side is not text).
type SnapshotDiff struct {
	From      string       `json:"from"`
	To        string       `json:"to"`
	Changes   []FileChange `json:"changes,omitempty"`
	Truncated bool         `json:"truncated,omitempty"`
	Path      string       `json:"path,omitempty"`
	Unified   string       `json:"unified,omitempty"`
	Binary    bool         `json:"binary,omitempty"`
}

// DiffSnapshots lists what changed in the files from snapshot from to snapshot to.
func (c *Client) DiffSnapshots(ctx context.Context, sessionID, from, to string) (*SnapshotDiff, error) {
	var d SnapshotDiff
	q := url.Values{"from": {from}, "to": {to}}
	if err := c.doJSON(ctx, http.MethodGet, sessionPath(sessionID, "diff"), q, nil, &d, nil); err != nil {
		return nil, fmt.Errorf("diff %s %s: %w", from, to, err)
	}
	return &d, nil
}

// DiffSnapshotFile returns the unified diff of one file between two snapshots.
func (c *Client) DiffSnapshotFile(ctx context.Context, sessionID, from, to, path string) (*SnapshotDiff, error) {
	var d SnapshotDiff
	q := url.Values{"from": {from}, "to": {to}, "path": {path}}
	if err := c.doJSON(ctx, http.MethodGet, sessionPath(sessionID, "diff"), q, nil, &d, nil); err != nil {
		return nil, fmt.Errorf("diff %s in %s %s: %w", path, from, to, err)
	}
	return &d, nil
}

// ReadSnapshotFile returns a file as a snapshot saved it, without restoring the snapshot:
// ReadSnapshotFileLimit with the client's bound (DefaultMaxReadBytes unless WithMaxReadBytes).
func (c *Client) ReadSnapshotFile(ctx context.Context, sessionID, snapshotID, path string) ([]byte, error) {
	return c.ReadSnapshotFileLimit(ctx, sessionID, snapshotID, path, c.maxRead)
}

// ReadSnapshotFileLimit returns a file as a snapshot saved it if it holds at most max bytes, and
// otherwise fails with an error matching ErrTooLarge having read at most max+1 bytes. max must be
// positive.
func (c *Client) ReadSnapshotFileLimit(ctx context.Context, sessionID, snapshotID, path string, max int64) ([]byte, error) {
	if max <= 0 {
		return nil, fmt.Errorf("read %s from snapshot %s: the bound must be positive, not %d: %w", path, snapshotID, max, ErrInvalidArgument)
	}
	p := sessionPath(sessionID, "snapshots", url.PathEscape(snapshotID), "files")
	resp, err := c.do(ctx, request{method: http.MethodGet, path: p, query: pathQuery(path)})
	if err != nil {
		return nil, fmt.Errorf("read %s from snapshot %s: %w", path, snapshotID, err)
	}
	defer resp.Body.Close()
	b, err := readAllLimit(resp.Body, max)
	if err != nil {
		return nil, fmt.Errorf("read %s from snapshot %s: %w", path, snapshotID, err)
	}
	return b, nil
}

// ListSnapshotFiles lists a directory as a snapshot saved it.
func (c *Client) ListSnapshotFiles(ctx context.Context, sessionID, snapshotID, path string) (*FileList, error) {
	var l FileList
	p := sessionPath(sessionID, "snapshots", url.PathEscape(snapshotID), "files", "list")
	if err := c.doJSON(ctx, http.MethodGet, p, url.Values{"path": {path}}, nil, &l, nil); err != nil {
		return nil, fmt.Errorf("list %s in snapshot %s: %w", path, snapshotID, err)
	}
	return &l, nil
}

// RetentionSettings is the response of GET and PUT /v1/retention: the tenant's own override (zero
// fields inherit the server's defaults) and the policy sessions without one of their own get.
type RetentionSettings struct {
	Tenant    Retention `json:"tenant"`
	Effective Retention `json:"effective"`
}

// Retention returns the tenant's snapshot retention.
func (c *Client) Retention(ctx context.Context) (*RetentionSettings, error) {
	var out RetentionSettings
	if err := c.doJSON(ctx, http.MethodGet, "/v1/retention", nil, nil, &out, nil); err != nil {
		return nil, fmt.Errorf("get retention: %w", err)
	}
	return &out, nil
}

// SetRetention replaces the tenant's snapshot retention; zero fields inherit the server's defaults.
func (c *Client) SetRetention(ctx context.Context, r Retention) (*RetentionSettings, error) {
	var out RetentionSettings
	if err := c.doJSON(ctx, http.MethodPut, "/v1/retention", nil, r, &out, nil); err != nil {
		return nil, fmt.Errorf("set retention: %w", err)
	}
	return &out, nil
}
