package e2b

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/nodecontract"
)

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
