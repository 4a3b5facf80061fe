package airlock

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"

	"github.com/coder/websocket"
)

// ListPorts reports the TCP ports processes in a sandbox (or a session's sandbox: id's prefix says which)
// listen on.
func (c *Client) ListPorts(ctx context.Context, id string) (*PortList, error) {
	return callJSON[PortList](ctx, c, http.MethodGet, workPath(id, "ports"), nil, nil, "list ports of %s", id)
}

// PortURL is the path-form URL of port of a sandbox or session through this client's server; requests to
// it need the client's credential in the Authorization header unless the port
// is public.
func (c *Client) PortURL(id string, port int) string {
	return c.baseURL + workPath(id, "ports", strconv.Itoa(port)) + "/"
}

// Tunnel opens a TCP connection to port of a sandbox or session (id's prefix says which) through the
// API: a WebSocket whose binary messages carry the stream. A paused session that resumes automatically
// is resumed first. Refusals (port not open, not found, not authorised) are *APIError.
func (c *Client) Tunnel(ctx context.Context, id string, port int) (net.Conn, error) {
	path := workPath(id, "tunnels", strconv.Itoa(port))
	conn, resp, err := websocket.Dial(ctx, c.url(path, nil), &websocket.DialOptions{HTTPClient: c.hc, HTTPHeader: c.header(),
		Subprotocols: []string{"airlock-tcp"}})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, fmt.Errorf("tunnel to port %d of %s: %w", port, id, errorFromResponse(resp))
		}
		return nil, fmt.Errorf("tunnel to port %d of %s: %w", port, id, err)
	}
	conn.SetReadLimit(1 << 20)
	// The connection lives on after ctx, which only bounded the handshake.
	return websocket.NetConn(context.Background(), conn, websocket.MessageBinary), nil
}
