package airlock

import (
	"context"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"time"
)

func sessionPath(id string, rest ...string) string { return objectPath("/v1/sessions/", id, rest...) }

// CreateSession creates a session and boots its first sandbox. A session whose boot failed is returned
// without an error, with State SessionFailed and a Reason.
func (c *Client) CreateSession(ctx context.Context, req CreateSessionRequest, opts ...CallOption) (*Session, error) {
	var se Session
	if err := c.idempotentPost(ctx, "/v1/sessions", req, &se, opts); err != nil {
		return nil, fmt.Errorf("create session: %w", err)
	}
	return &se, nil
}

// GetSession returns the session id.
func (c *Client) GetSession(ctx context.Context, id string) (*Session, error) {
	return callJSON[Session](ctx, c, http.MethodGet, sessionPath(id), nil, nil, "get session %s", id)
}

// ListSessions returns one page of sessions.
func (c *Client) ListSessions(ctx context.Context, opts ListOptions) (*SessionList, error) {
	return callJSON[SessionList](ctx, c, http.MethodGet, "/v1/sessions", opts.query(), nil, "list sessions")
}

// AllSessions iterates over every session that opts selects, fetching pages as it goes; an error
// ends the iteration, after it is yielded.
func (c *Client) AllSessions(ctx context.Context, opts ListOptions) iter.Seq2[Session, error] {
	return allPages(opts, func(o ListOptions) (*SessionList, error) { return c.ListSessions(ctx, o) },
		func(l *SessionList) ([]Session, string) { return l.Sessions, l.NextCursor })
}

// DeleteSession destroys the session's sandbox and snapshots.
func (c *Client) DeleteSession(ctx context.Context, id string) error {
	return c.callNoAnswer(ctx, http.MethodDelete, sessionPath(id), nil, nil, "delete session %s", id)
}

// PauseSession snapshots the session's memory, processes and files and destroys its sandbox.
func (c *Client) PauseSession(ctx context.Context, id string) (*Session, error) {
	return callJSON[Session](ctx, c, http.MethodPost, sessionPath(id, "pause"), nil, nil, "pause session %s", id)
}

// SetSessionTimeout bounds the session's runs to seconds from now on (0: no bound): a running session
// ends that long from now; a paused one's next run is bounded.
func (c *Client) SetSessionTimeout(ctx context.Context, id string, seconds int) (*Session, error) {
	return callJSON[Session](ctx, c, http.MethodPost, sessionPath(id, "timeout"), nil, SetTimeoutRequest{TimeoutSeconds: seconds}, "set timeout of session %s", id)
}

// ResumeSession restores the paused session into a new sandbox; its processes continue.
func (c *Client) ResumeSession(ctx context.Context, id string) (*Session, error) {
	return callJSON[Session](ctx, c, http.MethodPost, sessionPath(id, "resume"), nil, nil, "resume session %s", id)
}

// ForkSession makes req.Count new sessions from the session's current state or one of its snapshots.
func (c *Client) ForkSession(ctx context.Context, id string, req ForkSessionRequest, opts ...CallOption) (*ForkSessionResult, error) {
	var out ForkSessionResult
	if err := c.idempotentPost(ctx, sessionPath(id, "fork"), req, &out, opts); err != nil {
		return nil, fmt.Errorf("fork session %s: %w", id, err)
	}
	return &out, nil
}

// SnapshotSession saves the running session's state while it keeps running.
func (c *Client) SnapshotSession(ctx context.Context, id string, req CreateSnapshotRequest) (*Snapshot, error) {
	return callJSON[Snapshot](ctx, c, http.MethodPost, sessionPath(id, "snapshots"), nil, req, "snapshot session %s", id)
}

// ListSnapshots returns one page of the session's snapshots, oldest first.
func (c *Client) ListSnapshots(ctx context.Context, id string, opts ListOptions) (*SnapshotList, error) {
	return callJSON[SnapshotList](ctx, c, http.MethodGet, sessionPath(id, "snapshots"), opts.query(), nil, "list snapshots of %s", id)
}

// AllSnapshots iterates over every snapshot of session id (oldest first), fetching pages as it goes;
// an error ends the iteration, after it is yielded.
func (c *Client) AllSnapshots(ctx context.Context, id string, opts ListOptions) iter.Seq2[Snapshot, error] {
	return allPages(opts, func(o ListOptions) (*SnapshotList, error) { return c.ListSnapshots(ctx, id, o) },
		func(l *SnapshotList) ([]Snapshot, string) { return l.Snapshots, l.NextCursor })
}

// GetSnapshot returns one snapshot of the session.
func (c *Client) GetSnapshot(ctx context.Context, sessionID, snapshotID string) (*Snapshot, error) {
	return callJSON[Snapshot](ctx, c, http.MethodGet, sessionPath(sessionID, "snapshots", url.PathEscape(snapshotID)), nil, nil, "get snapshot %s", snapshotID)
}

// WaitSnapshot polls a snapshot until it is complete in the snapshot store (or failed, an error) and
// returns it. A snapshot is usable as soon as it is "uploading"; this is for callers that need it stored.
func (c *Client) WaitSnapshot(ctx context.Context, sessionID, snapshotID string) (*Snapshot, error) {
	delay := 50 * time.Millisecond
	for {
		sn, err := c.GetSnapshot(ctx, sessionID, snapshotID)
		if err != nil {
			return nil, err
		}
		switch sn.State {
		case "complete":
			return sn, nil
		case "failed":
			return sn, fmt.Errorf("snapshot %s failed: %s", snapshotID, sn.Reason)
		}
		select {
		case <-ctx.Done():
			return sn, fmt.Errorf("wait for snapshot %s (%s): %w", snapshotID, sn.State, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Second)
	}
}

// idempotentPost posts req to path with the call's Idempotency-Key, if any, and decodes the answer.
func (c *Client) idempotentPost(ctx context.Context, path string, req, out any, opts []CallOption) error {
	var o callOptions
	for _, f := range opts {
		f(&o)
	}
	var hdr http.Header
	if o.idempotencyKey != "" {
		hdr = http.Header{"Idempotency-Key": {o.idempotencyKey}}
	}
	respHdr, err := c.doJSONHeader(ctx, http.MethodPost, path, nil, req, out, hdr)
	if err != nil {
		return err
	}
	if o.replayed != nil {
		*o.replayed = respHdr.Get("Idempotent-Replayed") == "true"
	}
	return nil
}
