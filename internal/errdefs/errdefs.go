// Package errdefs holds the sentinel errors shared by every layer of Airlock: the taxonomy, and the
// codes that name it on every wire (the public API, the node API, the daemon's protocol).
//
// Code anywhere wraps one of these with context (fmt.Errorf("get sandbox %s: %w", id, ErrNotFound));
// each edge converts them exactly once: to a code (Code, FromCode), and, over HTTP, to a status
// (internal/httperr), as containerd's errdefs leaves its HTTP and gRPC mappings to packages of their
// own.
//
// The sentinels and codes are the public API's (api/errcode), the same values: an error the Go SDK
// reports matches errdefs.ErrNotFound as it matches airlock.ErrNotFound.
package errdefs

import "github.com/airlockrun/airlock/api/errcode"

// Sentinel errors, api/errcode's. Match them with errors.Is.
var (
	ErrNotFound           = errcode.ErrNotFound
	ErrInvalidArgument    = errcode.ErrInvalidArgument
	ErrAlreadyExists      = errcode.ErrAlreadyExists
	ErrConflict           = errcode.ErrConflict           // the object is in a state that forbids the call
	ErrFailedPrecondition = errcode.ErrFailedPrecondition // e.g. the sandbox is not running
	ErrUnauthenticated    = errcode.ErrUnauthenticated
	ErrPermissionDenied   = errcode.ErrPermissionDenied
	ErrResourceExhausted  = errcode.ErrResourceExhausted // a limit or quota was hit
	ErrTooLarge           = errcode.ErrTooLarge
	ErrUnavailable        = errcode.ErrUnavailable // try again later
	ErrDeadlineExceeded   = errcode.ErrDeadlineExceeded
	ErrInternal           = errcode.ErrInternal
	// ErrKeyUnavailable: the tenant's key-encryption key is revoked, destroyed or cannot be reached,
	// so nothing of the tenant can be encrypted or decrypted. Errors wrapping it also wrap
	// ErrPermissionDenied (revoked, destroyed) or ErrUnavailable (unreachable).
	ErrKeyUnavailable = errcode.ErrKeyUnavailable
	// ErrPortClosed: nothing in the sandbox listens on the port a request was forwarded to.
	ErrPortClosed = errcode.ErrPortClosed
	// ErrBadGateway: the server in the sandbox broke the connection or answered with something that is
	// not HTTP.
	ErrBadGateway = errcode.ErrBadGateway
)

// Code reports the API error code for err ("internal" when err matches no sentinel).
func Code(err error) string { return errcode.Code(err) }

// FromCode returns the sentinel for an API error code, or ErrInternal for an unknown code.
// Clients (the daemon link, the node API's client) use it to turn a wire error back into something
// errors.Is matches.
func FromCode(code string) error { return errcode.FromCode(code) }
