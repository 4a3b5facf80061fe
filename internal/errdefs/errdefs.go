// Package errdefs holds the sentinel errors shared by every layer of Airlock.
//
// Code anywhere wraps one of these with context (fmt.Errorf("get sandbox %s: %w", id, ErrNotFound));
// the API edge converts them to an HTTP status and error code exactly once (see HTTPStatus and Code).
package errdefs

import (
	"errors"
	"net/http"
)

// Sentinel errors. Match them with errors.Is.
var (
	ErrNotFound           = errors.New("not found")
	ErrInvalidArgument    = errors.New("invalid argument")
	ErrAlreadyExists      = errors.New("already exists")
	ErrConflict           = errors.New("conflict")            // the object is in a state that forbids the call
	ErrFailedPrecondition = errors.New("failed precondition") // e.g. the sandbox is not running
	ErrUnauthenticated    = errors.New("unauthenticated")
	ErrPermissionDenied   = errors.New("permission denied")
	ErrResourceExhausted  = errors.New("resource exhausted") // a limit or quota was hit
	ErrTooLarge           = errors.New("too large")
	ErrUnavailable        = errors.New("unavailable") // try again later
	ErrDeadlineExceeded   = errors.New("deadline exceeded")
	ErrInternal           = errors.New("internal error")
	// ErrKeyUnavailable: the tenant's key-encryption key is revoked, destroyed or cannot be reached,
	// so nothing of the tenant can be encrypted or decrypted. Errors wrapping it also wrap
	// ErrPermissionDenied (revoked, destroyed) or ErrUnavailable (unreachable).
	ErrKeyUnavailable = errors.New("tenant key unavailable")
	// ErrPortClosed: nothing in the sandbox listens on the port a request was forwarded to.
	ErrPortClosed = errors.New("port not open")
	// ErrBadGateway: the server in the sandbox broke the connection or answered with something that is
	// not HTTP.
	ErrBadGateway = errors.New("bad gateway")
)

var table = []struct {
	err    error
	code   string
	status int
}{
	{ErrKeyUnavailable, "tenant_key_unavailable", http.StatusForbidden}, // before the errors it comes with
	{ErrNotFound, "not_found", http.StatusNotFound},
	{ErrInvalidArgument, "invalid_argument", http.StatusBadRequest},
	{ErrAlreadyExists, "already_exists", http.StatusConflict},
	{ErrConflict, "conflict", http.StatusConflict},
	{ErrFailedPrecondition, "failed_precondition", http.StatusConflict},
	{ErrUnauthenticated, "unauthenticated", http.StatusUnauthorized},
	{ErrPermissionDenied, "permission_denied", http.StatusForbidden},
	{ErrResourceExhausted, "resource_exhausted", http.StatusTooManyRequests},
	{ErrTooLarge, "too_large", http.StatusRequestEntityTooLarge},
	{ErrUnavailable, "unavailable", http.StatusServiceUnavailable},
	{ErrDeadlineExceeded, "deadline_exceeded", http.StatusGatewayTimeout},
	{ErrInternal, "internal", http.StatusInternalServerError},
	{ErrPortClosed, "port_not_open", http.StatusBadGateway},
	{ErrBadGateway, "bad_gateway", http.StatusBadGateway},
}

// Code reports the API error code for err ("internal" when err matches no sentinel).
func Code(err error) string {
	for _, e := range table {
		if errors.Is(err, e.err) {
			return e.code
		}
	}
	return "internal"
}

// HTTPStatus reports the HTTP status for err (500 when err matches no sentinel).
func HTTPStatus(err error) int {
	for _, e := range table {
		if errors.Is(err, e.err) {
			return e.status
		}
	}
	return http.StatusInternalServerError
}

// FromCode returns the sentinel for an API error code, or ErrInternal for an unknown code.
// Clients (the Go SDK, the daemon link) use it to turn a wire error back into something errors.Is matches.
func FromCode(code string) error {
	for _, e := range table {
		if e.code == code {
			return e.err
		}
	}
	return ErrInternal
}
