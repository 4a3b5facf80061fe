// Package httperr is the HTTP edge of the error taxonomy (internal/errdefs): the status each sentinel
// answers with, for the public API, the node API and the Go SDK. The taxonomy and its codes stay in
// errdefs; only the edges that speak HTTP know statuses.
package httperr

import (
	"errors"
	"net/http"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// statuses maps each sentinel to its status; the first that err matches wins, so ErrKeyUnavailable
// comes before the errors it is wrapped with.
var statuses = []struct {
	err    error
	status int
}{
	{errdefs.ErrKeyUnavailable, http.StatusForbidden},
	{errdefs.ErrNotFound, http.StatusNotFound},
	{errdefs.ErrInvalidArgument, http.StatusBadRequest},
	{errdefs.ErrAlreadyExists, http.StatusConflict},
	{errdefs.ErrConflict, http.StatusConflict},
	{errdefs.ErrFailedPrecondition, http.StatusConflict},
	{errdefs.ErrUnauthenticated, http.StatusUnauthorized},
	{errdefs.ErrPermissionDenied, http.StatusForbidden},
	{errdefs.ErrResourceExhausted, http.StatusTooManyRequests},
	{errdefs.ErrTooLarge, http.StatusRequestEntityTooLarge},
	{errdefs.ErrUnavailable, http.StatusServiceUnavailable},
	{errdefs.ErrDeadlineExceeded, http.StatusGatewayTimeout},
	{errdefs.ErrInternal, http.StatusInternalServerError},
	{errdefs.ErrPortClosed, http.StatusBadGateway},
	{errdefs.ErrBadGateway, http.StatusBadGateway},
}

// Status reports the HTTP status for err (500 when err matches no sentinel).
func Status(err error) int {
	for _, e := range statuses {
		if errors.Is(err, e.err) {
			return e.status
		}
	}
	return http.StatusInternalServerError
}
