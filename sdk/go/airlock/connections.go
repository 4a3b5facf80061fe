package airlock

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
)

func connectionPath(name string) string { return "/v1/connections/" + url.PathEscape(name) }

// CreateConnection stores an OAuth connection and starts signing in: show the user
// Authorization.URL (authorization code flow) or Authorization.UserCode and VerificationURI (device
// flow). The connection turns "active" once the user has finished.
func (c *Client) CreateConnection(ctx context.Context, req CreateConnectionRequest) (*ConnectionSignIn, error) {
	var out ConnectionSignIn
	if err := c.doJSON(ctx, http.MethodPost, "/v1/connections", nil, req, &out, nil); err != nil {
		return nil, fmt.Errorf("create connection %s: %w", req.Name, err)
	}
	return &out, nil
}

// AuthorizeConnection starts signing in again (after a failure or a revocation).
func (c *Client) AuthorizeConnection(ctx context.Context, name string) (*ConnectionSignIn, error) {
	var out ConnectionSignIn
	if err := c.doJSON(ctx, http.MethodPost, connectionPath(name)+"/authorize", nil, nil, &out, nil); err != nil {
		return nil, fmt.Errorf("authorize connection %s: %w", name, err)
	}
	return &out, nil
}

// GetConnection describes a connection.
func (c *Client) GetConnection(ctx context.Context, name string) (*Connection, error) {
	var out Connection
	if err := c.doJSON(ctx, http.MethodGet, connectionPath(name), nil, nil, &out, nil); err != nil {
		return nil, fmt.Errorf("get connection %s: %w", name, err)
	}
	return &out, nil
}

// ListConnections describes the tenant's connections.
func (c *Client) ListConnections(ctx context.Context) (*ConnectionList, error) {
	var out ConnectionList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/connections", nil, nil, &out, nil); err != nil {
		return nil, fmt.Errorf("list connections: %w", err)
	}
	return &out, nil
}

// RevokeConnection revokes the connection's tokens at the provider and drops them: bindings that name
// it stop injecting at once.
func (c *Client) RevokeConnection(ctx context.Context, name string) (*Connection, error) {
	var out Connection
	if err := c.doJSON(ctx, http.MethodPost, connectionPath(name)+"/revoke", nil, nil, &out, nil); err != nil {
		return nil, fmt.Errorf("revoke connection %s: %w", name, err)
	}
	return &out, nil
}

// DeleteConnection revokes and removes a connection.
func (c *Client) DeleteConnection(ctx context.Context, name string) error {
	if err := c.doJSON(ctx, http.MethodDelete, connectionPath(name), nil, nil, nil, nil); err != nil {
		return fmt.Errorf("delete connection %s: %w", name, err)
	}
	return nil
}
