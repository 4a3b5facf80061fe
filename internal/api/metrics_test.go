package api

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/nodecontract"
)

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
		start, end, err := parseMetricsWindow(q, true)
		if err != nil || !start.Equal(c.start) || !end.Equal(c.end) {
			t.Errorf("%q: %v, %v, %v; want %v, %v", c.query, start, end, err, c.start, c.end)
		}
	}
	for _, bad := range []string{"start=yesterday", "start=", "end=-5", "start=1.5", "start=99999999999999999999",
		"start=253402300800", "start=1&start=2", "start=1767366246&end=1767366245", "start=2026-01-02T15:04:06Z&end=2026-01-02T15:04:05Z",
		"since=1"} {
		q, _ := url.ParseQuery(bad)
		if _, _, err := parseMetricsWindow(q, true); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%q: %v; want invalid argument", bad, err)
		}
	}
	// E2B's routes let other parameters pass.
	q, _ := url.ParseQuery("start=1767366245&other=1")
	if start, _, err := parseMetricsWindow(q, false); err != nil || !start.Equal(day) {
		t.Errorf("not strict: %v, %v", start, err)
	}
}

// TestE2BMetricShape: every field of E2B's SandboxMetric, under its name, the time in milliseconds.
func TestE2BMetricShape(t *testing.T) {
	m := toE2BMetric(nodecontract.Sample{Time: time.Date(2026, 1, 2, 15, 4, 5, 123456789, time.FixedZone("x", 3600)), CPUCount: 2, CPUUsedPct: 37.5,
		MemUsed: 1, MemCache: 2, MemTotal: 3, DiskUsed: 4, DiskTotal: 5})
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"timestamp": "2026-01-02T14:04:05.123Z", "timestampUnix": float64(1767362645), "cpuCount": float64(2),
		"cpuUsedPct": 37.5, "memUsed": float64(1), "memCache": float64(2), "memTotal": float64(3), "diskUsed": float64(4), "diskTotal": float64(5)}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("E2B's metric (-want +got):\n%s", d)
	}
}

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
