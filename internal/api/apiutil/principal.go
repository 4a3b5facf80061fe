package apiutil

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/airlockrun/airlock/internal/controlplane"
	"github.com/airlockrun/airlock/internal/store"
)

type principalKey struct{}

// WithPrincipal returns ctx carrying p, the principal its request authenticated as.
func WithPrincipal(ctx context.Context, p controlplane.Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalOf is the principal r authenticated as (the zero Principal if none).
func PrincipalOf(r *http.Request) controlplane.Principal {
	p, _ := r.Context().Value(principalKey{}).(controlplane.Principal)
	return p
}

// TenantOf is the tenant of r's principal.
func TenantOf(r *http.Request) string { return PrincipalOf(r).TenantID }

// AccessEndedError is the cause of a request's context that was ended because its access no longer
// holds; Err is why (wrapping errdefs.ErrUnauthenticated, ErrPermissionDenied or ErrNotFound).
type AccessEndedError struct{ Err error }

func (e *AccessEndedError) Error() string { return "access ended: " + e.Err.Error() }
func (e *AccessEndedError) Unwrap() error { return e.Err }

// AccessEnded reports why ctx's request was ended for its access, or nil if it was not.
func AccessEnded(ctx context.Context) *AccessEndedError {
	var ae *AccessEndedError
	if errors.As(context.Cause(ctx), &ae) {
		return ae
	}
	return nil
}

// AccessMessage is what a client is told of reason, why its access ended.
func AccessMessage(reason error) string {
	var ae *Error
	if errors.As(reason, &ae) {
		return "access ended: " + ae.msg
	}
	return "access ended: " + TrimSentinel(reason.Error(), reason)
}

// JoinTokenScopes lists an access token's scopes for a message: comma-separated.
func JoinTokenScopes(ss []store.TokenScope) string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = string(s)
	}
	return strings.Join(parts, ",")
}
