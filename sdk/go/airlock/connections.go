package airlock

import (
	"context"
	"net/http"
	"net/url"
)

func connectionPath(name string) string { return "/v1/connections/" + url.PathEscape(name) }

// CreateConnection stores an OAuth connection and starts signing in: show the user
// Authorization.URL (authorization code flow) or Authorization.UserCode and VerificationURI (device
// flow). The connection turns "active" once the user has finished.
func (c *Client) CreateConnection(ctx context.Context, req CreateConnectionRequest) (*ConnectionSignIn, error) {
	return callJSON[ConnectionSignIn](ctx, c, http.MethodPost, "/v1/connections", nil, req, "create connection %s", req.Name)
}

// AuthorizeConnection starts signing in again (after a failure or a revocation).
func (c *Client) AuthorizeConnection(ctx context.Context, name string) (*ConnectionSignIn, error) {
	return callJSON[ConnectionSignIn](ctx, c, http.MethodPost, connectionPath(name)+"/authorize", nil, nil, "authorize connection %s", name)
}

// GetConnection describes a connection.
func (c *Client) GetConnection(ctx context.Context, name string) (*Connection, error) {
	return callJSON[Connection](ctx, c, http.MethodGet, connectionPath(name), nil, nil, "get connection %s", name)
}

// ListConnections describes the tenant's connections.
func (c *Client) ListConnections(ctx context.Context) (*ConnectionList, error) {
	return callJSON[ConnectionList](ctx, c, http.MethodGet, "/v1/connections", nil, nil, "list connections")
}

// RevokeConnection revokes the connection's tokens at the provider and drops them: bindings that name
// it stop injecting at once.
func (c *Client) RevokeConnection(ctx context.Context, name string) (*Connection, error) {
	return callJSON[Connection](ctx, c, http.MethodPost, connectionPath(name)+"/revoke", nil, nil, "revoke connection %s", name)
}

// DeleteConnection revokes and removes a connection.
func (c *Client) DeleteConnection(ctx context.Context, name string) error {
	return c.callNoAnswer(ctx, http.MethodDelete, connectionPath(name), nil, nil, "delete connection %s", name)
}
