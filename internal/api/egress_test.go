package api

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/gateway/flowlog"
)

func TestParseEgressQuery(t *testing.T) {
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		query string
		want  flowlog.Filter
		bad   string // a part of the error message; "" when the query is valid
	}{
		{query: "", want: flowlog.Filter{}},
		{query: "decision=deny&host=api.example.com&host_contains=exa&limit=7&since=2026-01-02T03:04:05Z&until=2026-01-02T05:04:05.5%2B01:00",
			want: flowlog.Filter{Decision: "deny", Host: "api.example.com", HostContains: "exa", Limit: 7, Since: since,
				Until: time.Date(2026, 1, 2, 4, 4, 5, 500e6, time.UTC)}},
		{query: "decision=allow", want: flowlog.Filter{Decision: "allow"}},
		{query: "limit=1000", want: flowlog.Filter{Limit: 1000}},
		{query: "decision=maybe", bad: "decision"},
		{query: "decision=", bad: "decision"},
		{query: "decision=allow&decision=deny", bad: "once"},
		{query: "host=", bad: "host"},
		{query: "host=" + strings.Repeat("a", 256), bad: "host"},
		{query: "host_contains=", bad: "host_contains"},
		{query: "since=yesterday", bad: "RFC 3339"},
		{query: "until=2026-01-02", bad: "RFC 3339"},
		{query: "since=2026-01-02T03:04:05Z&until=2026-01-02T03:04:05Z", bad: "before"},
		{query: "limit=0", bad: "limit"},
		{query: "limit=1001", bad: "limit"},
		{query: "limit=ten", bad: "limit"},
		{query: "cursor=x", bad: "unknown query parameter"},
		{query: "Decision=deny", bad: "unknown query parameter"},
	} {
		q, err := url.ParseQuery(tc.query)
		if err != nil {
			t.Fatal(err)
		}
		got, err := parseEgressQuery(q)
		if tc.bad != "" {
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.bad) {
				t.Errorf("parseEgressQuery(%q) = %v; want an invalid argument naming %q", tc.query, err, tc.bad)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseEgressQuery(%q) = %v", tc.query, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
			t.Errorf("parseEgressQuery(%q) (-want +got):\n%s", tc.query, diff)
		}
	}
}

// TestMetricsRoute: /metrics serves the handler it was given, without an API key, and is a 404 without one.
func TestMetricsRoute(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "airlock_x 1\n") })
	rec := httptest.NewRecorder()
	New(nil, nil, h).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusOK || rec.Body.String() != "airlock_x 1\n" {
		t.Errorf("GET /metrics = %d %q; want 200 with the metrics", rec.Code, rec.Body.String())
	}
	rec = httptest.NewRecorder()
	New(nil, nil, nil).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("GET /metrics without a handler = %d; want 404", rec.Code)
	}
}
