package airlock

import (
	"context"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// CallOption configures one call.
type CallOption func(*callOptions)

type callOptions struct {
	idempotencyKey string
	replayed       *bool
}

// WithIdempotencyKey sends key as the Idempotency-Key header of a create: retrying the same request with
// the same key returns the first response instead of creating a second sandbox.
func WithIdempotencyKey(key string) CallOption {
	return func(o *callOptions) { o.idempotencyKey = key }
}

// WithReplayed sets *replayed to whether the server answered a create by replaying an earlier response
// with the same idempotency key.
func WithReplayed(replayed *bool) CallOption {
	return func(o *callOptions) { o.replayed = replayed }
}

// CreateSandbox creates and boots a sandbox and returns it once it accepts work. A sandbox that failed to
// boot is returned without an error, with State StateFailed and a Reason: check State.
func (c *Client) CreateSandbox(ctx context.Context, req CreateSandboxRequest, opts ...CallOption) (*Sandbox, error) {
	var sb Sandbox
	if err := c.idempotentPost(ctx, "/v1/sandboxes", req, &sb, opts); err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	return &sb, nil
}

// GetSandbox returns the sandbox id.
func (c *Client) GetSandbox(ctx context.Context, id string) (*Sandbox, error) {
	return callJSON[Sandbox](ctx, c, http.MethodGet, sandboxPath(id), nil, nil, "get sandbox %s", id)
}

// ListOptions filters and pages ListSandboxes. The zero value lists the first page of all sandboxes.
type ListOptions struct {
	// States keeps sandboxes in one of these states (StateRunning, …); empty keeps all.
	States []string
	// Metadata keeps sandboxes whose metadata has every one of these key/value pairs.
	Metadata map[string]string
	// Limit is the page size (1 to 1000); 0 is the server's default.
	Limit int
	// Cursor is the NextCursor of the previous page; "" is the first page.
	Cursor string
}

func (o ListOptions) query() url.Values {
	q := url.Values{}
	if len(o.States) > 0 {
		q.Set("state", strings.Join(o.States, ","))
	}
	for k, v := range o.Metadata {
		q.Set("metadata."+k, v)
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	return q
}

// ListSandboxes returns one page of sandboxes, newest first. Pass its NextCursor as opts.Cursor for the
// next page; it is "" on the last page. AllSandboxes walks every page.
func (c *Client) ListSandboxes(ctx context.Context, opts ListOptions) (*SandboxList, error) {
	return callJSON[SandboxList](ctx, c, http.MethodGet, "/v1/sandboxes", opts.query(), nil, "list sandboxes")
}

// AllSandboxes yields every sandbox that opts selects, fetching page after page (opts.Limit is the page
// size). It stops at the first error, which it yields with a zero Sandbox.
func (c *Client) AllSandboxes(ctx context.Context, opts ListOptions) iter.Seq2[Sandbox, error] {
	return allPages(opts, func(o ListOptions) (*SandboxList, error) { return c.ListSandboxes(ctx, o) },
		func(l *SandboxList) ([]Sandbox, string) { return l.Sandboxes, l.NextCursor })
}

// allPages iterates over every item of a list the API answers in pages, from opts.Cursor on: list
// fetches one page, and items reports its items and the next page's cursor ("" after the last). An
// error ends the iteration, after it is yielded.
func allPages[L, T any](opts ListOptions, list func(ListOptions) (*L, error), items func(*L) ([]T, string)) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		for {
			l, err := list(opts)
			if err != nil {
				var zero T
				yield(zero, err)
				return
			}
			page, next := items(l)
			for _, it := range page {
				if !yield(it, nil) {
					return
				}
			}
			if next == "" || next == opts.Cursor {
				return
			}
			opts.Cursor = next
		}
	}
}

// DeleteSandbox destroys the sandbox id and everything in it.
func (c *Client) DeleteSandbox(ctx context.Context, id string) error {
	return c.callNoAnswer(ctx, http.MethodDelete, sandboxPath(id), nil, nil, "delete sandbox %s", id)
}

// SetTimeout makes the sandbox id end seconds from now and returns it with its new EndsAt.
func (c *Client) SetTimeout(ctx context.Context, id string, seconds int) (*Sandbox, error) {
	var sb Sandbox
	err := c.doJSON(ctx, http.MethodPost, sandboxPath(id, "timeout"), nil, SetTimeoutRequest{TimeoutSeconds: seconds}, &sb, nil)
	if err != nil {
		return nil, fmt.Errorf("set timeout of sandbox %s: %w", id, err)
	}
	return &sb, nil
}

// GetNetwork returns the sandbox's egress policy.
func (c *Client) GetNetwork(ctx context.Context, id string) (*NetworkPolicy, error) {
	return callJSON[NetworkPolicy](ctx, c, http.MethodGet, sandboxPath(id, "network"), nil, nil, "get network policy of sandbox %s", id)
}

// SetNetwork replaces the running sandbox's egress policy; connections opened from then on follow it.
func (c *Client) SetNetwork(ctx context.Context, id string, p NetworkPolicy) (*NetworkPolicy, error) {
	return callJSON[NetworkPolicy](ctx, c, http.MethodPut, sandboxPath(id, "network"), nil, p, "set network policy of sandbox %s", id)
}

// EgressOptions filters Egress. The zero value returns the newest 100 flows.
type EgressOptions struct {
	// Decision keeps flows with this decision (DecisionAllow or DecisionDeny); "" keeps both.
	Decision string
	// Host keeps flows whose destination name (case-insensitively) or IP is exactly Host.
	Host string
	// HostContains keeps flows whose destination name contains HostContains, case-insensitively.
	HostContains string
	// Since keeps flows that ended at or after Since; Until those that started before Until. Zero: no
	// bound.
	Since, Until time.Time
	// Limit is the most flows returned, 1 to 1000; 0 is the server's default (100).
	Limit int
}

func (o EgressOptions) query() url.Values {
	q := url.Values{}
	if o.Decision != "" {
		q.Set("decision", o.Decision)
	}
	if o.Host != "" {
		q.Set("host", o.Host)
	}
	if o.HostContains != "" {
		q.Set("host_contains", o.HostContains)
	}
	if !o.Since.IsZero() {
		q.Set("since", o.Since.Format(time.RFC3339Nano))
	}
	if !o.Until.IsZero() {
		q.Set("until", o.Until.Format(time.RFC3339Nano))
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	return q
}

// Egress returns the sandbox's network flows that opts selects, newest first: every connection it
// opened or tried to open, and every plain-HTTP request, with the decision and the bytes each way. A
// flow shows once it ended. The flows of a stopped sandbox stay readable.
func (c *Client) Egress(ctx context.Context, id string, opts EgressOptions) (*FlowList, error) {
	return callJSON[FlowList](ctx, c, http.MethodGet, sandboxPath(id, "egress"), opts.query(), nil, "egress flows of sandbox %s", id)
}
