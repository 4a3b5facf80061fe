// Package apiutil holds what the public API's handler packages share: internal/api (/v1) and
// internal/api/e2b (E2B compatibility). Errors with a message for the client and the detail a client
// reads of an error, JSON answers, the principal a request was authenticated as, why a request's
// access ended, and the request checks both APIs make (IDs, paths, commands, metrics windows, the
// download of a file). It knows no routes and calls nothing: both handler packages import it, and it
// imports neither.
package apiutil

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/airlockrun/airlock/api/wire"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/httperr"
)

// Error is an error with a message meant for the client. The wrapped error picks the status; the
// message is what the client reads. Anything else is logged and reported as a bare "internal error".
type Error struct {
	msg string
	err error
}

func (e *Error) Error() string { return e.msg }
func (e *Error) Unwrap() error { return e.err }

// ClientErr returns an error whose message the client sees, matching sentinel.
func ClientErr(sentinel error, format string, args ...any) error {
	return &Error{msg: fmt.Sprintf(format, args...), err: sentinel}
}

// ClientMessage is err's message as a client reads it: the message of the *Error it wraps, if any,
// else its text; either way without the sentinel's own text that wrapping appended (see TrimSentinel).
// It does not tell a server fault from a client error: ErrorDetail does.
func ClientMessage(err error) string {
	msg := err.Error()
	var ae *Error
	if errors.As(err, &ae) {
		msg = ae.msg
	}
	return TrimSentinel(msg, err)
}

// ErrorDetail is err as the API shows it: its code and message, "internal error" (logged) for a server
// fault.
func ErrorDetail(log *slog.Logger, r *http.Request, err error) wire.ErrorDetail {
	status := httperr.Status(err)
	code := errdefs.Code(err)
	msg := ClientMessage(err)
	if status >= 500 && !errors.Is(err, errdefs.ErrUnavailable) && !errors.Is(err, errdefs.ErrDeadlineExceeded) &&
		!errors.Is(err, errdefs.ErrPortClosed) && !errors.Is(err, errdefs.ErrBadGateway) {
		log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		msg = "internal error"
	}
	return wire.ErrorDetail{Code: code, Message: msg}
}

// TrimSentinel removes a trailing ": <sentinel text>" from msg: the code repeats it.
func TrimSentinel(msg string, err error) string {
	for _, s := range []error{errdefs.ErrNotFound, errdefs.ErrInvalidArgument, errdefs.ErrAlreadyExists,
		errdefs.ErrConflict, errdefs.ErrFailedPrecondition, errdefs.ErrUnauthenticated, errdefs.ErrPermissionDenied,
		errdefs.ErrResourceExhausted, errdefs.ErrTooLarge, errdefs.ErrUnavailable, errdefs.ErrDeadlineExceeded, errdefs.ErrKeyUnavailable, errdefs.ErrPortClosed, errdefs.ErrBadGateway} {
		if errors.Is(err, s) {
			if t, ok := strings.CutSuffix(msg, ": "+s.Error()); ok {
				return t
			}
		}
	}
	return msg
}

// WriteJSON answers with status and v as JSON (HTML characters left as they are).
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// Truncate cuts s to n bytes, marking the cut with an ellipsis: for echoing input in a message.
func Truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
