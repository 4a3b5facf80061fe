package airlock

import (
	"context"
	"net/http"
	"net/url"
)

func secretPath(name string) string { return "/v1/secrets/" + url.PathEscape(name) }

// CreateSecret stores a new secret. The value can never be read back; the gateway injects it into
// the requests a sandbox's bindings name.
func (c *Client) CreateSecret(ctx context.Context, name, value string) (*Secret, error) {
	return callJSON[Secret](ctx, c, http.MethodPost, "/v1/secrets", nil, CreateSecretRequest{Name: name, Value: value}, "create secret %s", name)
}

// UpdateSecret replaces a secret's value.
func (c *Client) UpdateSecret(ctx context.Context, name, value string) (*Secret, error) {
	return callJSON[Secret](ctx, c, http.MethodPut, secretPath(name), nil, UpdateSecretRequest{Value: value}, "update secret %s", name)
}

// GetSecret describes a secret (never its value).
func (c *Client) GetSecret(ctx context.Context, name string) (*Secret, error) {
	return callJSON[Secret](ctx, c, http.MethodGet, secretPath(name), nil, nil, "get secret %s", name)
}

// ListSecrets describes the tenant's secrets.
func (c *Client) ListSecrets(ctx context.Context) (*SecretList, error) {
	return callJSON[SecretList](ctx, c, http.MethodGet, "/v1/secrets", nil, nil, "list secrets")
}

// DeleteSecret removes a secret.
func (c *Client) DeleteSecret(ctx context.Context, name string) error {
	return c.callNoAnswer(ctx, http.MethodDelete, secretPath(name), nil, nil, "delete secret %s", name)
}
