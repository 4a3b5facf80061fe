package httperr

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// TestStatus: every code of the taxonomy has a status, wrapped errors keep theirs, a key that is
// unavailable answers 403 even when it also wraps unavailable, and anything else is a 500.
func TestStatus(t *testing.T) {
	for _, code := range []string{"not_found", "invalid_argument", "already_exists", "conflict", "failed_precondition",
		"unauthenticated", "permission_denied", "resource_exhausted", "too_large", "unavailable", "deadline_exceeded",
		"internal", "port_not_open", "bad_gateway", "tenant_key_unavailable"} {
		err := errdefs.FromCode(code)
		if errdefs.Code(err) != code {
			t.Errorf("code %s does not round-trip: %s", code, errdefs.Code(err))
		}
		if st := Status(fmt.Errorf("wrapped: %w", err)); st < 400 || st > 599 {
			t.Errorf("code %s answers %d", code, st)
		}
	}
	if st := Status(fmt.Errorf("key: %w (%w)", errdefs.ErrKeyUnavailable, errdefs.ErrUnavailable)); st != http.StatusForbidden {
		t.Errorf("an unavailable key answers %d; want 403", st)
	}
	if st := Status(errors.New("plain")); st != http.StatusInternalServerError {
		t.Errorf("a plain error answers %d; want 500", st)
	}
}
