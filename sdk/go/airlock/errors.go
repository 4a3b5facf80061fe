package airlock

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/airlockrun/airlock/api/errcode"
	"github.com/airlockrun/airlock/api/wire"
)

// Sentinel errors: errors.Is(err, ErrNotFound) reports whether the API answered with that code. They
// are api/errcode's, the server's own.
var (
	ErrNotFound           = errcode.ErrNotFound           // not_found, 404
	ErrInvalidArgument    = errcode.ErrInvalidArgument    // invalid_argument, 400
	ErrAlreadyExists      = errcode.ErrAlreadyExists      // already_exists, 409
	ErrConflict           = errcode.ErrConflict           // conflict, 409
	ErrFailedPrecondition = errcode.ErrFailedPrecondition // failed_precondition, 409 (e.g. the sandbox is not running)
	ErrUnauthenticated    = errcode.ErrUnauthenticated    // unauthenticated, 401
	ErrPermissionDenied   = errcode.ErrPermissionDenied   // permission_denied, 403
	ErrResourceExhausted  = errcode.ErrResourceExhausted  // resource_exhausted, 429
	ErrTooLarge           = errcode.ErrTooLarge           // too_large, 413
	ErrUnavailable        = errcode.ErrUnavailable        // unavailable, 503
	ErrKeyUnavailable     = errcode.ErrKeyUnavailable     // tenant_key_unavailable, 403: the tenant's key is revoked or unreachable
	ErrDeadlineExceeded   = errcode.ErrDeadlineExceeded   // deadline_exceeded, 504
	ErrInternal           = errcode.ErrInternal           // internal, 500, and any code this SDK does not know
)

// ErrStreamClosed is reported by a Stream that was closed by its owner before the process exited.
var ErrStreamClosed = errors.New("stream closed")

// APIError is an error the API reported.
type APIError struct {
	// Status is the HTTP status of the response (for errors on a WebSocket, the status that goes with Code).
	Status int
	// Code is the API's error code, such as "not_found".
	Code string
	// Message describes the error for people.
	Message string
}

// Error returns the message and the code.
func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	if msg == "" {
		msg = "error"
	}
	return fmt.Sprintf("%s (%s)", msg, e.Code)
}

// Is reports whether target is the sentinel of e's code, so that errors.Is(err, ErrNotFound) matches a
// not_found error. An unknown code matches ErrInternal.
func (e *APIError) Is(target error) bool {
	return target == errcode.FromCode(e.Code)
}

// statusCodes maps an HTTP status to an error code for responses that carry no error body (a proxy's 502,
// say). The first code of a status wins.
var statusCodes = map[int]string{
	http.StatusBadRequest:            "invalid_argument",
	http.StatusUnauthorized:          "unauthenticated",
	http.StatusForbidden:             "permission_denied",
	http.StatusNotFound:              "not_found",
	http.StatusConflict:              "conflict",
	http.StatusRequestEntityTooLarge: "too_large",
	http.StatusTooManyRequests:       "resource_exhausted",
	http.StatusBadGateway:            "unavailable",
	http.StatusServiceUnavailable:    "unavailable",
	http.StatusGatewayTimeout:        "deadline_exceeded",
}

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 64 << 10

// errorFromResponse returns the *APIError that a non-2xx response describes. It reads at most
// maxErrorBody bytes of the body and does not close it.
func errorFromResponse(resp *http.Response) *APIError {
	e := &APIError{Status: resp.StatusCode}
	var body []byte
	if resp.Body != nil {
		body, _ = io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	}
	var eb ErrorBody
	if json.Unmarshal(body, &eb) == nil && eb.Error.Code != "" {
		e.Code, e.Message = eb.Error.Code, eb.Error.Message
		return e
	}
	e.Code = statusCodes[resp.StatusCode]
	if e.Code == "" {
		e.Code = "internal"
	}
	e.Message = fmt.Sprintf("HTTP %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	if s := printable(body, 200); s != "" {
		e.Message += ": " + s
	}
	return e
}

// errorFromDetail returns the *APIError of an error message on a stream.
func errorFromDetail(d ErrorDetail) *APIError {
	return &APIError{Status: wire.Status(d.Code), Code: d.Code, Message: d.Message}
}

// printable returns up to n bytes of b as a single line, or "" when b is empty or not text.
func printable(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
	}
	out := make([]rune, 0, len(b))
	for _, r := range string(b) {
		switch {
		case r == '\n' || r == '\r' || r == '\t':
			out = append(out, ' ')
		case r < 0x20 || r == 0x7f || r == 0xfffd:
			return ""
		default:
			out = append(out, r)
		}
	}
	return strings.TrimSpace(string(out))
}
