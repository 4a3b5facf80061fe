// Package errcode is the error taxonomy of Airlock's public API: the sentinel errors, and the codes that
// name them on every wire (the body of an error response, {"error":{"code":"not_found",…}}, an error on a
// stream; inside Airlock also the node API and the daemon's protocol).
//
// It is public so that the Go SDK's errors and the server's are the same values: internal/errdefs,
// which the server's code uses, takes its sentinels from here, and an SDK error matches them with
// errors.Is. Statuses are HTTP's, not the taxonomy's: api/wire gives each code its status.
package errcode

import "errors"

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
	err  error
	code string
}{
	{ErrKeyUnavailable, "tenant_key_unavailable"}, // before the errors it comes with
	{ErrNotFound, "not_found"},
	{ErrInvalidArgument, "invalid_argument"},
	{ErrAlreadyExists, "already_exists"},
	{ErrConflict, "conflict"},
	{ErrFailedPrecondition, "failed_precondition"},
	{ErrUnauthenticated, "unauthenticated"},
	{ErrPermissionDenied, "permission_denied"},
	{ErrResourceExhausted, "resource_exhausted"},
	{ErrTooLarge, "too_large"},
	{ErrUnavailable, "unavailable"},
	{ErrDeadlineExceeded, "deadline_exceeded"},
	{ErrInternal, "internal"},
	{ErrPortClosed, "port_not_open"},
	{ErrBadGateway, "bad_gateway"},
}

// Codes reports every code of the taxonomy, in the order Code tries them.
func Codes() []string {
	out := make([]string, len(table))
	for i, e := range table {
		out[i] = e.code
	}
	return out
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
