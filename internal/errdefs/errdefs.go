// Package errdefs holds the sentinel errors shared by every layer of Airlock: the taxonomy, and the
// codes that name it on every wire (the public API, the node API, the daemon's protocol).
//
// Code anywhere wraps one of these with context (fmt.Errorf("get sandbox %s: %w", id, ErrNotFound));
// each edge converts them exactly once: to a code (Code, FromCode), and, over HTTP, to a status
// (internal/httperr), as containerd's errdefs leaves its HTTP and gRPC mappings to packages of their
// own.
package errdefs

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
