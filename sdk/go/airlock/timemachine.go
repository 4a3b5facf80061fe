package airlock

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
)

// RestoreSession moves the session to one of its snapshots: where it was stays in its timeline (a
// running session is snapshotted first), and it runs from the target.
func (c *Client) RestoreSession(ctx context.Context, id string, req RestoreSessionRequest) (*Session, error) {
	return callJSON[Session](ctx, c, http.MethodPost, sessionPath(id, "restore"), nil, req, "restore session %s", id)
}

// Timeline returns the session's snapshot tree.
func (c *Client) Timeline(ctx context.Context, id string) (*Timeline, error) {
	return callJSON[Timeline](ctx, c, http.MethodGet, sessionPath(id, "timeline"), nil, nil, "timeline of %s", id)
}

// UpdateSnapshot pins, unpins or renames a snapshot.
func (c *Client) UpdateSnapshot(ctx context.Context, sessionID, snapshotID string, req UpdateSnapshotRequest) (*Snapshot, error) {
	return callJSON[Snapshot](ctx, c, http.MethodPatch, sessionPath(sessionID, "snapshots", url.PathEscape(snapshotID)), nil, req, "update snapshot %s", snapshotID)
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

// Retention returns the tenant's snapshot retention.
func (c *Client) Retention(ctx context.Context) (*RetentionSettings, error) {
	return callJSON[RetentionSettings](ctx, c, http.MethodGet, "/v1/retention", nil, nil, "get retention")
}

// SetRetention replaces the tenant's snapshot retention; zero fields inherit the server's defaults.
func (c *Client) SetRetention(ctx context.Context, r Retention) (*RetentionSettings, error) {
	return callJSON[RetentionSettings](ctx, c, http.MethodPut, "/v1/retention", nil, r, "set retention")
}
