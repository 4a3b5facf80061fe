package controlplane

import (
	"context"
	"fmt"

	"github.com/airlockrun/airlock/internal/connections"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// conns returns the connection manager, or an error when this control plane has none.
func (s *accounts) conns() (*connections.Manager, error) {
	if s.connections == nil {
		return nil, fmt.Errorf("this control plane has no OAuth connections: %w", errdefs.ErrFailedPrecondition)
	}
	return s.connections, nil
}

// CreateConnection stores a tenant's OAuth connection and starts signing in.
func (s *accounts) CreateConnection(ctx context.Context, tenantID, name string, flow connections.Flow, p connections.Provider) (connections.Connection, connections.Authorization, error) {
	m, err := s.conns()
	if err != nil {
		return connections.Connection{}, connections.Authorization{}, err
	}
	return m.Create(ctx, tenantID, name, flow, p)
}

// AuthorizeConnection starts signing in again.
func (s *accounts) AuthorizeConnection(ctx context.Context, tenantID, name string) (connections.Connection, connections.Authorization, error) {
	m, err := s.conns()
	if err != nil {
		return connections.Connection{}, connections.Authorization{}, err
	}
	return m.Authorize(ctx, tenantID, name)
}

// ConnectionCallback finishes an authorization code flow (the provider's redirect).
func (s *accounts) ConnectionCallback(ctx context.Context, state, code, providerError, description string) (connections.Connection, error) {
	m, err := s.conns()
	if err != nil {
		return connections.Connection{}, err
	}
	return m.Callback(ctx, state, code, providerError, description)
}

// GetConnection describes a tenant's connection.
func (s *accounts) GetConnection(ctx context.Context, tenantID, name string) (connections.Connection, error) {
	m, err := s.conns()
	if err != nil {
		return connections.Connection{}, err
	}
	return m.Get(ctx, tenantID, name)
}

// ListConnections describes a tenant's connections.
func (s *accounts) ListConnections(ctx context.Context, tenantID string) ([]connections.Connection, error) {
	m, err := s.conns()
	if err != nil {
		return nil, err
	}
	return m.List(ctx, tenantID)
}

// RevokeConnection revokes a connection's tokens; injection stops at once.
func (s *accounts) RevokeConnection(ctx context.Context, tenantID, name string) (connections.Connection, error) {
	m, err := s.conns()
	if err != nil {
		return connections.Connection{}, err
	}
	return m.Revoke(ctx, tenantID, name)
}

// DeleteConnection revokes and removes a connection.
func (s *accounts) DeleteConnection(ctx context.Context, tenantID, name string) error {
	m, err := s.conns()
	if err != nil {
		return err
	}
	return m.Delete(ctx, tenantID, name)
}
