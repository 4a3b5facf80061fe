package wire

import "net/http"

// statuses is the HTTP status each error code answers with (api/errcode names the codes).
var statuses = map[string]int{
	"tenant_key_unavailable": http.StatusForbidden,
	"not_found":              http.StatusNotFound,
	"invalid_argument":       http.StatusBadRequest,
	"already_exists":         http.StatusConflict,
	"conflict":               http.StatusConflict,
	"failed_precondition":    http.StatusConflict,
	"unauthenticated":        http.StatusUnauthorized,
	"permission_denied":      http.StatusForbidden,
	"resource_exhausted":     http.StatusTooManyRequests,
	"too_large":              http.StatusRequestEntityTooLarge,
	"unavailable":            http.StatusServiceUnavailable,
	"deadline_exceeded":      http.StatusGatewayTimeout,
	"internal":               http.StatusInternalServerError,
	"port_not_open":          http.StatusBadGateway,
	"bad_gateway":            http.StatusBadGateway,
}

// Status reports the HTTP status an error of code answers with: 500 for "internal" and for a code
// it does not know.
func Status(code string) int {
	if st, ok := statuses[code]; ok {
		return st
	}
	return http.StatusInternalServerError
}
