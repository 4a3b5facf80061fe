package airlock

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
)

func secretPath(name string) string { return "/v1/secrets/" + url.PathEscape(name) }

// CreateSecret stores a new secret. The value can never be read back; the gateway injects it into
// the requests a sandbox's bindings name.
func (c *Client) CreateSecret(ctx context.Context, name, value string) (*Secret, error) {
	var s Secret
	if err := c.doJSON(ctx, http.MethodPost, "/v1/secrets", nil, CreateSecretRequest{Name: name, Value: value}, &s, nil); err != nil {
		return nil, fmt.Errorf("create secret %s: %w", name, err)
	}
	return &s, nil
}

// UpdateSecret replaces a secret's value.
func (c *Client) UpdateSecret(ctx context.Context, name, value string) (*Secret, error) {
	var s Secret
	if err := c.doJSON(ctx, http.MethodPut, secretPath(name), nil, UpdateSecretRequest{Value: value}, &s, nil); err != nil {
		return nil, fmt.Errorf("update secret %s: %w", name, err)
	}
	return &s, nil
}

// GetSecret describes a secret (never its value).
func (c *Client) GetSecret(ctx context.Context, name string) (*Secret, error) {
	var s Secret
	if err := c.doJSON(ctx, http.MethodGet, secretPath(name), nil, nil, &s, nil); err != nil {
		return nil, fmt.Errorf("get secret %s: %w", name, err)
	}
	return &s, nil
}

// ListSecrets describes the tenant's secrets.
func (c *Client) ListSecrets(ctx context.Context) (*SecretList, error) {
	var l SecretList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/secrets", nil, nil, &l, nil); err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	return &l, nil
}

// DeleteSecret removes a secret.
func (c *Client) DeleteSecret(ctx context.Context, name string) error {
	if err := c.doJSON(ctx, http.MethodDelete, secretPath(name), nil, nil, nil, nil); err != nil {
		return fmt.Errorf("delete secret %s: %w", name, err)
	}
	return nil
}
