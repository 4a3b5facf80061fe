package airlock

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// MetricsOptions bounds the readings SandboxMetrics and SessionMetrics return. The zero value returns
// every reading the node keeps (every 5 s, the last hour) and one taken now.
type MetricsOptions struct {
	// Start and End bound the window, both included; zero: no bound. An End not before now (or none)
	// adds a reading taken now.
	Start, End time.Time
}

func (o MetricsOptions) query() url.Values {
	q := url.Values{}
	if !o.Start.IsZero() {
		q.Set("start", o.Start.Format(time.RFC3339Nano))
	}
	if !o.End.IsZero() {
		q.Set("end", o.End.Format(time.RFC3339Nano))
	}
	return q
}

// SandboxMetrics returns the sandbox's resource use, oldest first: CPU, memory and disk as its node
// reads them from the host. A sandbox that is not running has none.
func (c *Client) SandboxMetrics(ctx context.Context, id string, opts MetricsOptions) (*MetricList, error) {
	return callJSON[MetricList](ctx, c, http.MethodGet, sandboxPath(id, "metrics"), opts.query(), nil, "metrics of sandbox %s", id)
}

// SessionMetrics returns the resource use of the sandbox that runs the session now (MetricList.SandboxID),
// oldest first. A paused session has none; asking does not resume it.
func (c *Client) SessionMetrics(ctx context.Context, id string, opts MetricsOptions) (*MetricList, error) {
	return callJSON[MetricList](ctx, c, http.MethodGet, sessionPath(id, "metrics"), opts.query(), nil, "metrics of session %s", id)
}
