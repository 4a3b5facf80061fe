package api

import (
	"net/http/httptest"
	"testing"
)

// TestMetricsRoutes: the literal GET /e2b/sandboxes/metrics is not taken for a sandbox named
// "metrics", and the /v1 routes are the metrics handlers'.
func TestMetricsRoutes(t *testing.T) {
	s := New(nil, nil, nil)
	for path, want := range map[string]string{
		"/e2b/sandboxes/metrics?sandbox_ids=se_a,se_b":               "GET /e2b/sandboxes/metrics",
		"/e2b/sandboxes/se_abc/metrics?start=1":                      "GET /e2b/sandboxes/{id}/metrics",
		"/e2b/sandboxes/se_abc":                                      "GET /e2b/sandboxes/{id}",
		"/v1/sandboxes/sb_aaaaaaaaaaaaaaaaaaaaaaaaaa/metrics":        "GET /v1/sandboxes/{id}/metrics",
		"/v1/sessions/se_aaaaaaaaaaaaaaaaaaaaaaaaaa/metrics?start=0": "GET /v1/sessions/{id}/metrics",
	} {
		_, got := s.mux.Handler(httptest.NewRequest("GET", path, nil))
		if got != want {
			t.Errorf("GET %s goes to %q; want %q", path, got, want)
		}
	}
}
