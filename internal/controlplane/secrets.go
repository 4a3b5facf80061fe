package controlplane

import (
	"context"
	"fmt"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/secrets"
)

// secretStore returns the secret store, or an error when this control plane has none.
func (s *accounts) secretStore() (*secrets.Store, error) {
	if s.secrets == nil {
		return nil, fmt.Errorf("this control plane keeps no secrets: %w", errdefs.ErrFailedPrecondition)
	}
	return s.secrets, nil
}

// CreateSecret stores a new secret of the tenant. Its value can never be read back through the API.
func (s *accounts) CreateSecret(ctx context.Context, tenantID, name string, value []byte) (secrets.Metadata, error) {
	st, err := s.secretStore()
	if err != nil {
		return secrets.Metadata{}, err
	}
	return st.Create(ctx, tenantID, name, value)
}

// UpdateSecret replaces the value of the tenant's secret (a new version).
func (s *accounts) UpdateSecret(ctx context.Context, tenantID, name string, value []byte) (secrets.Metadata, error) {
	st, err := s.secretStore()
	if err != nil {
		return secrets.Metadata{}, err
	}
	return st.Update(ctx, tenantID, name, value)
}

// DeleteSecret removes the tenant's secret.
func (s *accounts) DeleteSecret(ctx context.Context, tenantID, name string) error {
	st, err := s.secretStore()
	if err != nil {
		return err
	}
	return st.Delete(ctx, tenantID, name)
}

// GetSecret describes the tenant's secret, without its value.
func (s *accounts) GetSecret(ctx context.Context, tenantID, name string) (secrets.Metadata, error) {
	st, err := s.secretStore()
	if err != nil {
		return secrets.Metadata{}, err
	}
	return st.Get(ctx, tenantID, name)
}

// ListSecrets describes the tenant's secrets, without their values.
func (s *accounts) ListSecrets(ctx context.Context, tenantID string) ([]secrets.Metadata, error) {
	st, err := s.secretStore()
	if err != nil {
		return nil, err
	}
	return st.List(ctx, tenantID)
}
