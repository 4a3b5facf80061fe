package e2b

import (
	"math"
	"net/http"
	"strings"

	"github.com/airlockrun/airlock/internal/api/apiutil"
	"github.com/airlockrun/airlock/internal/controlplane"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/nodecontract"
)

// Resource metrics of E2B's sandboxes (sessions), as E2B's API reads them (see controlplane/metrics.go).

// e2bMetric is E2B's SandboxMetric.
type e2bMetric struct {
	Timestamp     string  `json:"timestamp"`
	TimestampUnix int64   `json:"timestampUnix"`
	CPUCount      int     `json:"cpuCount"`
	CPUUsedPct    float64 `json:"cpuUsedPct"`
	MemUsed       int64   `json:"memUsed"`
	MemTotal      int64   `json:"memTotal"`
	MemCache      int64   `json:"memCache"`
	DiskUsed      int64   `json:"diskUsed"`
	DiskTotal     int64   `json:"diskTotal"`
}

// e2bTimeFormat is RFC 3339 in milliseconds, which every SDK's date parser reads.
const e2bTimeFormat = "2006-01-02T15:04:05.000Z07:00"

func toE2BMetric(s nodecontract.Sample) e2bMetric {
	pct := s.CPUUsedPct
	if math.IsNaN(pct) || math.IsInf(pct, 0) {
		pct = 0
	}
	return e2bMetric{Timestamp: s.Time.UTC().Format(e2bTimeFormat), TimestampUnix: s.Time.Unix(), CPUCount: s.CPUCount,
		CPUUsedPct: pct, MemUsed: s.MemUsed, MemTotal: s.MemTotal, MemCache: s.MemCache, DiskUsed: s.DiskUsed, DiskTotal: s.DiskTotal}
}

// e2bSandboxMetrics is GET /sandboxes/{id}/metrics: the sandbox's readings in [start, end] (unix
// seconds), oldest first; none while it is paused.
func (s *controlPlane) e2bSandboxMetrics(w http.ResponseWriter, r *http.Request) {
	se, err := s.e2bSession(r)
	if err != nil {
		e2bError(w, r, s.log, err)
		return
	}
	start, end, err := apiutil.ParseMetricsWindow(r.URL.Query(), false)
	if err != nil {
		e2bError(w, r, s.log, err)
		return
	}
	_, ss, err := s.cp.SessionMetrics(r.Context(), apiutil.TenantOf(r), se.ID, start, end)
	if err != nil {
		e2bError(w, r, s.log, err)
		return
	}
	out := make([]e2bMetric, 0, len(ss))
	for _, m := range ss {
		out = append(out, toE2BMetric(m))
	}
	apiutil.WriteJSON(w, http.StatusOK, out)
}

// e2bSandboxesMetrics is GET /sandboxes/metrics?sandbox_ids=a,b: a reading taken now of each of the
// sandboxes named that runs, by ID (the paused, unknown and other tenants' are left out).
func (s *controlPlane) e2bSandboxesMetrics(w http.ResponseWriter, r *http.Request) {
	vs := r.URL.Query()["sandbox_ids"]
	var ids []string
	for _, v := range vs {
		for _, id := range strings.Split(v, ",") {
			if id = strings.TrimSpace(id); id != "" {
				ids = append(ids, id)
			}
			if len(ids) > controlplane.MaxMetricsIDs {
				e2bError(w, r, s.log, apiutil.ClientErr(errdefs.ErrInvalidArgument, "sandbox_ids: at most %d sandbox IDs", controlplane.MaxMetricsIDs))
				return
			}
		}
	}
	if len(ids) == 0 {
		e2bError(w, r, s.log, apiutil.ClientErr(errdefs.ErrInvalidArgument, "sandbox_ids is required: sandbox IDs separated by commas"))
		return
	}
	// IDs that cannot be a session's are nobody's: left out like unknown ones.
	valid := ids[:0]
	for _, id := range ids {
		if apiutil.SessionIDPattern.MatchString(id) {
			valid = append(valid, id)
		}
	}
	latest, err := s.cp.LatestSessionMetrics(r.Context(), apiutil.TenantOf(r), valid)
	if err != nil {
		e2bError(w, r, s.log, err)
		return
	}
	out := struct {
		Sandboxes map[string]e2bMetric `json:"sandboxes"`
	}{Sandboxes: make(map[string]e2bMetric, len(latest))}
	for id, m := range latest {
		out.Sandboxes[id] = toE2BMetric(m)
	}
	apiutil.WriteJSON(w, http.StatusOK, out)
}
