// Package httperr is the HTTP edge of the error taxonomy (internal/errdefs): the status each sentinel
// answers with, for the public API and the node API. The taxonomy and its codes stay in errdefs
// (api/errcode); only the edges that speak HTTP know statuses, and each code's is the public wire
// schema's (api/wire), which the Go SDK reads too.
package httperr

import (
	"github.com/airlockrun/airlock/api/wire"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// Status reports the HTTP status for err: that of its code (errdefs.Code, which tries
// ErrKeyUnavailable before the errors it is wrapped with), and 500 when err matches no sentinel.
func Status(err error) int {
	return wire.Status(errdefs.Code(err))
}
