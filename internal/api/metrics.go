package api

import (
	"net/http"

	"github.com/airlockrun/airlock/api/wire"
	"github.com/airlockrun/airlock/internal/api/apiutil"
	"github.com/airlockrun/airlock/internal/nodecontract"
)

// Resource metrics of sandboxes and sessions on /v1 (see controlplane/metrics.go; E2B's are in e2b/metrics.go).

// toAPIMetrics converts a node's readings to the API's.
func toAPIMetrics(ss []nodecontract.Sample) []wire.Metric {
	out := make([]wire.Metric, 0, len(ss))
	for _, s := range ss {
		out = append(out, wire.Metric{Time: s.Time.UTC(), CPUCount: s.CPUCount, CPUUsedPct: s.CPUUsedPct,
			MemoryUsedBytes: s.MemUsed, MemoryCacheBytes: s.MemCache, MemoryTotalBytes: s.MemTotal,
			DiskUsedBytes: s.DiskUsed, DiskTotalBytes: s.DiskTotal})
	}
	return out
}

func (s *Server) sandboxMetrics(w http.ResponseWriter, r *http.Request) {
	id, err := sandboxID(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	start, end, err := apiutil.ParseMetricsWindow(r.URL.Query(), true)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	ss, err := s.cp.SandboxMetrics(r.Context(), tenantOf(r), id, start, end)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.MetricList{SandboxID: id, Metrics: toAPIMetrics(ss)})
}

func (s *Server) sessionMetrics(w http.ResponseWriter, r *http.Request) {
	id, err := sessionID(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	start, end, err := apiutil.ParseMetricsWindow(r.URL.Query(), true)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	sb, ss, err := s.cp.SessionMetrics(r.Context(), tenantOf(r), id, start, end)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.MetricList{SandboxID: sb, Metrics: toAPIMetrics(ss)})
}
