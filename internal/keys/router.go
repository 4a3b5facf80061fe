package keys

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// Router is a KeyProvider that sends each tenant to the provider its settings name (the local keyring,
// or a PKCS#11 token the customer controls), and each wrapped key to the provider whose key ID it
// carries. It implements Revoker, Rotator and Checker by delegating.
type Router struct {
	providers map[string]KeyProvider
	names     []string // sorted, for errors and Revoke
	// choose names a tenant's provider ("" means def).
	choose func(ctx context.Context, tenantID string) (string, error)
	def    string
}

var (
	_ KeyProvider = (*Router)(nil)
	_ Revoker     = (*Router)(nil)
	_ Rotator     = (*Router)(nil)
	_ Checker     = (*Router)(nil)
	_ Retirer     = (*Router)(nil)
)

// NewRouter returns a router over providers (by name; each must implement Owner), sending a tenant to
// the one choose names, or to def when choose says "".
func NewRouter(providers map[string]KeyProvider, def string, choose func(ctx context.Context, tenantID string) (string, error)) (*Router, error) {
	if _, ok := providers[def]; !ok {
		return nil, fmt.Errorf("key router: no default provider %q: %w", def, errdefs.ErrInvalidArgument)
	}
	r := &Router{providers: providers, choose: choose, def: def}
	for name, p := range providers {
		if _, ok := p.(Owner); !ok {
			return nil, fmt.Errorf("key router: provider %q cannot tell its key IDs: %w", name, errdefs.ErrInvalidArgument)
		}
		r.names = append(r.names, name)
	}
	slices.Sort(r.names)
	return r, nil
}

// Has reports whether the router has a provider of that name ("" is the default).
func (r *Router) Has(name string) bool {
	if name == "" {
		return true
	}
	_, ok := r.providers[name]
	return ok
}

// Names reports the providers' names.
func (r *Router) Names() []string { return slices.Clone(r.names) }

// For returns the tenant's provider and its name.
func (r *Router) For(ctx context.Context, tenantID string) (KeyProvider, string, error) {
	name, err := r.choose(ctx, tenantID)
	if err != nil {
		return nil, "", fmt.Errorf("key provider of tenant %s: %w", tenantID, err)
	}
	if name == "" {
		name = r.def
	}
	p, ok := r.providers[name]
	if !ok {
		return nil, "", fmt.Errorf("tenant %s uses key provider %q, which this server does not have: %w", tenantID, name,
			&KeyError{msg: "key provider " + name + " is not configured", cause: errdefs.ErrUnavailable})
	}
	return p, name, nil
}

// WrapKey implements KeyProvider with the tenant's provider.
func (r *Router) WrapKey(ctx context.Context, tenantID string, dek []byte) ([]byte, string, error) {
	p, _, err := r.For(ctx, tenantID)
	if err != nil {
		return nil, "", err
	}
	return p.WrapKey(ctx, tenantID, dek)
}

// UnwrapKey implements KeyProvider with the provider that owns keyID, whatever the tenant uses now.
func (r *Router) UnwrapKey(ctx context.Context, tenantID, keyID string, wrapped []byte) ([]byte, error) {
	for _, name := range r.names {
		p := r.providers[name]
		if p.(Owner).Owns(keyID) {
			return p.UnwrapKey(ctx, tenantID, keyID, wrapped)
		}
	}
	return nil, fmt.Errorf("unwrap key: no provider has key %q of tenant %s: %w", keyID, tenantID, errdefs.ErrNotFound)
}

// RevokeKey implements Revoker: it revokes the tenant's keys in every provider that can, so that no
// data key of the tenant unwraps, whichever provider wrapped it.
func (r *Router) RevokeKey(ctx context.Context, tenantID string) error {
	var errs []error
	for _, name := range r.names {
		if rv, ok := r.providers[name].(Revoker); ok {
			if err := rv.RevokeKey(ctx, tenantID); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// RotateKey implements Rotator with the tenant's provider.
func (r *Router) RotateKey(ctx context.Context, tenantID string) (string, error) {
	p, name, err := r.For(ctx, tenantID)
	if err != nil {
		return "", err
	}
	rot, ok := p.(Rotator)
	if !ok {
		return "", fmt.Errorf("key provider %s cannot rotate keys: %w", name, errdefs.ErrFailedPrecondition)
	}
	return rot.RotateKey(ctx, tenantID)
}

// RetireOldKeys implements Retirer in every provider that can: a tenant that moved between providers
// has its keys in the old one retired too.
func (r *Router) RetireOldKeys(ctx context.Context, tenantID string) error {
	var errs []error
	for _, name := range r.names {
		if rt, ok := r.providers[name].(Retirer); ok {
			if err := rt.RetireOldKeys(ctx, tenantID); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// Check implements Checker with the tenant's provider; one that cannot check is taken to be fine.
func (r *Router) Check(ctx context.Context, tenantID string) error {
	p, _, err := r.For(ctx, tenantID)
	if err != nil {
		return err
	}
	if c, ok := p.(Checker); ok {
		return c.Check(ctx, tenantID)
	}
	return nil
}
