package apiutil

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/api/wire"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// TestErrorDetail: a client error shows its own message, a wrapped sentinel's text is not repeated,
// a server fault is "internal error", and the passing faults (unavailable) keep their message.
func TestErrorDetail(t *testing.T) {
	r := httptest.NewRequest("GET", "/v1/sandboxes", nil)
	log := slog.New(slog.DiscardHandler)
	for _, tt := range []struct {
		name string
		err  error
		want wire.ErrorDetail
	}{
		{"client error", ClientErr(errdefs.ErrNotFound, "sandbox %s not found", "sb_x"), wire.ErrorDetail{Code: "not_found", Message: "sandbox sb_x not found"}},
		{"wrapped client error", fmt.Errorf("get: %w", ClientErr(errdefs.ErrInvalidArgument, "bad id")), wire.ErrorDetail{Code: "invalid_argument", Message: "bad id"}},
		{"wrapped sentinel", fmt.Errorf("session se_x is pausing: %w", errdefs.ErrConflict), wire.ErrorDetail{Code: "conflict", Message: "session se_x is pausing"}},
		{"unavailable", fmt.Errorf("node n1: %w", errdefs.ErrUnavailable), wire.ErrorDetail{Code: "unavailable", Message: "node n1"}},
		{"server fault", errors.New("disk on fire"), wire.ErrorDetail{Code: "internal", Message: "internal error"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if d := cmp.Diff(tt.want, ErrorDetail(log, r, tt.err)); d != "" {
				t.Errorf("ErrorDetail(%v) (-want +got):\n%s", tt.err, d)
			}
		})
	}
}

// TestAccessMessage: a client error's message is told as it is; another error without its sentinel's text.
func TestAccessMessage(t *testing.T) {
	for err, want := range map[error]string{
		ClientErr(errdefs.ErrUnauthenticated, "access token at_a… was revoked"): "access ended: access token at_a… was revoked",
		fmt.Errorf("tenant tn_x is disabled: %w", errdefs.ErrPermissionDenied):  "access ended: tenant tn_x is disabled",
	} {
		if got := AccessMessage(err); got != want {
			t.Errorf("AccessMessage(%v) = %q; want %q", err, got, want)
		}
	}
}

func TestParseMetricsWindow(t *testing.T) {
	day := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		query      string
		start, end time.Time
	}{
		{"", time.Time{}, time.Time{}},
		{"start=1767366245", day, time.Time{}},
		// An end in seconds covers its whole second.
		{"end=1767366245", time.Time{}, day.Add(time.Second - 1)},
		{"start=1767366245&end=1767366245", day, day.Add(time.Second - 1)},
		{"start=2026-01-02T15:04:05Z&end=2026-01-02T16:04:05.5%2B01:00", day, day.Add(500 * time.Millisecond)},
		{"start=0", time.Unix(0, 0).UTC(), time.Time{}},
	} {
		q, _ := url.ParseQuery(c.query)
		start, end, err := ParseMetricsWindow(q, true)
		if err != nil || !start.Equal(c.start) || !end.Equal(c.end) {
			t.Errorf("%q: %v, %v, %v; want %v, %v", c.query, start, end, err, c.start, c.end)
		}
	}
	for _, bad := range []string{"start=yesterday", "start=", "end=-5", "start=1.5", "start=99999999999999999999",
		"start=253402300800", "start=1&start=2", "start=1767366246&end=1767366245", "start=2026-01-02T15:04:06Z&end=2026-01-02T15:04:05Z",
		"since=1"} {
		q, _ := url.ParseQuery(bad)
		if _, _, err := ParseMetricsWindow(q, true); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%q: %v; want invalid argument", bad, err)
		}
	}
	// E2B's routes let other parameters pass.
	q, _ := url.ParseQuery("start=1767366245&other=1")
	if start, _, err := ParseMetricsWindow(q, false); err != nil || !start.Equal(day) {
		t.Errorf("not strict: %v, %v", start, err)
	}
}
